"""Held-out evaluation of the planner over generated traces (issue 11), in the simulator.

    .venv/bin/python bench/planner_eval.py [--kinds flash,...] [--seeds 100-109,0-9] [--starts 90,20,6]
        [--concurrent-drains 1] [--json]

Each trace is `tracegen.generate(kind, seed)` with the family's `tracegen.SUITE` parameters, simulated
with pods 30 s, a 1 s hand-off pause, <= 16 drain tasks, otherwise the CRD's defaults (splitFactor
unset, warm runtime off, busy drains on: ``--no-busy-drains`` turns them off); lagpilot at each drain start (with ``--concurrent-drains`` drains side by side), KEDA once (it
does not drain). A run is ok when within-SLA >= 0.999 and replica + drain-task (+ idle runtime)
minutes <= KEDA's replica minutes. Families: flash, hot-partition, diurnal, step, backfill and (issue
25) rolling-hot, long-flash. Prints a Markdown table (or, with --json, one JSON object: runs and the counts).
"""

from __future__ import annotations

import argparse
import json
import sys

from lagpilot.sim import tracegen
from lagpilot.sim.params import SimParams
from lagpilot.sim.policies import run_policy
from lagpilot.sim.trace import trace_from_rows

KINDS = "flash,hot-partition,diurnal,step,backfill,rolling-hot,long-flash"


def seeds_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def evaluate(
    kinds: list[str],
    seeds: list[int],
    starts: list[float],
    concurrent: int = 1,
    warm_runtime: str = "off",
    cooldown_s: float = SimParams.runtime_cooldown_s,
    split_factor: int | None = SimParams.split_factor,
    busy_drains: bool = SimParams.busy_drains,
) -> list[dict]:
    rows = []
    for kind in kinds:
        fam = tracegen.SUITE[kind]
        for seed in seeds:
            trace = trace_from_rows(tracegen.generate(kind, seed, fam.partitions, fam.capacity))
            base = dict(
                partitions=fam.partitions,
                capacity=fam.capacity,
                sla_s=fam.sla_s,
                pod_start_s=30.0,
                handoff_pause_s=1.0,
                max_drain_tasks=16,
            )
            keda = run_policy(trace, SimParams(**base), "keda")
            for st in starts:
                lp = run_policy(
                    trace,
                    SimParams(
                        drain_start_s=st,
                        concurrent_drains=concurrent,
                        split_factor=split_factor,
                        warm_runtime=warm_runtime,
                        runtime_cooldown_s=cooldown_s,
                        busy_drains=busy_drains,
                        **base,
                    ),
                    "lagpilot",
                )
                runtime_min = lp.extra.get("drain_runtime_minutes", 0.0)
                cost = lp.replica_minutes + lp.drain_task_minutes + runtime_min
                rows.append(
                    {
                        "kind": kind,
                        "seed": seed,
                        "drain_start_s": st,
                        "concurrent": concurrent,
                        "warm_runtime": warm_runtime,
                        "runtime_minutes": runtime_min,
                        "busy_drains": busy_drains,
                        "busy_splits": lp.extra.get("busy_drain_splits", 0),
                        "within": round(lp.within_sla_fraction, 6),
                        "p99": round(lp.p99_latency_s, 1),
                        "cost": round(cost, 1),
                        "keda_cost": round(keda.replica_minutes, 1),
                        "keda_within": round(keda.within_sla_fraction, 4),
                        "drains": lp.drains,
                        "within_ok": lp.within_sla_fraction >= 0.999,
                        "ok": lp.within_sla_fraction >= 0.999 and cost <= keda.replica_minutes,
                    }
                )
                print(
                    f"# {kind} s{seed} {st:.0f}s c{concurrent} within {rows[-1]['within']} cost {rows[-1]['cost']} keda {rows[-1]['keda_cost']}",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default=KINDS)
    ap.add_argument("--seeds", default="100-109,0-9")
    ap.add_argument("--starts", default="90,20,6", help="drain start-up seconds, comma-separated")
    ap.add_argument(
        "--concurrent-drains",
        type=int,
        default=1,
        help="drains the simulated executor runs side by side (default 1, today's executor)",
    )
    ap.add_argument(
        "--warm-runtime",
        choices=("off", "always", "on-demand"),
        default="off",
        help="the simulated CR's warm drain runtime (cost includes its pod-minutes)",
    )
    ap.add_argument(
        "--runtime-cooldown-seconds",
        type=float,
        default=SimParams.runtime_cooldown_s,
        help="on-demand: spec.drain.warmRuntimeCooldownSeconds",
    )
    ap.add_argument(
        "--split-factor",
        type=int,
        default=None,
        help="spec.drain.splitFactor (an optional cap; default unset, the CRD's default)",
    )
    ap.add_argument(
        "--busy-drains",
        action=argparse.BooleanOptionalAction,
        default=SimParams.busy_drains,
        help="drains stay busy across a burst (issue 25 item 2: next split without a new start-up); "
        "default: the CRD's spec.drain.busy",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    kinds, starts = a.kinds.split(","), [float(x) for x in a.starts.split(",")]
    rows = evaluate(
        kinds,
        seeds_of(a.seeds),
        starts,
        a.concurrent_drains,
        a.warm_runtime,
        a.runtime_cooldown_seconds,
        a.split_factor,
        a.busy_drains,
    )
    if a.json:
        counts = {
            f"{k}@{st:.0f}": {
                "runs": len(rs),
                "within_ok": sum(r["within_ok"] for r in rs),
                "ok": sum(r["ok"] for r in rs),
                "below": {f"s{r['seed']}": r["within"] for r in rs if not r["within_ok"]},
            }
            for k in kinds
            for st in starts
            for rs in [[r for r in rows if r["kind"] == k and r["drain_start_s"] == st]]
        }
        print(json.dumps({"runs": rows, "counts": counts}))
        return 0
    print("| kind | drain start | seeds | within >= 0.999 | and cost <= keda | below 0.999 (within) |")
    print("|---|---|---|---|---|---|")
    for k in kinds:
        for st in starts:
            rs = [r for r in rows if r["kind"] == k and r["drain_start_s"] == st]
            bad = ", ".join(f"s{r['seed']} {r['within']:.4f}" for r in rs if not r["within_ok"])
            print(
                f"| {k} | {st:.0f} s | {len(rs)} | {sum(r['within_ok'] for r in rs)} | {sum(r['ok'] for r in rs)} | {bad or '-'} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
