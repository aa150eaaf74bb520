#!/usr/bin/env python3
"""Benchmark of the Spark drain (issue 10): the partition-capped group vs a real drain with hand-off.

    .venv/bin/python bench/drain.py [--json] [--quick] [--records 720000] [--split-factor 4]

The case a drain exists for: a latency-bound sink (a fixed 50 ms per call, batch 100: at most
2,000 records/s per consumer) and a backlog on 3 partitions that the group, capped at 3 consumers,
needs >= 120 s to clear (720,000 records). Everything is counted in delivery ledgers
(the built-in ledger sink, lagpilot_runtime.sinks.ledger: PostgreSQL, one row per delivery, no key), so lost and duplicated offsets are
counted, not assumed. Two phases on the same topic, broker and run:

1. group: 3 `lagpilot consume` processes (fresh group) on the backlog. Its clock starts when the
   group has joined (every partition has a first commit), so no rebalance is inside its window; it
   stops when the committed offsets reach the end. `group_clear_s`, steady rate from the ledger.
2. drain with hand-off: a second fresh group of 3 consumers on the same backlog while a producer
   adds fresh records (`--live-rate` per partition). Once it has joined, the bench acts as the
   operator: split = the end offsets now; it writes the hand-off requests to the group's mailbox
   (lagpilot_runtime.handoff_mailbox: the live owners ack at a batch boundary and seek to the
   split, nobody stops), waits for every partition to resolve (`resolve`: group offset first, then
   the ack), launches `lagpilot drain` on [ack, split) cut into split_factor x 3 sub-ranges, and
   lets the live group go on with the fresh records. When the drain is done and the live group has
   caught up with the producer, it stops.

Reported: `speedup` (drain steady rate / group steady rate), `start_up_s` (plan: hand-off request
written → first drained record in the sink, the cost a user waits for), `launch_to_first_drained_s`
(`lagpilot drain` launched → first drained record: the Spark part of it), `end_to_end_speedup` (the group's time for the drained record count at its measured
wall rate / the drain's time from the hand-off request to its last record), `handoff_pause_s`
{max, p95} over the live group's partitions in every hand-off (the longest gap between two sink
commits of that partition from the request to 10 s after the ack), `lost`/`duplicated` over both
ledgers, the drain's start-up breakdown (its `drain_startup` milestones) and per-process CPU seconds
during the drain (Spark JVM, Python workers, drain driver, live consumers; broker and PostgreSQL are
shared with whatever else runs on the machine). Prints a table, then ONE JSON line last (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.drain.ab import AbRun, run_startup_ab  # noqa: E402
from bench.drain.measure import percentile  # noqa: E402
from bench.drain.run import run_drain, run_group  # noqa: E402
from bench.drain.variants import executor_variants, k8s_executor_variants, parse_variants  # noqa: E402
from bench.drain.workload import PARTITIONS, produce  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None, help="backlog (default 720,000; --quick 30,000)")
    ap.add_argument("--cost-ms", type=int, default=50, help="sink latency per call")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--split-factor", type=int, default=4, help="sub-ranges per partition (3 x 4 = 12 tasks)")
    ap.add_argument("--max-tasks", type=int, default=12)
    ap.add_argument(
        "--live-rate",
        type=int,
        default=None,
        help="fresh records/s per partition during the drain (default 200; --quick 50)",
    )
    ap.add_argument("--handoff-timeout", type=float, default=120.0)
    ap.add_argument("--quick", action="store_true", help="a short run for CI: 30,000 records")
    ap.add_argument(
        "--runtime",
        choices=("warm", "cold"),
        default="warm",
        help="warm: the drain runs in a warm drain runtime started before the run (spec.drain."
        "warmRuntime; its warm-up and idle memory reported); cold: the drain process starts Spark itself",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--startup-ab",
        nargs="+",
        metavar="NAME=ENVJSON",
        default=None,
        help="only the drain's start-up, variants side by side (no group phase, no hand-off): "
        'each NAME=ENVJSON is a variant\'s extra environment, e.g. old=\'{"LAGPILOT_DRAIN_WARM_WORKERS":"0"}\' '
        "new='{}'; the first is the base of the per-round differences (default backlog 36,000); "
        "LAGPILOT_DRAIN_RUNTIME=warm in a variant sends its drains to a warm runtime started before the rounds",
    )
    ap.add_argument("--rounds", type=int, default=4, help="rounds of --startup-ab / --executors")
    ap.add_argument(
        "--executors",
        default=None,
        metavar="1,2,4",
        help="the drain alone on Spark's local-cluster with 1, 2, 4 executor processes sharing the "
        "same --max-tasks slots, side by side (like --startup-ab; ratios vs the first count)",
    )
    ap.add_argument(
        "--k8s",
        action="store_true",
        help="with --executors: the counts on Spark's Kubernetes backend (client mode: the driver a host "
        "process bound to the real node's bridge gateway, as the chart's drain ServiceAccount; executor "
        "pods are containers of the consumer image, built from this checkout and loaded into the node, "
        "in a namespace enforcing Pod Security restricted) beside a 'local' variant (local[<max-tasks>,4]), "
        "the base of the ratios; Kafka and PostgreSQL through their listeners on the bridge",
    )
    args = ap.parse_args(argv)
    if args.k8s and not args.executors:
        ap.error("--k8s goes with --executors")
    variants = parse_variants(args.startup_ab) if args.startup_ab else None
    if args.executors:
        counts_arg = [int(x) for x in args.executors.split(",") if x.strip()]
        variants = (
            k8s_executor_variants(counts_arg, args.max_tasks)
            if args.k8s
            else executor_variants(counts_arg, args.max_tasks)
        )
    args.records = args.records or (
        120_000 if args.executors else 36_000 if variants else 30_000 if args.quick else 720_000
    )
    args.live_rate = args.live_rate if args.live_rate is not None else (50 if args.quick else 200)

    from confluent_kafka.admin import AdminClient, NewTopic

    from lagpilot_dev.stack import Stack

    stack = Stack()
    info, lease = stack.acquire(["kafka", "postgres", "spark"] + (["kube", "node"] if args.k8s else []))
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"lagpilot-bench-drain-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    load_before = os.getloadavg()
    try:
        bootstrap, dsn = str(info.bootstrap_servers), str(info.postgres_dsn)
        if args.k8s:
            # the executor containers reach the host only on the node's bridge: the broker's PODS
            # listener and PostgreSQL's bridge listener, which this host process reaches too (every
            # variant uses them, so the ratios compare like with like)
            bootstrap, dsn = k8s_addresses(stack)
        topic = f"bench-drain-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        counts = produce(bootstrap, topic, args.records)
        print(
            f"produced {sum(counts.values())} records on {PARTITIONS} partitions; work dir {workdir}",
            file=sys.stderr,
        )
        if variants:
            k8s = None
            if args.k8s:
                from lagpilot_dev.spark_k8s import NodeSparkK8s

                k8s = NodeSparkK8s(
                    stack.part("kube"),
                    stack.part("node"),
                    image=consumer_image_on_node(stack.part("node")),
                    secret_data={"dsn": dsn},
                    prefix="bench-drain-k8s",
                )
            try:
                if k8s is not None:
                    k8s.start()
                ab = run_startup_ab(
                    AbRun(bootstrap, topic, dsn, counts, list(info.spark_jars), args, workdir, k8s), variants
                )
            finally:
                if k8s is not None:
                    k8s.stop()
            return report_ab(ab, args, load_before)
        group = run_group(bootstrap, topic, dsn, counts, args, workdir)
        print(f"group: {group}", file=sys.stderr)
        drain = run_drain(bootstrap, topic, dsn, counts, list(info.spark_jars), args, workdir)
        print(f"drain: {drain}", file=sys.stderr)
    finally:
        stack.release(lease, stop=os.environ.get("LAGPILOT_KEEP_STACK", "") in ("", "0", "false"))
    return report_drain(group, drain, counts, args, load_before)


def k8s_addresses(stack: Any) -> tuple[str, str]:
    """(bootstrap, DSN) as pods on the real node reach Kafka and PostgreSQL (their bridge listeners)."""
    bootstrap, dsn = stack.part("kafka").pods_bootstrap_servers(), stack.part("postgres").pods_dsn()
    if not (bootstrap and dsn):
        raise SystemExit(
            "--k8s: the broker's PODS listener or PostgreSQL's bridge listener is missing (a part "
            "started before the node's bridge): restart the kafka / postgres part"
        )
    return str(bootstrap), str(dsn)


def consumer_image_on_node(node: Any) -> str:
    """The consumer image built from this checkout (cached layers) and loaded into the node under
    its content tag (the name the executor pods use, never pulled: another checkout's build may
    hold the plain name)."""
    from lagpilot_dev.images.build import IMAGES
    from lagpilot_dev.images.command import build_and_run
    from lagpilot_dev.node import cri_image_name

    planned = IMAGES["consumer"].content_reference()
    if node.image_id(cri_image_name(planned)) is not None:  # this content already there: no build
        print(f"executor image {planned} already on the node", file=sys.stderr)
        return planned
    report = build_and_run(("consumer",), run=False)
    built = str(report.builds["consumer"]["content_tag"])
    reference = built.removeprefix("localhost/")
    secs = node.load_built_image(built, reference=reference)
    print(f"executor image {reference} on the node ({secs} s)", file=sys.stderr)
    return reference


def report_ab(ab: dict[str, Any], args: argparse.Namespace, load_before: tuple[float, float, float]) -> int:
    """--startup-ab / --executors: the medians per variant, the differences vs the base, ONE JSON line last."""
    ab["load_avg_1m"] = {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}
    ab["cores"] = os.cpu_count()
    if args.executors:
        ab["mode"] = "executors_k8s" if args.k8s else "executors"
        ab["note"] = (
            f"{os.cpu_count()} cores on this host: every executor JVM and its Python workers share "
            "them, so more executors add processes, not CPU; on a cluster each executor brings its own"
        )
        print(ab["note"])
    if args.k8s:
        for name, v in ab["variants"].items():
            print(
                f"{name:<12} executor pods seen via the API {v.get('median_executor_pods_seen', '-')} "
                f"(running at once {v.get('median_executor_pods_running_max', '-')})"
            )
        print(f"median per-round ratio vs {ab['base']}: {ab['median_ratio_vs_base']}")
    for name, v in ab["variants"].items():
        print(
            f"{name:<12} launch->first drained {v['median_launch_to_first_drained_s']} s (median)  "
            f"launch->last drained {v['median_launch_to_last_drained_s']} s  "
            f"records/s {v['median_records_per_s']}  drain CPU {v['median_drain_cpu_s']} s  env {v['env']}"
        )
    print(
        f"median per-round difference vs {ab['base']}: {ab['median_diff_vs_base']}  lost {ab['lost']} "
        f"duplicated {ab['duplicated']}  load {ab['load_avg_1m']}"
    )
    if args.json:
        print(json.dumps(ab))
    return 0 if ab["lost"] == 0 and ab["duplicated"] == 0 else 1


def report_drain(
    group: dict[str, Any],
    drain: dict[str, Any],
    counts: dict[int, int],
    args: argparse.Namespace,
    load_before: tuple[float, float, float],
) -> int:
    """The group and the drain side by side, the figures, ONE JSON line last (--json)."""
    gaps = list(drain["handoff_gaps_s"].values())
    group_time_same = drain["records"] / group["wall_records_per_s"]
    drain_time = drain["plan_to_last_drained_s"]

    def r(x: Any, n: int = 2) -> Any:
        return round(x, n) if isinstance(x, float) else x

    result = {
        "records": sum(counts.values()),
        "partitions": PARTITIONS,
        "sink_ms_per_call": args.cost_ms,
        "batch": args.batch,
        "tasks": drain["tasks"],
        "quick": args.quick,
        "group_records_per_s": r(group["records_per_s"], 1),
        "group_clear_s": group["clear_s"],
        "drain_records_per_s": r(drain["records_per_s"], 1),
        "drained_records": drain["records"],
        "speedup": r(drain["records_per_s"] / group["records_per_s"])
        if drain["records_per_s"] and group["records_per_s"]
        else None,
        "start_up_s": r(drain["start_up_s"]),
        "launch_to_first_drained_s": r(drain["launch_to_first_drained_s"]),
        "handoff_ack_s": r(drain["handoff_ack_s"]),
        "end_to_end_speedup": r(group_time_same / drain_time) if drain_time > 0 else None,
        "handoff_pause_s": {"max": r(max(gaps)), "p95": r(percentile(gaps, 95)), "samples": len(gaps)},
        "lost": group["lost"] + drain["lost"],
        "duplicated": group["duplicated"] + drain["duplicated"],
        "startup_breakdown_s": drain["startup_breakdown"],
        "cpu_s_during_drain": drain["cpu_s"],
        "runtime": drain["runtime"],
        "runtime_warm_up_s": drain["runtime_warm_up_s"],
        "runtime_idle_pss_mb": drain["runtime_idle_pss_mb"],
        "load_avg_1m": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
    }
    print(f"{'path':<34}{'tasks':>6}{'records':>10}{'records/s':>11}{'time s':>9}{'lost':>6}{'dup':>6}")
    print(
        f"{'group (3 consumers, the cap)':<34}{args.consumers:>6}{group['records']:>10}{group['records_per_s'] or 0:>11.0f}"
        f"{group['clear_s']:>9.1f}{group['lost']:>6}{group['duplicated']:>6}"
    )
    print(
        f"{'drain + live group (hand-off)':<34}{drain['tasks']:>6}{drain['records']:>10}{drain['records_per_s'] or 0:>11.0f}"
        f"{drain_time:>9.1f}{drain['lost']:>6}{drain['duplicated']:>6}"
    )
    print(
        f"speedup {result['speedup']}  end_to_end_speedup {result['end_to_end_speedup']}  start_up_s "
        f"{result['start_up_s']}  launch_to_first_drained_s {result['launch_to_first_drained_s']}  handoff_pause_s "
        f"{result['handoff_pause_s']}"
    )
    if drain["runtime"] == "warm":
        print(
            f"warm drain runtime: warm-up {drain['runtime_warm_up_s']} s before the run, idle memory (PSS) "
            f"{drain['runtime_idle_pss_mb']} MB (kept up per group); start-up below is since the plan reached it"
        )
    print(f"drain start-up (s since process start): {drain['startup_breakdown']}")
    print(
        f"CPU seconds during the drain ({result['cpu_s_during_drain'].get('cores')} cores): {drain['cpu_s']}"
    )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
