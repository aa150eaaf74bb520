"""Issue 25: a busy drain's roll-over (``drain_policy._outgrown``) and the launch's slots
(``drain_policy.burst_need`` / ``burst_slots``) judge the burst by one rate and one task capacity.

A busy drain's Job keeps the slots it was launched with; when the load outgrows them the drain
takes no next split and the next drain is planned with more slots (a roll-over, one start-up). A
steady burst (rates constant) is what the launch was sized for: its slots hold every later split,
so it never rolls over."""
from __future__ import annotations

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from lagpilot.decide.drain_policy import (
    BusyDrain,
    DrainPolicy,
    Lane,
    _outgrown,
    _Split,
    drain_need,
)
from lagpilot.decide.projection import PartitionLoad, project

CAP = 150.0


def _steady(rates: list[float], share: float, age_s: float) -> tuple[list[PartitionLoad], dict[int, float]]:
    """Loads of a steady burst ``age_s`` after the group last held it: each partition's backlog is
    what its rate brought beyond its consumer's share, its oldest record as old as that backlog
    (the backlog shows the rate itself: lag / age = rate)."""
    loads, ages = [], {}
    for p, r in enumerate(rates):
        lag = max(0.0, r - share) * age_s
        loads.append(PartitionLoad(p, lag, r))
        if lag > 0:
            ages[p] = lag / r
    return loads, ages


@settings(max_examples=400, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 8 * CAP), min_size=2, max_size=8),
    group=st.integers(1, 8),
    max_tasks=st.integers(2, 32),
    start_up=st.sampled_from([20.0, 90.0]),
    onset=st.floats(30.0, 240.0),
    later=st.floats(5.0, 60.0),
    split_factor=st.one_of(st.none(), st.integers(1, 8)),
)
@example(rates=[270.0, 60.0, 60.0], group=3, max_tasks=16, start_up=20.0, onset=120.0, later=15.0,
         split_factor=None)
# the CR's splitFactor caps the launch at 2 tasks a partition: a hot partition at 5x its share gets 2
# slots, and no later drain can get more
@example(rates=[750.0, 50.0, 50.0], group=3, max_tasks=16, start_up=20.0, onset=120.0, later=15.0,
         split_factor=2)
def test_a_steady_burst_never_outgrows_the_slots_its_launch_was_sized_for(
        rates: list[float], group: int, max_tasks: int, start_up: float, onset: float, later: float,
        split_factor: int | None) -> None:
    policy = DrainPolicy(start_up_s=start_up, handoff_s=1.0, max_tasks=max_tasks, busy=True,
                         min_backlog_records=0, split_factor=split_factor)
    group = min(group, len(rates))
    share = CAP / project([PartitionLoad(p, 0.0, r) for p, r in enumerate(rates)], group, CAP).per_consumer_partitions
    loads, ages = _steady(rates, share, onset)
    need = drain_need(loads, CAP, group_replicas=group, target_s=240.0, sla_s=300.0, policy=policy,
                      now_s=0.0, oldest_age_s=ages)
    assume(need is not None and not need.extension)
    assert need is not None
    slots = min(max_tasks, max(need.slots, need.tasks))  # handoff.job_slots: the Job's parallelism
    # later in the same burst: every lane ran dry, the rates unchanged
    loads, ages = _steady(rates, share, later)
    lanes = tuple(Lane(p, 0, 0.0) for p in need.partitions)
    x = _Split(loads=loads, capacity=CAP, busy=BusyDrain(lanes, slots), policy=policy, target_s=240.0,
               sla_s=300.0, share=share, task_cap=CAP, ages=ages)
    assert not _outgrown(x), (need.tasks_by_partition, need.slots, slots)
