"""When does a backlog need a drain, of which partitions, and with how many tasks each (pure).

A consumer group never runs more consumers than partitions. When the group at its cap
(min(maxReplicas, partitions)) cannot meet the SLA target on its own, the backlog of the partitions
that need it is split off by offset range ``[start, split)`` and drained by Spark tasks while the
live group continues from ``split``.

The planner (docs/decision.md, "Drain need"):

- **Gate.** No drain when drains are disabled, capacity is unknown, the executor already runs as many
  drains as it can (``max_concurrent``; the executor today holds one drain per group), the task
  budget is used up, or the group at its cap meets the target alone (*stop draining as soon as the
  group alone meets the target*). After a drain ended, ``min_interval_s`` must pass before the next
  one, unless the group is overloaded (its live rates exceed what it can process: waiting only lets
  the backlog regrow).
- **Which partitions.** Worst first (dedicated catch-up time), until the partitions left to the group
  meet the target; a *regrowing* partition (its rate alone >= one consumer) is always a candidate,
  since one drain cannot fix it. Each needs ``lag >= min_backlog_records`` and must be helped by
  the drain: ``start_up + hand-off + lag / (tasks x task_capacity)`` shorter than the group's time.
- **When.** A drain is planned when one candidate is *due*: a non-regrowing partition the group
  cannot clear within the target is due at once; a regrowing one when its oldest record, had we
  waited one more poll, would reach ``hot_trigger_fraction x SLA`` by the end of its drain (batching
  the regrowth into fewer drains: each pays the start-up). Once due, every candidate goes into the
  same drain (the next one may not come before this one ended).
- **How many tasks.** Enough for the drain to finish within ``work_fraction x target`` (at least one
  per partition, at most the budget left), spread over the partitions in proportion to their
  backlog (largest remainder), at most one per batch of records (``min_records_per_task``): every
  sub-range finishes at about the same time, no partition is left without a task while another gets
  many. With a budget smaller than the partitions, the most urgent partitions get one task each and
  the rest wait for the next drain.
- **Follow-up drains.** With ``max_concurrent > 1`` (an executor that runs drains side by side;
  the operator's runs one), while the group is overloaded and one drain at a time could not hold
  the target in steady state (:func:`one_at_a_time_worst_s`), the range that regrew behind a
  running drain's split has its own rule: it is due when one more poll would make its worst
  record miss the target with the tasks free now (:func:`follow_up_due`); it waits for the tasks
  it wants (:func:`pipeline_tasks`) while its records can still make the SLA; it gets ``k`` tasks
  a partition from a steady-state model of
  drains staggered in time whose start-ups overlap (one task a partition when three may run side
  by side at a 90 s start-up), more only while its own worst record misses the target, never more
  than the budget left by the drains in flight (``busy_partitions``: partitions whose hand-off is
  still in progress are never planned twice). The burst's first drain is sized by the same model
  so that it leaves tasks for the follow-ups. With one drain at a time none of this applies: the
  next drain is planned by the rules above once the previous one is done (unchanged).

- **Drain-assisted replica count** (:func:`assisted_replicas`, used by ``scaling.decide``): when
  partition granularity makes the group sized for the load expensive, fewer replicas plus the
  drains that carry their excess are chosen if they save at least ``assist_min_saving`` replicas
  (expected cost, :func:`group_cost`); the planner is then called for the group at that count.

Anti-flapping: the gate above (a drain is never planned when the group alone meets the target, so
the answer does not alternate while the load is steady), the minimum backlog, the "drain must help"
rule, the minimum interval outside overload, and ranges are never re-planned (the hand-off owns a
range until its sub-ranges are done).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lagpilot.decide.projection import INF, PartitionLoad, clear_time_s, project

if TYPE_CHECKING:
    from lagpilot.spec import GroupSpec


@dataclass(frozen=True)
class DrainPolicy:
    """Drain knobs: the CR's ``spec.drain`` plus model figures the operator cannot read from the spec."""

    enabled: bool = True
    # the CR's optional cap spec.drain.splitFactor: a drain of n partitions runs at most
    # split_factor x n tasks (on average split_factor a partition); None (the default since issue
    # 25): no cap but the budget, each partition gets the tasks its backlog and rate need
    split_factor: int | None = None
    max_tasks: int = 16  # tasks at once across all drains of the group
    min_backlog_records: int = 10_000
    start_up_s: float = 20.0  # launch -> first record processed (Job pod + Spark start); measured 13-20 s
    handoff_s: float = 1.0  # the live group's pause during the hand-off (one batch on the consumer path)
    task_capacity: float | None = None  # records/s of one task; None: same as one consumer
    min_interval_s: float = 60.0  # between the end of one drain and the next plan (not when overloaded)
    hot_trigger_fraction: float = 0.5  # regrowing partition: drain when projected latency >= this x SLA
    poll_interval_s: float = 15.0  # the next chance to plan (a due check looks one poll ahead)
    work_fraction: float = 0.25  # a drain's records should take at most this x target after start-up
    min_records_per_task: int = 500  # one batch: a task with less is pure start-up cost
    max_concurrent: int = 1  # drains the executor runs side by side (today: one per group)
    # drain-assisted replica count: run fewer replicas than the load needs and let drains carry
    # the excess when that saves at least this many replicas (expected, drains' start-up included);
    # None: never (the group alone is sized for the load)
    assist_min_saving: float | None = 1.0
    # the CR's spec.drain.assistReplicas: True, the assisted count whenever it saves (drains may run
    # in steady state); False (the spec's default), only while the group at its cap cannot hold the
    # live rates anyway (a consumer over its capacity at every count: drains run in any case)
    assist_always: bool = False
    # issue 25 item 2: the executor keeps a drain busy across a burst (its tasks take the next split
    # of its partitions without a new start-up, :func:`extension_need`); False: every drain ends
    # with its range and the next one pays its start-up
    busy: bool = False

    @classmethod
    def from_group_spec(cls, spec: GroupSpec, **model: Any) -> DrainPolicy:
        """From the parsed spec (``spec.drain``, ``spec.batch``, ``spec.scaling``); ``model`` sets the
        figures that are not in the spec (start_up_s, handoff_s, task_capacity, max_concurrent...)."""
        d = spec.drain
        model.setdefault("poll_interval_s", spec.scaling.poll_interval_seconds)
        model.setdefault("min_records_per_task", spec.batch.max_records)
        model.setdefault("assist_always", d.assist_replicas)
        return cls(
            enabled=d.enabled and not d.cancel,
            split_factor=d.split_factor,
            max_tasks=d.max_tasks,
            min_backlog_records=d.min_backlog_records,
            **model,
        ).validate()

    @property
    def fixed_cost_s(self) -> float:
        """What a drain costs before its first record: start-up plus the group's hand-off pause."""
        return self.start_up_s + self.handoff_s

    @property
    def next_split(self) -> DrainPolicy:
        """The policy of the split that follows a drain in a burst: with busy drains (issue 25 item
        2) it is the running drain's next split, without a start-up (the hand-off pause only); else
        a new drain, with its own."""
        return replace(self, start_up_s=0.0) if self.busy else self

    def validate(self) -> DrainPolicy:
        if self.split_factor is not None and self.split_factor < 1:
            raise ValueError("drain.splitFactor must be >= 1")
        if self.max_tasks < 1:
            raise ValueError("drain.maxTasks must be >= 1")
        if self.min_backlog_records < 0:
            raise ValueError("drain.minBacklogRecords must be >= 0")
        if self.start_up_s < 0 or self.min_interval_s < 0 or self.handoff_s < 0:
            raise ValueError("drain start-up, hand-off and interval must be >= 0")
        if self.task_capacity is not None and self.task_capacity <= 0:
            raise ValueError("drain task capacity must be > 0")
        if self.max_concurrent < 1 or not 0 < self.work_fraction <= 1:
            raise ValueError("max_concurrent must be >= 1 and work_fraction in (0, 1]")
        if self.assist_min_saving is not None and self.assist_min_saving < 0:
            raise ValueError("assist_min_saving must be >= 0 (or None)")
        return self


@dataclass(frozen=True)
class DrainRange:
    """One partition's planned range: records ``[start, end)`` go to the drain, the group resumes at ``end``.

    Offsets are None when the caller gave loads without offsets (the simulator works on counts); the
    operator fixes them from the fresh offsets it writes into the plan. ``tasks`` is this partition's
    share of the task budget (the executor cuts the range into that many sub-ranges).
    """

    partition: int
    start: int | None
    end: int | None
    records: int
    tasks: int
    expected_s: float  # start-up + hand-off + records / (tasks x task capacity)
    group_would_need_s: float  # the same partition with a dedicated consumer (inf: never)
    regrowing: bool = False


@dataclass(frozen=True)
class DrainNeed:
    """The decision core's request for a drain; the drain state machine (handoff.py) acts on it."""

    ranges: tuple[DrainRange, ...]
    reason: str  # CamelCase: PartitionCapReached | HotPartition | RegrowingPartition
    message: str
    tasks: int = 0
    expected_s: float = 0.0
    notes: tuple[str, ...] = field(default=())
    follow_up: bool = False  # planned while another drain of the group is still running
    # the next split of the running busy drain (issue 25 item 2): no new start-up, its tasks kept
    extension: bool = False
    # a busy drain's first split: the task slots its Job is launched with (>= tasks; its
    # parallelism is fixed at launch and its next splits run on them: :func:`burst_slots`); 0: tasks
    slots: int = 0
    # a busy drain's first split: the records/s of one slot these ``slots`` were sized with (the
    # task capacity of the plan); recorded with them (``status.drain.slotRate``) so its next splits
    # and the roll-over (:func:`_outgrown`) judge the slots by the figure they were sized with
    slot_rate: float = 0.0

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(r.partition for r in self.ranges)

    @property
    def tasks_by_partition(self) -> dict[int, int]:
        return {r.partition: r.tasks for r in self.ranges}

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "message": self.message,
            "tasks": self.tasks,
            "expectedSeconds": _finite(self.expected_s),
            "followUp": self.follow_up,
            **({"extension": True} if self.extension else {}),
            **({"slots": self.slots} if self.slots else {}),
            **({"slotRate": round(self.slot_rate, 3)} if self.slots and self.slot_rate else {}),
            "ranges": [
                {
                    "partition": r.partition,
                    "start": r.start,
                    "end": r.end,
                    "records": r.records,
                    "tasks": r.tasks,
                    "expectedSeconds": _finite(r.expected_s),
                    "groupWouldNeedSeconds": _finite(r.group_would_need_s),
                    "regrowing": r.regrowing,
                }
                for r in self.ranges
            ],
        }


@dataclass(frozen=True)
class RollOver:
    """A busy drain whose slots the load outgrew (:func:`roll_over`): it takes no further split and
    ends at its next part boundary; the next drain is planned with the slots the load needs."""

    slots: int  # the slots the drain holds
    needed: int  # the slots a new drain's launch would hold now (:func:`launch_slots`)
    rate: float  # records/s of the partitions over their consumer's share
    regrowth: float  # the tasks their regrowth keeps busy (:func:`regrowth_tasks`, summed)

    @property
    def message(self) -> str:
        return (
            f"its {self.slots} slots cannot hold the burst: {self.rate:.0f} records/s on the partitions "
            f"over their share keep {self.regrowth:.1f} tasks busy; the next drain is planned with at "
            f"least {self.needed} slots"
        )


@dataclass(frozen=True)
class Lane:
    """One partition of a running busy drain (issue 25 item 2): the tasks working on its handed-off
    sub-ranges now and the records they still hold (0 and 0: its last range is done, its tasks free)."""

    partition: int
    tasks: int
    remaining: float


@dataclass(frozen=True)
class BusyDrain:
    """A running busy drain that may take a next split now (no split of it in hand-off): its
    partitions' lanes and the task slots its executor holds (``Lane.tasks`` of them busy)."""

    lanes: tuple[Lane, ...]
    slots: int
    # records/s of one slot, the figure its launch sized the slots with (``status.drain.slotRate``;
    # None: not recorded, the task capacity of the moment)
    slot_rate: float | None = None

    @property
    def by_partition(self) -> dict[int, Lane]:
        return {ld.partition: ld for ld in self.lanes}

    @property
    def free_slots(self) -> int:
        return max(0, self.slots - sum(ld.tasks for ld in self.lanes))


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 1)


def task_cap_of(policy: DrainPolicy, partitions: int, budget: int) -> int:
    """The most tasks a drain of ``partitions`` partitions may run: the ``budget`` left, and with the
    CR's optional ``splitFactor`` at most ``splitFactor x partitions`` (issue 25: without it a hot
    partition gets what its backlog needs, up to ``maxTasks``)."""
    if policy.split_factor is None:
        return max(0, budget)
    return max(0, min(budget, policy.split_factor * partitions))


def allocate_tasks(
    records: Sequence[float], budget: int, per_task_min: float = 1.0, weights: Sequence[float] | None = None
) -> list[int]:
    """Spread ``budget`` tasks over partitions in proportion to ``records`` (largest remainder), or
    to ``weights`` when given (the records still bound each partition's count).

    Every partition with records gets at least one task while the budget lasts (the first ones in
    the given order: callers pass the most urgent first); none gets more tasks than it has
    ``per_task_min`` records for. The sum never exceeds ``budget``.
    """
    n = len(records)
    out = [0] * n
    if budget <= 0 or n == 0:
        return out
    caps = [max(1, int(r // max(1.0, per_task_min))) if r > 0 else 0 for r in records]
    w = [float(x) for x in (weights if weights is not None else records)]
    live = [i for i in range(n) if records[i] > 0]
    for i in live[:budget]:
        out[i] = 1
    left = budget - sum(out)
    while left > 0:
        room = [i for i in live if out[i] > 0 and out[i] < caps[i]]
        total = sum(w[i] for i in room)
        if not room or total <= 0:
            break
        left -= _largest_remainder_round(out, room, w, caps, records, left, total)
    return out


def _largest_remainder_round(
    out: list[int],
    room: list[int],
    w: list[float],
    caps: list[int],
    records: Sequence[float],
    left: int,
    total: float,
) -> int:
    """One round of :func:`allocate_tasks` over the partitions with room: each up to its ideal share
    of everything handed out so far plus what is ``left`` when that fits, else one more task to the
    partition furthest below its share. Updates ``out``; returns the tasks handed out."""
    pool = sum(out[i] for i in room) + left
    ideal = {i: pool * w[i] / total for i in room}
    want = {i: min(caps[i], max(out[i], math.floor(ideal[i]))) for i in room}
    extra = sum(want[i] - out[i] for i in room)
    if 0 < extra <= left:
        for i in room:
            out[i] = want[i]
        return extra
    i = max(room, key=lambda j: (ideal[j] - out[j], w[j], records[j], -j))
    out[i] += 1
    return 1


def partition_need(
    lag: float,
    age: float,
    rate: float,
    share: float,
    target_s: float,
    policy: DrainPolicy,
    task_cap: float,
    high: int,
) -> int:
    """The tasks one partition's range needs (issue 25): the fewest ``k`` in ``[1, high]`` with which
    its oldest records meet ``target_s`` in this drain (``age`` old now, ``lag`` records at
    ``task_cap`` each, :func:`worst_latency_s`) **and** in the next one, which takes what arrives
    meanwhile (``rate - share`` records/s beyond what the group takes, over this drain and a poll)
    with as many tasks; else the ``k`` that makes the worse of the two shortest. Its backlog and its
    arrival rate over the time left: a hot partition at 6x a consumer needs most of the budget, a
    neighbour with a small backlog one task. Pure."""
    poll = 0.0 if policy.busy else policy.poll_interval_s  # a busy drain splits before its tasks run dry
    grow = max(0.0, rate - share)
    nxt_pol = policy.next_split

    def worst_of(k: int) -> float:
        now, duration = worst_latency_s([lag], [age], [k], policy, task_cap)
        nxt_lag = grow * (duration + poll)
        nxt_age = nxt_lag / rate if rate > 0 else 0.0
        nxt = worst_latency_s([nxt_lag], [nxt_age], [k], nxt_pol, task_cap)[0] if nxt_lag > 0 else 0.0
        return max(now, nxt)

    return _fewest_meeting(range(1, max(1, high) + 1), worst_of, target_s)


def burst_need(need: int, rate: float, share: float, task_cap: float, high: int) -> int:
    """The task slots one partition needs over the burst (issue 25 items 1 and 2), for a busy drain
    whose Job keeps the parallelism it is launched with (a next split adds no task): its ``need``
    for this split and the next one (:func:`partition_need`: its backlog and its arrival rate over
    the time the target leaves), and at least what holds its regrowth (``rate - share``) with
    ``BURST_SPARE`` to spare for the rate's noise and the splits' hand-off, within ``[1, high]``.

    Decided here (docs/decision.md "Busy drains: the slots"): not the backlog and all arrivals
    until the oldest record's deadline (``(lag + (rate - share) x (target - age)) / (task_cap x
    (target - age - start-up))``): on rolling-hot s100 at a 20 s start-up that asked 11-12 slots a
    burst for a partition whose regrowth keeps 5.4 busy, within 1.0000 but 5,974 minutes against
    KEDA's 4,318 (this rule: 7-8 slots); the backlog is cleared by the spare slots over the next
    splits, which :func:`partition_need` checks. Pure."""
    spare = math.ceil(regrowth_tasks(rate, share, task_cap) * BURST_SPARE - 1e-9)
    return max(1, min(max(1, high), max(need, spare)))


def regrowth_tasks(rate: float, share: float, task_cap: float) -> float:
    """The tasks one partition's regrowth keeps busy: what it brings beyond its consumer's
    ``share`` (``rate - share``, records/s) over one task's ``task_cap``. The one measure of a
    burst a busy drain's slots are sized by (:func:`burst_need`, :func:`burst_slots`) and judged
    by (:func:`_outgrown`), with one rate (:func:`_seen_rate`) and one task capacity (the figure
    the launch sized with, ``BusyDrain.slot_rate``). Pure."""
    return max(0.0, rate - share) / task_cap


def burst_slots(tasks: int, others: Iterable[float], share: float, task_cap: float, budget: int) -> int:
    """The slots a busy drain's first split asks its Job to hold: its ``tasks`` (each partition its
    :func:`burst_need`) and the regrowth of the partitions over their consumer's share it leaves
    to the group for now (``others``: their rates; they take a next split when due, on these
    slots: a next split adds no task), 10 % spare, when it keeps at least half a task busy (less
    is taken from the spare of the partitions in the split, :func:`_holds_first`: hot-partition s0
    kept a slot for a hundredth of a task for an hour, 375 drain-task minutes against 296),
    within the ``budget``. Pure."""
    extra = sum(regrowth_tasks(r, share, task_cap) for r in others) * 1.1
    keep = math.ceil(extra - 1e-9) if extra >= 0.5 else 0
    return max(0, min(budget, tasks + keep))


def _fewest_meeting(counts: range, worst_of: Callable[[int], float], target_s: float) -> int:
    """The first of ``counts`` whose worst latency (``worst_of``) is within ``target_s``; if none
    is, the one with the least (the first of near-equal ones). ``counts`` is not empty."""
    best, best_w = counts[0], INF
    for n in counts:
        worst = worst_of(n)
        if worst <= target_s:
            return n
        if worst < best_w - 1e-9:
            best, best_w = n, worst
    return best


def allocate_by_need(
    records: Sequence[float], needs: Sequence[int], budget: int, per_task_min: float = 1.0
) -> list[int]:
    """``budget`` tasks over partitions: each its ``needs`` (:func:`partition_need`, bounded by one
    task per ``per_task_min`` records) when they fit, the rest one at a time to the partition whose
    sub-ranges are longest (records per task: every range then finishes about together); when the
    needs do not fit, in proportion to the backlog (:func:`allocate_tasks`: the first ones -- the
    most urgent -- at least one; in proportion to the needs instead, flash s105 at a 90 s start-up
    fell from 0.99899 to 0.99689 within the SLA). Pure."""
    n = len(records)
    caps = [max(1, int(r // max(1.0, per_task_min))) if r > 0 else 0 for r in records]
    floors = [min(max(1, nd), c) for nd, c in zip(needs, caps, strict=False)]
    if sum(floors) > budget:
        # not every need fits: every range finishes about together (in proportion to the backlog)
        return allocate_tasks(records, budget, per_task_min)
    out = list(floors)
    left = budget - sum(out)
    while left > 0:
        room = [i for i in range(n) if 0 < out[i] < caps[i]]
        if not room:
            break
        i = max(room, key=lambda j: (records[j] / out[j], -j))
        out[i] += 1
        left -= 1
    return out


def drain_need(
    loads: Sequence[PartitionLoad],
    capacity: float | None,
    *,
    group_replicas: int,
    target_s: float,
    sla_s: float,
    policy: DrainPolicy,
    now_s: float,
    drain_active: bool = False,
    last_drain_end_s: float | None = None,
    oldest_age_s: Mapping[int, float] | None = None,
    drains_in_flight: int | None = None,
    tasks_in_flight: int = 0,
    busy_partitions: Sequence[int] = (),
    retention_s: float | None = None,
    busy_drain: BusyDrain | None = None,
) -> DrainNeed | None:
    """Which partitions to drain now with how many tasks each, or None (see the module doc).

    ``group_replicas`` is the group's cap (min(maxReplicas, partitions)). ``drains_in_flight``
    (default: 1 if ``drain_active`` else 0) drains not finished yet, holding ``tasks_in_flight``
    tasks; ``busy_partitions`` are partitions whose hand-off is not done (never planned twice).
    ``retention_s`` (the topic's retention.ms / 1000, best effort; None: unknown or infinite): a
    partition whose oldest record expires within ``target_s`` (age + target >= retention) is planned
    before every other one, whatever its age rank (see :func:`expiring_first`).

    The named steps, in order (docs/decision.md, "Drain need"); each returns None when there is no
    drain: a running busy drain takes its next split instead (:func:`extension_need`) -> gate (the
    drains and tasks in flight, the group alone, the minimum interval) -> select the candidates and
    whether one is due -> a follow-up's own timing (drains side by side) -> order them (the small
    joiners, the oldest first, the expiring first) -> size and spread the tasks, leaving out the
    partitions the drain cannot help -> the need, with its reason and message.
    """
    if not policy.enabled or capacity is None or capacity <= 0 or not loads:
        return None
    if policy.busy and busy_drain is not None:
        # a busy drain runs and may take a next split: it does, or nothing (its partitions are
        # handed back as their ranges end: the group alone meets the target)
        return extension_need(
            loads,
            capacity,
            busy_drain,
            group_replicas=group_replicas,
            target_s=target_s,
            policy=policy,
            sla_s=sla_s,
            oldest_age_s=oldest_age_s,
        )
    in_flight = drains_in_flight if drains_in_flight is not None else (1 if drain_active else 0)
    x = _gate(
        loads,
        capacity,
        group_replicas=group_replicas,
        target_s=target_s,
        sla_s=sla_s,
        policy=policy,
        now_s=now_s,
        in_flight=in_flight,
        last_drain_end_s=last_drain_end_s,
        oldest_age_s=oldest_age_s,
        tasks_in_flight=tasks_in_flight,
        busy_partitions=busy_partitions,
        retention_s=retention_s,
    )
    if x is None:
        return None
    notes: list[str] = []
    picked = _select(x, notes)
    if not picked.candidates:
        return None
    if not (picked.due or _follow_up_due_now(x, picked.candidates, notes)):
        notes.append("regrowing partitions not yet due")
        return None
    chosen = _spread(x, _ordered(x, picked, notes), notes)
    if not any(r.records >= x.policy.min_backlog_records for r in chosen):
        # the partitions below minBacklogRecords only join a drain due for a larger one: with that
        # one left out (no faster than the group, or no task left), there is no drain to join
        return None
    need = _need(
        chosen,
        target_s=target_s,
        group_replicas=x.group_replicas,
        notes=notes,
        follow_up=in_flight > 0,
        extension=False,
    )
    if not policy.busy:
        return need
    inside = set(need.partitions)
    others = [
        _seen_rate(ld, _age(ld, x.ages), policy.poll_interval_s)
        for ld in loads
        if ld.partition not in inside and ld.partition not in x.busy
    ]
    slots = burst_slots(need.tasks, others, x.share, x.task_cap, x.budget)
    return replace(need, slots=max(need.tasks, slots), slot_rate=x.task_cap)


@dataclass(frozen=True)
class _Setting:
    """What every step of a drain plan reads: the inputs and the figures derived from them once the
    gate let a drain through."""

    loads: Sequence[PartitionLoad]
    capacity: float
    policy: DrainPolicy
    group_replicas: int  # the group's cap, within [1, partitions]
    target_s: float
    sla_s: float
    in_flight: int  # drains not finished yet
    budget: int  # tasks left of maxTasks
    overloaded: bool  # the capped group's live rates exceed what it can process
    share: float  # records/s one consumer gives each of its partitions at the cap
    task_cap: float  # records/s of one drain task
    ages: Mapping[int, float]
    busy: frozenset[int]  # hand-off not done: never planned twice
    regrowing: frozenset[int]  # a rate alone >= one consumer
    pipelined: bool  # follow-ups have their own timing and sizing (drains side by side)
    retention_s: float | None

    def plans_follow_up(self, ld: PartitionLoad) -> bool:
        """A follow-up of pipelined drains: due by its own rule (:func:`follow_up_due`), not the trigger."""
        return self.pipelined and self.in_flight > 0 and (ld.partition in self.regrowing or self.overloaded)


def _gate(
    loads: Sequence[PartitionLoad],
    capacity: float,
    *,
    group_replicas: int,
    target_s: float,
    sla_s: float,
    policy: DrainPolicy,
    now_s: float,
    in_flight: int,
    last_drain_end_s: float | None,
    oldest_age_s: Mapping[int, float] | None,
    tasks_in_flight: int,
    busy_partitions: Sequence[int],
    retention_s: float | None,
) -> _Setting | None:
    """No drain when the executor runs as many drains as it can, the task budget is used up, the group
    at its cap meets the target alone, or (outside overload) the last drain ended less than
    ``min_interval_s`` ago; else the setting the other steps read."""
    if in_flight >= policy.max_concurrent:
        return None
    budget = policy.max_tasks - max(0, tasks_in_flight)
    if budget <= 0:
        return None
    group_replicas = max(1, min(group_replicas, len(loads)))
    group = project(loads, group_replicas, capacity)
    if group.catch_up_s <= target_s:
        return None  # the group alone meets the target: no drain (and no more drains)
    overloaded = group.utilization >= 1.0
    if not overloaded and last_drain_end_s is not None and now_s - last_drain_end_s < policy.min_interval_s:
        return None
    ages = dict(oldest_age_s or {})
    share = capacity / group.per_consumer_partitions
    # pipelined drains (an executor running several side by side) while the group is overloaded
    # (the load regrows behind every split) and one drain at a time could not hold the target in
    # steady state (one_at_a_time_worst_s): follow-ups have their own timing and sizing
    # (follow_up_due, pipeline_tasks). Otherwise (a hot partition carried by drains, a mild
    # excess) the rules above, like one drain at a time (max_concurrent 1): nothing below changes
    pipelined = (
        policy.max_concurrent > 1
        and overloaded
        and one_at_a_time_worst_s(loads, ages, share, policy, capacity) > target_s
    )
    return _Setting(
        loads=loads,
        capacity=capacity,
        policy=policy,
        group_replicas=group_replicas,
        target_s=target_s,
        sla_s=sla_s,
        in_flight=in_flight,
        budget=budget,
        overloaded=overloaded,
        share=share,
        task_cap=policy.task_capacity or capacity,
        ages=ages,
        busy=frozenset(busy_partitions),
        regrowing=frozenset(ld.partition for ld in loads if ld.rate >= capacity),
        pipelined=pipelined,
        retention_s=retention_s,
    )


@dataclass(frozen=True)
class _Picked:
    """The select step's answer: the partitions a drain would take, in the order they were found."""

    candidates: list[PartitionLoad]
    small: list[PartitionLoad]  # overloaded, below min_backlog_records: only with a due drain
    due: bool  # one candidate cannot wait for the next poll


def _select(x: _Setting, notes: list[str]) -> _Picked:
    """Worst first (dedicated catch-up time), the partitions a drain would take until those left to
    the group meet the target, each with enough backlog and helped by the drain; and whether one is
    due now."""
    p, cap = x.policy, x.capacity
    ordered = sorted(x.loads, key=lambda ld: (-clear_time_s(ld.lag, ld.rate, cap), -ld.lag, ld.partition))
    remaining = {ld.partition: ld for ld in x.loads}
    candidates: list[PartitionLoad] = []
    small: list[PartitionLoad] = []
    due = False
    over_lag = _over_lag(x)
    for ld in ordered:
        if ld.partition in x.busy or not _needed(x, ld, remaining.values()):
            continue
        if ld.lag <= 0 or ld.lag < p.min_backlog_records:
            if x.overloaded and ld.rate > x.share and ld.lag >= p.min_records_per_task:
                small.append(ld)  # joins a drain that is due anyway (it regrows like the others)
            continue
        # the fastest this partition could be drained (its fair share of the budget is at most all of it)
        best = p.fixed_cost_s + ld.lag / (task_cap_of(p, len(x.loads), x.budget) * x.task_cap)
        if not best < clear_time_s(ld.lag, ld.rate, cap):
            notes.append(f"partition {ld.partition}: drain ({best:.0f}s) no faster than the group")
            continue
        candidates.append(ld)
        remaining[ld.partition] = PartitionLoad(ld.partition, 0.0, ld.rate, ld.start_offset, ld.end_offset)
        due = _due(x, ld, over_lag) or due
    return _Picked(candidates, small, due)


def _needed(x: _Setting, ld: PartitionLoad, remaining: Iterable[PartitionLoad]) -> bool:
    """A regrowing partition always (one drain cannot fix it), every one when the group is
    overloaded, else one while the partitions left to the group do not meet the target."""
    return (
        ld.partition in x.regrowing
        or x.overloaded
        or not _rest_ok(remaining, x.regrowing, x.group_replicas, x.capacity, x.target_s)
    )


def _over_lag(x: _Setting) -> float:
    """The backlog of the partitions that regrow behind a split (over their consumer's share)."""
    return sum(max(0.0, ld.lag) for ld in x.loads if ld.rate > x.share and ld.partition not in x.busy)


def _due_tasks(x: _Setting, ld: PartitionLoad, over_lag: float) -> int:
    """The tasks a regrowing partition's drain would get, for its due rule: splitFactor when the CR
    caps it, else its share of the budget in proportion to its backlog among the partitions that
    regrow behind a split (:func:`_over_lag`): a hot partition with most of the backlog takes most
    of it, a flash burst spreads it evenly."""
    if x.policy.split_factor is not None:
        return max(1, task_cap_of(x.policy, 1, x.budget))
    frac = min(1.0, max(0.0, ld.lag) / over_lag) if over_lag > 0 else 1.0
    return max(1, int(x.budget * frac))


def _due(x: _Setting, ld: PartitionLoad, over_lag: float) -> bool:
    """Is this candidate due now? A non-regrowing partition the group cannot clear within the target
    at once (every poll waited is lost); a regrowing one when one more poll would bring its oldest
    record to ``hot_trigger_fraction x SLA`` by the end of its drain (fewer drains, each pays the
    start-up); one whose oldest record expires within the target at once. A follow-up of pipelined
    drains has its own rule (:func:`_follow_up_due_now`)."""
    p = x.policy
    due = False
    if x.plans_follow_up(ld):
        pass
    elif ld.partition in x.regrowing or x.overloaded:
        lag_later = ld.lag + max(0.0, ld.rate - x.share) * p.poll_interval_s
        finish = p.fixed_cost_s + lag_later / (_due_tasks(x, ld, over_lag) * x.task_cap)
        due = _age(ld, x.ages) + p.poll_interval_s + finish >= p.hot_trigger_fraction * x.sla_s
    else:
        due = True
    # waiting for the regrowing trigger would let retention delete the range
    return due or _expires_soon(ld, x.ages, x.retention_s, x.target_s)


def _follow_up_due_now(x: _Setting, candidates: list[PartitionLoad], notes: list[str]) -> bool:
    """A follow-up of pipelined drains (:func:`follow_up_due`): due when one more poll would make its
    worst record miss the target, unless the tasks it wants are still held by the drains in flight
    while its records can still make the SLA (a follow-up that leaves partitions out, or gives them
    too few tasks, doubles their next range and takes a drain slot)."""
    if not (x.pipelined and x.in_flight > 0):
        return False
    p, cap, budget = x.policy, x.capacity, x.budget
    planned = pipeline_tasks(candidates, x.ages, budget, x.share, x.target_s, p, cap)
    due = follow_up_due(candidates, x.ages, planned or budget, x.share, x.target_s, p, cap)
    wanted = pipeline_tasks(candidates, x.ages, p.max_tasks, x.share, x.target_s, p, cap)
    if (
        due
        and wanted is not None
        and budget < wanted
        and not follow_up_due(candidates, x.ages, planned or budget, x.share, x.sla_s, p, cap)
    ):
        notes.append(f"follow-up waits for tasks ({budget} free of {wanted} wanted)")
        return False
    return due


def _ordered(x: _Setting, picked: _Picked, notes: list[str]) -> list[PartitionLoad]:
    """The due drain's partitions in urgency order (for a budget smaller than the partitions): the
    small joiners added, the oldest record first, those retention would delete first of all."""
    # in a burst every partition over its consumer's share regrows: one left out for the minimum
    # backlog (an anti-flap rule for *starting* a drain) would wait a whole drain and then be the
    # largest range of the next one. It joins the drain that is due anyway (one batch at least).
    candidates = list(picked.candidates)
    for ld in picked.small:
        candidates.append(ld)
        notes.append(f"partition {ld.partition}: below minBacklogRecords, joins the due drain (overloaded)")
    candidates.sort(key=lambda ld: (-_age(ld, x.ages), -ld.lag, ld.partition))
    candidates = expiring_first(candidates, x.ages, x.retention_s, x.target_s)
    if (
        x.retention_s is not None
        and candidates
        and _expires_soon(candidates[0], x.ages, x.retention_s, x.target_s)
    ):
        notes.append(
            f"partition {candidates[0].partition}: oldest record expires within the target: planned first"
        )
    return candidates


def _size(x: _Setting, candidates: list[PartitionLoad]) -> tuple[int, int | None]:
    """The drain's task count for these candidates and the pipeline's count, if any (drains side by
    side): enough for its records to take at most the time the target leaves (this drain's oldest
    record and the next drain's), and for each range to beat the group; the pipeline's own count;
    else, while the backlog regrows behind the split, the count with which this drain and the next
    one meet the target (:func:`tasks_for_two_drains`)."""
    p, budget = x.policy, x.budget
    n = max(
        min(len(candidates), budget),
        min(
            max(_tasks_for_time(x, candidates), _tasks_to_help(x, candidates)),
            task_cap_of(p, len(candidates), budget),
        ),
    )
    piped = (
        pipeline_tasks(candidates, x.ages, budget, x.share, x.target_s, p, x.capacity)
        if x.pipelined
        else None
    )
    if piped is not None:
        return piped, piped
    if x.overloaded or any(ld.partition in x.regrowing for ld in candidates):
        # the backlog regrows behind the split while this drain runs, and (one drain at a time)
        # the next drain can start only when this one ended: size this one so that both meet
        # the target, else so that the worse of the two is as short as the budget allows
        n = tasks_for_two_drains(
            candidates, x.ages, n, task_cap_of(p, len(candidates), budget), x.share, x.target_s, p, x.capacity
        )
    return n, None


def _tasks_for_time(x: _Setting, candidates: list[PartitionLoad]) -> int:
    """Tasks for the drain's records to take at most the time they may (fewer tasks, fewer start-ups):
    its oldest record must still make the target (oldest + fixed cost + work <= target), and so must
    the next drain's (one at a time: it can start only when this one ended). Behind the split the
    group's oldest record ages at g = (rate - share) / rate per second (1: the group processes
    nothing of it; 0: it keeps up), so g x (fixed + work) + poll + fixed + work <= target. At least
    work_fraction x target (the earlier rule, never more tasks than it gave)."""
    p, target_s = x.policy, x.target_s
    total = sum(ld.lag for ld in candidates)
    oldest = max((x.ages.get(ld.partition, 0.0) for ld in candidates), default=0.0)
    g = max((max(0.0, ld.rate - x.share) / ld.rate if ld.rate > 0 else 0.0) for ld in candidates)
    follow = (target_s - p.poll_interval_s - p.fixed_cost_s * (1 + g)) / (1 + g)
    room = max(
        p.poll_interval_s, min(max(p.work_fraction * target_s, follow), target_s - oldest - p.fixed_cost_s)
    )
    return math.ceil(total / (x.task_cap * room))


def _tasks_to_help(x: _Setting, candidates: list[PartitionLoad]) -> int:
    """Tasks for each range to beat the group ("the drain must help", checked per range later)."""
    helps = 0
    for ld in candidates:
        spare = clear_time_s(ld.lag, ld.rate, x.capacity) - x.policy.fixed_cost_s
        helps += 1 if not math.isfinite(spare) else math.floor(ld.lag / (x.task_cap * max(spare, 1e-9))) + 1
    return helps


def _spread(x: _Setting, candidates: list[PartitionLoad], notes: list[str]) -> list[DrainRange]:
    """The ranges with their tasks where the backlog is (issue 25): each partition's own need (its
    backlog, age and arrival rate over the time left, :func:`partition_need`), the drain's count
    raised to their sum within the budget; a partition the drain cannot help is left out and the
    drain sized again without it (its tasks go to the others)."""
    n, piped = _size(x, candidates)
    high = task_cap_of(x.policy, len(candidates), x.budget)
    chosen: list[DrainRange] = []
    left_out: set[int] = set()
    while True:
        live = [ld for ld in candidates if ld.partition not in left_out]
        if not live:
            break
        if left_out:  # sized again without the partitions left out (their "drain must help" tasks)
            n, piped = _size(x, live)
        alloc = _allocation(x, live, n, piped is not None, high)
        chosen, dropped = [], False
        for ld, tasks in zip(live, alloc, strict=True):
            if tasks <= 0:
                notes.append(f"partition {ld.partition}: task budget exhausted")
                continue
            r = _range(
                ld,
                tasks,
                x.policy.fixed_cost_s,
                x.task_cap,
                x.capacity,
                regrowing=ld.partition in x.regrowing,
            )
            if not r.expected_s < r.group_would_need_s:
                notes.append(
                    f"partition {ld.partition}: {tasks} tasks ({r.expected_s:.0f}s) no faster than the group"
                )
                left_out.add(ld.partition)
                dropped = True
                continue
            chosen.append(r)
        if not dropped:
            break
    return chosen


def _allocation(x: _Setting, live: list[PartitionLoad], n: int, piped: bool, high: int) -> list[int]:
    """``n`` tasks over ``live``: drains side by side keep the pipeline's count and spread; else each
    partition's need (a busy drain's at least what holds its regrowth from split to split: a task
    added later pays the start-up), the count raised to their sum within the budget."""
    p = x.policy
    if piped:
        return allocate_tasks([ld.lag for ld in live], n, per_task_min=p.min_records_per_task)
    rates = [_seen_rate(ld, _age(ld, x.ages), p.poll_interval_s) for ld in live]
    needs = [
        partition_need(ld.lag, _age(ld, x.ages), rate, x.share, x.target_s, p, x.task_cap, high)
        for ld, rate in zip(live, rates, strict=True)
    ]
    if p.busy:  # the Job keeps the slots it is launched with: each partition its need over the burst
        needs = [burst_need(nd, r, x.share, x.task_cap, high) for nd, r in zip(needs, rates, strict=True)]
    m = max(min(len(live), x.budget), min(max(n, sum(needs)), task_cap_of(p, len(live), x.budget)))
    alloc = allocate_by_need([ld.lag for ld in live], needs, m, per_task_min=p.min_records_per_task)
    if p.busy:
        return shortest_lanes_only([ld.lag for ld in live], alloc, needs)
    return alloc


def shortest_lanes_only(records: Sequence[float], alloc: Sequence[int], needs: Sequence[int]) -> list[int]:
    """A busy drain's launch (issue 25): each partition at most the tasks that keep its sub-ranges
    from being the drain's longest lane (``records / tasks``, the longest of ``alloc``), and never
    fewer than its ``needs`` (its :func:`burst_need`: the slots that hold its regrowth) nor more than
    ``alloc``. A busy drain pays every slot it is launched with until its last lane ends (the
    driver keeps its parallelism), so a task beyond that is a slot idle while the longest lane
    works, not a faster drain; the drain's longest lane, hence its end, is unchanged. Decided here
    (step s105 at a 20 s start-up: three equal backlogs of ~38 k records launched with 4 slots, two
    on p0, whose lane ended in half the time; 21 drains paid 401 task-minutes for 278 of work).
    A cold drain pays a task only until it ends (its allocation is unchanged). Pure."""
    live = [(r, a) for r, a in zip(records, alloc, strict=True) if a > 0]
    if not live:
        return list(alloc)
    longest = max(r / a for r, a in live)
    return [
        a if a <= 0 else min(a, max(nd, math.ceil(r / longest - 1e-9)))
        for r, a, nd in zip(records, alloc, needs, strict=True)
    ]


def _range(
    ld: PartitionLoad, tasks: int, fixed_s: float, task_cap: float, capacity: float, *, regrowing: bool
) -> DrainRange:
    """One partition's range with ``tasks`` tasks, ``fixed_s`` before its first record."""
    return DrainRange(
        partition=ld.partition,
        start=ld.start_offset,
        end=ld.end_offset,
        records=int(ld.lag),
        tasks=tasks,
        expected_s=fixed_s + ld.lag / (tasks * task_cap),
        group_would_need_s=clear_time_s(ld.lag, ld.rate, capacity),
        regrowing=regrowing,
    )


def _reason(chosen: Sequence[DrainRange], target_s: float) -> str:
    """A partition whose rate alone is one consumer's, else one the group cannot clear in time, else
    the group's cap."""
    if any(r.regrowing for r in chosen):
        return "RegrowingPartition"
    if any(r.group_would_need_s > target_s for r in chosen):
        return "HotPartition"
    return "PartitionCapReached"


def _need(
    chosen: list[DrainRange],
    *,
    target_s: float,
    group_replicas: int,
    notes: list[str],
    follow_up: bool,
    extension: bool,
) -> DrainNeed:
    """The need for these ranges (sorted by partition), with its reason and message."""
    chosen = sorted(chosen, key=lambda r: r.partition)
    parts = ", ".join(f"p{r.partition}:{r.records}/{r.tasks}" for r in chosen)
    expected_s = max(r.expected_s for r in chosen)
    tasks_total = sum(r.tasks for r in chosen)
    if extension:
        message = (
            f"busy drain: next split {parts} (records/tasks) in {tasks_total} tasks without a new start-up, "
            f"expected {expected_s:.0f}s; group capped at {group_replicas} cannot meet {target_s:.0f}s"
        )
    else:
        message = (
            f"drain {parts} (records/tasks) in {tasks_total} tasks, expected {expected_s:.0f}s; "
            f"group capped at {group_replicas} cannot meet {target_s:.0f}s"
        )
    return DrainNeed(
        ranges=tuple(chosen),
        reason=_reason(chosen, target_s),
        message=message,
        tasks=tasks_total,
        expected_s=expected_s,
        notes=tuple(notes),
        follow_up=follow_up,
        extension=extension,
    )


def extension_need(
    loads: Sequence[PartitionLoad],
    capacity: float,
    busy: BusyDrain,
    *,
    group_replicas: int,
    target_s: float,
    policy: DrainPolicy,
    sla_s: float | None = None,
    oldest_age_s: Mapping[int, float] | None = None,
) -> DrainNeed | None:
    """The next split of a running busy drain (issue 25 item 2), or None. Pure.

    - **While.** Only while the capped group alone cannot meet the target (the same gate as a first
      drain): once it can, no partition gets a next split and each is handed back as its last range
      ends (the group already consumes from the split on).
    - **Which partitions.** A partition of the drain whose tasks run out of work before the next
      chance to split (``remaining / (tasks x task capacity) <= poll + hand-off``: the new range
      queues behind what they hold, so the tasks never wait), or another partition the group cannot
      hold, when the capped group cannot hold it: its rate is over its consumer's share (it regrows
      behind every split) or the group cannot clear its backlog within the target. At least one batch
      (``min_records_per_task``); a partition not yet in the drain also needs ``minBacklogRecords``
      unless it regrows (the anti-flap rule of a first drain). When the slots are saturated (the
      regrowth keeps at least as many tasks busy as the drain holds slots), a partition whose tasks
      still hold work joins a split due anyway if its oldest record is at least as old as the
      youngest pick's (:func:`_joins_saturated`: the slots' queue takes records in arrival order).
    - **How many tasks.** Each partition its own need (:func:`partition_need`) **without a
      start-up** (the hand-off pause only: its tasks are running), and at least enough to hold its
      regrowth (``(rate - share) / task capacity``, 10 % spare) so its lanes do not fall behind from
      split to split; within the drain's task slots (``status.drain.slots``: its Job's
      parallelism, fixed at launch) minus the tasks still busy on other partitions: a next split
      never starts a task. When those do not hold every pick's regrowth, the partitions whose
      regrowth keeps a task busy get the tasks that carry it first, then the others one each
      (:func:`_holds_first`). When the slots cannot even hold the regrowth of the partitions the
      group cannot hold (:func:`_outgrown`) and a drain may hold more, there is no next split: the
      drain ends at its next part boundary and the next drain is planned afresh with the slots the
      load needs (one start-up).

    The named steps, in order: gate (the group alone) -> pick the partitions due for a next split
    -> the slots outgrown (hand back) -> the budget the tasks busy elsewhere leave of the slots ->
    each partition's tasks -> the need, with its reason and message.
    """
    notes: list[str] = []
    setting = _split_setting(
        loads,
        capacity,
        busy,
        group_replicas=group_replicas,
        target_s=target_s,
        policy=policy,
        sla_s=sla_s,
        oldest_age_s=oldest_age_s,
        notes=notes,
    )
    if setting is None:
        return None
    x, picks = setting
    if _outgrown(x):
        return None  # handed back at its next part boundary: a drain with the slots the load needs follows
    picked = {ld.partition for ld, _ in picks}
    busy_elsewhere = sum(lane.tasks for lane in busy.lanes if lane.partition not in picked)
    # the slots the drain's Job holds (its parallelism is fixed at launch: status.drain.slots,
    # handoff.job_slots) less those busy on other partitions: a next split never adds a task
    budget = busy.slots - busy_elsewhere
    if budget <= 0:
        return None
    chosen = []
    for (ld, rate), tasks in zip(picks, _split_allocation(x, picks, budget), strict=True):
        if tasks <= 0:
            notes.append(f"partition {ld.partition}: task budget exhausted")
            continue
        chosen.append(_range(ld, tasks, policy.handoff_s, x.task_cap, capacity, regrowing=rate >= capacity))
    if not chosen:
        return None
    return _need(
        chosen, target_s=target_s, group_replicas=group_replicas, notes=notes, follow_up=True, extension=True
    )


def roll_over(
    loads: Sequence[PartitionLoad],
    capacity: float,
    busy: BusyDrain,
    *,
    group_replicas: int,
    target_s: float,
    policy: DrainPolicy,
    sla_s: float | None = None,
    oldest_age_s: Mapping[int, float] | None = None,
) -> RollOver | None:
    """Why a running busy drain takes no next split now, when that is a roll-over: the steps of
    :func:`extension_need` up to the outgrown slots (:func:`_outgrown`), with the figures the
    drain's final part names (``status.drain.reason`` ``RollingOver``). None when it takes a next
    split, or takes none for another reason (the group holds its partitions: the plain
    hand-back). Pure."""
    if not policy.busy:
        return None
    setting = _split_setting(
        loads,
        capacity,
        busy,
        group_replicas=group_replicas,
        target_s=target_s,
        policy=policy,
        sla_s=sla_s,
        oldest_age_s=oldest_age_s,
        notes=[],
    )
    if setting is None:
        return None
    by = _outgrown_by(setting[0])
    if by is None:
        return None
    regrowth, needed, rate = by
    return RollOver(slots=busy.slots, needed=needed, rate=rate, regrowth=regrowth)


def _split_setting(
    loads: Sequence[PartitionLoad],
    capacity: float,
    busy: BusyDrain,
    *,
    group_replicas: int,
    target_s: float,
    policy: DrainPolicy,
    sla_s: float | None,
    oldest_age_s: Mapping[int, float] | None,
    notes: list[str],
) -> tuple[_Split, list[tuple[PartitionLoad, float]]] | None:
    """The setting of a next split and the partitions due for one, or None (the capped group alone
    meets the target, or none is due)."""
    if capacity <= 0 or not loads:
        return None
    group_replicas = max(1, min(group_replicas, len(loads)))
    group = project(loads, group_replicas, capacity)
    if group.catch_up_s <= target_s:
        return None
    x = _Split(
        loads=loads,
        capacity=capacity,
        busy=busy,
        policy=policy,
        target_s=target_s,
        sla_s=target_s if sla_s is None else sla_s,
        share=capacity / group.per_consumer_partitions,
        # when the running tasks run dry and how a split is cut: the task capacity of the
        # moment; whether the slots were sized wrong (the roll-over): the figure the launch
        # sized them with (``slot_cap``), so a steady burst is judged as it was launched
        task_cap=policy.task_capacity or capacity,
        slot_cap=busy.slot_rate or policy.task_capacity or capacity,
        ages=dict(oldest_age_s or {}),
    )
    picks = _split_picks(x, notes)
    if not picks:
        return None
    return x, picks


@dataclass(frozen=True)
class _Split:
    """What every step of a busy drain's next split reads."""

    loads: Sequence[PartitionLoad]
    capacity: float
    busy: BusyDrain
    policy: DrainPolicy
    target_s: float
    sla_s: float
    share: float  # records/s one consumer gives each of its partitions at the cap
    task_cap: float  # records/s of one drain task now (the split's timing and cut)
    slot_cap: float  # records/s of one slot as the launch sized the slots (the roll-over's judgement)
    ages: Mapping[int, float]

    @property
    def horizon_s(self) -> float:
        """The next chance to split: a poll and the hand-off."""
        return self.policy.poll_interval_s + self.policy.handoff_s


def _outgrown(x: _Split) -> bool:
    """The drain's slots cannot hold the regrowth of the partitions the capped group cannot hold
    (:func:`regrowth_tasks` summed, without spare: its lanes would fall behind from split to split
    however they are cut) **and** a new drain's launch would hold more slots than it does
    (:func:`launch_slots`: the launch's own rule on the rates now, within ``maxTasks`` and the
    CR's ``splitFactor``). Judged as the launch sized the slots: the same rule, the same rate
    (:func:`_seen_rate`) and the same task capacity (``x.slot_cap``: the slot rate the launch
    recorded), so a steady burst never outgrows the slots it was launched for, and a drain is
    never ended for one that could not hold more. Decided here (docs/decision.md "Busy drains: the
    slots"): the drain takes no further split and ends at its next part boundary (its partitions
    handed back: the exact hand-back of a drain whose burst is over); the next drain is planned
    afresh with the slots the load needs, paying one start-up."""
    return _outgrown_by(x) is not None


def _outgrown_by(x: _Split) -> tuple[float, int, float] | None:
    """(the regrowth in tasks, the slots a launch would hold now, the regrowing partitions' rate)
    when the drain's slots are outgrown (:func:`_outgrown`), else None."""
    p = x.policy
    rates = {ld.partition: _seen_rate(ld, _age(ld, x.ages), p.poll_interval_s) for ld in x.loads}
    regrowth = sum(regrowth_tasks(r, x.share, x.slot_cap) for r in rates.values())
    if math.ceil(regrowth - 1e-9) <= x.busy.slots:
        return None
    mine = set(x.busy.by_partition)
    held = [r for q, r in rates.items() if q in mine]
    want = launch_slots(held, [r for q, r in rates.items() if q not in mine], x.share, x.slot_cap, p)
    if want <= x.busy.slots:
        return None  # nothing bigger can follow: it splits within its slots
    return regrowth, want, sum(r for r in rates.values() if r > x.share)


def launch_slots(
    rates: Sequence[float], others: Iterable[float], share: float, task_cap: float, policy: DrainPolicy
) -> int:
    """The slots a busy drain's launch asks for the regrowth alone (no backlog): each partition of
    the drain (``rates``) its :func:`burst_need`, within the launch's bound (:func:`task_cap_of`:
    ``maxTasks``, and the CR's ``splitFactor`` a partition), and room for the regrowth of the
    ``others`` (:func:`burst_slots`). The launch's own rule (:func:`drain_need` asks at least this
    on these rates), so :func:`_outgrown` ends a drain only for one that would hold more. Pure."""
    high = task_cap_of(policy, max(1, len(rates)), policy.max_tasks)
    tasks = min(high, sum(burst_need(1, r, share, task_cap, high) for r in rates))
    return max(tasks, burst_slots(tasks, others, share, task_cap, policy.max_tasks))


def _split_picks(x: _Split, notes: list[str]) -> list[tuple[PartitionLoad, float]]:
    """The partitions due for a next split, the oldest record first, with the rate their backlog
    shows; a partition without a running task takes one of the drain's free slots. A partition
    whose tasks hold work beyond the next poll waits for a larger range, unless the slots are
    saturated (:func:`_joins_saturated`)."""
    p = x.policy
    lanes = x.busy.by_partition
    free = x.busy.free_slots
    picks: list[tuple[PartitionLoad, float]] = []
    held: list[tuple[PartitionLoad, float]] = []  # wanted, but its tasks hold work beyond the next poll
    order = sorted(x.loads, key=lambda ld: (-_age(ld, x.ages), -ld.lag, ld.partition))
    for ld in order:
        lane = lanes.get(ld.partition)
        ahead = (
            lane is not None and lane.tasks > 0 and lane.remaining / (lane.tasks * x.task_cap) > x.horizon_s
        )
        if ld.lag < max(1, p.min_records_per_task):
            continue
        rate = _seen_rate(ld, _age(ld, x.ages), p.poll_interval_s)
        if not _split_wanted(x, ld, lane, rate):
            continue
        new_task = lane is None or lane.tasks == 0
        if _split_waits(x, ld, rate, no_slot=new_task and free <= 0):
            if not ahead:
                notes.append(f"partition {ld.partition}: not yet due for a new task")
            continue
        if ahead:
            held.append((ld, rate))  # split it when its tasks run dry (a larger range)...
            continue
        if new_task and free > 0:
            free -= 1
        picks.append((ld, rate))
    joined = _joins_saturated(x, picks, held)  # ...unless the slots are saturated
    for ld, _ in joined:
        notes.append(
            f"partition {ld.partition}: joins the split (the slots cannot carry the regrowth; "
            "its records are older than a pick's)"
        )
    rank = {ld.partition: i for i, ld in enumerate(order)}
    return sorted(picks + joined, key=lambda pick: rank[pick[0].partition])


def _joins_saturated(
    x: _Split, picks: Sequence[tuple[PartitionLoad, float]], held: Sequence[tuple[PartitionLoad, float]]
) -> list[tuple[PartitionLoad, float]]:
    """The partitions whose tasks still hold work that join a split due anyway, when the drain's
    slots are saturated: the regrowth of every partition over its consumer's share keeps at least
    as many tasks busy as the drain holds slots (:func:`regrowth_tasks`, the task capacity of the
    moment), so every lane queues work and waiting for a partition's lanes to run dry only lets its
    records age in the group. Those whose oldest record is at least as old as the youngest pick's
    join: the slots' queue then takes the records in the order they arrived (the driver gives a
    freed slot the next sub-range, in order). Decided here (issue 25, long-flash s101 at a 90 s
    start-up, 16 slots under a peak of 4x the capped group): partition 3 was not split for 240 s
    while its sub-ranges queued behind others, its next range 100 k records whose oldest was 177 s
    old, cut into 3 sub-ranges of 222 s each: 0.9976 within the SLA; with this rule 0.9992. Pure."""
    if not picks or not held:
        return []
    rates = [_seen_rate(ld, _age(ld, x.ages), x.policy.poll_interval_s) for ld in x.loads]
    if sum(regrowth_tasks(r, x.share, x.task_cap) for r in rates) < x.busy.slots:
        return []
    youngest = min(_age(ld, x.ages) for ld, _ in picks)
    return [(ld, rate) for ld, rate in held if _age(ld, x.ages) >= youngest]


def _split_wanted(x: _Split, ld: PartitionLoad, lane: Lane | None, rate: float) -> bool:
    """A partition the group cannot hold: it regrows (over its consumer's share) or the group cannot
    clear its backlog within the target; one not yet in the drain needs ``minBacklogRecords`` unless
    it regrows (the anti-flap rule of a first drain). The others are handed back (no next split)."""
    regrows = rate > x.share
    if not regrows and clear_time_s(ld.lag, ld.rate, x.capacity) <= x.target_s:
        return False
    return not (lane is None and not regrows and ld.lag < x.policy.min_backlog_records)


def _split_waits(x: _Split, ld: PartitionLoad, rate: float, *, no_slot: bool) -> bool:
    """A partition a little over its consumer's share would keep a task mostly idle (or start one
    for every batch), and a new task (``no_slot``: none free) pays the start-up: either waits until
    due, as a first drain's regrowing partition does, its task released meanwhile."""
    p = x.policy
    steady = rate - x.share >= 0.5 * x.task_cap  # its regrowth keeps at least half a task busy
    if steady and not no_slot:
        return False
    poll = p.poll_interval_s
    later = ld.lag + max(0.0, rate - x.share) * poll
    k = max(1, math.ceil(max(0.0, rate - x.share) / x.task_cap))
    return (
        _age(ld, x.ages) + poll + p.fixed_cost_s + later / (k * x.task_cap) < p.hot_trigger_fraction * x.sla_s
    )


def _split_allocation(x: _Split, picks: list[tuple[PartitionLoad, float]], budget: int) -> list[int]:
    """Each pick the tasks that hold its regrowth (within one a batch), then the rest of the budget
    towards each one's need (:func:`partition_need` without a start-up, behind what its tasks still
    hold), to the longest sub-ranges first."""
    p = x.policy
    no_start = replace(p, start_up_s=0.0)
    high = budget if p.split_factor is None else min(budget, p.split_factor)
    lanes = x.busy.by_partition
    needs, holds = [], []
    for ld, rate in picks:
        lane = lanes.get(ld.partition)
        ahead = lane.remaining if lane is not None else 0.0
        k = partition_need(
            ld.lag + ahead, _age(ld, x.ages), rate, x.share, x.target_s, no_start, x.task_cap, high
        )
        hold = _hold_tasks(rate, x.share, x.task_cap)
        holds.append(hold)
        needs.append(max(1, min(high, max(k, hold))))
    records = [ld.lag for ld, _ in picks]
    caps = [max(1, int(r // max(1.0, p.min_records_per_task))) for r in records]
    alloc = [min(h, c) for h, c in zip(holds, caps, strict=True)]
    if sum(alloc) > budget:  # the free slots cannot hold every pick's regrowth (with its spare)
        floors = [
            min(a, math.ceil(max(0.0, rate - x.share) / x.task_cap - 1e-9))
            for a, (_, rate) in zip(alloc, picks, strict=True)
        ]
        return _holds_first(alloc, floors, [rate - x.share >= 0.5 * x.task_cap for _, rate in picks], budget)
    left = min(budget, sum(needs)) - sum(alloc)
    while left > 0:  # the rest towards each need, to the longest sub-ranges first
        room = [i for i in range(len(picks)) if alloc[i] < min(needs[i], caps[i])]
        if not room:
            break
        i = max(room, key=lambda j: (records[j] / alloc[j], -j))
        alloc[i] += 1
        left -= 1
    return alloc


# a busy drain's launch: slots for its regrowth with this much to spare (the Job cannot grow later;
# rolling-hot's rates vary +-8 % within a burst, and each split pauses the partition's owner)
BURST_SPARE = 1.2


def _holds_first(
    holds: Sequence[int], floors: Sequence[int], steady: Sequence[bool], budget: int
) -> list[int]:
    """The sub-ranges of picks whose holding tasks (``holds``, with their spare) do not all fit the
    ``budget`` of free slots: first the partitions whose regrowth keeps a task busy (``steady``)
    the tasks that just carry it (``floors``, no spare) — those even beyond the free slots: the
    extra sub-ranges queue on the drain's slots (the driver gives a freed slot the next one), so a
    burst the slots cannot carry is shared by the queue, not by starving the last picks (long-flash
    s102 at 20 s, 16 slots: a partition's 73 k records cut in 1 sub-range, 0.979) — then, within
    the slots left, the others one each in the picks' order (the oldest record first), then the
    steady ones their spare; a pick left without one waits for the next split. Spread one each
    first, a hot partition's 6 tasks fell to 2 behind five neighbours a tenth of a task over their
    share, whose single sub-ranges then held the pass (rolling-hot s100 at 20 s, 0.9966 within);
    holds first, a neighbour could wait for ever behind the hot one's spare. Pure."""
    out = [floors[i] if steady[i] else 0 for i in range(len(holds))]
    left = budget - sum(out)
    order = sorted(range(len(holds)), key=lambda j: (not steady[j], j))
    others = [0 if steady[i] else holds[i] for i in range(len(holds))]  # then the others one each
    for want in (others, list(holds)):  # then the steady ones their spare
        for i in order:
            give = max(0, min(want[i] - out[i], left))
            out[i] += give
            left -= give
    return out


def _hold_tasks(rate: float, share: float, task_cap: float) -> int:
    """Tasks that hold a partition's regrowth behind its splits (10 % spare for the hand-off and
    the poll), at least one."""
    return max(1, math.ceil(max(0.0, rate - share) * 1.1 / task_cap - 1e-9))


def worst_latency_s(
    lags: Sequence[float], ages: Sequence[float], tasks: Sequence[int], policy: DrainPolicy, task_cap: float
) -> tuple[float, float]:
    """(worst latency of a drain's records, the drain's duration), from the plan (pure).

    A partition's range of ``lag`` records whose oldest is ``age`` old is cut into ``tasks`` equal
    sub-ranges (the executor's ``split_ranges``), processed side by side from the drain's start
    (``fixed_cost_s`` after the plan) at ``task_cap`` each. The first sub-range's newest record
    (``age x (1 - 1/k)`` old at the plan, records spread evenly in time) is processed last, at
    ``fixed + lag / (k x task_cap)``: that, or the oldest record at ``age + fixed``, is the worst.
    A partition without tasks keeps its records (not counted)."""
    worst, duration = 0.0, policy.fixed_cost_s
    for lag, age, k in zip(lags, ages, tasks, strict=False):
        if k <= 0 or lag <= 0:
            continue
        work = lag / (k * task_cap)
        duration = max(duration, policy.fixed_cost_s + work)
        worst = max(worst, age + policy.fixed_cost_s, age * (1 - 1 / k) + policy.fixed_cost_s + work)
    return worst, duration


def tasks_for_two_drains(
    candidates: Sequence[PartitionLoad],
    ages: Mapping[int, float],
    low: int,
    high: int,
    share: float,
    target_s: float,
    policy: DrainPolicy,
    capacity: float,
) -> int:
    """Tasks for a drain of ``candidates`` while they regrow (the group processes ``share`` records/s
    of each): the fewest in ``[low, high]`` with which this drain AND the next one meet ``target_s``;
    if none does, the count that makes the worse of the two shortest (fewest on ties).

    The next drain (one at a time: planned at the first poll after this one ended) takes what
    regrew behind this one's split: ``(rate - share) x (duration + poll)`` records per partition,
    the oldest ``backlog / rate`` old, with the whole ``high`` tasks. Pure; the model of
    :func:`worst_latency_s`. With few tasks the drain is cheap but long, and a long drain leaves a
    bigger, older backlog to the next one: at a 90 s start-up a flash burst's first drain with 5
    tasks left 40-55 k records per partition, each next drain longer, until records were late."""
    task_cap = policy.task_capacity or capacity
    lags = [ld.lag for ld in candidates]
    olds = [_age(ld, ages) for ld in candidates]
    # the regrowth rate: the estimate, or the mean produce rate over the backlog's own age when that
    # is higher (FIFO: every record younger than the oldest is in the backlog) -- the smoothed
    # estimate lagged a burst's onset (a 30 s rise half-life before issue 25; a poll's lag now)
    rates = [_seen_rate(ld, a, policy.poll_interval_s) for ld, a in zip(candidates, olds, strict=True)]
    high = max(low, high)

    def worst_of(n: int) -> float:
        alloc = allocate_tasks(lags, n, per_task_min=policy.min_records_per_task)
        now_worst, duration = worst_latency_s(lags, olds, alloc, policy, task_cap)
        wait = duration + (0.0 if policy.busy else policy.poll_interval_s)
        nxt = [max(0.0, r - share) * wait for r in rates]
        nxt_ages = [b / r if r > 0 else 0.0 for b, r in zip(nxt, rates, strict=True)]
        nxt_alloc = allocate_tasks(nxt, high, per_task_min=policy.min_records_per_task)
        next_worst, _ = worst_latency_s(nxt, nxt_ages, nxt_alloc, policy.next_split, task_cap)
        return max(now_worst, next_worst)

    return _fewest_meeting(range(low, high + 1), worst_of, target_s)


def _age(ld: PartitionLoad, ages: Mapping[int, float]) -> float:
    """The partition's oldest waiting record's age: observed, else its lag over its rate."""
    return ages.get(ld.partition, ld.lag / ld.rate if ld.rate > 0 else 0.0)


def _seen_rate(ld: PartitionLoad, age: float, poll_s: float) -> float:
    """The rate its backlog implies (lag over the oldest record's age, once that spans a poll), or its
    produce rate if higher: a burst's backlog shows the rate before the estimator's smoothing does."""
    return max(ld.rate, ld.lag / age if age >= poll_s else 0.0)


def one_at_a_time_worst_s(
    loads: Sequence[PartitionLoad],
    ages: Mapping[int, float],
    share: float,
    policy: DrainPolicy,
    capacity: float,
) -> float:
    """The worst record of one drain at a time in steady state on these rates (pure): each cycle is
    start-up + hand-off + poll + the work, ``C = (F + poll) / (1 - X / N)`` with ``X`` the tasks
    the excess over the group keeps busy (``sum(rate - share) / task throughput`` over the
    partitions that regrow) and ``N`` the budget; a record just behind a split waits for the next
    split, then for its sub-range: about ``C (1 - 1/k) + C - poll`` with ``k = N / partitions``
    (docs/decision.md, "flash at 90 s"). Infinite when the budget cannot carry the excess."""
    task_cap = policy.task_capacity or capacity
    rates = []
    for ld in loads:
        age = _age(ld, ages)
        rates.append(_seen_rate(ld, age, policy.poll_interval_s))
    over = [r - share for r in rates if r > share]
    if not over:
        return 0.0
    busy = sum(over) / task_cap
    if busy >= policy.max_tasks:
        return INF
    cycle = (policy.fixed_cost_s + policy.poll_interval_s) / (1 - busy / policy.max_tasks)
    k = max(1.0, policy.max_tasks / len(over))
    return cycle * (1 - 1 / k) + cycle - policy.poll_interval_s


def pipeline_tasks(
    candidates: Sequence[PartitionLoad],
    ages: Mapping[int, float],
    budget: int,
    share: float,
    target_s: float,
    policy: DrainPolicy,
    capacity: float,
) -> int | None:
    """Tasks for one drain of ``candidates`` when drains run side by side (``max_concurrent`` > 1)
    while the partitions regrow (the group processes ``share`` records/s of each), or None when no
    pipeline can carry the regrowth (the caller then sizes as for one drain at a time).

    Steady state: a drain every ``tau`` seconds takes what regrew since the last split, ``k`` tasks
    a partition; ``x`` = regrowth / task throughput (the worst partition). A drain lasts
    ``F + x tau / k`` (``F``: start-up + hand-off), so ``F / tau + x / k`` drains are in flight
    (<= ``max_concurrent``) holding ``k F / tau + x`` tasks a partition (<= the budget's share,
    ``max_tasks / partitions``); its worst record is ``tau (1 - 1/k) + F + x tau / k`` old when
    processed (:func:`worst_latency_s`). ``k`` is the count with the smallest worst record at the
    shortest feasible ``tau``: cutting a range into more tasks makes its oldest sub-range wait for
    the younger ones' split, so several one-task drains staggered in time beat one drain of many
    tasks once their start-ups overlap. Then more tasks (up to ``splitFactor`` a partition) only
    while this drain's own worst record misses ``target_s`` (a burst's first drain takes the
    backlog of its onset). At most ``budget``. Pure."""
    n_parts = len(candidates)
    if n_parts == 0 or budget <= 0:
        return None
    task_cap = policy.task_capacity or capacity
    fixed = policy.fixed_cost_s
    olds = [_age(ld, ages) for ld in candidates]
    rates = [_seen_rate(ld, a, policy.poll_interval_s) for ld, a in zip(candidates, olds, strict=True)]
    x = max(0.0, max(r - share for r in rates)) / task_cap
    per_part = policy.max_tasks / n_parts
    best_k, best_w = 0, INF
    for k in range(1, (policy.split_factor or policy.max_tasks) + 1):
        room_tasks, room_drains = per_part - x, policy.max_concurrent - x / k
        if room_tasks <= 0 or room_drains <= 0:
            continue
        tau = max(policy.poll_interval_s, k * fixed / room_tasks, fixed / room_drains)
        worst = tau * (1 - 1 / k) + fixed + x * tau / k
        if worst < best_w - 1e-9:
            best_k, best_w = k, worst
    if best_k == 0:
        return None
    lags = [ld.lag for ld in candidates]
    high = task_cap_of(policy, n_parts, budget)
    n = min(best_k * n_parts, high)
    while n < high:
        alloc = allocate_tasks(lags, n, per_task_min=policy.min_records_per_task)
        if worst_latency_s(lags, olds, alloc, policy, task_cap)[0] <= target_s:
            break
        n += 1
    return max(min(n_parts, budget), n)


def follow_up_due(
    candidates: Sequence[PartitionLoad],
    ages: Mapping[int, float],
    budget: int,
    share: float,
    target_s: float,
    policy: DrainPolicy,
    capacity: float,
) -> bool:
    """A follow-up drain (planned while an earlier drain still runs) of the range that regrew behind
    the earlier split is due when one more poll's wait would make its worst record miss ``target_s``:
    the range as it will be at the next poll (each partition grows by ``rate - share`` records/s,
    its oldest record one poll older), cut over the ``budget`` tasks free now, run from a fresh
    start-up (:func:`worst_latency_s`). Before that, waiting batches more regrowth into the same
    drain (fewer start-ups); after it, the oldest record cannot make the target any more. Pure."""
    if budget <= 0:
        return False
    task_cap = policy.task_capacity or capacity
    poll = policy.poll_interval_s
    lags = [ld.lag + max(0.0, ld.rate - share) * poll for ld in candidates]
    olds = [_age(ld, ages) + poll for ld in candidates]
    alloc = allocate_tasks(lags, budget, per_task_min=policy.min_records_per_task)
    worst, _ = worst_latency_s(lags, olds, alloc, policy, task_cap)
    return worst >= target_s


def consumer_rates(rates: Sequence[float], replicas: int) -> list[tuple[int, float]]:
    """(partitions, produce rate) per consumer, the highest rates together: ``replicas`` consumers of
    a balanced assignment (``ceil(P/R)`` or one fewer partitions each) with the rates sorted high to
    low and dealt out in blocks. The most unbalanced balanced assignment: an upper bound on the
    excess any balanced assignor leaves to drains (the total rate is the same for all of them)."""
    n = len(rates)
    r = max(1, min(replicas, n)) if n else 0
    if r == 0:
        return []
    k = math.ceil(n / r)
    big = n - r * (k - 1)  # consumers holding k partitions; the others hold k - 1
    ordered = sorted(rates, reverse=True)
    out, i = [], 0
    for j in range(r):
        size = k if j < big else k - 1
        out.append((size, sum(ordered[i : i + size])))
        i += size
    return out


def group_cost(
    rates: Sequence[float], replicas: int, capacity: float, sla_s: float, policy: DrainPolicy
) -> float:
    """Expected cost of running ``replicas`` consumers on these rates, in replicas (pods) per second:
    the replicas, plus the drain tasks that carry what the consumers cannot: the excess records at
    the task throughput, and each drain's fixed cost (start-up + hand-off) per task, one task per
    partition of an overloaded consumer, once per drain interval. An overloaded consumer's oldest
    record ages at ``(rate - c) / rate`` per second, and a drain is due when it reaches
    ``hot_trigger_fraction x SLA``: the interval is ``trigger x SLA x rate / (rate - c)``."""
    task_cap = policy.task_capacity or capacity
    trigger = max(policy.poll_interval_s, policy.hot_trigger_fraction * sla_s)
    cost = float(replicas)
    for parts, rate in consumer_rates(rates, replicas):
        excess = rate - capacity
        if excess <= 0:
            continue
        cost += excess / task_cap
        cost += parts * policy.fixed_cost_s * excess / (trigger * rate)
    return cost


def starves_neighbours(rates: Sequence[float], replicas: int, capacity: float) -> bool:
    """At ``replicas`` (the most unbalanced balanced assignment, :func:`consumer_rates`) a consumer
    holding a partition at or over its capacity (a hot one, carried by drains) holds other partitions
    too: they wait behind the hot one's regrowth (its consumer is always busy) and are drained only
    as a drain's small joiners. Issue 25: rolling-hot s100 at a 90 s start-up, 2 replicas, the hot
    partition's neighbours aged to 300 s behind it (0.977)."""
    n = len(rates)
    r = max(1, min(replicas, n)) if n else 0
    if r == 0 or r >= n:
        return False
    hot = sum(1 for x in rates if x >= capacity)
    return hot > 0 and math.ceil(n / r) > 1


def overloaded_at(rates: Sequence[float], replicas: int, capacity: float) -> bool:
    """Some consumer of ``replicas`` (the most unbalanced balanced assignment, :func:`consumer_rates`)
    receives more than its ``capacity``: at the group's cap, the partition-capped group cannot hold
    the load at any count and drains run whatever the replica count (a burst)."""
    return any(rate > capacity for _, rate in consumer_rates(rates, replicas))


def assisted_replicas(
    loads: Sequence[PartitionLoad],
    capacity: float,
    *,
    min_replicas: int,
    cap: int,
    sla_s: float,
    policy: DrainPolicy,
    max_utilization: float = 0.9,
    target_s: float | None = None,
) -> int | None:
    """The drain-assisted replica count, or None (size the group for the load, as without drains).

    ``full`` = the fewest replicas (<= ``cap``) whose consumers all stay within ``max_utilization``
    of their capacity on the live rates (``cap`` when none does). Partition granularity often makes
    ``full`` expensive: 4 partitions at 50 % of the group need 4 replicas at 90 % utilization,
    since 3 still leave one consumer two partitions. When fewer replicas plus the drains that carry
    their excess cost at least ``assist_min_saving`` replicas less than ``full`` (expected cost,
    :func:`group_cost`), the cheapest such count is returned; the drain planner then plans for the
    group at that count (the excess regrows behind each split and is drained when due, as for a
    regrowing partition). Depends on the rates only (not on the lag or the current count): under a
    constant load the answer is a fixed point.

    With ``policy.assist_always`` False (the default for a CR: ``spec.drain.assistReplicas`` unset)
    the assisted count is considered only in a *burst*: while the group at ``cap`` cannot hold the
    live rates (:func:`overloaded_at`), so drains run whatever the count and the consumers the load
    would size for a hot partition's neighbours sit mostly idle; outside bursts the group is sized
    for the load and drains run only for what it cannot hold."""
    if policy.assist_min_saving is None or not policy.enabled or capacity <= 0 or not loads:
        return None
    rates = [max(0.0, ld.rate) for ld in loads]
    cap = max(1, min(cap, len(loads)))
    if not policy.assist_always and not overloaded_at(rates, cap, capacity):
        return None  # burst-scoped (the default): the group at its cap holds the load, no drains
    lo = max(1, min(min_replicas, cap))
    full = _fewest_within(rates, lo, cap, max_utilization * capacity)
    if full <= lo:
        return None
    full_cost = group_cost(rates, full, capacity, sla_s, policy)
    best, best_cost = None, full_cost - policy.assist_min_saving
    # issue 25: a smaller count only where drains one at a time can still carry its excess within
    # the target (one_at_a_time_worst_s), or no worse than the full count's: on rolling-hot s3 at
    # a 90 s start-up 3 replicas overloaded the hot partition's neighbours too (0.9992); and where
    # even the full count's drains cannot hold the target (the hot partition saturates them), never
    # a count that puts other partitions on the hot partition's consumer (starves_neighbours)
    limit = None
    if target_s is not None:
        limit = max(
            target_s,
            one_at_a_time_worst_s(loads, {}, capacity / math.ceil(len(loads) / full), policy, capacity),
        )
    saturated = limit is not None and target_s is not None and limit > target_s
    for r in range(lo, full):
        if saturated and starves_neighbours(rates, r, capacity):
            continue  # the drains are saturated by the hot partition: none left for its neighbours
        if (
            limit is not None
            and one_at_a_time_worst_s(loads, {}, capacity / math.ceil(len(loads) / r), policy, capacity)
            > limit
        ):
            continue
        cost = group_cost(rates, r, capacity, sla_s, policy)
        if cost <= best_cost + 1e-9:
            best, best_cost = r, cost
    return best


def _fewest_within(rates: Sequence[float], lo: int, cap: int, most: float) -> int:
    """The fewest replicas in ``[lo, cap]`` whose consumers each receive at most ``most`` records/s
    (the most unbalanced balanced assignment, :func:`consumer_rates`); ``cap`` when none does."""
    for r in range(lo, cap + 1):
        if all(rate <= most for _, rate in consumer_rates(rates, r)):
            return r
    return cap


def _expires_soon(
    ld: PartitionLoad, ages: Mapping[int, float], retention_s: float | None, target_s: float
) -> bool:
    if retention_s is None or retention_s <= 0:
        return False
    age = _age(ld, ages)
    return age + target_s >= retention_s


def expiring_first(
    candidates: Sequence[PartitionLoad], ages: Mapping[int, float], retention_s: float | None, target_s: float
) -> list[PartitionLoad]:
    """Candidates whose oldest unprocessed record would be deleted by retention before the target
    (age + target >= retention) first, least time left first; the others keep their order (pure).
    With a task budget smaller than the candidates this decides who is drained now."""
    soon = [ld for ld in candidates if _expires_soon(ld, ages, retention_s, target_s)]
    soon.sort(key=lambda ld: (-_age(ld, ages), ld.partition))
    return soon + [ld for ld in candidates if ld not in soon]


def _rest_ok(
    loads: Iterable[PartitionLoad],
    regrowing: AbstractSet[int],
    group_replicas: int,
    capacity: float,
    target_s: float,
) -> bool:
    """Can the group meet the target on the non-regrowing partitions left? Each regrowing partition
    keeps one consumer busy and is handled by its own repeated drains."""
    rest = [ld for ld in loads if ld.partition not in regrowing]
    if not rest:
        return True
    replicas = max(1, group_replicas - len(regrowing))
    return project(rest, replicas, capacity).catch_up_s <= target_s


__all__ = [
    "INF",
    "BusyDrain",
    "DrainNeed",
    "DrainPolicy",
    "DrainRange",
    "Lane",
    "RollOver",
    "allocate_by_need",
    "allocate_tasks",
    "assisted_replicas",
    "burst_need",
    "burst_slots",
    "consumer_rates",
    "drain_need",
    "extension_need",
    "follow_up_due",
    "group_cost",
    "launch_slots",
    "one_at_a_time_worst_s",
    "overloaded_at",
    "partition_need",
    "pipeline_tasks",
    "regrowth_tasks",
    "roll_over",
    "task_cap_of",
    "tasks_for_two_drains",
    "worst_latency_s",
]
