"""The drain's start-up alone, variants side by side (bench/drain.py --startup-ab, --executors [--k8s]):
each round, each variant drains the same backlog as a fresh drain launched as a process, cold or sent
to a warm runtime; per round launch -> first/last drained record, steady rate, the drain's CPU, its
start-up milestones and (--k8s) its executor pods; medians and per-round differences vs the base."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.drain.measure import CpuSampler
from bench.drain.run import WarmRuntime, make_plan, start_drain
from bench.drain.variants import (
    K8S_CORES_ENV,
    K8S_EXECUTORS_ENV,
    k8s_drain_env,
    median_diffs,
    median_of,
    median_ratios,
    round_order,
)
from bench.drain.workload import base_env, drain_env, wait_until
from lagpilot_runtime.sinks import ledger

DRAIN_CPU_BUCKETS = ("spark_jvm", "python_workers", "drain_driver")


class PodWatch(threading.Thread):
    """Polls the API server (0.5 s) for the executor pods of one drain (label lagpilot.io/bench-run):
    names seen, the most Running at once."""

    def __init__(self, k8s: Any, run_label: str) -> None:
        super().__init__(daemon=True)
        self.k8s, self.selector = k8s, f"spark-role=executor,lagpilot.io/bench-run={run_label}"
        self.seen: set[str] = set()
        self.running_max = 0
        self.stop_evt = threading.Event()

    def poll(self) -> int:
        from lagpilot_dev.spark_k8s import executor_summary

        pods = self.k8s.executor_pods(self.selector)
        self.seen.update(p["metadata"]["name"] for p in pods)
        self.running_max = max(self.running_max, executor_summary(pods)["running"])
        return len(pods)

    def run(self) -> None:
        while not self.stop_evt.wait(0.5):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a failed poll: the next one counts
                pass

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(10)


@dataclass(frozen=True)
class AbRun:
    """What every drain of the A/B shares: the stack, the backlog, the options, the work dir and
    (--k8s) Spark's Kubernetes backend on the real node (lagpilot_dev.spark_k8s.NodeSparkK8s)."""

    bootstrap: str
    topic: str
    dsn: str
    counts: dict[int, int]
    jars: list[str]
    args: argparse.Namespace
    workdir: Path
    k8s: Any = None


@dataclass(frozen=True)
class Target:
    """Where a variant's drain goes: a group, its ledger table, the drain's environment (the variant's
    extra environment included) and, for a warm variant, the runtime its drains are sent to."""

    group: str
    table: str
    env: dict[str, str]
    runtime: WarmRuntime | None = None


def new_target(run: AbRun, extra: dict[str, str]) -> Target:
    """A fresh group and ledger table, and the drain's environment for them."""
    group, table = f"bench-ab-{uuid.uuid4().hex[:6]}", f"bench_ab_{uuid.uuid4().hex[:8]}"
    ledger.create_table(run.dsn, table)
    env = base_env(run.bootstrap, run.topic, group, run.dsn, table, run.args.cost_ms, run.args.batch)
    return Target(group, table, drain_env(env, run.jars, extra))


def run_startup_ab(run: AbRun, variants: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The drain's start-up alone, variants side by side: per round, each variant (its extra
    environment) drains the same backlog as a fresh drain (fresh progress groups, fresh ledger),
    launched as a process; launch -> first drained record in the sink, steady rate, the drain's
    CPU seconds and its start-up milestones. The order alternates per round (load drifts)."""
    # a variant with LAGPILOT_DRAIN_RUNTIME=warm (a bench switch) sends its drains to one warm
    # runtime, started before the rounds (the operator keeps it up per group): one group and ledger
    # table for all its rounds, each round a fresh drain id, counted by that id
    warm: dict[str, Target] = {}
    try:
        for name, extra in variants.items():
            if extra.get("LAGPILOT_DRAIN_RUNTIME") == "warm":
                t = new_target(run, extra)
                warm[name] = Target(
                    t.group, t.table, t.env, WarmRuntime(t.env, run.args.max_tasks, run.workdir)
                )
        rows: dict[str, list[dict[str, Any]]] = {n: [] for n in variants}
        for rnd in range(run.args.rounds):
            for name in round_order(list(variants), rnd):
                target = warm[name] if name in warm else new_target(run, variants[name])
                row = drain_round(run, name, variants[name], rnd, target)
                rows[name].append(row)
                print(f"round {rnd} {name}: {json.dumps(row)}", file=sys.stderr, flush=True)
        return ab_result(run, variants, rows)
    finally:
        for t in warm.values():
            if t.runtime is not None:
                t.runtime.stop()


def drain_round(run: AbRun, name: str, extra: dict[str, str], rnd: int, target: Target) -> dict[str, Any]:
    """One variant's drain of the whole backlog in one round: its row."""
    args, workdir, k8s = run.args, run.workdir, run.k8s
    ranges = {p: (0, n) for p, n in run.counts.items()}
    # drain ids are numbers (the warm runtime orders attempts by them): a fresh, growing one per round
    plan = make_plan(str(time.time_ns() // 1000), run.topic, target.group, ranges, args)
    env = target.runtime.job_env(target.env, plan) if target.runtime else target.env
    drain_id = plan.drain_id if target.runtime else None
    watch = None
    if k8s is not None and K8S_EXECUTORS_ENV in extra:
        run_label = f"{name}-{rnd}-{plan.drain_id}"
        env = k8s_drain_env(
            env,
            k8s,
            int(extra[K8S_EXECUTORS_ENV]),
            int(extra[K8S_CORES_ENV]),
            f"bench-{plan.drain_id}",
            run_label,
            k8s.image,
        )
        watch = PodWatch(k8s, run_label)
        watch.start()
    summary_file = workdir / f"ab-{name}-{rnd}.json"
    log_path = workdir / f"ab-{name}-{rnd}.log"
    load = os.getloadavg()[0]
    t_launch = time.time()
    with open(log_path, "wb") as log:
        proc = start_drain(plan, env, summary_file, log)
        cpu = CpuSampler(
            [proc.pid] + ([target.runtime.proc.pid] if target.runtime else []),
            [],
            # the executor containers' processes, as the node's runtime reports them (crictl)
            k8s.running_pids if watch else None,
        )
        cpu.start()
        try:
            rc = proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:  # interrupted: the drain (its own process group) goes too
                os.killpg(proc.pid, signal.SIGKILL)
        cpu_s = cpu.stop()
    pods_row = executor_pods_row(watch, name, log_path) if watch is not None else {}
    if rc != 0:
        raise RuntimeError(f"lagpilot drain ({name}) exited {rc}: see {workdir}")
    st = ledger.stats(run.dsn, target.table, ranges, source="drain", drain_id=drain_id)
    steady = (st["last_at"] or 0) - (st["first_at"] or 0)
    summary = json.loads(summary_file.read_text())
    return {
        "round": rnd,
        "load_1m": round(load, 1),
        "launch_to_first_drained_s": round(st["first_at"] - t_launch, 2) if st["first_at"] else None,
        "launch_to_last_drained_s": round(st["last_at"] - t_launch, 2) if st["last_at"] else None,
        "records_per_s": round(sum(run.counts.values()) / steady) if steady > 0 else None,
        "drain_cpu_s": round(sum(v for k, v in cpu_s.items() if k in DRAIN_CPU_BUCKETS), 1),
        "lost": st["lost"],
        "duplicated": st["duplicated"],
        "startup": summary.get("startup"),
        **pods_row,
    }


def executor_pods_row(watch: PodWatch, name: str, log_path: Path) -> dict[str, Any]:
    """--k8s: the executor pods the API server showed for one drain, once the driver has exited."""
    watch.stop()
    watch.poll()
    t_end = time.time()
    # Spark deletes its executor pods when the driver stops; the kubelet then ends their containers
    left = wait_until(lambda: watch.poll() == 0 or None, f"executor pods of {name} deleted", 120, 0.5)
    log_text = log_path.read_text(errors="replace")
    return {
        "executor_pods_seen": len(watch.seen),
        "executor_pods_running_max": watch.running_max,
        "executor_pods_gone_after_exit_s": round(time.time() - t_end, 1) if left else None,
        # the driver acts as the chart's drain ServiceAccount: any RBAC refusal shows here
        "driver_log_forbidden": sum(1 for ln in log_text.splitlines() if "Forbidden" in ln or " 403" in ln),
    }


def ab_result(
    run: AbRun, variants: dict[str, dict[str, str]], rows: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Medians per variant and per-round differences (and, --k8s, ratios) vs the first variant."""
    base = next(iter(variants))

    def med(name: str, key: str) -> float | None:
        return median_of(rows[name], key)

    out = {
        "mode": "startup_ab",
        "records": sum(run.counts.values()),
        "rounds": run.args.rounds,
        "base": base,
        "variants": {
            n: {
                "env": variants[n],
                "median_launch_to_first_drained_s": med(n, "launch_to_first_drained_s"),
                "median_launch_to_last_drained_s": med(n, "launch_to_last_drained_s"),
                "median_records_per_s": med(n, "records_per_s"),
                "median_drain_cpu_s": med(n, "drain_cpu_s"),
                "rounds": rows[n],
            }
            for n in variants
        },
        "median_diff_vs_base": {
            "launch_to_first_drained_s": median_diffs(rows, "launch_to_first_drained_s", base),
            "launch_to_last_drained_s": median_diffs(rows, "launch_to_last_drained_s", base),
            "records_per_s": median_diffs(rows, "records_per_s", base),
            "records_per_s_ratio": median_ratios(rows, "records_per_s", base),
            "drain_cpu_s": median_diffs(rows, "drain_cpu_s", base),
        },
        "lost": sum(r["lost"] for rs in rows.values() for r in rs),
        "duplicated": sum(r["duplicated"] for rs in rows.values() for r in rs),
    }
    k8s = run.k8s
    if k8s is not None:
        out["median_ratio_vs_base"] = {
            k: median_ratios(rows, k, base)
            for k in ("launch_to_first_drained_s", "launch_to_last_drained_s", "records_per_s", "drain_cpu_s")
        }
        for n, v in out["variants"].items():
            if K8S_EXECUTORS_ENV in variants[n]:
                v["median_executor_pods_seen"] = med(n, "executor_pods_seen")
                v["median_executor_pods_running_max"] = med(n, "executor_pods_running_max")
        out["k8s"] = {
            "master": k8s.master,
            "namespace": k8s.namespace,
            "service_account": k8s.service_account,
            "executor_memory": "512m",
            "driver": f"host process (client mode) at {k8s.driver_host} (the node's bridge gateway), "
            f"the drain ServiceAccount's token; executors: {k8s.image} containers on the real node",
        }
    return out
