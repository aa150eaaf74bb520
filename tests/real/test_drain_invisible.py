"""H5: sub-ranges that hold no visible record must still complete (real Kafka, Spark, PostgreSQL).

Under ``read_committed`` (the drain's isolation level: the split is the LSO) the records of an
aborted transaction and the transaction markers are never returned; on a compacted topic the
records the log cleaner removed are gone. A drain sub-range made only of such offsets yields no
record to its Spark task, although Spark's Kafka reader did reach the sub-range's end offset.
Before the fix the task committed progress only after a first record, so such a sub-range stayed
unfinished on every attempt (exit 1 "sub-range(s) unfinished") and the drain ended ``Failed``.

Each test first proves its fault fired (the sub-range holds offsets, but a read_committed consumer
sees no record in it), then runs `lagpilot drain` as the Job's pod does and checks: exit 0, progress
at every sub-range's end, and the delivery ledger (no unique key) holds exactly the visible records
of the plan, each once. The first three run `lagpilot drain` as a host process (no pod); the two
through the operator run their pods on the real node (`pods`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot_runtime.drain.plan import DrainPlan, SubRange
from tests.real.test_drain_job import drain_env, pg_offsets, progress, start_drain
from tests.real.test_drain_operator import crd, scenario  # noqa: F401 - fixtures of the operator test

pytestmark = [pytest.mark.real, pytest.mark.slow]


def visible_offsets(
    bootstrap: str, topic: str, partition: int, start: int, end: int, isolation: str = "read_committed"
) -> list[int]:
    """The offsets a consumer with ``isolation`` reads in ``[start, end)`` (its position must reach end)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "probe-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    out: list[int] = []
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None and m.offset() < end:
                out.append(m.offset())
            pos = c.position([TopicPartition(topic, partition)])[0].offset
            if pos >= end:
                return out
        raise AssertionError(f"the probe's position never reached {end} in {topic}/{partition}")
    finally:
        c.close()


def high_watermark(bootstrap: str, topic: str, partition: int, isolation: str = "read_uncommitted") -> int:
    """The partition's end offset as a consumer with ``isolation`` sees it (read_committed: the LSO)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "probe-" + uuid.uuid4().hex[:6],
            "isolation.level": isolation,
        }
    )
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)[1])
    finally:
        c.close()


def settled_end(bootstrap: str, topic: str, partition: int) -> int:
    """The end offset once no transaction is open: the coordinator writes a transaction's marker after
    commit/abort returned, so wait until the LSO (read_committed end) equals the high watermark."""
    deadline = time.monotonic() + 60
    while True:
        hw = high_watermark(bootstrap, topic, partition)
        if high_watermark(bootstrap, topic, partition, "read_committed") == hw:
            return hw
        assert time.monotonic() < deadline, "the transaction marker never landed"
        time.sleep(0.2)


def run_drain(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    topic: str,
    subs: tuple[SubRange, ...],
    tmp_path: Path,
    attempt: int = 0,
) -> tuple[int, DrainPlan, str, str]:
    # read_committed as the operator plans it (drain_manifests.drain_plan_for): the split is the LSO
    plan = DrainPlan(
        "inv1", topic, "g-" + uuid.uuid4().hex[:6], subs, 100, len(subs), read_committed=True, attempt=attempt
    ).validate()
    table = "dinv_" + uuid.uuid4().hex[:8]
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
    log = tmp_path / "drain.log"
    rc = start_drain(plan, env, tmp_path / "summary.json", log).wait(timeout=900)
    return rc, plan, table, log.read_text(errors="replace")


def check_exact(
    bootstrap: str, dsn: str, table: str, plan: DrainPlan, visible: set[tuple[int, int]], log: str
) -> None:
    rows = pg_offsets(dsn, table)
    assert sorted(rows) == sorted(visible), (
        len(rows),
        len(visible),
        log[-3000:],
    )  # each visible once, nothing else
    prog = progress(bootstrap, plan)
    assert all(prog[(s.partition, s.index)][0] == s.end for s in plan.sub_ranges), prog


def test_aborted_transactions_only_sub_range_completes(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    from confluent_kafka import Producer

    topic = new_topic(partitions=1, prefix="drain-txn")
    p = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": "tx-" + uuid.uuid4().hex[:8],
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    p.init_transactions(30)
    blocks: list[tuple[str, int]] = [
        ("commit", 300),
        ("abort", 400),
        ("commit", 200),
        ("abort", 250),
        ("abort", 150),
    ]
    bounds: list[tuple[str, int, int]] = []  # (outcome, first offset, end incl. its marker)
    for outcome, n in blocks:
        start = settled_end(kafka_bootstrap, topic, 0)
        p.begin_transaction()
        for i in range(n):
            p.produce(
                topic, key=f"k{i}".encode(), value=json.dumps({"i": i, "o": outcome}).encode(), partition=0
            )
        p.flush(30)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(30)
        bounds.append((outcome, start, settled_end(kafka_bootstrap, topic, 0)))
    end = bounds[-1][2]
    # one sub-range per block: the aborted ones (and the last, ending the range) hold no visible record
    subs = tuple(SubRange(0, k, a, b) for k, (_, a, b) in enumerate(bounds))
    visible = set()
    for outcome, a, b in bounds:
        seen = visible_offsets(kafka_bootstrap, topic, 0, a, b)
        if outcome == "abort":
            # the fault fired: the offsets are there (read_uncommitted returns them), none is visible
            assert seen == [], (a, b, seen[:5])
            assert len(visible_offsets(kafka_bootstrap, topic, 0, a, b, "read_uncommitted")) == b - a - 1
        else:
            assert len(seen) == b - a - 1  # the block's records, not its commit marker
        visible |= {(0, o) for o in seen}
    assert end == high_watermark(kafka_bootstrap, topic, 0)

    rc, plan, table, log = run_drain(kafka_bootstrap, postgres_dsn, spark_jars, topic, subs, tmp_path)
    assert rc == 0, log[-4000:]
    check_exact(kafka_bootstrap, postgres_dsn, table, plan, visible, log)


def test_a_task_with_no_visible_record_shows_its_sign_of_life(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """H3/H5: the operator's plan (attempt 2) with sub-ranges made only of aborted transactions: every
    task, the invisible ones too, commits its sign of life when it starts reading (event
    `drain_task_started` of its partition and index, before the driver completes the range), because
    the driver named each task's range in the job (`lagpilot.drain.taskRanges`). Before, only the
    task that got a record did: the attempt stayed under the start-up bound."""
    from confluent_kafka import Producer

    topic = new_topic(partitions=1, prefix="drain-sign")
    p = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": "tx-" + uuid.uuid4().hex[:8],
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    p.init_transactions(30)
    bounds: list[tuple[str, int, int]] = []
    for outcome, n in (("commit", 100), ("abort", 200), ("abort", 150)):
        start = settled_end(kafka_bootstrap, topic, 0)
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, key=f"k{i}".encode(), value=json.dumps({"i": i}).encode(), partition=0)
        p.flush(30)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(30)
        bounds.append((outcome, start, settled_end(kafka_bootstrap, topic, 0)))
    subs = tuple(SubRange(0, k, a, b) for k, (_, a, b) in enumerate(bounds))
    for outcome, a, b in bounds:  # the fault fired: the aborted sub-ranges hold offsets, none visible
        if outcome == "abort":
            assert visible_offsets(kafka_bootstrap, topic, 0, a, b) == [] and b - a > 100

    rc, plan, _table, log = run_drain(
        kafka_bootstrap, postgres_dsn, spark_jars, topic, subs, tmp_path, attempt=2
    )
    assert rc == 0, log[-4000:]
    started = {
        (e.get("partition"), e.get("index")): e
        for e in map(_json_line, log.splitlines())
        if e and e.get("event") == "drain_task_started"
    }
    assert set(started) == {(0, 0), (0, 1), (0, 2)}, (sorted(started), log[-4000:])
    assert all(e.get("attempt") == 2 for e in started.values())
    assert "drain_tasks_not_named" not in log
    # still completed by the driver as read without a visible record (their tasks named no sub-range)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(summary.get("no_visible_records") or []) == sorted(
        f"p0#{k}[{a}, {b})" for k, (o, a, b) in enumerate(bounds) if o == "abort"
    ), summary
    prog = progress(kafka_bootstrap, plan)
    assert all(prog[(s.partition, s.index)][0] == s.end for s in plan.sub_ranges), prog


def _json_line(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        got = json.loads(line)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def test_compacted_away_sub_range_completes(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    from confluent_kafka import Producer

    # small segments, the cleaner allowed at once: the first block's keys are overwritten by the second
    topic = new_topic(
        partitions=1,
        prefix="drain-compact",
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
            "max.compaction.lag.ms": "1000",
        },
    )
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})

    def block(keys: list[str], tag: str) -> tuple[int, int]:
        start = high_watermark(kafka_bootstrap, topic, 0)
        for k in keys:
            p.produce(topic, key=k.encode(), value=json.dumps({"k": k, "t": tag}).encode(), partition=0)
        p.flush(30)
        time.sleep(0.3)  # the next block goes to a new segment (segment.ms)
        return start, high_watermark(kafka_bootstrap, topic, 0)

    doomed = block([f"a{i}" for i in range(300)], "old")  # all overwritten below
    kept = block([f"b{i}" for i in range(200)], "kept")  # unique keys: stay
    block([f"a{i}" for i in range(300)], "new")  # overwrites the first block
    deadline = time.monotonic() + 240
    while visible_offsets(kafka_bootstrap, topic, 0, *doomed):  # roll segments until the cleaner ran
        assert time.monotonic() < deadline, "the log cleaner did not compact the first block"
        block([f"c{int(time.time() * 1000) % 5}"], "roll")
        time.sleep(2)
    end = high_watermark(kafka_bootstrap, topic, 0)
    # the fault fired: [doomed) has offsets below the end but no record is left in it
    assert doomed[1] - doomed[0] == 300 and visible_offsets(kafka_bootstrap, topic, 0, *doomed) == []
    subs = (
        SubRange(0, 0, doomed[0], doomed[1]),
        SubRange(0, 1, kept[0], kept[1]),
        SubRange(0, 2, kept[1], end),
    )
    visible = {(0, o) for s in subs for o in visible_offsets(kafka_bootstrap, topic, 0, s.start, s.end)}
    assert len([o for p_, o in visible if kept[0] <= o < kept[1]]) == 200

    rc, plan, table, log = run_drain(kafka_bootstrap, postgres_dsn, spark_jars, topic, subs, tmp_path)
    assert rc == 0, log[-4000:]
    check_exact(kafka_bootstrap, postgres_dsn, table, plan, visible, log)


# ---- through the operator: the drain of a transactional backlog reaches Verified -------------------


def test_operator_drains_a_transactional_backlog_with_aborted_sub_ranges_to_verified(
    scenario: Callable[..., Any], kafka_admin: Any, postgres_dsn: str
) -> None:
    """A backlog of committed and aborted transactions on 3 partitions (per partition: 1,500
    committed, 4,000 aborted, 1,500 committed), produced while `spec.drain.cancel` holds drains
    back; then the capped group (3 consumers at ~100 records/s) cannot clear it within the 20 s SLA
    and a drain is planned. The aborted block is wider than a sub-range, so the plan holds
    sub-ranges with no visible record (asserted on the recorded plan: the fault fired). The drain
    reaches Verified in one attempt and the ledger holds every committed record exactly once,
    nothing of an aborted transaction."""
    import psycopg
    from confluent_kafka import Producer

    from tests.real.test_drain_operator import PARTS, wait_phase

    s = scenario({}, live_per_s=0, sla_s=20, drain={"cancel": True})
    p = Producer(
        {
            "bootstrap.servers": s.bootstrap,
            "transactional.id": "tx-" + uuid.uuid4().hex[:8],
            "enable.idempotence": True,
            "linger.ms": 20,
        }
    )
    p.init_transactions(30)
    for outcome, n in (("commit", 1500), ("abort", 4000), ("commit", 1500)):
        p.begin_transaction()
        for _i in range(n):
            for part in range(PARTS):
                while True:
                    try:
                        p.produce(
                            s.topic, value=json.dumps({"p": part, "o": outcome}).encode(), partition=part
                        )
                        break
                    except BufferError:
                        p.poll(0.1)
        p.flush(60)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(60)
    ends = {part: settled_end(s.bootstrap, s.topic, part) for part in range(PARTS)}
    visible = {
        (part, o) for part in range(PARTS) for o in visible_offsets(s.bootstrap, s.topic, part, 0, ends[part])
    }
    assert len(visible) == PARTS * 3000  # committed records only: the aborted ones are there but invisible
    s.patch_spec({"drain": {"cancel": False}})
    running = wait_phase(s, ("Running", "Succeeded", "Verified", "Failed"), 300)
    subs = list(running.get("subRanges") or ())
    empty = [x for x in subs if not any((x["partition"], o) in visible for o in range(x["start"], x["end"]))]
    assert empty, f"the fault did not fire: every sub-range holds a visible record ({subs})"
    d = wait_phase(s, ("Verified", "Failed"), 900)
    assert d["phase"] == "Verified" and d["attempt"] == 1, json.dumps(d)[:2000]

    # the group catches up to the end; then every committed record exactly once, no aborted one
    from confluent_kafka import Consumer, TopicPartition

    from tests.fixtures.kube import wait_until

    reader = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.group, "enable.auto.commit": False})
    try:
        wait_until(
            lambda: all(
                tp.offset >= ends[tp.partition]
                for tp in reader.committed(
                    [TopicPartition(s.topic, part) for part in range(PARTS)], timeout=30
                )
            ),
            "the group at the end",
            900,
            interval=2,
        )
    finally:
        reader.close()
    with psycopg.connect(postgres_dsn) as conn:
        rows = [
            (int(a), int(b), src)
            for a, b, src in conn.execute(f'SELECT partition, "offset", source FROM {s.table}')
        ]
    seen = [(a, b) for a, b, _ in rows]
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} records processed twice"
    assert set(seen) == visible, (
        f"missing {len(visible - set(seen))}, not committed {len(set(seen) - visible)}"
    )
    drained = {(a, b) for a, b, src in rows if src == "drain"}
    planned = {
        (r["partition"], o)
        for h in d.get("history") or ()
        if h["phase"] == "Verified"
        for r in h["ranges"]
        for o in range(r["start"], r["end"])
    }
    assert drained == planned & visible
    print(
        f"transactional backlog: {len(visible)} committed records, {len(seen)} rows, drain {len(drained)} "
        f"in {len(subs)} sub-ranges ({len(empty)} without a visible record), attempt {d['attempt']}"
    )


# ---- through the operator: the drain of a compacted backlog reaches Verified ------------------------

COMPACT = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
    "max.compaction.lag.ms": "1000",
}


def test_operator_drains_a_compacted_backlog_with_compacted_away_sub_ranges_to_verified(
    scenario: Callable[..., Any], kafka_admin: Any, postgres_dsn: str
) -> None:
    """A compacted topic (issue 23 H5 through the operator). Per partition: 3,000 records with unique
    keys, then 6,000 with keys a0..a5999, then the same 6,000 keys again: the log cleaner removes
    the middle block. It is produced while `spec.drain.cancel` holds drains back and while the
    consumers, slowed down (5 s per batch; the drain's calls 100 ms), are still in the first block.
    Then a drain is planned over the rest. The middle block is wider than a sub-range, so the plan holds sub-ranges with no
    record left (asserted on the recorded plan: the fault fired). The drain reaches Verified in one
    attempt, and the ledger holds every record still in the log once, nothing twice. Offsets the
    cleaner removed after someone processed them (the segment-rolling records) may also be there."""
    import psycopg
    from confluent_kafka import Consumer, Producer, TopicPartition

    from tests.fixtures.kube import wait_until
    from tests.real.test_drain_operator import PARTS, wait_phase

    # the consumers are slow (5 s per call: still in the first block when the cleaner runs); the
    # drain need not be (100 ms per call: the drain's speed proves nothing about compaction)
    s = scenario(
        {},
        live_per_s=0,
        sla_s=20,
        drain={"cancel": True},
        cost_ms=5000,
        topic_config=COMPACT,
        handler_config={"drain_cost_ms": "100"},
    )
    p = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 20})

    def produce(keys: list[str], tag: str) -> dict[int, tuple[int, int]]:
        start = {part: high_watermark(s.bootstrap, s.topic, part) for part in range(PARTS)}
        for k in keys:
            for part in range(PARTS):
                while True:
                    try:
                        p.produce(
                            s.topic,
                            key=k.encode(),
                            value=json.dumps({"k": k, "t": tag}).encode(),
                            partition=part,
                        )
                        break
                    except BufferError:
                        p.poll(0.1)
        p.flush(60)
        time.sleep(0.3)  # the next block goes to a new segment (segment.ms)
        return {part: (start[part], high_watermark(s.bootstrap, s.topic, part)) for part in range(PARTS)}

    produce([f"u{i}" for i in range(3000)], "unique")
    doomed = produce([f"a{i}" for i in range(6000)], "old")
    produce([f"a{i}" for i in range(6000)], "new")
    deadline = time.monotonic() + 300
    while any(visible_offsets(s.bootstrap, s.topic, part, *doomed[part]) for part in range(PARTS)):
        assert time.monotonic() < deadline, "the log cleaner did not compact the middle block"
        produce([f"roll{int(time.time() * 1000) % 5}"], "roll")
        time.sleep(2)
    reader = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.group, "enable.auto.commit": False})
    try:
        committed = {
            tp.partition: tp.offset
            for tp in reader.committed([TopicPartition(s.topic, part) for part in range(PARTS)], timeout=30)
        }
    finally:
        reader.close()
    # the consumers had not reached the middle block: nobody read it before the cleaner removed it
    assert all(committed[part] < doomed[part][0] for part in range(PARTS)), (committed, doomed)
    s.patch_spec({"drain": {"cancel": False}})
    running = wait_phase(s, ("Running", "Succeeded", "Verified", "Failed"), 300)
    subs = list(running.get("subRanges") or ())
    ends = {part: high_watermark(s.bootstrap, s.topic, part) for part in range(PARTS)}
    visible = {
        (part, o) for part in range(PARTS) for o in visible_offsets(s.bootstrap, s.topic, part, 0, ends[part])
    }
    empty = [x for x in subs if not any((x["partition"], o) in visible for o in range(x["start"], x["end"]))]
    assert empty, f"the fault did not fire: every sub-range holds a record ({subs})"
    d = wait_phase(s, ("Verified", "Failed"), 900)
    assert d["phase"] == "Verified" and d["attempt"] == 1, json.dumps(d)[:2000]

    reader = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.group, "enable.auto.commit": False})
    try:
        wait_until(
            lambda: all(
                tp.offset >= ends[tp.partition]
                for tp in reader.committed(
                    [TopicPartition(s.topic, part) for part in range(PARTS)], timeout=30
                )
            ),
            "the group at the end",
            900,
            interval=2,
        )
    finally:
        reader.close()
    left = {
        (part, o) for part in range(PARTS) for o in visible_offsets(s.bootstrap, s.topic, part, 0, ends[part])
    }
    with psycopg.connect(postgres_dsn) as conn:
        rows = [
            (int(a), int(b), src)
            for a, b, src in conn.execute(f'SELECT partition, "offset", source FROM {s.table}')
        ]
    seen = [(a, b) for a, b, _ in rows]
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} records processed twice"
    assert left <= set(seen), f"{len(left - set(seen))} records still in the log never processed"
    assert all(o < ends[a] for a, o in seen)
    assert not {(a, o) for a, o in seen if doomed[a][0] <= o < doomed[a][1]}, (
        "a compacted-away record was processed"
    )
    print(
        f"compacted backlog: {len(left)} records left in the log, {len(seen)} rows, drain "
        f"{sum(1 for *_, src in rows if src == 'drain')} in {len(subs)} sub-ranges ({len(empty)} without a record), "
        f"attempt {d['attempt']}"
    )
