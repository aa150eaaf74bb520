#!/usr/bin/env python3
"""Benchmark of the Spark drain (issue 6): the partition-capped group vs the drain, side by side.

    .venv/bin/python bench/drain.py [--json] [--records 300000] [--split-factors 4] [--cost-ms 50]

Starts (or reuses) the dev stack's Kafka, PostgreSQL and Spark jars, fills one 3-partition topic
with N records, then processes the whole topic twice, each time into its own ledger table
(PostgreSQL, no primary key, one row per processed offset, so lost and duplicated offsets are
counted, not assumed):

- group: 3 `lagpilot consume` processes (one per partition: the cap), batch 500;
- drain: `lagpilot drain` on the range [0, end) of every partition, split into split_factor x 3
  Spark tasks (local mode, every task at once), batch 500.

The sink costs a fixed 50 ms per call (COPY of the batch's offsets into the ledger, then sleep to
50 ms): latency-bound, like the seeds' sinks. Rates: records / (last batch end - first batch
start) from the ledger's timestamps, i.e. steady-state processing; the drain's start-up overhead
(process launch -> first batch done: JVM, SparkSession, Kafka relations, Python workers) is
reported separately, with the wall-clock speed-up including it. `--split-factors 1,2,4,8` repeats
the drain for each factor (how the speed-up scales). Prints a table; with --json one JSON line last.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PARTITIONS = 3


def produce(bootstrap: str, topic: str, n: int) -> dict[int, int]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000})
    counts = {i: 0 for i in range(PARTITIONS)}
    for i in range(n):
        part = i % PARTITIONS
        while True:
            try:
                p.produce(topic, key=b"%d" % (i % 1000), value=b'{"id":%d}' % i, partition=part)
                break
            except BufferError:
                p.poll(0.05)
        counts[part] += 1
    if p.flush(120) != 0:
        raise RuntimeError("producer could not deliver every record")
    return counts


def ledger_stats(dsn: str, table: str, counts: dict[int, int]) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows, distinct, t0, t1 = conn.execute(
            f'SELECT count(*), count(DISTINCT (partition, "offset")), min(at), max(at) FROM {table}').fetchone()
        outside = conn.execute(
            f'SELECT count(*) FROM {table} WHERE "offset" < 0 OR ' + " OR ".join(
                f'(partition = {p} AND "offset" >= {n})' for p, n in counts.items())).fetchone()[0]
    total = sum(counts.values())
    return {"rows": int(rows), "distinct": int(distinct), "lost": total - int(distinct) + int(outside),
            "duplicated": int(rows) - int(distinct), "first_at": t0, "last_at": t1}


def base_env(bootstrap: str, topic: str, group: str, dsn: str, table: str, cost_ms: int, batch: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
    env.update({
        "PYTHONPATH": str(REPO), "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap, "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group, "LAGPILOT_BATCH_MAX_RECORDS": str(batch), "LAGPILOT_BATCH_TIMEOUT_MS": "200",
        "LAGPILOT_HANDLER": "tests.real.drain_handlers:ledger",
        "LAGPILOT_HANDLER_CONFIG": json.dumps({"table": table, "cost_ms": str(cost_ms)}),
        "LAGPILOT_POSTGRES_DSN": dsn, "LAGPILOT_FAILURE_POLICY": "exit", "LAGPILOT_LOG_LEVEL": "WARNING",
    })
    return env


def make_ledger(dsn: str, prefix: str) -> str:
    import psycopg

    from tests.real.drain_handlers import LEDGER_DDL

    table = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LEDGER_DDL.format(table=table))
    return table


def run_group(bootstrap: str, topic: str, dsn: str, counts: dict[int, int], cost_ms: int, batch: int,
              consumers: int, workdir: Path) -> dict[str, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    group = f"bench-group-{uuid.uuid4().hex[:6]}"
    table = make_ledger(dsn, "bench_group")
    env = base_env(bootstrap, topic, group, dsn, table, cost_ms, batch)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    procs = []
    t_launch = time.time()
    for i in range(consumers):
        e = dict(env, LAGPILOT_POD_NAME=f"bench-consumer-{i}", LAGPILOT_METRICS_PORT="0")
        log = open(workdir / f"consumer-{i}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "consume"], env=e, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    try:
        deadline = time.time() + 3600
        while time.time() < deadline:
            time.sleep(1.0)
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a consumer exited: see {workdir}")
            res = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in counts])])[group].result(30)
            if all(tp.offset == counts[tp.partition] for tp in res.topic_partitions):
                break
        t_done = time.time()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
    st = ledger_stats(dsn, table, counts)
    total = sum(counts.values())
    steady = st["last_at"] - st["first_at"]
    return {"records": total, "consumers": consumers, "records_per_s": total / steady if steady > 0 else None,
            "wall_records_per_s": total / (t_done - t_launch), "startup_s": st["first_at"] - t_launch,
            "seconds": steady, "lost": st["lost"], "duplicated": st["duplicated"]}


def run_drain(bootstrap: str, topic: str, dsn: str, counts: dict[int, int], cost_ms: int, batch: int,
              split_factor: int, jars: list[str], workdir: Path) -> dict[str, Any]:
    from lagpilot_runtime.drain_plan import DrainPlan, parallelism_for, split_ranges

    group = f"bench-drain-{uuid.uuid4().hex[:6]}"
    table = make_ledger(dsn, "bench_drain")
    subs = split_ranges({p: (0, n) for p, n in counts.items()}, split_factor, min_records_per_task=batch)
    plan = DrainPlan("b1", topic, group, subs, batch, parallelism_for(subs, 1024)).validate()
    env = base_env(bootstrap, topic, group, dsn, table, cost_ms, batch)
    env["LAGPILOT_SPARK_JARS"] = ",".join(jars)
    summary = workdir / f"drain-{split_factor}.json"
    t_launch = time.time()
    with open(workdir / f"drain-{split_factor}.log", "wb") as log:
        rc = subprocess.run([sys.executable, "-m", "lagpilot.cli", "drain", "--plan", plan.to_json(),
                             "--summary-file", str(summary)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            timeout=3600, check=False).returncode
    t_done = time.time()
    if rc != 0:
        raise RuntimeError(f"lagpilot drain exited {rc}: see {workdir / f'drain-{split_factor}.log'}")
    s = json.loads(summary.read_text())
    st = ledger_stats(dsn, table, counts)
    total = sum(counts.values())
    steady = st["last_at"] - st["first_at"]
    return {"records": total, "split_factor": split_factor, "tasks": len(subs), "records_per_s": total / steady,
            "wall_records_per_s": total / (t_done - t_launch), "seconds": steady,
            "startup_s": st["first_at"] - t_launch,
            "session_s": s["session_ready_at"] - s["started_at"],
            "lost": st["lost"], "duplicated": st["duplicated"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--cost-ms", type=int, default=50)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--split-factors", default="4", help="comma separated; the first is the headline")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    factors = [int(x) for x in args.split_factors.split(",") if x.strip()]

    from confluent_kafka.admin import AdminClient, NewTopic

    from lagpilot_dev.stack import Stack

    stack = Stack()
    info, lease = stack.acquire(["kafka", "postgres", "spark"])
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"lagpilot-bench-drain-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    try:
        bootstrap, dsn = str(info.bootstrap_servers), str(info.postgres_dsn)
        topic = f"bench-drain-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        counts = produce(bootstrap, topic, args.records)
        print(f"produced {sum(counts.values())} records on {PARTITIONS} partitions; work dir {workdir}", file=sys.stderr)
        group = run_group(bootstrap, topic, dsn, counts, args.cost_ms, args.batch, args.consumers, workdir)
        print(f"group: {group}", file=sys.stderr)
        drains = []
        for f in factors:
            d = run_drain(bootstrap, topic, dsn, counts, args.cost_ms, args.batch, f, list(info.spark_jars), workdir)
            d["speedup"] = d["records_per_s"] / group["records_per_s"]
            d["speedup_wall"] = d["wall_records_per_s"] / group["wall_records_per_s"]
            print(f"drain: {d}", file=sys.stderr)
            drains.append(d)
    finally:
        stack.release(lease, stop=os.environ.get("LAGPILOT_KEEP_STACK", "") in ("", "0", "false"))
    head = drains[0]
    result = {
        "records": sum(counts.values()), "partitions": PARTITIONS, "sink_ms_per_call": args.cost_ms, "batch": args.batch,
        "group_records_per_s": round(group["records_per_s"], 1),
        "drain_records_per_s": round(head["records_per_s"], 1),
        "drain_tasks": head["tasks"],
        "speedup": round(head["speedup"], 2),
        "speedup_wall_incl_startup": round(head["speedup_wall"], 2),
        "drain_startup_s": round(head["startup_s"], 1),
        "lost": group["lost"] + sum(d["lost"] for d in drains),
        "duplicated": group["duplicated"] + sum(d["duplicated"] for d in drains),
        "group": group,
        "by_split_factor": {str(d["split_factor"]): {"tasks": d["tasks"], "records_per_s": round(d["records_per_s"], 1),
                                                     "speedup": round(d["speedup"], 2),
                                                     "startup_s": round(d["startup_s"], 1),
                                                     "lost": d["lost"], "duplicated": d["duplicated"]} for d in drains},
    }
    print(f"{'path':<22}{'tasks':>6}{'records/s':>12}{'speed-up':>10}{'start-up s':>12}{'lost':>6}{'dup':>6}")
    print(f"{'group (3 consumers)':<22}{args.consumers:>6}{group['records_per_s']:>12.0f}{1.0:>10.2f}"
          f"{group['startup_s']:>12.1f}{group['lost']:>6}{group['duplicated']:>6}")
    for d in drains:
        print(f"{'drain sf=' + str(d['split_factor']):<22}{d['tasks']:>6}{d['records_per_s']:>12.0f}{d['speedup']:>10.2f}"
              f"{d['startup_s']:>12.1f}{d['lost']:>6}{d['duplicated']:>6}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
