"""reconcile.py: the control-loop cycle against fakes (no cluster, no broker).

The fakes keep what a real API server would: the Deployment's replicas, the CR status (merge
patches applied), Secrets. Observations are scripted per cycle; the clock is injected.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from lagpilot.act.kubeapi import KubeError
from lagpilot.act.memory import memory_name
from lagpilot.decide import status as status_mod
from lagpilot.decide.status import find_condition
from lagpilot.metrics import OperatorMetrics
from lagpilot.model.status import validate_status
from lagpilot.observe.kafka_observe import (
    AdminPool,
    Observation,
    ObserveError,
    PartitionOffsets,
    cycle_phase_s,
)
from lagpilot.reconcile.act import apply_deployment
from lagpilot.reconcile.cycle import aligned_delay, backoff_s, run_cycle
from lagpilot.reconcile.deps import Cache, Deps, GroupRef
from lagpilot_runtime.commit_metadata import CapacityReport

T0 = 1_700_000_000.0
NS, NAME = "team-a", "orders"


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386, as the API server applies the status patch: objects merge key by key (null
    deletes), anything else (lists too) replaces."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            merge_patch(target[k], v)
        else:
            target[k] = copy.deepcopy(v) if not isinstance(v, dict) else _without_nulls(v)


def _without_nulls(v: Any) -> Any:
    return (
        {k: _without_nulls(x) for k, x in v.items() if x is not None}
        if isinstance(v, dict)
        else copy.deepcopy(v)
    )


class FakeKube:
    def __init__(self) -> None:
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.configmap_writes: list[dict[str, Any]] = []
        self.fail_configmap: KubeError | None = None
        self.status: dict[str, Any] = {}
        self.status_patches: list[dict[str, Any]] = []
        self.applies: list[dict[str, Any]] = []
        self.ready = True  # pods become ready at once (a kubelet that never fails)
        self.fail_apply: KubeError | None = None

    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]:
        if self.fail_apply:
            raise self.fail_apply
        m = copy.deepcopy(manifest)
        n = m["spec"]["replicas"]
        m["status"] = {"replicas": n, "readyReplicas": n if self.ready else 0}
        self.deployments[(m["metadata"]["namespace"], m["metadata"]["name"])] = m
        self.applies.append(m)
        return m

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.deployments.get((namespace, name)))

    def read_secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.secrets.get((namespace, name))

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.status_patches.append(copy.deepcopy(patch))
        merge_patch(self.status, patch)
        # the shape the CRD declares (lagpilot.model.status): a field outside it would be pruned
        validate_status(self.status)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.fail_configmap:
            raise self.fail_configmap
        return copy.deepcopy(self.configmaps.get((namespace, name)))

    def apply_configmap(self, manifest: dict[str, Any]) -> None:
        if self.fail_configmap:
            raise self.fail_configmap
        self.configmap_writes.append(copy.deepcopy(manifest))
        self.configmaps[(manifest["metadata"]["namespace"], manifest["metadata"]["name"])] = copy.deepcopy(
            manifest
        )

    def memory(self) -> dict[str, Any]:
        """The controller's memory as the ConfigMap holds it."""
        import json

        return json.loads(self.configmaps[(NS, memory_name(NAME))]["data"]["memory"])

    @property
    def replicas(self) -> int:
        return self.deployments[(NS, f"{NAME}-consumer")]["spec"]["replicas"]


class Script:
    """Scripted Kafka: per-partition (earliest, latest, committed, capacity) or an error."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, int, int | None, float | None]] = []
        self.error: ObserveError | None = None
        self.calls = 0
        self.clock = T0

    def set(self, parts: list[tuple[int, int, int | None, float | None]]) -> None:
        self.parts = parts

    def __call__(self, handle: Any, topic: str, group: str, timeout: float, **_: Any) -> Observation:
        self.calls += 1
        if self.error:
            raise self.error
        return Observation(
            topic,
            group,
            self.clock,
            tuple(
                PartitionOffsets(i, e, end, c, CapacityReport(cap, int(self.clock * 1000)) if cap else None)
                for i, (e, end, c, cap) in enumerate(self.parts)
            ),
        )


class World:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.kube = FakeKube()
        self.kafka = Script()
        self.events: list[tuple[str, str, str]] = []
        self.spec = spec
        self.generation = 1
        self.pool = AdminPool(factory=lambda conf: object())
        self.deps = Deps(
            kube=self.kube,
            admin_pool=self.pool,
            metrics=OperatorMetrics(CollectorRegistry()),
            emit=lambda t, r, m: self.events.append((t, r, m)),
            pod_start_seconds=0.0,
            clock=lambda: self.kafka.clock,
            observe=self.kafka,
            peek=self.peek,
        )
        self.oldest_ts: dict[int, float] = {}
        self.peeked: list[dict[int, int]] = []
        self.cache = Cache()

    def peek(self, handle: Any, topic: str, positions: dict[int, int], timeout: float) -> dict[int, float]:
        self.peeked.append(dict(positions))
        return {p: ts for p, ts in self.oldest_ts.items() if p in positions}

    @property
    def ref(self) -> GroupRef:
        return GroupRef(NS, NAME, "uid-1", self.generation)

    def cycle(self, advance: float = 0.0):
        self.kafka.clock += advance
        return run_cycle(self.ref, self.spec, copy.deepcopy(self.kube.status), self.deps, self.cache)

    def cond(self, type_: str) -> dict[str, Any]:
        c = find_condition(self.kube.status.get("conditions"), type_)
        assert c is not None, self.kube.status.get("conditions")
        return dict(c)

    def absent(self, type_: str) -> bool:
        """An abnormal-true condition that is False is not listed (model.status.ABNORMAL_TRUE)."""
        return find_condition(self.kube.status.get("conditions"), type_) is None

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]


def base_spec(**scaling: Any) -> dict[str, Any]:
    return {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "orders",
        "groupId": "g",
        "processing": {"sink": "log"},
        "scaling": {
            "minReplicas": 1,
            "maxReplicas": 10,
            "pollIntervalSeconds": 5,
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 30},
            },
            **scaling,
        },
        "catchUpSLASeconds": 60,
        "drain": {"enabled": False},
    }


def test_first_cycle_creates_deployment_and_reports() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)] * 3)
    res = w.cycle()
    assert res.ok and res.delay_s == aligned_delay(5, w.kafka.clock, cycle_phase_s(w.ref.key, 5))
    assert w.kube.replicas == 1
    assert "DeploymentCreated" in w.reasons()
    st = w.kube.status
    assert st["partitions"] == 3 and st["totalLag"] == 0 and st["observedGeneration"] == 1
    # observed state only: the controller's memory is in the ConfigMap the CR owns
    assert "estimator" not in st and "scalingHistory" not in st
    cm = w.kube.configmaps[(NS, memory_name(NAME))]
    assert (
        cm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        and cm["metadata"]["ownerReferences"][0]["controller"]
    )
    assert set(w.kube.memory()) == {
        "estimator",
        "scalingHistory",
        "learned",
    }  # learned: decide.learn (issue 25 item 4)
    # the start-up figures the planner used (decide.learn): the operator's defaults until measured
    assert st["startUps"]["podStart"]["source"] == "Default"
    assert st["startUps"]["drainStart"] == {"seconds": 20.0, "source": "Default"}
    assert w.absent("ScalingIneffective")  # False
    # each fact once: the SLA is spec.catchUpSLASeconds, the last decision the Scaling condition's
    # message, the capacity and data-loss count status.capacityPerReplica / status.dataLossRecords
    assert "slaSeconds" not in st and "lastDecision" not in st, st
    assert w.cond("Scaling")["message"].startswith("keep 1->1"), w.cond("Scaling")
    # one per-partition list keyed by partition, one object each (low, lag and the rates left out
    # while 0: a caught-up, idle partition is three lines in kubectl describe)
    assert st["partitionStatuses"] == [{"partition": p, "committed": 100, "end": 100} for p in range(3)]
    assert st["lastObservedTime"] == "2023-11-14T22:13:20.000Z"
    assert all(c["observedGeneration"] == 1 for c in st["conditions"])
    assert w.absent("Degraded")  # False
    assert w.cond("Ready")["status"] == "True"


def test_backlog_scales_up_capped_at_partitions_then_down_after_window() -> None:
    w = World(base_spec())
    # a backlog of 20k records per partition at capacity 10/s: far beyond the SLA at any count.
    # (It is there before the first observation: a burst produced between two observations would
    # read as a huge produce rate, which the estimator lets decay slowly, by design.)
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)
    res = w.cycle()
    assert w.kube.replicas == 3, (res, w.cond("Scaling"))  # capped at 3 partitions
    assert "ScaledUp" in w.reasons()
    assert w.cond("CatchUpAtRisk")["status"] == "True"
    assert w.kube.status["desiredReplicas"] == 3
    # lag drained, no new records: the scale-down waits for the 30 s window
    w.kafka.set([(0, 21000, 21000, 10.0)] * 3)
    t_drained = w.kafka.clock + 5
    w.cycle(advance=5)
    assert w.kube.replicas == 3
    while w.kube.replicas == 3 and w.kafka.clock < t_drained + 120:
        w.cycle(advance=5)
    assert w.kube.replicas == 1
    # not before the 30 s window has passed since the last recommendation of 3 (at T0)
    assert w.kafka.clock - T0 >= 30
    assert "ScaledDown" in w.reasons()
    assert w.absent("CatchUpAtRisk")  # False


def test_history_survives_operator_restart() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)
    w.cycle()
    assert w.kube.replicas == 3
    w.kafka.set([(0, 21000, 21000, 10.0)] * 3)
    w.cycle(advance=5)
    # restart: a fresh cache; everything it needs comes from the memory ConfigMap
    w.cache = Cache()
    w.cycle(advance=5)
    assert w.kube.replicas == 3, "a restart must not forget the scale-down window"
    assert w.kube.status["capacityPerReplica"] == pytest.approx(10.0)


def test_unchanged_status_is_not_written() -> None:
    """While the state does not change (paused, or the same failure), repeated cycles write nothing,
    even though time passes (lastTransitionTime is kept, not rewritten)."""
    w = World({**base_spec(), "paused": True})
    w.cycle()
    n = len(w.kube.status_patches)
    w.cycle(advance=5)
    w.cycle(advance=5)
    assert len(w.kube.status_patches) == n
    w = World(base_spec())
    w.kafka.error = ObserveError("TopicNotFound", "topic 'orders' does not exist on k:9092")
    w.cycle()
    n = len(w.kube.status_patches)
    w.cycle(advance=5)
    w.cycle(advance=5)
    assert len(w.kube.status_patches) == n


def test_not_ready_consumers_say_why_in_the_ready_condition() -> None:
    """On the real node a consumer killed by its memory limit restarts in CrashLoopBackOff: the
    Ready condition's message carries what its pod says (decide.pod_health), read only while the
    Deployment has fewer ready replicas than it asks for."""
    from lagpilot.act.deployment import selector_labels

    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)])
    w.kube.ready = False
    asked: list[tuple[str, dict[str, str]]] = []
    pod = {
        "metadata": {"name": "orders-consumer-abc"},
        "spec": {"containers": [{"name": "consumer", "resources": {"limits": {"memory": "128Mi"}}}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    "name": "consumer",
                    "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
        },
    }

    def list_pods(namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        asked.append((namespace, dict(selector)))
        return [pod]

    w.kube.list_pods = list_pods  # type: ignore[attr-defined]
    w.cycle()
    w.cycle(advance=5)
    ready = w.cond("Ready")
    assert ready["status"] == "False" and ready["reason"] == "ConsumersNotReady"
    assert ready["message"].endswith(
        "orders-consumer-abc: consumer: last terminated OOMKilled (exit 137, memory "
        "limit 128Mi), 2 restarts, now CrashLoopBackOff"
    ), ready["message"]
    assert asked and all(sel == selector_labels(w.ref.name) for _, sel in asked)
    w.kube.ready = True  # ready again: the pods are not read
    for d in w.kube.deployments.values():
        d["status"]["readyReplicas"] = d["spec"]["replicas"]
    n = len(asked)
    w.cycle(advance=5)
    assert w.cond("Ready")["status"] == "True" and len(asked) == n


def test_paused_scales_to_zero_without_observing() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)])
    w.cycle()
    calls = w.kafka.calls
    w.spec = {**base_spec(), "paused": True}
    w.generation = 2
    w.cycle(advance=5)
    assert w.kube.replicas == 0 and w.kafka.calls == calls
    assert w.cond("Ready")["reason"] == "Paused" and w.cond("Ready")["observedGeneration"] == 2
    assert "Paused" in w.reasons()
    w.spec = base_spec()
    w.generation = 3
    w.cycle(advance=5)
    assert w.kube.replicas >= 1
    assert w.cond("Ready")["reason"] == "ConsumersNotReady"  # just scaled up: pods not ready yet
    w.cycle(advance=5)
    assert w.cond("Ready")["status"] == "True"


@pytest.mark.parametrize("reason", ["TopicNotFound", "BrokerUnreachable", "AuthenticationFailed"])
def test_kafka_failures_degrade_with_backoff(reason: str) -> None:
    w = World(base_spec())
    w.kafka.error = ObserveError(reason, f"cause {reason} on k:9092")
    delays = [w.cycle(advance=1).delay_s for _ in range(4)]
    assert delays == [5, 10, 20, 40]
    deg = w.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", reason)
    assert "k:9092" in deg["message"]
    assert w.cond("Ready")["status"] == "False"
    warnings = [e for e in w.events if e[0] == "Warning"]
    assert warnings and all(e[1] == reason for e in warnings)
    assert len(warnings) == 3  # failures 1, 2 and 4: repeated causes are thinned out
    # the Deployment still exists (created before the observation failed)
    assert w.kube.replicas == 1
    # recovery clears Degraded and resets the back-off
    w.kafka.error = None
    w.kafka.set([(0, 10, 10, None)])
    res = w.cycle(advance=1)
    assert res.ok and res.delay_s == aligned_delay(5, w.kafka.clock, cycle_phase_s(w.ref.key, 5))
    assert w.absent("Degraded")  # False
    assert "Recovered" in w.reasons()


SASL = {
    **base_spec(),
    "kafka": {
        "bootstrapServers": "k:9093",
        "securityProtocol": "SASL_PLAINTEXT",
        "saslMechanism": "PLAIN",
        "secretRef": {"name": "kcreds"},
    },
}


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


@pytest.mark.parametrize(
    "secret, reason",
    [
        (None, "SecretNotFound"),
        ({"username": b64("svc")}, "SecretMalformed"),
        ({"username": b64("svc"), "password": "%%not-base64%%"}, "SecretMalformed"),
    ],
    ids=["missing", "no-password", "bad-base64"],
)
def test_secret_problems_degrade_without_leaking(secret: dict[str, str] | None, reason: str) -> None:
    w = World(copy.deepcopy(SASL))
    if secret is not None:
        w.kube.secrets[(NS, "kcreds")] = {**secret, "other": b64("hunter2-secret")}
    w.kafka.set([(0, 10, 10, None)])
    res = w.cycle()
    assert not res.ok and res.reason == reason
    deg = w.cond("Degraded")
    assert deg["reason"] == reason and "kcreds" in deg["message"]
    blob = repr(w.kube.status) + repr(w.events)
    assert "hunter2" not in blob and "svc" not in blob
    assert w.kafka.calls == 0  # no Kafka call with half a configuration


def test_good_secret_reaches_the_admin_config_only() -> None:
    seen: list[dict[str, Any]] = []
    w = World(copy.deepcopy(SASL))
    w.deps.admin_pool = AdminPool(factory=lambda conf: seen.append(conf) or object())
    w.kube.secrets[(NS, "kcreds")] = {"username": b64("svc"), "password": b64("hunter2")}
    w.kafka.set([(0, 10, 10, None)])
    assert w.cycle().ok
    assert seen[0]["sasl.username"] == "svc" and seen[0]["sasl.password"] == "hunter2"
    dep = w.kube.deployments[(NS, "orders-consumer")]
    assert "hunter2" not in repr(dep) and "hunter2" not in repr(w.kube.status)


def test_invalid_spec_degrades_and_waits_long() -> None:
    spec = base_spec()
    spec["scaling"]["minReplicas"] = 5
    spec["scaling"]["maxReplicas"] = 2
    w = World(spec)
    res = w.cycle()
    assert not res.ok and res.reason == "InvalidSpec" and res.delay_s == w.deps.max_backoff_seconds
    # the field it names, and the CRD's own message for the rule (issue 26: evaluated, not re-written)
    message = w.cond("Degraded")["message"]
    assert (
        "spec.scaling.minReplicas: scaling.minReplicas must be less than or equal to scaling.maxReplicas"
        in message
    )
    assert not w.kube.deployments


def test_drain_hand_off_holds_replicas() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 1000, 1000, 10.0)] * 3)
    w.cycle()
    # the hand-off's quiesce fallback owns the replica count (handoff.holds_replicas)
    drain = {
        "id": 1,
        "phase": "HandedOff",
        "quiescedAt": status_mod.format_time(T0),
        "handOffPath": "Quiesce",
        "ranges": [{"partition": 0, "start": 0, "end": 1000}],
    }
    w.kube.status["drain"] = copy.deepcopy(drain)
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)
    w.cycle(advance=5)
    assert w.kube.replicas == 1
    assert w.cond("Scaling")["reason"] == "DrainHandOff"
    assert w.kube.status["drain"] == drain  # not ours: untouched


def test_consumer_ack_hand_off_leaves_the_scaler_free() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 1000, 1000, 10.0)] * 3)
    w.cycle()
    w.kube.status["drain"] = {
        "id": 1,
        "phase": "Planned",
        "handOffPath": "ConsumerAck",
        "ranges": [{"partition": 0, "end": 1000}],
    }
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)
    w.cycle(advance=5)
    assert w.kube.replicas == 3  # the backlog scaled the group up during the hand-off


def test_apply_failure_becomes_degraded() -> None:
    w = World(base_spec())
    w.kube.fail_apply = KubeError(403, "Forbidden", "apply Deployment team-a/orders-consumer")
    res = w.cycle()
    assert not res.ok and res.reason == "KubernetesAPIError"
    assert "403" in w.cond("Degraded")["message"]


def test_apply_uses_status_desired_within_bounds() -> None:
    w = World(base_spec(maxReplicas=4))
    n = apply_deployment(w.ref, w.spec, {"desiredReplicas": 9, "partitions": 6}, w.deps)
    assert n == 4
    n = apply_deployment(w.ref, w.spec, {"desiredReplicas": 9, "partitions": 2}, w.deps)
    assert n == 2
    n = apply_deployment(w.ref, {**w.spec, "paused": True}, {"desiredReplicas": 3}, w.deps)
    assert n == 0
    n = apply_deployment(w.ref, w.spec, {}, w.deps)
    assert n == 1


def test_data_loss_is_reported() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 50, None)])
    w.cycle()
    w.kafka.set([(80, 100, 50, None)])  # retention moved the log start past the commit
    w.cycle(advance=5)
    assert "DataLoss" in w.reasons()
    assert w.kube.status["dataLossRecords"] == 30
    assert w.cond("Degraded")["reason"] == "DataLoss"


@pytest.mark.parametrize("failures, expected", [(1, 5), (2, 10), (3, 20), (7, 300), (30, 300)])
def test_backoff(failures: int, expected: float) -> None:
    assert backoff_s(failures, 5, 300) == expected


def test_offsets_moving_backwards_are_reported() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 1000, 1000, 10.0)])
    w.cycle()
    w.kafka.set([(0, 10, None, None)])  # topic deleted and recreated under the group
    res = w.cycle(advance=5)
    assert res.ok
    assert "OffsetsWentBackwards" in w.reasons()
    assert w.kube.status["partitionStatuses"][0]["end"] == 10


def test_oldest_record_age_of_lagging_partitions() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 40, None), (0, 50, 50, None), (10, 30, None, None)])
    w.oldest_ts = {0: T0 - 42.0, 2: T0 - 7.0}
    w.cycle()
    # only lagging partitions are read, at the group's position (log start when never committed)
    assert w.peeked[-1] == {0: 40, 2: 10}
    ages = {p["partition"]: p.get("oldestAgeSeconds") for p in w.kube.status["partitionStatuses"]}
    assert ages == {0: 42.0, 1: None, 2: 7.0}  # None: key absent (no lag, nothing to date)
    assert w.kube.status["partitionStatuses"][0]["lag"] == 60


def test_cycle_decides_through_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """reconcile holds no policy arithmetic: one cycle = one call of lagpilot.decide.step.step."""
    from lagpilot.decide import step as step_mod

    calls = []
    real = step_mod.step

    def counting(*a: Any, **kw: Any) -> Any:
        out = real(*a, **kw)
        calls.append(out)
        return out

    monkeypatch.setattr(step_mod, "step", counting)
    w = World(base_spec())
    w.kafka.set([(0, 1000, 1000, 10.0)] * 3)
    w.cycle()
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)
    w.cycle(advance=5)
    assert len(calls) == 2
    decision, state = calls[-1]
    assert w.kube.replicas == decision.replicas == 3
    # the memory ConfigMap holds exactly the step's state: a restart resumes from it unchanged
    import json

    assert w.kube.memory() == json.loads(json.dumps(state.to_memory()))
    back = step_mod.StepState.from_memory(w.kube.memory())
    assert json.dumps(back.to_memory()) == json.dumps(state.to_memory())


def test_status_times_are_rfc3339_strings() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)
    w.cycle()
    st = w.kube.status
    assert st["lastObservedTime"] == "2023-11-14T22:13:20.000Z"
    assert status_mod.parse_time(st["lastScaleTime"]) == T0
    assert all(c["lastTransitionTime"].endswith("Z") for c in st["conditions"])


def _samples(kube: FakeKube) -> dict:
    """Rate samples per partition in the memory ConfigMap."""
    return {k: v["samples"] for k, v in kube.memory()["estimator"]["partitions"].items()}


def test_a_partition_without_a_commit_does_not_wipe_the_estimate_on_restart() -> None:
    """A partition the group has not committed yet has committed None; the merge patch drops the
    null, so the stored estimate lacks the key. A restarted operator must still resume (before:
    the whole estimate failed to load and every partition started over at 0 samples)."""
    w = World(base_spec())
    w.deps.status_heartbeat_seconds = 0.0  # the memory written every cycle, as the check reads it
    w.kafka.set([(0, 21000, 1000, 10.0), (0, 21000, 1000, 10.0), (0, 500, None, None)])
    for _ in range(3):
        w.cycle(advance=5)
    assert "committed" not in w.kube.status["partitionStatuses"][2]  # none yet
    assert w.kube.memory()["estimator"]["partitions"]["2"]["committed"] is None
    before = _samples(w.kube)
    assert min(before.values()) >= 2
    w.cache = Cache()  # restart
    w.cycle(advance=5)
    after = _samples(w.kube)
    assert after == {k: n + 1 for k, n in before.items()}, (before, after)


def test_a_restart_does_not_count_a_data_loss_twice() -> None:
    """Retention deleted records the group had not consumed: counted once. The count and the
    per-partition high-water of counted loss are written to the memory at once (not on the
    heartbeat), so an operator restarted right after does not count the same records again."""
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)])
    w.cycle()
    w.kafka.set([(50, 200, 20, None)])  # records 20..49 deleted before the group read them
    w.cycle(advance=5)
    assert w.kube.status["dataLossRecords"] == 30
    assert w.kube.memory()["estimator"]["dataLossRecords"] == 30  # written with the loss, not a minute later
    w.cache = Cache()  # restart
    w.cycle(advance=5)
    assert w.kube.status["dataLossRecords"] == 30
    assert [r for r in w.reasons() if r == "DataLoss"] == ["DataLoss"]


def test_a_memory_configmap_the_cr_does_not_own_is_not_read() -> None:
    """One of that name left by someone else: a fresh start (its content is not trusted), and the
    next write makes it the CR's."""
    import json

    w = World(base_spec())
    foreign = {
        "metadata": {"name": memory_name(NAME), "namespace": NS},
        "data": {"memory": json.dumps({"scalingHistory": {"recommendations": [[T0, 9]], "lastScaleS": T0}})},
    }
    w.kube.configmaps[(NS, memory_name(NAME))] = foreign
    w.kafka.set([(0, 100, 100, None)] * 3)
    w.cycle()
    assert w.kube.memory()["scalingHistory"]["recommendations"] != [[T0, 9]]
    assert w.kube.configmaps[(NS, memory_name(NAME))]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_a_failed_memory_read_fails_the_cycle_rather_than_start_blind() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)] * 3)
    w.kube.fail_configmap = KubeError(403, "Forbidden", "get ConfigMap team-a/orders-lagpilot-state")
    res = w.cycle()
    assert not res.ok and res.reason == "KubernetesAPIError"
    assert (
        w.cond("Degraded")["reason"] == "KubernetesAPIError" and "ConfigMap" in w.cond("Degraded")["message"]
    )
    assert w.kafka.calls == 0  # nothing observed or decided without the memory
    w.kube.fail_configmap = None
    assert w.cycle(advance=5).ok and w.kube.configmap_writes
