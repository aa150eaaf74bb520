"""The policies replayed side by side on a trace, and the metrics of each run.

The lagpilot policy runs through the SAME functions the operator uses: the simulated offsets become
a :class:`~lagpilot.decide.lag.LagSnapshot`, go through :func:`lagpilot.decide.estimate.update`, then
:func:`lagpilot.decide.scaling.decide` (with the drain policy). The KEDA baseline runs through
:mod:`lagpilot.decide.keda` (Kafka scaler + HPA model).

Metrics per policy: ``within_sla_fraction`` (records processed within the SLA of being produced,
over processed records plus records still waiting at the end that are already older than the SLA),
``p99_latency_s``, ``max_latency_s`` (both including still-waiting records at their current age, a
lower bound), ``violation_minutes`` (time during which the oldest unprocessed record is older than
the SLA), ``replica_minutes`` (pods that exist, starting ones included), ``drain_task_minutes``
(from launch, start-up included, to each task's finish), ``scale_events``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lagpilot.decide import keda as keda_model
from lagpilot.decide import step as step_mod
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.sim.params import SimParams
from lagpilot.sim.trace import Trace, _weights
from lagpilot.sim.world import _World, range_assignment

POLICIES = ("lagpilot", "static", "keda", "keda_tuned", "keda_min0")
DEFAULT_POLICIES = ("lagpilot", "static", "keda", "keda_tuned")
KEDA_SWEEP = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
# keda_tuned, second stage: the scale-down stabilization window and (with minReplicaCount 0) the
# cooldown, swept around the best thresholds of the first stage
KEDA_WINDOWS = (0.0, 60.0, 300.0, 900.0)
KEDA_COOLDOWNS = (60.0, 300.0, 900.0)
# keda_tuned, third stage: the Kafka scaler's partition options (kafka_scaler.go), every combination
# on the best threshold/window/cooldown of the first two stages
KEDA_OPTIONS = (
    "limit_to_partitions_with_lag",
    "ensure_even_distribution_of_partitions",
    "exclude_persistent_lag",
)


@dataclass
class PolicyResult:
    """Metrics of one policy on one trace (the JSON object per policy)."""

    within_sla_fraction: float
    p99_latency_s: float
    max_latency_s: float
    violation_minutes: float
    replica_minutes: float
    drain_task_minutes: float
    scale_events: int
    drains: int
    produced: float
    processed: float
    remaining: float
    extra: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("series")
        extra = d.pop("extra")
        for k in ("within_sla_fraction",):
            d[k] = round(d[k], 6)
        for k in (
            "p99_latency_s",
            "max_latency_s",
            "violation_minutes",
            "replica_minutes",
            "drain_task_minutes",
            "produced",
            "processed",
            "remaining",
        ):
            d[k] = round(d[k], 1)
        d.update(extra)
        return d


Controller = Callable[["_World", float], None]


def _run(
    trace: Trace, params: SimParams, initial: int, controller: Controller | None, sample_s: float = 60.0
) -> PolicyResult:
    world = _World(trace, params, initial)
    dt = params.step_s
    end = trace.end_s
    row = 0
    t = trace.times[0] if trace.times else 0.0
    violation = 0.0
    replica_s = 0.0
    series: dict[str, list[float]] = {"t": [], "age": [], "lag": [], "replicas": [], "tasks": []}
    next_sample = t
    while t < end - 1e-9:
        while row + 1 < len(trace.times) and trace.times[row + 1] <= t:
            row += 1
        weights = _weights(trace.weights[row], params.partitions)
        if controller is not None:
            controller(world, t)
        replica_s += len(world.pods) * dt
        age, running = world.advance(t, dt, trace.rates[row], weights)
        if age > params.sla_s:
            violation += dt
        if t >= next_sample:
            series["t"].append(t)
            series["age"].append(age)
            series["lag"].append(world.remaining())
            series["replicas"].append(len(world.pods))
            series["tasks"].append(running)
            next_sample = t + sample_s
        t += dt
    # tasks finished mid-step: count them exactly from launch to finish
    finished_task_s = world.finished_task_s
    open_task_s = sum(t - task.launched for task in world.tasks)
    drain_task_minutes = (finished_task_s + open_task_s) / 60
    produced = sum(world.produced_by)
    remaining = world.remaining()
    processed = world.lat.count
    late_waiting = 0.0
    oldest_age = 0.0
    for q in world.queues + world.drain_queues():
        for t0, t1, n in q.segs:
            a0, a1 = t - t1, t - t0  # ages of the newest and oldest record of the segment
            oldest_age = max(oldest_age, a1)
            if a1 > params.sla_s:
                frac = 1.0 if a0 >= params.sla_s else (a1 - params.sla_s) / (a1 - a0)
                late_waiting += n * frac
                world.lat.bins[int((max(a0, params.sla_s) + a1) / 2)] = (
                    world.lat.bins.get(int((max(a0, params.sla_s) + a1) / 2), 0.0) + n * frac
                )
    denom = processed + late_waiting
    within = world.lat.within / denom if denom > 0 else 1.0
    lat_count = world.lat.count
    world.lat.count = denom
    p99 = world.lat.quantile(0.99)
    world.lat.count = lat_count
    return PolicyResult(
        within_sla_fraction=within,
        p99_latency_s=p99,
        max_latency_s=max(world.lat.max, oldest_age),
        violation_minutes=violation / 60,
        replica_minutes=replica_s / 60,
        drain_task_minutes=drain_task_minutes,
        scale_events=world.scale_events,
        drains=world.drains,
        produced=produced,
        processed=processed,
        remaining=remaining,
        series=series,
        extra={
            **(
                {"drains_by_partition": {str(k): v for k, v in sorted(world.drained.items())}}
                if world.drains
                else {}
            ),
            **({"drain_runtime_minutes": round(world.runtime_s / 60, 1)} if world.runtime_s > 0 else {}),
            **({"busy_drain_splits": world.drains_extended} if world.drains_extended else {}),
        },
    )


# -------------------------------------------------------------------------------- controllers
def lagpilot_controller(params: SimParams) -> Controller:
    """The operator's own decision step (lagpilot.decide.step.step) on simulated offsets, every poll."""
    policies = step_mod.Policies.from_group_spec(params.group_spec(), params.model())
    state: dict[str, Any] = {"step": step_mod.StepState(), "next": -math.inf, "decisions": {}}

    def control(world: _World, t: float) -> None:
        if t < state["next"]:
            return
        state["next"] = t + params.poll_interval_s
        world.release_idle(t)
        lags = world.observed_lags()
        ready = world.ready(t)
        owned = {i for block in range_assignment(params.partitions, ready) for i in block}
        parts = []
        for i in range(params.partitions):
            end = round(world.produced_by[i])
            committed = max(0, end - round(lags[i]))
            parts.append(PartitionOffsets(i, 0, end, committed, world.queues[i].oldest()))
        snap = snapshot(t, parts, {i: params.decision_capacity(t) for i in owned})
        runtime = world.runtime_observation(t) if params.warm_runtime != "off" else None
        obs = step_mod.StepObservation(
            snap, len(world.pods), world.drain_statuses(), runtime=runtime, ready_replicas=ready
        )
        out, state["step"] = step_mod.step(state["step"], obs, policies, t)
        if out.runtime_replicas is not None:
            world.scale_runtime(out.runtime_replicas, t)
        reason = out.decision.reason
        state["decisions"][reason] = state["decisions"].get(reason, 0) + 1
        if out.hold is not None or not out.held:
            world.scale(out.replicas, t)
        if out.drain is not None:
            world.plan_drain(out.drain, t)
        world.settle(t, out.hand_back, rolled=out.decision.roll_over is not None)

    control.state = state  # type: ignore[attr-defined]
    return control


def keda_controller(params: SimParams, cfg: keda_model.KedaConfig) -> Controller:
    box = {"state": keda_model.KedaState()}

    def control(world: _World, t: float) -> None:
        lags = world.observed_lags()
        committed = [round(e - lag) for e, lag in zip(world.produced_by, lags, strict=True)]
        desired, box["state"] = keda_model.step(
            box["state"], t, len(world.pods), lags, params.partitions, cfg, committed=committed
        )
        world.scale(desired, t)

    return control


def keda_config(params: SimParams, lag_threshold: int = 10, **over: Any) -> keda_model.KedaConfig:
    """KEDA's defaults, except minReplicaCount = lagpilot's minReplicas (a fair comparison) and
    maxReplicaCount = lagpilot's cap; ``over`` sets any other field (cooldown_s, down_window_s...)."""
    over.setdefault("min_replicas", params.min_replicas)
    return keda_model.KedaConfig(
        lag_threshold=lag_threshold,
        max_replicas=params.max_replicas or keda_model.KedaConfig().max_replicas,
        **over,
    )


def run_policy(
    trace: Trace,
    params: SimParams,
    policy: str,
    lag_threshold: int = 10,
    keda: keda_model.KedaConfig | None = None,
    sample_s: float = 60.0,
) -> PolicyResult:
    """One policy on one trace: ``lagpilot`` (the operator's step), ``static`` (partitions replicas),
    ``keda`` (KEDA defaults with minReplicaCount = minReplicas, or ``keda`` given), ``keda_min0``
    (KEDA exactly as shipped: minReplicaCount 0). ``sample_s``: the interval of ``series`` (the
    plot's samples; a trajectory compared with a real run needs the step's own)."""
    if policy == "static":
        return _run(trace, params, params.partitions, None, sample_s)
    if policy == "lagpilot":
        ctl = lagpilot_controller(params)
        res = _run(trace, params, max(1, params.min_replicas), ctl, sample_s)
        res.extra["decision_reasons"] = dict(sorted(ctl.state["decisions"].items()))  # type: ignore[attr-defined]
        return res
    if policy in ("keda", "keda_min0"):
        cfg = keda or (
            keda_config(params, lag_threshold)
            if policy == "keda"
            else keda_model.KedaConfig(lag_threshold=lag_threshold)
        )
        res = _run(trace, params, max(1, cfg.min_replicas), keda_controller(params, cfg), sample_s)
        res.extra.update(
            {
                "lag_threshold": cfg.lag_threshold,
                "min_replica_count": cfg.min_replicas,
                "cooldown_s": cfg.cooldown_s,
                "scale_down_window_s": cfg.down_window_s,
                **{k: True for k in KEDA_OPTIONS if getattr(cfg, k)},
            }
        )
        return res
    raise ValueError(f"unknown policy {policy!r}")


def _better(a: PolicyResult, b: PolicyResult) -> bool:
    """KEDA at its best: most records within the SLA, then fewest violation minutes, then cost."""
    return _key(a) > _key(b)


def run_all(
    trace: Trace,
    params: SimParams,
    sweep: Sequence[int] = KEDA_SWEEP,
    windows: Sequence[float] = KEDA_WINDOWS,
    cooldowns: Sequence[float] = KEDA_COOLDOWNS,
    top: int = 2,
    policies: Sequence[str] = DEFAULT_POLICIES,
) -> tuple[dict[str, PolicyResult], list[dict[str, Any]]]:
    """The policies; ``keda_tuned`` is the best KEDA of a sweep (returned): every ``lagThreshold``
    at the default windows, then the ``top`` best thresholds with every scale-down window (and
    every cooldown when minReplicaCount is 0), then the best of those with every combination of the
    scaler's partition options (``limitToPartitionsWithLag``, ``ensureEvenDistributionOfPartitions``,
    ``excludePersistentLag``) that KEDA accepts (not the first two together)."""
    results: dict[str, PolicyResult] = {}
    for name in ("lagpilot", "static", "keda", "keda_min0"):
        if name in policies:
            results[name] = run_policy(trace, params, name)
    if "keda_tuned" not in policies:
        return results, []
    base = keda_config(params)
    table: list[dict[str, Any]] = []
    runs: list[tuple[keda_model.KedaConfig, PolicyResult]] = []

    def run(cfg: keda_model.KedaConfig) -> PolicyResult:
        res = (
            results["keda"]
            if cfg == base and "keda" in results
            else run_policy(trace, params, "keda", keda=cfg)
        )
        table.append(
            {
                "lag_threshold": cfg.lag_threshold,
                "scale_down_window_s": cfg.down_window_s,
                "cooldown_s": cfg.cooldown_s,
                **{k: getattr(cfg, k) for k in KEDA_OPTIONS},
                "within_sla_fraction": round(res.within_sla_fraction, 6),
                "violation_minutes": round(res.violation_minutes, 1),
                "replica_minutes": round(res.replica_minutes, 1),
            }
        )
        runs.append((cfg, res))
        return res

    for thr in sweep:
        run(replace(base, lag_threshold=thr))
    ranked = sorted(runs, key=lambda cr: _key(cr[1]), reverse=True)
    best_thr = []
    for cfg, _ in ranked:
        if cfg.lag_threshold not in best_thr:
            best_thr.append(cfg.lag_threshold)
    for thr in best_thr[:top]:
        for w in windows:
            for cd in cooldowns if base.min_replicas == 0 else (base.cooldown_s,):
                cfg = replace(base, lag_threshold=thr, down_window_s=w, cooldown_s=cd)
                if cfg.down_window_s == base.down_window_s and cfg.cooldown_s == base.cooldown_s:
                    continue  # already run in the first stage
                run(cfg)
    best_cfg = max(runs, key=lambda cr: _key(cr[1]))[0]
    for mask in range(1, 2 ** len(KEDA_OPTIONS)):
        opts = {k: bool(mask >> i & 1) for i, k in enumerate(KEDA_OPTIONS)}
        if keda_model.keda_accepts(allow_idle_consumers=best_cfg.allow_idle_consumers, **opts):
            run(replace(best_cfg, **opts))
    best = max(runs, key=lambda cr: _key(cr[1]))[1]
    results["keda_tuned"] = best
    return results, table


def _key(r: PolicyResult) -> tuple[float, float, float]:
    return (round(r.within_sla_fraction, 6), -round(r.violation_minutes, 3), -r.replica_minutes)
