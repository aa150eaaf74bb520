"""Sim-to-real comparison (lagpilot.sim.compare): tolerances, parameters from a demo summary, the CLI."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot.sim import cli as sim_cli
from lagpilot.sim import compare as sc
from lagpilot.sim import policies as sim_policies
from lagpilot.sim import trace as sim_trace


def _summary(**kw):
    base = {
        "profile": "fast",
        "sim_params": {
            "partitions": 3,
            "sla_s": 60.0,
            "capacity": 60.0,
            "drain_task_capacity": None,
            "pod_start_s": 4.0,
            "drain_start_s": 9.0,
            "max_drain_tasks": 12,
            "split_factor": 4,
            "min_backlog_records": 1000,
            "poll_interval_s": 5.0,
            "made_up_knob_s": 3.0,
        },
        "latency": {"within_sla_fraction": 0.97, "p99_s": 70.0},
        "replica_minutes": 4.0,
        "drain_task_minutes": 2.0,
    }
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "metric,pred,meas,ok",
    [
        ("within_sla_fraction", 0.99, 0.95, True),  # 4 pp
        ("within_sla_fraction", 0.99, 0.9399, False),  # 5.01 pp
        ("within_sla_fraction", 0.90, 0.95, True),  # -5 pp exactly
        ("replica_minutes", 12.4, 10.0, True),  # +24 %
        ("replica_minutes", 12.6, 10.0, False),  # +26 %
        ("replica_minutes", 7.4, 10.0, False),  # -26 %
        ("drain_task_minutes", 0.0, 0.0, True),  # no drain either side
        ("drain_task_minutes", 3.0, 0.0, False),  # predicted drains, none measured
        ("p99_latency_s", 300.0, 10.0, None),  # shown, not judged
        ("replica_minutes", None, 10.0, None),  # nothing to compare
    ],
    ids=[
        "sla-in",
        "sla-out",
        "sla-edge",
        "rm-in",
        "rm-out-high",
        "rm-out-low",
        "zero-zero",
        "zero-meas",
        "p99-info",
        "missing",
    ],
)
def test_judge(metric, pred, meas, ok) -> None:
    assert sc.judge(metric, pred, meas)["ok"] is ok


@given(st.floats(0.5, 1.0), st.floats(0.5, 1.0))
def test_within_sla_agreement_is_symmetric_and_5pp(a: float, b: float) -> None:
    r1, r2 = sc.judge("within_sla_fraction", a, b), sc.judge("within_sla_fraction", b, a)
    assert r1["ok"] == r2["ok"] == (abs(a - b) <= 0.05 + 1e-12)


def test_params_from_summary_uses_known_fields_reports_the_rest_and_flags_win() -> None:
    params, used, unknown = sc.params_from_summary(_summary(), {"pod_start_seconds": 30.0, "json": True})
    assert params.partitions == 3 and params.sla_s == 60.0 and params.capacity == 60.0
    assert params.pod_start_s == 30.0  # the explicit flag wins over the measured 4.0
    assert (
        params.drain_start_s == 9.0 and params.poll_interval_s == 5.0 and params.min_backlog_records == 1000
    )
    assert params.drain_task_capacity is None  # not measured: the simulator's default
    assert params.step_s == 1.0  # the demo's trace is one row a second
    assert unknown == {"made_up_knob_s": 3.0}
    assert "json" not in used


def test_dest_to_field() -> None:
    fields = sc.sim_fields()
    assert sc.dest_to_field("sla_seconds", fields) == "sla_s"
    assert sc.dest_to_field("capacity", fields) == "capacity"
    assert sc.dest_to_field("trace", fields) is None and sc.dest_to_field("nonsense", fields) is None


def test_explicit_flags_sees_only_what_was_typed() -> None:
    got = sc.explicit_flags(sim_cli.build_parser(), ["--trace", "x.csv", "--capacity", "50", "--json"])
    assert got == {"trace": "x.csv", "capacity": 50.0, "json": True}


def test_measured_and_compare() -> None:
    meas = sc.measured_from_summary(_summary())
    rows = sc.compare(
        {"within_sla_fraction": 0.99, "p99_latency_s": 50, "replica_minutes": 4.5, "drain_task_minutes": 3.0},
        meas,
    )
    by = {r["metric"]: r for r in rows}
    assert by["within_sla_fraction"]["ok"] is True and by["replica_minutes"]["ok"] is True
    assert by["drain_task_minutes"]["ok"] is False  # +50 %
    assert sc.agrees(rows) is False
    table = sc.format_comparison(rows)
    assert "DISAGREES" in table and "+2.0 pp" in table and "+50 %" in table


def _trace_csv(path, rows):
    path.write_text("t_s,produce_msgs_per_s\n" + "".join(f"{t},{r}\n" for t, r in rows))


def test_cli_from_demo_predicts_and_compares(tmp_path, capsys) -> None:
    # a burst 3x what the capped group can do, then quiet: one row a second, as the demo writes it
    rows = (
        [(t, 20.0) for t in range(0, 20)]
        + [(t, 540.0) for t in range(20, 80)]
        + [(t, 5.0) for t in range(80, 300)]
    )
    trace = tmp_path / "trace.csv"
    _trace_csv(trace, rows)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(_summary()))
    rc = sim_cli.main(["--trace", str(trace), "--from-demo", str(summary), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["comparison"]) == set(sc.METRICS)
    assert out["params"]["capacity"] == 60.0 and out["params"]["step_s"] == 1.0
    assert out["not_modelled"] == {"made_up_knob_s": 3.0}
    lp = out["policies"]["lagpilot"]
    assert out["comparison"]["within_sla_fraction"]["predicted"] == pytest.approx(lp["within_sla_fraction"])
    assert lp["produced"] == pytest.approx(sum(r for _, r in rows), rel=1e-6)
    rc = sim_cli.main(["--trace", str(trace), "--from-demo", str(summary)])
    text = capsys.readouterr().out
    assert rc == 0 and "predicted" in text and "measured" in text and "verdict" in text


def test_baselines_on_a_burst_the_capped_group_cannot_hold(tmp_path) -> None:
    rows = (
        [(t, 20.0) for t in range(0, 20)]
        + [(t, 540.0) for t in range(20, 140)]
        + [(t, 5.0) for t in range(140, 600)]
    )
    trace = tmp_path / "trace.csv"
    _trace_csv(trace, rows)
    got = sc.baselines(sim_trace.load_trace(str(trace)), _summary())
    assert set(got) == {"static", "keda"}
    # 3 consumers x 60/s = 180/s against 540/s for 2 min with a 60 s SLA: far from the SLA
    assert got["static"]["within_sla_fraction"] < 0.8 and got["keda"]["within_sla_fraction"] < 0.8
    assert not math.isnan(got["static"]["replica_minutes"])


def test_cli_from_demo_without_sim_params_is_an_error(tmp_path, capsys) -> None:
    trace = tmp_path / "trace.csv"
    _trace_csv(trace, [(0, 1.0), (1, 1.0)])
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"profile": "old"}))
    assert sim_cli.main(["--trace", str(trace), "--from-demo", str(summary)]) == 2
    assert "sim_params" in capsys.readouterr().err


def test_latency_covers_every_record_even_when_the_observed_window_ends_first(tmp_path) -> None:
    """The demo's latency counts every record (it waits for all); the simulator's result on a
    window that ends while a backlog remains would leave the not-yet-late ones out. predict takes
    the latency figures from the trace padded with quiet, the cost from the window as observed."""
    rows = (
        [(t, 20.0) for t in range(0, 20)]
        + [(t, 540.0) for t in range(20, 80)]
        + [(t, 0.0) for t in range(80, 100)]
    )
    trace = tmp_path / "trace.csv"
    _trace_csv(trace, rows)
    tr = sim_trace.load_trace(str(trace))
    params, _, _ = sc.params_from_summary(_summary())
    short = sim_policies.run_policy(tr, params, "static")
    assert short.remaining > 0
    got = sc.predict(tr, params, ("static",))["static"]
    full = sim_policies.run_policy(sc.padded(tr, 600), params, "static")
    assert got.within_sla_fraction == full.within_sla_fraction < short.within_sla_fraction
    assert got.replica_minutes == short.replica_minutes  # the cost over the observed window
    assert sc.padded(tr, 5).times[-5:] == (100.0, 101.0, 102.0, 103.0, 104.0)
