"""`lagpilot simulate`: replay a produce-rate trace through the scaling policies, side by side.

The lagpilot policy runs through the SAME functions the operator uses: the simulated offsets become
a :class:`~lagpilot.lag.LagSnapshot`, go through :func:`lagpilot.estimate.update`, then
:func:`lagpilot.scaling.decide` (with the drain policy). The KEDA baseline runs through
:mod:`lagpilot.keda` (Kafka scaler + HPA model).

The model (documented in docs/decision.md):
- fluid, per-partition FIFO queues of segments ``[t0, t1, n]`` (n records produced uniformly over
  [t0, t1]); latency is exact for that fluid model: a piece processed over [s, e] has latencies
  spread uniformly between ``s - t0`` and ``e - t1``;
- a consumer processes ``capacity`` records/s shared among the partitions it owns (range assignor,
  work-conserving: water-filling among non-empty partitions); new pods start after
  ``pod_start_s``; removed pods stop at once; rebalance pauses are not modelled;
- a drain takes a partition's whole queue at plan time (split = end), cuts it into tasks of equal
  size, each task starts ``drain_start_s`` after launch and processes its sub-range FIFO at
  ``drain_task_capacity``; one drain at a time; at most ``max_drain_tasks`` tasks;
- observers (lagpilot and KEDA) see a partition's lag as its queue plus the records in flight in a
  batch (rate x ``batch_timeout_s``), like a batching consumer's committed offsets.

Metrics per policy: ``within_sla_fraction`` (records processed within the SLA of being produced,
over processed records plus records still waiting at the end that are already older than the SLA),
``p99_latency_s``, ``max_latency_s`` (both including still-waiting records at their current age, a
lower bound), ``violation_minutes`` (time during which the oldest unprocessed record is older than
the SLA), ``replica_minutes`` (pods that exist, starting ones included), ``drain_task_minutes``
(from launch, start-up included, to each task's finish), ``scale_events``.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import tempfile
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

from lagpilot import handoff
from lagpilot import keda as keda_model
from lagpilot import step as step_mod
from lagpilot import tracegen
from lagpilot.lag import PartitionOffsets, snapshot
from lagpilot.spec import BatchSpec, DrainSpec, GroupSpec, KafkaSpec, ScalingSpec

POLICIES = ("lagpilot", "static", "keda", "keda_tuned", "keda_min0")
DEFAULT_POLICIES = ("lagpilot", "static", "keda", "keda_tuned")
KEDA_SWEEP = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
# keda_tuned, second stage: the scale-down stabilization window and (with minReplicaCount 0) the
# cooldown, swept around the best thresholds of the first stage
KEDA_WINDOWS = (0.0, 60.0, 300.0, 900.0)
KEDA_COOLDOWNS = (60.0, 300.0, 900.0)


# ---------------------------------------------------------------------------------------- trace
@dataclass(frozen=True)
class Trace:
    """Produce rate per row (one row a minute); optional per-row partition weights."""

    times: tuple[float, ...]
    rates: tuple[float, ...]
    weights: tuple[tuple[float, ...] | None, ...]

    @property
    def end_s(self) -> float:
        if not self.times:
            return 0.0
        step = self.times[-1] - self.times[-2] if len(self.times) > 1 else 60.0
        return self.times[-1] + step


def parse_trace(lines: Sequence[str] | Any) -> Trace:
    """Parse CSV text rows ``t_s,produce_msgs_per_s[,partition_weights]`` (header required)."""
    reader = csv.DictReader(lines)
    times: list[float] = []
    rates: list[float] = []
    weights: list[tuple[float, ...] | None] = []
    for row in reader:
        times.append(float(row["t_s"]))
        rates.append(max(0.0, float(row["produce_msgs_per_s"])))
        w = (row.get("partition_weights") or "").strip()
        weights.append(tuple(float(x) for x in w.split(",")) if w else None)
    order = sorted(range(len(times)), key=lambda i: times[i])
    return Trace(tuple(times[i] for i in order), tuple(rates[i] for i in order), tuple(weights[i] for i in order))


def load_trace(path: str) -> Trace:
    with open(path, newline="") as f:
        return parse_trace(f)


def _weights(w: tuple[float, ...] | None, partitions: int) -> list[float]:
    if not w:
        return [1.0 / partitions] * partitions
    vals = [max(0.0, x) for x in (list(w) + [0.0] * partitions)[:partitions]]
    total = sum(vals)
    return [v / total for v in vals] if total > 0 else [1.0 / partitions] * partitions


# ---------------------------------------------------------------------------------------- model
# measured on this machine (docs/decision.md "Calibration" names the command for each)
QUIESCE_PAUSE_S = 31.0  # tests/real/test_drain_operator.py: group pause 29.9-32.6 s (session timeout + restart)


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
    split_factor: int = 4
    min_backlog_records: int = 10_000
    drain_min_interval_s: float = 60.0
    step_s: float = 5.0
    batch_timeout_s: float = 1.0
    min_replicas: int = 1
    max_replicas: int | None = None  # None: the partition count
    poll_interval_s: float = 15.0
    # lagpilot's spec.scaling.behavior.scaleDown.stabilizationWindowSeconds (the demo's CR sets 60 s;
    # KEDA's model keeps the HPA's own 300 s, keda_tuned sweeps it)
    scale_down_window_s: float = 300.0
    # the live group's pause at a hand-off: consumer-ack path ~ one batch; quiesce path: replicas
    # held at 0 (handoff.replicas_override) for the pause, then restored (pods start again)
    handoff_pause_s: float | None = None  # None: batch_timeout_s (ack path) or QUIESCE_PAUSE_S
    handoff_quiesce: bool = False
    concurrent_drains: int = 1  # drains the executor runs side by side (today's executor: 1)
    batch_max_records: int = 500
    drain_assist: bool = False  # the simulated CR's spec.drain.assistReplicas (opt-in, like the CRD)
    # the saving that makes the drain-assisted count worth it: always with drain_assist, else only in
    # bursts (the capped group cannot hold the load); None: never (--no-drain-assist)
    drain_assist_min_saving: float | None = 1.0

    @property
    def task_capacity(self) -> float:
        return self.drain_task_capacity or self.capacity

    @property
    def pause_s(self) -> float:
        if self.handoff_pause_s is not None:
            return self.handoff_pause_s
        return QUIESCE_PAUSE_S if self.handoff_quiesce else self.batch_timeout_s

    def group_spec(self) -> GroupSpec:
        """The CR spec this simulated group runs under (the operator's own parse types)."""
        return GroupSpec(
            kafka=KafkaSpec(bootstrap_servers="127.0.0.1:9092"), topic="simulated", group_id="simulated",
            batch=BatchSpec(max_records=self.batch_max_records),
            scaling=ScalingSpec(min_replicas=self.min_replicas,
                                max_replicas=self.max_replicas or self.partitions,
                                poll_interval_seconds=self.poll_interval_s,
                                scale_down_window_seconds=self.scale_down_window_s),
            catch_up_sla_seconds=self.sla_s,
            drain=DrainSpec(split_factor=self.split_factor, max_tasks=self.max_drain_tasks,
                            min_backlog_records=self.min_backlog_records, assist_replicas=self.drain_assist),
        )

    def model(self) -> step_mod.Model:
        return step_mod.Model(pod_start_s=self.pod_start_s, drain_start_s=self.drain_start_s,
                              handoff_pause_s=self.pause_s, drain_task_capacity=self.drain_task_capacity,
                              max_concurrent_drains=self.concurrent_drains,
                              drain_min_interval_s=self.drain_min_interval_s,
                              drain_assist_min_saving=self.drain_assist_min_saving)


class _Queue:
    """FIFO of fluid segments [t0, t1, n]."""

    __slots__ = ("segs", "total")

    def __init__(self) -> None:
        self.segs: deque[list[float]] = deque()
        self.total = 0.0

    def push(self, t0: float, t1: float, n: float) -> None:
        if n > 0:
            self.segs.append([t0, t1, n])
            self.total += n

    def oldest(self) -> float | None:
        return self.segs[0][0] if self.segs else None

    def take(self, amount: float, s: float, e: float, out: "_Latency") -> float:
        """Process up to ``amount`` records over [s, e] (linearly); returns what was processed."""
        amount = min(amount, self.total)
        if amount <= 0:
            return 0.0
        done = 0.0
        span = e - s
        while done < amount - 1e-12 and self.segs:
            seg = self.segs[0]
            t0, t1, n = seg
            x = min(n, amount - done)
            frac = x / n
            tx = t0 + (t1 - t0) * frac  # produce time of the last record taken
            ps = s + span * (done / amount)
            pe = s + span * ((done + x) / amount)
            out.add(ps - t0, pe - tx, x)
            if x >= n - 1e-9:
                self.segs.popleft()
            else:
                seg[0] = tx
                seg[2] = n - x
            done += x
        self.total = max(0.0, self.total - done)
        if not self.segs:
            self.total = 0.0
        return done

    def take_all(self) -> list[list[float]]:
        segs = list(self.segs)
        self.segs.clear()
        self.total = 0.0
        return segs


def _split(segs: list[list[float]], parts: int) -> list[_Queue]:
    """Cut a run of segments into ``parts`` queues of equal record counts (consecutive sub-ranges)."""
    total = sum(s[2] for s in segs)
    queues = [_Queue() for _ in range(max(1, parts))]
    if total <= 0:
        return queues
    size = total / len(queues)
    qi = 0
    room = size
    for t0, t1, n in segs:
        while n > 1e-9:
            x = n if qi == len(queues) - 1 else min(n, room)
            tx = t0 + (t1 - t0) * (x / n)
            queues[qi].push(t0, tx, x)
            t0, n = tx, n - x
            room -= x
            if room <= 1e-9 and qi < len(queues) - 1:
                qi += 1
                room = size
    return queues


class _Latency:
    """Latency distribution from uniform pieces (lo, hi, n); 1 s bins for the quantiles."""

    def __init__(self, sla_s: float) -> None:
        self.sla = sla_s
        self.within = 0.0
        self.count = 0.0
        self.max = 0.0
        self.bins: dict[int, float] = {}

    def add(self, lo: float, hi: float, n: float) -> None:
        lo, hi = max(0.0, min(lo, hi)), max(0.0, max(lo, hi))
        if n <= 0:
            return
        if hi <= self.sla:
            self.within += n
        elif lo < self.sla:
            self.within += n * (self.sla - lo) / (hi - lo)
        self.count += n
        self.max = max(self.max, hi)
        key = int((lo + hi) / 2)
        self.bins[key] = self.bins.get(key, 0.0) + n

    def quantile(self, q: float) -> float:
        if self.count <= 0:
            return 0.0
        goal = q * self.count
        acc = 0.0
        for k in sorted(self.bins):
            acc += self.bins[k]
            if acc >= goal:
                return float(k) + 0.5
        return self.max


def range_assignment(partitions: int, consumers: int) -> list[list[int]]:
    """Kafka's range assignor for one topic: contiguous blocks, the first ones one larger."""
    if consumers <= 0:
        return []
    consumers = min(consumers, partitions)
    base, extra = divmod(partitions, consumers)
    out, p = [], 0
    for i in range(consumers):
        k = base + (1 if i < extra else 0)
        out.append(list(range(p, p + k)))
        p += k
    return out


def _water_fill(budget: float, queued: list[float]) -> list[float]:
    """Split ``budget`` fairly among queues, never giving one more than it holds."""
    alloc = [0.0] * len(queued)
    active = [i for i, q in enumerate(queued) if q > 0]
    while budget > 1e-12 and active:
        share = budget / len(active)
        nxt = []
        for i in active:
            room = queued[i] - alloc[i]
            give = min(room, share)
            alloc[i] += give
            budget -= give
            if queued[i] - alloc[i] > 1e-12:
                nxt.append(i)
        if len(nxt) == len(active):
            break
        active = nxt
    return alloc


@dataclass
class _Task:
    queue: _Queue
    launched: float
    start_at: float
    done_at: float | None = None


@dataclass
class _SimDrain:
    """One drain: the hand-off's own status (handoff.DrainStatus, its Phase values) and its tasks."""

    status: handoff.DrainStatus
    tasks_by_partition: dict[int, int]
    planned_s: float
    handoff_at: float  # when the group has moved to the split (plan + pause)
    tasks: list[_Task] = field(default_factory=list)


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
        for k in ("p99_latency_s", "max_latency_s", "violation_minutes", "replica_minutes",
                  "drain_task_minutes", "produced", "processed", "remaining"):
            d[k] = round(d[k], 1)
        d.update(extra)
        return d


Controller = Callable[["_World", float], None]


class _World:
    """The simulated topic, consumers and drains; a controller changes the replica count and plans
    drains, the world runs the drain's hand-off timing (planned -> handed off -> running -> done)."""

    def __init__(self, trace: Trace, params: SimParams, initial_replicas: int) -> None:
        self.trace = trace
        self.p = params
        n = params.partitions
        self.queues = [_Queue() for _ in range(n)]
        self.produced_by = [0.0] * n
        self.rates = [0.0] * n
        self.pods: list[float] = [-math.inf] * initial_replicas  # ready_at per pod
        self.sim_drains: list[_SimDrain] = []
        self.last_status: handoff.DrainStatus | None = None  # the newest finished drain
        self.paused_until = -math.inf  # the group's hand-off pause
        self.drains = 0
        self.drained: dict[int, int] = {}  # partition -> drains of it
        self.finished_task_s = 0.0  # drain tasks already finished: launch -> finish, summed
        self.scale_events = 0
        self.lat = _Latency(params.sla_s)

    # observers ---------------------------------------------------------------------------
    def observed_lags(self) -> list[float]:
        return [q.total + r * self.p.batch_timeout_s for q, r in zip(self.queues, self.rates)]

    def ready(self, t: float) -> int:
        return sum(1 for r in self.pods if r <= t)

    @property
    def drain_active(self) -> bool:
        return bool(self.sim_drains)

    @property
    def tasks(self) -> list[_Task]:
        return [task for d in self.sim_drains for task in d.tasks]

    def drain_statuses(self) -> tuple[handoff.DrainStatus, ...]:
        """What the executor would hold in status.drain: drains in flight, else the last one."""
        live = tuple(d.status for d in self.sim_drains)
        return live or ((self.last_status,) if self.last_status is not None else ())

    # actions -----------------------------------------------------------------------------
    def scale(self, desired: int, t: float) -> None:
        desired = max(0, desired)
        cur = len(self.pods)
        if desired == cur:
            return
        self.scale_events += 1
        if desired > cur:
            self.pods.extend([t + self.p.pod_start_s] * (desired - cur))
        else:
            # remove starting pods first, then ready ones
            self.pods.sort()
            del self.pods[desired:]

    def plan_drain(self, need: Any, t: float) -> None:
        """The executor's plan: split = the end offset now; the hand-off completes after the pause."""
        tasks = {r.partition: r.tasks for r in need.ranges if r.tasks > 0}
        if not tasks:
            return
        self.drains += 1
        prev_id = max([d.status.id for d in self.sim_drains] + [self.last_status.id if self.last_status else 0])
        ranges = tuple(handoff.PartitionRange(p, split=int(round(self.produced_by[p]))) for p in sorted(tasks))
        # a group another quiesce emptied gets back what that drain will restore
        restore = max([len(self.pods)] + [d.status.restore_replicas for d in self.sim_drains
                                          if d.status.handed_off_at is None and d.status.quiesced_at is not None])
        st = handoff.DrainStatus(id=prev_id + 1, phase=handoff.Phase.PLANNED, reason=need.reason, ranges=ranges,
                                 restore_replicas=restore, planned_at=t)
        if self.p.handoff_quiesce:
            st = replace(st, quiesced_at=t, **_path("PATH_QUIESCE"))
            self.scale(0, t)  # the quiesce path empties the group; replicas come back at launch
        self.paused_until = max(self.paused_until, t + self.p.pause_s)
        self.sim_drains.append(_SimDrain(st, tasks, t, t + self.p.pause_s))

    def _hand_off(self, d: _SimDrain, t: float) -> None:
        """Handed off and launched: the range [start, split) leaves the group, tasks start."""
        subs = []
        for p, n_tasks in sorted(d.tasks_by_partition.items()):
            segs = _take_before(self.queues[p], d.planned_s)
            self.drained[p] = self.drained.get(p, 0) + 1
            for k, q in enumerate(_split(segs, n_tasks)):
                d.tasks.append(_Task(q, t, t + self.p.drain_start_s))
                n = int(round(q.total))
                subs.append(handoff.SubProgress(p, k, 0, n, 0))
        st = replace(d.status, phase=handoff.Phase.HANDED_OFF, handed_off_at=t, sub_ranges=tuple(subs))
        d.status = replace(st, phase=handoff.Phase.RUNNING, started_at=t, resumed_at=t, attempt=1)
        if self.p.handoff_quiesce:
            self.scale(d.status.restore_replicas, t)

    # one step ----------------------------------------------------------------------------
    def advance(self, t: float, dt: float, rate: float, weights: list[float]) -> tuple[float, int]:
        n = self.p.partitions
        for d in self.sim_drains:
            if d.status.handed_off_at is None and d.handoff_at <= t + dt:
                self._hand_off(d, max(t, d.handoff_at))
        for i in range(n):
            r = rate * weights[i]
            self.rates[i] = r
            self.queues[i].push(t, t + dt, r * dt)
            self.produced_by[i] += r * dt
        ready = self.ready(t)
        work = max(0.0, dt - max(0.0, min(t + dt, self.paused_until) - t))  # the hand-off pause
        for owned in range_assignment(n, ready):
            budget = self.p.capacity * work
            if budget <= 0:
                break
            alloc = _water_fill(budget, [self.queues[i].total for i in owned])
            share = budget / len(owned)
            s0 = t + dt - work
            for i, a in zip(owned, alloc):
                if a > 0:
                    self.queues[i].take(a, s0, s0 + work * min(1.0, a / share) if share > 0 else t + dt, self.lat)
        running = 0
        task_cap = self.p.task_capacity
        for d in self.sim_drains:
            for task in d.tasks:
                if task.done_at is not None:
                    continue
                running += 1
                if task.start_at >= t + dt:
                    continue
                s = max(t, task.start_at)
                amount = task_cap * (t + dt - s)
                need = task.queue.total
                took = task.queue.take(min(amount, need), s, s + min(amount, need) / task_cap, self.lat)
                if task.queue.total <= 1e-9:
                    task.done_at = s + took / task_cap
            if d.status.handed_off_at is not None:
                subs = tuple(replace(sp, next=sp.end) if task.done_at is not None else sp
                             for sp, task in zip(d.status.sub_ranges, d.tasks))
                d.status = replace(d.status, sub_ranges=subs)
        for d in [d for d in self.sim_drains if d.tasks and all(task.done_at is not None for task in d.tasks)]:
            end = max(task.done_at or t for task in d.tasks)
            self.finished_task_s += sum((task.done_at or t) - task.launched for task in d.tasks)
            done = replace(d.status, phase=handoff.Phase.SUCCEEDED)
            self.last_status = replace(done, phase=handoff.Phase.VERIFIED, finished_at=end)
            self.sim_drains.remove(d)
        oldest = min(
            [q.oldest() for q in self.queues if q.oldest() is not None]
            + [task.queue.oldest() for task in self.tasks if task.queue.oldest() is not None],
            default=None,
        )
        age = 0.0 if oldest is None else max(0.0, t + dt - oldest)
        return age, running

    def remaining(self) -> float:
        return sum(q.total for q in self.queues) + sum(task.queue.total for task in self.tasks)


def _path(name: str) -> dict[str, Any]:
    """The hand-off path field, when the hand-off module has one."""
    value = getattr(handoff, name, None)
    return {"hand_off_path": value} if value is not None and "hand_off_path" in handoff.DrainStatus.__dataclass_fields__ else {}


def _take_before(q: _Queue, t_split: float) -> list[list[float]]:
    """Remove and return the records produced before ``t_split`` (the split offset) from the front."""
    out: list[list[float]] = []
    while q.segs and q.segs[0][0] < t_split - 1e-9:
        t0, t1, n = q.segs[0]
        if t1 <= t_split + 1e-9:
            out.append(q.segs.popleft())
            q.total -= n
            continue
        x = n * (t_split - t0) / (t1 - t0)
        out.append([t0, t_split, x])
        q.segs[0][0] = t_split
        q.segs[0][2] = n - x
        q.total -= x
        break
    if not q.segs:
        q.total = 0.0
    q.total = max(0.0, q.total)
    return out


def _run(trace: Trace, params: SimParams, initial: int, controller: Controller | None) -> PolicyResult:
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
            next_sample = t + 60.0
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
    for q in world.queues + [task.queue for task in world.tasks]:
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
        extra={"drains_by_partition": {str(k): v for k, v in sorted(world.drained.items())}} if world.drains else {},
    )


# -------------------------------------------------------------------------------- controllers
def lagpilot_controller(params: SimParams) -> Controller:
    """The operator's own decision step (lagpilot.step.step) on simulated offsets, every poll."""
    policies = step_mod.Policies.from_group_spec(params.group_spec(), params.model())
    state: dict[str, Any] = {"step": step_mod.StepState(), "next": -math.inf, "decisions": {}}

    def control(world: _World, t: float) -> None:
        if t < state["next"]:
            return
        state["next"] = t + params.poll_interval_s
        lags = world.observed_lags()
        ready = world.ready(t)
        owned = {i for block in range_assignment(params.partitions, ready) for i in block}
        parts = []
        for i in range(params.partitions):
            end = int(round(world.produced_by[i]))
            committed = max(0, end - int(round(lags[i])))
            parts.append(PartitionOffsets(i, 0, end, committed, world.queues[i].oldest()))
        snap = snapshot(t, parts, {i: params.capacity for i in owned})
        obs = step_mod.StepObservation(snap, len(world.pods), world.drain_statuses())
        out, state["step"] = step_mod.step(state["step"], obs, policies, t)
        reason = out.decision.reason
        state["decisions"][reason] = state["decisions"].get(reason, 0) + 1
        if out.hold is not None or not out.held:
            world.scale(out.replicas, t)
        if out.drain is not None:
            world.plan_drain(out.drain, t)

    control.state = state  # type: ignore[attr-defined]
    return control


def keda_controller(params: SimParams, cfg: keda_model.KedaConfig) -> Controller:
    box = {"state": keda_model.KedaState()}

    def control(world: _World, t: float) -> None:
        desired, box["state"] = keda_model.step(
            box["state"], t, len(world.pods), world.observed_lags(), params.partitions, cfg
        )
        world.scale(desired, t)

    return control


def keda_config(params: SimParams, lag_threshold: int = 10, **over: Any) -> keda_model.KedaConfig:
    """KEDA's defaults, except minReplicaCount = lagpilot's minReplicas (a fair comparison) and
    maxReplicaCount = lagpilot's cap; ``over`` sets any other field (cooldown_s, down_window_s...)."""
    over.setdefault("min_replicas", params.min_replicas)
    return keda_model.KedaConfig(lag_threshold=lag_threshold,
                                 max_replicas=params.max_replicas or keda_model.KedaConfig().max_replicas, **over)


def run_policy(trace: Trace, params: SimParams, policy: str, lag_threshold: int = 10,
               keda: keda_model.KedaConfig | None = None) -> PolicyResult:
    """One policy on one trace: ``lagpilot`` (the operator's step), ``static`` (partitions replicas),
    ``keda`` (KEDA defaults with minReplicaCount = minReplicas, or ``keda`` given), ``keda_min0``
    (KEDA exactly as shipped: minReplicaCount 0)."""
    if policy == "static":
        return _run(trace, params, params.partitions, None)
    if policy == "lagpilot":
        ctl = lagpilot_controller(params)
        res = _run(trace, params, max(1, params.min_replicas), ctl)
        res.extra["decision_reasons"] = dict(sorted(ctl.state["decisions"].items()))  # type: ignore[attr-defined]
        return res
    if policy in ("keda", "keda_min0"):
        cfg = keda or (keda_config(params, lag_threshold) if policy == "keda"
                       else keda_model.KedaConfig(lag_threshold=lag_threshold))
        res = _run(trace, params, max(1, cfg.min_replicas), keda_controller(params, cfg))
        res.extra.update({"lag_threshold": cfg.lag_threshold, "min_replica_count": cfg.min_replicas,
                          "cooldown_s": cfg.cooldown_s, "scale_down_window_s": cfg.down_window_s})
        return res
    raise ValueError(f"unknown policy {policy!r}")


def _better(a: PolicyResult, b: PolicyResult) -> bool:
    """KEDA at its best: most records within the SLA, then fewest violation minutes, then cost."""
    return _key(a) > _key(b)


def run_all(
    trace: Trace, params: SimParams, sweep: Sequence[int] = KEDA_SWEEP,
    windows: Sequence[float] = KEDA_WINDOWS, cooldowns: Sequence[float] = KEDA_COOLDOWNS, top: int = 2,
    policies: Sequence[str] = DEFAULT_POLICIES,
) -> tuple[dict[str, PolicyResult], list[dict[str, Any]]]:
    """The policies; ``keda_tuned`` is the best KEDA of a sweep (returned): every ``lagThreshold``
    at the default windows, then the ``top`` best thresholds with every scale-down window (and
    every cooldown when minReplicaCount is 0)."""
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
        res = results["keda"] if cfg == base and "keda" in results else run_policy(trace, params, "keda", keda=cfg)
        table.append({"lag_threshold": cfg.lag_threshold, "scale_down_window_s": cfg.down_window_s,
                      "cooldown_s": cfg.cooldown_s, "within_sla_fraction": round(res.within_sla_fraction, 6),
                      "violation_minutes": round(res.violation_minutes, 1),
                      "replica_minutes": round(res.replica_minutes, 1)})
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
            for cd in (cooldowns if base.min_replicas == 0 else (base.cooldown_s,)):
                cfg = replace(base, lag_threshold=thr, down_window_s=w, cooldown_s=cd)
                if cfg.down_window_s == base.down_window_s and cfg.cooldown_s == base.cooldown_s:
                    continue  # already run in the first stage
                run(cfg)
    best = max(runs, key=lambda cr: _key(cr[1]))[1]
    results["keda_tuned"] = best
    return results, table


def _key(r: PolicyResult) -> tuple[float, float, float]:
    return (round(r.within_sla_fraction, 6), -round(r.violation_minutes, 3), -r.replica_minutes)


# ------------------------------------------------------------------------------------- output
COLUMNS = ("within_sla_fraction", "p99_latency_s", "max_latency_s", "violation_minutes",
           "replica_minutes", "drain_task_minutes", "scale_events")


def format_table(results: dict[str, PolicyResult]) -> str:
    head = f"{'policy':<18}" + "".join(f"{c:>21}" for c in COLUMNS)
    lines = [head]
    for name, r in results.items():
        d = r.to_dict()
        cells = []
        for c in COLUMNS:
            v = d[c]
            cells.append(f"{v:>21.4f}" if c == "within_sla_fraction" else f"{v:>21}")
        label = name + (f" ({d['lag_threshold']})" if "lag_threshold" in d and name == "keda_tuned" else "")
        lines.append(f"{label:<18}" + "".join(cells))
    return "\n".join(lines)


def plot(results: dict[str, PolicyResult], params: SimParams, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    for name, r in results.items():
        hrs = [x / 3600 for x in r.series["t"]]
        axes[0].plot(hrs, r.series["age"], label=name, lw=1)
        axes[1].plot(hrs, r.series["lag"], label=name, lw=1)
        axes[2].plot(hrs, r.series["replicas"], label=name, lw=1)
        axes[3].plot(hrs, r.series["tasks"], label=name, lw=1)
    axes[0].axhline(params.sla_s, color="red", ls="--", lw=1, label=f"SLA {params.sla_s:.0f}s")
    axes[0].set_ylabel("oldest record age (s)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    axes[0].set_yscale("symlog", linthresh=max(1.0, params.sla_s / 10))
    axes[1].set_ylabel("unprocessed records")
    axes[1].set_yscale("symlog", linthresh=1000)
    axes[2].set_ylabel("replicas")
    axes[3].set_ylabel("drain tasks")
    axes[3].set_xlabel("hours")
    axes[0].legend(fontsize=8, ncol=5)
    fig.suptitle(f"{params.partitions} partitions, capacity {params.capacity}/s per consumer, SLA {params.sla_s:.0f}s")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    d = SimParams()
    ap = argparse.ArgumentParser(prog="lagpilot simulate", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=None, help="CSV t_s,produce_msgs_per_s[,partition_weights]")
    ap.add_argument("--generate", default=None, metavar="KIND",
                    help="write a trace of a family (flash, hot-partition, diurnal, step, backfill) and exit")
    ap.add_argument("--seed", type=int, default=0, help="seed for --generate")
    ap.add_argument("--out", default=None, help="file for --generate (default: stdout)")
    ap.add_argument("--suite", action="store_true",
                    help="run every family x --suite-seeds and print lagpilot vs static vs keda vs keda_tuned")
    ap.add_argument("--suite-seeds", default="0,1,2,3", help="comma-separated seeds for --suite")
    ap.add_argument("--suite-kinds", default=",".join(tracegen.KINDS), help="comma-separated kinds for --suite")
    ap.add_argument("--markdown", action="store_true", help="--suite: print a Markdown table")
    ap.add_argument("--partitions", type=int, default=None, help=f"(default {d.partitions}; --generate: the family's)")
    ap.add_argument("--capacity", type=float, default=None, help=f"records/s one consumer processes (default {d.capacity})")
    ap.add_argument("--sla-seconds", type=float, default=None, help=f"(default {d.sla_s})")
    ap.add_argument("--pod-start-seconds", type=float, default=d.pod_start_s)
    ap.add_argument("--drain-start-seconds", type=float, default=d.drain_start_s)
    ap.add_argument("--drain-task-capacity", type=float, default=None,
                    help="records/s of one drain task (default: --capacity)")
    ap.add_argument("--max-drain-tasks", "--max-tasks", type=int, default=d.max_drain_tasks, dest="max_drain_tasks")
    ap.add_argument("--split-factor", type=int, default=d.split_factor,
                    help="drain tasks per drained partition at most, on average (spec.drain.splitFactor)")
    ap.add_argument("--min-backlog-records", type=int, default=d.min_backlog_records)
    ap.add_argument("--min-replicas", type=int, default=d.min_replicas,
                    help="lagpilot's minReplicas, also KEDA's minReplicaCount in 'keda' and 'keda_tuned'")
    ap.add_argument("--handoff-pause-seconds", type=float, default=None,
                    help=f"the live group's pause per hand-off (default: one batch, {d.batch_timeout_s:g}s, on the "
                         f"consumer path; {QUIESCE_PAUSE_S:g}s with --handoff-quiesce)")
    ap.add_argument("--handoff-quiesce", action="store_true",
                    help="the quiesce fallback: replicas held at 0 for the pause, then restored (pods start again)")
    ap.add_argument("--concurrent-drains", type=int, default=d.concurrent_drains,
                    help="drains the executor runs side by side (today: 1)")
    ap.add_argument("--drain-assist", action="store_true",
                    help="the CR opts in to spec.drain.assistReplicas: run fewer replicas than the load needs when "
                         "the drains carrying their excess save replicas (docs/decision.md 'Drain-assisted replica count')")
    ap.add_argument("--drain-assist-min-saving", type=float, default=None,
                    help=f"with --drain-assist (implies it): the expected saving, in replicas, that makes it worth it "
                         f"(default {d.drain_assist_min_saving:g})")
    ap.add_argument("--no-drain-assist", action="store_true",
                    help="always size the group for the load, also in bursts (no drain-assisted count at all; "
                         "the default, as spec.drain.assistReplicas: false, uses it only while the capped group "
                         "cannot hold the load)")
    ap.add_argument("--scale-down-window-seconds", type=float, default=d.scale_down_window_s,
                    help="lagpilot's scale-down stabilization window (spec.scaling.behavior.scaleDown; KEDA keeps "
                         "the HPA's 300 s)")
    ap.add_argument("--step-seconds", type=float, default=d.step_s)
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                    help=f"comma-separated subset of {','.join(POLICIES)}")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--plot", default=None,
                    help="PNG path (default: lagpilot-simulate.png in the temp dir; not drawn with --json unless given)")
    ap.add_argument("--from-demo", default=None, metavar="SUMMARY_JSON",
                    help="predict a demo run: parameters from its summary.json (flags given explicitly win), "
                         "--trace its trace.csv; prints predicted vs measured (lagpilot.sim_compare)")
    return ap


def params_from_args(args: argparse.Namespace, family: tracegen.Family | None = None) -> SimParams:
    d = SimParams()

    def pick(v: Any, fam: Any, default: Any) -> Any:
        return v if v is not None else (fam if family is not None else default)

    return SimParams(
        partitions=pick(args.partitions, family.partitions if family else None, d.partitions),
        capacity=pick(args.capacity, family.capacity if family else None, d.capacity),
        sla_s=pick(args.sla_seconds, family.sla_s if family else None, d.sla_s),
        pod_start_s=args.pod_start_seconds,
        drain_start_s=args.drain_start_seconds,
        drain_task_capacity=args.drain_task_capacity,
        max_drain_tasks=args.max_drain_tasks,
        split_factor=args.split_factor,
        min_backlog_records=args.min_backlog_records,
        step_s=args.step_seconds,
        scale_down_window_s=args.scale_down_window_seconds,
        min_replicas=args.min_replicas,
        handoff_pause_s=args.handoff_pause_seconds,
        handoff_quiesce=args.handoff_quiesce,
        concurrent_drains=args.concurrent_drains,
        drain_assist=not args.no_drain_assist and (args.drain_assist or args.drain_assist_min_saving is not None),
        drain_assist_min_saving=(None if args.no_drain_assist
                                 else d.drain_assist_min_saving if args.drain_assist_min_saving is None
                                 else args.drain_assist_min_saving),
    )


def trace_from_rows(rows: Sequence[tuple[float, float, tuple[float, ...] | None]]) -> Trace:
    return Trace(tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows))


SUITE_SWEEP = (1, 10, 100, 1000, 10_000)


def run_suite(args: argparse.Namespace) -> int:
    """Every family x seed: lagpilot vs static vs keda vs keda_tuned (one row per trace)."""
    kinds = [k.strip() for k in args.suite_kinds.split(",") if k.strip()]
    seeds = [int(x) for x in args.suite_seeds.split(",") if x.strip()]
    rows = []
    for kind in kinds:
        fam = tracegen.SUITE[kind]
        params = params_from_args(args, fam)
        for seed in seeds:
            trace = trace_from_rows(tracegen.generate(kind, seed, params.partitions, params.capacity))
            res, _ = run_all(trace, params, sweep=SUITE_SWEEP, windows=(0.0, 300.0), top=1)
            lp = res["lagpilot"]
            row = {"kind": kind, "seed": seed, "partitions": params.partitions, "capacity": params.capacity,
                   "sla_s": params.sla_s}
            for name, r in res.items():
                row[name] = {"within_sla_fraction": round(r.within_sla_fraction, 4),
                             "p99_latency_s": round(r.p99_latency_s, 1),
                             "cost_minutes": round(r.replica_minutes + r.drain_task_minutes, 1),
                             "drains": r.drains}
            row["lagpilot_ok"] = (lp.within_sla_fraction >= 0.999
                                  and lp.replica_minutes + lp.drain_task_minutes <= res["keda"].replica_minutes)
            rows.append(row)
            if not args.json:
                print(_suite_line(row, args.markdown), flush=True)
    ok = sum(1 for r in rows if r["lagpilot_ok"])
    summary = f"lagpilot >= 0.999 within SLA at no more cost than keda on {ok}/{len(rows)} traces"
    if args.json:
        print(json.dumps({"suite": rows, "params": asdict(params_from_args(args, None)), "summary": summary}))
    else:
        print(summary)
    return 0


def _suite_line(row: dict[str, Any], markdown: bool) -> str:
    cells = [f"{row['kind']} s{row['seed']}"]
    for name in ("lagpilot", "static", "keda", "keda_tuned"):
        m = row.get(name)
        cells.append("-" if m is None else f"{m['within_sla_fraction']:.4f} / {m['cost_minutes']:.0f}")
    cells.append("yes" if row["lagpilot_ok"] else "no")
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return f"{cells[0]:<18}" + "".join(f"{c:>22}" for c in cells[1:])


def suite_header(markdown: bool) -> str:
    cols = ["trace", "lagpilot", "static", "keda", "keda_tuned", ">=0.999 & cost<=keda"]
    if markdown:
        return "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)
    return f"{cols[0]:<18}" + "".join(f"{c:>22}" for c in cols[1:])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_demo:  # sim-to-real for a `lagpilot demo` run (owned by the demo side: sim_compare)
        from lagpilot.sim_compare import main_from_demo

        if not args.trace:
            print("error: --from-demo needs --trace <out>/trace.csv", file=sys.stderr)
            return 2
        return main_from_demo(args, argv, parser)
    if args.generate:
        if args.generate not in tracegen.KINDS:
            print(f"error: unknown trace kind {args.generate!r}; choose from {', '.join(tracegen.KINDS)}", file=sys.stderr)
            return 2
        text = tracegen.to_csv(tracegen.generate(args.generate, args.seed, args.partitions, args.capacity))
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
            print(f"wrote {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if args.suite:
        if not args.json:
            print("within_sla_fraction / replica+drain-task minutes per policy")
            print(suite_header(args.markdown))
        return run_suite(args)
    if not args.trace:
        print("error: --trace FILE (or --generate KIND, or --suite) is required", file=sys.stderr)
        return 2
    params = params_from_args(args)
    if params.partitions < 1 or params.capacity <= 0 or params.sla_s <= 0 or params.step_s <= 0:
        print("error: partitions, capacity, sla and step must be positive", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: cannot read trace {args.trace}: {exc}", file=sys.stderr)
        return 2
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in POLICIES]
    if unknown:
        print(f"error: unknown policies {unknown}; choose from {POLICIES}", file=sys.stderr)
        return 2
    results, sweep = run_all(trace, params, policies=wanted)
    results = {k: results[k] for k in wanted if k in results}
    out = {
        "policies": {k: v.to_dict() for k, v in results.items()},
        "params": {k: v for k, v in asdict(params).items()},
        "keda_sweep": sweep,
    }
    if args.json:
        if args.plot:
            _plot_or_say(results, params, args.plot)
        print(json.dumps(out, sort_keys=False))
        return 0
    print(format_table(results))
    best = results.get("keda_tuned")
    if best is not None:
        print(f"keda_tuned: lagThreshold {best.extra.get('lag_threshold')}, scale-down window "
              f"{best.extra.get('scale_down_window_s'):g}s, cooldown {best.extra.get('cooldown_s'):g}s, "
              f"minReplicaCount {best.extra.get('min_replica_count')} (best of {len(sweep)} runs)")
    _plot_or_say(results, params, args.plot or os.path.join(tempfile.gettempdir(), "lagpilot-simulate.png"))
    return 0


def _plot_or_say(results: dict[str, PolicyResult], params: SimParams, path: str) -> None:
    try:
        plot(results, params, path)
        print(f"plot: {path}", file=sys.stderr)
    except ImportError:
        print("plot skipped: matplotlib not installed (pip install 'lagpilot[plot]')", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
