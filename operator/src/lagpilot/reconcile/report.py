"""The report phase of a cycle (reconcile.py): the CR status it computes (conditions, lag, the
per-partition view), when that status is written (`status_write`, `write_status`), the controller's
memory (`load_memory`, `save_memory`) and the group's metrics.

The status holds observed state only. The per-partition view (`status.partitionStatuses` and its
time, `status.lastObservedTime`: `VIEW_KEYS`) moves with every produced record, so it alone never
causes a write: it rides along with any other change and is written on its own at most every
`status_heartbeat_seconds` (default 60 s), and only when it changed. Every other field is
written when it changed (conditions compared without `lastTransitionTime`).

The controller's memory (the estimator's rates, windows and data-loss bookkeeping, the scaler's
recommendation history: `StepState.to_memory()`) is in the ConfigMap `<cr>-lagpilot-state` the
CR owns (act/memory.py; docs/operator.md "Memory"): read once per operator process and CR, kept in
the per-CR `Cache` between cycles, written on the CR's first cycle in this process, at least every
`status_heartbeat_seconds` while it moves, and at once when a fact a restart must not get wrong
moved (the data-loss count, offset resets, the partitions, the last scale decision). A restarted
operator (or a new leader) resumes from a memory at most that old, as after that much downtime."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from lagpilot.act.memory import memory_configmap, memory_name, memory_of
from lagpilot.decide import crd_check
from lagpilot.decide import estimate as est_mod
from lagpilot.decide import lag as lag_mod
from lagpilot.decide import step as step_mod
from lagpilot.decide.scaling import Decision
from lagpilot.decide.status import (
    FALSE,
    TRUE,
    Condition,
    format_time,
    merge_conditions,
    parse_time,
    status_patch,
)
from lagpilot.model.status import ConditionType, ScalingIneffectiveReason, StartUpSource
from lagpilot.reconcile.deps import Cache, Deps, GroupRef
from lagpilot.reconcile.drain import drain_progress
from lagpilot.spec import GroupSpec

VIEW_KEYS = ("lastObservedTime", "partitionStatuses")
RATE_DECIMALS = 3  # produceRate/consumeRate of status.partitionStatuses: records/s to 0.001


def finite(x: float | None, nd: int = 1) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def _observed_at(status: Mapping[str, Any] | None) -> float:
    try:
        return parse_time((status or {}).get("lastObservedTime")) or 0.0
    except ValueError:
        return 0.0


def current_status(raw_status: Mapping[str, Any] | None, cache: Cache) -> dict[str, Any]:
    """The CR status as last written: the live body, unless our own newer write has not arrived yet."""
    live = dict(raw_status or {})
    cached = cache.last_status
    if not cached:
        return live
    return {**live, **cached} if _observed_at(cached) > _observed_at(live) else live


def status_write(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    view_written_at: float | None,
    now: float,
    heartbeat_s: float,
) -> dict[str, Any] | None:
    """The merge patch to send, or None. A field other than the per-partition view (VIEW_KEYS)
    changed: its patch, with the view. Only the view changed (beyond its time): the view alone once
    `heartbeat_s` passed since it was last written (`view_written_at`; None: not yet in this
    process), else None."""
    patch = status_patch(old, new) or {}
    view = {k: new[k] for k in VIEW_KEYS if new.get(k) is not None}
    if any(k not in VIEW_KEYS for k in patch):
        return {**patch, **view}
    moved = any(k in patch for k in VIEW_KEYS if k != "lastObservedTime")
    if view and (view_written_at is None or (moved and now - view_written_at >= heartbeat_s)):
        return view
    return None


def write_status(
    ref: GroupRef,
    old: Mapping[str, Any],
    new: dict[str, Any],
    deps: Deps,
    cache: Cache,
    written: tuple[str, ...] = (),
) -> None:
    """Patch what changed (`status_write`).
    `written`: fields this cycle already wrote with a guarded write (status.drain, by the drain
    executor): left out of this unguarded merge patch, so it cannot overwrite another writer's.
    The installed CRD's verdict (`deps.crd_outdated`, act/crd_check.py) is laid over the conditions
    first: `Degraded=CRDOutdated` on every CR while the CRD lacks fields of this operator's."""
    if new.get("conditions") is not None:
        new["conditions"] = _crd_verdict(ref, old, new["conditions"], deps, cache)
        deps.metrics.observe_status(ref.namespace, ref.name, conditions=new["conditions"])
    now = deps.clock()
    patch = status_write(old, new, cache.view_written_at, now, deps.status_heartbeat_seconds)
    if patch is not None and written:
        patch = {k: v for k, v in patch.items() if k not in written} or None
    if patch is None:
        return
    deps.kube.patch_status(ref.namespace, ref.name, patch)
    if any(k in patch for k in VIEW_KEYS):
        cache.view_written_at = now
    # cache only the fields this loop owns: other writers (the drain executor) stay authoritative
    cache.last_status = {k: v for k, v in {**(cache.last_status or {}), **new}.items() if v is not None}


def _crd_verdict(
    ref: GroupRef, old: Mapping[str, Any], conditions: list[dict[str, Any]], deps: Deps, cache: Cache
) -> list[dict[str, Any]]:
    """`conditions` with the installed CRD's verdict laid over (decide/crd_check.with_outdated), and
    a Warning event `CRDOutdated` on the CR each time the verdict's message changes."""
    outdated = deps.crd_outdated() if deps.crd_outdated is not None else None
    said = outdated.message if outdated is not None else None
    if said != cache.crd_reported:
        cache.crd_reported = said
        if outdated is not None:
            deps.emit("Warning", outdated.reason, outdated.message)
    return crd_check.with_outdated(conditions, old.get("conditions"), outdated, ref.generation, deps.clock())


def load_memory(ref: GroupRef, deps: Deps, cache: Cache) -> dict[str, Any] | None:
    """The controller's memory: the cache's, else (the CR's first cycle in this process) the
    ConfigMap's; None: none yet (the step starts fresh). A failed read raises (KubeError): the cycle
    is retried rather than started blind (a fresh estimator would count a data loss again)."""
    if not cache.memory_loaded:
        cache.memory = memory_of(deps.kube.get_configmap(ref.namespace, memory_name(ref.name)), ref.uid)
        cache.memory_loaded = True
    return cache.memory


def memory_facts(memory: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a restart must not get wrong: written at once when it moves (not on the heartbeat)."""
    est = memory.get("estimator") or {}
    hist = memory.get("scalingHistory") or {}
    learned = (
        memory.get("learned") or {}
    )  # decide.learn: a new start-up sample, a downstream limit set or cleared
    return (
        est.get("dataLossRecords"),
        est.get("resets"),
        tuple(sorted((est.get("partitions") or {}).keys())),
        hist.get("lastScaleS"),
        tuple(learned.get("podStart") or ()),
        tuple(learned.get("drainStart") or ()),
        tuple(learned.get("drainWarmStart") or ()),
        (learned.get("limit") or {}).get("since_s"),
    )


def save_memory(ref: GroupRef, deps: Deps, cache: Cache, state: step_mod.StepState) -> None:
    """Keep the step's memory in the cache; write it to the ConfigMap on the CR's first cycle in
    this process, when `memory_facts` moved, or once `status_heartbeat_seconds` passed."""
    memory = state.to_memory()
    cache.memory = memory
    now = deps.clock()
    facts = memory_facts(memory)
    if (
        cache.memory_written_at is not None
        and facts == cache.memory_facts
        and now - cache.memory_written_at < deps.status_heartbeat_seconds
    ):
        return
    deps.kube.apply_configmap(memory_configmap(ref.name, ref.namespace, ref.uid, memory))
    cache.memory_written_at = now
    cache.memory_facts = facts


def paused_status(ref: GroupRef, status: Mapping[str, Any], pods: int, now: float) -> dict[str, Any]:
    """The status while spec.paused: replicas 0 wanted, no decisions."""
    return {
        "replicas": pods,
        "desiredReplicas": 0,
        "conditions": merge_conditions(
            status.get("conditions"),
            [
                Condition("Ready", FALSE, "Paused", "spec.paused is true: consumers scaled to 0"),
                Condition("Scaling", FALSE, "Paused", "no scaling decisions while paused"),
                Condition("Degraded", FALSE, "AsExpected", ""),
            ],
            ref.generation,
            now,
        ),
        "observedGeneration": ref.generation,
    }


def cycle_status(
    ref: GroupRef,
    spec: GroupSpec,
    status: Mapping[str, Any],
    snap: lag_mod.LagSnapshot,
    out: step_mod.StepDecision,
    est: est_mod.EstimatorState,
    replicas: tuple[int, int, int],
    target: int,
    last_scale_time: Any,
    drain_out: Any,
    now: float,
    not_ready: str = "",
    runtime_not_ready: str = "",
) -> dict[str, Any]:
    """The status of a cycle that observed and decided. `replicas`: the Deployment's (spec.replicas,
    status.replicas, readyReplicas) before the cycle acted; `target`: the count it now asks for;
    `not_ready`: why consumer pods are not ready, as they say (decide.pod_health; "" none);
    `runtime_not_ready`: likewise for the warm drain runtime's pod."""
    cur, pods, ready = replicas
    decision, held = out.decision, out.held
    phase = (status.get("drain") or {}).get("phase")
    lost_now = [p.partition for p in snap.partitions if lag_mod.lost_records(p) > 0]
    conds = conditions(
        spec,
        decision,
        target,
        cur,
        ready,
        held,
        lost_now,
        est,
        phase,
        not_ready=not_ready,
        runtime_not_ready=runtime_not_ready,
    )
    conds.append(scaling_ineffective(out))
    if drain_out is not None:
        conds.append(Condition("Draining", *drain_out.condition))
        if getattr(drain_out, "data_loss", None) is not None:
            # retention deleted part of a handed-off range before the drain read it (exact offsets)
            conds.append(Condition("DataLoss", *drain_out.data_loss))
        if getattr(drain_out, "stalled", None) is not None:
            # an attempt without progress / without a running pod was stopped (docs/drain.md)
            conds.append(Condition("DrainStalled", *drain_out.stalled))
    rates_known = any(p.samples > 0 for p in est.partitions.values())
    new = {
        "observedGeneration": ref.generation,
        "partitions": len(snap.partitions),
        "replicas": pods,
        "desiredReplicas": target if held else decision.desired_replicas,
        "totalLag": snap.total_lag,
        "maxPartitionLag": snap.max_partition_lag,
        "produceRate": finite(est.produce_rate, 2) if rates_known else None,
        "capacityPerReplica": finite(est.capacity_per_replica, 2),
        "projectedCatchUpSeconds": finite(decision.current_catch_up_s),
        "lastScaleTime": last_scale_time,
        "dataLossRecords": est.data_loss_records,
        "lastObservedTime": format_time(est.at_s),
        "partitionStatuses": partition_statuses(est, oldest_ages(snap, now)),
        # over the conditions the drain executor wrote with status.drain this cycle, if it did (its
        # Draining keeps the lastTransitionTime it wrote)
        "conditions": merge_conditions(
            getattr(drain_out, "conditions", None) or status.get("conditions"), conds, ref.generation, now
        ),
        # mode Act: no recommendation (null deletes the one a Recommend period left)
        "recommendation": None,
        "startUps": start_ups(out),
    }
    if drain_out is not None and drain_out.status is not None:
        new["drain"] = drain_out.status
    return new


def scaling_ineffective(out: step_mod.StepDecision) -> Condition:
    """``ScalingIneffective`` (decide.learn): True while a scale-up that did not raise the throughput
    holds the count (a downstream limit), else False."""
    if out.limit is not None:
        return Condition(
            ConditionType.SCALING_INEFFECTIVE.value,
            TRUE,
            ScalingIneffectiveReason.DOWNSTREAM_LIMITED.value,
            out.limit.message,
        )
    return Condition(
        ConditionType.SCALING_INEFFECTIVE.value,
        FALSE,
        ScalingIneffectiveReason.AS_EXPECTED.value,
        "no scale-up was judged ineffective",
    )


def start_ups(out: step_mod.StepDecision) -> dict[str, Any] | None:
    """``status.startUps`` (lagpilot.model.status.StartUps): the figures the planner used, measured or
    the default; the samples behind them stay in the controller's memory (act/memory.py)."""
    if not out.start_ups:
        return None
    return {
        key: {
            "seconds": round(seconds, 3),
            "source": (StartUpSource.MEASURED if samples else StartUpSource.DEFAULT).value,
        }
        for key, (seconds, samples) in out.start_ups.items()
    }


def partition_statuses(est: est_mod.EstimatorState, ages: Mapping[int, float]) -> list[dict[str, Any]]:
    """``status.partitionStatuses`` (lagpilot.model.status.PartitionStatus), by partition: ``low``,
    ``lag`` and the rates left out while 0 (absent: 0), so a caught-up, idle partition is 3 lines
    in ``kubectl describe`` (partition, committed, end), not 8."""
    out = []
    for p, e in sorted(est.partitions.items()):
        row: dict[str, Any] = {"partition": p}
        if e.committed is not None:
            row["committed"] = e.committed
        row["end"] = e.end
        at_zero = {
            "low": e.low,
            "lag": e.lag,
            "produceRate": round(e.produce_rate, RATE_DECIMALS),
            "consumeRate": round(e.consume_rate, RATE_DECIMALS),
        }
        if ages.get(p) is not None:
            row["oldestAgeSeconds"] = ages[p]
        row.update({k: v for k, v in at_zero.items() if v})
        out.append(row)
    return out


def oldest_ages(snap: lag_mod.LagSnapshot, now: float) -> dict[int, float]:
    """Age (s) of the oldest unprocessed record of each lagging partition whose age is known."""
    return {
        p.partition: a
        for p in snap.partitions
        if (a := finite(lag_mod.oldest_unprocessed_age_s(p, now))) is not None
    }


def conditions(
    spec: GroupSpec,
    d: Decision,
    target: int,
    cur: int,
    ready: int,
    held: bool,
    lost_now: list[int],
    est: est_mod.EstimatorState,
    phase: str | None = None,
    not_ready: str = "",
    runtime_not_ready: str = "",
) -> list[Condition]:
    """`not_ready` / `runtime_not_ready`: what the consumer pods / the warm drain runtime's pod say
    keeps them from Ready (decide.pod_health). The runtime's is added to Ready's message whatever
    its status: the status stays the consumers' (the group consumes; its drains start cold
    meanwhile), the message names the runtime's kill (e.g. OOMKilled at its memory limit)."""
    out: list[Condition] = []
    runtime = f"; warm drain runtime not ready: {runtime_not_ready}" if runtime_not_ready else ""
    if target == 0:
        out.append(
            Condition(
                "Ready",
                TRUE,
                "ScaledToZero" if d.reason == "ScaleToZero" else "NoReplicas",
                "no consumer replicas wanted" + runtime,
            )
        )
    elif ready >= target:
        out.append(Condition("Ready", TRUE, "ConsumersReady", f"{ready}/{target} consumers ready" + runtime))
    else:
        out.append(
            Condition(
                "Ready",
                FALSE,
                "ConsumersNotReady",
                f"{ready}/{target} consumers ready" + (f"; {not_ready}" if not_ready else "") + runtime,
            )
        )
    if held:
        out.append(
            Condition("Scaling", FALSE, "DrainHandOff", f"drain {phase}: replicas held at {cur}; {d.message}")
        )
    elif target != cur or ready != target:
        out.append(Condition("Scaling", TRUE, d.reason, d.message))
    else:
        out.append(Condition("Scaling", FALSE, d.reason, d.message))
    if d.at_risk:
        hot = f"; hot partitions {list(d.hot_partitions)}" if d.hot_partitions else ""
        out.append(
            Condition(
                "CatchUpAtRisk",
                TRUE,
                "ProjectedAboveSLA" if d.reason != "SLAUnreachable" else d.reason,
                f"projected catch-up {_fmt_s(d.projected_catch_up_s)} > SLA "
                f"{spec.catch_up_sla_seconds:.0f}s{hot}",
            )
        )
    elif d.projected_catch_up_s is None:
        out.append(
            Condition(
                "CatchUpAtRisk", "Unknown", "CapacityUnknown", "no consumer has reported its capacity yet"
            )
        )
    else:
        out.append(
            Condition(
                "CatchUpAtRisk",
                FALSE,
                "WithinSLA",
                f"projected catch-up {_fmt_s(d.projected_catch_up_s)} <= SLA "
                f"{spec.catch_up_sla_seconds:.0f}s",
            )
        )
    if lost_now:
        out.append(
            Condition(
                "Degraded",
                TRUE,
                "DataLoss",
                f"retention deleted records of partitions {lost_now} before the group consumed them "
                f"({est.data_loss_records} records lost so far)",
            )
        )
    else:
        out.append(Condition("Degraded", FALSE, "AsExpected", ""))
    return out


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "unknown"
    return "never" if not math.isfinite(x) else f"{x:.0f}s"


def report_metrics(
    ref: GroupRef,
    spec: GroupSpec,
    deps: Deps,
    snap: lag_mod.LagSnapshot,
    est: est_mod.EstimatorState,
    decision: Decision,
    target: int,
    new: Mapping[str, Any],
    status: Mapping[str, Any],
    now: float,
) -> None:
    """The group's gauges after a cycle that observed and decided (`new`: the status it computed)."""
    deps.metrics.observe_group(
        ref.namespace,
        ref.name,
        partition_lag={p.partition: lag_mod.partition_lag(p) for p in snap.partitions},
        partition_rate={p: e.produce_rate for p, e in est.partitions.items()},
        total_lag=snap.total_lag,
        projected_s=finite(decision.current_catch_up_s),
        sla_s=spec.catch_up_sla_seconds,
        desired=decision.desired_replicas,
        replicas=target,
        produce_rate=est.produce_rate,
        capacity=est.capacity_per_replica,
        data_loss=est.data_loss_records,
        log_end={p.partition: p.end for p in snap.partitions},
        committed={p.partition: p.committed for p in snap.partitions},
    )
    tasks_done, tasks_remaining = drain_progress(new.get("drain") or status.get("drain") or {})
    deps.metrics.observe_status(
        ref.namespace,
        ref.name,
        conditions=new["conditions"],
        max_replicas=spec.scaling.max_replicas,
        oldest_age_s=oldest_ages(snap, now),
        drain_done=tasks_done,
        drain_remaining=tasks_remaining,
    )
