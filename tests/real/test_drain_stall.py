"""H3 through the operator: a drain Job that stays Active without a pod (here a ResourceQuota that
refuses its pod, as a missing ServiceAccount or an unschedulable pod would leave it) is noticed,
reported and retried. Real stack of tests/real/test_drain_operator.py (operator subprocess as the
docs/rbac.md ServiceAccount, kube-apiserver + controller-manager + the pods where `pods` runs them
(the real node by default), Kafka, Spark local mode, PostgreSQL ledger), operator env
LAGPILOT_DRAIN_NO_POD_SECONDS=30, the pods' CPU request 100m (NO_POD_SECONDS, POD_RESOURCES below).

Proven: the fault fired (attempt 1's Job exists, has no pod, and the Job controller's FailedCreate
event names the quota); the operator sets DrainStalled=True/NoRunningPod, posts the Warning event
DrainStalled, deletes the Job and schedules attempt 2; with the quota gone attempt 2 drains, the
drain reaches Verified with DrainStalled back to False (no longer listed), and the ledger holds every offset once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.test_drain_operator import PARTS, Scenario, crd, finish_and_check, scenario  # noqa: F401
from tests.real.test_operator_e2e import condition, events_for, get_cr

pytestmark = [pytest.mark.real, pytest.mark.slow]

# After the quota goes, the retries need a running pod on the node every test worker shares. A full
# ./dev/test with 4 workers (load 8-15) failed here with the drain Failed at attempt 4
# (AttemptsExhausted): the scheduler's events for attempts 2 and 3's pods said "0/1 nodes are
# available: 1 Insufficient cpu" (the node's 2 CPUs of requests held by the other workers' pods; the
# drain pod asks max(500m, tasks x 50m)), and a pod there took 12.8 s to start (chaos consumer,
# 09:54:48 -> 09:55:00). The operator did right (each attempt stalled and was retried); so the
# pods ask 100m (as test_drain_k8s's NODE_OPERATOR_POD_RESOURCES) and an attempt may wait 30 s for
# its pod: 4 attempts then ride out ~3 min of a full node. The stall under the quota is the same.
NO_POD_SECONDS = "30"
POD_RESOURCES = {"requests": {"cpu": "100m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}}


def _live_pods(s: Scenario) -> list[Any]:
    return [
        p for p in s.core.list_namespaced_pod(s.ns).items if p.status.phase not in ("Succeeded", "Failed")
    ]


def test_a_job_without_a_pod_is_stalled_reported_and_retried(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str
) -> None:
    from kubernetes import client

    s = scenario(
        {p: 8000 for p in range(PARTS)},
        live_per_s=0,
        sla_s=20,
        drain={"cancel": True},
        operator_env={"LAGPILOT_DRAIN_NO_POD_SECONDS": NO_POD_SECONDS},
        template={"resources": POD_RESOURCES},
    )
    # the consumers up (the group cannot keep up: 3 replicas), then no further pod may be created
    wait_until(
        lambda: len([p for p in _live_pods(s) if p.status.phase == "Running"]) >= PARTS,
        "3 consumer pods running",
        180,
        interval=1,
    )
    # the quota must stay full while the attempt waits for its pod: with the CR's minReplicas 1 the
    # operator scaled the consumers 3 -> 1 once the drain took the backlog (.ci/run 2026-11-27:
    # launch 17:41:10, scale-down 17:41:35, the freed slots let the Job's pod in 5 s before the 30 s
    # stall could fire; the drain then ran and the stall never came). A floor at the partition count
    # keeps the consumers at 3.
    s.patch_spec({"scaling": {"minReplicas": PARTS}})
    time.sleep(3)  # let a scale decision in flight land before the quota freezes the pod count
    n = len(_live_pods(s))
    s.core.create_namespaced_resource_quota(
        s.ns, {"metadata": {"name": "no-more-pods"}, "spec": {"hard": {"pods": str(n)}}}
    )
    wait_until(
        lambda: (
            (s.core.read_namespaced_resource_quota("no-more-pods", s.ns).status.used or {}).get("pods")
            == str(n)
        ),
        "the quota counting the pods",
        60,
        interval=0.5,
    )
    s.patch_spec({"drain": {"cancel": False}})
    batch = client.BatchV1Api(s.custom.api_client)
    job = wait_until(
        lambda: next(
            iter(batch.list_namespaced_job(s.ns, label_selector="lagpilot.io/drain-job").items), None
        ),
        "the drain Job of attempt 1",
        180,
        interval=0.5,
    )
    name = job.metadata.name
    assert name.endswith("-1"), name
    # the fault fired: the Job controller cannot create its pod
    refused = wait_until(
        lambda: [
            e
            for e in s.core.list_namespaced_event(s.ns).items
            if e.involved_object.name == name and e.reason == "FailedCreate"
        ],
        "FailedCreate of the Job's pod",
        120,
        interval=0.5,
    )
    assert "quota" in refused[0].message, refused[0].message
    assert not s.core.list_namespaced_pod(s.ns, label_selector=f"job-name={name}").items

    def stalled() -> Any:
        c = condition(get_cr(s.custom, s.ns, s.name), "DrainStalled")
        return c if c is not None and c.get("status") == "True" else None

    c = wait_until(stalled, "DrainStalled=True", 240, interval=1)
    assert c["reason"] == "NoRunningPod" and "no running pod" in c["message"], c
    d = s.drain()
    assert d.get("stalled") == "NoRunningPod" and d["attempt"] == 1 and d.get("retryAt"), d
    ev = [e for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainStalled"]
    assert ev and ev[0].type == "Warning" and "attempt 1 stalled" in ev[0].message, [e.message for e in ev]
    assert len(_live_pods(s)) == n  # the quota stayed full: the consumers were not scaled down
    wait_until(
        lambda: not [j for j in batch.list_namespaced_job(s.ns).items if j.metadata.name == name],
        "attempt 1's Job deleted",
        120,
        interval=1,
    )

    s.core.delete_namespaced_resource_quota("no-more-pods", s.ns)
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d["attempt"] >= 2, d
    c = condition(get_cr(s.custom, s.ns, s.name), "DrainStalled")
    assert c is None, c  # back to False: no longer listed (abnormal-true)
    print(f"stalled without a pod: {ev[0].message}; verified at attempt {d['attempt']}")
