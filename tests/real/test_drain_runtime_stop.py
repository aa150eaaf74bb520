"""H3: a warm drain runtime that stops answering mid-plan (SIGSTOP of its whole process tree: the node
frozen or lost, the TCP connection still open) must not leave the drain Job's process waiting for
ever. Real Kafka, Spark (local mode) and PostgreSQL; the runtime and the Job's process run as the
pods' processes would (`lagpilot drain --serve`, `lagpilot drain` with LAGPILOT_DRAIN_RUNTIME_URL).

Proven: the fault fired (the runtime's processes are stopped, state T, while the Job's process is
mid-plan with progress recorded); the Job's process ends by itself with exit 1 and a message naming
the runtime that stopped answering, while the runtime is still stopped (its heartbeat, not the
runtime, ended the wait); after SIGCONT the runtime cancels the abandoned plan (its caller is gone)
and the retry, sent to the same runtime, finishes: every planned offset delivered, none outside,
at most one in-flight batch per sub-range twice (the ledger keeps no progress of its own).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.test_drain_job import ledger, progress, start_drain, wait_for
from tests.real.warm_runtime import WarmDrain, events, signal_tree, stop_tree, warm_drain

pytestmark = [pytest.mark.real, pytest.mark.slow]
PER_PARTITION = 3000
# the Job's process checks the runtime every 2 s and gives up after 3 unanswered checks
HEARTBEAT = {"LAGPILOT_DRAIN_RUNTIME_HEARTBEAT_SECONDS": "2"}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_a_stopped_runtime_fails_the_attempt_and_the_retry_finishes(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    with warm_drain(
        kafka_bootstrap, postgres_dsn, spark_jars, new_topic, tmp_path, "drainstop", PER_PARTITION
    ) as w:
        _stop_and_retry(w, kafka_bootstrap, postgres_dsn, tmp_path)


def _stop_and_retry(w: WarmDrain, kafka_bootstrap: str, postgres_dsn: str, tmp_path: Path) -> None:
    plan, runtime, runtime_log, total, subs = w.plan, w.runtime, w.runtime_log, w.total, w.plan.sub_ranges
    stopped = False
    first = None
    try:
        first = start_drain(plan, w.job_env(1, **HEARTBEAT), tmp_path / "s1.json", tmp_path / "d1.log")
        done = wait_for(
            lambda: (lambda n: n if n >= 600 else 0)(
                sum(r for _, r in progress(kafka_bootstrap, plan).values())
            ),
            "some progress before the stop",
            300,
        )
        frozen = stop_tree(
            runtime.pid, wait_for
        )  # the runtime's driver, its JVM, the worker daemon and its workers
        stopped = True
        assert first.poll() is None, "the Job's process ended before the runtime stopped"
        assert done < total, "the drain finished before the runtime was stopped; slow the handler down"

        rc = first.wait(timeout=300)  # ends by itself (seconds with the fix), or the test fails here
        assert _state(runtime.pid) == "T", "the runtime was resumed before the Job's process gave up"
        d1 = (tmp_path / "d1.log").read_text(errors="replace")
        assert rc == 1, d1[-3000:]
        failed = events(tmp_path / "d1.log", "drain_failed")
        assert failed and "stopped answering" in failed[-1].get("msg", ""), d1[-3000:]

        signal_tree(frozen, signal.SIGCONT)
        stopped = False
        wait_for(
            lambda: events(runtime_log, "drain_runtime_cancel"),
            "the runtime to cancel the abandoned plan",
            120,
        )
        second = start_drain(
            plan, w.job_env(2, **HEARTBEAT), tmp_path / "s2.json", tmp_path / "d2.log"
        )  # the operator's retry
        assert second.wait(timeout=600) == 0, (tmp_path / "d2.log").read_text()[-3000:]
        assert events(tmp_path / "d2.log", "drain_runtime_used"), "the retry did not run in the runtime"
        served = events(runtime_log, "drain_runtime_served")
        assert [e["exit"] == 0 for e in served] == [False, True], served
        rep = ledger(postgres_dsn, w.table, w.ranges)
        print(
            "after the retry:",
            {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")},
        )
        assert (rep["lost"], rep["outside"], rep["distinct"]) == (0, 0, total), rep
        assert rep["duplicated"] <= len(subs) * plan.batch_max_records, rep
    finally:
        if first is not None and first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        if stopped:
            signal_tree(frozen, signal.SIGCONT)
