"""The workload of the drain benchmark (bench/drain.py): the backlog and the live producer on a
3-partition topic, the group's offsets, the environment of its `lagpilot consume` processes and
`lagpilot drain` (the built-in ledger sink behind a fixed latency), starting and stopping them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3


def produce(bootstrap: str, topic: str, n: int) -> dict[int, int]:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
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


class LiveProducer(threading.Thread):
    """Fresh records at `rate` per partition per second until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate, self.stop_evt, self.sent = topic, rate, threading.Event(), 0

    def run(self) -> None:
        tick = 0.1
        per_tick = max(1, round(self.rate * tick))
        nxt = time.monotonic()
        while not self.stop_evt.is_set():
            for part in range(PARTITIONS):
                for _ in range(per_tick):
                    self.p.produce(self.topic, value=b'{"live":1}', partition=part)
                    self.sent += 1
            self.p.poll(0)
            nxt += tick
            time.sleep(max(0.0, nxt - time.monotonic()))
        self.p.flush(60)

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(120)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-watermarks", "isolation.level": "read_committed"}
    )
    try:
        return {
            p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1])
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def committed(admin: Any, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    )[group].result(30)
    return {tp.partition: int(tp.offset) for tp in res.topic_partitions}


def wait_until(check: Any, what: str, timeout: float, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def joined(admin: Any, group: str, topic: str) -> dict[int, int] | None:
    """The group's committed offsets once every partition has a first commit."""
    got = committed(admin, group, topic)
    return got if all(got.get(p, -1) >= 0 for p in range(PARTITIONS)) else None


def base_env(
    bootstrap: str, topic: str, group: str, dsn: str, table: str, cost_ms: int, batch: int
) -> dict[str, str]:
    # the drain's own switches (LAGPILOT_DRAIN_*, e.g. LAGPILOT_DRAIN_WARM_WORKERS=0) pass through, so
    # a whole bench run can be repeated with one changed
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LAGPILOT_") or k.startswith("LAGPILOT_DRAIN_")
    }
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap,
            "LAGPILOT_TOPIC": topic,
            "LAGPILOT_GROUP_ID": group,
            "LAGPILOT_BATCH_MAX_RECORDS": str(batch),
            "LAGPILOT_BATCH_TIMEOUT_MS": "200",
            "LAGPILOT_HANDLER": "lagpilot_runtime.sinks.ledger:process",
            "LAGPILOT_HANDLER_CONFIG": json.dumps({"table": table, "cost_ms": str(cost_ms)}),
            "LAGPILOT_POSTGRES_DSN": dsn,
            "LAGPILOT_FAILURE_POLICY": "exit",
            "LAGPILOT_LOG_LEVEL": "WARNING",
        }
    )
    return env


def drain_env(env: dict[str, str], jars: list[str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of `lagpilot drain` (or its warm runtime) from a consumer's: the Spark jars,
    INFO logs (its start-up milestones), then a variant's `extra` (pure)."""
    return dict(env, LAGPILOT_SPARK_JARS=",".join(jars), LAGPILOT_LOG_LEVEL="INFO", **(extra or {}))


def start_consumers(env: dict[str, str], n: int, workdir: Path, tag: str) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        e = dict(env, LAGPILOT_POD_NAME=f"bench-{tag}-{i}", LAGPILOT_METRICS_PORT="0")
        log = open(workdir / f"{tag}-consumer-{i}.log", "wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "lagpilot.cli", "consume"],
                env=e,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def stop_procs(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
