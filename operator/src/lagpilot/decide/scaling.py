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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lagpilot.decide.drain_policy import (
    BusyDrain,
    DrainNeed,
    DrainPolicy,
    RollOver,
    assisted_replicas,
    drain_need,
    overloaded_at,
    roll_over,
)
from lagpilot.decide.estimate import EstimatorState
from lagpilot.decide.lag import LagSnapshot, consume_position, oldest_unprocessed_age_s
from lagpilot.decide.learn import Limit
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
    def from_group_spec(cls, spec: GroupSpec, **model: Any) -> ScalingPolicy:
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

    def validate(self) -> ScalingPolicy:
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
    # a scale-up that did not raise the throughput (decide.learn, issue 25 item 4): no more replicas
    downstream_limit: Limit | None = None
    # the count a scale-up went to whose effect learn has not judged yet (learn.unjudged): no more
    unjudged_scale_up: int | None = None

    @property
    def loads_now(self) -> tuple[PartitionLoad, ...]:
        return self.live_loads if self.live_loads is not None else self.loads

    @property
    def total_lag(self) -> float:
        return sum(x.lag for x in self.loads)

    @property
    def produce_rate(self) -> float:
        return sum(x.rate for x in self.loads)

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
        downstream_limit: Limit | None = None,
    ) -> ScalingObservation:
        """Build from the estimator state (rates, capacity) and the snapshot (offsets, ages)."""
        loads, live = [], []
        ages: dict[int, float] = {}
        offsets = snap.by_partition() if snap is not None else {}
        for pid, est in sorted(state.partitions.items()):
            po = offsets.get(pid)
            start = (
                consume_position(po)
                if po is not None
                else (est.committed if est.committed is not None else est.low)
            )
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
            downstream_limit=downstream_limit,
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
    def from_dict(cls, data: Mapping[str, Any] | None) -> ScalingHistory:
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
    # the running busy drain takes no next split because the load outgrew its slots (issue 25):
    # its final part names this (status.drain.reason RollingOver); None: no roll-over
    roll_over: RollOver | None = None

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
    recs = [*past, (now_s, raw)]
    out = current
    if out < up:
        out = up
    if out > down:
        out = down
    return out, replace(history, recommendations=tuple(recs))


Step = tuple[int, str, str]  # (replicas, reason, message): what every named step returns


@dataclass(frozen=True)
class _Case:
    """The inputs every step reads: the observation, the policy and the bounds derived from them."""

    obs: ScalingObservation
    policy: ScalingPolicy
    cur: int  # current replicas
    cap_hi: int  # min(maxReplicas, partitions)
    lo: int  # minReplicas, capped
    idle: bool  # no lag and (almost) no records arriving
    c: float | None  # records/s one replica processes (None: unknown)

    @property
    def target(self) -> float:
        return self.policy.target_s

    @property
    def to_zero(self) -> bool:
        return self.idle and self.policy.scale_to_zero


@dataclass(frozen=True)
class _Load:
    """What the load needs before a count is chosen (capacity known): the drain that carries part of
    it, the drain-assisted count, and the projections on the loads the group keeps."""

    drain: DrainNeed | None
    assisted: int | None  # fewer replicas with drains carrying their excess (None: not cheaper)
    burst_assist: bool  # the assisted count is the one of a burst (the capped group overloaded)
    loads: tuple[PartitionLoad, ...]  # smoothed rates, drained backlogs handed off
    hot: tuple[int, ...]  # partitions projected beyond the target, hottest first
    cur_proj: float  # catch-up at the current count, whole backlog, rates measured now
    cur_util: float
    required: int | None  # fewest replicas meeting the target (None: unreachable)
    roll_over: RollOver | None = None  # the running busy drain outgrew its slots (no next split)


def decide(
    obs: ScalingObservation,
    policy: ScalingPolicy,
    history: ScalingHistory | None = None,
    drain_policy: DrainPolicy | None = None,
) -> tuple[Decision, ScalingHistory]:
    """Desired replicas (and drain need) for one observation. Pure: same inputs, same answer.

    The named steps, in order (docs/decision.md): assess the load (the drain need, the
    drain-assisted count, the projections) -> recommend a raw count (the first rule that applies)
    -> clamp to the bounds -> stabilize (HPA windows) -> explain a held or capped count -> block a
    scale-down at risk -> hold at a downstream limit -> project at the desired count.
    """
    history = history or ScalingHistory()
    cur = max(0, obs.current_replicas)
    if obs.partitions <= 0:
        d = Decision(
            cur,
            "NoPartitions",
            "topic has no partitions (missing?): replicas unchanged",
            None,
            None,
            None,
            False,
        )
        return d, history
    cap_hi = min(policy.max_replicas, obs.partitions)
    idle = obs.total_lag <= 0 and obs.produce_rate <= policy.idle_rate
    c = (
        obs.capacity_per_replica
        if obs.capacity_per_replica is not None and obs.capacity_per_replica > 0
        else None
    )
    x = _Case(obs, policy, cur, cap_hi, min(policy.min_replicas, cap_hi), idle, c)

    load = _assess(x, drain_policy) if c is not None else None
    raw, reason, why = _recommend(x, load) if load is not None else _without_capacity(x)
    floor = 0 if x.to_zero else x.lo
    raw = max(min(raw, cap_hi), floor)
    stabilized, history = stabilize(raw, cur, obs.now_s, history, policy)
    desired = max(min(stabilized, cap_hi), floor)
    desired, reason, why = _explain_limits(x, raw, stabilized, (desired, reason, why))
    desired, reason, why = _block_scale_down_at_risk(x, load, raw, (desired, reason, why))
    desired, reason, why = _hold_at_downstream_limit(x, (desired, reason, why))

    drain = load.drain if load is not None else None
    proj_desired = _projection_at(x, drain, desired)
    at_risk = reason == "SLAUnreachable" or (proj_desired is not None and proj_desired > policy.sla_s)
    message = f"{_verb(cur, desired)} {cur}->{desired}: {why}"
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
            current_catch_up_s=load.cur_proj if load is not None else None,
            required_replicas=load.required if load is not None else None,
            at_risk=at_risk,
            drain=drain,
            hot_partitions=load.hot if load is not None else (),
            roll_over=load.roll_over if load is not None else None,
        ),
        history,
    )


def _without_capacity(x: _Case) -> Step:
    """No consumer has reported its capacity: start one if records wait, otherwise hold."""
    if x.cur == 0 and not x.idle:
        return max(1, x.lo), "ScaleFromZero", "records waiting, no capacity figure yet"
    return (
        (x.cur if x.idle else max(x.cur, 1)),
        "CapacityUnknown",
        "no consumer has reported its capacity yet",
    )


def _handed_off(loads: Sequence[PartitionLoad], drained: set[int]) -> tuple[PartitionLoad, ...]:
    """After the hand-off the drained backlog is no longer the group's to clear."""
    return tuple(PartitionLoad(x.partition, 0.0, x.rate) if x.partition in drained else x for x in loads)


def _assess(x: _Case, drain_policy: DrainPolicy | None) -> _Load:
    """The drain need and the drain-assisted count, then the projections on what the group keeps."""
    obs, policy, c = x.obs, x.policy, x.c
    assert c is not None
    # fewer replicas than the load needs, with drains carrying the excess, when that is cheaper
    # (rates only: a fixed point under constant load); the drain planner then plans for them
    assisted = None
    if drain_policy is not None and not x.to_zero:
        assisted = assisted_replicas(
            obs.loads,
            c,
            min_replicas=max(1, x.lo),
            cap=x.cap_hi,
            sla_s=policy.sla_s,
            policy=drain_policy,
            max_utilization=policy.max_utilization,
            target_s=x.target,
        )
    now_loads = obs.loads_now
    drain: DrainNeed | None = None
    if drain_policy is not None:
        drain = drain_need(
            now_loads,
            c,
            group_replicas=assisted or x.cap_hi,
            target_s=x.target,
            sla_s=policy.sla_s,
            policy=drain_policy,
            now_s=obs.now_s,
            drain_active=obs.drain_active,
            last_drain_end_s=obs.last_drain_end_s,
            oldest_age_s=obs.oldest_age_s,
            drains_in_flight=obs.drains_in_flight,
            tasks_in_flight=obs.tasks_in_flight,
            busy_partitions=obs.busy_partitions,
            retention_s=obs.retention_s,
            busy_drain=obs.busy_drain,
        )
    loads = _handed_off(obs.loads, set(drain.partitions) if drain else set())
    hot = tuple(
        p
        for p, t in sorted(
            project(now_loads, obs.partitions, c).per_partition_s.items(), key=lambda kv: (-kv[1], kv[0])
        )
        if t > x.target
    )
    # the current projection on the whole backlog: a planned drain has not taken anything yet,
    # so it may spare a scale-up but never justify a scale-down (guard below). On the rate
    # measured now: a fall is not stabilized here (it is for the replica count)
    cur_proj = project(now_loads, x.cur, c).catch_up_s
    cur_util = project(loads, x.cur, c).utilization if x.cur > 0 else INF
    # the replica count is chosen on the load alone (not on the current count), so that the
    # answer under constant load is a fixed point: no up-then-down flapping. The pod start-up
    # only enters the reported projection at the desired count.
    required = required_replicas(loads, c, x.target, x.cap_hi, max_utilization=policy.max_utilization)
    if assisted is not None:
        required = assisted
    burst = assisted is not None and overloaded_at([load.rate for load in obs.loads], x.cap_hi, c)
    rolled = None
    if drain is None and drain_policy is not None and drain_policy.busy and obs.busy_drain is not None:
        # no next split: say so when it is because the load outgrew the drain's slots (a roll-over)
        rolled = roll_over(
            now_loads,
            c,
            obs.busy_drain,
            group_replicas=assisted or x.cap_hi,
            target_s=x.target,
            policy=drain_policy,
            sla_s=policy.sla_s,
            oldest_age_s=obs.oldest_age_s,
        )
    return _Load(drain, assisted, burst, loads, hot, cur_proj, cur_util, required, rolled)


def _recommend(x: _Case, load: _Load) -> Step:
    """The raw count: the first rule that applies, never below one replica unless scaling to zero."""
    for rule in (_scale_to_zero, _drain_assisted, _rate_fell, _unreachable, _scale_up, _scale_down_or_steady):
        step = rule(x, load)
        if step is not None:
            raw, reason, why = step
            return (raw if x.to_zero else max(raw, 1)), reason, why
    raise AssertionError("the last rule always applies")


def _scale_to_zero(x: _Case, load: _Load) -> Step | None:
    if x.to_zero:
        return 0, "ScaleToZero", "idle: no lag and no records arriving"
    return None


def _drain_assisted(x: _Case, load: _Load) -> Step | None:
    a = load.assisted
    if a is None:
        return None
    reason = "ScaleUp" if a > x.cur else ("ScaleDown" if a < x.cur else "Steady")
    return (
        a,
        reason,
        (
            f"{a} replicas with drains carrying their excess cost less than sizing the group "
            f"for the load (drain-assisted)"
        ),
    )


def _rate_fell(x: _Case, load: _Load) -> Step | None:
    """The smoothed rate (falls stabilized) needs more than the cap, the rate measured now does not:
    the rate fell. Hold what runs (scale-down waits for the estimate), not "unreachable"."""
    if load.required is not None:
        return None
    assert x.c is not None
    drained = set(load.drain.partitions) if load.drain else set()
    now_loads = x.obs.loads_now
    live = required_replicas(
        _handed_off(now_loads, drained), x.c, x.target, x.cap_hi, max_utilization=x.policy.max_utilization
    )
    if live is None:
        return None
    return (
        min(x.cap_hi, max(x.cur, live)),
        "Steady",
        f"the produce rate fell to {sum(x.rate for x in now_loads):.0f}/s (measured now; "
        f"{live} replicas hold it): holding while the fall is stabilized ({x.obs.produce_rate:.0f}/s)",
    )


def _unreachable(x: _Case, load: _Load) -> Step | None:
    if load.required is not None:
        return None
    limit = "partitions" if x.obs.partitions <= x.policy.max_replicas else "maxReplicas"
    return (
        x.cap_hi,
        "SLAUnreachable",
        f"even {x.cap_hi} replicas (capped by {limit}) cannot catch up within {x.target:.0f}s",
    )


def _scale_up(x: _Case, load: _Load) -> Step | None:
    """More replicas, unless the current count projects within the tolerance band of the target."""
    if load.required is None or load.required <= x.cur:
        return None
    assert x.c is not None
    p = x.policy
    proj_after = project(load.loads, x.cur, x.c).catch_up_s
    if (
        x.cur > 0
        and proj_after <= x.target * (1 + p.tolerance)
        and load.cur_util <= p.max_utilization * (1 + p.tolerance)
    ):
        return (
            x.cur,
            "WithinTolerance",
            f"projected {_fmt(proj_after)} within {p.tolerance:.0%} of target {x.target:.0f}s",
        )
    return load.required, "ScaleUp", f"projected {_fmt(load.cur_proj)} at {x.cur} > target {x.target:.0f}s"


def _scale_down_or_steady(x: _Case, load: _Load) -> Step:
    """Fewer replicas when they meet a target tightened by the tolerance, else keep the count."""
    assert x.c is not None and load.required is not None
    p = x.policy
    down_to = required_replicas(
        load.loads,
        x.c,
        x.target * (1 - p.tolerance),
        x.cap_hi,
        max_utilization=p.max_utilization * (1 - p.tolerance),
    )
    if down_to is not None:
        # the tighter bounds can only ask for more; where no count meets the tighter
        # utilization, required_replicas falls back to the fewest meeting the target alone,
        # which can be below what the load needs at the plain bound: up, then down, forever
        down_to = max(down_to, load.required)
        if down_to < x.cur:
            return (
                down_to,
                "ScaleDown",
                f"{down_to} replicas project {_fmt(project(load.loads, down_to, x.c).catch_up_s)} "
                f"<= target {x.target:.0f}s",
            )
    return x.cur, "Steady", f"projected {_fmt(load.cur_proj)} at {x.cur}, target {x.target:.0f}s"


def _explain_limits(x: _Case, raw: int, stabilized: int, step: Step) -> Step:
    """The reason for a count the bounds or the stabilization windows made differ from the raw one."""
    desired, reason, why = step
    cur, cap_hi, p = x.cur, x.cap_hi, x.policy
    capped = "CappedAtPartitions" if x.obs.partitions < p.max_replicas else "CappedAtMax"
    if desired < cur and stabilized > cap_hi:
        return desired, capped, f"{cur} replicas > cap {cap_hi} (min(maxReplicas, partitions))"
    if desired > cur and reason not in ("ScaleUp", "ScaleFromZero", "SLAUnreachable"):
        return desired, "BelowMinimum", f"{cur} < minReplicas {x.lo}"
    if desired < cur and reason not in ("ScaleDown", "ScaleToZero"):
        return desired, capped, f"{cur} > cap {cap_hi}"
    if desired == cur and raw < cur:
        return (
            desired,
            "ScaleDownStabilized",
            f"{why}; holding for the {p.scale_down_window_s:.0f}s scale-down window",
        )
    if desired == cur and raw > cur:
        return (
            desired,
            "ScaleUpStabilized",
            f"{why}; holding for the {p.scale_up_window_s:.0f}s scale-up window",
        )
    return step


def _block_scale_down_at_risk(x: _Case, load: _Load | None, raw: int, step: Step) -> Step:
    """Never scale down while the current projection exceeds the SLA, except to the drain-assisted
    count of a burst: there the projection is infinite at every count, holding replicas cannot bring
    it within the SLA, and the drains planned for the smaller group carry the excess."""
    desired, _, _ = step
    if load is None or not desired < x.cur <= x.cap_hi or load.cur_proj <= x.policy.sla_s:
        return step
    if load.required is not None and raw < x.cur and load.burst_assist:
        return step
    return x.cur, "ScaleDownBlockedAtRisk", f"projected {_fmt(load.cur_proj)} > SLA {x.policy.sla_s:.0f}s"


def _hold_at_downstream_limit(x: _Case, step: Step) -> Step:
    """No more replicas while a scale-up to the current count did not raise the group's throughput
    (decide.learn: less than 10 % of the rise expected, the group backlogged): something downstream
    of the consumers bounds it, and more consumers would only add cost (Flink's ineffective-scaling
    detection). Scale-downs and the count itself are left to the other steps. The same while the
    last scale-up is not judged yet (``unjudged_scale_up``): one step at a time."""
    desired, _, why = step
    lim = x.obs.downstream_limit
    keep = max(x.cur, x.lo)  # never below minReplicas (a raised minimum still applies)
    pending = x.obs.unjudged_scale_up
    if lim is None and pending is not None and desired > keep and x.cur >= pending:
        return (
            keep,
            "ScaleUpUnjudged",
            (f"{why}; held: the scale-up to {pending} is not judged yet (did it raise the throughput?)"),
        )
    if lim is None or desired <= keep or x.cur < lim.replicas:
        return step
    return keep, "DownstreamLimited", f"{why}; held: {lim.message}"


def _projection_at(x: _Case, drain: DrainNeed | None, desired: int) -> float | None:
    """Catch-up at the desired count, pod start-up included, after the drain's hand-off."""
    if x.c is None:
        return None
    loads = _handed_off(x.obs.loads_now, set(drain.partitions) if drain else set())
    return project(loads, desired, x.c, current_replicas=x.cur, startup_s=x.policy.pod_start_s).catch_up_s


def _verb(cur: int, desired: int) -> str:
    if desired > cur:
        return "scale up"
    if desired < cur:
        return "scale down"
    return "keep"


def loads_from(lags: Sequence[float], rates: Sequence[float]) -> tuple[PartitionLoad, ...]:
    """Convenience for tests and the simulator: partition i has lags[i] and rates[i]."""
    return tuple(
        PartitionLoad(i, float(lag), float(r)) for i, (lag, r) in enumerate(zip(lags, rates, strict=False))
    )
