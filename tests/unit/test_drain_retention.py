"""Retention and drains (issue 12 item 2): the drain job splits its work at the low watermark and
records exactly what was lost; the hand-off machine turns that into a DataLoss status, event and
metric count once; the planner puts partitions about to expire first."""

from __future__ import annotations

import dataclasses

import pytest

from lagpilot.decide import handoff as h
from lagpilot.decide.drain_policy import PartitionLoad, expiring_first
from lagpilot.decide.handoff import JobObservation, JobState, Kind, next_action
from lagpilot_runtime.drain.plan import (
    SubRange,
    parse_progress_lost,
    parse_progress_metadata,
    progress_metadata,
)
from lagpilot_runtime.drain.progress import merge_ranges, retention_losses
from tests.unit.test_handoff import NOW, RUNNING, obs, spec


@pytest.mark.parametrize(
    "work, low, lost, left",
    [
        # nothing deleted
        ([(SubRange(0, 0, 0, 100), 0)], {0: 0}, [], [(0, 0, 0)]),
        # part of the first sub-range deleted: [10, 40) lost, the rest from 40
        (
            [(SubRange(0, 0, 0, 100), 10), (SubRange(0, 1, 100, 200), 100)],
            {0: 40},
            [(0, 0, 10, 40)],
            [(0, 0, 40), (0, 1, 100)],
        ),
        # the first sub-range entirely, the second partly; another partition untouched
        (
            [(SubRange(0, 0, 0, 100), 50), (SubRange(0, 1, 100, 200), 130), (SubRange(1, 0, 0, 50), 0)],
            {0: 150, 1: 0},
            [(0, 0, 50, 100), (0, 1, 130, 150)],
            [(0, 1, 150), (1, 0, 0)],
        ),
        # unknown watermark: nothing assumed lost
        ([(SubRange(2, 0, 5, 9), 5)], {}, [], [(2, 0, 5)]),
    ],
)
def test_work_is_split_at_the_low_watermark(work, low, lost, left):
    got_lost, got_left = retention_losses(work, low)
    assert [(s.partition, s.index, a, b) for s, a, b in got_lost] == lost
    assert [(s.partition, s.index, start) for s, start in got_left] == left
    # nothing falls between the two: every unfinished offset is lost or still to drain
    for s, start in work:
        lost_n = sum(b - a for x, a, b in got_lost if x == s)
        left_n = sum(s.end - st for x, st in got_left if x == s)
        assert lost_n + left_n == s.end - start


def test_progress_metadata_carries_the_losses():
    meta = progress_metadata(120, [(10, 40), (50, 60)])
    assert meta == "lpd1;n=120;lost=10-40,50-60"
    assert parse_progress_metadata(meta) == 120 and parse_progress_lost(meta) == ((10, 40), (50, 60))
    assert parse_progress_lost("lpd1;n=3") == () and parse_progress_lost("garbage;lost=1-2") == ()
    assert merge_ranges([(50, 60), (10, 40), (40, 45)]) == ((10, 45), (50, 60))


def test_a_recorded_loss_becomes_a_dataloss_status_event_and_count_once():
    running = RUNNING  # sub-ranges p0 [200, 600) and [600, 1000)
    o = obs(job=JobObservation(JobState.ACTIVE, 1), progress={(0, 0): (450, 0)})
    o = dataclasses.replace(o, lost={(0, 0): ((200, 450),)})
    a = next_action(spec(), running, o, NOW)
    assert a.kind is Kind.WRITE_STATUS and a.lost_records == 250
    assert a.event is not None and a.event[:2] == ("Warning", "DataLoss")
    assert "partition 0: offsets [200, 450)" in a.event[2]
    assert a.status.lost == ((0, 200, 450),) and a.status.to_dict()["recordsLost"] == 250
    assert h.DrainStatus.from_dict(a.status.to_dict()).lost == ((0, 200, 450),)  # survives a restart
    cond = h.data_loss_condition(a.status)
    assert cond[0] == "True" and "partition 0: offsets [200, 450)" in cond[2]
    # next cycle, same observation: recorded already, no second event or count
    again = next_action(spec(), a.status, o, NOW + 5)
    assert again.lost_records == 0 and (again.event is None or again.event[1] != "DataLoss")
    assert h.data_loss_condition(running)[0] == "False"


def test_a_loss_outside_the_drains_sub_ranges_is_ignored():
    o = dataclasses.replace(
        obs(job=JobObservation(JobState.ACTIVE, 1)), lost={(0, 7): ((0, 10),), (0, 0): ((0, 100),)}
    )
    assert h.lost_ranges(RUNNING, o.lost) == ()  # index 7 unknown; [0, 100) is below the sub-range [200, 600)


def test_partitions_about_to_expire_are_planned_first():
    loads = [
        PartitionLoad(0, 5000, 10.0, 0, 5000),
        PartitionLoad(1, 5000, 10.0, 0, 5000),
        PartitionLoad(2, 5000, 10.0, 0, 5000),
    ]
    ages = {0: 100.0, 1: 3500.0, 2: 50.0}
    order = [ld.partition for ld in expiring_first(loads, ages, retention_s=3600.0, target_s=300.0)]
    assert order == [1, 0, 2]  # p1 expires within the target: first; the rest keep their order
    assert [ld.partition for ld in expiring_first(loads, ages, None, 300.0)] == [0, 1, 2]


def test_the_executor_writes_the_loss_emits_one_event_counts_it_and_reports_the_condition():
    from prometheus_client import REGISTRY

    from tests.unit.test_drain_executor import FakeExecutor, ctx, world0

    log: list = []
    w = world0()
    ex = FakeExecutor(log, w)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    w["mailbox"][0] = w["mailbox"][0].with_ack(100)
    w["committed"][0] = 500
    ex.reconcile(ctx(log, w, w["status"]))  # handed off [100, 500) and launched
    assert w["status"]["phase"] == "Running"
    before = (
        REGISTRY.get_sample_value("lagpilot_drain_records_lost_total", {"namespace": "ns", "name": "orders"})
        or 0
    )
    first = w["status"]["subRanges"][0]
    w["progress"] = {(0, first["index"]): (first["start"] + 50, 0)}
    w["lost"] = {(0, first["index"]): ((first["start"], first["start"] + 50),)}
    log.clear()
    r = ex.reconcile(ctx(log, w, w["status"]))
    assert [e for e in log if e[0] == "event"] == [("event", "DataLoss")]
    assert (
        r.status["lostRanges"] == [{"partition": 0, "start": 100, "end": 150}]
        and r.status["recordsLost"] == 50
    )
    assert r.data_loss[0] == "True" and "partition 0: offsets [100, 150)" in r.data_loss[2]
    after = REGISTRY.get_sample_value(
        "lagpilot_drain_records_lost_total", {"namespace": "ns", "name": "orders"}
    )
    assert after == before + 50
    log.clear()
    r2 = ex.reconcile(ctx(log, w, w["status"]))  # recorded: no second event, no second count
    assert not [e for e in log if e[0] == "event" and e[1] == "DataLoss"]
    assert (
        REGISTRY.get_sample_value("lagpilot_drain_records_lost_total", {"namespace": "ns", "name": "orders"})
        == after
    )
    assert r2.data_loss[0] == "True"


@pytest.mark.parametrize(
    "configs, want",
    [
        ({"retention.ms": "604800000"}, 604800.0),
        ({"retention.ms": "-1"}, None),
        ({}, None),
        ({"retention.ms": "x"}, None),
    ],
)
def test_retention_seconds_from_topic_configs(configs, want):
    from lagpilot.observe.topic_retention import retention_seconds

    assert retention_seconds(configs) == want


def test_an_expiring_regrowing_partition_is_due_at_once():
    """A regrowing partition waits for its trigger, unless retention would delete its oldest record
    within the target: then it is planned now."""
    from lagpilot.decide.drain_policy import DrainPolicy, drain_need

    policy = DrainPolicy(enabled=True)
    loads = [PartitionLoad(0, 20000, 150.0, 0, 20000), PartitionLoad(1, 10, 1.0, 0, 10)]
    kwargs = dict(
        group_replicas=2, target_s=300.0, sla_s=600.0, policy=policy, now_s=0.0, oldest_age_s={0: 10.0}
    )
    base = drain_need(loads, 100.0, **kwargs)
    soon = drain_need(loads, 100.0, retention_s=200.0, **kwargs)
    assert base is None  # regrowing p0 is not due yet without retention
    assert soon is not None and soon.partitions == (0,)  # with its oldest record expiring: planned now
    assert any("expires within the target" in n for n in soon.notes)
