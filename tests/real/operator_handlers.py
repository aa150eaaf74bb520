"""Batch handlers for the operator end-to-end tests (imported by consumer pods via PYTHONPATH=<repo>).

`slow`: costs config["ms_per_record"] milliseconds per record, so a consumer's capacity is known
(about 1000 / ms_per_record records per busy second) whatever the machine's load.
"""

from __future__ import annotations

import time

from lagpilot_runtime.handler import BatchContext, Record


def slow(records: list[Record], ctx: BatchContext) -> None:
    time.sleep(len(records) * float(ctx.config.get("ms_per_record", "5")) / 1000.0)


SHARED_LIMIT_DDL = (
    "CREATE TABLE {table} (pod text NOT NULL, at double precision NOT NULL, records int NOT NULL)"
)


def shared_limit(records: list[Record], ctx: BatchContext) -> None:
    """A sink every consumer shares, that takes at most 1000 / config["ms_per_record"] records/s in
    total however many consumers write to it (a downstream limit, issue 25 item 4): each batch holds
    an exclusive lock while it costs ms_per_record per record, a PostgreSQL advisory lock (pods on a
    node share no file; the DSN from LEDGER_DSN, the pod's Secret), and appends (pod, end time,
    records) to the table config["table"] (SHARED_LIMIT_DDL) in the same transaction, so a test can
    see the limit fire (the total rate with several consumers writing)."""
    import os

    import psycopg

    table = ctx.config["table"]
    with psycopg.connect(os.environ["LEDGER_DSN"]) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
        time.sleep(len(records) * float(ctx.config.get("ms_per_record", "10")) / 1000.0)
        conn.execute(
            f"INSERT INTO {table} (pod, at, records) VALUES (%s, %s, %s)",
            (os.environ.get("HOSTNAME", ""), time.time(), len(records)),
        )
