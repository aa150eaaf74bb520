"""Learning from what this CR showed (issue 25 item 4), in the shape of Flink's autoscaler.

Two things, both pure (``now`` and every observation passed in, the memory returned):

**Measured start-ups** (Flink: ``job.autoscaler.restart.time-tracking.enabled``, which records each
rescale's restart duration and plans with the largest of the recent ones, capped by
``restart.time-tracking.limit``, the fixed ``restart.time`` until one is measured). Here:

- *pod start*: a scale-up the step asked for (``after_decision``) -> the first observation whose
  Deployment has that many Ready replicas;
- *drain start-up*: a drain's first attempt launched (``status.drain.startedAt``) -> the first cycle
  that saw its progress move (``progressAt`` then; the observation time where no executor writes it),
  kept apart for drains launched on a Ready warm runtime (``runtime: warm``) and cold ones.

Both are observed at poll granularity: a sample is an upper bound, at most one poll interval above
the true figure. The last :data:`KEEP` samples of each are kept in the controller's memory (the
ConfigMap a restarted operator resumes from); the planner uses their nearest-rank
:data:`PERCENTILE` (the largest while fewer than 5 are kept, then the second largest), capped at
:data:`LIMIT_S`, instead of the model's fixed figure, which stays the figure until one is measured.
Why not the median: an under-estimated start-up costs SLA violations (the planner launches too
late), an over-estimated one a replica or a drain a little early; Flink takes the maximum for that
reason. Why not the maximum: one outlier (an image pull on a fresh node, a cold JVM) would rule the
next four plans.

**Ineffective scale-ups** (Flink: ``scaling.effectiveness.detection.enabled``, threshold 10 %: after a
scale-up, if the processing rate rose by less than 10 % of the increase expected, further
scale-ups of that vertex are blocked). Here: when the step scales up from R0 to R1 while the group
is backlogged, it records the group's throughput (committed records/s over the last interval) and
the partitions that lag (L). Once R1 replicas are Ready, the throughput over the next
:data:`WINDOW_POLLS` polls (at least :data:`MIN_WINDOW_S`) is compared with the expected
``before × min(R1, L) / min(R0, L)`` (a balanced assignment keeps at most min(R, L) consumers
busy). If the group stayed backlogged and the rise is below :data:`EFFECTIVENESS_THRESHOLD` of the
expected rise, something downstream of the consumers (a sink, a database, a rate limit) bounds the
throughput: :class:`Limit` is set, ``scaling.decide`` holds the count (no more replicas;
``DownstreamLimited``), and the status says so (condition ``ScalingIneffective``). It is cleared
when the replica count changes, when the backlog is gone (less than the group commits in one
poll), or after :data:`HOLD_S` (then one more
scale-up may be tried and judged again). A check is dropped, never judged, while a drain is in
flight (a hand-off moves committed offsets by whole ranges) or the estimator reset a partition.
While a check is pending, :func:`unjudged` holds further scale-ups at its count (``ScaleUpUnjudged``)
unless the produce rate rose since: the consumers' capacity reports fall after any scale-up into a
downstream limit, and the estimator follows falls within a poll (a consumer that really slowed is
the SLA risk), so without the hold the projection would scale on to the cap before the judgement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lagpilot.decide import handoff
from lagpilot.decide.estimate import EstimatorState

KEEP = 5  # samples kept per figure (memory: bounded)
PERCENTILE = 0.8  # nearest rank: the largest of <= 4 samples, the second largest of 5
LIMIT_S = 900.0  # a measured start-up is capped here (Flink: restart.time-tracking.limit, 15 min)
EFFECTIVENESS_THRESHOLD = 0.1  # Flink's scaling.effectiveness.threshold default
WINDOW_POLLS = 2  # the throughput after a scale-up is measured over this many polls once Ready
MIN_WINDOW_S = 30.0  # ... and at least this long (a rebalance pauses consumption for a few seconds)
HOLD_S = 600.0  # a detected downstream limit holds the count this long at most, then is judged again
PENDING_MAX_S = (
    LIMIT_S  # a scale-up not Ready by then is not a start-up to learn from (pod_health reports it)
)

WARM = "warm"


def figure(samples: Sequence[float], default: float) -> float:
    """The figure the planner uses: the nearest-rank PERCENTILE of the samples, capped at LIMIT_S;
    ``default`` (the model's) while none is measured."""
    if not samples:
        return default
    ordered = sorted(samples)
    rank = max(1, math.ceil(PERCENTILE * len(ordered)))
    return min(ordered[rank - 1], LIMIT_S)


def _kept(samples: tuple[float, ...], x: float) -> tuple[float, ...]:
    return (*samples, round(min(max(0.0, x), LIMIT_S), 3))[-KEEP:]


@dataclass(frozen=True)
class PendingScale:
    """A scale-up asked for at ``at_s`` to ``target`` replicas, not Ready yet."""

    at_s: float
    target: int


@dataclass(frozen=True)
class ScaleUpCheck:
    """A scale-up whose effect on the group's throughput is being measured."""

    at_s: float
    from_replicas: int
    to_replicas: int
    before: float  # committed records/s over the interval before the scale-up
    lagging: int  # partitions with lag at the scale-up
    ready_s: float | None = None  # when the first observation saw ``to_replicas`` Ready
    committed_at_ready: int | None = None  # the group's committed offsets (sum) then
    rate: float | None = None  # the produce rate measured at the scale-up (records/s; None: older memory)

    @property
    def expected(self) -> float:
        """The throughput expected at ``to_replicas``: at most min(R, lagging) consumers are busy."""
        r0 = min(self.from_replicas, self.lagging)
        r1 = min(self.to_replicas, self.lagging)
        return self.before * r1 / r0 if r0 > 0 else self.before


@dataclass(frozen=True)
class Limit:
    """A scale-up that did not raise the throughput: something downstream bounds it."""

    since_s: float
    replicas: int  # the count the limit was seen at (held there)
    from_replicas: int
    before: float
    expected: float
    after: float

    @property
    def message(self) -> str:
        rise, want = self.after - self.before, self.expected - self.before
        return (
            f"the scale-up {self.from_replicas}->{self.replicas} raised the group's throughput "
            f"by {rise:.1f}/s ({self.before:.1f} -> {self.after:.1f} records/s) of {want:.1f}/s expected "
            f"(< {EFFECTIVENESS_THRESHOLD:.0%}): a downstream limit; no more replicas"
        )


@dataclass(frozen=True)
class Learned:
    """The step's memory of what this CR showed (``StepState.learned``; JSON via to_dict)."""

    pod_start: tuple[float, ...] = ()
    drain_start: tuple[float, ...] = ()  # cold launches
    drain_warm_start: tuple[float, ...] = ()  # launches on a Ready warm runtime
    pending_scale: PendingScale | None = None
    drain_pending: int | None = None  # a drain seen launched without progress: its id
    drain_measured: int = 0  # the highest drain id measured (or given up on)
    check: ScaleUpCheck | None = None
    limit: Limit | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "podStart": list(self.pod_start),
            "drainStart": list(self.drain_start),
            "drainWarmStart": list(self.drain_warm_start),
            "pendingScale": None
            if self.pending_scale is None
            else [self.pending_scale.at_s, self.pending_scale.target],
            "drainPending": self.drain_pending,
            "drainMeasured": self.drain_measured,
            "check": None if self.check is None else _fields(self.check),
            "limit": None if self.limit is None else _fields(self.limit),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Learned:
        """Inverse of :meth:`to_dict`; a missing or malformed value starts fresh."""
        if not data:
            return cls()
        try:
            ps = data.get("pendingScale")
            check, limit = data.get("check"), data.get("limit")
            return cls(
                pod_start=_floats(data.get("podStart")),
                drain_start=_floats(data.get("drainStart")),
                drain_warm_start=_floats(data.get("drainWarmStart")),
                pending_scale=None if not ps else PendingScale(float(ps[0]), int(ps[1])),
                drain_pending=None if data.get("drainPending") is None else int(data["drainPending"]),
                drain_measured=int(data.get("drainMeasured") or 0),
                check=None if not check else ScaleUpCheck(**check),
                limit=None if not limit else Limit(**limit),
            )
        except (TypeError, ValueError, IndexError, KeyError):
            return cls()

    def figures(
        self, pod_start_s: float, drain_start_s: float, drain_warm_start_s: float
    ) -> tuple[float, float, float]:
        """(pod start, cold drain start-up, warm drain start-up) the planner uses, given the defaults."""
        return (
            figure(self.pod_start, pod_start_s),
            figure(self.drain_start, drain_start_s),
            figure(self.drain_warm_start, drain_warm_start_s),
        )


def _fields(x: Any) -> dict[str, Any]:
    return dict(x.__dict__)


def _floats(v: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in (v or ()))[-KEEP:]


Event = tuple[str, str, str]  # (type, reason, message) for a Kubernetes event


def committed_sum(est: EstimatorState | None) -> int | None:
    """The group's consume positions summed over the partitions: the committed offset, or the log
    start where the group has not committed yet (as its lag counts; None: no partitions)."""
    if est is None or not est.partitions:
        return None
    return sum(int(p.committed if p.committed is not None else p.low) for p in est.partitions.values())


def throughput(prev: EstimatorState | None, est: EstimatorState) -> float | None:
    """Records/s the group committed between two observations (None: not measurable: no previous
    observation, partitions changed, an offset reset, or no time between them)."""
    if prev is None or set(prev.partitions) != set(est.partitions) or est.resets != prev.resets:
        return None
    a, b = committed_sum(prev), committed_sum(est)
    dt = est.at_s - prev.at_s
    if a is None or b is None or dt <= 0 or b < a:
        return None
    return (b - a) / dt


def _drains_in_flight(drains: Sequence[handoff.DrainStatus]) -> bool:
    return any(not handoff.is_idle(d) for d in drains)


def observe(
    learned: Learned,
    *,
    now: float,
    current: int,
    ready: int | None,
    drains: Sequence[handoff.DrainStatus],
    prev: EstimatorState | None,
    est: EstimatorState,
    poll_s: float,
) -> tuple[Learned, tuple[Event, ...]]:
    """Fold one observation in: start-up samples, the running effectiveness check, the limit's end."""
    learned = _pod_start(learned, now, current, ready)
    learned = _drain_start(learned, now, drains, prev.at_s if prev is not None else None)
    learned, events = _judge(learned, now, current, ready, drains, prev, est, poll_s)
    learned, cleared = _clear_limit(learned, now, current, est, poll_s)
    return learned, events + cleared


def _pod_start(learned: Learned, now: float, current: int, ready: int | None) -> Learned:
    ps = learned.pending_scale
    if ps is None:
        return learned
    if current != ps.target or now - ps.at_s > PENDING_MAX_S:  # not applied, changed again, or never Ready
        return replace(learned, pending_scale=None)
    if ready is not None and ready >= ps.target:
        return replace(learned, pending_scale=None, pod_start=_kept(learned.pod_start, now - ps.at_s))
    return learned


def _progressed(d: handoff.DrainStatus) -> bool:
    return d.records_done > 0 or any(s.next > s.start for s in d.sub_ranges)


def _drain_start(
    learned: Learned, now: float, drains: Sequence[handoff.DrainStatus], prev_at: float | None
) -> Learned:
    """A drain's first attempt: launched -> the first look that saw its progress, one sample. The first
    look must be fresh: the drain was seen launched without progress, or it launched since the
    previous observation (a restarted operator finding a drain well under way learns nothing from it)."""
    pending = learned.drain_pending
    for d in drains:
        if d.id <= learned.drain_measured or d.started_at is None:
            continue
        done = replace(learned, drain_pending=None, drain_measured=d.id)
        if d.attempt > max(1, d.attempt_base):  # retried before its progress was seen: no sample
            return done
        if not _progressed(d):
            if d.phase is handoff.Phase.RUNNING:
                return replace(learned, drain_pending=d.id)
            return done if d.phase is not handoff.Phase.HANDED_OFF else learned
        if pending != d.id and (prev_at is None or d.started_at < prev_at):
            return done
        seen = d.progress_at if d.progress_at is not None and d.progress_at > d.started_at else now
        x = seen - d.started_at
        if d.runtime == WARM:
            return replace(done, drain_warm_start=_kept(learned.drain_warm_start, x))
        return replace(done, drain_start=_kept(learned.drain_start, x))
    if pending is not None and all(d.id != pending for d in drains):
        return replace(learned, drain_pending=None, drain_measured=max(learned.drain_measured, pending))
    return learned


def _window_s(poll_s: float) -> float:
    return max(WINDOW_POLLS * poll_s, MIN_WINDOW_S)


def _lagging(est: EstimatorState) -> int:
    return sum(1 for p in est.partitions.values() if p.lag > 0)


def _judge(
    learned: Learned,
    now: float,
    current: int,
    ready: int | None,
    drains: Sequence[handoff.DrainStatus],
    prev: EstimatorState | None,
    est: EstimatorState,
    poll_s: float,
) -> tuple[Learned, tuple[Event, ...]]:
    """Advance the effectiveness check: Ready -> start the window; window over -> judge."""
    c = learned.check
    if c is None:
        return learned, ()
    drop = replace(learned, check=None)
    if (
        current != c.to_replicas
        or _drains_in_flight(drains)
        or (prev is not None and est.resets != prev.resets)
        or now - c.at_s > PENDING_MAX_S + _window_s(poll_s)
    ):
        return drop, ()
    if c.ready_s is None:
        if ready is not None and ready >= c.to_replicas:
            total = committed_sum(est)
            return (
                replace(learned, check=replace(c, ready_s=now, committed_at_ready=total))
                if total is not None
                else drop
            ), ()
        return learned, ()
    if now - c.ready_s < _window_s(poll_s):
        return learned, ()
    total = committed_sum(est)
    if total is None or c.committed_at_ready is None or total < c.committed_at_ready:
        return drop, ()
    # judged only while the group stayed backlogged on as many partitions as it could use, by more
    # than it commits in a poll (the limit's own clearing rule): a group that caught up was not held
    # back (its throughput is then the produce rate, not its limit)
    after = (total - c.committed_at_ready) / (now - c.ready_s)
    if _lagging(est) < min(c.to_replicas, c.lagging) or est.total_lag <= after * poll_s:
        return drop, ()
    want = c.expected - c.before
    if want <= 0 or after - c.before >= EFFECTIVENESS_THRESHOLD * want:
        return drop, ()
    limit = Limit(
        now, c.to_replicas, c.from_replicas, round(c.before, 3), round(c.expected, 3), round(after, 3)
    )
    return replace(learned, check=None, limit=limit), (("Warning", "DownstreamLimited", limit.message),)


def _clear_limit(
    learned: Learned, now: float, current: int, est: EstimatorState, poll_s: float
) -> tuple[Learned, tuple[Event, ...]]:
    lim = learned.limit
    if lim is None:
        return learned, ()
    why = ""
    if current != lim.replicas:
        why = f"the replica count changed ({lim.replicas} -> {current})"
    elif est.total_lag <= lim.after * poll_s:  # what the group commits in one poll: no backlog left
        why = "the backlog is gone"
    elif now - lim.since_s >= HOLD_S:
        why = f"held {HOLD_S:.0f}s: a scale-up may be tried (and judged) again"
    if not why:
        return learned, ()
    return replace(learned, limit=None), (
        ("Normal", "DownstreamLimitCleared", f"downstream limit cleared: {why}"),
    )


def unjudged(learned: Learned, *, current: int, est: EstimatorState) -> int | None:
    """The count a scale-up went to while its check is pending (learn has not judged whether it raised
    the throughput) and the produce rate has not risen since: ``scaling.decide`` asks for no more
    replicas than that until it is judged (one step while the last one is unjudged, as the HPA waits
    for its pods' metrics). After a scale-up every consumer's capacity report falls whether the new
    consumers are held back downstream or the consumers really slowed; only the judgement tells them
    apart. A produce rate risen by more than EFFECTIVENESS_THRESHOLD since the scale-up is load the
    check does not explain: not held (None). Bounded: the check is judged or dropped within
    PENDING_MAX_S plus the window."""
    c = learned.check
    if c is None or current != c.to_replicas:
        return None
    rate_now = sum(p.rate_now for p in est.partitions.values())
    if c.rate is None or rate_now > c.rate * (1 + EFFECTIVENESS_THRESHOLD):
        return None
    return c.to_replicas


def after_decision(
    learned: Learned,
    *,
    now: float,
    current: int,
    replicas: int,
    held: bool,
    drains: Sequence[handoff.DrainStatus],
    prev: EstimatorState | None,
    est: EstimatorState,
) -> Learned:
    """The step asked for ``replicas``: a scale-up starts a pod-start measurement and, when the group
    is backlogged and its throughput measurable, an effectiveness check."""
    if held or replicas <= current:
        return learned
    out = replace(learned, pending_scale=PendingScale(now, replicas), check=None)
    before = throughput(prev, est)
    lagging = _lagging(est)
    if current > 0 and before is not None and before > 0 and lagging > 0 and not _drains_in_flight(drains):
        rate = round(sum(p.rate_now for p in est.partitions.values()), 3)
        out = replace(out, check=ScaleUpCheck(now, current, replicas, round(before, 3), lagging, rate=rate))
    return out


__all__ = [
    "EFFECTIVENESS_THRESHOLD",
    "HOLD_S",
    "KEEP",
    "LIMIT_S",
    "PERCENTILE",
    "Learned",
    "Limit",
    "PendingScale",
    "ScaleUpCheck",
    "after_decision",
    "figure",
    "observe",
    "throughput",
    "unjudged",
]
