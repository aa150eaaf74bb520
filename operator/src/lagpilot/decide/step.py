"""One decision step: the whole pure core of a reconcile, shared by the operator and the simulator.

    step(state, observation, spec, now) -> (decision, state)

covers, in this order: the estimate update (``estimate.update``), the projection and the replica
decision with its stabilization (``scaling.decide``), the drain planning (``drain_policy.drain_need``,
called by ``decide``) and the hand-off's replica hold (``handoff.replicas_override``: the rule is the
hand-off's own, never re-stated here). ``reconcile._cycle`` (its phases ``reconcile/observe.observe``
and ``reconcile._decide``) converts Kafka/Kubernetes reads into a :class:`StepObservation` and
applies the :class:`StepDecision`; ``simulate`` builds the same
observation from its simulated topic and applies the same decision to its simulated world. Neither
holds any policy arithmetic of its own.

Policies are built from the parsed spec (``spec.parse_spec``: one parse, one default per knob)
plus :class:`Model`, the figures the spec does not carry (pod start-up, drain start-up, hand-off
pause, drain task throughput, how many drains the executor runs side by side).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagpilot.decide import estimate as est_mod
from lagpilot.decide import handoff, learn
from lagpilot.decide import runtime as rt_mod
from lagpilot.decide.drain_policy import BusyDrain, DrainNeed, DrainPolicy, Lane
from lagpilot.decide.lag import LagSnapshot
from lagpilot.decide.scaling import Decision, ScalingHistory, ScalingObservation, ScalingPolicy, decide
from lagpilot.spec import GroupSpec


@dataclass(frozen=True)
class Model:
    """Figures the spec does not hold (measured; docs/decision.md names the command for each)."""

    pod_start_s: float = 30.0  # scheduling + cached image + process start + group join
    drain_start_s: float = 20.0  # `lagpilot drain` launched -> first batch (bench/drain.py: 13-20 s)
    # a drain launched on a Ready warm runtime -> first batch
    # (bench/drain.py --runtime warm: start_up_s 2.3 s)
    drain_warm_start_s: float = 3.0
    handoff_pause_s: float = 1.0  # the live group's pause at a hand-off (consumer path: one batch)
    drain_task_capacity: float | None = None  # records/s of one drain task; None: one consumer's
    max_concurrent_drains: int = 1  # drains the executor runs side by side (status.drain: one)
    drain_min_interval_s: float = 60.0
    # drain-assisted replica count (drain_policy.assisted_replicas): fewer replicas when drains
    # carrying their excess save at least this many replicas, always for CRs with
    # spec.drain.assistReplicas, else only in bursts (drain_policy.overloaded_at); None: never
    drain_assist_min_saving: float | None = 1.0
    # issue 25 item 2: the executor keeps a drain busy across a burst (takes the next split of its
    # partitions without a new start-up: handoff.Extension, docs/drain.md "Busy drains")
    drain_busy: bool = False
    # issue 25 item 4 (decide.learn): plan with the pod start and drain start-ups this CR showed (the
    # figures above until measured), and hold the count when a scale-up did not raise the throughput
    learn_start_ups: bool = True
    detect_ineffective_scaling: bool = True


@dataclass(frozen=True)
class Policies:
    scaling: ScalingPolicy
    drain: DrainPolicy | None  # None: drains disabled or cancelled
    # the warm drain runtime (decide.runtime)
    runtime: rt_mod.RuntimePolicy = field(default_factory=rt_mod.RuntimePolicy)
    learn_start_ups: bool = False  # Model.learn_start_ups
    detect_ineffective_scaling: bool = False  # Model.detect_ineffective_scaling

    def with_learned(self, learned: learn.Learned) -> Policies:
        """The same policies with the measured start-ups in place of the model's figures (decide.learn)."""
        cold_default = self.drain.start_up_s if self.drain is not None else self.runtime.warm_up_s
        pod, cold, warm = learned.figures(self.scaling.pod_start_s, cold_default, self.runtime.warm_start_s)
        drain = dataclasses.replace(self.drain, start_up_s=cold) if self.drain is not None else None
        return dataclasses.replace(
            self,
            scaling=dataclasses.replace(self.scaling, pod_start_s=pod),
            drain=drain,
            runtime=dataclasses.replace(self.runtime, warm_up_s=cold, warm_start_s=warm),
        )

    @classmethod
    def from_group_spec(cls, spec: GroupSpec, model: Model = Model()) -> Policies:
        scaling = ScalingPolicy.from_group_spec(spec, pod_start_s=model.pod_start_s)
        drain = None
        if spec.drain.enabled and not spec.drain.cancel:
            drain = DrainPolicy.from_group_spec(
                spec,
                start_up_s=model.drain_start_s,
                handoff_s=model.handoff_pause_s,
                task_capacity=model.drain_task_capacity,
                max_concurrent=model.max_concurrent_drains,
                min_interval_s=model.drain_min_interval_s,
                # the drain-assisted replica count: always where the CR opts in
                # (spec.drain.assistReplicas), else only in bursts (the capped group cannot hold the load)
                assist_min_saving=model.drain_assist_min_saving,
                busy=model.drain_busy,
            )
        runtime = rt_mod.RuntimePolicy.from_group_spec(
            spec, warm_up_s=model.drain_start_s, warm_start_s=model.drain_warm_start_s
        )
        return cls(scaling, drain, runtime, model.learn_start_ups, model.detect_ineffective_scaling)


@dataclass(frozen=True)
class StepState:
    """What survives between steps: the controller's memory. The simulator carries it from step to
    step; the operator keeps it in the ConfigMap ``<cr>-lagpilot-state`` the CR owns
    (lagpilot.act.memory), so a restarted operator resumes from it."""

    estimator: est_mod.EstimatorState | None = None
    history: ScalingHistory = field(default_factory=ScalingHistory)
    learned: learn.Learned = field(
        default_factory=learn.Learned
    )  # measured start-ups, the effectiveness check, a downstream limit

    def to_memory(self) -> dict[str, Any]:
        """JSON-ready: ``{"estimator": EstimatorState.to_dict(), "scalingHistory": ScalingHistory.to_dict(),
        "learned": learn.Learned.to_dict()}``."""
        return {
            "estimator": self.estimator.to_dict() if self.estimator else None,
            "scalingHistory": self.history.to_dict(),
            "learned": self.learned.to_dict(),
        }

    @classmethod
    def from_memory(cls, memory: Mapping[str, Any] | None) -> StepState:
        """Inverse of :meth:`to_memory`; None or an unreadable part starts fresh."""
        memory = memory or {}
        est = None
        if memory.get("estimator"):
            try:
                est = est_mod.EstimatorState.from_dict(memory["estimator"])
            except (ValueError, TypeError, KeyError):
                est = None
        return cls(
            est,
            ScalingHistory.from_dict(memory.get("scalingHistory")),
            learn.Learned.from_dict(memory.get("learned")),
        )


@dataclass(frozen=True)
class StepObservation:
    """One observation: offsets (with capacity reports and oldest-record times), the consumer
    Deployment's replica count, and the drains the executor holds (``status.drain``)."""

    snapshot: LagSnapshot
    current_replicas: int
    drains: tuple[handoff.DrainStatus, ...] = ()
    last_drain_end_s: float | None = None  # when the last drain finished (status.drain.finishedAt)
    retention_s: float | None = None  # the topic's retention.ms / 1000 (None: unknown): expiring ranges first
    runtime: rt_mod.RuntimeObservation | None = (
        None  # the warm drain runtime's Deployment (None: none observed)
    )
    ready_replicas: int | None = None


@dataclass(frozen=True)
class StepDecision:
    decision: Decision  # the scaler's answer (reason, message, projections, drain need)
    hold: int | None  # the hand-off's replica override (None: the scaler decides the count)
    # the hand-off owns the replica count: the scaler must not act (handoff.holds_replicas)
    held: bool = False
    events: tuple[str, ...] = field(default=())  # estimator events (DataLoss:p:n, OffsetsWentBackwards:p)
    runtime_replicas: int | None = None  # the warm drain runtime's replica count (None: no runtime)
    split_waits: bool = False  # a drain is due but waits for the warm runtime (its split once Ready)
    # decide.learn (issue 25 item 4): the events of this step (type, reason, message), the start-up
    # figures the planner used ({"podStart": (seconds, samples), ...}) and a downstream limit
    learn_events: tuple[tuple[str, str, str], ...] = ()
    start_ups: Mapping[str, tuple[float, tuple[float, ...]]] = field(default_factory=dict)
    limit: learn.Limit | None = None
    # when an idle busy drain hands its partitions back (handoff.hand_back_hold: the hold, the
    # estimator warm): the executor's Observed.hand_back, the simulator's settle
    hand_back: handoff.HandBack = field(default_factory=handoff.HandBack)

    @property
    def replicas(self) -> int:
        """The replica count to run: the hand-off's override, else the decision (None while the
        hand-off holds the count without an override: keep what runs)."""
        if self.hold is not None:
            return self.hold
        return self.decision.desired_replicas

    @property
    def drain(self) -> DrainNeed | None:
        return self.decision.drain


def drain_view(drains: Sequence[handoff.DrainStatus], last_end_s: float | None) -> dict[str, Any]:
    """What the planner needs to know about the drains in flight (from the hand-off's own status)."""
    live = [d for d in drains if not handoff.is_idle(d)]
    ends = [d.finished_at for d in drains if handoff.is_idle(d) and d.finished_at is not None]
    if last_end_s is not None:
        ends.append(last_end_s)
    tasks = sum(max(d.slots if d.busy else 0, sum(1 for s in d.sub_ranges if not s.done)) for d in live)
    busy = sorted(
        {p for d in live if d.handed_off_at is None for p in d.partitions}
        | {p for d in live if d.extension is not None for p in d.extension.partitions}
    )
    return {
        "drains_in_flight": len(live),
        "tasks_in_flight": tasks,
        "busy_partitions": tuple(busy),
        "last_drain_end_s": max(ends) if ends else None,
        "drain_active": bool(live),
        "busy_drain": busy_drain_of(live),
    }


def busy_drain_of(live: Sequence[handoff.DrainStatus]) -> BusyDrain | None:
    """The running busy drain that may take a next split now (issue 25 item 2): the only drain in
    flight, busy, Running (launched, no retry pending) and no split of it in hand-off. Its lanes: per
    partition of its ranges, the unfinished sub-ranges (one task each while slots last) and their
    records left; its slots: ``status.drain.slots``."""
    if len(live) != 1:
        return None
    d = live[0]
    if (
        not d.busy
        or d.phase is not handoff.Phase.RUNNING
        or d.extension is not None
        or d.retry_at is not None
    ):
        return None
    per: dict[int, list[float]] = {p: [0, 0.0] for p in d.partitions}
    for s in d.sub_ranges:
        if not s.done:
            lane = per.setdefault(s.partition, [0, 0.0])
            lane[0] += 1
            lane[1] += s.remaining
    lanes = tuple(Lane(p, int(n), rem) for p, (n, rem) in sorted(per.items()))
    # the slots its launch recorded (handoff.job_slots: the Job's parallelism, fixed at launch); a
    # drain launched before slots were recorded: one per unfinished sub-range; the slot rate its
    # plan sized them with (None: not recorded, the task capacity of the moment)
    return BusyDrain(lanes, d.slots or sum(lane.tasks for lane in lanes), d.slot_rate or None)


def hold_of(drains: Sequence[handoff.DrainStatus]) -> int | None:
    """The hand-off's replica override (the smallest if several drains hold)."""
    holds = [h for h in (handoff.replicas_override(d) for d in drains) if h is not None]
    return min(holds) if holds else None


def held_by(drains: Sequence[handoff.DrainStatus]) -> bool:
    """The hand-off owns the replica count (its rule: handoff.holds_replicas)."""
    rule = getattr(handoff, "holds_replicas", None)
    if rule is None:
        return hold_of(drains) is not None
    return any(rule(d) for d in drains)


def step(
    state: StepState, obs: StepObservation, spec: GroupSpec | Policies, now: float, model: Model = Model()
) -> tuple[StepDecision, StepState]:
    """One pure decision: estimate -> learn -> project -> scale (stabilized) -> plan drains ->
    hand-off hold."""
    pol = spec if isinstance(spec, Policies) else Policies.from_group_spec(spec, model)
    est = est_mod.update(state.estimator, obs.snapshot)
    learned = state.learned
    learn_events: tuple[learn.Event, ...] = ()
    if pol.learn_start_ups or pol.detect_ineffective_scaling:
        learned, learn_events = learn.observe(
            state.learned,
            now=now,
            current=obs.current_replicas,
            ready=obs.ready_replicas,
            drains=obs.drains,
            prev=state.estimator,
            est=est,
            poll_s=pol.scaling.poll_interval_s,
        )
    if pol.learn_start_ups:
        pol = pol.with_learned(learned)
    limit = learned.limit if pol.detect_ineffective_scaling else None
    view = drain_view(obs.drains, obs.last_drain_end_s)
    sobs = ScalingObservation.from_estimate(
        now,
        obs.current_replicas,
        est,
        obs.snapshot,
        drain_active=view["drain_active"],
        last_drain_end_s=view["last_drain_end_s"],
        drains_in_flight=view["drains_in_flight"],
        tasks_in_flight=view["tasks_in_flight"],
        busy_partitions=view["busy_partitions"],
        retention_s=obs.retention_s,
        busy_drain=view["busy_drain"],
        downstream_limit=limit,
    )
    if pol.detect_ineffective_scaling:  # one scale-up at a time while learn has not judged the last
        sobs = dataclasses.replace(
            sobs, unjudged_scale_up=learn.unjudged(learned, current=obs.current_replicas, est=est)
        )
    rpol, dpol = pol.runtime, pol.drain
    if dpol is not None and rpol.mode == rt_mod.MODE_ON_DEMAND:  # always: the cold figure, as before
        dpol = dataclasses.replace(dpol, start_up_s=rt_mod.start_up_s(rpol, obs.runtime, now))
    decision, history = decide(sobs, pol.scaling, state.history, dpol)
    # a busy drain's next split never waits: its tasks run (no runtime, warm or cold, to start)
    waits = (
        decision.drain is not None
        and not decision.drain.extension
        and rt_mod.split_waits(rpol, obs.runtime, now)
    )
    replicas = rt_mod.wanted_replicas(
        rpol,
        obs.runtime,
        drain_wanted=decision.drain is not None,
        drain_in_flight=view["drain_active"],
        last_drain_end_s=view["last_drain_end_s"],
        now=now,
    )
    if waits:
        decision = dataclasses.replace(
            decision,
            drain=None,
            message=(
                f"{decision.message}; a drain is due: it waits for the warm drain runtime "
                "(split once it is Ready)"
            ),
        )
    out = StepDecision(
        decision,
        hold_of(obs.drains),
        held_by(obs.drains),
        tuple(est.events),
        replicas,
        waits,
        learn_events,
        start_ups_of(pol, learned) if pol.learn_start_ups else {},
        limit,
        hand_back_of(pol, dpol, est),
    )
    if pol.learn_start_ups or pol.detect_ineffective_scaling:
        learned = learn.after_decision(
            learned,
            now=now,
            current=obs.current_replicas,
            replicas=out.replicas,
            held=out.held and out.hold is None,
            drains=obs.drains,
            prev=state.estimator,
            est=est,
        )
    return out, StepState(est, history, learned)


def hand_back_of(pol: Policies, dpol: DrainPolicy | None, est: est_mod.EstimatorState) -> handoff.HandBack:
    """The hand-back rule's inputs (``handoff.HandBack``): hold for a new drain's start-up as the
    planner pays it now (``dpol``: learned, warm or cold) within ``handoff.hold_seconds``' bounds;
    warm once the consumers' capacity is known and every partition's rate was measured over an
    interval (``live_rate``: none on an estimator's first snapshot, e.g. an operator started
    without its memory)."""
    start = dpol.start_up_s if dpol is not None else pol.runtime.warm_up_s
    measured = all(p.live_rate is not None for p in est.partitions.values())
    warm = est.capacity_per_replica is not None and measured
    return handoff.HandBack(handoff.hold_seconds(start, pol.scaling.poll_interval_s), warm)


def start_ups_of(pol: Policies, learned: learn.Learned) -> dict[str, tuple[float, tuple[float, ...]]]:
    """The start-up figures the planner used (``pol`` already carries the learned ones) and the samples
    behind each (none: the model's figure): ``status.startUps``."""
    return {
        "podStart": (pol.scaling.pod_start_s, learned.pod_start),
        "drainStart": (pol.runtime.warm_up_s, learned.drain_start),
        "drainWarmStart": (pol.runtime.warm_start_s, learned.drain_warm_start),
    }


__all__ = [
    "Model",
    "Policies",
    "StepDecision",
    "StepObservation",
    "StepState",
    "busy_drain_of",
    "drain_view",
    "hand_back_of",
    "held_by",
    "hold_of",
    "start_ups_of",
    "step",
]
