#!/usr/bin/env python3
"""Benchmark of the consumer runtime (issue 4): its overhead and the batching win, side by side.

    .venv/bin/python bench/consumer.py [--json] [--records N] [--rounds R]

Starts (or reuses) the dev stack's Kafka broker, fills one 6-partition topic with N small records,
then consumes the whole topic with a fresh group per measurement:

- raw:       a hand-written confluent-kafka loop, consume(num_messages=500) + synchronous commit
             per batch, no processing;
- lagpilot:  the lagpilot runtime (the real BatchConsumer, metrics and all) with a no-op batch
             handler, batch 500; noop_ratio = lagpilot / raw records per second (target >= 0.95);
- a sink costing a fixed 20 ms per call: batch 500 vs one record per call; batch_speedup =
  batched / per-record records per second (target >= 20). Both run on a prefix of the topic
  (the per-record one on a few hundred records: at ~50 records/s more would only cost time);
- Kafka's own kafka-consumer-perf-test on the same topic: the ceiling (JVM client, no commits).

Rates are measured from the first record received to the last commit (group join excluded). The
two no-op loops run R rounds on the same records (the whole topic, each with a fresh group); each
round runs both and alternates which one goes first (so neither always gets the warmer page cache
or the quieter machine); `noop_ratio` is the MEDIAN of the per-round ratios lagpilot / raw, each
printed. `--quick` is a short run for CI (50,000 records, 3 rounds, small sink runs, no perf test).
Prints a table, and with --json one JSON line last.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 6
BATCH = 500


def produce(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
        }
    )
    payload = b"x" * 40
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"%d" % i, value=b'{"id":%d,"p":"%s"}' % (i, payload))
                break
            except BufferError:
                p.poll(0.05)
        if i % 20000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("producer could not deliver every record")
    return n / (time.perf_counter() - t0)


def raw_loop(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    """The hand-written baseline: consume(num_messages=500), no-op, synchronous commit per batch."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    got, t_first = 0, None
    try:
        while got < n:
            msgs = c.consume(num_messages=BATCH, timeout=1.0)
            if not msgs:
                continue
            if t_first is None:
                t_first = time.perf_counter()
            got += sum(1 for m in msgs if m.error() is None)
            c.commit(asynchronous=False)
        t_end = time.perf_counter()
    finally:
        c.close()
    return {"records": got, "seconds": t_end - t_first, "records_per_s": got / (t_end - t_first)}


class _Timed:
    """Wraps the real consumer to time first record → last commit and stop at the target."""

    def __init__(self, inner: Any, loop: Any, target: int) -> None:
        self.inner, self.loop, self.target = inner, loop, target
        self.t_first: float | None = None
        self.t_end: float | None = None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        if self.loop.processed_records >= self.target:
            if self.t_end is None:
                self.t_end = time.perf_counter()
            self.loop.request_stop("bench target reached")
            return []
        msgs = self.inner.consume(num_messages=num_messages, timeout=timeout)
        if msgs and self.t_first is None:
            self.t_first = time.perf_counter()
        return msgs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def lagpilot_loop(
    bootstrap: str, topic: str, target: int, batch: int, handler: Any, config: dict[str, str] | None = None
) -> dict[str, Any]:
    """The real runtime (as `lagpilot consume` builds it), in-process, until `target` records are committed."""
    from lagpilot_runtime.config import ConsumerConfig
    from lagpilot_runtime.consumer import build, shutdown

    cfg = ConsumerConfig.from_env(
        {
            "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap,
            "LAGPILOT_TOPIC": topic,
            "LAGPILOT_GROUP_ID": f"bench-lp-{uuid.uuid4().hex[:8]}",
            "LAGPILOT_HANDLER": "bench:handler",
            "LAGPILOT_BATCH_MAX_RECORDS": str(batch),
            "LAGPILOT_BATCH_TIMEOUT_MS": "1000",
            "LAGPILOT_HANDLER_CONFIG": json.dumps(config or {}),
            "LAGPILOT_METRICS_PORT": "0",
            "LAGPILOT_POD_NAME": f"bench-{uuid.uuid4().hex[:6]}",
            "LAGPILOT_FAILURE_POLICY": "exit",
        }
    )
    loop, server, dlq = build(cfg, handler)
    timed = _Timed(loop.consumer, loop, target)
    loop.consumer = timed
    try:
        code = loop.run()
    finally:
        loop.consumer = timed.inner
        shutdown(loop, server, dlq)
    if code != 0 or timed.t_first is None or timed.t_end is None:
        raise RuntimeError(f"lagpilot loop failed (exit {code})")
    secs = timed.t_end - timed.t_first
    return {
        "records": loop.processed_records,
        "seconds": secs,
        "records_per_s": loop.processed_records / secs,
        "capacity_estimate": loop.capacity.capacity(),
    }


def noop(records: list[Any], ctx: Any) -> None:
    """No processing at all."""


def sleep_20ms(records: list[Any], ctx: Any) -> None:
    """A sink with a fixed cost per call, whatever the batch size (the seeds' ~180 ms DynamoDB write, scaled)."""
    time.sleep(0.020)


def perf_test(kafka: Any, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    """kafka-consumer-perf-test (ConsumerPerformance) on the same topic: the JVM client's ceiling."""
    from lagpilot_dev.kafka import CONSUMER_PERF_CLASS

    proc = kafka.run_cli_tool(
        CONSUMER_PERF_CLASS,
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--messages",
            str(n),
            "--group",
            f"bench-perf-{uuid.uuid4().hex[:8]}",
            "--timeout",
            "60000",
        ],
        timeout=600,
        heap="512m",
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kafka-consumer-perf-test failed: {proc.stderr[-2000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    header_idx = next(i for i, ln in enumerate(lines) if "nMsg.sec" in ln)
    row = next(csv.reader(io.StringIO(lines[header_idx + 1])))
    header = [h.strip() for h in lines[header_idx].split(",")]
    values = dict(zip(header, (v.strip() for v in row), strict=False))
    return {
        "records": int(float(values["data.consumed.in.nMsg"])),
        "records_per_s": float(values["nMsg.sec"]),
        "fetch_records_per_s": float(values.get("fetch.nMsg.sec", values["nMsg.sec"])),
        "raw": values,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON line last")
    ap.add_argument("--records", type=int, default=1_000_000, help="records in the topic (default 1,000,000)")
    ap.add_argument(
        "--rounds", type=int, default=5, help="rounds of the two no-op loops (median ratio taken)"
    )
    ap.add_argument(
        "--quick", action="store_true", help="a short run for CI: 50,000 records, 3 rounds, no perf test"
    )
    ap.add_argument(
        "--batched-records", type=int, default=200_000, help="records for the batched 20 ms-sink run"
    )
    ap.add_argument(
        "--per-record-records", type=int, default=400, help="records for the per-record 20 ms-sink run"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 50_000)
        args.rounds = min(args.rounds, 3)
        args.batched_records = min(args.batched_records, 10_000)
        args.per_record_records = min(args.per_record_records, 100)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.modules["bench"] = sys.modules[__name__]  # "bench:handler" in the config is a placeholder

    from confluent_kafka.admin import AdminClient, NewTopic

    from lagpilot_dev.stack import Stack

    stack = Stack()
    info, lease = stack.acquire(["kafka"])
    bootstrap = info.bootstrap_servers
    topic = f"bench-consumer-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    results: dict[str, Any] = {
        "records": args.records,
        "partitions": PARTITIONS,
        "batch": BATCH,
        "rounds": args.rounds,
        "quick": args.quick,
    }
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(
            60
        )
        print(f"producing {args.records} records to {topic} ({PARTITIONS} partitions)...", file=sys.stderr)
        results["produce_records_per_s"] = produce(bootstrap, topic, args.records)

        raw_runs, lp_runs, ratios = [], [], []
        for r in range(args.rounds):
            lp_first = r % 2 == 1
            order = "lagpilot no-op, raw loop" if lp_first else "raw loop, lagpilot no-op"
            print(f"round {r + 1}/{args.rounds}: {order}...", file=sys.stderr)
            if lp_first:
                lp_run = lagpilot_loop(bootstrap, topic, args.records, BATCH, noop)
                raw_run = raw_loop(bootstrap, topic, args.records)
            else:
                raw_run = raw_loop(bootstrap, topic, args.records)
                lp_run = lagpilot_loop(bootstrap, topic, args.records, BATCH, noop)
            raw_runs.append(raw_run)
            lp_runs.append(lp_run)
            ratios.append(lp_run["records_per_s"] / raw_run["records_per_s"])
            print(
                f"round {r + 1}: raw {raw_run['records_per_s']:,.0f}/s, lagpilot {lp_run['records_per_s']:,.0f}/s, "
                f"ratio {ratios[-1]:.3f} ({'lagpilot' if lp_first else 'raw'} first)"
            )
        results["raw_records_per_s"] = statistics.median(x["records_per_s"] for x in raw_runs)
        results["lagpilot_noop_records_per_s"] = statistics.median(x["records_per_s"] for x in lp_runs)
        results["noop_ratio"] = statistics.median(ratios)
        results["noop_ratio_rounds"] = [round(x, 3) for x in ratios]
        results["raw_runs_records_per_s"] = [round(x["records_per_s"]) for x in raw_runs]
        results["lagpilot_runs_records_per_s"] = [round(x["records_per_s"]) for x in lp_runs]

        n_batched = min(args.batched_records, args.records)
        n_single = min(args.per_record_records, args.records)
        print(
            f"20 ms sink: batch {BATCH} on {n_batched} records, per-record on {n_single}...", file=sys.stderr
        )
        batched = lagpilot_loop(bootstrap, topic, n_batched, BATCH, sleep_20ms)
        single = lagpilot_loop(bootstrap, topic, n_single, 1, sleep_20ms)
        results["sink20ms_batch500_records_per_s"] = batched["records_per_s"]
        results["sink20ms_per_record_records_per_s"] = single["records_per_s"]
        results["batch_speedup"] = batched["records_per_s"] / single["records_per_s"]
        results["sink20ms_batch500_capacity_estimate"] = batched["capacity_estimate"]

        if not args.quick:
            print("kafka-consumer-perf-test...", file=sys.stderr)
            perf = perf_test(stack.kafka(), bootstrap, topic, args.records)
            results["perf_test_records_per_s"] = perf["records_per_s"]
            results["perf_test_fetch_records_per_s"] = perf["fetch_records_per_s"]
    finally:
        try:
            admin.delete_topics([topic])[topic].result(60)
        except Exception:  # noqa: BLE001 - cleanup
            pass
        stack.release(lease, stop=os.environ.get("LAGPILOT_KEEP_STACK", "") in ("", "0", "false"))

    rows = [
        ("raw confluent-kafka loop (no-op, commit/batch), median", results["raw_records_per_s"]),
        ("lagpilot runtime, no-op handler, median", results["lagpilot_noop_records_per_s"]),
        ("lagpilot, 20 ms sink, batch 500", results["sink20ms_batch500_records_per_s"]),
        ("lagpilot, 20 ms sink, per record", results["sink20ms_per_record_records_per_s"]),
    ]
    if "perf_test_records_per_s" in results:
        rows.append(("kafka-consumer-perf-test (ceiling)", results["perf_test_records_per_s"]))
    print(f"\nconsumer benchmark: {args.records} records, {PARTITIONS} partitions, batch {BATCH}")
    for name, rate in rows:
        print(f"  {name:<48} {rate:>12,.0f} records/s")
    print(
        f"  {'noop_ratio (median of rounds, target >= 0.95)':<48} {results['noop_ratio']:>12.3f}  "
        f"rounds {results['noop_ratio_rounds']}"
    )
    print(f"  {'batch_speedup (target >= 20)':<48} {results['batch_speedup']:>12.1f}")
    if args.json:
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
