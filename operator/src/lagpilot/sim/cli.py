"""`lagpilot simulate`: replay a produce-rate trace through the scaling policies, side by side.

The command's flags, the trace families (``--generate``), the suite (``--suite``) and the sim-to-real
comparison of a demo run (``--from-demo``, sim/compare.py). The simulator itself: trace.py (input),
params.py (model figures), backlog.py and world.py (the model), policies.py (the policies and their
metrics), report.py (output); docs/decision.md documents the model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict
from typing import Any

from lagpilot.sim import tracegen
from lagpilot.sim.params import QUIESCE_PAUSE_S, SimParams
from lagpilot.sim.policies import DEFAULT_POLICIES, POLICIES, run_all
from lagpilot.sim.report import _plot_or_say, _suite_line, format_table, suite_header
from lagpilot.sim.trace import load_trace, trace_from_rows


def build_parser() -> argparse.ArgumentParser:
    d = SimParams()
    ap = argparse.ArgumentParser(prog="lagpilot simulate", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=None, help="CSV t_s,produce_msgs_per_s[,partition_weights]")
    ap.add_argument(
        "--generate",
        default=None,
        metavar="KIND",
        help="write a trace of a family (flash, hot-partition, diurnal, step, backfill, rolling-hot, long-flash) and exit",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed for --generate")
    ap.add_argument("--out", default=None, help="file for --generate (default: stdout)")
    ap.add_argument(
        "--suite",
        action="store_true",
        help="run every family x --suite-seeds and print lagpilot vs static vs keda vs keda_tuned",
    )
    ap.add_argument("--suite-seeds", default="0,1,2,3", help="comma-separated seeds for --suite")
    ap.add_argument(
        "--suite-kinds", default=",".join(tracegen.KINDS), help="comma-separated kinds for --suite"
    )
    ap.add_argument("--markdown", action="store_true", help="--suite: print a Markdown table")
    ap.add_argument(
        "--partitions", type=int, default=None, help=f"(default {d.partitions}; --generate: the family's)"
    )
    ap.add_argument(
        "--capacity",
        type=float,
        default=None,
        help=f"records/s one consumer processes (default {d.capacity})",
    )
    ap.add_argument("--sla-seconds", type=float, default=None, help=f"(default {d.sla_s})")
    ap.add_argument("--pod-start-seconds", type=float, default=d.pod_start_s)
    ap.add_argument("--drain-start-seconds", type=float, default=d.drain_start_s)
    ap.add_argument(
        "--drain-task-capacity",
        type=float,
        default=None,
        help="records/s of one drain task (default: --capacity)",
    )
    ap.add_argument(
        "--max-drain-tasks", "--max-tasks", type=int, default=d.max_drain_tasks, dest="max_drain_tasks"
    )
    ap.add_argument(
        "--split-factor",
        type=int,
        default=d.split_factor,
        help="spec.drain.splitFactor, an optional cap: a drain of n partitions runs at most n x this "
        "many tasks (default: unset, the CRD's default; each partition gets what its backlog "
        "and rate need, up to --max-tasks)",
    )
    ap.add_argument("--min-backlog-records", type=int, default=d.min_backlog_records)
    ap.add_argument(
        "--min-replicas",
        type=int,
        default=d.min_replicas,
        help="lagpilot's minReplicas, also KEDA's minReplicaCount in 'keda' and 'keda_tuned'",
    )
    ap.add_argument(
        "--handoff-pause-seconds",
        type=float,
        default=None,
        help=f"the live group's pause per hand-off (default: one batch, {d.batch_timeout_s:g}s, on the "
        f"consumer path; {QUIESCE_PAUSE_S:g}s with --handoff-quiesce)",
    )
    ap.add_argument(
        "--handoff-quiesce",
        action="store_true",
        help="the quiesce fallback: replicas held at 0 for the pause, then restored (pods start again)",
    )
    ap.add_argument(
        "--concurrent-drains",
        type=int,
        default=d.concurrent_drains,
        help="drains the executor runs side by side (today: 1)",
    )
    ap.add_argument(
        "--busy-drains",
        action=argparse.BooleanOptionalAction,
        default=d.busy_drains,
        help="the executor keeps a drain busy across a burst: its tasks take the next split without a "
        "new start-up (issue 25 item 2; spec.drain.busy, default: the CRD's, "
        f"{str(d.busy_drains).lower()}; --no-busy-drains: every drain ends with its range)",
    )
    ap.add_argument(
        "--learn-start-ups",
        action="store_true",
        default=d.learn_start_ups,
        help="issue 25 item 4: the planner starts from the operator's default figures (pod 30 s, drain "
        "start-up 20 s, warm 3 s) and learns this world's from what it observes (decide.learn); "
        "default: it is told the world's figures",
    )
    ap.add_argument(
        "--warm-runtime",
        choices=("off", "always", "on-demand"),
        default=d.warm_runtime,
        help="the CR's warm drain runtime: off (spec.drain.warmRuntime false, the CRD's default: every "
        "drain a cold Job, --drain-start-seconds), always (warmRuntime true: drains start in "
        "--drain-warm-start-seconds once it is Ready), on-demand (+ warmRuntimeCooldownSeconds: "
        "scaled up in bursts, Ready --drain-start-seconds later; a due drain's split waits for it)",
    )
    ap.add_argument(
        "--runtime-cooldown-seconds",
        type=float,
        default=d.runtime_cooldown_s,
        help="on-demand: spec.drain.warmRuntimeCooldownSeconds (kept this long after the last drain)",
    )
    ap.add_argument(
        "--drain-warm-start-seconds",
        type=float,
        default=d.drain_warm_start_s,
        help="a drain launched on a Ready warm runtime -> first batch",
    )
    ap.add_argument(
        "--drain-assist",
        action="store_true",
        help="the CR opts in to spec.drain.assistReplicas: run fewer replicas than the load needs when "
        "the drains carrying their excess save replicas (docs/decision.md 'Drain-assisted replica count')",
    )
    ap.add_argument(
        "--drain-assist-min-saving",
        type=float,
        default=None,
        help=f"with --drain-assist (implies it): the expected saving, in replicas, that makes it worth it "
        f"(default {d.drain_assist_min_saving:g})",
    )
    ap.add_argument(
        "--no-drain-assist",
        action="store_true",
        help="always size the group for the load, also in bursts (no drain-assisted count at all; "
        "the default, as spec.drain.assistReplicas: false, uses it only while the capped group "
        "cannot hold the load)",
    )
    ap.add_argument(
        "--scale-down-window-seconds",
        type=float,
        default=d.scale_down_window_s,
        help="lagpilot's scale-down stabilization window (spec.scaling.behavior.scaleDown; KEDA keeps "
        "the HPA's 300 s)",
    )
    ap.add_argument("--step-seconds", type=float, default=d.step_s)
    ap.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help=f"comma-separated subset of {','.join(POLICIES)}",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument(
        "--plot",
        default=None,
        help="PNG path (default: lagpilot-simulate.png in the temp dir; not drawn with --json unless given)",
    )
    ap.add_argument(
        "--from-demo",
        default=None,
        metavar="SUMMARY_JSON",
        help="predict a demo run: parameters from its summary.json (flags given explicitly win), "
        "--trace its trace.csv; prints predicted vs measured (lagpilot.sim.compare)",
    )
    return ap


def params_from_args(args: argparse.Namespace, family: tracegen.Family | None = None) -> SimParams:
    d = SimParams()

    def pick(v: Any, fam: Any, default: Any) -> Any:
        return v if v is not None else (fam if family is not None else default)

    return SimParams(
        partitions=pick(args.partitions, family.partitions if family else None, d.partitions),
        capacity=pick(args.capacity, family.capacity if family else None, d.capacity),
        sla_s=pick(args.sla_seconds, family.sla_s if family else None, d.sla_s),
        pod_start_s=args.pod_start_seconds,
        drain_start_s=args.drain_start_seconds,
        drain_task_capacity=args.drain_task_capacity,
        max_drain_tasks=args.max_drain_tasks,
        split_factor=args.split_factor,
        min_backlog_records=args.min_backlog_records,
        step_s=args.step_seconds,
        scale_down_window_s=args.scale_down_window_seconds,
        min_replicas=args.min_replicas,
        handoff_pause_s=args.handoff_pause_seconds,
        handoff_quiesce=args.handoff_quiesce,
        concurrent_drains=args.concurrent_drains,
        busy_drains=args.busy_drains,
        learn_start_ups=args.learn_start_ups,
        warm_runtime=args.warm_runtime,
        runtime_cooldown_s=args.runtime_cooldown_seconds,
        drain_warm_start_s=args.drain_warm_start_seconds,
        drain_assist=not args.no_drain_assist
        and (args.drain_assist or args.drain_assist_min_saving is not None),
        drain_assist_min_saving=(
            None
            if args.no_drain_assist
            else d.drain_assist_min_saving
            if args.drain_assist_min_saving is None
            else args.drain_assist_min_saving
        ),
    )


SUITE_SWEEP = (1, 10, 100, 1000, 10_000)


def run_suite(args: argparse.Namespace) -> int:
    """Every family x seed: lagpilot vs static vs keda vs keda_tuned (one row per trace)."""
    kinds = [k.strip() for k in args.suite_kinds.split(",") if k.strip()]
    seeds = [int(x) for x in args.suite_seeds.split(",") if x.strip()]
    rows = []
    for kind in kinds:
        fam = tracegen.SUITE[kind]
        params = params_from_args(args, fam)
        for seed in seeds:
            trace = trace_from_rows(tracegen.generate(kind, seed, params.partitions, params.capacity))
            res, _ = run_all(trace, params, sweep=SUITE_SWEEP, windows=(0.0, 300.0), top=1)
            lp = res["lagpilot"]
            row = {
                "kind": kind,
                "seed": seed,
                "partitions": params.partitions,
                "capacity": params.capacity,
                "sla_s": params.sla_s,
            }
            for name, r in res.items():
                row[name] = {
                    "within_sla_fraction": round(r.within_sla_fraction, 4),
                    "p99_latency_s": round(r.p99_latency_s, 1),
                    "cost_minutes": round(r.replica_minutes + r.drain_task_minutes, 1),
                    "drains": r.drains,
                }
            row["lagpilot_ok"] = (
                lp.within_sla_fraction >= 0.999
                and lp.replica_minutes + lp.drain_task_minutes <= res["keda"].replica_minutes
            )
            rows.append(row)
            if not args.json:
                print(_suite_line(row, args.markdown), flush=True)
    ok = sum(1 for r in rows if r["lagpilot_ok"])
    summary = f"lagpilot >= 0.999 within SLA at no more cost than keda on {ok}/{len(rows)} traces"
    if args.json:
        print(json.dumps({"suite": rows, "params": asdict(params_from_args(args, None)), "summary": summary}))
    else:
        print(summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_demo:  # sim-to-real for a `lagpilot demo` run (owned by the demo side: sim_compare)
        from lagpilot.sim.compare import main_from_demo

        if not args.trace:
            return _error("--from-demo needs --trace <out>/trace.csv")
        return main_from_demo(args, argv, parser)
    if args.generate:
        return _generate(args)
    if args.suite:
        if not args.json:
            print("within_sla_fraction / replica+drain-task minutes per policy")
            print(suite_header(args.markdown))
        return run_suite(args)
    if not args.trace:
        return _error("--trace FILE (or --generate KIND, or --suite) is required")
    return _simulate(args)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _generate(args: argparse.Namespace) -> int:
    """``--generate KIND``: a synthetic trace to ``--out`` (or stdout)."""
    if args.generate not in tracegen.KINDS:
        return _error(f"unknown trace kind {args.generate!r}; choose from {', '.join(tracegen.KINDS)}")
    text = tracegen.to_csv(tracegen.generate(args.generate, args.seed, args.partitions, args.capacity))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _simulate(args: argparse.Namespace) -> int:
    """``--trace FILE``: every policy asked for on the trace, as JSON or a table (and a plot)."""
    params = params_from_args(args)
    if params.partitions < 1 or params.capacity <= 0 or params.sla_s <= 0 or params.step_s <= 0:
        return _error("partitions, capacity, sla and step must be positive")
    try:
        trace = load_trace(args.trace)
    except (OSError, KeyError, ValueError) as exc:
        return _error(f"cannot read trace {args.trace}: {exc}")
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in POLICIES]
    if unknown:
        return _error(f"unknown policies {unknown}; choose from {POLICIES}")
    results, sweep = run_all(trace, params, policies=wanted)
    results = {k: results[k] for k in wanted if k in results}
    if args.json:
        out = {
            "policies": {k: v.to_dict() for k, v in results.items()},
            "params": {k: v for k, v in asdict(params).items()},
            "keda_sweep": sweep,
        }
        if args.plot:
            _plot_or_say(results, params, args.plot)
        print(json.dumps(out, sort_keys=False))
        return 0
    print(format_table(results))
    best = results.get("keda_tuned")
    if best is not None:
        print(
            f"keda_tuned: lagThreshold {best.extra.get('lag_threshold')}, scale-down window "
            f"{best.extra.get('scale_down_window_s'):g}s, cooldown {best.extra.get('cooldown_s'):g}s, "
            f"minReplicaCount {best.extra.get('min_replica_count')} (best of {len(sweep)} runs)"
        )
    _plot_or_say(results, params, args.plot or os.path.join(tempfile.gettempdir(), "lagpilot-simulate.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
