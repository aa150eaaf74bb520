"""The replica decision: like the HPA's replica calculator + stabilization, on a catch-up projection.

Pipeline (one pure call per reconcile, ``now`` passed in, history returned for the CR status):
  raw recommendation (projection vs SLA target, dead band) -> stabilization windows (HPA algorithm:
  scale-up takes the min of the recommendations in its window, scale-down the max of its window) ->
  clamp to [min, min(max, partitions)] -> guard (never scale down while the current projection
  exceeds the SLA) -> Decision with a CamelCase reason, plus the drain need.

Invariants (tested with hypothesis): never above partitions or max; never below min unless
scale-to-zero is allowed and the group is idle; never scale down while the projected catch-up
exceeds the SLA; more lag never yields fewer replicas; constant load converges without flapping.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lagpilot.decide.drain_policy import BusyDrain, DrainNeed, DrainPolicy, assisted_replicas, drain_need, overloaded_at
from lagpilot.decide.estimate import EstimatorState
from lagpilot.decide.lag import LagSnapshot, consume_position, oldest_unprocessed_age_s
from lagpilot.decide.projection import INF, PartitionLoad, project, required_replicas

if TYPE_CHECKING:
    from lagpilot.spec import GroupSpec


@dataclass(frozen=True)
class ScalingPolicy:
    """Scaling knobs: the CR's ``spec.scaling`` + ``catchUpSLASeconds`` plus model figures."""

    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = 0.1  # dead band around the target (fraction)
    poll_interval_s: float = 15.0
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    sla_s: float = 600.0
    # aim below the SLA: start-up delays and estimate noise eat the rest
    target_fraction: float = 0.8
    # a consumer busier than this is one burst away from falling behind
    max_utilization: float = 0.9
    # expected pod start (scheduling + image + process + group join), counted in scale-up projections
    pod_start_s: float = 30.0
    # below this whole-topic rate (records/s) with no lag the group is idle (scale to zero if min 0)
    idle_rate: float = 1e-3

    @property
    def scale_to_zero(self) -> bool:
        return self.min_replicas == 0

    @property
    def target_s(self) -> float:
        return self.sla_s * self.target_fraction

    @classmethod
    def from_group_spec(cls, spec: "GroupSpec", **model: Any) -> "ScalingPolicy":
        """From the parsed spec (``spec.scaling``, ``catchUpSLASeconds``); ``model`` overrides the
        figures that are not in the spec (target_fraction, pod_start_s, ...)."""
        s = spec.scaling
        return cls(
            min_replicas=s.min_replicas,
            max_replicas=s.max_replicas,
            tolerance=s.tolerance,
            poll_interval_s=s.poll_interval_seconds,
            scale_up_window_s=s.scale_up_window_seconds,
            scale_down_window_s=s.scale_down_window_seconds,
            sla_s=spec.catch_up_sla_seconds,
            **model,
        ).validate()

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **model: Any) -> "ScalingPolicy":
        """From the raw CR ``spec`` dict (kept for callers without a parsed spec) (``scaling`` and ``catchUpSLASeconds``); ``model`` overrides
        the figures that are not in the spec (target_fraction, pod_start_s, ...)."""
        s = dict(spec.get("scaling") or {})
        behavior = dict(s.get("behavior") or {})
        up = dict(behavior.get("scaleUp") or {})
        down = dict(behavior.get("scaleDown") or {})
        pol = cls(
            min_replicas=int(s.get("minReplicas", 1)),
            max_replicas=int(s.get("maxReplicas", 10)),
            tolerance=float(s.get("tolerance", 0.1)),
            poll_interval_s=float(s.get("pollIntervalSeconds", 15)),
            scale_up_window_s=float(up.get("stabilizationWindowSeconds", 0)),
            scale_down_window_s=float(down.get("stabilizationWindowSeconds", 300)),
            sla_s=float(spec.get("catchUpSLASeconds", 600)),
            **model,
        )
        return pol.validate()

    def validate(self) -> "ScalingPolicy":
        problems = []
        if self.min_replicas < 0:
            problems.append("scaling.minReplicas must be >= 0")
        if self.max_replicas < 1 or self.max_replicas < self.min_replicas:
            problems.append("scaling.maxReplicas must be >= 1 and >= minReplicas")
        if not 0 <= self.tolerance <= 1:  # the CRD's and spec.py's bound (1: the widest dead band)
            problems.append("scaling.tolerance must be in [0, 1]")
        if self.scale_up_window_s < 0 or self.scale_down_window_s < 0:
            problems.append("stabilization windows must be >= 0")
        if self.sla_s <= 0:
            problems.append("catchUpSLASeconds must be > 0")
        if not 0 < self.target_fraction <= 1 or not 0 < self.max_utilization <= 1:
            problems.append("target_fraction and max_utilization must be in (0, 1]")
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass(frozen=True)
class ScalingObservation:
    """What the decision needs from one observation cycle."""

    now_s: float
    partitions: int
    current_replicas: int
    loads: tuple[PartitionLoad, ...]
    capacity_per_replica: float | None  # None: no consumer has reported yet
    drain_active: bool = False
    last_drain_end_s: float | None = None
    oldest_age_s: Mapping[int, float] = field(default_factory=dict)
    drains_in_flight: int | None = None  # None: 1 if drain_active else 0
    tasks_in_flight: int = 0
    busy_partitions: tuple[int, ...] = ()  # hand-off not done: never planned twice
    retention_s: float | None = None  # the topic's retention (seconds; None: unknown): expiring ranges first
    # the same loads at the rate measured now (estimate.PartitionEstimate.live_rate; None: ``loads``):
    # the projection, the drain need and CatchUpAtRisk use them, the replica count ``loads``
    live_loads: tuple[PartitionLoad, ...] | None = None
    busy_drain: BusyDrain | None = None  # a running busy drain that may take a next split (issue 25 item 2)

    @property
    def loads_now(self) -> tuple[PartitionLoad, ...]:
        return self.live_loads if self.live_loads is not None else self.loads

    @property
    def total_lag(self) -> float:
        return sum(l.lag for l in self.loads)

    @property
    def produce_rate(self) -> float:
        return sum(l.rate for l in self.loads)

    @classmethod
    def from_estimate(
        cls,
        now_s: float,
        current_replicas: int,
        state: EstimatorState,
        snap: LagSnapshot | None = None,
        *,
        drain_active: bool = False,
        last_drain_end_s: float | None = None,
        drains_in_flight: int | None = None,
        tasks_in_flight: int = 0,
        busy_partitions: Sequence[int] = (),
        retention_s: float | None = None,
        busy_drain: BusyDrain | None = None,
    ) -> "ScalingObservation":
        """Build from the estimator state (rates, capacity) and the snapshot (offsets, ages)."""
        loads, live = [], []
        ages: dict[int, float] = {}
        offsets = snap.by_partition() if snap is not None else {}
        for pid, est in sorted(state.partitions.items()):
            po = offsets.get(pid)
            start = consume_position(po) if po is not None else (est.committed if est.committed is not None else est.low)
            loads.append(PartitionLoad(pid, float(est.lag), est.produce_rate, start, est.end))
            live.append(PartitionLoad(pid, float(est.lag), est.rate_now, start, est.end))
            if po is not None:
                age = oldest_unprocessed_age_s(po, now_s)
                if age is not None:
                    ages[pid] = age
        return cls(
            now_s=now_s,
            partitions=len(loads),
            current_replicas=current_replicas,
            loads=tuple(loads),
            capacity_per_replica=state.capacity_per_replica,
            drain_active=drain_active,
            last_drain_end_s=last_drain_end_s,
            oldest_age_s=ages,
            drains_in_flight=drains_in_flight,
            tasks_in_flight=tasks_in_flight,
            busy_partitions=tuple(busy_partitions),
            retention_s=retention_s,
            live_loads=tuple(live),
            busy_drain=busy_drain,
        )


@dataclass(frozen=True)
class ScalingHistory:
    """Raw recommendations of the last window (what HPA keeps in memory; we keep it in status)."""

    recommendations: tuple[tuple[float, int], ...] = ()
    last_scale_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "lastScaleS": self.last_scale_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "ScalingHistory":
        """Inverse of :meth:`to_dict`; a missing or malformed value gives an empty history."""
        if not data:
            return cls()
        try:
            recs = tuple((float(t), int(r)) for t, r in data.get("recommendations", []))
            last = data.get("lastScaleS")
            return cls(recs, None if last is None else float(last))
        except (TypeError, ValueError):
            return cls()


@dataclass(frozen=True)
class Decision:
    """One reconcile's answer. ``reason`` is CamelCase for conditions and events."""

    desired_replicas: int
    reason: str
    message: str
    projected_catch_up_s: float | None  # at desired replicas (None: capacity unknown)
    current_catch_up_s: float | None  # at current replicas
    required_replicas: int | None  # fewest meeting the target (None: unreachable or unknown)
    at_risk: bool  # projected catch-up at desired exceeds the SLA
    drain: DrainNeed | None = None
    hot_partitions: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        def fin(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, 1)

        return {
            "desiredReplicas": self.desired_replicas,
            "reason": self.reason,
            "message": self.message,
            "projectedCatchUpSeconds": fin(self.projected_catch_up_s),
            "currentCatchUpSeconds": fin(self.current_catch_up_s),
            "requiredReplicas": self.required_replicas,
            "atRisk": self.at_risk,
            "hotPartitions": list(self.hot_partitions),
            "drain": self.drain.to_dict() if self.drain else None,
        }


def _fmt(x: float | None) -> str:
    if x is None:
        return "unknown"
    return "never" if not math.isfinite(x) else f"{x:.0f}s"


def stabilize(
    raw: int, current: int, now_s: float, history: ScalingHistory, policy: ScalingPolicy
) -> tuple[int, ScalingHistory]:
    """HPA's ``stabilizeRecommendationWithBehaviors`` with ``now`` passed in and history returned."""
    keep = max(policy.scale_up_window_s, policy.scale_down_window_s)
    # like the HPA: remembered recommendations count while strictly inside their window
    past = [(t, r) for t, r in history.recommendations if 0 <= now_s - t < keep]
    up = raw
    # no remembered recommendations (first decision, or status lost): treat the current count as
    # recommended now, so a restart never scales down at once (the HPA's in-memory flaw)
    down = raw if history.recommendations or policy.scale_down_window_s <= 0 else max(raw, current)
    for t, r in past:
        if now_s - t < policy.scale_up_window_s:
            up = min(up, r)
        if now_s - t < policy.scale_down_window_s:
            down = max(down, r)
    recs = past + [(now_s, raw)]
    out = current
    if out < up:
        out = up
    if out > down:
        out = down
    return out, replace(history, recommendations=tuple(recs))


def decide(
    obs: ScalingObservation,
    policy: ScalingPolicy,
    history: ScalingHistory | None = None,
    drain_policy: DrainPolicy | None = None,
) -> tuple[Decision, ScalingHistory]:
    """Desired replicas (and drain need) for one observation. Pure: same inputs, same answer."""
    history = history or ScalingHistory()
    cur = max(0, obs.current_replicas)
    parts = obs.partitions
    cap_hi = min(policy.max_replicas, parts)
    lo = min(policy.min_replicas, cap_hi)
    rate = obs.produce_rate
    lag = obs.total_lag
    idle = lag <= 0 and rate <= policy.idle_rate
    c = obs.capacity_per_replica
    target = policy.target_s

    if parts <= 0:
        d = Decision(cur, "NoPartitions", "topic has no partitions (missing?): replicas unchanged",
                     None, None, None, False)
        return d, history

    drain: DrainNeed | None = None
    burst_assist = False  # the count is the drain-assisted one in a burst (the capped group overloaded)
    hot: tuple[int, ...] = ()
    cur_proj: float | None = None
    required: int | None = None
    if c is None or c <= 0:
        if cur == 0 and not idle:
            raw, reason, why = max(1, lo), "ScaleFromZero", "records waiting, no capacity figure yet"
        else:
            raw, reason, why = cur, "CapacityUnknown", "no consumer has reported its capacity yet"
            if not idle:
                raw = max(raw, 1)
    else:
        # fewer replicas than the load needs, with drains carrying the excess, when that is cheaper
        # (rates only: a fixed point under constant load); the drain planner then plans for them
        assisted = None
        if drain_policy is not None and not (idle and policy.scale_to_zero):
            assisted = assisted_replicas(obs.loads, c, min_replicas=max(1, lo), cap=cap_hi, sla_s=policy.sla_s,
                                         policy=drain_policy, max_utilization=policy.max_utilization,
                                         target_s=target)
        now_loads = obs.loads_now
        if drain_policy is not None:
            drain = drain_need(
                now_loads, c, group_replicas=assisted or cap_hi, target_s=target, sla_s=policy.sla_s,
                policy=drain_policy, now_s=obs.now_s, drain_active=obs.drain_active,
                last_drain_end_s=obs.last_drain_end_s, oldest_age_s=obs.oldest_age_s,
                drains_in_flight=obs.drains_in_flight, tasks_in_flight=obs.tasks_in_flight,
                busy_partitions=obs.busy_partitions, retention_s=obs.retention_s, busy_drain=obs.busy_drain,
            )
        drained = set(drain.partitions) if drain else set()
        # after the hand-off the drained backlog is no longer the group's to clear
        loads = [PartitionLoad(l.partition, 0.0, l.rate) if l.partition in drained else l for l in obs.loads]
        hot = tuple(p for p, t in sorted(project(now_loads, parts, c).per_partition_s.items(),
                                         key=lambda kv: (-kv[1], kv[0])) if t > target)
        # the current projection on the whole backlog: a planned drain has not taken anything yet,
        # so it may spare a scale-up but never justify a scale-down (guard below). On the rate
        # measured now: a fall is not stabilized here (it is for the replica count)
        cur_proj = project(now_loads, cur, c).catch_up_s
        cur_util = project(loads, cur, c).utilization if cur > 0 else INF
        # the replica count is chosen on the load alone (not on the current count), so that the
        # answer under constant load is a fixed point: no up-then-down flapping. The pod start-up
        # only enters the reported projection at the desired count.
        required = required_replicas(loads, c, target, cap_hi, max_utilization=policy.max_utilization)
        if idle and policy.scale_to_zero:
            raw, reason, why = 0, "ScaleToZero", "idle: no lag and no records arriving"
        elif assisted is not None:
            required = assisted
            raw = assisted
            burst_assist = overloaded_at([l.rate for l in obs.loads], cap_hi, c)
            reason = "ScaleUp" if assisted > cur else ("ScaleDown" if assisted < cur else "Steady")
            why = (f"{assisted} replicas with drains carrying their excess cost less than sizing the group "
                   f"for the load (drain-assisted)")
        elif required is None and (live_required := required_replicas(
                [PartitionLoad(l.partition, 0.0, l.rate) if l.partition in drained else l for l in now_loads],
                c, target, cap_hi, max_utilization=policy.max_utilization)) is not None:
            # the smoothed rate (falls stabilized) needs more than the cap, the rate measured now does
            # not: the rate fell. Hold what runs (scale-down waits for the estimate), not "unreachable"
            raw, reason = min(cap_hi, max(cur, live_required)), "Steady"
            why = (f"the produce rate fell to {sum(l.rate for l in now_loads):.0f}/s (measured now; "
                   f"{live_required} replicas hold it): holding while the fall is stabilized "
                   f"({rate:.0f}/s)")
        elif required is None:
            raw, reason = cap_hi, "SLAUnreachable"
            limit = "partitions" if parts <= policy.max_replicas else "maxReplicas"
            why = f"even {cap_hi} replicas (capped by {limit}) cannot catch up within {target:.0f}s"
        elif required > cur:
            band = target * (1 + policy.tolerance)
            cur_proj_after = project(loads, cur, c).catch_up_s
            if cur > 0 and cur_proj_after <= band and cur_util <= policy.max_utilization * (1 + policy.tolerance):
                raw, reason = cur, "WithinTolerance"
                why = f"projected {_fmt(cur_proj_after)} within {policy.tolerance:.0%} of target {target:.0f}s"
            else:
                raw, reason = required, "ScaleUp"
                why = f"projected {_fmt(cur_proj)} at {cur} > target {target:.0f}s"
        else:
            down_to = required_replicas(loads, c, target * (1 - policy.tolerance), cap_hi,
                                        max_utilization=policy.max_utilization * (1 - policy.tolerance))
            if down_to is not None and required is not None:
                # the tighter bounds can only ask for more; where no count meets the tighter
                # utilization, required_replicas falls back to the fewest meeting the target alone,
                # which can be below what the load needs at the plain bound: up, then down, forever
                down_to = max(down_to, required)
            if down_to is not None and down_to < cur:
                raw, reason = down_to, "ScaleDown"
                why = f"{down_to} replicas project {_fmt(project(loads, down_to, c).catch_up_s)} <= target {target:.0f}s"
            else:
                raw, reason = cur, "Steady"
                why = f"projected {_fmt(cur_proj)} at {cur}, target {target:.0f}s"
        if not idle or not policy.scale_to_zero:
            raw = max(raw, 1)

    floor = 0 if (idle and policy.scale_to_zero) else lo
    raw = max(min(raw, cap_hi), floor)
    stabilized, history = stabilize(raw, cur, obs.now_s, history, policy)
    desired = max(min(stabilized, cap_hi), floor)
    if desired < cur and stabilized > cap_hi:
        reason = "CappedAtPartitions" if parts < policy.max_replicas else "CappedAtMax"
        why = f"{cur} replicas > cap {cap_hi} (min(maxReplicas, partitions))"
    elif desired > cur and reason not in ("ScaleUp", "ScaleFromZero", "SLAUnreachable"):
        reason, why = "BelowMinimum", f"{cur} < minReplicas {lo}"
    elif desired < cur and reason not in ("ScaleDown", "ScaleToZero"):
        limit = "CappedAtPartitions" if parts < policy.max_replicas else "CappedAtMax"
        reason, why = limit, f"{cur} > cap {cap_hi}"
    elif desired == cur and raw < cur:
        reason = "ScaleDownStabilized"
        why = f"{why}; holding for the {policy.scale_down_window_s:.0f}s scale-down window"
    elif desired == cur and raw > cur:
        reason = "ScaleUpStabilized"
        why = f"{why}; holding for the {policy.scale_up_window_s:.0f}s scale-up window"
    # a burst (the group at its cap cannot hold the live rates: the projection is infinite at every
    # count) does not block a scale-down to the drain-assisted count: holding replicas cannot bring
    # the projection within the SLA, the drains planned for the smaller group carry the excess
    burst_assisted = required is not None and raw < cur and c is not None and c > 0 and burst_assist
    if (desired < cur <= cap_hi and cur_proj is not None and cur_proj > policy.sla_s
            and not burst_assisted):
        desired = cur
        reason, why = "ScaleDownBlockedAtRisk", f"projected {_fmt(cur_proj)} > SLA {policy.sla_s:.0f}s"

    proj_desired: float | None = None
    if c is not None and c > 0:
        drained = set(drain.partitions) if drain else set()
        loads_d = [PartitionLoad(l.partition, 0.0, l.rate) if l.partition in drained else l for l in obs.loads_now]
        proj_desired = project(loads_d, desired, c, current_replicas=cur, startup_s=policy.pod_start_s).catch_up_s
    at_risk = proj_desired is not None and proj_desired > policy.sla_s
    if reason == "SLAUnreachable":
        at_risk = True
    arrow = f"{cur}->{desired}"
    message = f"{_verb(cur, desired)} {arrow}: {why}"
    if drain is not None:
        message += f"; {drain.message}"
    if desired != cur:
        history = replace(history, last_scale_s=obs.now_s)
    return (
        Decision(
            desired_replicas=desired,
            reason=reason,
            message=message,
            projected_catch_up_s=proj_desired,
            current_catch_up_s=cur_proj,
            required_replicas=required,
            at_risk=at_risk,
            drain=drain,
            hot_partitions=hot,
        ),
        history,
    )


def _verb(cur: int, desired: int) -> str:
    if desired > cur:
        return "scale up"
    if desired < cur:
        return "scale down"
    return "keep"


def loads_from(lags: Sequence[float], rates: Sequence[float]) -> tuple[PartitionLoad, ...]:
    """Convenience for tests and the simulator: partition i has lags[i] and rates[i]."""
    return tuple(PartitionLoad(i, float(l), float(r)) for i, (l, r) in enumerate(zip(lags, rates)))
