"""Lag arithmetic on fetched offsets: table-driven."""

from __future__ import annotations

import pytest

from lagpilot.decide.lag import (
    PartitionOffsets,
    lost_records,
    oldest_unprocessed_age_s,
    partition_lag,
    snapshot,
)

LAG_CASES = [
    # id, low, end, committed, lag, lost
    ("caught-up", 0, 100, 100, 0, 0),
    ("behind", 0, 100, 40, 60, 0),
    ("never-committed-reads-from-low", 30, 100, None, 70, 0),
    ("retention-deleted-unconsumed", 50, 100, 20, 50, 30),
    ("committed-past-end-topic-recreated", 0, 10, 500, 0, 0),
    ("empty-partition", 0, 0, None, 0, 0),
    ("committed-equals-low", 50, 80, 50, 30, 0),
]


@pytest.mark.parametrize(
    "low,end,committed,lag,lost", [c[1:] for c in LAG_CASES], ids=[c[0] for c in LAG_CASES]
)
def test_partition_lag_and_loss(low: int, end: int, committed: int | None, lag: int, lost: int) -> None:
    p = PartitionOffsets(0, low, end, committed)
    assert partition_lag(p) == lag
    assert lost_records(p) == lost


def test_snapshot_totals_sorted_and_loss() -> None:
    snap = snapshot(
        10.0,
        [PartitionOffsets(2, 0, 10, 5), PartitionOffsets(0, 50, 100, 20), PartitionOffsets(1, 0, 7, None)],
    )
    assert [p.partition for p in snap.partitions] == [0, 1, 2]
    assert snap.total_lag == 50 + 7 + 5
    assert snap.max_partition_lag == 50
    assert snap.data_loss_records == 30


def test_oldest_unprocessed_age() -> None:
    assert (
        oldest_unprocessed_age_s(PartitionOffsets(0, 0, 10, 5, oldest_unprocessed_ts_s=90.0), 100.0) == 10.0
    )
    assert (
        oldest_unprocessed_age_s(PartitionOffsets(0, 0, 10, 10, oldest_unprocessed_ts_s=90.0), 100.0) is None
    )
    assert oldest_unprocessed_age_s(PartitionOffsets(0, 0, 10, 5), 100.0) is None
