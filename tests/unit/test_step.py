"""The one decision step: pure, built from the parsed spec, the hand-off's hold rule, and the single
function both the operator's cycle and the simulator call."""

from __future__ import annotations

import dataclasses

import pytest

from lagpilot.decide import handoff
from lagpilot.decide import step as step_mod
from lagpilot.decide.drain_policy import DrainPolicy
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.decide.scaling import ScalingPolicy
from lagpilot.sim import params as simulate_params
from lagpilot.sim import policies as simulate_policies
from lagpilot.sim import trace as simulate_trace
from lagpilot.sim import world as simulate_world
from lagpilot.spec import parse_spec

BASE = {"kafka": {"bootstrapServers": "127.0.0.1:9092"}, "topic": "t", "groupId": "g"}


def snap(at: float, ends: list[int], committed: list[int], cap: float | None = 100.0):  # type: ignore[no-untyped-def]
    parts = [PartitionOffsets(i, 0, e, c) for i, (e, c) in enumerate(zip(ends, committed, strict=False))]
    return snapshot(at, parts, {i: cap for i in range(len(ends))} if cap else {})


def run(spec, steps, drains=()):  # type: ignore[no-untyped-def]
    state = step_mod.StepState()
    out = None
    for at, ends, committed, cur in steps:
        out, state = step_mod.step(
            state, step_mod.StepObservation(snap(at, ends, committed), cur, tuple(drains)), spec, at
        )
    return out, state


def test_policies_come_from_the_parsed_spec_with_one_default_per_knob() -> None:
    pol = step_mod.Policies.from_group_spec(parse_spec(BASE))
    assert pol.scaling == ScalingPolicy()  # the parse defaults are the policy defaults
    assert pol.drain is not None
    assert (pol.drain.split_factor, pol.drain.max_tasks, pol.drain.min_backlog_records) == (None, 16, 10_000)
    spec = parse_spec(
        {
            **BASE,
            "catchUpSLASeconds": 120,
            "scaling": {"minReplicas": 2, "maxReplicas": 5},
            "drain": {"cancel": True},
        }
    )
    pol = step_mod.Policies.from_group_spec(spec, step_mod.Model(pod_start_s=7, drain_start_s=11))
    assert (
        pol.scaling.min_replicas,
        pol.scaling.max_replicas,
        pol.scaling.sla_s,
        pol.scaling.pod_start_s,
    ) == (2, 5, 120, 7)
    assert pol.drain is None  # cancelled: no drain planned
    on = step_mod.Policies.from_group_spec(
        parse_spec(BASE), step_mod.Model(drain_start_s=11, handoff_pause_s=3)
    )
    assert on.drain is not None and (on.drain.start_up_s, on.drain.handoff_s) == (11, 3)
    assert ScalingPolicy.from_group_spec(spec) == ScalingPolicy(min_replicas=2, max_replicas=5, sla_s=120)
    assert DrainPolicy.from_group_spec(parse_spec(BASE)) == DrainPolicy()
    # spec.drain.assistReplicas: the assisted count always (opt-in) or only in bursts (the default)
    assert not pol_default_assist(BASE).assist_always
    opt = {**BASE, "drain": {"assistReplicas": True}}
    assert pol_default_assist(opt).assist_always and pol_default_assist(opt).assist_min_saving == 1.0
    assert DrainPolicy.from_group_spec(parse_spec(opt)) == DrainPolicy(assist_always=True)
    never = step_mod.Policies.from_group_spec(
        parse_spec(BASE), step_mod.Model(drain_assist_min_saving=None)
    ).drain
    assert never is not None and never.assist_min_saving is None


def pol_default_assist(raw):  # type: ignore[no-untyped-def]
    drain = step_mod.Policies.from_group_spec(parse_spec(raw)).drain
    assert drain is not None
    return drain


def test_step_is_pure_and_carries_its_state() -> None:
    spec = parse_spec(BASE)
    steps = [
        (0.0, [1000, 1000, 1000], [1000, 1000, 1000], 1),
        (15.0, [4000, 4000, 4000], [1000, 1000, 1000], 1),
    ]
    a, sa = run(spec, steps)
    b, sb = run(spec, steps)
    assert a == b and sa == sb
    assert sa.estimator is not None and sa.estimator.produce_rate == pytest.approx(600.0)
    assert sa.history.recommendations  # the stabilization window remembers this step
    # the state round-trips through the memory the operator keeps (the ConfigMap's JSON)
    import json

    back = step_mod.StepState.from_memory(json.loads(json.dumps(sa.to_memory())))
    assert back.history == sa.history and back.estimator is not None
    assert back.estimator.partitions == sa.estimator.partitions and back.estimator.at_s == sa.estimator.at_s
    assert a.hold is None and not a.held and a.replicas == a.decision.desired_replicas


def _drain(**kw):  # type: ignore[no-untyped-def]
    base = handoff.DrainStatus(
        id=1,
        phase=handoff.Phase.PLANNED,
        ranges=(handoff.PartitionRange(0, split=100),),
        restore_replicas=2,
        planned_at=0.0,
    )
    return dataclasses.replace(base, **kw)


def test_hand_off_hold_comes_from_the_hand_off_rule() -> None:
    spec = parse_spec(BASE)
    steps = [
        (0.0, [1000, 1000, 1000], [1000, 1000, 1000], 2),
        (15.0, [9000, 9000, 9000], [1000, 1000, 1000], 2),
    ]
    quiesce = _drain(quiesced_at=0.0)
    out, _ = run(spec, steps, drains=(quiesce,))
    assert out.hold == handoff.replicas_override(quiesce) == 0
    assert out.replicas == 0 and out.held
    running = _drain(phase=handoff.Phase.RUNNING, handed_off_at=1.0, started_at=1.0, quiesced_at=0.0)
    out, _ = run(spec, steps, drains=(running,))
    assert out.hold is None and not out.held and out.replicas == out.decision.desired_replicas


def test_drain_view_reads_the_hand_off_status() -> None:
    planned = _drain()
    running = _drain(
        id=2,
        phase=handoff.Phase.RUNNING,
        handed_off_at=5.0,
        sub_ranges=(handoff.SubProgress(0, 0, 0, 50, 0), handoff.SubProgress(0, 1, 50, 100, 100)),
    )
    done = _drain(id=0, phase=handoff.Phase.VERIFIED, finished_at=42.0)
    v = step_mod.drain_view((planned, running, done), None)
    assert v["drains_in_flight"] == 2 and v["drain_active"]
    assert v["tasks_in_flight"] == 1  # one sub-range not done
    assert v["busy_partitions"] == (0,)  # the planned one is not handed off yet
    assert v["last_drain_end_s"] == 42.0
    assert step_mod.drain_view((), 7.0)["last_drain_end_s"] == 7.0


def test_the_simulator_and_the_operator_call_the_same_step(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    real = step_mod.step

    def counting(*a, **kw):  # type: ignore[no-untyped-def]
        calls.append(a[3])
        return real(*a, **kw)

    monkeypatch.setattr(step_mod, "step", counting)
    trace = simulate_trace.parse_trace(["t_s,produce_msgs_per_s", "0,10", "60,10"])
    simulate_policies.run_policy(trace, simulate_params.SimParams(partitions=2, capacity=100), "lagpilot")
    assert len(calls) == 8  # every 15 s poll of the 120 s trace went through step()
    # the operator's cycle: tests/unit/test_handlers_reconcile.py::test_cycle_decides_through_the_step
    sim_modules = (simulate_params, simulate_policies, simulate_trace, simulate_world)
    assert not [m for m in sim_modules if hasattr(m, "decide") or hasattr(m, "ScalingPolicy")]


@pytest.mark.parametrize("tolerance", [0, 0.5, 1], ids=["zero", "half", "one"])
def test_every_tolerance_the_parser_accepts_builds_policies(tolerance: float) -> None:
    """The CRD and spec.py allow scaling.tolerance in [0, 1]; the policy built from the parsed spec
    must accept the same range (it rejected 1, so a valid CR crashed every cycle)."""
    spec = parse_spec({**BASE, "scaling": {"tolerance": tolerance}})
    assert step_mod.Policies.from_group_spec(spec).scaling.tolerance == tolerance
