"""Lag arithmetic on offsets that were already fetched (no I/O here).

The operator fetches, per partition, the log start offset (``low``), the log end offset (``end``)
and the group's committed offset with one batched AdminClient round trip, plus the capacity report
that the consumer runtime puts in each commit's metadata (the contract module
``lagpilot_runtime.commit_metadata``, docs/CONTRACTS.md). Everything below is plain arithmetic on
those numbers so that it can be tested table-driven and reused by the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's offsets as fetched from Kafka.

    ``committed`` is None when the group never committed on this partition (a new group): the
    consumer then starts from ``low`` (auto.offset.reset=earliest), so the whole retained log is lag.
    """

    partition: int
    low: int
    end: int
    committed: int | None = None
    # unix seconds of the oldest unprocessed record, when the operator could read its timestamp
    oldest_unprocessed_ts_s: float | None = None


@dataclass(frozen=True)
class LagSnapshot:
    """What one observation cycle saw: offsets of every partition and the capacity reports.

    ``capacity_reports`` maps partition -> records per busy second of the consumer that last
    committed on it (several partitions of one consumer carry the same figure).
    """

    at_s: float
    partitions: tuple[PartitionOffsets, ...]
    capacity_reports: Mapping[int, float] = field(default_factory=dict)

    def by_partition(self) -> dict[int, PartitionOffsets]:
        return {p.partition: p for p in self.partitions}

    @property
    def total_lag(self) -> int:
        return sum(partition_lag(p) for p in self.partitions)

    @property
    def max_partition_lag(self) -> int:
        return max((partition_lag(p) for p in self.partitions), default=0)

    @property
    def data_loss_records(self) -> int:
        """Records deleted by retention before the group consumed them, as visible right now."""
        return sum(lost_records(p) for p in self.partitions)


def consume_position(p: PartitionOffsets) -> int:
    """Where the group will read next: committed, or ``low`` when never committed or already deleted."""
    if p.committed is None or p.committed < p.low:
        return p.low
    return p.committed


def partition_lag(p: PartitionOffsets) -> int:
    """Records still to process on this partition (never negative).

    committed None -> from ``low``; committed < low (retention deleted unconsumed records) -> from
    ``low`` (those records are gone; :func:`lost_records` counts them); committed > end (topic
    recreated under the group) -> 0 here.
    """
    return max(0, p.end - consume_position(p))


def lost_records(p: PartitionOffsets) -> int:
    """Records between the committed offset and the log start: deleted before being consumed."""
    if p.committed is None or p.committed >= p.low:
        return 0
    return p.low - p.committed


def oldest_unprocessed_age_s(p: PartitionOffsets, now_s: float) -> float | None:
    """Age of the oldest record still to process, when its timestamp is known and there is lag."""
    if p.oldest_unprocessed_ts_s is None or partition_lag(p) == 0:
        return None
    return max(0.0, now_s - p.oldest_unprocessed_ts_s)


def snapshot(
    at_s: float,
    partitions: Iterable[PartitionOffsets],
    capacity_reports: Mapping[int, float] | None = None,
) -> LagSnapshot:
    """Build a snapshot with partitions sorted by id (callers may fetch them in any order)."""
    parts = tuple(sorted(partitions, key=lambda p: p.partition))
    return LagSnapshot(at_s=at_s, partitions=parts, capacity_reports=dict(capacity_reports or {}))
