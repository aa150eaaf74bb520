"""Issue 25 item 2: drains that stay busy across a burst (pure planner + simulator).

A running busy drain takes the next split of its partitions without a new start-up while the capped
group cannot hold them (``drain_policy.extension_need``), and its partitions are handed back (no next
split) once the group alone meets the target. The simulator models the executor side: the next
split's records are queued on the drain's own task slots (no start-up), a slot idle for a whole poll
is released, the drain ends when it took no next split and has no work left (after the operator's
hold: tests/unit/test_busy_drain_hand_back.py)."""

from __future__ import annotations

import math

import pytest

from bench import planner_eval
from lagpilot.decide import handoff
from lagpilot.decide.drain_policy import BusyDrain, DrainPolicy, Lane, drain_need, extension_need
from lagpilot.decide.projection import PartitionLoad
from lagpilot.decide.step import busy_drain_of, drain_view
from lagpilot.sim import tracegen
from lagpilot.sim.params import SimParams
from lagpilot.sim.policies import run_policy
from lagpilot.sim.trace import trace_from_rows

CAP = 150.0
POLICY = DrainPolicy(start_up_s=90.0, handoff_s=1.0, max_tasks=16, busy=True)


def _loads(rates: list[float], lags: list[float]) -> list[PartitionLoad]:
    return [PartitionLoad(p, lag, r) for p, (r, lag) in enumerate(zip(rates, lags, strict=False))]


def test_no_next_split_once_the_group_alone_meets_the_target() -> None:
    # the burst is over: 2 partitions at half a consumer each, small backlogs
    loads = _loads([75.0, 75.0], [3000.0, 3000.0])
    busy = BusyDrain((Lane(0, 0, 0.0), Lane(1, 0, 0.0)), slots=6)
    assert extension_need(loads, CAP, busy, group_replicas=2, target_s=270.0, policy=POLICY) is None


def test_a_hot_partition_takes_its_next_split_without_a_start_up_when_its_tasks_run_dry() -> None:
    # p0 at 6x a consumer (regrows behind every split), p1 quiet; p0's tasks are done
    loads = _loads([900.0, 50.0], [12_000.0, 200.0])
    busy = BusyDrain((Lane(0, 0, 0.0), Lane(1, 0, 0.0)), slots=8)
    need = extension_need(
        loads, CAP, busy, group_replicas=2, target_s=270.0, policy=POLICY, oldest_age_s={0: 15.0, 1: 3.0}
    )
    assert need is not None and need.extension and need.partitions == (0,)
    (r,) = need.ranges
    # enough tasks to hold its regrowth ((900 - 150) / 150 = 5, 10 % spare), within the drain's slots
    assert 6 <= r.tasks <= 8
    # no start-up: the hand-off pause and the work only
    assert r.expected_s == pytest.approx(1.0 + 12_000.0 / (r.tasks * CAP))
    assert need.to_dict()["extension"] is True


def test_a_partition_whose_tasks_hold_work_beyond_the_next_poll_waits() -> None:
    loads = _loads([900.0, 50.0], [12_000.0, 200.0])
    # 6 tasks with 6 x 150 x 20 s of work left: more than a poll (15 s) + the hand-off (1 s)
    busy = BusyDrain((Lane(0, 6, 6 * CAP * 20.0), Lane(1, 0, 0.0)), slots=6)
    assert (
        extension_need(
            loads, CAP, busy, group_replicas=2, target_s=270.0, policy=POLICY, oldest_age_s={0: 15.0}
        )
        is None
    )
    # 10 s of work left: split now, the new range queues behind it (the tasks never wait)
    busy = BusyDrain((Lane(0, 6, 6 * CAP * 10.0), Lane(1, 0, 0.0)), slots=6)
    need = extension_need(
        loads, CAP, busy, group_replicas=2, target_s=270.0, policy=POLICY, oldest_age_s={0: 15.0}
    )
    assert need is not None and need.partitions == (0,)


def test_a_next_split_stays_within_the_drains_slots() -> None:
    """The driver keeps the slots its Job was launched with (``status.drain.slots``, recorded by
    the launch: ``handoff.job_slots``): a next split is budgeted within them less the tasks busy on
    other partitions (before, within maxTasks as if tasks were added: rolling-hot s100 at 20 s asked
    7-15 of a 6-slot drain, 0.9819 within). Tests of the launch's slots, the hand-back when they
    cannot hold the load and the order slots are shared in: test_busy_drain_slots.py."""
    loads = _loads([900.0, 300.0, 50.0], [12_000.0, 12_000.0, 0.0])
    busy = BusyDrain((Lane(0, 1, 0.0), Lane(1, 3, 3 * CAP * 40.0), Lane(2, 0, 0.0)), slots=9)
    need = extension_need(
        loads, CAP, busy, group_replicas=3, target_s=270.0, policy=POLICY, oldest_age_s={0: 15.0, 1: 40.0}
    )
    assert need is not None and need.partitions == (0,)
    assert 5 <= need.tasks <= 9 - 3  # its regrowth (750 / 150), within the slots less the 3 busy on p1


def test_a_partition_that_needs_a_new_task_waits_until_due() -> None:
    # p0 just over its consumer's share (a tenth of a task): no task kept for it, and a new one
    # (start-up) only once its oldest record nears the regrowing trigger (half the SLA)
    loads = _loads([900.0, 165.0], [12_000.0, 900.0])
    busy = BusyDrain((Lane(0, 0, 0.0), Lane(1, 0, 0.0)), slots=6)
    early = extension_need(
        loads,
        CAP,
        busy,
        group_replicas=2,
        target_s=270.0,
        sla_s=300.0,
        policy=POLICY,
        oldest_age_s={0: 15.0, 1: 5.0},
    )
    assert early is not None and early.partitions == (0,)
    assert any("partition 1: not yet due" in n for n in early.notes)
    late = extension_need(
        loads,
        CAP,
        busy,
        group_replicas=2,
        target_s=270.0,
        sla_s=300.0,
        policy=POLICY,
        oldest_age_s={0: 15.0, 1: 60.0},
    )
    assert late is not None and late.partitions == (0, 1)


def test_a_partition_the_group_holds_is_handed_back() -> None:
    # p1's burst ended (a third of a consumer, a backlog its consumer clears in seconds): no next
    # split for it, while p0 still regrows
    loads = _loads([900.0, 50.0], [12_000.0, 1_000.0])
    busy = BusyDrain((Lane(0, 0, 0.0), Lane(1, 0, 0.0)), slots=8)
    need = extension_need(
        loads, CAP, busy, group_replicas=2, target_s=270.0, policy=POLICY, oldest_age_s={0: 15.0, 1: 20.0}
    )
    assert need is not None and 1 not in need.partitions


def test_drain_need_takes_the_busy_path_only_for_a_busy_policy() -> None:
    loads = _loads([900.0, 50.0], [12_000.0, 200.0])
    busy = BusyDrain((Lane(0, 0, 0.0), Lane(1, 0, 0.0)), slots=8)
    kw = dict(
        group_replicas=2,
        target_s=270.0,
        sla_s=300.0,
        now_s=1000.0,
        drains_in_flight=1,
        tasks_in_flight=8,
        oldest_age_s={0: 15.0},
        busy_drain=busy,
    )
    need = drain_need(loads, CAP, policy=POLICY, **kw)  # type: ignore[arg-type]
    assert need is not None and need.extension
    # an executor without busy drains: one drain at a time, nothing while one runs (as before)
    off = DrainPolicy(start_up_s=90.0, handoff_s=1.0, max_tasks=16)
    assert drain_need(loads, CAP, policy=off, **kw) is None  # type: ignore[arg-type]


def _running(**kw: object) -> handoff.DrainStatus:
    subs = (
        handoff.SubProgress(0, 0, 100, 200, 200),
        handoff.SubProgress(0, 1, 200, 300, 250),
        handoff.SubProgress(1, 2, 0, 50, 50),
    )
    base = dict(
        id=3,
        phase=handoff.Phase.RUNNING,
        busy=True,
        slots=4,
        handed_off_at=1.0,
        ranges=(handoff.PartitionRange(0, 300, 100, 2), handoff.PartitionRange(1, 50, 0, 1)),
        sub_ranges=subs,
    )
    base.update(kw)
    return handoff.DrainStatus(**base)  # type: ignore[arg-type]


def test_the_step_sees_a_running_busy_drain_as_lanes() -> None:
    d = _running()
    b = busy_drain_of([d])
    assert b is not None and b.slots == 4
    assert b.by_partition == {0: Lane(0, 1, 50.0), 1: Lane(1, 0, 0.0)}
    assert b.free_slots == 3
    view = drain_view([d], None)
    assert view["busy_drain"] == b and view["tasks_in_flight"] == 4  # the slots it holds
    # a next split in hand-off: its partitions are busy, no other split until it is handed off
    ext = _running(extension=handoff.Extension(1, (handoff.PartitionRange(0, 400),), planned_at=5.0))
    assert busy_drain_of([ext]) is None and drain_view([ext], None)["busy_partitions"] == (0,)
    # not busy, not running, or a retry pending: no next split
    assert busy_drain_of([_running(busy=False)]) is None
    assert busy_drain_of([_running(phase=handoff.Phase.HANDED_OFF)]) is None
    assert busy_drain_of([_running(retry_at=9.0)]) is None


def _trace(kind: str, seed: int):
    fam = tracegen.SUITE[kind]
    return trace_from_rows(tracegen.generate(kind, seed, fam.partitions, fam.capacity))


def _params(kind: str, start: float, busy: bool) -> SimParams:
    fam = tracegen.SUITE[kind]
    return SimParams(
        partitions=fam.partitions,
        capacity=fam.capacity,
        sla_s=fam.sla_s,
        pod_start_s=30.0,
        handoff_pause_s=1.0,
        max_drain_tasks=16,
        drain_start_s=start,
        busy_drains=busy,
    )


def _run(kind: str, seed: int, start: float, busy: bool):
    return run_policy(_trace(kind, seed), _params(kind, start, busy), "lagpilot")


def test_long_flash_at_a_90s_start_up_busy_drains_keep_the_sla_where_cold_drains_do_not() -> None:
    """long-flash s100 (every partition at 2-4x the capped group): one drain at a time pays its
    90 s start-up every cycle (0.976 within); a busy drain pays it once a burst. It holds its task
    slots for the whole burst, also between next parts (the real driver: test_sim_busy_driver.py),
    so its task minutes are above the cold drains' (512 vs 434), its total still far below KEDA's."""
    cold, busy = _run("long-flash", 100, 90.0, False), _run("long-flash", 100, 90.0, True)
    assert cold.within_sla_fraction < 0.99
    assert busy.within_sla_fraction >= 0.999
    # the next splits were taken by the running drains (one drain a burst, many splits each)
    assert busy.extra["busy_drain_splits"] > 10 * busy.drains and busy.drains <= 4
    assert busy.drain_task_minutes < 1.5 * cold.drain_task_minutes
    keda = run_policy(_trace("long-flash", 100), _params("long-flash", 90.0, True), "keda")
    assert busy.replica_minutes + busy.drain_task_minutes < keda.replica_minutes
    # every record accounted for: processed + waiting = produced (no range lost or taken twice)
    for r in (cold, busy):
        assert r.processed + r.remaining == pytest.approx(r.produced, rel=1e-9)


def test_rolling_hot_s100_at_a_20s_start_up_the_busy_drain_grows_with_the_load() -> None:
    """The real driver keeps the slots its Job was launched with (a next split adds no task): the
    drain is launched with the slots the burst needs (status.drain.slots, recorded at launch) and
    its next splits are budgeted within them (before: 0.9819 within, next splits sized within
    maxTasks on a 6-slot drain, and the operator never wrote the slots)."""
    busy = _run("rolling-hot", 100, 20.0, True)
    assert busy.within_sla_fraction >= 0.999, busy.within_sla_fraction
    assert busy.processed + busy.remaining == pytest.approx(busy.produced, rel=1e-9)


def test_rolling_hot_busy_drains_hand_the_partition_back_after_each_burst() -> None:
    """rolling-hot s5: the busy drain ends with each burst (its partitions handed back: the group
    alone holds them), so there is one drain per burst; cheaper than cold drains at 90 s."""
    cold, busy = _run("rolling-hot", 5, 90.0, False), _run("rolling-hot", 5, 90.0, True)
    assert busy.within_sla_fraction >= 0.999
    assert busy.drains < cold.drains and busy.extra["busy_drain_splits"] > 0
    assert busy.replica_minutes + busy.drain_task_minutes < cold.replica_minutes + cold.drain_task_minutes
    # after the trace's last burst no drain task runs (the last drain ended: handed back)
    assert busy.series["tasks"][-1] == 0
    assert busy.processed + busy.remaining == pytest.approx(busy.produced, rel=1e-9)


def test_planner_eval_takes_busy_drains() -> None:
    row = planner_eval.evaluate(["long-flash"], [100], [90.0], busy_drains=True)[0]
    assert row["busy_drains"] is True and row["busy_splits"] > 0 and row["within_ok"]
    assert math.isfinite(row["cost"]) and row["cost"] <= row["keda_cost"]


def test_a_busy_drain_and_its_next_split_round_trip_through_the_status_model() -> None:
    """status.drain.busy / round / slots / extension (lagpilot.model.status): what the hand-off
    writes validates against the CRD's model and reads back equal."""
    from lagpilot.model.status import validate_status

    ext = handoff.Extension(
        2,
        (handoff.PartitionRange(0, 900, None, 5),),
        planned_at=1_764_130_000.0,
        published_at=1_764_130_001.5,
    )
    d = _running(round=1, extension=ext, planned_at=1_764_129_000.0, handed_off_at=1_764_129_001.0)
    raw = {k: v for k, v in d.to_dict().items() if v is not None}
    model = validate_status({"drain": raw})
    assert model.drain is not None and model.drain.busy and model.drain.round == 1 and model.drain.slots == 4
    assert model.drain.extension is not None and model.drain.extension.round == 2
    back = handoff.DrainStatus.from_dict(model.model_dump(by_alias=True, exclude_none=True)["drain"])
    assert back == d
    # a drain that is not busy writes none of them (absent = false / 0 / none)
    plain = _running(busy=False, slots=0)
    written = {k for k, v in plain.to_dict().items() if v is not None}
    assert written.isdisjoint({"busy", "round", "slots", "extension"})
