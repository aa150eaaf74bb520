"""Handlers of tests/real/test_secrets.py: clients that echo a secret in their errors.

`leaky`: the consumer processes records (config["cost_ms"] per call) except those whose value is
b"poison": those fail with the error psycopg raises for the DSN in LEAKY_DSN (a Secret's value
through template.env secretKeyRef; its password is malformed percent-encoding, so psycopg quotes
it in the message) and are dead-lettered. In the drain every batch fails with that error (the
drain attempt fails: its termination message, status.drain.lastError, Warning events).
"""

from __future__ import annotations

import os
import time

from lagpilot_runtime.handler import BatchContext, Record, RecordError


def _client_error() -> Exception:
    import psycopg

    try:
        psycopg.connect(os.environ["LEAKY_DSN"], connect_timeout=2)
    except Exception as exc:  # noqa: BLE001 - the client's own error, whatever its type
        return exc
    raise AssertionError("the malformed DSN connected")


def leaky(records: list[Record], ctx: BatchContext) -> None:
    t0 = time.monotonic()
    if ctx.source == "drain":
        raise _client_error()
    bad = [r for r in records if r.value == b"poison"]
    if bad:
        raise RecordError(bad[0], _client_error(), retriable=False)
    left = float(ctx.config.get("cost_ms", "0")) / 1000.0 - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)
