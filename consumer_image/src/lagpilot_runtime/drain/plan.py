"""The drain plan: the contract between the operator (which fixes it) and the drain job (which runs it).

Pure: no I/O, no Spark, no Kafka. The operator imports it to split a hand-off into sub-ranges and to
name the progress groups it reads; the drain job imports it to parse the plan it was given. Keeping
the split here (and not inside Spark's ``minPartitions`` logic) gives every sub-range a stable
identity across retries, which is what lets a retry skip finished work exactly.

Progress is kept in Kafka itself, as committed offsets of small consumer groups that never have
members: group ``<groupId>.lagpilot-drain.<tag>.<drainId>.<k>`` holds, for every drained partition, the
next offset to process in that partition's k-th sub-range, and in the commit metadata
(``lpd1;n=<records>``) how many records that sub-range has processed so far, and ``a=<attempt>``
the operator's attempt whose task wrote it (its sign of life: ``progress_metadata``). The operator reads
them with the same ``list_consumer_group_offsets`` call it uses for lag; Kafka expires them with the
broker's ``offsets.retention.minutes`` (7 days by default) once unused. ``<tag>`` (``owner_tag``)
is a short hash of the CR's uid: drain ids restart at 1 for a CR re-created with the same groupId,
and without it that CR's drain would read a deleted CR's leftover progress (a CR deleted with
``finalizers: null`` never deletes its groups) and skip records. A plan without a tag (the benches,
which run without a CR) keeps ``<groupId>.lagpilot-drain.<drainId>.<k>``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

PROGRESS_METADATA_PREFIX = "lpd1"
# bounds of a plan (issue 23, C1): what the CRD allows (spec.batch.maxRecords <= 100000,
# spec.drain.maxTasks <= 1024), and more sub-ranges than a plan passed as one environment variable
# (the kernel's 128 KiB per variable) can hold
MAX_BATCH_RECORDS = 100_000
MAX_PARALLELISM = 1024
MAX_SUB_RANGES = 4096


@dataclass(frozen=True, order=True)
class SubRange:
    """Offsets ``[start, end)`` of one partition: the unit of work of one Spark task."""

    partition: int
    index: int  # k-th sub-range of this partition (0-based); names the progress group
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    def to_dict(self) -> dict[str, int]:
        return {"partition": self.partition, "index": self.index, "start": self.start, "end": self.end}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SubRange:  # the plan's JSON
        return cls(int(d["partition"]), int(d["index"]), int(d["start"]), int(d["end"]))


@dataclass(frozen=True)
class DrainPlan:
    """What one drain job must process: explicit sub-ranges of one topic, never "latest"."""

    drain_id: str
    topic: str
    group_id: str
    sub_ranges: tuple[SubRange, ...]
    batch_max_records: int = 500
    parallelism: int = 4  # Spark tasks running at once (local[N] / executors x cores)
    read_committed: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)
    owner: str = ""  # owner_tag(CR uid): names the progress groups; "" none (benches)
    # a busy drain (issue 25 item 2; docs/drain.md "Busy drains"): after its sub-ranges the driver
    # keeps its session and waits for the operator's next signed part (``NextPart``); ``round`` is
    # the drain's round these sub-ranges are of (a part of a later round is new to it)
    busy: bool = False
    round: int = 0
    # the operator's attempt number (0: none, a plan without an operator): the tasks write it into
    # their progress commits, first at their start (the attempt's sign of life, docs/drain.md
    # "Deadlines, stalls and retries")
    attempt: int = 0

    def validate(self) -> DrainPlan:
        """Reject plans that could process an offset twice or never (overlaps, empty ids)."""
        if not self.drain_id or not self.topic or not self.group_id:
            raise ValueError("drain plan needs drainId, topic and groupId")
        if self.round < 0:
            raise ValueError("drain plan needs round >= 0")
        if self.attempt < 0:
            raise ValueError("drain plan needs attempt >= 0")
        if not 1 <= self.batch_max_records <= MAX_BATCH_RECORDS:
            raise ValueError(f"drain plan needs 1 <= batchMaxRecords <= {MAX_BATCH_RECORDS}")
        if not 1 <= self.parallelism <= MAX_PARALLELISM:
            raise ValueError(f"drain plan needs 1 <= parallelism <= {MAX_PARALLELISM}")
        if len(self.sub_ranges) > MAX_SUB_RANGES:
            raise ValueError(f"drain plan has more than {MAX_SUB_RANGES} sub-ranges")
        seen: dict[tuple[int, int], SubRange] = {}
        by_partition: dict[int, list[SubRange]] = {}
        for s in self.sub_ranges:
            if s.start < 0 or s.end < s.start:
                raise ValueError(f"bad sub-range {s.to_dict()}")
            if (s.partition, s.index) in seen:
                raise ValueError(f"duplicate sub-range index {s.index} for partition {s.partition}")
            seen[(s.partition, s.index)] = s
            by_partition.setdefault(s.partition, []).append(s)
        for p, subs in by_partition.items():
            subs.sort(key=lambda s: s.start)
            for a, b in itertools.pairwise(subs):
                if b.start < a.end:
                    raise ValueError(
                        f"overlapping sub-ranges in partition {p}: {a.to_dict()} and {b.to_dict()}"
                    )
        return self

    def partition_ranges(self) -> dict[int, tuple[int, int]]:
        """Each partition's whole drained range ``[min start, max end)``."""
        out: dict[int, tuple[int, int]] = {}
        for s in self.sub_ranges:
            lo, hi = out.get(s.partition, (s.start, s.end))
            out[s.partition] = (min(lo, s.start), max(hi, s.end))
        return out

    def progress_groups(self) -> list[str]:
        """The progress group names, one per sub-range index."""
        return sorted(
            {progress_group(self.group_id, self.drain_id, s.index, self.owner) for s in self.sub_ranges}
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                **({"owner": self.owner} if self.owner else {}),
                "drainId": self.drain_id,
                "topic": self.topic,
                "groupId": self.group_id,
                "batchMaxRecords": self.batch_max_records,
                "parallelism": self.parallelism,
                "readCommitted": self.read_committed,
                "subRanges": [s.to_dict() for s in self.sub_ranges],
                **({"busy": True, "round": self.round} if self.busy else {}),
                **({"attempt": self.attempt} if self.attempt else {}),
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> DrainPlan:
        d = json.loads(text)
        return cls(
            drain_id=str(d["drainId"]),
            topic=str(d["topic"]),
            group_id=str(d["groupId"]),
            sub_ranges=tuple(SubRange.from_dict(s) for s in d["subRanges"]),
            batch_max_records=int(d.get("batchMaxRecords", 500)),
            parallelism=int(d.get("parallelism", 4)),
            read_committed=bool(d.get("readCommitted", False)),
            owner=str(d.get("owner") or ""),
            busy=bool(d.get("busy", False)),
            round=int(d.get("round") or 0),
            attempt=int(d.get("attempt") or 0),
        ).validate()

    def extended(self, part: NextPart) -> DrainPlan:
        """This plan with a next part's sub-ranges added (those it does not hold yet) and its round;
        ValueError when a part's sub-range has another's index or overlaps one (``validate``)."""
        known = {(s.partition, s.index): s for s in self.sub_ranges}
        for s in part.sub_ranges:
            if (s.partition, s.index) in known and known[(s.partition, s.index)] != s:
                raise ValueError(f"next part {part.round}: sub-range {s.to_dict()} differs from the plan's")
        new = tuple(s for s in part.sub_ranges if (s.partition, s.index) not in known)
        return replace(self, sub_ranges=self.sub_ranges + new, round=max(self.round, part.round)).validate()


def owner_tag(cr_uid: str) -> str:
    """The CR's tag in its progress group names: 12 hex digits of SHA-256 of its uid."""
    return hashlib.sha256(cr_uid.encode()).hexdigest()[:12]


def progress_group(group_id: str, drain_id: str, index: int, owner: str = "") -> str:
    """The consumer group whose committed offsets are the progress of sub-ranges with this index
    (``owner``: the plan's owner_tag; "" only for plans without a CR)."""
    if owner:
        return f"{group_id}.lagpilot-drain.{owner}.{drain_id}.{index}"
    return f"{group_id}.lagpilot-drain.{drain_id}.{index}"


def progress_metadata(records_done: int, lost: Sequence[tuple[int, int]] = (), attempt: int = 0) -> str:
    """Commit metadata of a progress offset: how many records the sub-range has processed, the
    offset ranges ``[a, b)`` of it that retention deleted before the drain read them (``lost=a-b,..``),
    and the operator's attempt whose task wrote it (``a=<attempt>``; 0: not written)."""
    text = f"{PROGRESS_METADATA_PREFIX};n={int(records_done)}"
    if lost:
        text += ";lost=" + ",".join(f"{int(a)}-{int(b)}" for a, b in lost)
    if attempt > 0:
        text += f";a={int(attempt)}"
    return text


def _progress_field(metadata: str | bytes | None, key: str) -> str | None:
    """The value of ``key=`` in a progress commit's metadata (``lpd1;k=v;...``); None when absent or
    foreign (never raises)."""
    if isinstance(metadata, bytes):
        metadata = metadata.decode("utf-8", "replace")
    if not metadata or not metadata.startswith(PROGRESS_METADATA_PREFIX + ";"):
        return None
    for part in metadata.split(";")[1:]:
        k, _, value = part.partition("=")
        if k == key:
            return value
    return None


def parse_progress_attempt(metadata: str | bytes | None) -> int:
    """The attempt ``a=<int>`` of a progress commit's metadata; 0 when absent or foreign (never raises)."""
    value = _progress_field(metadata, "a")
    return int(value) if value is not None and value.isdigit() else 0


def parse_progress_lost(metadata: str | None) -> tuple[tuple[int, int], ...]:
    """The ``lost=a-b,c-d`` ranges of a progress commit's metadata; () when absent (never raises)."""
    value = _progress_field(metadata, "lost")
    if value is None:
        return ()
    out = []
    for item in value.split(","):
        a, _, b = item.partition("-")
        if a.isdigit() and b.isdigit() and int(a) < int(b):
            out.append((int(a), int(b)))
    return tuple(out)


def parse_progress_metadata(metadata: str | None) -> int:
    """Records done from ``lpd1;n=<int>``; 0 when absent or foreign (never raises)."""
    value = _progress_field(metadata, "n")
    return int(value) if value is not None and value.isdigit() else 0


def split_ranges(
    ranges: Mapping[int, tuple[int, int]], split_factor: int, min_records_per_task: int = 1
) -> tuple[SubRange, ...]:
    """Cut each partition's ``[start, end)`` into ``split_factor`` near-equal sub-ranges.

    A partition with fewer than ``split_factor * min_records_per_task`` records gets fewer pieces
    (a task that handles less than one batch buys nothing). Pieces tile the range exactly: no gap,
    no overlap, so every offset belongs to exactly one task.
    """
    out: list[SubRange] = []
    for p in sorted(ranges):
        start, end = ranges[p]
        size = end - start
        if size <= 0:
            continue
        pieces = max(1, min(split_factor, size // max(1, min_records_per_task)))
        step = size / pieces
        bounds = [start + math.floor(i * step) for i in range(pieces)] + [end]
        for i in range(pieces):
            if bounds[i + 1] > bounds[i]:
                out.append(SubRange(p, i, bounds[i], bounds[i + 1]))
    return tuple(out)


def parallelism_for(sub_ranges: Iterable[SubRange], max_tasks: int) -> int:
    """How many tasks run at once: every sub-range at once, capped by spec.drain.maxTasks."""
    n = sum(1 for _ in sub_ranges)
    return max(1, min(max_tasks, n))


# ---- a busy drain's next parts (issue 25 item 2; docs/drain.md "Busy drains: the executor") ------

NEXT_PART_PREFIX = "lpn1"
NEXT_PART_INDEX = "next"  # the parts group: <groupId>.lagpilot-drain.<tag>.<drainId>.next
# a part is one commit's metadata (the broker's offset.metadata.max.bytes, 4096 by default): at
# most this many sub-ranges (49 bytes each at worst) with its header and signature
MAX_PART_SUB_RANGES = 64
MAX_PART_BYTES = 4000


def parts_group(group_id: str, drain_id: str, owner: str = "") -> str:
    """The memberless group whose commit (topic partition 0, offset = the round) holds the drain's
    latest next part, written by the operator, read by the drain's driver. Under the drain's
    ``<groupId>.lagpilot-drain.`` prefix: the drain's principal reads it with the rights it has."""
    base = f"{group_id}.lagpilot-drain.{owner}." if owner else f"{group_id}.lagpilot-drain."
    return f"{base}{drain_id}.{NEXT_PART_INDEX}"


@dataclass(frozen=True)
class NextPart:
    """What the operator tells a running busy drain: the drain's round, its unfinished sub-ranges as
    the operator last saw them (a superset of what it appended since the driver's round), and
    whether a further split may still come (``final``: no; hand the partitions back and end once
    every sub-range is done). The signature (``plan_auth.sign_part``) covers all of it."""

    drain_id: str
    round: int
    final: bool
    sub_ranges: tuple[SubRange, ...] = ()

    def body(self) -> str:
        subs = ",".join(f"{s.partition}.{s.index}.{s.start}-{s.end}" for s in self.sub_ranges)
        return f"{NEXT_PART_PREFIX};id={self.drain_id};r={int(self.round)};more={0 if self.final else 1};s={subs}"

    @classmethod
    def from_body(cls, body: str) -> NextPart:
        """ValueError on anything but a well-formed body."""
        fields = body.split(";")
        if not fields or fields[0] != NEXT_PART_PREFIX:
            raise ValueError("not a next part")
        kv = dict(f.partition("=")[::2] for f in fields[1:])
        if set(kv) != {"id", "r", "more", "s"} or kv["more"] not in ("0", "1") or not kv["r"].isdigit():
            raise ValueError("malformed next part")
        subs = []
        for item in filter(None, kv["s"].split(",")):
            p, k, rng = item.split(".")
            a, b = rng.split("-")
            subs.append(SubRange(int(p), int(k), int(a), int(b)))
        return cls(kv["id"], int(kv["r"]), kv["more"] == "0", tuple(subs))
