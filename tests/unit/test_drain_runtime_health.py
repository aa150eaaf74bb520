"""What the warm drain runtime's pod says when it is not Ready (a container OOM-killed at the CR's
memory limit, CrashLoopBackOff, ...), read in the cycle's observe phase (`RuntimeManager.observe`,
`observation_of`: decide.pod_health.not_ready_detail) and shown in the CR's `Ready` message, whose
status stays the consumers' (tests/real/test_drain_runtime.py's OOM test on the real node).
Pure and fakes: no cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lagpilot.act import drain_runtime as rt
from lagpilot.decide.estimate import EstimatorState
from lagpilot.decide.runtime import RuntimeObservation
from lagpilot.decide.scaling import Decision
from lagpilot.reconcile.report import conditions
from lagpilot.spec import parse_spec
from lagpilot_runtime import plan_auth
from tests.unit.runtime_fakes import runtime_manager
from tests.unit.test_drain_runtime_operator import pod, spec_with

ALWAYS = spec_with()
D = rt.build_runtime_deployment("orders", "ns1", "uid-1", ALWAYS, key_id=plan_auth.key_id(bytes(32)))
HASH = rt.manifest_hash(D)
SELECTOR = ("list pods", "app.kubernetes.io/name=lagpilot-drain-runtime,lagpilot.io/drain-runtime-of=orders")
KILLED = (
    "orders-drain-runtime-a: drain: last terminated OOMKilled (exit 137, memory limit 384Mi), 2 restarts, "
    "now CrashLoopBackOff"
)


def dep(replicas: int, ready: int) -> dict[str, Any]:
    out = copy.deepcopy(D)
    out["spec"]["replicas"] = replicas
    out["status"] = {"replicas": replicas, "readyReplicas": ready}
    return out


def oom_killed(name: str = "orders-drain-runtime-a") -> dict[str, Any]:
    """A runtime pod as the kubelet reports it after the memory cgroup killed its container twice."""
    p = pod(name, ready=False, config=HASH)
    p["spec"] = {"containers": [{"name": "drain", "resources": {"limits": {"memory": "384Mi"}}}]}
    p["status"]["containerStatuses"] = [
        {
            "name": "drain",
            "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
        }
    ]
    return p


OBS = [  # (pods, ready, problem)
    ("oom-killed", [oom_killed()], False, KILLED),
    ("starting-says-nothing", [pod("orders-drain-runtime-a", ready=False, config=HASH)], False, ""),
    ("ready", [pod("orders-drain-runtime-a", config=HASH)], True, ""),
    # a Ready pod serves: the other's kill is not the CR's problem (a roll in progress)
    (
        "ready-beside-a-killed-one",
        [oom_killed("x-old"), pod("orders-drain-runtime-a", config=HASH)],
        True,
        "",
    ),
    ("no-pod", [], False, ""),
]


@pytest.mark.parametrize("pods,ready,problem", [c[1:] for c in OBS], ids=[c[0] for c in OBS])
def test_observation_names_what_keeps_the_runtime_from_ready(
    pods: list[dict[str, Any]], ready: bool, problem: str
) -> None:
    got = rt.observation_of(dep(1, 0), pods, 31000, HASH)
    assert (got.ready, got.problem) == (ready, problem)


def test_observe_reads_the_pods_of_an_always_on_runtime_only_while_one_is_not_ready() -> None:
    m = runtime_manager(dep(1, 1), [pod("orders-drain-runtime-a", config=HASH)])
    seen = m.observe("ns1", "orders", "uid-1", ALWAYS)
    assert seen is not None and seen.observation.problem == "" and m.core.calls == []  # all ready: no LIST
    m = runtime_manager(dep(1, 0), [oom_killed()])
    seen = m.observe("ns1", "orders", "uid-1", ALWAYS)
    assert seen is not None and seen.observation.problem == KILLED
    assert m.apps.calls == ["get"] and m.core.calls == [SELECTOR]
    m = runtime_manager(dep(0, 0), [oom_killed()])  # no replicas (on demand, scaled down): no LIST
    seen = m.observe("ns1", "orders", "uid-1", spec_with(warmRuntimeCooldownSeconds=5))
    assert seen is not None and seen.observation == RuntimeObservation(0, False, None) and m.core.calls == []


SPEC = parse_spec(
    {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "orders",
        "groupId": "g",
        "processing": {"sink": "log"},
    }
)
DECISION = Decision(1, "Steady", "steady", 10.0, 10.0, 1, False)
READY = [  # (target, ready, consumers' problem, runtime's problem, Ready's (status, reason, message))
    ("all-well", 1, 1, "", "", ("True", "ConsumersReady", "1/1 consumers ready")),
    (
        "runtime-killed-consumers-ready",
        1,
        1,
        "",
        KILLED,
        ("True", "ConsumersReady", f"1/1 consumers ready; warm drain runtime not ready: {KILLED}"),
    ),
    (
        "both",
        2,
        1,
        "c-1: consumer: ErrImageNeverPull",
        KILLED,
        (
            "False",
            "ConsumersNotReady",
            f"1/2 consumers ready; c-1: consumer: ErrImageNeverPull; warm drain runtime not ready: {KILLED}",
        ),
    ),
    (
        "scaled-to-zero",
        0,
        0,
        "",
        KILLED,
        ("True", "NoReplicas", f"no consumer replicas wanted; warm drain runtime not ready: {KILLED}"),
    ),
]


@pytest.mark.parametrize(
    "target,ready,not_ready,runtime,want", [c[1:] for c in READY], ids=[c[0] for c in READY]
)
def test_ready_names_the_runtime_kill_and_keeps_the_consumers_status(
    target: int, ready: int, not_ready: str, runtime: str, want: tuple[str, str, str]
) -> None:
    conds = conditions(
        SPEC,
        DECISION,
        target,
        target,
        ready,
        False,
        [],
        EstimatorState(0.0, {}),
        not_ready=not_ready,
        runtime_not_ready=runtime,
    )
    got = next(c for c in conds if c.type == "Ready")
    assert (got.status, got.reason, got.message) == want


def test_a_drain_job_killed_by_its_memory_limit_says_so() -> None:
    """A cold drain Job at the same limit (the CR's template) is OOM-killed too: the attempt's failure
    (DrainAttemptFailed, status.drain.lastError) names the kill and the limit, not the log's last
    line (FallbackToLogsOnError: whatever the process printed before the kill; seen on the node: a
    `drain plan` JSON record)."""
    from lagpilot.act.drain_manifests import job_observation

    job = {
        "status": {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
        }
    }
    killed = {
        "metadata": {"name": "orders-drain-1-1-x"},
        "spec": {"containers": [{"name": "drain", "resources": {"limits": {"memory": "160Mi"}}}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "drain",
                    "state": {
                        "terminated": {
                            "reason": "OOMKilled",
                            "exitCode": 137,
                            "message": '{"msg": "drain plan", "event": "drain_plan", "drain": "1"}',
                        }
                    },
                }
            ],
        },
    }
    assert job_observation(job, [killed]).message == "drain: OOMKilled (exit 137, memory limit 160Mi)"
