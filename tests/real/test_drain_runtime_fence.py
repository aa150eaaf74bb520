"""Issue 23 (the open part of 23-dup): a warm drain runtime stopped mid-plan (SIGSTOP of its
process tree: its node frozen, a long GC, a partition) whose attempt was given up and retried
elsewhere must not write a record twice when it resumes. Real Kafka, Spark (local mode) and
PostgreSQL; the runtime and the Jobs' processes run as the pods' processes would.

The sink is exactly-once: the built-in postgres sink (rows and progress in one transaction) behind
a slow downstream (``bench.chaos.handler:process``, 1.5 s per batch, so the stop lands inside
handler calls), with ``postgres.key: none``: no primary key, a second write is a second row.

1. Attempt 1 runs in the runtime; once progress is recorded the runtime's processes are stopped
   (state T; the whole process tree, Python workers included) and attempt 1's process gives the attempt up (its heartbeat) while they are stopped.
2. The retry runs cold (a stopped runtime fails its readiness probe: the operator launches the
   Job without the runtime's URL) and finishes: every planned offset in the table once.
3. The runtime resumes (SIGCONT): its tasks, frozen mid-batch, go on writing until the cancel of
   their abandoned plan lands.

Proven: the fault fired (the resumed runtime's tasks tried to write after the retry finished: rows
written after the resume, or writes the sink refused, event ``drain_attempt_fenced``); after it every
planned offset is in the table exactly once (without the fence the resumed batches were written
again, rows with written_at after the resume).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.test_drain_job import progress, start_drain, wait_for
from tests.real.warm_runtime import events, health, signal_tree, stop_tree, warm_drain

pytestmark = [pytest.mark.real, pytest.mark.slow]
PER_PARTITION = 3000
HEARTBEAT = {"LAGPILOT_DRAIN_RUNTIME_HEARTBEAT_SECONDS": "2"}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def _eos_sink(table: str) -> dict[str, str]:
    return {
        "LAGPILOT_HANDLER": "bench.chaos.handler:process",
        "LAGPILOT_HANDLER_CONFIG": json.dumps(
            {"postgres.table": table, "postgres.key": "none", "cost_ms": "1500"}
        ),
    }


def _rows(dsn: str, table: str) -> list[tuple[int, int, int, float]]:
    """(partition, offset, rows, newest write as epoch seconds) per offset in the keyless table."""
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        return [
            (int(p), int(o), int(n), float(t))
            for p, o, n, t in conn.execute(
                f'SELECT partition, "offset", count(*), extract(epoch FROM max(written_at)) FROM {table} '
                'GROUP BY partition, "offset"'
            )
        ]


def test_a_resumed_runtime_cannot_write_what_the_retry_wrote(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    with warm_drain(
        kafka_bootstrap,
        postgres_dsn,
        spark_jars,
        new_topic,
        tmp_path,
        "drainfence",
        PER_PARTITION,
        sink=_eos_sink,
    ) as w:
        plan, runtime, total = w.plan, w.runtime, w.total
        want = {(p, o) for p, (a, b) in w.ranges.items() for o in range(a, b)}
        stopped, first = False, None
        try:
            first = start_drain(plan, w.job_env(1, **HEARTBEAT), tmp_path / "s1.json", tmp_path / "d1.log")
            done = wait_for(
                lambda: (lambda n: n if n >= 1200 else 0)(
                    sum(r for _, r in progress(kafka_bootstrap, plan).values())
                ),
                "some progress before the stop",
                300,
            )
            frozen = stop_tree(
                runtime.pid, wait_for
            )  # the runtime's driver, its JVM, the worker daemon and its workers
            stopped = True
            assert len(frozen) >= 4, f"the runtime's tree is only {frozen}: its Python workers are missing"
            assert done < total, "the drain finished before the runtime was stopped; slow the handler down"
            assert first.wait(timeout=300) == 1, (tmp_path / "d1.log").read_text()[-3000:]
            assert _state(runtime.pid) == "T"

            # the retry, cold (no runtime URL), while the runtime is still stopped
            second = start_drain(plan, w.env, tmp_path / "s2.json", tmp_path / "d2.log")
            assert second.wait(timeout=900) == 0, (tmp_path / "d2.log").read_text()[-3000:]
            before = _rows(postgres_dsn, w.table)
            assert {(p, o) for p, o, _, _ in before} == want, "the retry did not write every planned offset"
            assert _state(runtime.pid) == "T"

            resumed_at = time.time()
            signal_tree(frozen, signal.SIGCONT)
            stopped = False
            wait_for(
                lambda: events(w.runtime_log, "drain_runtime_served"),
                "the runtime to end the abandoned plan",
                300,
            )
            wait_for(
                lambda: (health(w.url) or {"busy": True})["busy"] is False,
                "the runtime to be free again",
                120,
            )
        finally:
            if first is not None and first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=30)
            if stopped:
                signal_tree(frozen, signal.SIGCONT)

        after = _rows(postgres_dsn, w.table)
        late = [(p, o) for p, o, _, t in after if t >= resumed_at]
        fenced = events(w.runtime_log, "drain_attempt_fenced")
        print("resumed runtime:", {"rows written after the resume": len(late), "fenced": len(fenced)})
        # the fault fired: the resumed tasks went on writing (stored, or refused by the sink)
        assert late or fenced, (
            "the resumed runtime never tried to write; the stop did not land inside a batch"
        )
        twice = sorted((p, o) for p, o, n, _ in after if n > 1)
        assert not twice, (
            f"{len(twice)} records written twice, e.g. {twice[:3]} "
            f"(rows written after the resume: {len(late)})"
        )
        assert {(p, o) for p, o, _, _ in after} == want and len(after) == total
