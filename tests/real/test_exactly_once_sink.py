"""Exactly once with the built-in PostgreSQL sink WITHOUT a primary key (issue 12 item 3).

The data table is created with ``LAGPILOT_POSTGRES_KEY=none``: insert mode, no key, plain INSERT —
every delivery is a row, so the table itself is a delivery ledger and a duplicate is a counted row
(``sinks.ledger.report_from_counts`` over ``ledger_counts``). The sink stores each batch's progress
in ``<table>_lagpilot_progress`` in the same transaction as its rows; the runtime resumes from it.

The fault: the test crash hook in the sink (``LP_TEST_SINK_CRASH_AT=after_sink_write``) kills the
process like ``kill -9`` right after a batch's transaction committed and before the Kafka commit
(consumer) or the progress-group commit (drain task). Asserted fired: its marker file names the
pid, and that process is gone. Without the sink's progress the batch is delivered again
(duplicated == batch size); with it, duplicated == 0 and lost == 0.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.real.test_consumer_runtime import ConsumerProc, produce, wait_until

pytestmark = [pytest.mark.real]

PARTS = 2
PER_PARTITION = 600
BATCH = 100


def delivery_report(dsn: str, table: str, topic: str, ranges: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """lost/duplicated per (partition, offset) over the key-less data table (one row per delivery)."""
    import psycopg

    from lagpilot_runtime.sinks.ledger import ledger_counts, report_from_counts

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        counts = ledger_counts(conn, table, topic)
    return report_from_counts(
        counts, {p: b for p, (_, b) in ranges.items()}, {p: a for p, (a, _) in ranges.items()}
    )


def table_has_no_key(dsn: str, table: str) -> bool:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        n = conn.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", (table,)).fetchone()[
            0
        ]
    return n == 0


def committed_all(bootstrap: str, group: str, topic: str) -> bool:
    from tests.real.test_consumer_runtime import committed

    return committed(bootstrap, group, topic, PARTS) == {p: PER_PARTITION for p in range(PARTS)}


def fired(marker: Path, proc_pid: int | None = None) -> int:
    """The crash hook fired: its marker exists and names a pid that no longer runs."""
    assert marker.is_file(), f"the crash hook did not fire ({marker} missing)"
    pid = int(marker.read_text().split()[0])
    if proc_pid is not None:
        assert pid == proc_pid, (pid, proc_pid)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), (
        f"pid {pid} still runs"
    )
    return pid


def test_consumer_crash_after_the_sink_commit_before_the_kafka_commit_delivers_nothing_twice(
    kafka_bootstrap: str, postgres_dsn: str, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTS, prefix="eos-consumer")
    for p in range(PARTS):
        produce(kafka_bootstrap, topic, [b'{"i": %d}' % i for i in range(PER_PARTITION)], partition=p)
    table = "eos_c_" + uuid.uuid4().hex[:8]
    group = "eos-" + uuid.uuid4().hex[:6]
    env = {
        "LAGPILOT_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group,
        "LAGPILOT_POSTGRES_DSN": postgres_dsn,
        "LAGPILOT_POSTGRES_TABLE": table,
        "LAGPILOT_SINK": "postgres",
        "LAGPILOT_POSTGRES_KEY": "none",
        "LAGPILOT_BATCH_MAX_RECORDS": str(BATCH),
        "LAGPILOT_BATCH_TIMEOUT_MS": "200",
        "LP_TEST_SINK_CRASH_AT": "after_sink_write",
        "LP_TEST_SINK_CRASH_DIR": str(tmp_path),
        "LP_TEST_SINK_CRASH_SOURCE": "consumer",
        "LP_TEST_SINK_CRASH_AFTER_BATCHES": "2",
    }
    first = ConsumerProc(tmp_path, "eos-0", env)
    try:
        rc = first.wait(timeout=90)
    finally:
        first.stop()
    assert rc == 137, first.tail()
    fired(tmp_path / "sink-after_sink_write", first.proc.pid)
    assert table_has_no_key(postgres_dsn, table)  # duplicates would be rows: the proof can fail
    written_at_crash = delivery_report(
        postgres_dsn, table, topic, {p: (0, PER_PARTITION) for p in range(PARTS)}
    )["delivered"]
    assert 0 < written_at_crash < PARTS * PER_PARTITION

    second = ConsumerProc(tmp_path, "eos-1", env)  # the marker exists: the hook stays quiet now
    try:
        ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
        wait_until(
            lambda: delivery_report(postgres_dsn, table, topic, ranges)["distinct"] == PARTS * PER_PARTITION,
            90,
            "every record in the sink",
        )
        wait_until(lambda: committed_all(kafka_bootstrap, group, topic), 30, "the group committed everything")
    finally:
        second.stop()
    rep = delivery_report(postgres_dsn, table, topic, ranges)
    ahead = second.events("sink_progress_ahead")
    print(
        "consumer crash after the sink commit:",
        {k: rep[k] for k in ("produced", "delivered", "lost", "duplicated")},
        "resumed at",
        ahead[0].get("partitions") if ahead else None,
    )
    assert (rep["lost"], rep["duplicated"], rep["outside"]) == (0, 0, 0), rep
    assert rep["delivered"] == PARTS * PER_PARTITION
    assert ahead, "the restarted consumer did not resume from the sink's progress"


def test_drain_task_crash_after_the_sink_commit_before_its_progress_commit_delivers_nothing_twice(
    kafka_bootstrap: str, postgres_dsn: str, spark_jars: list[str], new_topic: Any, tmp_path: Path
) -> None:
    from lagpilot_runtime.drain.plan import DrainPlan, split_ranges
    from tests.real.test_drain_job import drain_env, progress, start_drain

    topic = new_topic(partitions=PARTS, prefix="eos-drain")
    for p in range(PARTS):
        produce(kafka_bootstrap, topic, [b'{"i": %d}' % i for i in range(PER_PARTITION)], partition=p)
    # every sub-range is 2 batches: the crash (a worker's 2nd batch) hits a sub-range's LAST batch, so the
    # retried task finds the sink at the sub-range's end and must still commit its progress there
    ranges = {0: (100, 500), 1: (0, 400)}
    subs = split_ranges(ranges, 2, min_records_per_task=BATCH)
    assert all(s.end - s.start == 2 * BATCH for s in subs)
    plan = DrainPlan("7", topic, "g-" + uuid.uuid4().hex[:6], subs, BATCH, 2).validate()
    table = "eos_d_" + uuid.uuid4().hex[:8]
    env = drain_env(
        kafka_bootstrap,
        topic,
        plan.group_id,
        postgres_dsn,
        spark_jars,
        table,
        LAGPILOT_SINK="postgres",
        LAGPILOT_POSTGRES_KEY="none",
        LP_TEST_SINK_CRASH_AT="after_sink_write",
        LP_TEST_SINK_CRASH_DIR=str(tmp_path),
        LP_TEST_SINK_CRASH_SOURCE="drain",
        LP_TEST_SINK_CRASH_AFTER_BATCHES="1",
    )
    env["LAGPILOT_BATCH_MAX_RECORDS"] = str(BATCH)
    proc = start_drain(plan, env, tmp_path / "summary.json", tmp_path / "drain.log")
    rc = proc.wait(timeout=240)
    log = (tmp_path / "drain.log").read_text(errors="replace")
    assert rc == 0, log[-4000:]
    fired(
        tmp_path / "sink-after_sink_write"
    )  # a Python worker died after its sink commit; Spark retried the task
    assert table_has_no_key(postgres_dsn, table)
    rep = delivery_report(postgres_dsn, table, topic, ranges)
    print(
        "drain task crash after the sink commit:",
        {k: rep[k] for k in ("produced", "delivered", "lost", "duplicated")},
    )
    assert (rep["lost"], rep["duplicated"], rep["outside"]) == (0, 0, 0), rep
    assert "drain_sink_progress_ahead" in log, log[
        -6000:
    ]  # the retried task resumed from the sink, not the progress group
    prog = progress(kafka_bootstrap, plan)
    assert all(prog[(s.partition, s.index)][0] == s.end for s in subs)


def test_expired_drain_progress_groups_the_sinks_progress_is_authoritative(
    kafka_bootstrap: str,
    kafka_admin: Any,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Any,
    tmp_path: Path,
) -> None:
    """Kafka expires a memberless group's offsets after offsets.retention.minutes; deleting the
    progress groups does the same deterministically. A second run of the finished plan must then
    deliver nothing again (the sink's progress rows never expire)."""
    from lagpilot_runtime.drain.plan import DrainPlan, split_ranges
    from tests.real.test_drain_job import drain_env, progress, start_drain

    topic = new_topic(partitions=1, prefix="eos-expire")
    produce(kafka_bootstrap, topic, [b'{"i": %d}' % i for i in range(400)], partition=0)
    ranges = {0: (0, 400)}
    subs = split_ranges(ranges, 2, min_records_per_task=BATCH)
    plan = DrainPlan("3", topic, "g-" + uuid.uuid4().hex[:6], subs, BATCH, 2).validate()
    table = "eos_x_" + uuid.uuid4().hex[:8]
    env = drain_env(
        kafka_bootstrap,
        topic,
        plan.group_id,
        postgres_dsn,
        spark_jars,
        table,
        LAGPILOT_SINK="postgres",
        LAGPILOT_POSTGRES_KEY="none",
    )
    env["LAGPILOT_BATCH_MAX_RECORDS"] = str(BATCH)
    proc = start_drain(plan, env, tmp_path / "s1.json", tmp_path / "d1.log")
    assert proc.wait(timeout=240) == 0, (tmp_path / "d1.log").read_text(errors="replace")[-4000:]
    assert delivery_report(postgres_dsn, table, topic, ranges)["duplicated"] == 0

    groups = plan.progress_groups()
    for f in kafka_admin.delete_consumer_groups(groups, request_timeout=30).values():
        f.result(timeout=60)
    assert all(n == 0 for _, n in progress(kafka_bootstrap, plan).values())  # the progress is gone from Kafka
    assert all(
        nxt == s.start
        for s in subs
        for (p, k), (nxt, _) in progress(kafka_bootstrap, plan).items()
        if (p, k) == (s.partition, s.index)
    )

    proc = start_drain(plan, env, tmp_path / "s2.json", tmp_path / "d2.log")
    assert proc.wait(timeout=240) == 0, (tmp_path / "d2.log").read_text(errors="replace")[-4000:]
    rep = delivery_report(postgres_dsn, table, topic, ranges)
    print(
        "progress groups expired, second run:",
        {k: rep[k] for k in ("produced", "delivered", "lost", "duplicated")},
    )
    assert (rep["lost"], rep["duplicated"], rep["outside"]) == (0, 0, 0), rep
    assert json.loads((tmp_path / "s2.json").read_text())["unfinished_at_start"] == 0
    assert all(
        progress(kafka_bootstrap, plan)[(s.partition, s.index)][0] == s.end for s in subs
    )  # Kafka caught up
