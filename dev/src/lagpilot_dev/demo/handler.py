"""The demo's batch handler: the built-in PostgreSQL sink behind an artificially slow downstream,
plus a delivery ledger written in the same transaction.

Why a custom handler: on a laptop the built-in sink writes thousands of rows per second, so no
spike a demo can produce would outrun three consumers. The seed's consumers were slow because
every record cost a synchronous ~180 ms database call; this handler puts a (much smaller) cost per
record and per batch in front of the real write, so one consumer manages a few dozen records per
second and a spike needs the drain. Consumers and the Spark drain call the same function.

    processing:
      handler: "lagpilot_dev.demo.handler:process"
      config: {recordDelayMs: "15", batchDelayMs: "50", postgres.table: orders, ledgerTable: demo_ledger}
    template:
      env: [{name: DEMO_POSTGRES_DSN, valueFrom: {secretKeyRef: {name: demo-pg, key: dsn}}}]

Then, per batch: sleep ``batchDelayMs + recordDelayMs * len(records)``, then ONE transaction that
writes the records with ``lagpilot_runtime.sinks.postgres`` (idempotent: primary key
topic/partition/offset; table from ``config[postgres.table]``) and, when ``ledgerTable`` is set,
appends one row per record to the ledger (deliberately NO key: a record delivered twice is two
rows). The sink's key hides a redelivery; the ledger counts it, so the demo's "records processed
more than once" and its "lost" come from the ledger and the proof can fail. Both writes commit or
neither does: a ledger row exists exactly when this delivery reached the sink.

The DSN is a secret, so it never travels in ``config``: it comes from the environment variable
named by ``config[dsnEnv]`` (default ``DEMO_POSTGRES_DSN``), set from a Secret through
``template.env`` (``LAGPILOT_*`` names are reserved for the runtime there).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from lagpilot_runtime.handler import BatchContext, Record
from lagpilot_runtime.sinks import postgres as pg_sink

_ready: set[tuple[str, str]] = set()  # (dsn hash, table) whose DDL ran in this process
_legacy: dict[tuple[str, str], bool] = {}  # (dsn hash, table) -> still the old insert key


def batch_cost_s(n: int, config: dict[str, str] | Any) -> float:
    """Seconds of simulated downstream latency for a batch of ``n`` records."""
    per_record = float(config.get("recordDelayMs", "0") or 0)
    per_batch = float(config.get("batchDelayMs", "0") or 0)
    return max(0.0, per_batch + per_record * n) / 1000.0


def ledger_ddl(table: str) -> str:
    """The delivery ledger: one row per record per delivery (deliberately no primary or unique key)."""
    pg_sink._check_identifier(table)  # a plain identifier only: it is interpolated into SQL
    return (
        f'CREATE TABLE IF NOT EXISTS "{table}" (topic text NOT NULL, partition integer NOT NULL, '
        f'"offset" bigint NOT NULL, source text NOT NULL, worker text, drain_id text, timestamp_ms bigint, '
        f"delivered_at timestamptz NOT NULL DEFAULT now())"
    )


LEDGER_COLUMNS = ("topic", "partition", "offset", "source", "worker", "drain_id", "timestamp_ms")


def ledger_rows(records: list[Record], ctx: BatchContext, worker: str) -> list[tuple[Any, ...]]:
    """One ledger row per record of this delivery."""
    drain_id = getattr(ctx, "drain_id", None)
    return [(r.topic, r.partition, r.offset, ctx.source, worker, drain_id, r.timestamp_ms) for r in records]


def worker_id() -> str:
    """Who delivered: the pod, the process and the thread (Spark tasks share a pod)."""
    pod = os.environ.get("LAGPILOT_POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{pod}/{os.getpid()}/{threading.get_ident()}"


def settings(config: Any, env: Any = None) -> pg_sink.PostgresSettings:
    """The sink's settings: DSN from the env var ``config[dsnEnv]``, table and mode from config."""
    e = os.environ if env is None else env
    var = config.get("dsnEnv") or "DEMO_POSTGRES_DSN"
    dsn = e.get(var) or ""
    if not dsn:
        raise ValueError(
            f"the demo handler needs the PostgreSQL DSN in ${var} (from a Secret via template.env)"
        )
    return pg_sink.PostgresSettings.resolve(config, env={"LAGPILOT_POSTGRES_DSN": dsn})


def ledger_table(config: Any) -> str | None:
    """``ledgerTable`` (``auditTable`` is the old name of the same setting)."""
    return config.get("ledgerTable") or config.get("auditTable") or None


def write(
    records: list[Record], ctx: BatchContext, cfg: pg_sink.PostgresSettings, ledger: str | None
) -> None:
    """Sink rows and ledger rows in one transaction, on the sink's cached connection."""
    import psycopg

    rows = pg_sink.rows_for(records, cfg.mode)
    lrows = ledger_rows(records, ctx, worker_id()) if ledger else []
    with pg_sink._lock:
        try:
            conn = pg_sink._connection(cfg)
            key = (str(hash(cfg.dsn)), cfg.table)
            if key not in _ready:
                _legacy[key] = pg_sink.ensure_table(conn, cfg.table, cfg.mode)
                _ready.add(key)
            if ledger and (key[0], ledger) not in _ready:
                conn.execute(ledger_ddl(ledger))
                _ready.add((key[0], ledger))
            with conn.transaction():
                pg_sink.write_rows(
                    conn,
                    cfg.table,
                    cfg.mode,
                    rows,
                    cfg.method,  # a savepoint inside ours
                    legacy_key=_legacy.get(key, False),
                )
                if lrows:
                    cols = ", ".join(f'"{c}"' for c in LEDGER_COLUMNS)
                    with conn.cursor() as cur, cur.copy(f'COPY "{ledger}" ({cols}) FROM STDIN') as copy:
                        for row in lrows:
                            copy.write_row(row)
        except psycopg.OperationalError:
            pg_sink._drop_connection(cfg)
            raise


def process(records: list[Record], ctx: BatchContext) -> None:
    """Sleep for the simulated downstream cost, then write the batch (and its ledger rows) durably."""
    if not records:
        return
    cfg = settings(ctx.config)
    time.sleep(batch_cost_s(len(records), ctx.config))
    write(records, ctx, cfg, ledger_table(ctx.config))
