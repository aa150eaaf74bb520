"""Issue 25: a busy drain pays every slot it is launched with until its last lane ends (the driver
keeps its parallelism, docs/drain.md "Busy drains"), so a task that does not shorten the drain's
longest lane is an idle slot, not a faster drain.

Step s105 at a 20 s start-up (3 partitions at 1.36x the group, every ~14 min a drain of three equal
backlogs of ~38 k records): each drain was launched with 4 slots, two on p0 and one each on p1 and
p2; p0's lane finished in half the time and its two slots sat idle until the others' ended: 21
drains paid 401 task-minutes for 278 of work (2,323 minutes against KEDA's 2,220). Cold drains pay
a task only until it finishes, so there the extra task cost just its start-up."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide.drain_policy import DrainPolicy, drain_need, shortest_lanes_only
from lagpilot.decide.projection import PartitionLoad

CAP = 137.0


@pytest.mark.parametrize(
    "busy,lags,want",
    [
        # step s105 at 750 s: three equal backlogs, 211 s old; one slot each (the drain ends as soon)
        (True, [38_142.0, 38_142.0, 38_142.0], [1, 1, 1]),
        # p0's third task would leave its lane at 25 k records against the others' 38 k: two do
        (True, [76_000.0, 38_000.0, 38_000.0], [2, 1, 1]),
        # p0's second task keeps its lane (25 k) from becoming the longest (50 k): kept
        (True, [50_000.0, 38_142.0, 38_142.0], [2, 1, 1]),
        # a cold drain pays a task only until it ends: the count and spread as before
        (False, [38_142.0, 38_142.0, 38_142.0], [2, 1, 1]),
    ],
)
def test_a_busy_drain_is_launched_without_slots_that_would_idle_until_its_longest_lane_ends(
    busy: bool, lags: list[float], want: list[int]
) -> None:
    policy = DrainPolicy(start_up_s=20.0, handoff_s=1.0, max_tasks=16, busy=busy, min_records_per_task=500)
    loads = [PartitionLoad(p, lag, 180.0) for p, lag in enumerate(lags)]
    need = drain_need(
        loads,
        CAP,
        group_replicas=3,
        target_s=480.0,
        sla_s=600.0,
        policy=policy,
        now_s=750.0,
        oldest_age_s={p: 211.0 for p in range(3)},
    )
    assert need is not None
    assert [r.tasks for r in need.ranges] == want
    if busy:
        # the Job's slots: the tasks (the partitions' regrowth, 0.36 of a task each, needs no more)
        assert need.slots == sum(want)
        longest = max(r.records / r.tasks for r in need.ranges)
        # no partition could give up a task without lengthening the drain beyond its longest lane
        assert all(r.tasks == 1 or r.records / (r.tasks - 1) > longest for r in need.ranges)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(500.0, 200_000.0), st.integers(0, 8), st.integers(1, 6)), min_size=1, max_size=8
    )
)
def test_shortest_lanes_only_keeps_the_longest_lane_and_the_needs(
    parts: list[tuple[float, int, int]],
) -> None:
    """Never more tasks than given, never fewer than the need (within what was given), the drain's
    longest lane unchanged, and no partition above its need could give up a task without its lane
    becoming longer than the drain's longest."""
    records = [r for r, _, _ in parts]
    alloc = [a for _, a, _ in parts]
    needs = [n for _, _, n in parts]
    out = shortest_lanes_only(records, alloc, needs)
    assert all(min(a, n) <= o <= a for o, a, n in zip(out, alloc, needs, strict=True))
    given_lanes = [r / a for r, a in zip(records, alloc, strict=True) if a > 0]
    if not given_lanes:
        assert out == alloc
        return
    longest = max(given_lanes)
    assert max(r / o for r, o in zip(records, out, strict=True) if o > 0) == pytest.approx(longest)
    assert all(
        o <= n or r / (o - 1) > longest * (1 - 1e-9) for r, o, n in zip(records, out, needs, strict=True)
    )
