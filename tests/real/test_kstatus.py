"""kstatus' verdict on real BatchConsumerGroups (issue 28 item 4): a Ready, a Degraded and a
reconciling CR reconciled by the operator on the real API server, read with kubectl, judged by
kstatus itself (sigs.k8s.io/cli-utils v0.37.2 pkg/kstatus/status.Compute, through dev/kstatus-check)
and by the Argo CD health check (examples/gitops/argocd-health.lua, run by gopher-lua, Argo CD's Lua
VM). The Python copy of kstatus' rules (lagpilot.decide.kstatus.verdict) must agree with the library.

The reconciling CR's consumer pod runs where the `pods` fixture says (tests/fixtures/node.py): a
container of the test image on the real node."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot.decide.kstatus import verdict
from lagpilot.model.status import ABNORMAL_TRUE
from lagpilot_dev import kstatus as ks
from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.real.test_crd import crd  # noqa: F401 - fixture
from tests.real.test_operator_e2e import Operator, apply_cr, condition, cr, free_port, get_cr, start_operator  # noqa: F401

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
LUA = REPO / "examples" / "gitops" / "argocd-health.lua"


def test_kstatus_and_argocd_verdicts_on_ready_degraded_and_reconciling_crs(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
) -> None:
    from kubernetes import client

    binary = ks.ensure_kstatus_check()
    custom = client.CustomObjectsApi(kube_api)
    ns = pods.namespace("kstatus")
    kafka_bootstrap = pods.kafka_bootstrap
    op = start_operator(ns)
    topic = new_topic(partitions=2)
    suffix = uuid.uuid4().hex[:6]
    base = {
        "topic": topic,
        "processing": {"sink": "log"},
        "drain": {"enabled": False},
        "catchUpSLASeconds": 60,
    }
    # Ready: no lag, no replicas wanted (minReplicas 0): Ready True / NoReplicas or ScaledToZero
    apply_cr(
        crd,
        ns,
        cr(
            "ready",
            {
                **base,
                "groupId": f"ready-{suffix}",
                "kafka": {"bootstrapServers": kafka_bootstrap},
                "scaling": {"minReplicas": 0, "maxReplicas": 2, "pollIntervalSeconds": 2},
            },
        ),
    )
    # Degraded: nothing listens on the bootstrap port
    apply_cr(
        crd,
        ns,
        cr(
            "degraded",
            {
                **base,
                "groupId": f"deg-{suffix}",
                "kafka": {"bootstrapServers": f"127.0.0.1:{free_port()}"},
                "scaling": {"minReplicas": 0, "maxReplicas": 2, "pollIntervalSeconds": 2},
            },
        ),
    )
    # reconciling: one consumer wanted whose handler cannot be imported: its pod never gets ready
    apply_cr(
        crd,
        ns,
        cr(
            "reconciling",
            {
                **base,
                "groupId": f"rec-{suffix}",
                "kafka": {"bootstrapServers": kafka_bootstrap},
                "processing": {"handler": "lagpilot_no_such_module.handlers:process"},
                "scaling": {"minReplicas": 1, "maxReplicas": 2, "pollIntervalSeconds": 2},
                "template": pods.template(),
            },
        ),
    )

    def cond_is(name: str, type_: str, status: str) -> bool:
        c = condition(get_cr(custom, ns, name), type_)
        return bool(c) and c["status"] == status

    def not_listed(name: str, type_: str) -> bool:
        """An abnormal-true condition (Reconciling, Stalled, Degraded, ...) that is False is absent."""
        return condition(get_cr(custom, ns, name), type_) is None

    wait_until(
        lambda: cond_is("ready", "Ready", "True") and not_listed("ready", "Reconciling"),
        "ready: Ready True",
        120,
        interval=1,
    )
    wait_until(lambda: cond_is("degraded", "Stalled", "True"), "degraded: Stalled True", 120, interval=1)
    wait_until(
        lambda: cond_is("reconciling", "Reconciling", "True"),
        "reconciling: Reconciling True",
        120,
        interval=1,
    )

    def consumer_exited() -> Any:
        """The reconciling CR's consumer ran (where `pods` says) and exited on its handler's import:
        not ready for that reason, not for want of an image or a node."""
        core = client.CoreV1Api(kube_api)
        for pod in core.list_namespaced_pod(ns, label_selector="lagpilot.io/group=reconciling").items:
            for cs in pod.status.container_statuses or []:
                ended = (cs.state and cs.state.terminated) or (cs.last_state and cs.last_state.terminated)
                if ended and ended.exit_code != 0:
                    return pod
        return None

    exited = wait_until(consumer_exited, "reconciling: its consumer ran and exited", 180, interval=1)
    assert exited.spec.node_name == pods.node_name, (exited.metadata.name, exited.spec.node_name)

    listed = crd.kubectl("get", "bcg", "-n", ns, "-o", "json").stdout
    rows = ks.by_name(ks.verdicts(listed, argocd_health=LUA, binary=binary))
    for name, row in rows.items():
        print(name, json.dumps(row))
    # the healthy CR lists no abnormal-true condition (Reconciling, Stalled, Degraded ... False: absent)
    ready_conds = get_cr(custom, ns, "ready")["status"]["conditions"]
    assert not {"Reconciling", "Stalled", "Degraded"} & {c["type"] for c in ready_conds}, ready_conds
    assert not [c for c in ready_conds if c["type"] in ABNORMAL_TRUE and c["status"] == "False"], ready_conds
    assert (rows["ready"]["status"], rows["ready"]["argocdStatus"]) == ("Current", "Healthy")
    assert (rows["degraded"]["status"], rows["degraded"]["argocdStatus"]) == ("Failed", "Degraded")
    assert "BrokerUnreachable" in rows["degraded"]["argocdMessage"]
    assert (rows["reconciling"]["status"], rows["reconciling"]["argocdStatus"]) == (
        "InProgress",
        "Progressing",
    )
    assert "ConsumersNotReady" in rows["reconciling"]["argocdMessage"]
    # the Python copy of kstatus' rules agrees with the library on each object
    for obj in json.loads(listed)["items"]:
        assert verdict(obj)[0] == rows[obj["metadata"]["name"]]["status"], obj["metadata"]["name"]

    # a spec change the operator has not observed yet: InProgress by observedGeneration (the
    # operator is stopped first so that it cannot observe it)
    op.stop()
    crd.kubectl("patch", "bcg", "ready", "-n", ns, "--type=merge", "-p", '{"spec":{"catchUpSLASeconds":120}}')
    obj = json.loads(crd.kubectl("get", "bcg", "ready", "-n", ns, "-o", "json").stdout)
    assert obj["metadata"]["generation"] > obj["status"]["observedGeneration"]
    (row,) = ks.verdicts(json.dumps(obj), argocd_health=LUA, binary=binary)
    assert (row["status"], row["argocdStatus"]) == ("InProgress", "Progressing"), row
    assert "observed generation" in row["message"]
    op.start()  # the fixture's teardown deletes the CRs through the running operator (finalizers)
    wait_until(
        lambda: (
            not_listed("ready", "Reconciling")
            and get_cr(custom, ns, "ready")["status"]["observedGeneration"] == obj["metadata"]["generation"]
        ),
        "the restarted operator observes the new generation",
        120,
        interval=1,
    )
    (row,) = ks.verdicts(crd.kubectl("get", "bcg", "ready", "-n", ns, "-o", "json").stdout, binary=binary)
    assert row["status"] == "Current", row
