"""Catch-up projection: how long until the group has processed its backlog, for a replica count.

Model (pure, documented in docs/decision.md):
- A consumer processes ``capacity`` records per second while it has work, shared among the
  partitions it owns (work-conserving: an empty partition does not waste its share). A consumer
  owning partitions with total lag L and total produce rate λ clears them all in L / (c - λ)
  (infinite when c <= λ and there is something to clear).
- We do not know which assignor the group uses, only that a balanced one gives each consumer at most
  k = ceil(P / R) partitions. The projection takes the worst such consumer: the k largest lags over
  c minus the k largest rates. That is an upper bound for every balanced assignment, monotone in R
  (more replicas, never a longer projection) and in lag (more lag, never a shorter one).
- Adding replicas is not instant: with ``startup_s`` the backlog first grows by what the current
  consumers cannot absorb during the start-up, and the start-up time is added to the projection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

INF = math.inf


@dataclass(frozen=True)
class PartitionLoad:
    """One partition's backlog and arrival rate (plus its offsets when a drain plan needs them)."""

    partition: int
    lag: float
    rate: float  # records/s produced
    start_offset: int | None = None  # group position (committed, or low)
    end_offset: int | None = None  # log end offset


@dataclass(frozen=True)
class Projection:
    """The projection for one replica count."""

    replicas: int
    per_consumer_partitions: int  # k = ceil(P / R)
    catch_up_s: float  # group: worst consumer's time to clear its backlog (inf: never)
    utilization: float  # worst consumer's produce rate / capacity (>1: falls behind forever)
    per_partition_s: dict[int, float]  # each partition with a dedicated consumer (k = 1)


def clear_time_s(lag: float, rate: float, capacity: float) -> float:
    """Time for one consumer of ``capacity`` to clear ``lag`` while ``rate`` keeps arriving."""
    if lag <= 0:
        return 0.0 if rate <= capacity else INF
    net = capacity - rate
    return lag / net if net > 0 else INF


def per_consumer_partitions(partitions: int, replicas: int) -> int:
    """Partitions a consumer owns at most under a balanced assignor (0 replicas: all of them, unowned)."""
    if partitions <= 0:
        return 0
    if replicas <= 0:
        return partitions
    return math.ceil(partitions / min(replicas, partitions))


def lag_after_startup(
    loads: Sequence[PartitionLoad], capacity: float, current_replicas: int, startup_s: float
) -> list[PartitionLoad]:
    """Each partition's lag when new replicas become ready ``startup_s`` from now.

    Conservative and monotone: a partition grows by what exceeds its fair share under the current
    replica count (nothing is consumed at 0 replicas); shrinking during the start-up is ignored.
    """
    if startup_s <= 0:
        return list(loads)
    k = per_consumer_partitions(len(loads), current_replicas)
    share = capacity / k if current_replicas > 0 and k > 0 else 0.0
    return [
        PartitionLoad(
            ld.partition,
            ld.lag + max(0.0, ld.rate - share) * startup_s,
            ld.rate,
            ld.start_offset,
            ld.end_offset,
        )
        for ld in loads
    ]


def project(
    loads: Sequence[PartitionLoad],
    replicas: int,
    capacity: float,
    *,
    current_replicas: int | None = None,
    startup_s: float = 0.0,
) -> Projection:
    """Projected catch-up with ``replicas`` consumers of ``capacity`` records per busy second.

    When ``replicas`` differs from ``current_replicas`` (and is more), the new pods' ``startup_s`` is
    included. Zero replicas never catch up unless there is nothing to do and nothing arrives.
    """
    n = len(loads)
    per_part = {ld.partition: clear_time_s(ld.lag, ld.rate, capacity) for ld in loads}
    if n == 0:
        return Projection(replicas, 0, 0.0, 0.0, per_part)
    if replicas <= 0 or capacity <= 0:
        idle = all(ld.lag <= 0 and ld.rate <= 0 for ld in loads)
        return Projection(replicas, n, 0.0 if idle else INF, 0.0 if idle else INF, per_part)
    extra = 0.0
    effective = list(loads)
    if current_replicas is not None and replicas > current_replicas and startup_s > 0:
        effective = lag_after_startup(loads, capacity, current_replicas, startup_s)
        extra = startup_s
    k = per_consumer_partitions(n, replicas)
    top_lag = sum(sorted((ld.lag for ld in effective), reverse=True)[:k])
    top_rate = sum(sorted((ld.rate for ld in effective), reverse=True)[:k])
    t = clear_time_s(top_lag, top_rate, capacity)
    return Projection(
        replicas=replicas,
        per_consumer_partitions=k,
        catch_up_s=t + extra if t > 0 else t,
        utilization=top_rate / capacity,
        per_partition_s=per_part,
    )


def required_replicas(
    loads: Sequence[PartitionLoad],
    capacity: float,
    target_s: float,
    max_replicas: int,
    *,
    current_replicas: int | None = None,
    startup_s: float = 0.0,
    max_utilization: float = 1.0,
) -> int | None:
    """Fewest replicas (1..max_replicas) whose projection is within ``target_s`` and whose busiest
    consumer stays under ``max_utilization``; if no count meets the utilization bound, the fewest
    that meet ``target_s`` alone; None when even ``max_replicas`` cannot meet ``target_s``."""
    top = max(1, max_replicas)
    fallback: int | None = None
    for r in range(1, top + 1):
        pr = project(loads, r, capacity, current_replicas=current_replicas, startup_s=startup_s)
        if pr.catch_up_s <= target_s:
            if pr.utilization <= max_utilization:
                return r
            if fallback is None:
                fallback = r
    return fallback


def hot_partitions(loads: Sequence[PartitionLoad], capacity: float, target_s: float) -> list[int]:
    """Partitions that miss ``target_s`` even with a dedicated consumer (worst first)."""
    timed = [(clear_time_s(ld.lag, ld.rate, capacity), ld.partition) for ld in loads]
    return [p for t, p in sorted(timed, key=lambda x: (-x[0], x[1])) if t > target_s]


def regrowing_partitions(loads: Sequence[PartitionLoad], capacity: float) -> list[int]:
    """Partitions whose live rate alone exceeds one consumer: their backlog regrows after any drain."""
    return [ld.partition for ld in loads if ld.rate >= capacity]
