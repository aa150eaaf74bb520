"""The real PostgreSQL of the dev stack: connection, an insert/select round trip, crash recovery."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.stack import private_part

pytestmark = [pytest.mark.real]


def test_connects_as_app_user_on_loopback(postgres_dsn: str) -> None:
    import psycopg

    assert "@127.0.0.1:" in postgres_dsn
    with psycopg.connect(postgres_dsn, connect_timeout=30) as conn:
        user, db, addr = conn.execute(
            "SELECT current_user, current_database(), inet_server_addr()::text"
        ).fetchone()
    assert (user, db) == ("lagpilot", "lagpilot")
    assert addr.startswith("127.0.0.1")


def test_insert_select_round_trip(postgres_dsn: str) -> None:
    import psycopg

    table = f"rt_{uuid.uuid4().hex[:8]}"
    rows = [(i, f"k{i}".encode(), f"value {i} ünïcødé".encode()) for i in range(500)]
    with psycopg.connect(postgres_dsn, connect_timeout=30) as conn:
        conn.execute(f"CREATE TABLE {table} (off bigint PRIMARY KEY, k bytea, v bytea)")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s)", rows)
        conn.commit()
    # a new connection sees exactly what was committed
    with psycopg.connect(postgres_dsn, connect_timeout=30) as conn:
        got = [
            (o, bytes(k), bytes(v)) for o, k, v in conn.execute(f"SELECT off, k, v FROM {table} ORDER BY off")
        ]
        conn.execute(f"DROP TABLE {table}")
    assert got == rows


def test_the_server_does_not_run_as_root(stack: Any, postgres_dsn: str) -> None:
    import os

    pid = stack.part("postgres").process().pid()
    assert pid is not None
    assert os.stat(f"/proc/{pid}").st_uid != 0


@pytest.fixture
def private_postgres(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A second cluster with its own state (killing it disturbs no session sharing the stack's)."""
    from lagpilot_dev.postgres import PostgresPart

    with private_part(PostgresPart(stack.cache_dir, tmp_path_factory.mktemp("pg-fault-state"))) as part:
        yield part


@pytest.mark.slow
def test_killed_server_restarts_and_keeps_committed_rows(private_postgres: Any) -> None:
    import psycopg

    pg = private_postgres
    dsn = pg.app_dsn()
    table = f"crash_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, connect_timeout=30) as conn:
        conn.execute(f"CREATE TABLE {table} (n int)")
        conn.execute(f"INSERT INTO {table} SELECT generate_series(1, 1000)")
        conn.commit()
    pid_before = pg.process().pid()
    pg.kill()
    assert not pg.is_running()
    pg.start()
    assert pg.process().pid() != pid_before
    assert pg.app_dsn() == dsn  # same port, same password
    with psycopg.connect(dsn, connect_timeout=30) as conn:
        count, total = conn.execute(f"SELECT count(*), sum(n) FROM {table}").fetchone()
    assert (count, total) == (1000, 1000 * 1001 // 2)
