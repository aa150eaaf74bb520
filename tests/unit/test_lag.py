"""Lag arithmetic on fetched offsets: table-driven."""
from __future__ import annotations

import math

import pytest

from lagpilot.lag import (
    PartitionOffsets,
    committed_beyond_end,
    format_capacity_metadata,
    lost_records,
    offsets_went_backwards,
    oldest_unprocessed_age_s,
    parse_capacity_metadata,
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


@pytest.mark.parametrize("low,end,committed,lag,lost", [c[1:] for c in LAG_CASES], ids=[c[0] for c in LAG_CASES])
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


BACKWARDS_CASES = [
    ("nothing-moved", (0, 100), (0, 120), []),
    ("end-decreased", (0, 100), (0, 5), [0]),
    ("low-decreased", (40, 100), (0, 100), [0]),
    ("retention-advanced-low", (0, 100), (60, 130), []),
]


@pytest.mark.parametrize("before,after,expected", [c[1:] for c in BACKWARDS_CASES], ids=[c[0] for c in BACKWARDS_CASES])
def test_offsets_went_backwards(before: tuple[int, int], after: tuple[int, int], expected: list[int]) -> None:
    prev = snapshot(0, [PartitionOffsets(0, before[0], before[1], None)])
    cur = snapshot(1, [PartitionOffsets(0, after[0], after[1], None)])
    assert offsets_went_backwards(prev, cur) == expected
    assert offsets_went_backwards(None, cur) == []


def test_committed_beyond_end() -> None:
    snap = snapshot(0, [PartitionOffsets(0, 0, 10, 11), PartitionOffsets(1, 0, 10, 10)])
    assert committed_beyond_end(snap) == [0]


META_CASES = [
    ("valid", "lp1;cap=137.5;ts=1700000000000", 137.5, 1_700_000_000.0),
    ("no-ts", "lp1;cap=5.5", 5.5, None),
    ("bad-ts", "lp1;cap=5.5;ts=soon", 5.5, None),
    ("foreign", "someone else's metadata", None, None),
    ("empty", "", None, None),
    ("none", None, None, None),
    ("wrong-version", "lp2;cap=3;ts=1", None, None),
    ("negative", "lp1;cap=-3;ts=1", None, None),
    ("zero", "lp1;cap=0;ts=1", None, None),
    ("nan", "lp1;cap=nan;ts=1", None, None),
    ("inf", "lp1;cap=inf;ts=1", None, None),
    ("garbage-cap", "lp1;cap=fast", None, None),
    ("extra-fields", "lp1;x=1;cap=2;ts=3000;y", 2.0, 3.0),
]


@pytest.mark.parametrize("meta,cap,at", [c[1:] for c in META_CASES], ids=[c[0] for c in META_CASES])
def test_parse_capacity_metadata(meta: str | None, cap: float | None, at: float | None) -> None:
    rep = parse_capacity_metadata(meta)
    if cap is None:
        assert rep is None
    else:
        assert rep is not None and math.isclose(rep.records_per_busy_s, cap)
        assert rep.at_s == at


def test_capacity_metadata_round_trip() -> None:
    rep = parse_capacity_metadata(format_capacity_metadata(12.25, 1234))
    assert rep is not None and rep.records_per_busy_s == 12.25 and rep.at_s == 1.234


def test_oldest_unprocessed_age() -> None:
    assert oldest_unprocessed_age_s(PartitionOffsets(0, 0, 10, 5, oldest_unprocessed_ts_s=90.0), 100.0) == 10.0
    assert oldest_unprocessed_age_s(PartitionOffsets(0, 0, 10, 10, oldest_unprocessed_ts_s=90.0), 100.0) is None
    assert oldest_unprocessed_age_s(PartitionOffsets(0, 0, 10, 5), 100.0) is None
