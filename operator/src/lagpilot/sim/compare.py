"""Sim-to-real: predict a demo run with the simulator, side by side with what the demo measured.

    lagpilot simulate --trace <out>/trace.csv --from-demo <out>/summary.json [--json] [flags]

The demo (``lagpilot demo``) writes the exact trace it replayed (``trace.csv``, one row per second,
from the replay's start to its last observation) and, in ``summary.json``, the run's parameters
under ``sim_params`` — named as :class:`lagpilot.sim.params.SimParams` fields, measured in that run
where the demo can measure them (consumer and drain-task capacity from its delivery ledger, pod
start, drain start-up, hand-off pause) and taken from its spec otherwise — and the measured
results (``latency.within_sla_fraction``, ``latency.p99_s``, ``replica_minutes``,
``drain_task_minutes``; with the warm drain runtime on demand also ``runtime``, its minutes shown
next to the simulator's ``drain_runtime_minutes``, not judged). This module builds the simulator's
parameters from that (a flag given explicitly on the command line wins), runs the policies on the
trace and compares.

Agreement: within-SLA fraction within 5 percentage points; replica-minutes and drain-task-minutes
within 25 % of the measured value; the p99 latency is shown, not judged. Parameters the simulator
does not know (no ``SimParams`` field of that name) are listed as not modelled, never silently
dropped. Pure except :func:`main_from_demo` (reads the two files, prints).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from lagpilot.sim import (
    params as sim_params,
)
from lagpilot.sim import (
    policies as sim_policies,
)
from lagpilot.sim import (
    report as sim_report,
)
from lagpilot.sim import (
    trace as sim_trace,
)

METRICS = ("within_sla_fraction", "p99_latency_s", "replica_minutes", "drain_task_minutes")
# metric -> (kind, tolerance): "abs" = |predicted - measured| <= tol; "rel" = <= tol * measured
TOLERANCES: dict[str, tuple[str, float] | None] = {
    "within_sla_fraction": ("abs", 0.05),
    "p99_latency_s": None,
    "replica_minutes": ("rel", 0.25),
    "drain_task_minutes": ("rel", 0.25),
}
# CLI dests that are never simulator parameters
_NOT_PARAMS = {"trace", "from_demo", "json", "plot", "policies", "generate", "seed", "out", "help"}


def sim_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(sim_params.SimParams)}


def dest_to_field(dest: str, fields: set[str]) -> str | None:
    """``pod_start_seconds`` -> ``pod_start_s`` (the CLI's naming to ``SimParams``'), or None."""
    if dest in _NOT_PARAMS:
        return None
    for name in (dest, dest.replace("_seconds", "_s")):
        if name in fields:
            return name
    return None


def explicit_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """Only the options given on the command line (defaults suppressed), by dest."""
    p = argparse.ArgumentParser(add_help=False)
    for a in parser._actions:  # re-declare the same options with no defaults
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        kw: dict[str, Any] = {"dest": a.dest, "default": argparse.SUPPRESS}
        if a.nargs == 0:
            kw["action"] = "store_const"
            kw["const"] = a.const if a.const is not None else True
        else:
            kw["type"] = a.type
        p.add_argument(*a.option_strings, **kw)
    ns, _ = p.parse_known_args(list(argv))
    return vars(ns)


def params_from_summary(
    summary: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
) -> tuple[sim_params.SimParams, dict[str, Any], dict[str, Any]]:
    """(params, what was set, what the simulator does not model). ``overrides`` are CLI dests or
    field names; ``None`` values (not measured in the run) leave the simulator's default."""
    fields = sim_fields()
    used: dict[str, Any] = {}
    unknown: dict[str, Any] = {}
    for k, v in (summary.get("sim_params") or {}).items():
        if v is None:
            continue
        (used if k in fields else unknown)[k] = v
    for dest, v in (overrides or {}).items():
        name = dest_to_field(dest, fields)
        if name is not None and v is not None:
            used[name] = v
            unknown.pop(name, None)
    if used.get("reported_capacity") is not None:  # JSON lists -> the frozen dataclass' tuples
        used["reported_capacity"] = tuple((float(t), float(c)) for t, c in used["reported_capacity"])
    if "step_s" in fields and "step_s" not in used:
        used["step_s"] = 1.0  # the demo's trace has one row per second: step at least as fine
    return sim_params.SimParams(**used), used, unknown


def measured_from_summary(summary: Mapping[str, Any]) -> dict[str, float | None]:
    lat = summary.get("latency") or {}

    def num(x: Any) -> float | None:
        return None if x is None else float(x)

    return {
        "within_sla_fraction": num(lat.get("within_sla_fraction")),
        "p99_latency_s": num(lat.get("p99_s")),
        "replica_minutes": num(summary.get("replica_minutes")),
        "drain_task_minutes": num(summary.get("drain_task_minutes")),
    }


def judge(metric: str, predicted: float | None, measured: float | None) -> dict[str, Any]:
    """One row: the two values, the difference, the tolerance and whether it holds (None: not judged)."""
    tol = TOLERANCES.get(metric)
    row: dict[str, Any] = {
        "metric": metric,
        "predicted": predicted,
        "measured": measured,
        "difference": None,
        "tolerance": None,
        "ok": None,
    }
    if predicted is None or measured is None:
        return row
    diff = predicted - measured
    row["difference"] = diff
    if tol is None:
        return row
    kind, t = tol
    if kind == "abs":
        row["tolerance"] = f"±{t * 100:g} pp"
        row["ok"] = abs(diff) <= t + 1e-12
    else:
        row["tolerance"] = f"±{t * 100:g} %"
        # a measured 0 needs a predicted ~0 (nothing is within 25 % of zero but zero)
        row["ok"] = abs(diff) <= t * abs(measured) + 1e-9 if measured else abs(predicted) < 0.05
        row["relative"] = diff / measured if measured else (0.0 if abs(predicted) < 1e-9 else math.inf)
    return row


def compare(predicted: Mapping[str, Any], measured: Mapping[str, float | None]) -> list[dict[str, Any]]:
    return [
        judge(m, None if predicted.get(m) is None else float(predicted[m]), measured.get(m)) for m in METRICS
    ]


def runtime_comparison(predicted: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The warm drain runtime's minutes serving no drain: the simulator's ``drain_runtime_minutes``
    next to what the demo measured (``summary["runtime"]``, a run with the runtime on demand); shown,
    not judged. None when the demo did not measure the runtime."""
    rt = summary.get("runtime")
    if not rt:
        return None
    return {
        "predicted_idle_minutes": float(predicted.get("drain_runtime_minutes") or 0.0),
        "measured_idle_minutes": rt.get("idle_minutes"),
        "measured_up_minutes": rt.get("up_minutes"),
        "measured_scale_ups": rt.get("scale_ups"),
        "measured_scale_downs": rt.get("scale_downs"),
        "measured_warm_up_seconds": rt.get("warm_up_seconds"),
    }


def format_runtime(row: Mapping[str, Any]) -> str:
    def num(x: Any, fmt: str) -> str:
        return "—" if x is None else format(float(x), fmt)

    return (
        f"warm drain runtime minutes serving no drain (not judged): predicted "
        f"{num(row['predicted_idle_minutes'], '.1f')}, measured {num(row['measured_idle_minutes'], '.1f')} "
        f"(up {num(row['measured_up_minutes'], '.1f')} min, {row.get('measured_scale_ups')} scale-ups, "
        f"{row.get('measured_scale_downs')} scale-downs, warm-up {num(row['measured_warm_up_seconds'], '.1f')} s)"
    )


def _cell(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4f}" if metric == "within_sla_fraction" else f"{v:.1f}"


def _diff(row: Mapping[str, Any]) -> str:
    d = row.get("difference")
    if d is None:
        return "—"
    if row["metric"] == "within_sla_fraction":
        return f"{d * 100:+.1f} pp"
    rel = row.get("relative")
    return f"{d:+.1f}" + (f" ({rel * 100:+.0f} %)" if rel is not None and math.isfinite(rel) else "")


def format_comparison(rows: Sequence[Mapping[str, Any]]) -> str:
    head = f"{'metric':<22}{'predicted':>12}{'measured':>12}{'difference':>18}{'tolerance':>12}  verdict"
    out = [head]
    for r in rows:
        verdict = "—" if r["ok"] is None else ("agrees" if r["ok"] else "DISAGREES")
        out.append(
            f"{r['metric']:<22}{_cell(r['metric'], r['predicted']):>12}{_cell(r['metric'], r['measured']):>12}"
            f"{_diff(r):>18}{(r['tolerance'] or '—'):>12}  {verdict}"
        )
    return "\n".join(out)


def agrees(rows: Sequence[Mapping[str, Any]]) -> bool | None:
    judged = [r["ok"] for r in rows if r["ok"] is not None]
    return all(judged) if judged else None


def padded(trace: sim_trace.Trace, seconds: float) -> sim_trace.Trace:
    """The trace followed by ``seconds`` of no traffic (rows of 0 at the trace's own step)."""
    if not trace.times:
        return trace
    step = trace.end_s - trace.times[-1]
    n = max(0, math.ceil(seconds / step))
    return sim_trace.Trace(
        trace.times + tuple(trace.end_s + i * step for i in range(n)),
        trace.rates + (0.0,) * n,
        trace.weights + (None,) * n,
    )


LATENCY_KEYS = ("within_sla_fraction", "p99_latency_s", "max_latency_s")


def predict(trace: sim_trace.Trace, params: sim_params.SimParams, policies: Sequence[str]) -> dict[str, Any]:
    """Each policy's result on the trace (``PolicyResult`` objects).

    The demo waits until every record is processed, so its latency figures cover every record; the
    simulator's count only records processed by the end of the trace (plus those already older than
    the SLA). So each policy runs twice: on the trace as observed (cost: replica- and
    drain-task-minutes over the same window as the demo's) and on the trace followed by 10 x SLA of
    no traffic (latency: every record processed); a result takes its latency figures from the second.
    """
    out = {}
    longer = padded(trace, 10 * params.sla_s)
    for p in policies:
        res = sim_policies.run_policy(trace, params, p)
        if res.remaining > 0:
            full = sim_policies.run_policy(longer, params, p)
            res = dataclasses.replace(
                res,
                **{k: getattr(full, k) for k in LATENCY_KEYS},
                extra={**res.extra, "latency_from_padded_trace_s": longer.end_s},
            )
        out[p] = res
    return out


def baselines(trace: sim_trace.Trace, summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What static replicas (partition count) and KEDA (default lagThreshold) keep on the demo's trace
    with the demo's calibrated parameters: the demo prints these to show the load needed drains."""
    params, _, _ = params_from_summary(summary)
    out = {}
    for name, res in predict(trace, params, ("static", "keda")).items():
        d = res.to_dict()
        out[name] = {k: d.get(k) for k in ("within_sla_fraction", "p99_latency_s", "replica_minutes")}
    return out


def _describe_params(used: Mapping[str, Any], unknown: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    measured = set(summary.get("sim_params_measured") or [])
    parts = []
    for k in sorted(used):
        if k == "reported_capacity" and used[k]:
            series = used[k]
            parts.append(
                f"{k}={len(series)} points, {series[0][1]:g} at {series[0][0]:g} s .. "
                f"{series[-1][1]:g} at {series[-1][0]:g} s (the operator's estimate)"
            )
            continue
        parts.append(f"{k}={used[k]:g}" if isinstance(used[k], float) else f"{k}={used[k]}")
        if k in measured:
            parts[-1] += " (measured)"
    line = "parameters: " + ", ".join(parts)
    if unknown:
        line += "\nnot modelled by this simulator (ignored): " + ", ".join(
            f"{k}={v}" for k, v in sorted(unknown.items())
        )
    return line


def main_from_demo(
    args: argparse.Namespace, argv: Sequence[str] | None, parser: argparse.ArgumentParser
) -> int:
    """``lagpilot simulate --trace T --from-demo S``: predict the demo run, print the comparison."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with open(args.from_demo) as fh:
            summary = json.load(fh)
        trace = sim_trace.load_trace(args.trace)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: cannot read the demo's summary or trace: {exc}", file=sys.stderr)
        return 2
    if not summary.get("sim_params"):
        print(f"error: {args.from_demo} has no sim_params (written by an older demo?)", file=sys.stderr)
        return 2
    overrides = explicit_flags(parser, argv)
    params, used, unknown = params_from_summary(summary, overrides)
    wanted = [p.strip() for p in (args.policies or "").split(",") if p.strip() and p.strip() != "keda_tuned"]
    if "lagpilot" not in wanted:
        wanted.insert(0, "lagpilot")
    results = predict(trace, params, wanted)
    pred = results["lagpilot"].to_dict()
    rows = compare(pred, measured_from_summary(summary))
    verdict = agrees(rows)
    runtime = runtime_comparison(pred, summary)
    out = {
        "policies": {k: v.to_dict() for k, v in results.items()},
        "params": dataclasses.asdict(params),
        "not_modelled": unknown,
        "comparison": {r["metric"]: r for r in rows},
        "agrees": verdict,
        "demo": {"summary": args.from_demo, "profile": summary.get("profile"), "trace": args.trace},
    }
    if runtime is not None:
        out["runtime"] = runtime
    if args.json:
        print(json.dumps(out, sort_keys=False, default=str))
        return 0
    print(f"sim-to-real: demo run {args.from_demo} (profile {summary.get('profile')}), trace {args.trace}")
    print(_describe_params(used, unknown, summary))
    print()
    print("lagpilot, predicted by the simulator vs measured by the demo:")
    print(format_comparison(rows))
    if runtime is not None:
        print(format_runtime(runtime))
    print()
    print(sim_report.format_table(results))
    print(
        f"\nverdict: {'the simulator agrees with the run' if verdict else 'the simulator does NOT agree with the run' if verdict is False else 'nothing to judge'}"
        " (within-SLA ±5 pp; replica- and drain-task-minutes ±25 %)"
    )
    return 0
