"""The built-in postgres sink on the real PostgreSQL: idempotent insert, upsert keeps the newest, both write paths."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest

from lagpilot_runtime.handler import BatchContext, Record, RecordsFailed
from lagpilot_runtime.sinks import postgres as pg

pytestmark = [pytest.mark.real]


def ctx(**config: str) -> BatchContext:
    return BatchContext(config=config, logger=logging.getLogger("test.sink"))


def rows(dsn: str, query: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        return conn.execute(query).fetchall()


@pytest.fixture
def env(postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LAGPILOT_POSTGRES_DSN", postgres_dsn)
    monkeypatch.delenv("LAGPILOT_POSTGRES_TABLE", raising=False)
    monkeypatch.delenv("LAGPILOT_POSTGRES_MODE", raising=False)
    yield postgres_dsn
    pg.close()


@pytest.mark.parametrize("method", ["copy", "executemany"])
def test_insert_is_idempotent_and_creates_its_table(env, method):
    table = f"sink_ins_{uuid.uuid4().hex[:8]}"
    records = [Record("t", i % 3, i, b"k%d" % i, b"v%d" % i, [("h", b"\xff")], 1000 + i) for i in range(300)]
    c = ctx(**{"postgres.table": table, "postgres.method": method})
    pg.process(records, c)
    pg.process(records[100:250], c)  # a replay after a crash
    got = rows(
        env,
        f'SELECT count(*), count(DISTINCT (topic, partition, "offset")), min(timestamp_ms), max(timestamp_ms) FROM "{table}"',
    )
    assert got == [(300, 300, 1000, 1299)]
    ((value, headers),) = rows(env, f'SELECT value, headers FROM "{table}" WHERE "offset" = 7')
    assert bytes(value) == b"v7" and headers == [["h", "\\xff"]]


def test_upsert_keeps_the_newest_offset_per_key_even_when_replayed(env):
    table = f"sink_up_{uuid.uuid4().hex[:8]}"
    c = ctx(**{"postgres.table": table, "postgres.mode": "upsert"})
    first = [Record("t", 0, i, b"key-%d" % (i % 10), b"v%d" % i, [], None) for i in range(0, 50)]
    second = [Record("t", 0, i, b"key-%d" % (i % 10), b"v%d" % i, [], None) for i in range(50, 120)]
    pg.process(first, c)
    pg.process(second, c)
    pg.process(first, c)  # an older batch replayed must not win
    got = {bytes(k): (o, bytes(v)) for k, o, v in rows(env, f'SELECT key, "offset", value FROM "{table}"')}
    assert got == {b"key-%d" % k: (110 + k, b"v%d" % (110 + k)) for k in range(10)}
    with pytest.raises(RecordsFailed):
        pg.process([Record("t", 0, 500, None, b"no key", [], None)], c)


def test_concurrent_writers_create_the_table_once(env):
    table = f"sink_race_{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []

    def writer(part: int) -> None:
        import psycopg

        try:
            with psycopg.connect(env, autocommit=True) as conn:
                pg.ensure_table(conn, table, "insert")
                pg.write_rows(
                    conn,
                    table,
                    "insert",
                    pg.rows_for([Record("t", part, i, None, b"x", [], None) for i in range(200)], "insert"),
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert rows(env, f'SELECT count(*) FROM "{table}"') == [(1200,)]


# ---- M5 (issue 23): newest-wins across partitions, topic incarnations --------------------------


def _values(dsn: str, table: str) -> dict[bytes, bytes]:
    return {bytes(k): bytes(v) for k, v in rows(dsn, f'SELECT key, value FROM "{table}"')}


@pytest.mark.parametrize("together", [False, True])
def test_upsert_an_older_record_from_another_partition_never_wins(env, together):
    """Partitions were added, the key moved from p0 to p1: p1's record is the newer one (later
    timestamp). p0's older record — consumed later, or in the same batch — must not overwrite it."""
    table = f"sink_upx_{uuid.uuid4().hex[:8]}"
    c = ctx(**{"postgres.table": table, "postgres.mode": "upsert"})
    newer = Record("t", 1, 5, b"k", b"newer", [], 2_000)
    older = Record("t", 0, 900, b"k", b"older", [], 1_000)
    if together:
        pg.process([newer, older], c)
    else:
        pg.process([newer], c)
        pg.process([older], c)
    assert _values(env, table) == {b"k": b"newer"}
    # within one partition the offset decides (a producer's clock may go back)
    pg.process([Record("t", 1, 6, b"k", b"later-offset", [], 1_500)], c)
    assert _values(env, table) == {b"k": b"later-offset"}
    # equal timestamps across partitions: the higher (partition, offset) wins, documented in docs/consumer.md
    pg.process([Record("t", 0, 901, b"k", b"tie-p0", [], 1_500)], c)
    assert _values(env, table) == {b"k": b"later-offset"}
    pg.process([Record("t", 2, 0, b"k", b"tie-p2", [], 1_500)], c)
    assert _values(env, table) == {b"k": b"tie-p2"}


def test_insert_keeps_the_records_of_a_recreated_topic(env, kafka_bootstrap, kafka_admin, monkeypatch):
    """The topic is deleted and created again: its offsets start over. The insert key must tell the
    incarnations apart (the topic id Kafka assigns), else the new records at reused offsets are
    dropped as replays."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import NewTopic

    from tests.fixtures.kube import wait_until

    topic = f"sink-recreated-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("LAGPILOT_BOOTSTRAP_SERVERS", kafka_bootstrap)

    def create() -> str:
        kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=60)
        return wait_until(
            lambda: str(
                kafka_admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=10).topic_id
            ),
            f"{topic} described",
            60,
        )

    first_id = create()
    table = f"sink_inc_{uuid.uuid4().hex[:8]}"
    c = ctx(**{"postgres.table": table})
    try:
        pg.process([Record(topic, 0, i, None, b"first-%d" % i, [], 1_000 + i) for i in range(3)], c)
        kafka_admin.delete_topics([topic])[topic].result(timeout=60)
        wait_until(lambda: topic not in kafka_admin.list_topics(timeout=10).topics, f"{topic} deleted", 60)
        second_id = wait_until(
            lambda: (lambda i: i if i != first_id else None)(create()), "the topic re-created", 90
        )
        assert second_id != first_id  # the fault is real: a new incarnation
        pg.process([Record(topic, 0, i, None, b"second-%d" % i, [], 5_000 + i) for i in range(3)], c)
        got = sorted(bytes(v) for (v,) in rows(env, f'SELECT value FROM "{table}"'))
        assert got == sorted([b"first-0", b"first-1", b"first-2", b"second-0", b"second-1", b"second-2"]), got
        # a replay of the new incarnation's batch still writes nothing twice
        pg.process([Record(topic, 0, i, None, b"second-%d" % i, [], 5_000 + i) for i in range(3)], c)
        assert rows(env, f'SELECT count(*) FROM "{table}"') == [(6,)]
    finally:
        kafka_admin.delete_topics([topic])


def test_a_claim_fences_every_earlier_writer_of_the_range(env):
    """Issue 23: the drain fence on the real PostgreSQL. A range claimed again refuses writes of the
    earlier claim inside their transaction (nothing of them stored), pieces without progress
    included; a progress table of an earlier version gets its epoch column."""
    import psycopg

    from lagpilot_runtime.handler import Fenced

    table = f"sink_fence_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(env, autocommit=True) as conn:  # the progress table as an earlier version made it
        conn.execute(
            f"CREATE TABLE {pg.progress_table(table)} (scope text NOT NULL, topic text NOT NULL, "
            "partition integer NOT NULL, next_offset bigint NOT NULL, updated_at timestamptz NOT NULL "
            "DEFAULT now(), PRIMARY KEY (scope, topic, partition))"
        )

    def drain_ctx(epoch, offsets=None):
        c = BatchContext(
            config={"postgres.table": table, "postgres.key": "none"},
            logger=logging.getLogger("t"),
            source="drain",
            group_id="g",
            drain_id="1",
            sub_range=(0, 0, 0, 1000),
        )
        c.epoch, c.offsets = epoch, offsets
        return c

    recs = lambda a, b: [Record("t", 0, o, None, b"v") for o in range(a, b)]  # noqa: E731
    old = pg.claim("t", [0], drain_ctx(None))[0]
    assert pg.progress("t", [0], drain_ctx(None)) == {}  # claimed, nothing written: no progress
    pg.process(recs(0, 100), drain_ctx(old, {("t", 0): 100}))
    new = pg.claim("t", [0], drain_ctx(None))[0]
    assert new == old + 1
    assert pg.progress("t", [0], drain_ctx(None)) == {0: 100}
    with pytest.raises(Fenced):
        pg.process(recs(100, 200), drain_ctx(old, {("t", 0): 200}))
    with pytest.raises(Fenced):  # a piece of a failure isolation: no progress, still fenced
        pg.process(recs(100, 150), drain_ctx(old))
    assert rows(env, f'SELECT count(*), max("offset") FROM {table}') == [(100, 99)]
    assert pg.progress("t", [0], drain_ctx(None)) == {0: 100}
    pg.process(recs(100, 200), drain_ctx(new, {("t", 0): 200}))
    assert rows(env, f'SELECT count(*), count(DISTINCT "offset") FROM {table}') == [(200, 200)]
    assert pg.progress("t", [0], drain_ctx(None)) == {0: 200}
    # the consumer (no claim) writes as before, under its own scope
    pg.process(
        recs(200, 210),
        BatchContext(
            config={"postgres.table": table, "postgres.key": "none"},
            logger=logging.getLogger("t"),
            group_id="g",
            offsets={("t", 0): 210},
        ),
    )
    assert rows(env, f"SELECT count(*) FROM {table}") == [(210,)]
