"""One reconcile of a BatchConsumerGroup, as a fixed pipeline (HPA-style), called by handlers.py.

    read (spec, status, Deployment) -> observe (Kafka, batched) -> estimate -> decide (pure core)
    -> act (server-side apply of the Deployment, only when the replica count changes)
    -> report (one status merge patch, only when something a reader sees changed; events; metrics)

Nothing here holds policy arithmetic: lag.py, estimate.py, projection.py, scaling.py and
drain_policy.py decide, through the one decision step (decide/step.py); this module runs the
phases in order, each in its own module of the shell: the inputs (reconcile/deps: GroupRef, Deps,
Cache), observe (reconcile/observe), act on the Deployment (reconcile/act), the drain hand-off's
part (reconcile/drain) and report (reconcile/report: the status, when it is written, metrics).

What must survive an operator restart: the drain hand-off in `status.drain` (and Kafka), the
controller's memory (the estimator state and the scaling history) in the ConfigMap
`<cr>-lagpilot-state` the CR owns; when each is written, and what the per-CR `Cache` keeps between
cycles: reconcile/report.py.

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
from collections.abc import Mapping
from typing import Any

from lagpilot.act.deployment import deployment_name
from lagpilot.act.kubeapi import KubeError, StatusConflict
from lagpilot.decide import lag as lag_mod
from lagpilot.decide import recommend
from lagpilot.decide import step as step_mod
from lagpilot.decide.scaling import Decision
from lagpilot.decide.status import FALSE, TRUE, Condition, merge_conditions
from lagpilot.observe.kafka_observe import ObserveError, cycle_phase_s
from lagpilot.reconcile.act import (
    consumers_not_ready,
    dep_replicas,
    emit_estimate_events,
    ensure_deployment,
    pause,
    scale,
)
from lagpilot.reconcile.deps import Cache, Deps, GroupRef
from lagpilot.reconcile.drain import drains_of, last_drain_end, retention_s, run_drain
from lagpilot.reconcile.observe import Observed, group_consumers, observe
from lagpilot.reconcile.report import (
    current_status,
    cycle_status,
    load_memory,
    paused_status,
    report_metrics,
    save_memory,
    write_status,
)
from lagpilot.spec import GroupSpec, SpecError, parse_spec

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CycleResult:
    ok: bool
    delay_s: float
    reason: str
    decision: Decision | None = None
    applied_replicas: int | None = None


def backoff_s(failures: int, lo: float, hi: float) -> float:
    """Exponential back-off: lo, 2lo, 4lo, ... capped at hi."""
    factor: int = 2 ** max(0, failures - 1)  # int ** a non-negative int: an int (typeshed says Any)
    return min(hi, lo * factor)


# --- the control loop cycle ---------------------------------------------------------------------


def run_cycle(
    ref: GroupRef, raw_spec: Mapping[str, Any], raw_status: Mapping[str, Any] | None, deps: Deps, cache: Cache
) -> CycleResult:
    """One observe → decide → act → report pass. Never raises for expected failures."""
    started = time.monotonic()
    cache.timing = {}
    status = current_status(raw_status, cache)
    now = deps.clock()
    try:
        spec = parse_spec(raw_spec)
    except SpecError as err:
        return _fail(
            ref,
            status,
            deps,
            cache,
            now,
            "InvalidSpec",
            f"spec is invalid: {err}",
            delay=deps.max_backoff_seconds,
        )
    try:
        # the Kafka handle's lease ends with the cycle: the pool never closes it under us
        with contextlib.ExitStack() as leases:
            result = _cycle(ref, spec, raw_spec, status, deps, cache, now, leases)
    except ObserveError as err:
        return _fail(ref, status, deps, cache, now, err.reason, err.message)
    except StatusConflict as err:
        # another writer (a second operator instance, a person) changed status.drain since this
        # cycle read it: nothing of this step was recorded; the next cycle re-reads and decides again
        log.warning(
            "status changed by another writer; deciding again", extra={"group": ref.key, "error": str(err)}
        )
        deps.metrics.count_error(ref.namespace, ref.name, "StatusConflict")
        cache.last_status = None  # the cached copy is what conflicted: take the API server's next time
        return CycleResult(False, deps.min_backoff_seconds, "StatusConflict")
    except KubeError as err:
        return _fail(ref, status, deps, cache, now, "KubernetesAPIError", str(err))
    finally:
        deps.metrics.cycle_seconds.observe(time.monotonic() - started)
    cache.failures = 0
    cache.last_error = None
    return result


def _cycle(
    ref: GroupRef,
    spec: GroupSpec,
    raw_spec: Mapping[str, Any],
    status: dict[str, Any],
    deps: Deps,
    cache: Cache,
    now: float,
    leases: contextlib.ExitStack,
) -> CycleResult:
    """The phases in order, each timed into `cache.timing`: deployment, then (paused: scale to 0 and
    report) observe (kafka_config, observe, peek, runtime), decide (step), act, drain, report (write)."""
    poll = spec.scaling.poll_interval_seconds
    mark = _Marks(cache.timing)
    if spec.recommend_only:
        return _recommend_cycle(ref, spec, status, deps, cache, now, leases, mark)
    cur, pods, ready = ensure_deployment(ref, raw_spec, status, deps)
    mark("deployment")
    if spec.paused:
        applied = pause(ref, raw_spec, status, deps, cur)
        write_status(ref, status, paused_status(ref, status, pods, now), deps, cache)
        return CycleResult(True, poll, "Paused", None, applied)

    memory = load_memory(ref, deps, cache)
    seen = observe(ref, spec, deps, cache, now, leases, mark)
    out, state = _decide(spec, status, memory, seen, cur, deps, now, ready=ready)
    est = state.estimator
    assert est is not None
    mark("step")

    applied, last_scale_time = scale(ref, raw_spec, status, deps, cur, out.decision, out.held, now)
    emit_estimate_events(spec, est, deps)
    mark("act")
    target = applied if applied is not None else cur
    drain_out = run_drain(
        ref,
        spec,
        raw_spec,
        status,
        seen,
        out.decision,
        target,
        deps,
        out.runtime_replicas,
        hand_back=out.hand_back,
    )
    mark("drain")

    not_ready = consumers_not_ready(ref, deps) if ready < cur else ""
    # why the warm drain runtime's pod is not Ready, as it says (read in observe; "" none)
    runtime_not_ready = seen.runtime.observation.problem if seen.runtime is not None else ""
    new = cycle_status(
        ref,
        spec,
        status,
        seen.snap,
        out,
        est,
        (cur, pods, ready),
        target,
        last_scale_time,
        drain_out,
        now,
        not_ready=not_ready,
        runtime_not_ready=runtime_not_ready,
    )
    # status.drain: the executor wrote every change itself, guarded (resourceVersion)
    guarded = ("drain",) if drain_out is not None and hasattr(deps.kube, "patch_status_guarded") else ()
    write_status(ref, status, new, deps, cache, written=guarded)
    return _finish_cycle(
        ref, spec, status, new, seen.snap, out, state, target, applied, deps, cache, now, mark
    )


def _recommend_cycle(
    ref: GroupRef,
    spec: GroupSpec,
    status: dict[str, Any],
    deps: Deps,
    cache: Cache,
    now: float,
    leases: contextlib.ExitStack,
    mark: _Marks,
) -> CycleResult:
    """spec.mode Recommend (docs/recommend.md): observe and decide as in mode Act, publish the
    decision (status.recommendation, a Recommendation event when it changes, metrics), and write
    nothing else anywhere: no Deployment created or scaled, no drain, no offset, no adoption."""
    poll = spec.scaling.poll_interval_seconds
    dep = deps.kube.get_deployment(ref.namespace, deployment_name(ref.name))
    mark("deployment")
    if spec.paused:
        new: dict[str, Any] = {
            "observedGeneration": ref.generation,
            "recommendation": None,
            "conditions": merge_conditions(
                status.get("conditions"),
                [
                    Condition("Ready", FALSE, "Paused", "spec.paused is true: no recommendations"),
                    Condition("Scaling", FALSE, "Paused", "no decisions while paused"),
                    Condition("Degraded", FALSE, "AsExpected", ""),
                ],
                ref.generation,
                now,
            ),
        }
        write_status(ref, status, new, deps, cache)
        return CycleResult(True, poll, "Paused")
    seen = observe(ref, spec, deps, cache, now, leases, mark)
    if dep is not None:
        cur, pods, ready = dep_replicas(dep)
        source = recommend.SOURCE_DEPLOYMENT
    else:
        cur = pods = ready = group_consumers(
            seen.handle, spec.group_id, spec.topic, deps.kafka_timeout_seconds
        )
        source = recommend.SOURCE_MEMBERS
    mark("members")
    snap = seen.snap
    memory = load_memory(ref, deps, cache)
    prev_est = step_mod.StepState.from_memory(memory).estimator
    if snap.capacity_reports:
        cap_source = recommend.CAP_METADATA
    else:
        sample = recommend.committed_rate_capacity(prev_est, snap, cur)
        if sample is not None:
            snap = recommend.with_capacity(snap, sample)
        prev_source = (status.get("recommendation") or {}).get("capacitySource")
        cap_source = (
            recommend.CAP_COMMITTED
            if sample is not None
            or (
                prev_est is not None
                and prev_est.capacity_per_replica is not None
                and prev_source == recommend.CAP_COMMITTED
            )
            else recommend.CAP_UNKNOWN
        )
    seen = dataclasses.replace(seen, snap=snap)
    out, state = _decide(spec, status, memory, seen, cur, deps, now, ready=ready)
    est = state.estimator
    assert est is not None
    mark("step")
    emit_estimate_events(spec, est, deps)
    rec = recommend.recommendation(out.decision, cur, source, cap_source, status.get("recommendation"), now)
    if recommend.changed(status.get("recommendation"), rec):
        deps.emit("Normal", "Recommendation", recommend.event_message(ref.name, rec))
        log.info(
            "recommendation",
            extra={
                "group": ref.key,
                "current": cur,
                "recommended": rec["replicas"],
                "drain": rec["drain"],
                "reason": rec["reason"],
                "source": source,
                "capacity_source": cap_source,
            },
        )
    # nothing is held and nothing was scaled: the status of a cycle that kept `cur`, whose Scaling
    # condition says what it would have done
    new = cycle_status(
        ref,
        spec,
        status,
        snap,
        dataclasses.replace(out, held=False),
        est,
        (cur, pods, ready),
        cur,
        status.get("lastScaleTime"),
        None,
        now,
    )
    new["desiredReplicas"] = out.decision.desired_replicas
    new["recommendation"] = rec
    new["conditions"] = merge_conditions(
        new["conditions"], [recommend.scaling_condition(rec)], ref.generation, now
    )
    write_status(ref, status, new, deps, cache)
    # the controller's memory (lagpilot's own ConfigMap, owned by the CR): the estimator's rate
    # windows carry the committed-rate capacity samples across cycles and restarts
    return _finish_cycle(ref, spec, status, new, snap, out, state, cur, None, deps, cache, now, mark)


def _finish_cycle(
    ref: GroupRef,
    spec: GroupSpec,
    status: Mapping[str, Any],
    new: Mapping[str, Any],
    snap: lag_mod.LagSnapshot,
    out: step_mod.StepDecision,
    state: step_mod.StepState,
    replicas: int,
    applied: int | None,
    deps: Deps,
    cache: Cache,
    now: float,
    mark: _Marks,
) -> CycleResult:
    """The tail both modes share: the controller's memory saved, metrics, a `Recovered` event after
    a failed cycle, the next poll aligned to this CR's phase."""
    est = state.estimator
    assert est is not None
    save_memory(ref, deps, cache, state)
    mark("write")
    for kind, reason, message in out.learn_events:  # decide.learn: a downstream limit seen or cleared
        deps.emit(kind, reason, message)
        log.info("scaling effectiveness", extra={"group": ref.key, "reason": reason, "detail": message})
    report_metrics(ref, spec, deps, snap, est, out.decision, replicas, new, status, now)
    deps.metrics.observe_mode(ref.namespace, ref.name, recommend_only=spec.recommend_only)
    if cache.last_event_reason is not None:
        deps.emit("Normal", "Recovered", f"observing again after {cache.last_event_reason}")
        cache.last_event_reason = None
    poll = spec.scaling.poll_interval_seconds
    return CycleResult(
        True,
        aligned_delay(poll, deps.clock(), cycle_phase_s(ref.key, poll, deps.observe_max_age_seconds)),
        out.decision.reason,
        out.decision,
        applied,
    )


def _decide(
    spec: GroupSpec,
    status: Mapping[str, Any],
    memory: Mapping[str, Any] | None,
    seen: Observed,
    cur: int,
    deps: Deps,
    now: float,
    ready: int | None = None,
) -> tuple[step_mod.StepDecision, step_mod.StepState]:
    """Estimate + decide: one pure step (lagpilot.decide.step), shared with the simulator, from the
    controller's memory, the observation and the drain recorded in the status."""
    drain_status = status.get("drain") or {}
    out, new_state = step_mod.step(
        step_mod.StepState.from_memory(memory),
        step_mod.StepObservation(
            seen.snap,
            cur,
            drains_of(drain_status),
            last_drain_end(drain_status),
            retention_s=retention_s(seen.handle, spec, deps),
            runtime=seen.runtime_observation,
            ready_replicas=ready,
        ),
        # spec.drain.busy: the planner takes next splits of a running drain (its executor: act/drain.py)
        step_mod.Policies.from_group_spec(
            spec, step_mod.Model(pod_start_s=deps.pod_start_seconds, drain_busy=spec.drain.busy)
        ),
        now,
    )
    return out, new_state


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


def _fail(
    ref: GroupRef,
    status: dict[str, Any],
    deps: Deps,
    cache: Cache,
    now: float,
    reason: str,
    message: str,
    delay: float | None = None,
) -> CycleResult:
    """Degraded=True naming the cause, a Warning event, a metric, and the back-off delay."""
    cache.failures += 1
    wait = (
        delay
        if delay is not None
        else backoff_s(cache.failures, deps.min_backoff_seconds, deps.max_backoff_seconds)
    )
    log.warning(
        "cycle failed",
        extra={"group": ref.key, "reason": reason, "failures": cache.failures, "retry_in_s": wait},
    )
    deps.metrics.count_error(ref.namespace, ref.name, reason)
    # an event per failure, but the back-off bounds the rate; a repeated cause within the streak
    # is posted only when the streak hits a power of two (1, 2, 4, 8, ...)
    if cache.last_error != reason or (cache.failures & (cache.failures - 1)) == 0:
        deps.emit("Warning", reason, f"{message} (retrying in {wait:.0f}s)")
    cache.last_error = reason
    cache.last_event_reason = reason
    new: dict[str, Any] = {
        "observedGeneration": ref.generation,
        "conditions": merge_conditions(
            status.get("conditions"),
            [
                Condition("Degraded", TRUE, reason, message),
                Condition("Ready", FALSE, reason, message),
            ],
            ref.generation,
            now,
        ),
    }
    try:
        write_status(ref, status, new, deps, cache)
    except KubeError as err:
        log.warning("status write failed", extra={"group": ref.key, "error": str(err)})
    return CycleResult(False, wait, reason)
