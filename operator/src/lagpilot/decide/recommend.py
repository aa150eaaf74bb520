"""Recommend-only mode (spec.mode: Recommend): the pure parts (docs/recommend.md).

The operator observes, projects and decides exactly as in mode Act (the same decision step), then
publishes the decision instead of applying it. What differs is where two inputs come from when the
group is not lagpilot's:

- **current replicas**: the consumer Deployment's when there is one (a group lagpilot ran before),
  else the group's members that consume the topic, as the broker describes the group;
- **capacity per replica**: lagpilot's consumer runtime reports it in its commit metadata; other
  consumers do not. Then it is measured from the group's committed offsets: between two cycles
  in which every partition of the topic lagged (so every consumer that owns a partition had work
  all the time; a partition without a commit yet lags too), the records committed per second
  divided by the consumers that can work (min(members, partitions)) is one sample of a consumer's
  capacity; the estimator smooths the
  samples as it does the reports. No sample while any partition is caught up (an idle consumer
  would read as a slow one) or while nothing was committed (a stopped group is not a slow one).

What it cannot know: a consumer's capacity before the group has lagged on every partition at once;
differences between consumers (one slow consumer reads as a slower average); capacity limited by
something shared (a database) that more replicas would not raise; how often the consumers commit
(a long commit interval makes the samples jumpy; they are smoothed); and how long a new consumer of
that application takes to start (pod start-up is the operator's LAGPILOT_POD_START_SECONDS).
Pure: no I/O, `now` passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lagpilot.decide import estimate as est_mod
from lagpilot.decide import lag as lag_mod
from lagpilot.decide.scaling import Decision
from lagpilot.decide.status import FALSE, Condition, rfc3339

SOURCE_DEPLOYMENT, SOURCE_MEMBERS = "Deployment", "GroupMembers"
CAP_METADATA, CAP_COMMITTED, CAP_UNKNOWN = "CommitMetadata", "CommittedRate", "Unknown"
REASON = "RecommendOnly"


def committed_rate_capacity(
    prev: est_mod.EstimatorState | None, snap: lag_mod.LagSnapshot, consumers: int
) -> float | None:
    """One capacity sample (records/s of one consumer) from the commits between the previous
    estimate and `snap`, or None when this interval cannot tell (see the module docstring)."""
    if prev is None or consumers <= 0 or not snap.partitions:
        return None
    dt = snap.at_s - prev.at_s
    if dt <= 0:
        return None
    committed = 0
    for p in snap.partitions:
        old = prev.partitions.get(p.partition)
        if old is None or (
            old.committed is not None and (p.committed is None or p.committed < old.committed)
        ):
            return None  # a new partition, or offsets reset/deleted: this interval tells nothing
        if old.lag <= 0 or lag_mod.partition_lag(p) <= 0:
            return None  # a caught-up partition: its consumer may have idled
        # a partition the group has not committed on yet lags and is waiting for a busy consumer
        # (one consumer reads its partitions one after the other): it counts, with what it
        # committed since (nothing, or its first commit, whose start is unknown: not counted)
        if old.committed is not None and p.committed is not None:
            committed += p.committed - old.committed
    if committed <= 0:
        return None
    busy = min(consumers, len(snap.partitions))
    return committed / dt / busy


def with_capacity(snap: lag_mod.LagSnapshot, capacity: float) -> lag_mod.LagSnapshot:
    """`snap` with one capacity report per partition (the estimator takes their median)."""
    return dataclasses.replace(snap, capacity_reports={p.partition: capacity for p in snap.partitions})


def recommendation(
    decision: Decision,
    current: int,
    source: str,
    capacity_source: str,
    previous: Mapping[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    """status.recommendation for this cycle; `since` moves only when the recommended count changes."""
    prev = previous or {}
    since = prev.get("since") if prev.get("replicas") == decision.desired_replicas else None
    return {
        "replicas": decision.desired_replicas,
        "currentReplicas": current,
        "source": source,
        "capacitySource": capacity_source,
        "reason": decision.reason,
        "message": decision.message,
        "drain": decision.drain is not None,
        "since": since or rfc3339(now),
    }


def changed(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """A new recommendation worth an event: another replica count, or a drain now (not) recommended."""
    prev = previous or {}
    return (prev.get("replicas"), bool(prev.get("drain"))) != (new["replicas"], new["drain"])


def event_message(name: str, rec: Mapping[str, Any]) -> str:
    cur, want = rec["currentReplicas"], rec["replicas"]
    verb = f"scale from {cur} to {want} replicas" if want != cur else f"keep {cur} replicas"
    drain = "; drain the backlog" if rec["drain"] else ""
    return (
        f"recommend: {verb}{drain} ({rec['reason']}: {rec['message']}); spec.mode is Recommend: not applied"
    )


def scaling_condition(rec: Mapping[str, Any]) -> Condition:
    """The Scaling condition in mode Recommend: never True (nothing is scaled); the message says
    what would be done."""
    cur, want = rec["currentReplicas"], rec["replicas"]
    what = f"would scale {cur} -> {want}" if want != cur else f"would keep {cur}"
    return Condition(
        "Scaling", FALSE, REASON, f"spec.mode Recommend: {what} ({rec['reason']}); nothing is scaled"
    )
