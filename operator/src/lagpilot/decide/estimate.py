"""Smoothed produce rate per partition and consumer capacity, from successive lag snapshots.

Pure: ``update(prev_state, snapshot) -> state``. The state is JSON-serialisable (``to_dict`` /
``from_dict``) so the operator stores it in the CR status and a restarted operator resumes with the
rates it had instead of starting blind.

Why these choices:
- EWMA with a *time-based* alpha (``1 - 0.5 ** (dt / half_life)``) so irregular observation
  intervals (a slow API call, an operator restart, a long gap) weigh samples by the time they cover.
  A long gap simply yields the average rate over the gap.
- Rises are taken as measured (issue 25): the produce rate is exactly countable from log-end offsets,
  so a rise is the rate over the last interval (a step is seen at the first poll after it, exactly at
  the second). A 30 s rise half-life read 197/s two polls into a 6 -> 450/s step. Falls are smoothed
  (45 s half-life) for the replica count: over-estimating the rate for a minute costs a replica for a
  while; under-estimating it costs SLA violations.
- ``live_rate``: the rate measured over the last interval, up or down. The projection, the drain
  planner and ``CatchUpAtRisk`` use it (scaling.decide), the replica count the smoothed ``produce_rate``
  (falls stabilized for scale-down, like the HPA's windows): no "SLA unreachable" while the backlog is
  gone and the group holds the live rate.
- Falls are also capped by the windowed rate: while the rate falls, the estimate is never above the
  average rate over the last ~2 minutes (``window_s``; applied once the window spans at least half of
  that). So a burst, or a load that dropped, leaves the estimate within ~2 minutes instead of
  decaying for many half-lives (a 120 s half-life kept 173/s in the demo for minutes after the rate
  fell to ~6/s, and with it an infinite catch-up projection). Rises are never capped (the window lags).
- Offsets moving backwards (topic recreated, partition truncated) reset that partition's estimate
  instead of producing a negative rate; it is reported in ``events``.
- Retention deleting records the group had not consumed (committed < low) is counted once per
  record into ``data_loss_records`` (cumulative) and reported in ``events``.
- Capacity per replica is the median of the consumers' own reports (records per busy second, from
  commit metadata; robust to one consumer's odd batch). The reports are already averages over each
  consumer's last 50 batches, so a rise is smoothed with a 15 s half-life only (within 10 % of a
  step 30 -> 52/s in 30 s; the 120 s it had took 245 s, and the demo planned its drain on 35.6/s
  while its consumers reported ~51.5/s). A fall is taken as fast (15 s, one default poll): a
  consumer that really slowed (a slower downstream) is the SLA risk, and the 120 s it had kept a
  100 -> 40/s fall believed for minutes (tests/unit/test_capacity_fall.py). After a scale-up into a
  downstream limit every consumer's report falls too; ``learn.unjudged`` holds further scale-ups
  until that scale-up is judged, so the fast fall no longer runs the group to its cap. The estimate
  is a convex step towards the median: never above the highest report; steady noise of +-5 % on
  each report reads unbiased on average (same half-life both ways).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lagpilot.decide.lag import LagSnapshot, PartitionOffsets, partition_lag


@dataclass(frozen=True)
class EstimatorConfig:
    """Smoothing parameters (defaults documented in docs/decision.md)."""

    rise_half_life_s: float = 0.0  # 0: a rise is taken as measured over the last interval (issue 25)
    fall_half_life_s: float = 45.0
    capacity_half_life_s: float = 15.0  # rises of the consumers' capacity reports
    capacity_fall_half_life_s: float = 15.0  # falls: one poll (a consumer that slowed is the SLA risk)
    window_s: float = 120.0  # falls are capped by the average rate over this trailing window
    window_spacing_s: float = 12.0  # window samples closer than this are merged (bounds the state)


DEFAULT_CONFIG = EstimatorConfig()


@dataclass(frozen=True)
class PartitionEstimate:
    """What the estimator remembers about one partition."""

    partition: int
    end: int
    low: int
    committed: int | None
    lag: int
    produce_rate: float = 0.0  # records/s, smoothed
    consume_rate: float = 0.0  # records/s the group committed, smoothed (informational)
    samples: int = 0  # rate samples folded in since the last reset (0: rate not known yet)
    lost_through: int | None = None  # highest log-start offset already counted as data loss
    window: tuple[tuple[float, int], ...] = ()  # recent (at_s, end) samples, oldest first (falls cap)
    live_rate: float | None = None  # records/s over the last interval, as measured (None: not yet)

    @property
    def rate_now(self) -> float:
        """The rate measured now (the last interval), else the smoothed one."""
        return self.live_rate if self.live_rate is not None else self.produce_rate


@dataclass(frozen=True)
class EstimatorState:
    """The estimator's memory; stored in the CR status between cycles."""

    at_s: float
    partitions: dict[int, PartitionEstimate]
    capacity_per_replica: float | None = None  # records per busy second of one consumer
    data_loss_records: int = 0  # cumulative records deleted by retention before consumption
    resets: int = 0  # cumulative partition resets (offsets went backwards)
    events: tuple[str, ...] = field(default=())  # what this update noticed (not cumulative)

    @property
    def produce_rate(self) -> float:
        """Whole-topic produce rate (records/s)."""
        return sum(p.produce_rate for p in self.partitions.values())

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions.values())

    def rate(self, partition: int) -> float:
        est = self.partitions.get(partition)
        return est.produce_rate if est is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (partition keys become strings, as JSON requires)."""
        return {
            "atS": self.at_s,
            "capacityPerReplica": self.capacity_per_replica,
            "dataLossRecords": self.data_loss_records,
            "resets": self.resets,
            "partitions": {str(k): asdict(v) for k, v in sorted(self.partitions.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EstimatorState:
        """Inverse of :meth:`to_dict`. Raises ValueError on a malformed value (callers then start fresh)."""
        try:
            parts = {
                int(k): PartitionEstimate(
                    **{
                        **v,
                        "partition": int(v["partition"]),
                        "window": tuple((float(t), int(e)) for t, e in v.get("window") or ()),
                    }
                )
                for k, v in dict(data.get("partitions", {})).items()
            }
            cap = data.get("capacityPerReplica")
            return cls(
                at_s=float(data["atS"]),
                partitions=parts,
                capacity_per_replica=None if cap is None else float(cap),
                data_loss_records=int(data.get("dataLossRecords", 0)),
                resets=int(data.get("resets", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed estimator state: {exc}") from exc


def _alpha(dt: float, half_life: float) -> float:
    if half_life <= 0:
        return 1.0
    return float(1.0 - 0.5 ** (dt / half_life))


def _fresh(p: PartitionOffsets, at_s: float) -> PartitionEstimate:
    return PartitionEstimate(
        partition=p.partition,
        end=p.end,
        low=p.low,
        committed=p.committed,
        lag=partition_lag(p),
        window=((at_s, p.end),),
    )


def _slide(
    window: tuple[tuple[float, int], ...], at_s: float, end: int, cfg: EstimatorConfig
) -> tuple[tuple[float, int], ...]:
    """Append (at_s, end); keep the samples of the last `window_s` plus the newest older one (the
    anchor, so the window spans at least `window_s` once there is that much history); merge samples
    closer than `window_spacing_s` (at most ~window_s / spacing + 2 entries)."""
    w = list(window)
    if len(w) >= 2 and w[-1][0] - w[-2][0] < cfg.window_spacing_s:
        w[-1] = (at_s, end)
    else:
        w.append((at_s, end))
    cut = at_s - cfg.window_s
    while len(w) >= 2 and w[1][0] <= cut:
        w.pop(0)
    return tuple(w)


def _window_rate(window: tuple[tuple[float, int], ...], cfg: EstimatorConfig) -> float | None:
    """Average rate over the window; None while it spans less than half of `window_s`."""
    if len(window) < 2:
        return None
    (t0, e0), (t1, e1) = window[0], window[-1]
    span = t1 - t0
    if span < cfg.window_s / 2 or e1 < e0:
        return None
    return (e1 - e0) / span


def _count_loss(p: PartitionOffsets, lost_through: int | None) -> tuple[int, int | None]:
    """New records lost to retention on this partition and the updated high-water of counted loss."""
    if p.committed is None or p.committed >= p.low:
        return 0, lost_through
    counted_from = p.committed if lost_through is None else max(p.committed, lost_through)
    new = max(0, p.low - counted_from)
    return new, max(p.low, lost_through if lost_through is not None else p.low)


def _capacity(
    prev: float | None, reports: Mapping[int, float], dt: float, cfg: EstimatorConfig
) -> float | None:
    values = [v for v in reports.values() if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if not values:
        return prev
    sample = float(statistics.median(values))
    if prev is None or dt <= 0:
        return sample
    half_life = cfg.capacity_half_life_s if sample > prev else cfg.capacity_fall_half_life_s
    return prev + _alpha(dt, half_life) * (sample - prev)


def update(
    prev: EstimatorState | None, snap: LagSnapshot, config: EstimatorConfig = DEFAULT_CONFIG
) -> EstimatorState:
    """Fold one snapshot into the estimate.

    ``prev`` None (first cycle, or state lost): rates start unknown (0, ``samples`` 0) and the next
    snapshot's rate is taken as is. A snapshot not newer than ``prev`` refreshes offsets and lag
    but leaves rates alone (duplicate or skewed clock).
    """
    events: list[str] = []
    if prev is None:
        parts: dict[int, PartitionEstimate] = {}
        loss_total = 0
        for p in snap.partitions:
            new_loss, lost_through = _count_loss(p, None)
            loss_total += new_loss
            if new_loss:
                events.append(f"DataLoss:{p.partition}:{new_loss}")
            parts[p.partition] = replace(_fresh(p, snap.at_s), lost_through=lost_through)
        return EstimatorState(
            at_s=snap.at_s,
            partitions=parts,
            capacity_per_replica=_capacity(None, snap.capacity_reports, 0.0, config),
            data_loss_records=loss_total,
            events=tuple(events),
        )

    dt = snap.at_s - prev.at_s
    parts = {}
    loss_total = prev.data_loss_records
    resets = prev.resets
    for p in snap.partitions:
        old = prev.partitions.get(p.partition)
        if old is None:
            est = _fresh(p, snap.at_s)
            events.append(f"PartitionAdded:{p.partition}")
        elif p.end < old.end or p.low < old.low:
            est = _fresh(p, snap.at_s)
            resets += 1
            events.append(f"OffsetsWentBackwards:{p.partition}")
        elif dt <= 0:
            est = replace(old, end=p.end, low=p.low, committed=p.committed, lag=partition_lag(p))
        else:
            inst = (p.end - old.end) / dt
            window = _slide(old.window or ((prev.at_s, old.end),), snap.at_s, p.end, config)
            if old.samples == 0:
                rate = inst
            elif inst > old.produce_rate:
                rate = old.produce_rate + _alpha(dt, config.rise_half_life_s) * (inst - old.produce_rate)
            else:
                rate = old.produce_rate + _alpha(dt, config.fall_half_life_s) * (inst - old.produce_rate)
                capped = _window_rate(window, config)
                if capped is not None:
                    # the window brings a fall down fast, never below what is measured now (a steady
                    # rate one record under the last sample is no fall to the window's average)
                    rate = min(rate, max(capped, inst))
            consume = old.consume_rate
            if p.committed is not None and old.committed is not None and p.committed >= old.committed:
                inst_c = (p.committed - old.committed) / dt
                consume = (
                    inst_c
                    if old.samples == 0
                    else old.consume_rate + _alpha(dt, config.fall_half_life_s) * (inst_c - old.consume_rate)
                )
            est = PartitionEstimate(
                live_rate=max(0.0, inst),
                partition=p.partition,
                end=p.end,
                low=p.low,
                committed=p.committed,
                lag=partition_lag(p),
                produce_rate=max(0.0, rate),
                consume_rate=max(0.0, consume),
                samples=old.samples + 1,
                lost_through=old.lost_through,
                window=window,
            )
        new_loss, lost_through = _count_loss(p, est.lost_through)
        if new_loss:
            loss_total += new_loss
            events.append(f"DataLoss:{p.partition}:{new_loss}")
        parts[p.partition] = replace(est, lost_through=lost_through)
    for gone in sorted(set(prev.partitions) - set(parts)):
        events.append(f"PartitionRemoved:{gone}")
    return EstimatorState(
        at_s=max(prev.at_s, snap.at_s),
        partitions=parts,
        capacity_per_replica=_capacity(prev.capacity_per_replica, snap.capacity_reports, dt, config),
        data_loss_records=loss_total,
        resets=resets,
        events=tuple(events),
    )
