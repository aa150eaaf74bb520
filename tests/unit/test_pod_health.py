"""Why consumer pods are not ready (lagpilot.decide.pod_health): the pod objects as the kubelet and
the scheduler left them on the real node (OOMKilled + CrashLoopBackOff, Unschedulable, an image the
node cannot get) become the Ready condition's message."""

from __future__ import annotations

from typing import Any

from lagpilot.decide.pod_health import MAX_PODS, not_ready_detail, pod_problem


def _pod(
    name: str,
    *,
    ready: bool = False,
    statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    memory: str | None = "128Mi",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T07:00:00Z"
    conds = list(conditions or [])
    conds.append({"type": "Ready", "status": "True" if ready else "False"})
    res = {"limits": {"memory": memory}} if memory else {}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "consumer", "resources": res}]},
        "status": {"phase": "Running", "conditions": conds, "containerStatuses": statuses or []},
    }


OOM_LOOP = {
    "name": "consumer",
    "restartCount": 3,
    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}},
    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
}


def test_an_oom_killed_consumer_names_the_kill_its_limit_and_the_back_off() -> None:
    detail = not_ready_detail([_pod("orders-consumer-a", statuses=[OOM_LOOP])])
    assert detail == (
        "orders-consumer-a: consumer: last terminated OOMKilled (exit 137, memory limit 128Mi), "
        "3 restarts, now CrashLoopBackOff"
    )


def test_an_unschedulable_pod_carries_the_schedulers_reason() -> None:
    pod = _pod(
        "c",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
        ],
    )
    pod["status"]["phase"] = "Pending"
    assert pod_problem(pod) == "not scheduled (Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.)"


def test_an_image_the_node_cannot_get_is_named() -> None:
    st = {
        "name": "consumer",
        "restartCount": 0,
        "state": {
            "waiting": {"reason": "ErrImageNeverPull", "message": 'Container image "x" is not present'}
        },
    }
    assert (
        pod_problem(_pod("c", statuses=[st]))
        == 'consumer: ErrImageNeverPull (Container image "x" is not present)'
    )


def test_ready_starting_and_deleted_pods_say_nothing() -> None:
    creating = {"name": "consumer", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
    pods = [
        _pod("ready", ready=True, statuses=[OOM_LOOP]),  # ready again after a kill: not why it is not ready
        _pod("starting", statuses=[creating]),
        _pod("probing"),
        _pod("going", statuses=[OOM_LOOP], deleting=True),
    ]
    assert not_ready_detail(pods) == ""


def test_at_most_max_pods_are_described_and_the_rest_counted() -> None:
    pods = [_pod(f"c-{i}", statuses=[OOM_LOOP]) for i in range(MAX_PODS + 2)]
    detail = not_ready_detail(pods)
    assert detail.count("OOMKilled") == MAX_PODS and detail.endswith("; and 2 more pods")
