"""The simulator's model figures (:class:`SimParams`) and the CR spec and decision model they stand for."""

from __future__ import annotations

from dataclasses import dataclass

from lagpilot.decide import step as step_mod
from lagpilot.spec import BatchSpec, DrainSpec, GroupSpec, KafkaSpec, ScalingSpec

# measured on this machine (docs/decision.md "Calibration" names the command for each)
QUIESCE_PAUSE_S = (
    31.0  # tests/real/test_drain_operator.py: group pause 29.9-32.6 s (session timeout + restart)
)


@dataclass(frozen=True)
class SimParams:
    """Model figures; the CLI flags override them. Defaults are the measured ones (docs/decision.md)."""

    partitions: int = 3
    capacity: float = 137.0  # records/s one consumer processes (per busy second)
    sla_s: float = 600.0
    pod_start_s: float = 30.0  # schedule + pull (cached) + start + join the group
    drain_start_s: float = 20.0  # `lagpilot drain` launched -> first batch (bench/drain.py: 12.9-20.3 s)
    drain_task_capacity: float | None = None  # None: same as a consumer (same handler, same batch)
    max_drain_tasks: int = 16
    split_factor: int | None = None  # spec.drain.splitFactor: an optional cap (None, the CRD's default: none)
    min_backlog_records: int = 10_000
    drain_min_interval_s: float = 60.0
    step_s: float = 5.0
    batch_timeout_s: float = 1.0
    min_replicas: int = 1
    max_replicas: int | None = None  # None: the CRD's default (maxReplicas 10), capped at the partition count
    poll_interval_s: float = 15.0
    # lagpilot's spec.scaling.behavior.scaleDown.stabilizationWindowSeconds (the demo's CR sets 60 s;
    # KEDA's model keeps the HPA's own 300 s, keda_tuned sweeps it)
    scale_down_window_s: float = 300.0
    # the live group's pause at a hand-off: consumer-ack path ~ one batch; quiesce path: replicas
    # held at 0 (handoff.replicas_override) for the pause, then restored (pods start again)
    handoff_pause_s: float | None = None  # None: batch_timeout_s (ack path) or QUIESCE_PAUSE_S
    handoff_quiesce: bool = False
    concurrent_drains: int = 1  # drains the executor runs side by side (today's executor: 1)
    # the warm drain runtime (decide.runtime): off (every drain a cold Job: drain_start_s), always
    # (spec.drain.warmRuntime: drains start in drain_warm_start_s), on-demand (+ warmRuntimeCooldownSeconds:
    # scaled up in bursts, Ready drain_start_s later; a due drain's split waits for it)
    warm_runtime: str = "off"
    runtime_cooldown_s: float = 120.0  # the value docs recommend (docs/decision.md "warm runtime on demand")
    drain_warm_start_s: float = 3.0  # a drain on a Ready runtime -> first batch (bench/drain.py warm: 2.3 s)
    batch_max_records: int = 500
    drain_assist: bool = False  # the simulated CR's spec.drain.assistReplicas (opt-in, like the CRD)
    # the saving that makes the drain-assisted count worth it: always with drain_assist, else only in
    # bursts (the capped group cannot hold the load); None: never (--no-drain-assist)
    drain_assist_min_saving: float | None = 1.0
    # issue 25 item 2: the executor keeps a drain busy across a burst (its tasks take the next split
    # without a new start-up; step.Model.drain_busy, docs/drain.md "Busy drains"); the CRD's default
    # (spec.drain.busy, read from the model: lagpilot.spec.DrainSpec)
    busy_drains: bool = DrainSpec().busy
    # a busy drain's driver ends by itself after this long without a next part
    # (LAGPILOT_DRAIN_PART_WAIT_SECONDS, lagpilot_runtime.drain.job.PART_WAIT_S); until then it holds
    # its task slots (docs/drain.md "Busy drains")
    drain_part_wait_s: float = 300.0
    # issue 25 item 4 (decide.learn): the planner starts from the operator's defaults (step.Model's
    # figures) and learns the world's pod start and drain start-ups; False: it is told the world's
    learn_start_ups: bool = False
    # sim-to-real (a demo run, lagpilot.sim.compare): what the operator knew where it differs from the
    # world. ``reported_capacity``: a consumer's capacity as the operator's estimate read it over the
    # run, ((t, records/s per replica), ...) at its changes; the decisions see it, the world's
    # consumers still process ``capacity``. Empty: the decisions see ``capacity`` from the start.
    reported_capacity: tuple[tuple[float, float], ...] = ()
    # the planner is told ``drain_task_capacity``; False: not told (the operator's own default, a
    # consumer's capacity: step.Model.drain_task_capacity None); the world's tasks still run at it
    tell_task_capacity: bool = True

    def decision_capacity(self, t: float) -> float:
        """A consumer's capacity as the decisions see it at ``t``: the last ``reported_capacity`` at or
        before ``t`` (before the first, the first), else the world's ``capacity``."""
        if not self.reported_capacity:
            return self.capacity
        seen = self.reported_capacity[0][1]
        for at, cap in self.reported_capacity:
            if at > t:
                break
            seen = cap
        return seen

    @property
    def task_capacity(self) -> float:
        return self.drain_task_capacity or self.capacity

    @property
    def max_replicas_cap(self) -> int:
        """The group's cap as the operator applies it: maxReplicas (the CRD's default unless set), never
        above the partition count."""
        return min(self.max_replicas or ScalingSpec().max_replicas, self.partitions)

    @property
    def pause_s(self) -> float:
        if self.handoff_pause_s is not None:
            return self.handoff_pause_s
        return QUIESCE_PAUSE_S if self.handoff_quiesce else self.batch_timeout_s

    def group_spec(self) -> GroupSpec:
        """The CR spec this simulated group runs under (the operator's own parse types)."""
        return GroupSpec(
            kafka=KafkaSpec(bootstrap_servers="127.0.0.1:9092"),
            topic="simulated",
            group_id="simulated",
            batch=BatchSpec(max_records=self.batch_max_records),
            scaling=ScalingSpec(
                min_replicas=self.min_replicas,
                max_replicas=self.max_replicas_cap,
                poll_interval_seconds=self.poll_interval_s,
                scale_down_window_seconds=self.scale_down_window_s,
            ),
            catch_up_sla_seconds=self.sla_s,
            drain=DrainSpec(
                split_factor=self.split_factor,
                max_tasks=self.max_drain_tasks,
                min_backlog_records=self.min_backlog_records,
                assist_replicas=self.drain_assist,
                warm_runtime=self.warm_runtime != "off",
                warm_runtime_cooldown_s=(
                    int(self.runtime_cooldown_s) if self.warm_runtime == "on-demand" else None
                ),
            ),
        )

    def model(self) -> step_mod.Model:
        told = step_mod.Model() if self.learn_start_ups else None  # the operator's defaults, then learned
        return step_mod.Model(
            pod_start_s=told.pod_start_s if told else self.pod_start_s,
            drain_start_s=told.drain_start_s if told else self.drain_start_s,
            drain_warm_start_s=told.drain_warm_start_s if told else self.drain_warm_start_s,
            learn_start_ups=self.learn_start_ups,
            handoff_pause_s=self.pause_s,
            drain_task_capacity=self.drain_task_capacity if self.tell_task_capacity else None,
            max_concurrent_drains=self.concurrent_drains,
            drain_min_interval_s=self.drain_min_interval_s,
            drain_assist_min_saving=self.drain_assist_min_saving,
            drain_busy=self.busy_drains,
        )
