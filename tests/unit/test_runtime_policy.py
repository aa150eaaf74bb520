"""The warm drain runtime on demand (decide.runtime) and its place in the decision step."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide import runtime as rt
from lagpilot.decide import step as step_mod
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.spec import DrainSpec, parse_spec

BASE = {
    "kafka": {"bootstrapServers": "127.0.0.1:9092"},
    "topic": "t",
    "groupId": "g",
    "catchUpSLASeconds": 300,
}
ON_DEMAND = rt.RuntimePolicy(rt.MODE_ON_DEMAND, cooldown_s=600, warm_up_s=90, warm_start_s=3)
ALWAYS = dataclasses.replace(ON_DEMAND, mode=rt.MODE_ALWAYS)
OFF = dataclasses.replace(ON_DEMAND, mode=rt.MODE_OFF)


def spec_with(**drain):  # type: ignore[no-untyped-def]
    spec = parse_spec(BASE)
    return dataclasses.replace(spec, drain=dataclasses.replace(spec.drain, **drain))


@pytest.mark.parametrize(
    "drain, mode",
    [
        ({}, rt.MODE_OFF),
        ({"warm_runtime": True}, rt.MODE_ALWAYS),
        ({"warm_runtime": True, "warm_runtime_cooldown_s": 0}, rt.MODE_ON_DEMAND),
        ({"warm_runtime": True, "warm_runtime_cooldown_s": 300}, rt.MODE_ON_DEMAND),
        ({"warm_runtime": False, "warm_runtime_cooldown_s": 300}, rt.MODE_OFF),
        ({"warm_runtime": True, "enabled": False}, rt.MODE_OFF),
        ({"warm_runtime": True, "launcher": "sparkApplication"}, rt.MODE_OFF),
    ],
)
def test_mode_of_the_spec(drain, mode) -> None:  # type: ignore[no-untyped-def]
    assert rt.mode_of(spec_with(**drain)) == mode
    pol = rt.RuntimePolicy.from_group_spec(spec_with(**drain), warm_up_s=90, warm_start_s=3)
    assert (pol.mode, pol.warm_up_s, pol.warm_start_s) == (mode, 90, 3)


@pytest.mark.parametrize(
    "pol, obs, now, start_up, waits",
    [
        # off: every drain is a cold Job, planned when due
        (OFF, None, 100, 90, False),
        (OFF, rt.RuntimeObservation(1, True, 0), 100, 90, False),
        # always: warm when Ready; a runtime not Ready (restarting) gives a cold Job, never a wait
        (ALWAYS, rt.RuntimeObservation(1, True, None), 100, 3, False),
        (ALWAYS, rt.RuntimeObservation(1, False, None), 100, 90, False),
        # on demand, scaled to 0: this decision scales it up; the split waits for the warm-up
        (ON_DEMAND, rt.RuntimeObservation(0, False, None), 100, 93, True),
        (ON_DEMAND, None, 100, 90, False),  # nothing observed (no runtime yet): as off
        # warming since 40: 30 s left, then the warm start; the split waits
        (ON_DEMAND, rt.RuntimeObservation(1, False, 40), 100, 33, True),
        # scale-up time unknown (never stamped): the wait could not be bounded, the drain goes cold
        (ON_DEMAND, rt.RuntimeObservation(1, False, None), 100, 90, False),
        # Ready: warm, planned at once
        (ON_DEMAND, rt.RuntimeObservation(1, True, 40), 100, 3, False),
        # not Ready 2 warm-ups (180 s) after the scale-up: given up on, the drain goes cold now
        (ON_DEMAND, rt.RuntimeObservation(1, False, 0), 180, 90, False),
        (ON_DEMAND, rt.RuntimeObservation(1, False, 0), 179, 3, True),
        # a short warm-up still waits at least 120 s (a JVM on busy cores)
        (dataclasses.replace(ON_DEMAND, warm_up_s=20), rt.RuntimeObservation(1, False, 0), 119, 3, True),
        (dataclasses.replace(ON_DEMAND, warm_up_s=20), rt.RuntimeObservation(1, False, 0), 120, 20, False),
    ],
)
def test_start_up_and_the_split_waiting(pol, obs, now, start_up, waits) -> None:  # type: ignore[no-untyped-def]
    assert rt.start_up_s(pol, obs, now) == pytest.approx(start_up)
    assert rt.split_waits(pol, obs, now) is waits


@pytest.mark.parametrize(
    "pol, obs, kw, replicas",
    [
        (OFF, None, {"drain_wanted": True}, None),
        (ALWAYS, None, {}, 1),
        (ON_DEMAND, None, {}, 0),
        (ON_DEMAND, None, {"drain_wanted": True}, 1),
        (ON_DEMAND, None, {"drain_in_flight": True}, 1),
        (ON_DEMAND, None, {"last_drain_end_s": 1000 - 599}, 1),  # within the cooldown
        (ON_DEMAND, None, {"last_drain_end_s": 1000 - 600}, 0),
        # a scale-up holds for its warm-up plus the cooldown (no 0 -> 1 -> 0 while a due drain flickers)
        (ON_DEMAND, rt.RuntimeObservation(1, False, 1000 - 689), {}, 1),
        (ON_DEMAND, rt.RuntimeObservation(1, True, 1000 - 690), {}, 0),
        (ON_DEMAND, rt.RuntimeObservation(1, True, None), {}, 0),
    ],
)
def test_wanted_replicas(pol, obs, kw, replicas) -> None:  # type: ignore[no-untyped-def]
    args = {"drain_wanted": False, "drain_in_flight": False, "last_drain_end_s": None, "now": 1000.0, **kw}
    assert rt.wanted_replicas(pol, obs, **args) == replicas


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.integers(0, 1),
    ready=st.booleans(),
    up=st.one_of(st.none(), st.floats(0, 2000)),
    now=st.floats(0, 2000),
    warm_up=st.floats(1, 300),
    warm=st.floats(0.1, 30),
)
def test_a_split_never_waits_longer_than_two_warm_ups_and_never_on_a_ready_runtime(
    replicas, ready, up, now, warm_up, warm
) -> None:  # type: ignore[no-untyped-def]
    pol = rt.RuntimePolicy(rt.MODE_ON_DEMAND, 600, warm_up, warm)
    obs = rt.RuntimeObservation(replicas, ready, up)
    if up is not None and up > now:
        return
    waits = rt.split_waits(pol, obs, now)
    if ready:
        assert not waits and rt.start_up_s(pol, obs, now) == warm
    if waits and replicas:
        assert up is not None and now - up < max(rt.GIVE_UP_FACTOR * warm_up, rt.GIVE_UP_MIN_S)
    # the start-up a drain planned now sees is never more than a warm-up plus a warm start
    assert rt.start_up_s(pol, obs, now) <= warm_up + warm + 1e-9


def _burst_obs(at: float, runtime: rt.RuntimeObservation | None, backlog: int):  # type: ignore[no-untyped-def]
    # 3 partitions, each producing 300/s against consumers of 100/s: the capped group cannot hold it
    ends = [backlog + int(300 * at)] * 3
    parts = [
        PartitionOffsets(i, 0, e, 0, at - backlog / 300 if backlog else None) for i, e in enumerate(ends)
    ]
    return step_mod.StepObservation(snapshot(at, parts, {i: 100.0 for i in range(3)}), 3, runtime=runtime)


def test_the_step_holds_a_due_drain_until_the_runtime_is_ready_then_plans_it_warm() -> None:
    spec = spec_with(warm_runtime=True, warm_runtime_cooldown_s=600)
    pol = step_mod.Policies.from_group_spec(spec, step_mod.Model(drain_start_s=90, drain_warm_start_s=3))
    assert pol.runtime.mode == rt.MODE_ON_DEMAND
    state = step_mod.StepState()
    # warm the estimator on the burst's rates
    for at in (0.0, 15.0, 30.0):
        _, state = step_mod.step(state, _burst_obs(at, rt.RuntimeObservation(0, False, None), 0), pol, at)
    out, state = step_mod.step(
        state, _burst_obs(45.0, rt.RuntimeObservation(0, False, None), 60_000), pol, 45.0
    )
    assert out.runtime_replicas == 1  # a drain is due: scaled up
    assert (
        out.drain is None and out.split_waits and "waits for the warm drain runtime" in out.decision.message
    )
    out, state = step_mod.step(
        state, _burst_obs(60.0, rt.RuntimeObservation(1, False, 45.0), 70_000), pol, 60.0
    )
    assert out.drain is None and out.split_waits and out.runtime_replicas == 1
    out, state = step_mod.step(
        state, _burst_obs(140.0, rt.RuntimeObservation(1, True, 45.0), 90_000), pol, 140.0
    )
    assert out.drain is not None and not out.split_waits and out.runtime_replicas == 1
    # the same observation without the runtime (off): the drain is planned at once, no runtime
    off = step_mod.Policies.from_group_spec(parse_spec(BASE), step_mod.Model(drain_start_s=90))
    s2 = step_mod.StepState()
    for at in (0.0, 15.0, 30.0):
        _, s2 = step_mod.step(s2, _burst_obs(at, None, 0), off, at)
    o2, _ = step_mod.step(s2, _burst_obs(45.0, None, 60_000), off, 45.0)
    assert o2.drain is not None and o2.runtime_replicas is None and not o2.split_waits


def test_the_simulated_runtime_follows_the_step_and_pays_one_warm_up_a_burst() -> None:
    from lagpilot.sim import tracegen
    from lagpilot.sim.params import SimParams
    from lagpilot.sim.policies import run_policy
    from lagpilot.sim.trace import trace_from_rows

    fam = tracegen.SUITE["flash"]
    rows = tracegen.generate("flash", 101, fam.partitions, fam.capacity)
    spike = [i for i, r in enumerate(rows) if r[1] > fam.partitions * fam.capacity]
    assert spike and spike[0] > 60
    rows = [
        (t - rows[spike[0] - 60][0], *rest) for t, *rest in rows[spike[0] - 60 : spike[0] + 120]
    ]  # the first spike
    trace = trace_from_rows(rows)
    base = dict(
        partitions=fam.partitions,
        capacity=fam.capacity,
        sla_s=fam.sla_s,
        pod_start_s=30.0,
        handoff_pause_s=1.0,
        max_drain_tasks=16,
        drain_start_s=90.0,
        busy_drains=False,
    )  # cold drains: one warm-up a burst serves each drain's start
    off = run_policy(trace, SimParams(**base), "lagpilot")
    od = run_policy(trace, SimParams(warm_runtime="on-demand", **base), "lagpilot")
    assert "drain_runtime_minutes" not in off.extra
    # the runtime runs around the spike only: far less than the trace's length
    assert 0 < od.extra["drain_runtime_minutes"] < len(rows) - 60
    assert od.drains >= 1 and od.within_sla_fraction >= off.within_sla_fraction
    # the drains start warm: their tasks no longer sit through a cold start-up each
    assert od.drain_task_minutes < off.drain_task_minutes
    assert DrainSpec().warm_runtime_cooldown_s is None  # the CRD's default: always on when warmRuntime
