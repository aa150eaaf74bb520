"""Issue 25: a busy drain's task slots (``status.drain.slots``) are recorded by the operator's own
launch, and are the Job's true parallelism.

A busy drain's Job keeps the parallelism it was launched with (its driver's session: next splits run
on those slots, docs/drain.md "Busy drains"); the planner budgets next splits within
``status.drain.slots`` (``step.busy_drain_of``). The operator's launch (``handoff._launch``) records
that figure, computed by the one function the Job manifest uses (``drain_manifests.drain_plan_for``),
so the two always agree."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.act.drain_manifests import drain_plan_for
from lagpilot.decide import handoff as h
from lagpilot.decide.drain_policy import (
    BURST_SPARE,
    BusyDrain,
    DrainPolicy,
    Lane,
    _holds_first,
    burst_need,
    burst_slots,
    drain_need,
    extension_need,
)
from lagpilot.decide.handoff import (
    DrainStatus,
    JobObservation,
    JobState,
    Kind,
    Observed,
    Offsets,
    Phase,
    SubProgress,
)
from lagpilot.decide.projection import PartitionLoad
from lagpilot.decide.step import busy_drain_of
from lagpilot.spec import parse_spec

NOW = 1_000_000.0


def spec(**drain: object):
    raw = {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "t",
        "groupId": "g",
        "batch": {"maxRecords": 10},
        "drain": {"maxTasks": 16, **drain},
    }
    return parse_spec(raw)


SUBS = (SubProgress(0, 0, 200, 600, 200), SubProgress(0, 1, 600, 1000, 600), SubProgress(1, 0, 0, 300, 0))
HANDED = DrainStatus(
    id=4,
    phase=Phase.HANDED_OFF,
    busy=True,
    planned_at=NOW - 10,
    published_at=NOW - 9,
    handed_off_at=NOW - 1,
    hand_off_path=h.PATH_ACK,
    ranges=(h.PartitionRange(0, 1000, 200, 2), h.PartitionRange(1, 300, 0, 1)),
    sub_ranges=SUBS,
)


def obs(job: JobObservation | None = None) -> Observed:
    return Observed(
        generation=1,
        offsets={0: Offsets(1000, 0, 1200), 1: Offsets(300, 0, 300)},
        group_empty=None,
        replicas=2,
        job=job,
        busy=True,
    )


@pytest.mark.parametrize("max_tasks,want", [(16, 3), (2, 2)])
def test_the_launch_of_a_busy_drain_records_the_jobs_parallelism_as_its_slots(
    max_tasks: int, want: int
) -> None:
    s = spec(maxTasks=max_tasks)
    a = h.next_action(s, HANDED, obs(), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None
    assert a.status.slots == want
    # the Job created from the status the launch writes runs exactly that many tasks at once
    assert drain_plan_for(s, a.status, "uid").parallelism == a.status.slots
    # and the planner sees those slots (not one per unfinished sub-range, not maxTasks)
    b = busy_drain_of([a.status])
    assert b is not None and b.slots == want


def test_a_retried_busy_drain_records_the_slots_of_its_new_job() -> None:
    s = spec()
    failed = dataclasses.replace(
        HANDED,
        phase=Phase.RUNNING,
        attempt=1,
        started_at=NOW - 1,
        progress_at=NOW - 1,
        slots=0,
        retry_at=NOW - 1,
    )  # launched by an operator that wrote none
    a = h.next_action(s, failed, obs(JobObservation(JobState.FAILED, 0)), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None and a.attempt == 2
    assert a.status.slots == drain_plan_for(s, a.status, "uid").parallelism == 3


def test_a_drain_that_is_not_busy_records_no_slots() -> None:
    s = spec()
    a = h.next_action(s, dataclasses.replace(HANDED, busy=False), obs(), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None
    assert a.status.slots == 0 and "slots" not in {k for k, v in a.status.to_dict().items() if v is not None}


def test_the_simulator_launches_with_the_slots_the_operators_launch_records() -> None:
    """The simulated executor holds exactly the slots ``handoff.job_slots`` gives the status it
    launches (no figure of its own)."""
    from tests.unit.test_sim_busy_driver import P, _burst, _need, _run, _world

    w = _world()
    t = _burst(w, 8_000.0)
    w.plan_drain(_need({0: 3}), t)
    _run(w, t, 20.0)
    d = w.sim_drains[0]
    assert d.status.phase is Phase.RUNNING
    assert d.status.slots == h.job_slots(d.status, P.max_drain_tasks) == 3 == len(d.tasks)


# ---- issue 25: a busy drain is launched with the slots its partitions need over the burst ----------

CAP = 150.0
BUSY20 = DrainPolicy(start_up_s=20.0, handoff_s=1.0, max_tasks=16, busy=True)


@pytest.mark.parametrize(
    "need,rate,share,high,want",
    [
        # rolling-hot s100 (t = 23,490 s): 865/s on a consumer share of 50/s; its need for this split and
        # the next (partition_need) 6, its regrowth with 20 % spare 815 x 1.2 / 150 = 6.52 -> 7
        (6, 865.0, 50.0, 16, 7),
        (11, 865.0, 50.0, 16, 11),  # a larger backlog's need stands
        (6, 865.0, 50.0, 4, 4),  # within the budget
        (2, 0.0, 150.0, 16, 2),  # a backlog the consumer's share holds: its need only
        (0, 0.0, 150.0, 16, 1),  # one at least
        (1, 400.0, 150.0, 16, 2),  # 250 x 1.2 / 150 = 2 exactly
    ],
)
def test_burst_need_table(need: int, rate: float, share: float, high: int, want: int) -> None:
    assert burst_need(need, rate, share, CAP, high) == want


@settings(max_examples=300, deadline=None)
@given(
    need=st.integers(0, 40),
    rate=st.floats(0, 5000),
    share=st.floats(1, 300),
    high=st.integers(1, 32),
    more=st.floats(0, 1000),
    extra=st.integers(0, 10),
)
def test_burst_need_is_bounded_holds_the_regrowth_and_is_monotone(
    need: int, rate: float, share: float, high: int, more: float, extra: int
) -> None:
    n = burst_need(need, rate, share, CAP, high)
    assert 1 <= n <= high and n >= min(max(1, need), high)
    if n < high:  # below the budget: the regrowth held with the spare, whatever the backlog asked
        assert n * CAP >= BURST_SPARE * max(0.0, rate - share) - 1e-6
    assert burst_need(need, rate + more, share, CAP, high) >= n
    assert burst_need(need + extra, rate, share, CAP, high) >= n


def test_burst_slots_keep_room_for_the_partitions_left_to_the_group() -> None:
    # 7 tasks for the hot partition, five neighbours at 120/s on a share of 50/s: 5 x 70 x 1.1 / 150 -> 3
    assert burst_slots(7, [120.0] * 5, 50.0, CAP, 16) == 10
    # at 61/s: 0.4 of a task in all, taken from the hot partition's spare (nothing kept for them)
    assert burst_slots(7, [61.0] * 5, 50.0, CAP, 16) == 7
    assert burst_slots(7, [40.0] * 5, 50.0, CAP, 16) == 7  # they hold
    assert burst_slots(7, [600.0] * 5, 50.0, CAP, 16) == 16  # within the budget


def test_a_busy_first_drain_asks_for_the_slots_of_the_burst() -> None:
    """rolling-hot s100 at 20 s (t = 23,490 s), the loads as the simulator saw them: the hot
    partition gets its need over the burst as sub-ranges, and the Job keeps a slot for its
    neighbours' regrowth (they wait for a next split)."""
    rates = [61.0, 61.0, 61.0, 865.0, 61.0, 61.0]
    lags = [996.0, 996.0, 996.0, 73_327.0, 996.0, 996.0]
    loads = [PartitionLoad(p, lag, r) for p, (r, lag) in enumerate(zip(rates, lags, strict=True))]
    ages = {p: 90.0 for p in range(6)}
    need = drain_need(
        loads,
        CAP,
        group_replicas=2,
        target_s=240.0,
        sla_s=300.0,
        policy=BUSY20,
        now_s=23_490.0,
        oldest_age_s=ages,
    )
    assert need is not None and not need.extension
    assert need.tasks_by_partition[3] >= 7  # its regrowth (5.4 tasks) with 20 % to spare
    assert need.slots >= need.tasks and need.slots == burst_slots(
        need.tasks, [r for p, r in enumerate(rates) if p not in need.partitions], 50.0, CAP, 16
    )
    assert need.to_dict()["slots"] == need.slots
    # a drain that is not busy asks for no slots (its Job ends with its range)
    plain = drain_need(
        loads,
        CAP,
        group_replicas=2,
        target_s=240.0,
        sla_s=300.0,
        now_s=23_490.0,
        oldest_age_s=ages,
        policy=DrainPolicy(start_up_s=20.0, handoff_s=1.0, max_tasks=16),
    )
    assert plain is not None and plain.slots == 0 and "slots" not in plain.to_dict()


def test_the_planned_slots_are_recorded_and_become_the_jobs_parallelism() -> None:
    s = spec()
    o = Observed(
        generation=1,
        offsets={0: Offsets(200, 0, 1000)},
        group_empty=None,
        replicas=2,
        wanted=(0,),
        tasks={0: 2},
        slots=12,
        busy=True,
    )
    planned = h.next_action(s, None, o, NOW)
    assert planned.status is not None and planned.status.phase is Phase.PLANNED and planned.status.slots == 12
    handed = dataclasses.replace(
        planned.status,
        phase=Phase.HANDED_OFF,
        handed_off_at=NOW,
        published_at=NOW,
        ranges=(h.PartitionRange(0, 1000, 200, 2),),
        sub_ranges=(SubProgress(0, 0, 200, 600, 200), SubProgress(0, 1, 600, 1000, 600)),
    )
    a = h.next_action(s, handed, obs(), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None
    assert a.status.slots == drain_plan_for(s, a.status, "uid").parallelism == 12
    # never more than maxTasks, never fewer than its sub-ranges
    small = h.next_action(spec(maxTasks=8), handed, obs(), NOW)
    assert small.status is not None and small.status.slots == 8
    few = h.next_action(s, dataclasses.replace(handed, slots=1), obs(), NOW)
    assert few.status is not None and few.status.slots == 2
    # a drain that is not busy records none
    off = h.next_action(s, None, dataclasses.replace(o, busy=False), NOW)
    assert off.status is not None and off.status.slots == 0


def test_the_simulator_launches_a_busy_drain_with_the_planned_slots() -> None:
    from types import SimpleNamespace

    from tests.unit.test_sim_busy_driver import P, _burst, _need, _run, _world

    w = _world()
    t = _burst(w, 8_000.0)
    need = _need({0: 3})
    w.plan_drain(SimpleNamespace(**{**need.__dict__, "slots": 7}), t)
    _run(w, t, 20.0)
    d = w.sim_drains[0]
    assert d.status.slots == h.job_slots(d.status, P.max_drain_tasks) == 7 == len(d.tasks)
    # the four slots without a sub-range are held (and paid) from launch, idle until a next split
    assert sum(1 for task in d.tasks if task.queue.total > 0) == 3


# ---- next splits within the slots the drain holds; a drain the load outgrew is handed back ---------


BUSY90 = DrainPolicy(start_up_s=90.0, handoff_s=1.0, max_tasks=16, busy=True)


def _loads(rates: list[float], lags: list[float]) -> list[PartitionLoad]:
    return [PartitionLoad(p, lag, r) for p, (r, lag) in enumerate(zip(rates, lags, strict=True))]


def test_a_drain_whose_slots_cannot_hold_the_regrowth_takes_no_next_split() -> None:
    """Two partitions at 6x a consumer regrow 10 tasks' worth behind every split; a 4-slot drain
    cannot hold that however its next splits are cut: no next split (its partitions are handed
    back at its next part boundary) and the next drain is planned with the slots the load needs."""
    loads = _loads([900.0, 900.0, 50.0], [12_000.0, 12_000.0, 0.0])
    lanes = (Lane(0, 0, 0.0), Lane(1, 0, 0.0), Lane(2, 0, 0.0))
    kw = dict(group_replicas=3, target_s=270.0, policy=BUSY90, oldest_age_s={0: 15.0, 1: 15.0})
    assert extension_need(loads, CAP, BusyDrain(lanes, slots=4), **kw) is None  # type: ignore[arg-type]
    # with the slots of maxTasks nothing bigger can follow: it splits within them
    need = extension_need(loads, CAP, BusyDrain(lanes, slots=16), **kw)  # type: ignore[arg-type]
    assert need is not None and need.partitions == (0, 1) and need.tasks <= 16
    # the new drain, planned once this one ended, asks for the slots of the regrowth (10 tasks + spare)
    first = drain_need(loads, CAP, sla_s=300.0, now_s=0.0, **{**kw, "oldest_age_s": {0: 60.0, 1: 60.0}})
    assert first is not None and first.slots >= 12


@pytest.mark.parametrize(
    "holds,floors,steady,budget,want",
    [
        # a hot partition (6 to hold, 6 to carry) and five neighbours a tenth of a task over their share:
        # the hot one's carrying tasks first, then one neighbour, the others wait for the next split
        ([6, 1, 1, 1, 1, 1], [6, 1, 1, 1, 1, 1], [True] + [False] * 5, 7, [6, 1, 0, 0, 0, 0]),
        # its spare (6 to hold, 5 to carry) comes after a due neighbour's single slot
        ([6, 1], [5, 1], [True, False], 6, [5, 1]),
        ([6, 1], [5, 1], [True, False], 9, [6, 1]),  # everything fits
        ([4, 4], [3, 3], [True, True], 7, [4, 3]),  # two hot ones: both carried, the spare in order
        ([1, 1, 1], [0, 0, 0], [False] * 3, 2, [1, 1, 0]),
        # every partition hot and the free slots short of what carries them (a burst above what the
        # slots hold): each still its carrying sub-ranges, which queue on the slots; no neighbour joins
        ([4, 4, 4, 1], [3, 3, 3, 1], [True, True, True, False], 7, [3, 3, 3, 0]),
    ],
)
def test_slots_are_shared_carrying_first(
    holds: list[int], floors: list[int], steady: list[bool], budget: int, want: list[int]
) -> None:
    assert _holds_first(holds, floors, steady, budget) == want
