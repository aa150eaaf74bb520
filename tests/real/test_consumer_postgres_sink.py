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
    got = rows(env, f'SELECT count(*), count(DISTINCT (topic, partition, "offset")), min(timestamp_ms), max(timestamp_ms) FROM "{table}"')
    assert got == [(300, 300, 1000, 1299)]
    (value, headers), = rows(env, f'SELECT value, headers FROM "{table}" WHERE "offset" = 7')
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
                pg.write_rows(conn, table, "insert", pg.rows_for(
                    [Record("t", part, i, None, b"x", [], None) for i in range(200)], "insert"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert rows(env, f'SELECT count(*) FROM "{table}"') == [(1200,)]
