"""The demo's batch handler: the built-in PostgreSQL sink behind an artificially slow downstream.

Why a custom handler: on a laptop the built-in sink writes thousands of rows per second, so no
spike a demo can produce would outrun three consumers. The seed's consumers were slow because
every record cost a synchronous ~180 ms database call; this handler puts a (much smaller) cost per
record and per batch in front of the real write, so one consumer manages a few dozen records per
second and a spike needs the drain. Consumers and the Spark drain call the same function.

    processing:
      handler: "lagpilot_dev.demo_handler:process"
      config: {recordDelayMs: "15", batchDelayMs: "50", postgres.table: orders, auditTable: demo_audit}
    template:
      env: [{name: DEMO_POSTGRES_DSN, valueFrom: {secretKeyRef: {name: demo-pg, key: dsn}}}]

Then, per batch: sleep ``batchDelayMs + recordDelayMs * len(records)``, write the records with
``lagpilot_runtime.sinks.postgres`` (idempotent: primary key topic/partition/offset; table from
``config[postgres.table]``). The DSN is a secret, so it never travels in ``config``: it comes from
the environment variable named by ``config[dsnEnv]`` (default ``DEMO_POSTGRES_DSN``), set from a
Secret through ``template.env`` (``LAGPILOT_*`` names are reserved for the runtime there). And, when ``auditTable`` is set, append one row per record and processing attempt (no primary key)
saying which path processed it (``ctx.source``: consumer or drain) — the demo reads it to show the
split between the live group and the drain, and whether any record was processed twice.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from lagpilot_runtime.handler import BatchContext, Record
from lagpilot_runtime.sinks import postgres as pg_sink

_lock = threading.Lock()
_audit_conn: Any = None
_audit_ready: set[str] = set()


def batch_cost_s(n: int, config: dict[str, str] | Any) -> float:
    """Seconds of simulated downstream latency for a batch of ``n`` records."""
    per_record = float(config.get("recordDelayMs", "0") or 0)
    per_batch = float(config.get("batchDelayMs", "0") or 0)
    return max(0.0, per_batch + per_record * n) / 1000.0


def audit_ddl(table: str) -> str:
    """The audit table: one row per record per processing attempt (deliberately no primary key)."""
    return (f'CREATE TABLE IF NOT EXISTS "{table}" (topic text NOT NULL, partition integer NOT NULL, '
            f'"offset" bigint NOT NULL, source text NOT NULL, worker text, '
            f"processed_at timestamptz NOT NULL DEFAULT now())")


def settings(config: Any, env: Any = None) -> pg_sink.PostgresSettings:
    """The sink's settings: DSN from the env var ``config[dsnEnv]``, table and mode from config."""
    e = os.environ if env is None else env
    var = config.get("dsnEnv") or "DEMO_POSTGRES_DSN"
    dsn = e.get(var) or ""
    if not dsn:
        raise ValueError(f"the demo handler needs the PostgreSQL DSN in ${var} (from a Secret via template.env)")
    return pg_sink.PostgresSettings.resolve(config, env={"LAGPILOT_POSTGRES_DSN": dsn})


def _audit(records: list[Record], ctx: BatchContext, table: str, dsn: str) -> None:
    global _audit_conn
    import psycopg

    pg_sink._check_identifier(table)  # a plain identifier only: it is interpolated into SQL
    worker = os.environ.get("LAGPILOT_POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()
    with _lock:
        try:
            if _audit_conn is None or _audit_conn.closed or _audit_conn.broken:
                _audit_conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10,
                                              application_name="lagpilot-demo-audit")
            if table not in _audit_ready:
                _audit_conn.execute(audit_ddl(table))
                _audit_ready.add(table)
            with _audit_conn.cursor() as cur:
                with cur.copy(f'COPY "{table}" (topic, partition, "offset", source, worker) FROM STDIN') as copy:
                    for r in records:
                        copy.write_row((r.topic, r.partition, r.offset, ctx.source, worker))
        except psycopg.OperationalError:
            _audit_conn = None
            raise


def process(records: list[Record], ctx: BatchContext) -> None:
    """Sleep for the simulated downstream cost, then write the batch durably to PostgreSQL."""
    if not records:
        return
    cfg = settings(ctx.config)
    time.sleep(batch_cost_s(len(records), ctx.config))
    pg_sink.write_records(records, cfg)
    table = ctx.config.get("auditTable")
    if table:
        _audit(records, ctx, table, cfg.dsn)
