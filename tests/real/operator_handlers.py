"""Batch handlers for the operator end-to-end tests (imported by consumer pods via PYTHONPATH=<repo>).

`slow`: costs config["ms_per_record"] milliseconds per record, so a consumer's capacity is known
(about 1000 / ms_per_record records per busy second) whatever the machine's load.
"""
from __future__ import annotations

import time

from lagpilot_runtime.handler import BatchContext, Record


def slow(records: list[Record], ctx: BatchContext) -> None:
    time.sleep(len(records) * float(ctx.config.get("ms_per_record", "5")) / 1000.0)
