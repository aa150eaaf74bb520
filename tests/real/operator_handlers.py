"""Batch handlers for the operator end-to-end tests (imported by consumer pods via PYTHONPATH=<repo>).

`slow`: costs config["ms_per_record"] milliseconds per record, so a consumer's capacity is known
(about 1000 / ms_per_record records per busy second) whatever the machine's load.
"""

from __future__ import annotations

import time

from lagpilot_runtime.handler import BatchContext, Record


def slow(records: list[Record], ctx: BatchContext) -> None:
    time.sleep(len(records) * float(ctx.config.get("ms_per_record", "5")) / 1000.0)


def shared_limit(records: list[Record], ctx: BatchContext) -> None:
    """A sink every consumer shares, that takes at most 1000 / config["ms_per_record"] records/s in
    total however many consumers write to it (a downstream limit, issue 25 item 4): each batch holds
    an exclusive lock on config["lock"] (a file; the pods are processes of this machine) while it
    costs ms_per_record per record. Each batch appends "<pid> <end time> <records>" to config["log"]
    so a test can see the limit fire (the total rate with several consumers writing)."""
    import fcntl
    import os

    with open(ctx.config["lock"], "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            time.sleep(len(records) * float(ctx.config.get("ms_per_record", "10")) / 1000.0)
            with open(ctx.config["log"], "a") as log:
                log.write(f"{os.getpid()} {time.time():.3f} {len(records)}\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
