"""The warm drain runtime on real Kafka, Spark and PostgreSQL: a drain Job process SIGKILLed while
the runtime runs its plan makes the runtime cancel that plan (no second attempt can overlap it);
the retry, sent to the same runtime, skips the finished work; the delivery ledger (no key: a replay
is a counted row) shows every planned offset, none lost, at most the cancelled tasks' in-flight
batches twice (the ledger, like a user's handler, keeps no progress of its own).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.test_drain_job import ledger, progress, start_drain, wait_for
from tests.real.warm_runtime import events, health, warm_drain

pytestmark = [pytest.mark.real, pytest.mark.slow]
PER_PARTITION = 3000


def test_a_killed_caller_cancels_its_plan_and_the_retry_is_exact(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    with warm_drain(
        kafka_bootstrap, postgres_dsn, spark_jars, new_topic, tmp_path, "drainrt", PER_PARTITION
    ) as w:
        plan, runtime_log, total, subs = w.plan, w.runtime_log, w.total, w.plan.sub_ranges
        first = start_drain(plan, w.job_env(1), tmp_path / "s1.json", tmp_path / "d1.log")
        done = wait_for(
            lambda: (lambda n: n if n >= 600 else 0)(
                sum(r for _, r in progress(kafka_bootstrap, plan).values())
            ),
            "some progress before the kill",
            300,
        )
        os.killpg(first.pid, signal.SIGKILL)  # the Job's process: the runtime's caller
        first.wait(timeout=30)
        with pytest.raises(ProcessLookupError):
            os.kill(first.pid, 0)  # the fault fired: the caller is gone
        assert done < total, "the drain finished before its caller was killed; slow the handler down"
        wait_for(lambda: events(runtime_log, "drain_runtime_cancel"), "the runtime to cancel the plan", 60)
        wait_for(
            lambda: (health(w.url) or {"busy": True})["busy"] is False, "the runtime to be free again", 120
        )
        cancelled = events(runtime_log, "drain_runtime_served")
        assert cancelled and cancelled[-1]["cancelled"] is True and cancelled[-1]["exit"] != 0, cancelled
        stopped_at = sum(r for _, r in progress(kafka_bootstrap, plan).values())
        assert stopped_at < total, "the cancelled plan went on to the end"

        second = start_drain(
            plan, w.job_env(2), tmp_path / "s2.json", tmp_path / "d2.log"
        )  # the operator's retry
        assert second.wait(timeout=600) == 0, (tmp_path / "d2.log").read_text()[-3000:]
        assert events(tmp_path / "d2.log", "drain_runtime_used"), "the retry did not run in the runtime"
        assert len(events(runtime_log, "drain_runtime_served")) == 2
        summary = json.loads((tmp_path / "s2.json").read_text())
        assert summary["records_done_before"] >= done
        rep = ledger(postgres_dsn, w.table, w.ranges)
        print(
            "after the retry:",
            {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")},
        )
        assert (rep["lost"], rep["outside"], rep["distinct"]) == (0, 0, total), rep
        # the ledger keeps no progress of its own (a handler like a user's): the cancel interrupts each
        # task inside its batch, so at most that batch per sub-range is delivered again, never more
        assert rep["duplicated"] <= len(subs) * plan.batch_max_records, rep
