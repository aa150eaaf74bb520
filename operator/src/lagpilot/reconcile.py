"""One reconcile of a BatchConsumerGroup, as a fixed pipeline (HPA-style), called by handlers.py.

    read (spec, status, Deployment) -> observe (Kafka, batched) -> estimate -> decide (pure core)
    -> act (server-side apply of the Deployment, only when the replica count changes)
    -> report (one status merge patch, only when something a reader sees changed; events; metrics)

Nothing here holds policy arithmetic: lag.py, estimate.py, projection.py, scaling.py and
drain_policy.py decide; this module converts between the outside world and their dataclasses.

What must survive an operator restart lives in the CR status: the estimator state
(`status.estimator`: smoothed rates, capacity, data-loss bookkeeping) and the scaling history
(`status.scalingHistory`: recommendations of the stabilization window, last scale time). These
two ("memory", `MEMORY_KEYS`) move every cycle (times, rate windows), so they alone never cause a
write: the status is patched when another field changed (conditions compared without
`lastTransitionTime`), on a CR's first cycle in this process, and at least every
`status_heartbeat_seconds` (default 60 s) while only the memory moved; the memory then rides along.
A restarted operator resumes from a memory at most that old, as after that much downtime. The
per-CR `Cache` keeps the last status this operator wrote (the live body may not yet carry it when
the next cycle starts) and the newest memory, written or not.

Failures never escape as exceptions: a missing topic, a missing or malformed Secret, an unreachable
broker, rejected credentials, or an invalid spec set `Degraded=True` with a CamelCase reason and a
message naming the cause (never a secret), post a Warning event, count a metric, and return a
back-off delay (exponential, capped) for the next attempt.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from lagpilot import __version__
from lagpilot.decide import estimate as est_mod
from lagpilot.decide import lag as lag_mod
from lagpilot.decide import step as step_mod
from lagpilot.act.deployment import build_deployment, deployment_name
from lagpilot.observe.kafka_observe import AdminPool, Observation, ObserveError, SecretError, admin_config
from lagpilot.observe.kafka_observe import observe as kafka_observe
from lagpilot.observe.kafka_observe import cycle_phase_s, observe_max_age_s, peek_oldest
from lagpilot.act.kubeapi import KubeError
from lagpilot.metrics import OperatorMetrics
from lagpilot.decide.scaling import Decision
from lagpilot.spec import GroupSpec, SpecError, parse_spec
from lagpilot.decide import status as status_mod
from lagpilot.decide.status import FALSE, TRUE, Condition, merge_conditions, rfc3339, status_patch

log = logging.getLogger(__name__)


class Kube(Protocol):
    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]: ...
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def read_secret_data(self, namespace: str, name: str) -> dict[str, str] | None: ...
    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...


EmitFn = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)
ObserveFn = Callable[..., Observation]


@dataclasses.dataclass(frozen=True)
class GroupRef:
    namespace: str
    name: str
    uid: str
    generation: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> "GroupRef":
        meta = body.get("metadata", {})
        gen = meta.get("generation")
        return cls(str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")),
                   int(gen) if gen is not None else None)


@dataclasses.dataclass
class Deps:
    """Everything a cycle touches outside itself (fakes in unit tests)."""

    kube: Kube
    admin_pool: AdminPool
    metrics: OperatorMetrics
    emit: EmitFn
    pod_start_seconds: float = 30.0
    kafka_timeout_seconds: float = 10.0
    min_backoff_seconds: float = 5.0
    max_backoff_seconds: float = 300.0
    clock: Callable[[], float] = time.time
    observe: ObserveFn = kafka_observe
    # timestamps of the oldest unprocessed record per lagging partition; None: do not read them
    peek: Callable[..., dict[int, float]] | None = peek_oldest
    version: str = __version__
    drain: Any = None  # lagpilot.act.drain.DrainExecutor (drain issue); None: no drain hand-offs
    # a status whose only change is the memory (MEMORY_KEYS) is written at most this often
    status_heartbeat_seconds: float = 60.0


MEMORY_KEYS = ("estimator", "scalingHistory")


@dataclasses.dataclass
class Cache:
    """Per-CR memo: what this operator last wrote, the newest memory (written or not), when the
    memory was last written, and the failure streak."""

    last_status: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    memory_written_at: float | None = None
    failures: int = 0
    last_error: str | None = None
    last_event_reason: str | None = None
    # seconds per phase of the last cycle (deployment, observe, peek, step, act, drain, write, ...):
    # logged by the control loop with a CR's first cycle and with any slow one
    timing: dict[str, float] = dataclasses.field(default_factory=dict)
    # (Secret name, when read, its data): the Kafka credentials, re-read at most every
    # SECRET_MAX_AGE_S while cycles succeed, at every attempt while they fail; never in a repr
    secret: tuple[str, float, dict[str, str]] | None = dataclasses.field(default=None, repr=False)


SECRET_MAX_AGE_S = 60.0


@dataclasses.dataclass(frozen=True)
class CycleResult:
    ok: bool
    delay_s: float
    reason: str
    decision: Decision | None = None
    applied_replicas: int | None = None


# --- helpers ------------------------------------------------------------------------------------

def _clamp_initial(spec: GroupSpec, status: Mapping[str, Any]) -> int:
    """Replica count for an apply outside the control loop: what the loop last decided, else the
    minimum; never above maxReplicas or the last known partition count; 0 when paused."""
    if spec.paused:
        return 0
    from lagpilot.decide.handoff import replicas_override_raw
    if replicas_override_raw(status.get("drain")) == 0:
        return 0  # the quiesce fallback of the hand-off emptied the group: keep it empty
    s = spec.scaling
    want = status.get("desiredReplicas")
    n = int(want) if isinstance(want, int) and want >= 0 else s.min_replicas
    cap = s.max_replicas
    parts = status.get("partitions")
    if isinstance(parts, int) and parts > 0:
        cap = min(cap, parts)
    return max(min(n, cap), min(s.min_replicas, cap))


def _dep_replicas(dep: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(spec.replicas, status.replicas, status.readyReplicas) of a Deployment."""
    if not dep:
        return 0, 0, 0
    spec_r = int((dep.get("spec") or {}).get("replicas") or 0)
    st = dep.get("status") or {}
    return spec_r, int(st.get("replicas") or 0), int(st.get("readyReplicas") or 0)


def _finite(x: float | None, nd: int = 1) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def backoff_s(failures: int, lo: float, hi: float) -> float:
    """Exponential back-off: lo, 2lo, 4lo, ... capped at hi."""
    return min(hi, lo * (2 ** max(0, failures - 1)))


def _current_status(raw_status: Mapping[str, Any] | None, cache: Cache) -> dict[str, Any]:
    """The CR status as last written: the live body, unless our own newer write has not arrived yet."""
    live = dict(raw_status or {})
    cached = cache.last_status
    if not cached:
        return live
    live_at = status_mod.estimator_time(live.get("estimator"))
    cached_at = status_mod.estimator_time(cached.get("estimator"))
    return {**live, **cached} if cached_at > live_at else live


def with_memory(status: Mapping[str, Any], memory: Mapping[str, Any] | None) -> dict[str, Any]:
    """`status` with the newer of its memory and `memory` (the cycle's last, maybe unwritten): only
    the MEMORY_KEYS are taken from `memory`; every other field (e.g. a drain another writer
    recorded) stays the status's own."""
    out = dict(status)
    if memory and status_mod.estimator_time(memory.get("estimator")) > status_mod.estimator_time(
            status.get("estimator")):
        out.update({k: memory[k] for k in MEMORY_KEYS if k in memory})
    return out


def status_write(old: Mapping[str, Any] | None, new: Mapping[str, Any], memory_written_at: float | None,
                 now: float, heartbeat_s: float) -> dict[str, Any] | None:
    """The merge patch to send, or None. `old`: the status as stored, except that its memory may be
    the cycle's newer, unwritten one. A field other than the memory (MEMORY_KEYS) changed: its
    patch, with the memory. Only the memory moved: the memory alone once `heartbeat_s` passed since
    it was last written (`memory_written_at`; None: not yet in this process), else None."""
    patch = status_patch(old, new) or {}
    memory = {k: new[k] for k in MEMORY_KEYS if new.get(k) is not None}
    if any(k not in MEMORY_KEYS for k in patch):
        return {**patch, **memory}
    if memory and (memory_written_at is None or now - memory_written_at >= heartbeat_s):
        return memory
    return None


# --- apply (create/update/resume handlers and the loop) -----------------------------------------

def apply_deployment(ref: GroupRef, raw_spec: Mapping[str, Any], raw_status: Mapping[str, Any] | None,
                     deps: Deps, replicas: int | None = None) -> int:
    """Server-side apply the consumer Deployment; returns the replica count applied.

    Raises SpecError (invalid spec) or KubeError (API failure) for the handler to translate.
    """
    spec = parse_spec(raw_spec)
    n = _clamp_initial(spec, raw_status or {}) if replicas is None else replicas
    deps.kube.apply_deployment(build_deployment(ref.name, ref.namespace, ref.uid, spec, n, deps.version))
    return n


# --- the control loop cycle ---------------------------------------------------------------------

def run_cycle(ref: GroupRef, raw_spec: Mapping[str, Any], raw_status: Mapping[str, Any] | None,
              deps: Deps, cache: Cache) -> CycleResult:
    """One observe → decide → act → report pass. Never raises for expected failures."""
    started = time.monotonic()
    cache.timing = {}
    status = with_memory(_current_status(raw_status, cache), cache.memory)
    now = deps.clock()
    try:
        spec = parse_spec(raw_spec)
    except SpecError as err:
        return _fail(ref, status, deps, cache, now, "InvalidSpec", f"spec is invalid: {err}",
                     delay=deps.max_backoff_seconds)
    try:
        # the Kafka handle's lease ends with the cycle: the pool never closes it under us
        with contextlib.ExitStack() as leases:
            result = _cycle(ref, spec, raw_spec, status, deps, cache, now, leases)
    except ObserveError as err:
        return _fail(ref, status, deps, cache, now, err.reason, err.message, spec=spec)
    except KubeError as err:
        return _fail(ref, status, deps, cache, now, "KubernetesAPIError", str(err), spec=spec)
    finally:
        deps.metrics.cycle_seconds.observe(time.monotonic() - started)
    cache.failures = 0
    cache.last_error = None
    return result


def _cycle(ref: GroupRef, spec: GroupSpec, raw_spec: Mapping[str, Any], status: dict[str, Any],
           deps: Deps, cache: Cache, now: float, leases: contextlib.ExitStack) -> CycleResult:
    poll = spec.scaling.poll_interval_seconds
    dname = deployment_name(ref.name)
    mark = _Marks(cache.timing)
    dep = deps.kube.get_deployment(ref.namespace, dname)
    if dep is None:
        n = apply_deployment(ref, raw_spec, status, deps)
        deps.emit("Normal", "DeploymentCreated", f"created Deployment {dname} with {n} replicas")
        dep = deps.kube.get_deployment(ref.namespace, dname)
    cur, pods, ready = _dep_replicas(dep)
    mark("deployment")

    if spec.paused:
        applied = None
        if cur != 0:
            apply_deployment(ref, raw_spec, status, deps, replicas=0)
            deps.emit("Normal", "Paused", f"spec.paused: scaled {dname} {cur}->0")
            applied, cur = 0, 0
        new = {
            "replicas": pods, "desiredReplicas": 0, "lastDecision": "paused: replicas 0, no decisions",
            "conditions": merge_conditions(status.get("conditions"), [
                Condition("Ready", FALSE, "Paused", "spec.paused is true: consumers scaled to 0"),
                Condition("Scaling", FALSE, "Paused", "no scaling decisions while paused"),
                Condition("Degraded", FALSE, "AsExpected", ""),
            ], ref.generation, now),
            "observedGeneration": ref.generation,
        }
        _write_status(ref, status, new, deps, cache)
        return CycleResult(True, poll, "Paused", None, applied)

    # observe
    conf = _kafka_config(ref, spec, deps, cache, now)
    mark("kafka_config")
    handle = leases.enter_context(deps.admin_pool.lease(ref.key, conf))
    # the cluster's shared view, at most half an interval old: one Kafka read serves every CR's cycle
    obs = deps.observe(handle, spec.topic, spec.group_id, deps.kafka_timeout_seconds, max_age_s=observe_max_age_s(poll))
    mark("observe")

    # the oldest unprocessed record of each lagging partition (its timestamp), best effort
    offsets = [lag_mod.PartitionOffsets(p.partition, p.earliest, p.latest, p.committed) for p in obs.partitions]
    oldest: dict[int, float] = {}
    if deps.peek is not None:
        positions = {p.partition: lag_mod.consume_position(p) for p in offsets if lag_mod.partition_lag(p) > 0}
        oldest = deps.peek(handle, spec.topic, positions, min(2.0, deps.kafka_timeout_seconds))

    # estimate + decide: one pure step (lagpilot.decide.step), shared with the simulator
    mark("peek")
    snap = lag_mod.snapshot(
        obs.observed_at,
        [dataclasses.replace(p, oldest_unprocessed_ts_s=oldest.get(p.partition)) for p in offsets],
        {p.partition: p.capacity.records_per_second for p in obs.partitions if p.capacity is not None},
    )
    drain_status = status.get("drain") or {}
    phase = drain_status.get("phase")
    out, new_state = step_mod.step(
        step_mod.StepState.from_status(status_mod.step_memory_from_status(status)),
        step_mod.StepObservation(snap, cur, _drains_of(drain_status), _last_drain_end(drain_status),
                                 retention_s=_retention_s(handle, spec, deps)),
        step_mod.Policies.from_group_spec(spec, step_mod.Model(pod_start_s=deps.pod_start_seconds)), now)
    decision, est, history = out.decision, new_state.estimator, new_state.history
    assert est is not None

    mark("step")
    # act
    applied: int | None = None
    held = out.held  # handoff.holds_replicas (only the hand-off's quiesce fallback holds), via the step
    desired = decision.desired_replicas
    last_scale_time = status.get("lastScaleTime")
    if desired != cur and not held:
        apply_deployment(ref, raw_spec, status, deps, replicas=desired)
        applied = desired
        direction = "up" if desired > cur else "down"
        deps.metrics.count_decision(ref.namespace, ref.name, direction)
        deps.emit("Normal", "ScaledUp" if desired > cur else "ScaledDown", decision.message)
        log.info("scaled", extra={"group": ref.key, "from": cur, "to": desired, "reason": decision.reason})
        last_scale_time = rfc3339(now)
    for e in est.events:
        kind, _, rest = e.partition(":")
        if kind == "DataLoss":
            p, _, n = rest.partition(":")
            deps.emit("Warning", "DataLoss", f"retention deleted {n} records of partition {p} of topic "
                                             f"{spec.topic!r} before group {spec.group_id!r} consumed them")
        elif kind == "OffsetsWentBackwards":
            deps.emit("Warning", "OffsetsWentBackwards", f"offsets of partition {rest} of topic {spec.topic!r} "
                                                         "moved backwards (topic recreated?); its estimate was reset")

    # drain hand-off (lagpilot.act.drain, issue 6): after the scaler acted, before the status write
    mark("act")
    drain_out = None
    if deps.drain is not None:
        from lagpilot.act.drain import run_in_cycle
        drain_out = run_in_cycle(deps.drain, ref, spec, raw_spec, status, obs, decision,
                                 applied if applied is not None else cur, handle, deps, apply_deployment)

    mark("drain")
    # report
    target = applied if applied is not None else cur
    lost_now = [p.partition for p in snap.partitions if lag_mod.lost_records(p) > 0]
    conds = _conditions(spec, decision, target, cur, ready, held, lost_now, est)
    if drain_out is not None:
        conds.append(Condition("Draining", *drain_out.condition))
        if getattr(drain_out, "data_loss", None) is not None:
            # retention deleted part of a handed-off range before the drain read it (exact offsets)
            conds.append(Condition("DataLoss", *drain_out.data_loss))
    rates_known = any(p.samples > 0 for p in est.partitions.values())
    new = {
        "observedGeneration": ref.generation,
        "partitions": len(snap.partitions),
        "replicas": pods,
        "desiredReplicas": target if held else desired,
        "totalLag": snap.total_lag,
        "maxPartitionLag": snap.max_partition_lag,
        "produceRate": _finite(est.produce_rate, 2) if rates_known else None,
        "capacityPerReplica": _finite(est.capacity_per_replica, 2),
        "projectedCatchUpSeconds": _finite(decision.current_catch_up_s),
        "slaSeconds": int(spec.catch_up_sla_seconds),
        "lastDecision": decision.message if not held else f"drain {phase}: replicas held at {cur}; {decision.message}",
        "lastScaleTime": last_scale_time,
        "dataLossRecords": est.data_loss_records,
        "partitionLag": [_partition_entry(p, est, now) for p in snap.partitions],
        "estimator": status_mod.estimator_to_status(est.to_dict()),
        "scalingHistory": status_mod.scaling_history_to_status(history.to_dict()),
        "conditions": merge_conditions(status.get("conditions"), conds, ref.generation, now),
    }
    if drain_out is not None and drain_out.status is not None:
        new["drain"] = drain_out.status
    _write_status(ref, status, new, deps, cache)
    mark("write")
    deps.metrics.observe_group(
        ref.namespace, ref.name,
        partition_lag={p.partition: lag_mod.partition_lag(p) for p in snap.partitions},
        partition_rate={p: e.produce_rate for p, e in est.partitions.items()},
        total_lag=snap.total_lag, projected_s=_finite(decision.current_catch_up_s),
        sla_s=spec.catch_up_sla_seconds, desired=desired, replicas=target,
        produce_rate=est.produce_rate, capacity=est.capacity_per_replica, data_loss=est.data_loss_records)
    drain_now = next(iter(_drains_of(new.get("drain") or drain_status)), None)
    tasks_done = sum(1 for s in drain_now.sub_ranges if s.done) if drain_now is not None else 0
    deps.metrics.observe_status(
        ref.namespace, ref.name, conditions=new["conditions"], max_replicas=spec.scaling.max_replicas,
        oldest_age_s={p.partition: a for p in snap.partitions
                      if (a := _finite(lag_mod.oldest_unprocessed_age_s(p, now))) is not None},
        drain_done=tasks_done,
        drain_remaining=(len(drain_now.sub_ranges) - tasks_done) if drain_now is not None else 0)
    if cache.last_event_reason is not None:
        deps.emit("Normal", "Recovered", f"observing again after {cache.last_event_reason}")
        cache.last_event_reason = None
    return CycleResult(True, aligned_delay(poll, deps.clock(), cycle_phase_s(ref.key, poll)), decision.reason,
                       decision, applied)


class _Marks:
    """Adds the seconds since the previous mark to `into[phase]` (the cycle's time marks)."""

    def __init__(self, into: dict[str, float]) -> None:
        self._into = into
        self._t = time.monotonic()

    def __call__(self, phase: str) -> None:
        now = time.monotonic()
        self._into[phase] = round(self._into.get(phase, 0.0) + now - self._t, 4)
        self._t = now


def aligned_delay(poll_s: float, now: float, phase_s: float = 0.0) -> float:
    """The wait until the next multiple of `poll_s` on the wall clock plus this CR's `phase_s`
    (between poll/2 and 3·poll/2): the cycles of every CR with the same poll interval fall within
    a few seconds of the same instants, so they share one read of the cluster
    (cluster_view.ClusterObserver) instead of one per CR, spread by their phases
    (kafka_observe.cycle_phase_s) so they do not all call the API server at once. On average the
    wait is still `poll_s`."""
    if poll_s <= 0 or not math.isfinite(now):
        return poll_s
    d = poll_s - math.fmod(now - phase_s, poll_s)
    return d if d >= poll_s / 2 else d + poll_s


def _partition_entry(p: lag_mod.PartitionOffsets, est: est_mod.EstimatorState, now: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition": p.partition, "lag": lag_mod.partition_lag(p), "committed": p.committed,
                             "end": p.end, "earliest": p.low, "rate": _finite(est.rate(p.partition), 3) or 0.0}
    age = _finite(lag_mod.oldest_unprocessed_age_s(p, now))
    if age is not None:
        entry["oldestRecordAgeSeconds"] = age
    return entry


def _drains_of(raw: Mapping[str, Any]) -> tuple[Any, ...]:
    """status.drain as the hand-off's DrainStatus (none if absent or unreadable)."""
    from lagpilot.decide.handoff import DrainStatus
    try:
        d = DrainStatus.from_dict(raw)
    except (ValueError, TypeError, KeyError):
        return ()
    return (d,) if d is not None else ()


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _last_drain_end(raw: Mapping[str, Any]) -> float | None:
    """When the recorded drain finished (status.drain.finishedAt; lastEndS, a float copy of it, from
    an older operator)."""
    try:
        return status_mod.parse_time(raw.get("finishedAt"))
    except ValueError:
        return _num(raw.get("lastEndS"))


def _retention_s(handle: Any, spec: GroupSpec, deps: Any) -> float | None:
    """The topic's retention for the drain planner (best effort, cached; None without drains)."""
    if getattr(deps, "drain", None) is None or not spec.drain.enabled:
        return None
    from lagpilot.observe import topic_retention

    return topic_retention.cached(handle, spec.topic, deps.kafka_timeout_seconds)


def _kafka_config(ref: GroupRef, spec: GroupSpec, deps: Deps, cache: Cache, now: float) -> dict[str, str]:
    """The admin config from spec.kafka and its Secret. The Secret is read again when the last read
    is SECRET_MAX_AGE_S old, names another Secret, or the last cycle failed (a fixed Secret heals a
    Degraded CR at its next attempt, as before): not one GET per cycle."""
    secret = None
    name = spec.kafka.secret_name
    if name:
        held = cache.secret
        if held is not None and held[0] == name and cache.failures == 0 and 0 <= now - held[1] < SECRET_MAX_AGE_S:
            secret = held[2]
        else:
            cache.secret = None
            try:
                secret = deps.kube.read_secret_data(ref.namespace, name)
            except KubeError as err:
                if err.status == 403:
                    raise SecretError("SecretForbidden", f"the operator may not read Secret "
                                                         f"{name!r} (RBAC)") from None
                raise
            if secret is not None:
                cache.secret = (name, now, dict(secret))
    else:
        cache.secret = None
    return admin_config(spec.kafka, secret)


def _conditions(spec: GroupSpec, d: Decision, target: int, cur: int, ready: int, held: bool,
                lost_now: list[int], est: est_mod.EstimatorState) -> list[Condition]:
    out: list[Condition] = []
    if target == 0:
        out.append(Condition("Ready", TRUE, "ScaledToZero" if d.reason == "ScaleToZero" else "NoReplicas",
                             "no consumer replicas wanted"))
    elif ready >= target:
        out.append(Condition("Ready", TRUE, "ConsumersReady", f"{ready}/{target} consumers ready"))
    else:
        out.append(Condition("Ready", FALSE, "ConsumersNotReady", f"{ready}/{target} consumers ready"))
    if held:
        out.append(Condition("Scaling", FALSE, "DrainHandOff",
                             "the drain hand-off holds the replica count; decisions resume after it"))
    elif target != cur or ready != target:
        out.append(Condition("Scaling", TRUE, d.reason, d.message))
    else:
        out.append(Condition("Scaling", FALSE, d.reason, d.message))
    if d.at_risk:
        hot = f"; hot partitions {list(d.hot_partitions)}" if d.hot_partitions else ""
        out.append(Condition("CatchUpAtRisk", TRUE, "ProjectedAboveSLA" if d.reason != "SLAUnreachable" else d.reason,
                             f"projected catch-up {_fmt_s(d.projected_catch_up_s)} > SLA "
                             f"{spec.catch_up_sla_seconds:.0f}s{hot}"))
    elif d.projected_catch_up_s is None:
        out.append(Condition("CatchUpAtRisk", "Unknown", "CapacityUnknown",
                             "no consumer has reported its capacity yet"))
    else:
        out.append(Condition("CatchUpAtRisk", FALSE, "WithinSLA",
                             f"projected catch-up {_fmt_s(d.projected_catch_up_s)} <= SLA "
                             f"{spec.catch_up_sla_seconds:.0f}s"))
    if lost_now:
        out.append(Condition("Degraded", TRUE, "DataLoss",
                             f"retention deleted records of partitions {lost_now} before the group consumed them "
                             f"({est.data_loss_records} records lost so far)"))
    else:
        out.append(Condition("Degraded", FALSE, "AsExpected", ""))
    return out


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "unknown"
    return "never" if not math.isfinite(x) else f"{x:.0f}s"


def _write_status(ref: GroupRef, old: Mapping[str, Any], new: dict[str, Any], deps: Deps, cache: Cache) -> None:
    """Patch what changed (`status_write`); the memory is kept in `cache` for the next cycle either way."""
    if new.get("conditions") is not None:
        deps.metrics.observe_status(ref.namespace, ref.name, conditions=new["conditions"])
    now = deps.clock()
    patch = status_write(old, new, cache.memory_written_at, now, deps.status_heartbeat_seconds)
    memory = {k: new[k] for k in MEMORY_KEYS if new.get(k) is not None}
    if memory:
        cache.memory = memory  # the next cycle resumes from it, written or not
    if patch is None:
        return
    deps.kube.patch_status(ref.namespace, ref.name, patch)
    if memory:
        cache.memory_written_at = now
    # cache only the fields this loop owns: other writers (the drain executor) stay authoritative
    cache.last_status = {k: v for k, v in {**(cache.last_status or {}), **new}.items() if v is not None}


def _fail(ref: GroupRef, status: dict[str, Any], deps: Deps, cache: Cache, now: float, reason: str,
          message: str, spec: GroupSpec | None = None, delay: float | None = None) -> CycleResult:
    """Degraded=True naming the cause, a Warning event, a metric, and the back-off delay."""
    cache.failures += 1
    wait = delay if delay is not None else backoff_s(cache.failures, deps.min_backoff_seconds,
                                                     deps.max_backoff_seconds)
    log.warning("cycle failed", extra={"group": ref.key, "reason": reason, "failures": cache.failures,
                                       "retry_in_s": wait})
    deps.metrics.count_error(ref.namespace, ref.name, reason)
    # an event per failure, but the back-off bounds the rate; a repeated cause within the streak
    # is posted only when the streak hits a power of two (1, 2, 4, 8, ...)
    if cache.last_error != reason or (cache.failures & (cache.failures - 1)) == 0:
        deps.emit("Warning", reason, f"{message} (retrying in {wait:.0f}s)")
    cache.last_error = reason
    cache.last_event_reason = reason
    new: dict[str, Any] = {
        "observedGeneration": ref.generation,
        "conditions": merge_conditions(status.get("conditions"), [
            Condition("Degraded", TRUE, reason, message),
            Condition("Ready", FALSE, reason, message),
        ], ref.generation, now),
    }
    if spec is not None:
        new["slaSeconds"] = int(spec.catch_up_sla_seconds)
    try:
        _write_status(ref, status, new, deps, cache)
    except KubeError as err:
        log.warning("status write failed", extra={"group": ref.key, "error": str(err)})
    return CycleResult(False, wait, reason)
