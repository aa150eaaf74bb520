"""A model of the baseline: KEDA's Kafka scaler driving the HPA (pure; used by the simulator).

Defaults as KEDA and Kubernetes ship them (sources cited in docs/decision.md):
- Kafka scaler: ``lagThreshold`` 10, ``activationLagThreshold`` 0, ``allowIdleConsumers`` false:
  the metric is the total lag, capped at ``partitions x lagThreshold`` so the HPA never asks for more
  consumers than partitions.
- The scaler's partition options (all off by default; ``getTotalLag`` / ``getLagForPartition`` of
  kedacore/keda pkg/scalers/kafka_scaler.go): ``excludePersistentLag`` (a partition whose committed
  offset did not move since the scaler's previous evaluation counts 0 in the metric, but still in
  activation), ``limitToPartitionsWithLag`` (the cap is the partitions with lag > 0, not all of
  them, even with ``allowIdleConsumers``), ``ensureEvenDistributionOfPartitions`` (the metric is
  raised to the next divisor ``f`` of the partition count with ``f x lagThreshold >= totalLag``,
  so each consumer gets as many partitions; then capped as above).
- ScaledObject: ``pollingInterval`` 30 s (activation 0 <-> 1), ``cooldownPeriod`` 300 s (back to 0),
  ``minReplicaCount`` 0, ``maxReplicaCount`` 100.
- HPA: 15 s sync period, tolerance 0.1, external metric with an AverageValue target: desired =
  ceil(metric / target) unless metric / (target x current) is within the tolerance; scale-up
  stabilization 0 s, scale-down 300 s; scale-up rate limit max(+4 pods, +100%) per 15 s;
  scale-down limit 100% per 15 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

# option pairs KEDA's Kafka scaler refuses together (parseKafkaMetadata's validate, v2.20)
_EXCLUSIVE = (
    (
        "allow_idle_consumers",
        "limit_to_partitions_with_lag",
        "allowIdleConsumers",
        "limitToPartitionsWithLag",
    ),
    (
        "limit_to_partitions_with_lag",
        "ensure_even_distribution_of_partitions",
        "limitToPartitionsWithLag",
        "ensureEvenDistributionOfPartitions",
    ),
)


def keda_accepts(**options: bool) -> bool:
    """Whether KEDA accepts a trigger with these options (KedaConfig's field names)."""
    return not any(options.get(a) and options.get(b) for a, b, _, _ in _EXCLUSIVE)


@dataclass(frozen=True)
class KedaConfig:
    lag_threshold: int = 10
    activation_lag_threshold: int = 0
    allow_idle_consumers: bool = False
    limit_to_partitions_with_lag: bool = False
    ensure_even_distribution_of_partitions: bool = False
    exclude_persistent_lag: bool = False
    polling_interval_s: float = 30.0
    cooldown_s: float = 300.0
    min_replicas: int = 0
    max_replicas: int = 100
    hpa_sync_s: float = 15.0
    tolerance: float = 0.1
    up_window_s: float = 0.0
    down_window_s: float = 300.0
    scale_up_pods: int = 4
    scale_up_percent: int = 100
    scale_up_period_s: float = 15.0
    scale_down_percent: int = 100
    scale_down_period_s: float = 15.0

    def __post_init__(self) -> None:
        # KEDA refuses these pairs when it parses the trigger (kafka_scaler.go, "... cannot be set
        # simultaneously"): such a ScaledObject gets no scaler, so there is nothing to model
        for a, b, name_a, name_b in _EXCLUSIVE:
            if getattr(self, a) and getattr(self, b):
                raise ValueError(
                    f"{name_a} and {name_b} cannot be set simultaneously (KEDA refuses the trigger)"
                )


@dataclass(frozen=True)
class KedaState:
    """What KEDA's operator and the HPA controller keep in memory between syncs."""

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()  # (time, replica change) for the rate limits
    last_active_s: float | None = None
    next_poll_s: float = 0.0
    next_sync_s: float = 0.0
    # excludePersistentLag: the committed offsets of the scaler's previous evaluation (its
    # previousOffsets map) and the partitions deemed stuck at the last one
    previous_committed: tuple[int, ...] | None = None
    persistent: tuple[int, ...] = ()


def _factors(n: int) -> list[int]:
    return [f for f in range(1, n + 1) if n % f == 0]


def keda_metric(
    partition_lags: Sequence[float], partitions: int, cfg: KedaConfig, persistent: Sequence[int] = ()
) -> int:
    """The external metric KEDA serves (``getTotalLag``): the total lag (partitions in ``persistent``
    count 0 with ``excludePersistentLag``), raised to an even split with
    ``ensureEvenDistributionOfPartitions``, capped at ``upper x threshold`` where ``upper`` is the
    partitions (or, with ``limitToPartitionsWithLag``, the partitions with lag) -- unless idle
    consumers are allowed and neither option is on. Integer maths, as KEDA's."""
    stuck = set(persistent) if cfg.exclude_persistent_lag else set()
    lags = [0 if i in stuck else max(0, int(ld)) for i, ld in enumerate(partition_lags)]
    total = sum(lags)
    thr = cfg.lag_threshold
    if thr > 0 and (
        not cfg.allow_idle_consumers
        or cfg.limit_to_partitions_with_lag
        or cfg.ensure_even_distribution_of_partitions
    ):
        upper = partitions
        if cfg.ensure_even_distribution_of_partitions:
            total = next((f for f in _factors(partitions) if f * thr >= total), partitions) * thr
        if cfg.limit_to_partitions_with_lag:
            upper = sum(1 for ld in lags if ld > 0)
        if total // thr > upper:
            total = upper * thr
    return total


def persistent_partitions(committed: Sequence[int], previous: Sequence[int] | None) -> tuple[int, ...]:
    """``excludePersistentLag``: partitions whose committed offset equals the previous evaluation's
    (no record of a previous offset: not persistent)."""
    if previous is None or len(previous) != len(committed):
        return ()
    return tuple(i for i, (c, p) in enumerate(zip(committed, previous, strict=False)) if c == p)


def is_active(partition_lags: Sequence[float], cfg: KedaConfig) -> bool:
    return int(sum(max(0, int(ld)) for ld in partition_lags)) > cfg.activation_lag_threshold


def hpa_replicas(current: int, metric: int, cfg: KedaConfig) -> int:
    """HPA replica calculator for an external metric with an AverageValue target."""
    if current <= 0:
        return 0
    ratio = metric / (cfg.lag_threshold * current)
    if abs(ratio - 1.0) <= cfg.tolerance:
        return current
    return math.ceil(metric / cfg.lag_threshold)


def _stabilize(raw: int, current: int, now_s: float, recs: list[tuple[float, int]], cfg: KedaConfig) -> int:
    up = down = raw
    for t, r in recs:
        if now_s - t <= cfg.up_window_s:
            up = min(up, r)
        if now_s - t <= cfg.down_window_s:
            down = max(down, r)
    out = current
    if out < up:
        out = up
    if out > down:
        out = down
    return out


def _rate_limit(
    desired: int, current: int, now_s: float, events: Sequence[tuple[float, int]], cfg: KedaConfig
) -> int:
    if desired > current:
        added = sum(d for t, d in events if now_s - t < cfg.scale_up_period_s and d > 0)
        start = current - added
        limit = max(start + cfg.scale_up_pods, math.ceil(start * (1 + cfg.scale_up_percent / 100)))
        return min(desired, limit)
    if desired < current:
        removed = -sum(d for t, d in events if now_s - t < cfg.scale_down_period_s and d < 0)
        start = current + removed
        limit = math.floor(start * (1 - cfg.scale_down_percent / 100))
        return max(desired, limit)
    return desired


def step(
    state: KedaState,
    now_s: float,
    current: int,
    partition_lags: Sequence[float],
    partitions: int,
    cfg: KedaConfig = KedaConfig(),
    committed: Sequence[int] | None = None,
) -> tuple[int, KedaState]:
    """Advance KEDA + HPA to ``now_s``; returns the replica count they set (maybe unchanged).
    ``committed`` (the group's committed offsets, for ``excludePersistentLag``): every evaluation of
    the scaler -- KEDA's activity poll and the HPA's metric read alike -- compares them with the
    previous evaluation's and remembers them.

    The steps, in order: remember the committed offsets -> KEDA's activity poll (0 <-> 1) -> the
    HPA's sync (metric, stabilization, rate limits, bounds) -> the scale event recorded."""
    desired = current
    polled = now_s >= state.next_poll_s
    synced = current > 0 and now_s >= state.next_sync_s
    if cfg.exclude_persistent_lag and committed is not None and (polled or synced):
        stuck = persistent_partitions(committed, state.previous_committed)
        state = replace(state, previous_committed=tuple(int(c) for c in committed), persistent=stuck)
    if now_s >= state.next_poll_s:
        desired, state = _activity_poll(state, now_s, current, partition_lags, cfg)
    if desired == current and current > 0 and now_s >= state.next_sync_s:
        desired, state = _hpa_sync(state, now_s, current, partition_lags, partitions, cfg)
    if desired != current:
        state = _scaled(state, now_s, desired - current, cfg)
    return desired, state


def _activity_poll(
    state: KedaState, now_s: float, current: int, partition_lags: Sequence[float], cfg: KedaConfig
) -> tuple[int, KedaState]:
    """KEDA's own poll: activate from zero, or to zero after the cooldown (minReplicaCount 0)."""
    desired = current
    active = is_active(partition_lags, cfg)
    last_active = now_s if active else state.last_active_s
    if current == 0 and active:
        desired = max(1, cfg.min_replicas)
    elif (
        current > 0
        and not active
        and cfg.min_replicas == 0
        and (last_active is None or now_s - last_active >= cfg.cooldown_s)
    ):
        desired = 0
    return desired, replace(state, last_active_s=last_active, next_poll_s=now_s + cfg.polling_interval_s)


def _hpa_sync(
    state: KedaState,
    now_s: float,
    current: int,
    partition_lags: Sequence[float],
    partitions: int,
    cfg: KedaConfig,
) -> tuple[int, KedaState]:
    """The HPA's sync: the metric's recommendation, stabilized, rate-limited, within the bounds."""
    metric = keda_metric(partition_lags, partitions, cfg, state.persistent)
    raw = hpa_replicas(current, metric, cfg)
    keep = max(cfg.up_window_s, cfg.down_window_s)
    recs = [(t, r) for t, r in state.recommendations if now_s - t <= keep]
    recs.append((now_s, raw))
    stab = _stabilize(raw, current, now_s, recs, cfg)
    limited = _rate_limit(stab, current, now_s, state.scale_events, cfg)
    desired = max(max(1, cfg.min_replicas), min(limited, cfg.max_replicas))
    return desired, replace(state, recommendations=tuple(recs), next_sync_s=now_s + cfg.hpa_sync_s)


def _scaled(state: KedaState, now_s: float, change: int, cfg: KedaConfig) -> KedaState:
    """The scale event, remembered for the rate limits' periods."""
    events = [
        (t, d)
        for t, d in state.scale_events
        if now_s - t < max(cfg.scale_up_period_s, cfg.scale_down_period_s)
    ]
    events.append((now_s, change))
    return replace(state, scale_events=tuple(events))


__all__ = [
    "KedaConfig",
    "KedaState",
    "hpa_replicas",
    "is_active",
    "keda_metric",
    "persistent_partitions",
    "step",
]
