"""The simulated busy drain behaves as the real driver does (lagpilot_runtime.drain_job.run,
docs/drain.md "Busy drains"): its Job holds the task slots it was launched with until it ends — while
it waits for the operator's next part too — and ends on the final part (the first decision that takes
no next split once every sub-range is done) or after LAGPILOT_DRAIN_PART_WAIT_SECONDS without a part;
a next part's sub-ranges run on those slots (no new task, no second start-up) once the pass under way
has ended (a pass is one Spark job over the unfinished sub-ranges)."""
from __future__ import annotations

from types import SimpleNamespace

from lagpilot.sim.params import SimParams
from lagpilot.sim.trace import Trace
from lagpilot.sim.world import _World
from lagpilot_runtime import drain_job

CAP = 100.0
P = SimParams(partitions=2, capacity=CAP, sla_s=600.0, drain_start_s=20.0, step_s=1.0, handoff_pause_s=1.0,
              poll_interval_s=15.0, busy_drains=True, max_drain_tasks=16, min_replicas=0)


def _need(tasks: dict[int, int], extension: bool = False) -> SimpleNamespace:
    return SimpleNamespace(ranges=[SimpleNamespace(partition=p, tasks=n) for p, n in tasks.items()],
                           reason="test", extension=extension)


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


def test_a_next_parts_work_waits_for_the_pass_under_way() -> None:
    """The driver reads the next part after its pass: a range handed off while another sub-range of
    the pass still runs starts when that pass has ended, even on a slot that is free."""
    w = _world()
    t = _run(w, 0.0, 10.0, rates=(600.0, 100.0))  # p0 6,000, p1 1,000 records
    w.plan_drain(_need({0: 1, 1: 1}), t)
    t = _run(w, t, 40.0)  # started at 31 s: p1's task is done at 41 s, p0's at 91 s
    t = _run(w, t, 45.0, rates=(0.0, 200.0))
    w.plan_drain(_need({1: 1}, extension=True), t)
    t = _run(w, t, 80.0)
    # p0's sub-range still runs (1,100 records left): the next range's 1,000 wait, none processed
    assert abs(w.remaining() - (1_100.0 + 1_000.0)) < 1e-6, w.remaining()
    subs = {s.partition: s for s in w.sim_drains[0].status.sub_ranges}
    assert subs[1].records == 0 and subs[1].end - subs[1].start == 1_000
    t = _run(w, t, 110.0)  # the pass ended at 91 s; the next part's 1,000 records take 10 s
    assert w.remaining() <= 1e-6
