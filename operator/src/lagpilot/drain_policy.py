"""When does a backlog need a drain, and of which partitions (pure).

A consumer group never runs more consumers than partitions. When the group at its cap
(min(maxReplicas, partitions)) still cannot clear its backlog within the SLA target, the backlog of
the worst partitions is split off by offset range ``[start, split)`` and drained by Spark tasks,
while the live group continues from ``split``.

A drain only helps if ``start_up + lag / (tasks * task_capacity)`` is shorter than what the group
would need for that partition, and only when the backlog is at least ``min_backlog_records`` (the
start-up is a fixed cost).

Regrowing partitions (live rate >= one consumer's capacity) are handled deliberately: one drain is
not enough, the backlog regrows behind the split. Such a partition is drained again and again, each
time when the oldest record's projected latency (its age + the drain's duration) reaches
``hot_trigger_fraction`` of the SLA, never more often than ``min_interval_s`` after the previous
drain ended, and never two drains at once (one drain per group at a time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from lagpilot.projection import INF, PartitionLoad, clear_time_s, project


@dataclass(frozen=True)
class DrainPolicy:
    """Drain knobs: the CR's ``spec.drain`` plus model figures the operator cannot read from the spec."""

    enabled: bool = True
    split_factor: int = 4  # Spark tasks per drained partition
    max_tasks: int = 16  # tasks at once across the drain
    min_backlog_records: int = 10_000
    start_up_s: float = 90.0  # expected launch -> first record processed (Job pod + Spark start)
    task_capacity: float | None = None  # records/s of one task; None: same as one consumer
    min_interval_s: float = 60.0  # between the end of one drain and the next plan
    hot_trigger_fraction: float = 0.5  # regrowing partition: drain when projected latency >= this x SLA

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **model: Any) -> "DrainPolicy":
        """From the raw CR ``spec`` (reads ``spec.drain``); ``model`` overrides the non-spec figures."""
        d = dict(spec.get("drain") or {})
        pol = cls(
            enabled=bool(d.get("enabled", True)) and not bool(d.get("cancel", False)),
            split_factor=int(d.get("splitFactor", 4)),
            max_tasks=int(d.get("maxTasks", 16)),
            min_backlog_records=int(d.get("minBacklogRecords", 10_000)),
            **model,
        )
        pol.validate()
        return pol

    def validate(self) -> "DrainPolicy":
        if self.split_factor < 1:
            raise ValueError("drain.splitFactor must be >= 1")
        if self.max_tasks < 1:
            raise ValueError("drain.maxTasks must be >= 1")
        if self.min_backlog_records < 0:
            raise ValueError("drain.minBacklogRecords must be >= 0")
        if self.start_up_s < 0 or self.min_interval_s < 0:
            raise ValueError("drain start-up and interval must be >= 0")
        if self.task_capacity is not None and self.task_capacity <= 0:
            raise ValueError("drain task capacity must be > 0")
        return self


@dataclass(frozen=True)
class DrainRange:
    """One partition's planned range: records ``[start, end)`` go to the drain, the group resumes at ``end``.

    Offsets are None when the caller gave loads without offsets (the simulator works on counts); the
    operator fixes them from the fresh offsets it writes into the plan.
    """

    partition: int
    start: int | None
    end: int | None
    records: int
    tasks: int
    expected_s: float  # start-up + records / (tasks x task capacity)
    group_would_need_s: float  # the same partition with a dedicated consumer (inf: never)
    regrowing: bool = False


@dataclass(frozen=True)
class DrainNeed:
    """The decision core's request for a drain; the drain state machine (issue 6) acts on it."""

    ranges: tuple[DrainRange, ...]
    reason: str  # CamelCase: PartitionCapReached | HotPartition | RegrowingPartition
    message: str
    tasks: int = 0
    expected_s: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(r.partition for r in self.ranges)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "message": self.message,
            "tasks": self.tasks,
            "expectedSeconds": _finite(self.expected_s),
            "ranges": [
                {
                    "partition": r.partition,
                    "start": r.start,
                    "end": r.end,
                    "records": r.records,
                    "tasks": r.tasks,
                    "expectedSeconds": _finite(r.expected_s),
                    "groupWouldNeedSeconds": _finite(r.group_would_need_s),
                    "regrowing": r.regrowing,
                }
                for r in self.ranges
            ],
        }


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 1)


def drain_need(
    loads: Sequence[PartitionLoad],
    capacity: float | None,
    *,
    group_replicas: int,
    target_s: float,
    sla_s: float,
    policy: DrainPolicy,
    now_s: float,
    drain_active: bool = False,
    last_drain_end_s: float | None = None,
    oldest_age_s: Mapping[int, float] | None = None,
) -> DrainNeed | None:
    """Which partitions to drain now, or None.

    ``group_replicas`` is the group's cap (min(maxReplicas, partitions)). Returns None when drains
    are disabled, one is running, the previous ended less than ``min_interval_s`` ago, capacity is
    unknown, or the capped group can meet ``target_s`` on its own.
    """
    if not policy.enabled or drain_active or capacity is None or capacity <= 0 or not loads:
        return None
    if last_drain_end_s is not None and now_s - last_drain_end_s < policy.min_interval_s:
        return None
    group_replicas = max(1, min(group_replicas, len(loads)))
    if project(loads, group_replicas, capacity).catch_up_s <= target_s:
        return None
    task_cap = policy.task_capacity or capacity
    ages = dict(oldest_age_s or {})
    regrowing = {l.partition for l in loads if l.rate >= capacity}
    ordered = sorted(loads, key=lambda l: (-clear_time_s(l.lag, l.rate, capacity), -l.lag, l.partition))
    remaining = {l.partition: l for l in loads}
    budget = policy.max_tasks
    chosen: list[DrainRange] = []
    notes: list[str] = []
    for l in ordered:
        if budget <= 0:
            notes.append("task budget exhausted")
            break
        if l.partition not in regrowing and _rest_ok(
            remaining.values(), regrowing, group_replicas, capacity, target_s
        ):
            continue
        if l.lag <= 0 or l.lag < policy.min_backlog_records:
            continue
        tasks = min(policy.split_factor, budget)
        expected = policy.start_up_s + l.lag / (tasks * task_cap)
        group_time = clear_time_s(l.lag, l.rate, capacity)
        if not expected < group_time:
            notes.append(f"partition {l.partition}: drain ({expected:.0f}s) no faster than the group")
            continue
        if l.partition in regrowing:
            age = ages.get(l.partition, l.lag / l.rate if l.rate > 0 else 0.0)
            if age + expected < policy.hot_trigger_fraction * sla_s:
                notes.append(f"partition {l.partition}: regrowing, not yet due")
                continue
        records = int(l.lag)
        start = l.start_offset
        end = l.end_offset
        chosen.append(
            DrainRange(
                partition=l.partition,
                start=start,
                end=end,
                records=records,
                tasks=tasks,
                expected_s=expected,
                group_would_need_s=group_time,
                regrowing=l.partition in regrowing,
            )
        )
        budget -= tasks
        remaining[l.partition] = PartitionLoad(l.partition, 0.0, l.rate, l.start_offset, l.end_offset)
    if not chosen:
        return None
    if any(r.regrowing for r in chosen):
        reason = "RegrowingPartition"
    elif any(r.group_would_need_s > target_s for r in chosen):
        reason = "HotPartition"
    else:
        reason = "PartitionCapReached"
    parts = ", ".join(f"p{r.partition}:{r.records}" for r in chosen)
    expected_s = max(r.expected_s for r in chosen)
    message = (
        f"drain {parts} in {sum(r.tasks for r in chosen)} tasks, expected {expected_s:.0f}s; "
        f"group capped at {group_replicas} cannot meet {target_s:.0f}s"
    )
    return DrainNeed(
        ranges=tuple(chosen),
        reason=reason,
        message=message,
        tasks=sum(r.tasks for r in chosen),
        expected_s=expected_s,
        notes=tuple(notes),
    )


def _rest_ok(
    loads: Any,
    regrowing: set[int],
    group_replicas: int,
    capacity: float,
    target_s: float,
) -> bool:
    """Can the group meet the target on the non-regrowing partitions left? Each regrowing partition
    keeps one consumer busy and is handled by its own repeated drains."""
    rest = [l for l in loads if l.partition not in regrowing]
    if not rest:
        return True
    replicas = max(1, group_replicas - len(regrowing))
    return project(rest, replicas, capacity).catch_up_s <= target_s


__all__ = ["DrainPolicy", "DrainRange", "DrainNeed", "drain_need", "INF"]
