"""Handlers used by the drain tests and the benchmark (importable by consumer pods and Spark workers
through PYTHONPATH=<repo root>).

`slow_postgres`: the built-in postgres sink after a pause of config["sleep"] seconds (gives a
fault test time to kill something mid-way).
`ledger`: appends (topic, partition, offset, source) to a PostgreSQL table WITHOUT a primary key,
(create it first with LEDGER_DDL) so any offset processed twice (by both paths, or twice by one) shows up as a duplicate row; it
costs config["cost_ms"] per call in total (a fixed-latency sink, like the benchmark's); a drain's
calls cost config["drain_cost_ms"] instead when it is set (slow consumers, a quick drain).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from lagpilot_runtime.handler import BatchContext, Record
from lagpilot_runtime.sinks import postgres

_local = threading.local()


def slow_postgres(records: list[Record], ctx: BatchContext) -> None:
    time.sleep(float(ctx.config.get("sleep", "0")))
    postgres.process(records, ctx)


def _conn() -> Any:
    import psycopg

    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        # LEDGER_DSN: a consumer pod with a custom handler gets no LAGPILOT_POSTGRES_DSN (that one
        # comes with sink=postgres), so the tests pass the DSN through template.env (secretKeyRef)
        dsn = os.environ.get("LEDGER_DSN") or os.environ["LAGPILOT_POSTGRES_DSN"]
        conn = psycopg.connect(dsn, autocommit=True)
        _local.conn = conn
    return conn


LEDGER_DDL = (
    'CREATE TABLE {table} (topic text, partition int, "offset" bigint, source text, at double precision)'
)


def ledger(records: list[Record], ctx: BatchContext) -> None:
    t0 = time.monotonic()
    table = ctx.config.get("table", "drain_ledger")
    conn = _conn()
    now = time.time()
    with conn.cursor().copy(f'COPY {table} (topic, partition, "offset", source, at) FROM STDIN') as cp:
        for r in records:
            cp.write_row((r.topic, r.partition, r.offset, ctx.source, now))
    cost = ctx.config.get("drain_cost_ms") if ctx.source == "drain" else None  # the drain's own, if set
    cost = cost if cost is not None else ctx.config.get("cost_ms", "0")
    left = float(cost) / 1000.0 - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)


def hang_once_ledger(records: list[Record], ctx: BatchContext) -> None:
    """The built-in ledger sink, except that the first drain call of a run (across all its tasks and
    processes: config["hang_marker"], a file created atomically by the call that hangs) never
    returns, like a sink that stopped answering. Writes nothing before it hangs."""
    marker = ctx.config.get("hang_marker")
    if marker and ctx.source == "drain":
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, f"{os.getpid()} p{records[0].partition}@{records[0].offset}".encode())
            os.close(fd)
            time.sleep(3600)
    from lagpilot_runtime.sinks import ledger as sink

    sink.process(records, ctx)


HANG_DDL = 'CREATE TABLE {table} (kind text, pid int, partition int, "offset" bigint, at double precision)'


def ledger_drain_hangs_while_marked(records: list[Record], ctx: BatchContext) -> None:
    """`ledger`, except that a drain call starting while the table config["hang_table"] (HANG_DDL)
    holds a row of kind 'down' never returns and writes nothing to the ledger (a sink that stopped
    answering); each hung call first adds a row of kind 'hung' (its pid, partition, first offset).
    Calls that start after the 'down' row is deleted (the sink back) are the ledger's. A table, not a
    file: the test and the drain's pods share the database; a container on the real node sees none
    of the test's files."""
    table = ctx.config.get("hang_table")
    if table and ctx.source == "drain":
        conn = _conn()
        if conn.execute(f"SELECT 1 FROM {table} WHERE kind = 'down'").fetchone() is not None:
            conn.execute(
                f'INSERT INTO {table} (kind, pid, partition, "offset", at) VALUES (%s, %s, %s, %s, %s)',
                ("hung", os.getpid(), records[0].partition, records[0].offset, time.time()),
            )
            time.sleep(3600)
    ledger(records, ctx)
