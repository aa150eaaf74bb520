"""A deletion that waits for a drain is not an error (issue 23, M11).

Before: every retry of the waiting finalizer was a `kopf.TemporaryError`, which kopf logs at ERROR
and posts as an `Error` event — one every 5 s (~120 for the default 600 s wait). Now the waits post
no `Error` event at all; a `Normal` event is posted once per state of the deletion (the
`Terminating` condition's reason), not once per retry.

The set-up needs no Spark: the CR is paused (its control loop never touches the drain), its
status.drain is written directly as a Running drain holding an unfinished sub-range, and the drain
Job it names exists but is suspended (Active, no pod). The finalizer then waits for it (bound 30 s),
stops the Job and hands the remainder back — the real finalizer on the real API server and Kafka.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot.decide.handoff import DrainStatus, PartitionRange, Phase, SubProgress, job_name
from lagpilot_dev.operator_process import OperatorProcess, operator_env
from tests.fixtures.kube import wait_until
from tests.real.test_operator_e2e import (
    REPO,
    SA_NAME,
    apply_cr,
    condition,
    cr,
    crd,  # noqa: F401  (fixture)
    events_for,
    get_cr,
    rbac_rules,
)

pytestmark = [pytest.mark.real, pytest.mark.slow]

PLURAL = ("lagpilot.io", "v1alpha1")


def test_a_deletion_waiting_for_a_drain_posts_no_error_events(
    crd: Any,
    kube_api: Any,
    namespace: Callable[..., str],
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
) -> None:
    from kubernetes import client

    rbac, core, custom, batch = (
        client.RbacAuthorizationV1Api(kube_api),
        client.CoreV1Api(kube_api),
        client.CustomObjectsApi(kube_api),
        client.BatchV1Api(kube_api),
    )
    ns = namespace("fin-ev")
    rbac.create_namespaced_role(ns, {"metadata": {"name": SA_NAME}, "rules": rbac_rules()})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": SA_NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": ns}],
        },
    )
    log_dir = Path(tempfile.mkdtemp(prefix="lagpilot-fin-ev-"))
    op = OperatorProcess(
        ns,
        log_dir / "operator.log",
        operator_env(
            crd.kubeconfig_for_service_account(ns, SA_NAME),
            REPO,
            {"LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": "30"},
        ),
    )
    name = "orders"
    try:
        topic = new_topic(partitions=1, prefix="fin-ev")
        apply_cr(
            crd,
            ns,
            cr(
                name,
                {
                    "kafka": {"bootstrapServers": kafka_bootstrap},
                    "topic": topic,
                    "groupId": f"fin-ev-{uuid.uuid4().hex[:6]}",
                    "processing": {"sink": "log"},
                    "paused": True,
                    "catchUpSLASeconds": 60,
                    "scaling": {"minReplicas": 1, "maxReplicas": 1, "pollIntervalSeconds": 2},
                },
            ),
        )
        # the operator has taken the CR (its finalizer is on) before the drain is recorded
        wait_until(
            lambda: get_cr(custom, ns, name)["metadata"].get("finalizers"), "kopf's finalizer on the CR", 120
        )
        d = DrainStatus(
            id=1,
            phase=Phase.RUNNING,
            reason="Launched",
            message="drain 1 attempt 1",
            ranges=(PartitionRange(0, split=1000, start=0),),
            sub_ranges=(SubProgress(0, 0, 0, 1000, 0),),
            attempt=1,
            restore_replicas=1,
            hand_off_path="ConsumerAck",
            planned_at=1.0,
            handed_off_at=2.0,
            started_at=3.0,
        )
        custom.patch_namespaced_custom_object_status(
            *PLURAL, ns, "batchconsumergroups", name, {"status": {"drain": d.to_dict()}}
        )
        job = job_name(name, 1, 1)
        batch.create_namespaced_job(
            ns,
            {
                "metadata": {"name": job, "labels": {"lagpilot.io/drain-job": job}},
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "drain", "image": "busybox", "command": ["true"]}],
                        }
                    },
                },
            },
        )

        custom.delete_namespaced_custom_object(*PLURAL, ns, "batchconsumergroups", name)
        reasons_seen: list[str] = []

        def released() -> bool:
            try:
                obj = get_cr(custom, ns, name)
            except client.ApiException as err:
                if err.status == 404:
                    return True
                raise
            c = condition(obj, "Terminating")
            if c and (not reasons_seen or reasons_seen[-1] != c["reason"]):
                reasons_seen.append(c["reason"])
            return False

        wait_until(released, "the finalizer to release the CR", 300, interval=1)
        print("Terminating reasons:", reasons_seen)
        # the fault fired: the deletion really waited for the drain, then stopped it and handed back
        assert "WaitingForDrain" in reasons_seen, reasons_seen
        events = events_for(core, ns, name)
        for e in sorted(events, key=lambda e: e.first_timestamp or e.event_time):
            print(f"event {e.type} {e.reason} x{e.count}: {(e.message or '')[:160]}")
        reasons = [e.reason for e in events]
        assert "DrainRemainderHandedBack" in reasons, reasons
        errors = [e for e in events if e.type == "Error"]
        assert not errors, f"{len(errors)} Error events for a deletion that only waited: {errors[0].message}"
        # one Normal event for the wait (a state), not one per retry
        assert reasons.count("DeletionWaitingForDrain") == 1, reasons
    finally:
        print(f"--- operator log ---\n{op.tail(60)}")
        op.stop()
