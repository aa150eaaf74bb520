"""Lag arithmetic on offsets that were already fetched (no I/O here).

The operator fetches, per partition, the log start offset (``low``), the log end offset (``end``)
and the group's committed offset with one batched AdminClient round trip, plus the capacity report
that the consumer runtime puts in each commit's metadata (``lp1;cap=<records/busy s>;ts=<unix ms>``,
see docs/CONTRACTS.md). Everything below is plain arithmetic on those numbers so that it can be
tested table-driven and reused by the simulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

CAPACITY_METADATA_PREFIX = "lp1"


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
class CapacityReport:
    """A consumer's measured capacity, parsed from a commit's metadata string."""

    records_per_busy_s: float
    at_s: float | None = None  # when the consumer measured it (unix seconds), None if absent


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
    recreated under the group) -> 0 here, :func:`offsets_went_backwards` reports it.
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


def offsets_went_backwards(prev: LagSnapshot | None, cur: LagSnapshot) -> list[int]:
    """Partitions whose end or low offset decreased since ``prev``: the topic was recreated
    (or truncated by an admin). Rates computed across such a jump are meaningless."""
    if prev is None:
        return []
    before = prev.by_partition()
    moved: list[int] = []
    for p in cur.partitions:
        old = before.get(p.partition)
        if old is not None and (p.end < old.end or p.low < old.low):
            moved.append(p.partition)
    return moved


def committed_beyond_end(snap: LagSnapshot) -> list[int]:
    """Partitions whose committed offset is past the end: the topic was recreated under the group."""
    return [p.partition for p in snap.partitions if p.committed is not None and p.committed > p.end]


def parse_capacity_metadata(metadata: str | None) -> CapacityReport | None:
    """Parse ``lp1;cap=<float>;ts=<unix ms>``; None for anything else (foreign or corrupt metadata
    must never break observation)."""
    if not metadata:
        return None
    parts = metadata.strip().split(";")
    if not parts or parts[0] != CAPACITY_METADATA_PREFIX:
        return None
    fields: dict[str, str] = {}
    for item in parts[1:]:
        key, sep, value = item.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        cap = float(fields["cap"])
    except (KeyError, ValueError):
        return None
    if not math.isfinite(cap) or cap <= 0:
        return None
    at_s: float | None = None
    if "ts" in fields:
        try:
            at_s = int(fields["ts"]) / 1000.0
        except ValueError:
            at_s = None
    return CapacityReport(records_per_busy_s=cap, at_s=at_s)


def format_capacity_metadata(records_per_busy_s: float, ts_ms: int) -> str:
    """The inverse of :func:`parse_capacity_metadata` (used by tests and the simulator)."""
    return f"{CAPACITY_METADATA_PREFIX};cap={records_per_busy_s:.3f};ts={int(ts_ms)}"


def snapshot(
    at_s: float,
    partitions: Iterable[PartitionOffsets],
    capacity_reports: Mapping[int, float] | None = None,
) -> LagSnapshot:
    """Build a snapshot with partitions sorted by id (callers may fetch them in any order)."""
    parts = tuple(sorted(partitions, key=lambda p: p.partition))
    return LagSnapshot(at_s=at_s, partitions=parts, capacity_reports=dict(capacity_reports or {}))
