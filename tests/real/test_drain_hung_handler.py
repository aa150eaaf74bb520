"""H3: a hung handler must not hang its drain task for ever (real Kafka, Spark local mode,
PostgreSQL). The first drain call of the run never returns (tests.real.drain_handlers:hang_once_ledger,
like a sink that stopped answering); each handler call of a drain task has a deadline, the
consumer's bound on one batch (LAGPILOT_MAX_POLL_INTERVAL_MS, 5 s here), so that task fails with
the deadline named, Spark runs it again from its committed progress, and the drain ends exit 0
with every planned offset delivered once (the hung call wrote nothing)."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from lagpilot_runtime.drain.plan import DrainPlan, parallelism_for, split_ranges
from tests.real.test_drain_job import PARTS, drain_env, ledger, produce, start_drain

pytestmark = [pytest.mark.real, pytest.mark.slow]
PER_PARTITION = 2000


def test_a_hung_handler_fails_its_task_and_the_drain_finishes(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = new_topic(partitions=PARTS, prefix="drainhang")
    produce(kafka_bootstrap, topic, PER_PARTITION)
    ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
    subs = split_ranges(ranges, 2, min_records_per_task=200)
    plan = DrainPlan(
        "hang1", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, parallelism_for(subs, 6)
    ).validate()
    table = "dhang_" + uuid.uuid4().hex[:8]
    marker = tmp_path / "hung"
    env = drain_env(
        kafka_bootstrap,
        topic,
        plan.group_id,
        postgres_dsn,
        spark_jars,
        table,
        LAGPILOT_HANDLER="tests.real.drain_handlers:hang_once_ledger",
        LAGPILOT_LEDGER_TABLE=table,
        LAGPILOT_HANDLER_CONFIG=json.dumps({"hang_marker": str(marker)}),
        LAGPILOT_MAX_POLL_INTERVAL_MS="5000",
        LAGPILOT_SESSION_TIMEOUT_MS="3000",
    )
    log = tmp_path / "drain.log"
    proc = start_drain(plan, env, tmp_path / "summary.json", log)
    try:
        rc = proc.wait(timeout=420)  # seconds with the deadline; an hour (the hang) without it
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert marker.exists(), "the fault did not fire: no handler call hung"  # written by the call that hung
    assert rc == 0, text[-4000:]
    assert "took longer than 5 s (handler deadline)" in text, text[-4000:]
    rep = ledger(postgres_dsn, table, ranges)
    print(
        "hung handler:",
        marker.read_text(),
        {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")},
    )
    total = sum(b - a for a, b in ranges.values())
    assert (rep["lost"], rep["outside"], rep["distinct"], rep["duplicated"]) == (0, 0, total, 0), rep
