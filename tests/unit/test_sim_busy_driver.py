"""The simulated busy drain behaves as the real driver does (lagpilot_runtime.drain.job.run,
docs/drain.md "Busy drains"): its Job holds the task slots it was launched with until it ends — while
it waits for the operator's next part too — and ends on the final part (the first decision that takes
no next split once every sub-range is done) or after LAGPILOT_DRAIN_PART_WAIT_SECONDS without a part;
a next part's sub-ranges run on those slots (no new task, no second start-up), started as soon as the
part is handed off, beside the pass under way (the driver reads parts while its passes run and starts
each as one more Spark job: issue 25 item 2), each on the slot that frees first."""

from __future__ import annotations

from types import SimpleNamespace

from lagpilot.sim.params import SimParams
from lagpilot.sim.trace import Trace
from lagpilot.sim.world import _World
from lagpilot_runtime.drain import job as drain_job

CAP = 100.0
P = SimParams(
    partitions=2,
    capacity=CAP,
    sla_s=600.0,
    drain_start_s=20.0,
    step_s=1.0,
    handoff_pause_s=1.0,
    poll_interval_s=15.0,
    busy_drains=True,
    max_drain_tasks=16,
    min_replicas=0,
)


def _need(tasks: dict[int, int], extension: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        ranges=[SimpleNamespace(partition=p, tasks=n) for p, n in tasks.items()],
        reason="test",
        extension=extension,
    )


def _world(params: SimParams = P) -> _World:
    return _World(Trace([0.0], [0.0], [None]), params, 0)  # no consumer: only the drain works


def _run(w: _World, t: float, until: float, rates: tuple[float, float] = (0.0, 0.0)) -> float:
    total = sum(rates)
    weights = [r / total for r in rates] if total else [0.5, 0.5]
    while t < until - 1e-9:
        w.advance(t, 1.0, total, weights)
        t += 1.0
    return t


def _burst(w: _World, records: float, partition: int = 0) -> float:
    """``records`` on one partition over 10 s, before any drain."""
    rates = (records / 10, 0.0) if partition == 0 else (0.0, records / 10)
    return _run(w, 0.0, 10.0, rates)


def test_the_part_wait_is_the_drivers() -> None:
    assert SimParams().drain_part_wait_s == drain_job.PART_WAIT_S


def test_a_busy_drain_holds_its_slots_while_it_waits_for_a_part() -> None:
    """4 tasks on p0 finish; a poll later a next split of p1 takes one of them: the driver still
    holds all 4 (its local[4] session), none is released after a poll of waiting."""
    w = _world()
    t = _burst(w, 8_000.0)  # 8,000 records: 4 tasks x 20 s after a 20 s start-up
    w.plan_drain(_need({0: 4}), t)
    t = _run(w, t, 60.0)
    d = w.sim_drains[0]
    assert all(task.queue.total <= 1e-9 for task in d.tasks) and len(d.tasks) == 4
    t = _run(w, t, 80.0, rates=(0.0, 200.0))  # p1 regrows; the tasks have waited > one poll
    w.plan_drain(_need({1: 1}, extension=True), t)
    w.settle(t)
    assert len(d.tasks) == 4 and d.status.slots == 4
    t = _run(w, t, 100.0)
    w.settle(t)  # the next split handed off and running: still 4 slots
    assert len(d.tasks) == 4 and d.status.slots == 4


def test_the_final_part_ends_it_and_every_slot_is_paid_from_launch_to_the_end() -> None:
    w = _world()
    t = _burst(w, 8_000.0)
    w.plan_drain(_need({0: 4}), t)
    launched = t + P.pause_s
    t = _run(w, t, 90.0)  # done at ~51 s; the next decision at 90 s takes no next split
    assert w.sim_drains
    w.settle(t)  # no next split planned, nothing left: the final part
    assert not w.sim_drains
    assert abs(w.finished_task_s - 4 * (90.0 - launched)) < 1e-6, w.finished_task_s


def test_without_a_part_the_driver_ends_after_the_part_wait() -> None:
    """LAGPILOT_DRAIN_PART_WAIT_SECONDS below the poll: the driver ends by itself, its slots with it."""
    params = SimParams(**{**P.__dict__, "poll_interval_s": 120.0, "drain_part_wait_s": 10.0})
    w = _world(params)
    t = _burst(w, 8_000.0)
    w.plan_drain(_need({0: 4}), t)
    launched = t + params.pause_s
    t = _run(w, t, 100.0)
    assert not w.sim_drains and w.last_status is not None
    done = launched + params.drain_start_s + 8_000.0 / (4 * CAP)
    assert abs(w.finished_task_s - 4 * (done + 10.0 - launched)) < 1.0 + 1e-6, w.finished_task_s


def test_a_next_split_runs_on_the_drains_slots_without_a_new_start_up() -> None:
    """A next split planned with more tasks than the drain holds: its sub-ranges queue on the slots
    the driver has (no task is added, none starts again)."""
    w = _world()
    t = _burst(w, 4_000.0)
    w.plan_drain(_need({0: 2}), t)
    t = _run(w, t, 60.0, rates=(0.0, 300.0))
    w.plan_drain(_need({1: 6}, extension=True), t)
    t = _run(w, t, 62.0)
    d = w.sim_drains[0]
    assert len(d.tasks) == 2
    assert all(task.start_at <= t for task in d.tasks)
    assert sum(task.queue.total for task in d.tasks) > 0  # the next split's records, on the 2 slots


def test_a_next_parts_work_starts_on_a_free_slot_while_the_pass_under_way_runs() -> None:
    """The driver starts a part's sub-ranges beside the pass under way: a range handed off while
    another sub-range of the pass still runs starts at once on the slot that is free."""
    w = _world()
    t = _run(w, 0.0, 10.0, rates=(600.0, 100.0))  # p0 6,000, p1 1,000 records
    w.plan_drain(_need({0: 1, 1: 1}), t)
    t = _run(w, t, 40.0)  # started at 31 s: p1's task is done at 41 s, p0's at 91 s
    t = _run(w, t, 45.0, rates=(0.0, 200.0))
    w.plan_drain(_need({1: 1}, extension=True), t)  # handed off at 46 s
    t = _run(w, t, 50.0)
    d = w.sim_drains[0]
    new = [s for s in d.status.sub_ranges if s.partition == 1]
    assert len(new) == 1 and 0 < new[0].next < new[0].end  # running beside p0's sub-range
    t = _run(w, t, 60.0)  # the next range's 1,000 records took 10 s on the free slot: done at 56 s
    # p0's sub-range still runs (1,100 records left at 80 s: 1,900 at 60 s); the next range is done
    assert abs(w.remaining() - 3_100.0) < 1e-6, w.remaining()
    assert [s.partition for s in w.sim_drains[0].status.sub_ranges] == [0]
    assert len(d.tasks) == 2  # no task added


def test_a_next_parts_sub_ranges_queue_in_index_order_on_the_slot_that_frees_first() -> None:
    """More sub-ranges than free slots: they queue; each goes, in index order, to the slot with the
    least work (the one that frees first), as Spark's FIFO scheduler gives free slots to tasks."""
    w = _world()
    t = _run(w, 0.0, 10.0, rates=(300.0, 100.0))  # p0 3,000, p1 1,000 records
    w.plan_drain(_need({0: 1, 1: 1}), t)
    t = _run(w, t, 40.0)  # started at 31 s: p1's slot free at 41 s, p0's at 61 s
    t = _run(w, t, 45.0, rates=(0.0, 600.0))  # p1: 3,000 records
    w.plan_drain(_need({1: 3}, extension=True), t)  # 3 sub-ranges of 1,000 on 2 slots
    t = _run(w, t, 47.0)
    d = w.sim_drains[0]
    queued = {int(m[0]): task for task in d.tasks for m in task.marks if m[1] > 1e-6}
    first, second, third = sorted(k for k in queued if d.sizes[k][0] == 1)
    # the first goes to the free slot (free at 46 s), the second behind it (it frees at 56 s, p0's at
    # 61 s), the third behind p0's sub-range (free at 61 s, the other at 66 s)
    assert queued[first] is queued[second] and queued[third] is not queued[first]
    t = _run(w, t, 100.0)
    assert w.remaining() <= 1e-6


def test_an_idle_busy_drain_holds_its_slots_for_the_operators_hold_then_ends() -> None:
    """The operator's hold before the hand-back (handoff.hand_back_hold, the same function): an idle
    busy drain keeps its slots (paid) until it stayed idle for the hold; a roll-over ends it at once."""
    from lagpilot.decide import handoff

    rule = handoff.HandBack(hold_s=45.0)
    w = _world()
    t = _burst(w, 8_000.0)
    w.plan_drain(_need({0: 4}), t)
    launched = t + P.pause_s
    t = _run(w, t, 90.0)  # done at ~51 s
    w.settle(t, rule)  # the first idle decision: the hold starts, its start in the status
    assert w.sim_drains and w.sim_drains[0].status.idle_since == 90.0
    t = _run(w, t, 120.0)
    w.settle(t, rule)
    assert w.sim_drains  # 30 s of 45
    t = _run(w, t, 135.0)
    w.settle(t, rule)
    assert not w.sim_drains
    assert abs(w.finished_task_s - 4 * (135.0 - launched)) < 1e-6, w.finished_task_s
    # a roll-over is not held
    w = _world()
    t = _burst(w, 8_000.0)
    w.plan_drain(_need({0: 4}), t)
    t = _run(w, t, 90.0)
    w.settle(t, rule, rolled=True)
    assert not w.sim_drains
