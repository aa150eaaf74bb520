"""The simulated topic, consumers and drains (:class:`_World`), advanced step by step.

The model (documented in docs/decision.md):
- fluid, per-partition FIFO queues of segments ``[t0, t1, n]`` (n records produced uniformly over
  [t0, t1]); latency is exact for that fluid model: a piece processed over [s, e] has latencies
  spread uniformly between ``s - t0`` and ``e - t1``;
- a consumer processes ``capacity`` records/s shared among the partitions it owns (range assignor,
  work-conserving: water-filling among non-empty partitions); new pods start after
  ``pod_start_s``; removed pods stop at once; rebalance pauses are not modelled;
- a drain takes a partition's whole queue at plan time (split = end), cuts it into tasks of equal
  size, each task starts ``drain_start_s`` after launch (``drain_warm_start_s`` when the warm
  runtime is Ready and not serving another drain) and processes its sub-range FIFO at
  ``drain_task_capacity``; at most ``concurrent_drains`` side by side and ``max_drain_tasks`` tasks;
- a busy drain (``busy_drains``) is its driver (lagpilot_runtime.drain.job.run): it holds the task
  slots it was launched with until it ends, also while it waits for a next part; a next split's
  sub-ranges start as soon as it is handed off, beside the pass under way (the driver reads parts
  while its passes run and starts each as one more Spark job), on those slots: each, in the order of
  its sub-range index (Spark's FIFO scheduler, a job's tasks in order), on the slot that frees first,
  no new task, no start-up, more sub-ranges than slots queue; it ends on the final part (decisions
  that take no next split with nothing left for the operator's hold, ``handoff.hand_back_hold``; the
  first one on a roll-over) or ``drain_part_wait_s`` after its last work without a part;
- the warm drain runtime (``warm_runtime`` always / on-demand): scaled as the decision step says,
  Ready ``drain_start_s`` after a scale-up (the same JVM and SparkSession a cold drain starts);
- observers (lagpilot and KEDA) see a partition's lag as its queue plus the records in flight in a
  batch (rate x ``batch_timeout_s``), like a batching consumer's committed offsets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from lagpilot.decide import handoff
from lagpilot.decide.runtime import RuntimeObservation
from lagpilot.sim.backlog import _Latency, _Queue, _split, _take_before
from lagpilot.sim.params import SimParams
from lagpilot.sim.trace import Trace


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
    partition: int = -1
    # a busy drain's task: its sub-ranges in the order it processes them, [index, records left]
    marks: list[list[float]] = field(default_factory=list)

    def took(self, amount: float) -> None:
        for m in self.marks:
            if amount <= 1e-12:
                break
            x = min(m[1], amount)
            m[1] -= x
            amount -= x


def _progress(sp: handoff.SubProgress, task: _Task) -> handoff.SubProgress:
    """A running task's sub-range with the records it processed so far (whole records)."""
    done = max(0, min(sp.end - sp.start, (sp.end - sp.start) - math.ceil(task.queue.total - 1e-6)))
    return replace(sp, next=sp.start + done, records=done)


@dataclass
class _SimDrain:
    """One drain: the hand-off's own status (handoff.DrainStatus, its Phase values) and its tasks."""

    status: handoff.DrainStatus
    tasks_by_partition: dict[int, int]
    planned_s: float
    handoff_at: float  # when the group has moved to the split (plan + pause)
    tasks: list[_Task] = field(default_factory=list)
    warm: bool = False  # launched on the warm runtime
    busy: bool = False  # a busy drain (issue 25 item 2): takes next splits, its tasks kept
    ext_tasks: dict[int, int] = field(default_factory=dict)  # the pending next split: partition -> tasks
    ext_planned_s: float = 0.0
    ext_handoff_at: float | None = None
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # sub-range index -> (partition, records)

    def has_work(self) -> bool:
        return any(x.queue.total > 1e-9 for x in self.tasks)


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
        self.drains_extended = 0  # next splits taken by busy drains (issue 25 item 2)
        self.drained: dict[int, int] = {}  # partition -> drains of it
        self.finished_task_s = 0.0  # drain tasks already finished: launch -> finish, summed
        self.scale_events = 0
        self.lat = _Latency(params.sla_s)
        # the warm drain runtime: replicas, when Ready, when last scaled up
        always = params.warm_runtime == "always"
        self.runtime_replicas = 1 if always else 0
        self.runtime_ready_at: float | None = -math.inf if always else None
        self.runtime_scaled_up_at: float | None = None
        # runtime pod-seconds serving no drain (drain_runtime_minutes): while it serves one, its driver
        # is that drain's, as a cold Job's driver is (neither is in drain_task_minutes)
        self.runtime_s = 0.0

    # observers ---------------------------------------------------------------------------
    def observed_lags(self) -> list[float]:
        return [q.total + r * self.p.batch_timeout_s for q, r in zip(self.queues, self.rates, strict=True)]

    def ready(self, t: float) -> int:
        return sum(1 for r in self.pods if r <= t)

    @property
    def drain_active(self) -> bool:
        return bool(self.sim_drains)

    @property
    def tasks(self) -> list[_Task]:
        return [task for d in self.sim_drains for task in d.tasks]

    def drain_queues(self) -> list[_Queue]:
        """Every drained record not processed yet (the tasks' queues)."""
        return [task.queue for task in self.tasks]

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

    def _runtime_ready(self, t: float) -> bool:
        return self.runtime_ready_at is not None and self.runtime_ready_at <= t

    @property
    def _runtime_serving(self) -> bool:
        """The runtime serves a drain (one launched warm whose tasks run)."""
        return any(d.warm for d in self.sim_drains if d.tasks)

    def runtime_observation(self, t: float) -> RuntimeObservation:
        return RuntimeObservation(self.runtime_replicas, self._runtime_ready(t), self.runtime_scaled_up_at)

    def scale_runtime(self, replicas: int, t: float) -> None:
        if replicas > 0 and self.runtime_replicas == 0:
            self.runtime_replicas, self.runtime_scaled_up_at = 1, t
            self.runtime_ready_at = t + self.p.drain_start_s
        elif replicas <= 0 and self.runtime_replicas > 0:
            self.runtime_replicas, self.runtime_ready_at = 0, None

    def _start_s(self, t: float) -> float:
        """A drain launched at ``t``: warm on a Ready runtime that serves no other drain, else cold."""
        warm = self._runtime_ready(t) and not self._runtime_serving
        return self.p.drain_warm_start_s if warm else self.p.drain_start_s

    def plan_drain(self, need: Any, t: float) -> None:
        """The executor's plan: split = the end offset now; the hand-off completes after the pause."""
        tasks = {r.partition: r.tasks for r in need.ranges if r.tasks > 0}
        if not tasks:
            return
        if getattr(need, "extension", False):
            self._plan_extension(tasks, t)
            return
        self.drains += 1
        prev_id = max(
            [d.status.id for d in self.sim_drains] + [self.last_status.id if self.last_status else 0]
        )
        ranges = tuple(handoff.PartitionRange(p, split=round(self.produced_by[p])) for p in sorted(tasks))
        # a group another quiesce emptied gets back what that drain will restore
        restore = max(
            [len(self.pods)]
            + [
                d.status.restore_replicas
                for d in self.sim_drains
                if d.status.handed_off_at is None and d.status.quiesced_at is not None
            ]
        )
        st = handoff.DrainStatus(
            id=prev_id + 1,
            phase=handoff.Phase.PLANNED,
            reason=need.reason,
            ranges=ranges,
            restore_replicas=restore,
            planned_at=t,
        )
        if self.p.handoff_quiesce:
            st = replace(st, quiesced_at=t, **_path("PATH_QUIESCE"))
            self.scale(0, t)  # the quiesce path empties the group; replicas come back at launch
        self.paused_until = max(self.paused_until, t + self.p.pause_s)
        st = replace(
            st,
            busy=self.p.busy_drains,
            slots=getattr(need, "slots", 0) if self.p.busy_drains else 0,
            slot_rate=getattr(need, "slot_rate", 0.0) if self.p.busy_drains else 0.0,
        )
        self.sim_drains.append(_SimDrain(st, tasks, t, t + self.p.pause_s, busy=self.p.busy_drains))

    def _plan_extension(self, tasks: dict[int, int], t: float) -> None:
        """A busy drain's next split (handoff.Extension): split = the end offset now, handed off after
        the pause like a first split; its records join the drain's tasks (no new start-up)."""
        live = [
            d
            for d in self.sim_drains
            if d.busy and d.ext_handoff_at is None and d.status.handed_off_at is not None
        ]
        if not live:
            return
        d = live[0]
        self.drains_extended += 1
        ranges = tuple(handoff.PartitionRange(p, split=round(self.produced_by[p])) for p in sorted(tasks))
        d.ext_tasks, d.ext_planned_s, d.ext_handoff_at = dict(tasks), t, t + self.p.pause_s
        d.status = replace(
            d.status, extension=handoff.Extension(d.status.round + 1, ranges, planned_at=t), idle_since=None
        )
        self.paused_until = max(self.paused_until, t + self.p.pause_s)

    def _extend(self, d: _SimDrain, t: float) -> None:
        """The next split handed off: each partition's new range cut into its sub-ranges (the tasks the
        planner gave it), which the driver starts at once with its next part, beside the pass under
        way (:meth:`_next_pass`). They run on the slots the driver holds: a next split adds no task
        and pays no start-up, more sub-ranges than slots queue (docs/drain.md "Busy drains": the
        driver's session keeps the parallelism it was launched with)."""
        assert d.status.extension is not None
        new: list[tuple[int, _Queue, int]] = []
        for p, n_tasks in sorted(d.ext_tasks.items()):
            segs = _take_before(self.queues[p], d.ext_planned_s)
            self.drained[p] = self.drained.get(p, 0) + 1
            for q in _split(segs, n_tasks):
                n = q.total
                if n <= 1e-9:
                    continue
                idx = self._next_index(d)
                d.sizes[idx] = (p, round(n))
                new.append((p, q, idx))
        ranges = {r.partition: r for r in d.status.ranges}
        for r in d.status.extension.ranges:
            ranges[r.partition] = r
        d.status = replace(
            d.status,
            extension=None,
            round=d.status.extension.round,
            ranges=tuple(ranges[p] for p in sorted(ranges)),
        )
        d.ext_tasks, d.ext_handoff_at = {}, None
        self._next_pass(d, new, t)
        self._busy_status(d)

    @staticmethod
    def _next_pass(d: _SimDrain, new: list[tuple[int, _Queue, int]], t: float) -> None:
        """The driver's pass over a part's new sub-ranges (one more Spark job, started at ``t`` beside
        the passes under way): each, in the order of its index (the job's task order; Spark's FIFO
        scheduler serves the earlier jobs' waiting tasks first), on the slot that frees first — the
        one with the least work queued (a slot runs its work in order)."""
        for p, q, idx in sorted(new, key=lambda x: x[2]):
            task = min(d.tasks, key=lambda x: x.queue.total)
            for seg in q.segs:
                task.queue.push(*seg)
            task.partition = p
            task.marks.append([idx, q.total])
            task.done_at = None
            task.start_at = max(task.start_at, t)

    @staticmethod
    def _next_index(d: _SimDrain) -> int:
        return max(d.sizes, default=-1) + 1

    def _busy_status(self, d: _SimDrain) -> None:
        subs = []
        for task in d.tasks:
            for idx, left in task.marks:
                if left > 1e-6:
                    p, n = d.sizes[int(idx)]
                    subs.append(handoff.SubProgress(p, int(idx), 0, n, max(0, n - math.ceil(left))))
        subs.sort(key=lambda x: (x.partition, x.index))
        d.status = replace(d.status, sub_ranges=tuple(subs))

    def release_idle(self, t: float) -> None:
        """Before a decision: nothing (a busy drain keeps its slots until it ends, ``settle``)."""

    def settle(self, t: float, rule: handoff.HandBack | None = None, rolled: bool = False) -> None:
        """After a decision: a busy drain that took no next split and has no work left gets the final
        part and ends (its partitions handed back: the group holds them) — at once when it rolls
        over (``rolled``: the decision's roll-over), else after the operator's hold (``rule``, the
        step's ``hand_back``: ``handoff.hand_back_hold``, the same function; its start kept in its
        status's ``idle_since`` like the operator's ``status.drain.idleSince``); every slot it held
        is paid until then. Until then it holds them all, also while it waits for a part (the
        driver's session keeps its parallelism; it ends by itself after ``drain_part_wait_s``:
        ``advance``)."""
        for d in list(self.sim_drains):
            if not d.busy or d.status.handed_off_at is None:
                continue
            if d.ext_handoff_at is None and not d.has_work():
                since = None if rolled else handoff.hand_back_hold(d.status, rule or handoff.HandBack(), t)
                if since is None:
                    self._end_busy(d, t)
                    continue
                d.status = replace(d.status, idle_since=since)
            self._busy_status(d)

    def _end_busy(self, d: _SimDrain, end: float) -> None:
        """The busy driver ends at ``end`` (the final part, or its wait for one is over): its slots
        are released, the drain verified."""
        self.finished_task_s += sum(max(end, task.done_at or end) - task.launched for task in d.tasks)
        d.tasks.clear()
        self.last_status = replace(d.status, phase=handoff.Phase.VERIFIED, finished_at=end)
        self.sim_drains.remove(d)

    def _hand_off(self, d: _SimDrain, t: float) -> None:
        """Handed off and launched: the range [start, split) leaves the group, tasks start."""
        subs = []
        start_s = self._start_s(t)
        d.warm = start_s < self.p.drain_start_s
        for p, n_tasks in sorted(d.tasks_by_partition.items()):
            segs = _take_before(self.queues[p], d.planned_s)
            self.drained[p] = self.drained.get(p, 0) + 1
            for k, q in enumerate(_split(segs, n_tasks)):
                task = _Task(q, t, t + start_s, partition=p)
                d.tasks.append(task)
                n = round(q.total)
                if d.busy:
                    idx = self._next_index(d)
                    d.sizes[idx] = (p, n)
                    task.marks.append([idx, q.total])
                subs.append(handoff.SubProgress(p, k, 0, n, 0))
        st = replace(
            d.status,
            phase=handoff.Phase.HANDED_OFF,
            handed_off_at=t,
            sub_ranges=tuple(subs),
            runtime="warm" if d.warm else "cold",
        )
        d.status = replace(st, phase=handoff.Phase.RUNNING, started_at=t, resumed_at=t, attempt=1)
        if d.busy:
            # the operator's launch records the Job's slots (handoff.job_slots): the driver holds them all
            d.status = replace(d.status, slots=handoff.job_slots(d.status, self.p.max_drain_tasks))
            d.tasks.extend(
                _Task(_Queue(), t, t + start_s, done_at=t) for _ in range(d.status.slots - len(d.tasks))
            )
            self._busy_status(d)
        if self.p.handoff_quiesce:
            self.scale(d.status.restore_replicas, t)

    # one step ----------------------------------------------------------------------------
    def advance(self, t: float, dt: float, rate: float, weights: list[float]) -> tuple[float, int]:
        """One step of ``dt`` from ``t``: the hand-offs due, the records produced, the group's and the
        drain tasks' work, the drains that ended; returns (the oldest record's age, tasks running)."""
        if not self._runtime_serving:
            self.runtime_s += self.runtime_replicas * dt  # idle: serving no drain (warming, cooldown)
        self._hand_offs_due(t, dt)
        self._produce(t, dt, rate, weights)
        self._consume(t, dt)
        running = 0
        for d in self.sim_drains:
            running += self._run_tasks(d, t, dt)
            self._record_progress(d)
        self._finish_drains(t, dt)
        return self._oldest_age(t + dt), running

    def _hand_offs_due(self, t: float, dt: float) -> None:
        for d in self.sim_drains:
            if d.status.handed_off_at is None and d.handoff_at <= t + dt:
                self._hand_off(d, max(t, d.handoff_at))
            if d.ext_handoff_at is not None and d.ext_handoff_at <= t + dt:
                self._extend(d, max(t, d.ext_handoff_at))

    def _produce(self, t: float, dt: float, rate: float, weights: list[float]) -> None:
        for i in range(self.p.partitions):
            r = rate * weights[i]
            self.rates[i] = r
            self.queues[i].push(t, t + dt, r * dt)
            self.produced_by[i] += r * dt

    def _consume(self, t: float, dt: float) -> None:
        """The ready consumers' work, each on its partitions (water-filled), less the hand-off pause."""
        ready = self.ready(t)
        work = max(0.0, dt - max(0.0, min(t + dt, self.paused_until) - t))  # the hand-off pause
        for owned in range_assignment(self.p.partitions, ready):
            budget = self.p.capacity * work
            if budget <= 0:
                break
            alloc = _water_fill(budget, [self.queues[i].total for i in owned])
            share = budget / len(owned)
            s0 = t + dt - work
            for i, a in zip(owned, alloc, strict=True):
                if a > 0:
                    self.queues[i].take(
                        a, s0, s0 + work * min(1.0, a / share) if share > 0 else t + dt, self.lat
                    )

    def _run_tasks(self, d: _SimDrain, t: float, dt: float) -> int:
        """The drain's started tasks work through their sub-ranges; returns the tasks not done."""
        running = 0
        task_cap = self.p.task_capacity
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
            task.took(took)
            if task.queue.total <= 1e-9:
                task.done_at = s + took / task_cap
        return running

    def _record_progress(self, d: _SimDrain) -> None:
        """The drain's status after its tasks' work: a done task's sub-range at its end."""
        if d.busy:
            if d.status.handed_off_at is not None:
                self._busy_status(d)
        elif d.status.handed_off_at is not None:
            # progress as the executor reads it from Kafka (decide.learn's drain start-up reads it)
            subs = tuple(
                replace(sp, next=sp.end, records=sp.end - sp.start)
                if task.done_at is not None
                else _progress(sp, task)
                for sp, task in zip(d.status.sub_ranges, d.tasks, strict=False)
            )
            d.status = replace(d.status, sub_ranges=subs)

    def _finish_drains(self, t: float, dt: float) -> None:
        """A drain (not busy) whose tasks are all done succeeds and is verified; a busy drain's driver
        with nothing left that got no part for ``drain_part_wait_s`` ends by itself."""
        for d in [
            d for d in self.sim_drains if d.busy and d.tasks and d.ext_handoff_at is None and not d.has_work()
        ]:
            idle_since = max(x.done_at if x.done_at is not None else t for x in d.tasks)
            if idle_since + self.p.drain_part_wait_s <= t + dt:
                self._end_busy(d, idle_since + self.p.drain_part_wait_s)
        for d in [
            d
            for d in self.sim_drains
            if not d.busy and d.tasks and all(task.done_at is not None for task in d.tasks)
        ]:
            end = max(task.done_at or t for task in d.tasks)
            self.finished_task_s += sum((task.done_at or t) - task.launched for task in d.tasks)
            done = replace(d.status, phase=handoff.Phase.SUCCEEDED)
            self.last_status = replace(done, phase=handoff.Phase.VERIFIED, finished_at=end)
            self.sim_drains.remove(d)

    def _oldest_age(self, now: float) -> float:
        """The age of the oldest record not processed yet, in the group's queues or a task's."""
        starts = [q.oldest() for q in [*self.queues, *self.drain_queues()]]
        oldest = min((s for s in starts if s is not None), default=None)
        return 0.0 if oldest is None else max(0.0, now - oldest)

    def remaining(self) -> float:
        return sum(q.total for q in self.queues) + sum(q.total for q in self.drain_queues())


def _path(name: str) -> dict[str, Any]:
    """The hand-off path field, when the hand-off module has one."""
    value = getattr(handoff, name, None)
    return (
        {"hand_off_path": value}
        if value is not None and "hand_off_path" in handoff.DrainStatus.__dataclass_fields__
        else {}
    )
