"""Sim-to-real gives the operator's decision step what the operator knew (docs/demo.md "What the
operator knew"): its estimate of a consumer's capacity over the run, start-ups learned, the drain
task capacity not told; the simulated world still runs at the measured capacities."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from lagpilot.sim import compare as sim_compare
from lagpilot.sim.params import SimParams
from lagpilot.sim.policies import run_policy
from lagpilot.sim.trace import Trace
from lagpilot_dev.demo import measure as demo_measure


def test_decision_capacity_steps_through_the_reports() -> None:
    p = SimParams(capacity=50.0, reported_capacity=((10.0, 30.0), (20.0, 35.0)))
    assert [p.decision_capacity(t) for t in (0.0, 10.0, 15.0, 20.0, 99.0)] == [30.0, 30.0, 30.0, 35.0, 35.0]
    assert SimParams(capacity=50.0).decision_capacity(5.0) == 50.0  # no reports: the world's


def test_the_planner_is_told_the_task_capacity_unless_not() -> None:
    assert SimParams(drain_task_capacity=40.0).model().drain_task_capacity == 40.0
    assert SimParams(drain_task_capacity=40.0, tell_task_capacity=False).model().drain_task_capacity is None


def test_reported_capacity_of_the_samples_keeps_the_changes() -> None:
    samples = [
        SimpleNamespace(t=t, capacity=c)
        for t, c in ((0.0, None), (1.0, 30.0), (2.0, 30.0), (3.04, 31.5), (4.0, None), (5.0, 31.5))
    ]
    assert demo_measure.reported_capacity(samples) == [(1.0, 30.0), (3.0, 31.5)]


def test_a_summary_round_trips_into_params() -> None:
    p, _used, unknown = sim_compare.params_from_summary(
        {
            "sim_params": {
                "capacity": 50.0,
                "reported_capacity": [[1.0, 30.0], [3.0, 31.5]],
                "learn_start_ups": True,
                "tell_task_capacity": False,
            }
        }
    )
    assert unknown == {} and p.reported_capacity == ((1.0, 30.0), (3.0, 31.5))
    assert p.learn_start_ups and not p.tell_task_capacity
    hash(p)  # a frozen dataclass of tuples


def _burst() -> Trace:
    times = [float(t) for t in range(0, 600, 60)]
    rates = [60.0, 60.0, 420.0, 420.0, 60.0, 60.0, 60.0, 60.0, 60.0, 60.0]
    return Trace(times=tuple(times), rates=tuple(rates), weights=(None,) * len(times))


def test_a_lower_estimate_drains_more() -> None:
    """The world is the same (capacity 50/s); a planner that believes 30/s sees the burst as worse:
    it drains more (the real demo's operator: 12 slots at 85 s where 9 at 105 s)."""
    base = SimParams(
        partitions=3,
        capacity=50.0,
        sla_s=120.0,
        max_replicas=3,
        poll_interval_s=5.0,
        min_backlog_records=1000,
        step_s=1.0,
        pod_start_s=5.0,
        drain_start_s=5.0,
    )
    exact = run_policy(_burst(), base, "lagpilot")
    low = run_policy(_burst(), dataclasses.replace(base, reported_capacity=((0.0, 30.0),)), "lagpilot")
    assert exact.drain_task_minutes > 0  # the burst needs a drain in both
    assert low.drain_task_minutes > exact.drain_task_minutes  # 22.25 vs 13.35 when written
    assert low.within_sla_fraction >= exact.within_sla_fraction
