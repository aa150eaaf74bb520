"""Issue 23 (with M8): a drain's progress groups are the CR's, not only the groupId's.

`<groupId>.lagpilot-drain.<drainId>.<k>` named no CR. A CR deleted with `finalizers: null` (its
finalizer, which deletes the progress groups, never runs) and re-created with the same groupId numbers
its drains from 1 again: its drain 1 read the old drain 1's progress, clamped into its own sub-ranges,
and skipped `[start, old next)` — records never processed, the drain `Verified`. Now the groups carry
a short hash of the CR uid: `<groupId>.lagpilot-drain.<tag>.<drainId>.<k>`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from lagpilot_runtime.drain import plan as dp
from lagpilot_runtime.drain.plan import DrainPlan, SubRange

OLD = "0b6f7c1e-8f3a-4c1d-9e2b-3f4a5b6c7d8e"
NEW = "5d1e2f3a-1b2c-4d3e-8f4a-6b7c8d9e0f1a"


def test_two_crs_with_one_group_id_and_drain_id_have_disjoint_progress_groups():
    subs = (SubRange(0, 0, 0, 100), SubRange(0, 1, 100, 200))
    a = DrainPlan("1", "t", "g", subs, owner=dp.owner_tag(OLD)).validate()
    b = DrainPlan("1", "t", "g", subs, owner=dp.owner_tag(NEW)).validate()
    assert set(a.progress_groups()).isdisjoint(b.progress_groups())
    assert all(g.startswith("g.lagpilot-drain.") for g in a.progress_groups())  # the finalizer's prefix
    assert DrainPlan.from_json(a.to_json()) == a  # the tag travels with the plan to the job
    assert dp.owner_tag(OLD) == dp.owner_tag(OLD) and len(dp.owner_tag(OLD)) == 12


def test_the_operators_plan_names_its_crs_groups():
    from lagpilot.act.drain_manifests import drain_plan_for
    from lagpilot.decide.handoff import DrainStatus, Phase
    from lagpilot.spec import parse_spec

    spec = parse_spec(
        {
            "topic": "t",
            "groupId": "g",
            "kafka": {"bootstrapServers": "k:9092"},
            "template": {"image": "img"},
            "processing": {"sink": "log"},
        }
    )
    d = DrainStatus(id=1, phase=Phase.RUNNING, sub_ranges=(), ranges=())
    assert drain_plan_for(spec, d, NEW).owner == dp.owner_tag(NEW)


class _Fut:
    def __init__(self, v: Any) -> None:
        self.v = v

    def result(self, timeout: float | None = None) -> Any:
        return self.v


class Admin:
    """Progress groups as Kafka holds them: the OLD CR's drain 1 left sub-range 0 of p0 at 80."""

    def __init__(self) -> None:
        self.groups = {
            dp.progress_group("g", "1", 0, dp.owner_tag(OLD)): {0: 80},
            "g.lagpilot-drain.1.0": {0: 80},
        }  # and the untagged form of a pre-fix operator
        self.asked: list[str] = []

    def list_consumer_group_offsets(self, reqs: Any, request_timeout: float) -> dict[str, _Fut]:
        req = reqs[0]
        self.asked.append(req.group_id)
        have = self.groups.get(req.group_id, {})
        tps = [
            TopicPartition(tp.topic, tp.partition, have.get(tp.partition, -1001))
            for tp in req.topic_partitions
        ]
        return {req.group_id: _Fut(SimpleNamespace(topic_partitions=tps))}


def test_a_recreated_crs_drain_does_not_read_the_old_crs_progress():
    from lagpilot.act.drain_calls import DrainCalls
    from lagpilot.decide.handoff import DrainStatus, Phase, SubProgress

    calls = DrainCalls()
    calls.timeout_s = 1.0
    d = DrainStatus(id=1, phase=Phase.RUNNING, sub_ranges=(SubProgress(0, 0, 10, 100, 10),), ranges=())
    admin = Admin()
    got = calls.progress(admin, SimpleNamespace(group_id="g", topic="t"), d, owner=NEW)
    assert admin.asked == [dp.progress_group("g", "1", 0, dp.owner_tag(NEW))]
    assert got == {}, got  # nothing done yet: the old CR's 80 is not this drain's progress
