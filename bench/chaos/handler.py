"""The chaos bench's exactly-once handler: the built-in PostgreSQL sink behind a fixed latency.

    processing:
      handler: "bench.chaos.handler:process"
      config: {postgres.table: chaos_eos_xxx, postgres.key: "none", cost_ms: "500"}
    template:
      env: [{name: CHAOS_PG_DSN, valueFrom: {secretKeyRef: {name: pg, key: dsn}}},
            {name: PYTHONPATH, value: <repo>}]

Why not ``processing.sink: postgres`` directly: the built-in sink writes thousands of rows per
second, so no backlog a loaded 2-core machine can produce would need a drain. This module sleeps
``cost_ms`` per batch (a slow downstream) and then calls the built-in sink's own ``process``
unchanged: its rows and its progress (``<table>_lagpilot_progress``, next offset per partition
under ``ctx.progress_scope``) in ONE transaction, and it exposes the sink's ``progress`` so the
consumer and the drain resume from it (``commits_progress``). With ``postgres.key: none`` the data
table has no key: every delivery is a row, so the table itself is the delivery ledger the bench
counts duplicates in.

The sink reads its DSN only from ``LAGPILOT_POSTGRES_DSN``, a name a CR's ``template.env`` may not
set (``LAGPILOT_*`` is reserved): the DSN arrives as ``CHAOS_PG_DSN`` (from a Secret) and is copied
at import. Nothing else differs from the built-in sink.

The crash hook for pods on the real node (`consumer_kill_after_write`, docs/chaos.md "Pods on the
real node"): with ``chaos.crash_table`` in the config, a consumer's process, after its 2nd batch's
transaction and before its Kafka commit, claims the hook in that table (one row; once across every
pod: the UPDATE that sets ``fired`` where it is still NULL and ``armed`` is true) and dies like
``kill -9`` (exit 137). The runtime's own hook (``LP_TEST_SINK_CRASH_*``, a marker file shared by the
processes) does not serve here: containers share no directory with the bench and a CR cannot set
``LP_TEST_*``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from lagpilot_runtime.handler import BatchContext, Record
from lagpilot_runtime.sinks import postgres as pg_sink

if os.environ.get("CHAOS_PG_DSN") and not os.environ.get("LAGPILOT_POSTGRES_DSN"):
    os.environ["LAGPILOT_POSTGRES_DSN"] = os.environ["CHAOS_PG_DSN"]


def cost_s(config: Any) -> float:
    """Seconds of simulated downstream latency per batch (pure)."""
    return max(0.0, float((config or {}).get("cost_ms", "0") or 0)) / 1000.0


CRASH_TABLE_KEY = "chaos.crash_table"
CRASH_AFTER_BATCHES = 2
_batches = {"consumer": 0}


def crash_claim_sql(table: str) -> str:
    """The once-across-pods claim of the crash hook: one row, `fired` set only while armed and unset."""
    return f'UPDATE "{table}" SET fired = %s, fired_at = now() WHERE armed AND fired IS NULL RETURNING fired'


def crash_after_write(ctx: BatchContext) -> None:
    """The node's crash hook (module doc): after a consumer's batch transaction, before its commit."""
    table = (ctx.config or {}).get(CRASH_TABLE_KEY)
    if not table or ctx.source != "consumer" or _batches.get("spent"):
        return
    _batches["consumer"] += 1
    if _batches["consumer"] <= CRASH_AFTER_BATCHES:
        return
    import psycopg

    who = f"{os.getpid()} {time.time()} {os.environ.get('HOSTNAME', '')}"
    try:
        with psycopg.connect(
            os.environ["LAGPILOT_POSTGRES_DSN"], autocommit=True, connect_timeout=10
        ) as conn:
            claimed = conn.execute(crash_claim_sql(table), (who,)).fetchone()
            if not claimed:
                row = conn.execute(f'SELECT fired IS NOT NULL FROM "{table}" WHERE id = 1').fetchone()
                _batches["spent"] = int(bool(row and row[0]))  # fired by a pod: never asked again
    except psycopg.Error:
        return  # PostgreSQL away (postgres_restart): the hook waits; a written batch never fails here
    if claimed:
        os._exit(137)


def process(records: list[Record], ctx: BatchContext) -> None:
    """Sleep the batch's cost, then the built-in sink's transaction (rows + progress)."""
    time.sleep(cost_s(ctx.config))
    pg_sink.process(records, ctx)
    crash_after_write(ctx)


def progress(topic: str, partitions: Any, ctx: BatchContext) -> dict[int, int]:
    return pg_sink.progress(topic, partitions, ctx)


def claim(topic: str, partitions: Any, ctx: BatchContext) -> dict[int, int]:
    return pg_sink.claim(topic, partitions, ctx)


process.commits_progress = True  # type: ignore[attr-defined]
process.progress = progress  # type: ignore[attr-defined]
process.claim = claim  # type: ignore[attr-defined]  # fencing: a given-up drain attempt's writes refused


def process_at_least_once(records: list[Record], ctx: BatchContext) -> None:
    """NEGATIVE CONTROL only (`bench/chaos.py --eos-handler bench.chaos.handler:process_at_least_once`):
    the same write without the exactly-once capability (no ``commits_progress``), so the runtime
    does not resume from the sink's progress and a consumer killed after the write and before its
    Kafka commit delivers that batch again: the bench must then report ``duplicated`` > 0."""
    time.sleep(cost_s(ctx.config))
    pg_sink.process(records, ctx)
    crash_after_write(ctx)
