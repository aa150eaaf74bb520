"""spec.mode Recommend (issue 28 item 2): decide and publish, never act. The pure capacity-from-
commits sample (decide/recommend.py) and the cycle against the fakes of test_handlers_reconcile
(no Deployment created or scaled, status.recommendation, a Recommendation event, metrics)."""

from __future__ import annotations

from typing import Any

import pytest

from lagpilot.decide import lag as lag_mod
from lagpilot.decide import recommend
from lagpilot.decide.estimate import EstimatorState, PartitionEstimate
from lagpilot.decide.status import find_condition
from lagpilot.spec import SpecError, parse_spec
from tests.unit.test_handlers_reconcile import NAME, NS, World, base_spec

T0 = 1_700_000_000.0


def _prev(parts: dict[int, tuple[int, int]], at: float = T0) -> EstimatorState:
    """partition -> (committed, lag) at `at`."""
    return EstimatorState(
        at_s=at,
        partitions={
            p: PartitionEstimate(
                partition=p, end=c + lag, low=0, committed=c, lag=lag, produce_rate=0.0, samples=3
            )
            for p, (c, lag) in parts.items()
        },
    )


def _snap(parts: dict[int, tuple[int, int]], at: float) -> lag_mod.LagSnapshot:
    """partition -> (committed, end)."""
    return lag_mod.snapshot(at, [lag_mod.PartitionOffsets(p, 0, e, c) for p, (c, e) in parts.items()])


def test_capacity_from_commits_while_every_partition_lags() -> None:
    prev = _prev({0: (1000, 5000), 1: (2000, 5000)})
    snap = _snap({0: (1300, 9000), 1: (2300, 9000)}, T0 + 10)
    # 600 records committed in 10 s by min(3 members, 2 partitions) = 2 busy consumers: 30/s each
    assert recommend.committed_rate_capacity(prev, snap, consumers=3) == pytest.approx(30.0)
    assert recommend.committed_rate_capacity(prev, snap, consumers=1) == pytest.approx(60.0)


@pytest.mark.parametrize(
    ("prev_parts", "snap_parts", "why"),
    [
        ({0: (1000, 0), 1: (2000, 5000)}, {0: (1300, 9000), 1: (2300, 9000)}, "partition 0 was caught up"),
        ({0: (1000, 5000), 1: (2000, 5000)}, {0: (1300, 1300), 1: (2300, 9000)}, "partition 0 caught up now"),
        (
            {0: (1000, 5000), 1: (2000, 5000)},
            {0: (1000, 9000), 1: (2000, 9000)},
            "nothing committed: a stopped group",
        ),
        ({0: (1000, 5000)}, {0: (1300, 9000), 1: (2300, 9000)}, "a new partition"),
    ],
)
def test_no_capacity_sample_when_the_interval_cannot_tell(prev_parts: Any, snap_parts: Any, why: str) -> None:
    assert (
        recommend.committed_rate_capacity(_prev(prev_parts), _snap(snap_parts, T0 + 10), consumers=2) is None
    ), why


def test_a_partition_without_commits_yet_counts_as_lagging() -> None:
    """One consumer reads its partitions one after the other: partition 1 has no commit yet while
    partition 0 is consumed; the consumer is busy all the time."""
    prev = EstimatorState(
        at_s=T0,
        partitions={
            0: PartitionEstimate(
                partition=0, end=5000, low=0, committed=1000, lag=4000, produce_rate=0.0, samples=3
            ),
            1: PartitionEstimate(
                partition=1, end=5000, low=0, committed=None, lag=5000, produce_rate=0.0, samples=3
            ),
        },
    )
    snap = _snap({0: (2000, 5000), 1: (None, 5000)}, T0 + 10)  # type: ignore[dict-item]
    assert recommend.committed_rate_capacity(prev, snap, consumers=1) == pytest.approx(100.0)
    # its first commit: its start is unknown, not counted (partition 0's records are)
    snap = _snap({0: (2000, 5000), 1: (300, 5000)}, T0 + 10)
    assert recommend.committed_rate_capacity(prev, snap, consumers=1) == pytest.approx(100.0)


def test_no_sample_without_history_or_consumers() -> None:
    snap = _snap({0: (1300, 9000)}, T0 + 10)
    assert recommend.committed_rate_capacity(None, snap, 2) is None
    assert recommend.committed_rate_capacity(_prev({0: (1000, 5000)}), snap, 0) is None
    assert recommend.committed_rate_capacity(_prev({0: (1000, 5000)}, at=T0 + 10), snap, 2) is None


def test_mode_is_parsed_and_checked() -> None:
    assert parse_spec(base_spec()).mode == "Act"
    assert parse_spec({**base_spec(), "mode": "Recommend"}).recommend_only
    with pytest.raises(SpecError) as exc:
        parse_spec({**base_spec(), "mode": "DryRun"})
    assert "spec.mode" in str(exc.value)


def _recommend_world(monkeypatch: pytest.MonkeyPatch, members: int) -> World:
    w = World({**base_spec(), "mode": "Recommend"})
    monkeypatch.setattr(
        "lagpilot.reconcile.cycle.group_consumers", lambda handle, group, topic, timeout: members
    )
    return w


def test_external_group_gets_a_recommendation_and_nothing_is_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _recommend_world(monkeypatch, members=1)
    # an external group: no capacity in its commit metadata; 3 partitions lagging 20k each
    w.kafka.set([(0, 21000, 1000, None)] * 3)
    w.cycle()
    rec = w.kube.status["recommendation"]
    assert rec["source"] == "GroupMembers" and rec["currentReplicas"] == 1
    assert rec["capacitySource"] == "Unknown"  # no interval measured yet
    # the group commits 100 records/s per partition while every partition lags: 300/s by 1 consumer
    w.kafka.set([(0, 21000, 2000, None)] * 3)
    w.cycle(advance=10)
    rec = w.kube.status["recommendation"]
    assert rec["capacitySource"] == "CommittedRate", rec
    assert rec["replicas"] == 3 and rec["currentReplicas"] == 1, rec  # capped at the partitions
    assert w.kube.status["desiredReplicas"] == 3
    assert w.kube.status["capacityPerReplica"] == pytest.approx(300.0, rel=0.01)
    # published: an event, the Scaling condition, metrics; applied: nothing
    assert "Recommendation" in w.reasons()
    msg = next(m for _, r, m in w.events if r == "Recommendation" and "to 3" in m)
    assert "scale from 1 to 3 replicas" in msg and "not applied" in msg
    scaling = w.cond("Scaling")
    assert (scaling["status"], scaling["reason"]) == ("False", "RecommendOnly") and "1 -> 3" in scaling[
        "message"
    ]
    assert w.kube.deployments == {} and w.kube.applies == []
    assert "DeploymentCreated" not in w.reasons() and "ScaledUp" not in w.reasons()
    reg = w.deps.metrics
    assert reg.recommend_only.labels(NS, NAME)._value.get() == 1
    assert reg.desired.labels(NS, NAME)._value.get() == 3
    assert reg.replicas.labels(NS, NAME)._value.get() == 1
    # kstatus: consumers are "ready" at what runs; the group is not reconciling anything
    assert find_condition(w.kube.status.get("conditions"), "Reconciling") is None  # False: absent
    assert find_condition(w.kube.status.get("conditions"), "Stalled") is None
    # an unchanged recommendation posts no second event
    n = w.reasons().count("Recommendation")
    w.kafka.set([(0, 21000, 3000, None)] * 3)
    w.cycle(advance=10)
    assert w.reasons().count("Recommendation") == n


def test_a_group_lagpilot_ran_keeps_its_deployment_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, 10.0)] * 3)
    w.cycle()  # mode Act: the Deployment is created with 1 replica
    assert w.kube.replicas == 1
    applies = len(w.kube.applies)
    w.spec = {**base_spec(), "mode": "Recommend"}
    monkeypatch.setattr(
        "lagpilot.reconcile.cycle.group_consumers", lambda *a: pytest.fail("the Deployment is the source")
    )
    w.kafka.set([(0, 21000, 1000, 10.0)] * 3)  # a backlog: mode Act would scale up
    w.cycle(advance=5)
    rec = w.kube.status["recommendation"]
    assert (rec["source"], rec["capacitySource"], rec["currentReplicas"]) == (
        "Deployment",
        "CommitMetadata",
        1,
    )
    assert rec["replicas"] == 3
    assert w.kube.replicas == 1 and len(w.kube.applies) == applies
    # back to Act: the recommendation goes, the scaler acts
    w.spec = base_spec()
    w.cycle(advance=5)
    assert "recommendation" not in w.kube.status and w.kube.replicas == 3


def test_paused_recommend_publishes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _recommend_world(monkeypatch, members=2)
    w.spec = {**w.spec, "paused": True}
    w.kafka.set([(0, 21000, 1000, None)] * 3)
    w.cycle()
    assert w.cond("Ready")["reason"] == "Paused" and "recommendation" not in w.kube.status
    assert w.kube.applies == [] and w.kafka.calls == 0


def test_the_capacity_sample_survives_an_operator_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mode Recommend keeps the controller's memory where mode Act does (the CR's own ConfigMap,
    act/memory.py): a restarted operator (a fresh Cache) measures the committed rate from the
    observation before the restart."""
    from lagpilot.reconcile.deps import Cache

    w = _recommend_world(monkeypatch, members=1)
    w.kafka.set([(0, 21000, 1000, None)] * 3)
    w.cycle()
    assert w.kube.configmap_writes, "the memory was not saved"
    w.cache = Cache()  # the operator restarted
    w.kafka.set([(0, 21000, 2000, None)] * 3)
    w.cycle(advance=10)
    rec = w.kube.status["recommendation"]
    assert rec["capacitySource"] == "CommittedRate" and rec["replicas"] == 3, rec
    assert w.kube.deployments == {} and w.kube.applies == []
