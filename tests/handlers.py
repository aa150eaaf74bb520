"""Handlers for the consumer's real tests (run inside `lagpilot consume` subprocesses).

Each follows the handler contract. They write through the built-in postgres sink (so the
idempotency under test is the product's) and, where a test needs to count *processing attempts*
rather than distinct rows, also append one row per record to an attempts table without a key.

ctx.config keys used: ``sleep_ms`` (pause after writing, before returning, so a signal can land
between the write and the commit), ``attempts_table`` (table for the attempt rows).
"""

from __future__ import annotations

import json
import os
import time

from lagpilot_runtime.handler import BatchContext, Record
from lagpilot_runtime.sinks import postgres as pg


def _attempts(records: list[Record], ctx: BatchContext) -> None:
    table = ctx.config.get("attempts_table")
    if not table:
        return
    settings = pg.PostgresSettings.resolve(ctx.config)
    with pg._lock:  # the sink's cached connection; one caller at a time
        conn = pg._connection(settings)
        with conn.transaction():
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{table}" (topic text, partition int, "offset" bigint, pod text, at timestamptz DEFAULT now())'
            )
            with conn.cursor() as cur:
                with cur.copy(f'COPY "{table}" (topic, partition, "offset", pod) FROM STDIN') as copy:
                    pod = os.environ.get("LAGPILOT_POD_NAME", "")
                    for r in records:
                        copy.write_row((r.topic, r.partition, r.offset, pod))


def slow_postgres(records: list[Record], ctx: BatchContext) -> None:
    """Write the batch (sink + attempts), then sleep ``sleep_ms``: a kill lands after the write and before the commit."""
    pg.process(records, ctx)
    _attempts(records, ctx)
    ctx.logger.info(
        "batch written",
        extra={
            "fields": {
                "event": "batch_written",
                "records": len(records),
                "first": records[0].where,
                "last": records[-1].where,
            }
        },
    )
    time.sleep(int(ctx.config.get("sleep_ms", "0")) / 1000.0)


def fail_marked(records: list[Record], ctx: BatchContext) -> None:
    """Fail the whole call if any record's value contains b"FAIL" (so isolation must find them), else write."""
    bad = [r for r in records if r.value is not None and b"FAIL" in r.value]
    if bad:
        raise ValueError(f"value contains FAIL ({len(bad)} of {len(records)} records)")
    pg.process(records, ctx)
    _attempts(records, ctx)


def json_postgres(records: list[Record], ctx: BatchContext) -> None:
    """Decode every value as UTF-8 JSON with the plain stdlib (no runtime helper), then write."""
    for r in records:
        json.loads(r.value.decode("utf-8"))  # type: ignore[union-attr]
    pg.process(records, ctx)


def counting(records: list[Record], ctx: BatchContext) -> None:
    """Write through the sink and count every processing attempt (rebalance test)."""
    pg.process(records, ctx)
    _attempts(records, ctx)
    delay = int(ctx.config.get("sleep_ms", "0"))
    if delay:
        time.sleep(delay / 1000.0)


def noop(records: list[Record], ctx: BatchContext) -> None:
    """Do nothing (benchmark: the runtime's own overhead)."""


def sleep_per_call(records: list[Record], ctx: BatchContext) -> None:
    """A sink costing a fixed ``sleep_ms`` per call, whatever the batch size (benchmark)."""
    time.sleep(int(ctx.config.get("sleep_ms", "20")) / 1000.0)
