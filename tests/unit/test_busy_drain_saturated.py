"""Issue 25: a busy drain whose slots cannot carry the burst's regrowth (long-flash's peaks above
what 16 slots and the group process) splits its partitions in the order their records arrived.

When the regrowth of the partitions over their consumer's share keeps at least as many tasks busy
as the drain holds slots, every lane queues work and a partition whose own sub-ranges still hold
work beyond the next poll was never split until they ran dry, while its records aged in the group
(long-flash s101 at a 90 s start-up: partition 3 not split for 240 s, its next range 100 k records
whose oldest was 177 s old, cut into 3 sub-ranges of 222 s: 0.9976 within the SLA). The pure rule
(``drain_policy._split_picks``): once a next split is due, a partition the group cannot hold whose
oldest record is at least as old as the youngest pick's joins it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide.drain_policy import BusyDrain, DrainPolicy, Lane, extension_need
from lagpilot.decide.projection import PartitionLoad

CAP = 150.0
POLICY = DrainPolicy(start_up_s=90.0, handoff_s=1.0, max_tasks=16, busy=True)
# long-flash s101 at 8145 s (90 s start-up): p1's lanes are dry, p3's two sub-ranges hold ~90 s of
# work each, the others' lanes were split a poll ago; p3's oldest record in the group is the oldest
AGES = {0: 11.0, 1: 87.0, 2: 11.0, 3: 88.0, 4: 12.0, 5: 23.0}
LAGS = [6_155.0, 51_242.0, 6_328.0, 49_547.0, 7_699.0, 13_727.0]


def _lanes(p3_left: float) -> tuple[Lane, ...]:
    return (
        Lane(0, 3, 3 * 15_000.0),
        Lane(1, 1, 300.0),
        Lane(2, 3, 3 * 15_000.0),
        Lane(3, 2, p3_left),
        Lane(4, 4, 4 * 12_000.0),
        Lane(5, 3, 3 * 15_000.0),
    )


@pytest.mark.parametrize(
    "rate,p3_left,want",
    [
        # saturated: 6 x (590 - 150) / 150 = 17.6 tasks of regrowth > 16 slots. p1 is due (its lanes
        # run dry); p3's records are older than p1's: it joins the split although its lanes hold work
        (590.0, 2 * 13_851.0, (1, 3)),
        # the same lanes, a burst the slots carry (6 x (390 - 150) / 150 = 9.6 tasks < 16): p3 waits
        # until its own tasks run dry (a larger range later, as before)
        (390.0, 2 * 13_851.0, (1,)),
    ],
)
def test_a_saturated_busy_drain_splits_the_oldest_partitions_together(
    rate: float, p3_left: float, want: tuple[int, ...]
) -> None:
    loads = [PartitionLoad(p, lag, rate) for p, lag in enumerate(LAGS)]
    need = extension_need(
        loads,
        CAP,
        BusyDrain(_lanes(p3_left), slots=16),
        group_replicas=6,
        target_s=240.0,
        sla_s=300.0,
        policy=POLICY,
        oldest_age_s=AGES,
    )
    assert need is not None and need.extension
    assert need.partitions == want
    # every partition split gets sub-ranges (the ones beyond the free slots queue on the drain's slots)
    assert all(r.tasks >= 1 for r in need.ranges)


@settings(max_examples=200, deadline=None)
@given(
    rates=st.lists(st.floats(560.0, 900.0), min_size=6, max_size=6),
    lags=st.lists(st.floats(1_000.0, 120_000.0), min_size=6, max_size=6),
    ages=st.lists(st.floats(1.0, 250.0), min_size=6, max_size=6),
    left=st.lists(st.floats(0.0, 40_000.0), min_size=6, max_size=6),
    tasks=st.lists(st.integers(1, 4), min_size=6, max_size=6),
)
def test_a_saturated_split_leaves_out_no_partition_older_than_one_it_takes(
    rates: list[float], lags: list[float], ages: list[float], left: list[float], tasks: list[int]
) -> None:
    """Every partition at >= 560 records/s regrows >= 2.7 tasks (6 of them > 16 slots): saturated.
    Whatever its lanes hold, a partition the split leaves out is younger than every one it takes."""
    loads = [PartitionLoad(p, lag, r) for p, (lag, r) in enumerate(zip(lags, rates, strict=True))]
    lanes = tuple(Lane(p, n, n * x) for p, (n, x) in enumerate(zip(tasks, left, strict=True)))
    age_of = dict(enumerate(ages))
    need = extension_need(
        loads,
        CAP,
        BusyDrain(lanes, slots=16),
        group_replicas=6,
        target_s=240.0,
        sla_s=300.0,
        policy=POLICY,
        oldest_age_s=age_of,
    )
    if need is None:
        return
    youngest = min(age_of[p] for p in need.partitions)
    assert all(age_of[p] < youngest for p in range(6) if p not in need.partitions)
