"""The simulator's defaults are the CRD's (and the operator's): `lagpilot simulate`,
bench/planner_eval.py and the demo's sim-to-real describe a CR that leaves its spec at the defaults
unless a flag says otherwise (issue 25 item 5: the figures hold with the CRD's defaults)."""

from __future__ import annotations

import dataclasses

import pytest

from lagpilot.decide import step as step_mod
from lagpilot.model import spec as m
from lagpilot.model.validate import parse
from lagpilot.sim import cli
from lagpilot.sim.params import SimParams
from lagpilot.spec import GroupSpec

MINIMAL = {
    "kafka": {"bootstrapServers": "127.0.0.1:9092"},
    "topic": "simulated",
    "groupId": "simulated",
    "processing": {"sink": "log"},
}


def _operator_spec() -> GroupSpec:
    """The spec the operator runs a CR with nothing but its required fields under."""
    return GroupSpec.from_model(parse(MINIMAL))


# SimParams field -> (the model's class, its field): the CR fields the simulator stands for
CRD_FIELDS = {
    "busy_drains": (m.Drain, "busy"),
    "split_factor": (m.Drain, "split_factor"),
    "max_drain_tasks": (m.Drain, "max_tasks"),
    "min_backlog_records": (m.Drain, "min_backlog_records"),
    "drain_assist": (m.Drain, "assist_replicas"),
    "sla_s": (m.BatchConsumerGroupSpec, "catch_up_sla_seconds"),
    "min_replicas": (m.Scaling, "min_replicas"),
    "poll_interval_s": (m.Scaling, "poll_interval_seconds"),
    "scale_down_window_s": (m.ScaleDown, "stabilization_window_seconds"),
    "batch_max_records": (m.Batch, "max_records"),
}


@pytest.mark.parametrize("field", sorted(CRD_FIELDS))
def test_each_simparams_default_is_the_crds(field: str) -> None:
    cls, name = CRD_FIELDS[field]
    assert getattr(SimParams(), field) == cls.model_fields[name].default, field


def test_the_warm_runtime_mode_and_the_batch_timeout_are_the_crds() -> None:
    d = SimParams()
    warm = m.Drain.model_fields["warm_runtime"].default
    cooldown = m.Drain.model_fields["warm_runtime_cooldown_seconds"].default
    assert d.warm_runtime == ("off" if not warm else "always" if cooldown is None else "on-demand")
    assert d.batch_timeout_s * 1000 == m.Batch.model_fields["timeout_ms"].default


@pytest.mark.parametrize("partitions", [3, 6, 12, 40])
def test_the_simulated_cr_is_the_one_the_operator_parses_from_the_defaults(partitions: int) -> None:
    """Scaling and drain sections as the operator parses them (maxReplicas: the CRD's default 10, and
    at run time the partition count caps it, as the operator does)."""
    sim = SimParams(partitions=partitions).group_spec()
    op = _operator_spec()
    assert sim.drain == op.drain
    assert sim.batch == op.batch
    assert sim.catch_up_sla_seconds == op.catch_up_sla_seconds
    capped = min(op.scaling.max_replicas, partitions)
    assert sim.scaling == dataclasses.replace(op.scaling, max_replicas=capped)


def test_the_simulated_planner_takes_busy_drains_from_the_cr_as_the_operator_does() -> None:
    """reconcile/cycle.py builds step.Model(pod_start_s=..., drain_busy=spec.drain.busy). (Start-ups:
    the operator learns them; the simulator is told the world's figures unless --learn-start-ups, a
    decision of docs/decision.md "Learn from what is measured", not a CRD default.)"""
    op = step_mod.Model(drain_busy=_operator_spec().drain.busy)
    sim = SimParams().model()
    assert sim.drain_busy == op.drain_busy
    assert sim.detect_ineffective_scaling == op.detect_ineffective_scaling


def test_the_cli_and_the_bench_default_to_the_crd_and_can_turn_busy_drains_off() -> None:
    from bench import planner_eval

    busy = m.Drain.model_fields["busy"].default
    args = cli.build_parser().parse_args(["--trace", "x.csv"])
    assert cli.params_from_args(args).busy_drains is busy
    off = cli.build_parser().parse_args(["--trace", "x.csv", "--no-busy-drains"])
    assert cli.params_from_args(off).busy_drains is False
    import inspect

    assert inspect.signature(planner_eval.evaluate).parameters["busy_drains"].default is busy


def test_the_demos_sim_to_real_defaults_to_the_crds_busy_drains() -> None:
    """A demo spec without the setting (an older summary) is simulated with the CRD's default."""
    import inspect

    from lagpilot_dev.demo import measure as demo_measure

    busy = m.Drain.model_fields["busy"].default
    assert inspect.signature(demo_measure.sim_params).parameters["busy_drains"].default is busy
