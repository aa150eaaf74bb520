"""The drain job alone on a planned range: real Kafka, Spark (local mode) and PostgreSQL.

`lagpilot drain` runs as a process exactly as in the Job's pod (same env contract), on explicit
sub-ranges, delivering into the delivery ledger (built-in sink `ledger`: one row per delivery, no
unique key, so a duplicate is a counted row, never hidden by a primary key). Checked: exactly the
planned offsets are delivered, each once (lost 0, duplicated 0, nothing outside the plan); progress in Kafka reaches every sub-range's end; a driver killed mid-way is
retried and the retry skips finished work. Retention deleting part of a range:
tests/real/test_retention_drain.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.operator_process import checkout_pythonpath
from lagpilot_runtime.drain.plan import DrainPlan, parallelism_for, split_ranges

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PARTS = 3
PER_PARTITION = 4000


def produce(bootstrap: str, topic: str, per_partition: int, parts: int = PARTS) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(per_partition):
        for part in range(parts):
            while True:
                try:
                    p.produce(
                        topic,
                        key=f"k{i % 97}".encode(),
                        value=json.dumps({"i": i, "p": part}).encode(),
                        partition=part,
                    )
                    break
                except BufferError:
                    p.poll(0.1)
    assert p.flush(60) == 0


def drain_env(
    bootstrap: str, topic: str, group: str, dsn: str, jars: list[str], table: str, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
    env.update(
        {
            # the checkout's own source dirs first (a worktree sharing the venv must run its own code)
            "PYTHONPATH": checkout_pythonpath(REPO),
            "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap,
            "LAGPILOT_TOPIC": topic,
            "LAGPILOT_GROUP_ID": group,
            "LAGPILOT_BATCH_MAX_RECORDS": "200",
            "LAGPILOT_POSTGRES_DSN": dsn,
            "LAGPILOT_POSTGRES_TABLE": table,
            "LAGPILOT_SPARK_JARS": ",".join(jars),
            "LAGPILOT_FAILURE_POLICY": "exit",
        }
    )
    env.update(extra)
    return env


def start_drain(plan: DrainPlan, env: dict[str, str], summary: Path, log: Path) -> subprocess.Popen[bytes]:
    fh = open(log, "ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lagpilot.cli",
            "drain",
            "--plan",
            plan.to_json(),
            "--summary-file",
            str(summary),
        ],
        env=env,
        stdout=fh,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def ledger(dsn: str, table: str, ranges: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """lost / duplicated / outside of the planned ranges, counted in the ledger (no unique key)."""
    from lagpilot_runtime.sinks.ledger import stats

    return stats(dsn, table, ranges)


def pg_offsets(dsn: str, table: str) -> list[tuple[int, int]]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        return [(int(p), int(o)) for p, o in conn.execute(f'SELECT partition, "offset" FROM {table}')]


def progress(bootstrap: str, plan: DrainPlan) -> dict[tuple[int, int], tuple[int, int]]:
    from lagpilot_runtime.config import ConsumerConfig
    from lagpilot_runtime.drain.progress import read_progress

    cfg = ConsumerConfig(bootstrap_servers=bootstrap, topic=plan.topic, group_id=plan.group_id, sink="log")
    return read_progress(cfg, plan)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def topic(new_topic: Callable[..., str], kafka_bootstrap: str) -> str:
    name = new_topic(partitions=PARTS, prefix="drainjob")
    produce(kafka_bootstrap, name, PER_PARTITION)
    return name


def expected(ranges: dict[int, tuple[int, int]]) -> set[tuple[int, int]]:
    return {(p, o) for p, (a, b) in ranges.items() for o in range(a, b)}


def test_drain_processes_exactly_the_planned_ranges(
    kafka_bootstrap: str, postgres_dsn: str, spark_jars: list[str], topic: str, tmp_path: Path
) -> None:
    ranges = {0: (500, 3500), 1: (0, 4000), 2: (1234, 2345)}  # partition 1 whole, others in the middle
    subs = split_ranges(ranges, 4, min_records_per_task=200)
    plan = DrainPlan("t1", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, parallelism_for(subs, 8)).validate()
    assert len(subs) > PARTS  # more tasks than partitions: the point of the drain
    table = "dj_" + uuid.uuid4().hex[:8]
    env = drain_env(
        kafka_bootstrap,
        topic,
        plan.group_id,
        postgres_dsn,
        spark_jars,
        table,
        LAGPILOT_SINK="ledger",
        LAGPILOT_LEDGER_TABLE=table,
    )
    proc = start_drain(plan, env, tmp_path / "summary.json", tmp_path / "drain.log")
    rc = proc.wait(timeout=900)
    assert rc == 0, (tmp_path / "drain.log").read_text()[-4000:]
    rows = pg_offsets(postgres_dsn, table)
    rep = ledger(postgres_dsn, table, ranges)
    assert (rep["lost"], rep["duplicated"], rep["outside"]) == (0, 0, 0), rep
    assert rep["delivered"] == len(rows) == sum(b - a for a, b in ranges.values())
    assert set(rows) == expected(ranges)  # per offset: every planned one, none outside the plan
    prog = progress(kafka_bootstrap, plan)
    assert all(prog[(s.partition, s.index)][0] == s.end for s in subs)
    assert sum(n for _, n in prog.values()) == len(rows)  # records done per sub-range add up
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["records"] == len(rows) and summary["unfinished_at_start"] == len(subs)

    # a second run of the same plan finds everything done: no Spark job, nothing written twice
    proc = start_drain(plan, env, tmp_path / "summary2.json", tmp_path / "drain2.log")
    assert proc.wait(timeout=300) == 0
    assert json.loads((tmp_path / "summary2.json").read_text())["unfinished_at_start"] == 0
    assert ledger(postgres_dsn, table, ranges)["duplicated"] == 0


def test_driver_killed_midway_then_retry_skips_finished_work(
    kafka_bootstrap: str, postgres_dsn: str, spark_jars: list[str], topic: str, tmp_path: Path
) -> None:
    ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
    subs = split_ranges(ranges, 4, min_records_per_task=200)
    plan = DrainPlan("t2", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, parallelism_for(subs, 4)).validate()
    table = "dj_" + uuid.uuid4().hex[:8]
    env = drain_env(
        kafka_bootstrap,
        topic,
        plan.group_id,
        postgres_dsn,
        spark_jars,
        table,
        LAGPILOT_SINK="ledger",
        LAGPILOT_LEDGER_TABLE=table,
        LAGPILOT_HANDLER_CONFIG=json.dumps({"ledger.cost_ms": "1000"}),
    )
    proc = start_drain(plan, env, tmp_path / "s1.json", tmp_path / "d1.log")
    total = sum(b - a for a, b in ranges.values())
    try:
        done = wait_for(
            lambda: (lambda n: n if n >= 1000 else 0)(
                sum(r for _, r in progress(kafka_bootstrap, plan).values())
            ),
            "some progress before the kill",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers at once
        proc.wait(timeout=60)
    assert done < total, "the drain finished before it could be killed; slow the handler down"
    before = len(set(pg_offsets(postgres_dsn, table)))
    proc = start_drain(plan, env, tmp_path / "s2.json", tmp_path / "d2.log")
    assert proc.wait(timeout=900) == 0, (tmp_path / "d2.log").read_text()[-4000:]
    summary = json.loads((tmp_path / "s2.json").read_text())
    assert summary["records_done_before"] >= done > 0
    assert summary["records"] == total - summary["records_done_before"]  # finished work skipped, exactly
    rep = ledger(postgres_dsn, table, ranges)
    print("after the retry:", {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")})
    assert rep["lost"] == 0 and rep["outside"] == 0 and rep["distinct"] == total, rep
    # at-least-once across the kill: at most the batch each task had delivered but not yet
    # committed as progress is delivered again (one batch per sub-range), never more
    assert rep["duplicated"] <= len(subs) * plan.batch_max_records, rep
    assert before <= total


# retention deleting part of a range: tests/real/test_retention_drain.py (the drain records the loss
# exactly and drains the rest; the operator reports DataLoss)
