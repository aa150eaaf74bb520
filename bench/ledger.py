"""A delivery ledger: one row per delivered record, NO unique key, so every duplicate shows.

For the benchmarks (bench-local; not a production sink; Spark workers import it through PYTHONPATH=<repo>): ``LAGPILOT_HANDLER=
bench.ledger:process`` with ``LAGPILOT_HANDLER_CONFIG={"table": ..., "cost_ms": ...}``
and the DSN in ``LEDGER_DSN`` or ``LAGPILOT_POSTGRES_DSN``. Each call appends (topic, partition,
offset, source, at) for every record with one COPY, ``at`` being the wall time of the batch, then
sleeps so that the call costs ``cost_ms`` in total: a fixed-latency sink like a remote database
write. Lost offsets = produced minus distinct rows; duplicated = rows minus distinct rows.

``create_table(dsn, table)`` makes the table (``DDL``); ``stats(dsn, table, ranges)`` counts.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

DDL = 'CREATE TABLE {table} (topic text, partition int, "offset" bigint, source text, at double precision)'

_local = threading.local()


def _conn() -> Any:
    import psycopg

    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        dsn = os.environ.get("LEDGER_DSN") or os.environ["LAGPILOT_POSTGRES_DSN"]
        conn = psycopg.connect(dsn, autocommit=True)
        _local.conn = conn
    return conn


def process(records: list[Any], ctx: Any) -> None:
    """The handler: COPY one row per record, then wait out the rest of ``cost_ms``."""
    t0 = time.monotonic()
    table = ctx.config.get("table", "delivery_ledger")
    now = time.time()
    with _conn().cursor().copy(f'COPY {table} (topic, partition, "offset", source, at) FROM STDIN') as cp:
        for r in records:
            cp.write_row((r.topic, r.partition, r.offset, ctx.source, now))
    left = float(ctx.config.get("cost_ms", "0")) / 1000.0 - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)


def create_table(dsn: str, table: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL.format(table=table))


def stats(dsn: str, table: str, ranges: Mapping[int, tuple[int, int]], source: str | None = None) -> dict[str, Any]:
    """Counts against the offsets that had to be delivered (``ranges``: partition -> [start, end)).

    lost: expected offsets with no row; duplicated: rows beyond the first per offset; outside: rows
    for offsets that were not expected. ``source`` restricts to one path ("consumer"/"drain").
    """
    import psycopg

    where = "WHERE source = %s" if source else ""
    args = (source,) if source else ()
    expected = " OR ".join(f'(partition = {int(p)} AND "offset" >= {int(a)} AND "offset" < {int(b)})'
                           for p, (a, b) in ranges.items()) or "false"
    with psycopg.connect(dsn) as conn:
        rows, distinct, t0, t1 = conn.execute(
            f'SELECT count(*), count(DISTINCT (partition, "offset")), min(at), max(at) FROM {table} {where}',
            args).fetchone()
        inside = conn.execute(
            f'SELECT count(DISTINCT (partition, "offset")) FROM {table} '
            f'{where + " AND" if where else "WHERE"} ({expected})', args).fetchone()[0]
    total = sum(max(0, b - a) for a, b in ranges.values())
    return {"rows": int(rows), "distinct": int(distinct), "lost": total - int(inside),
            "duplicated": int(rows) - int(distinct), "outside": int(distinct) - int(inside),
            "first_at": t0, "last_at": t1}
