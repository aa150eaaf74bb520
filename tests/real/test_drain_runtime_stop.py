"""H3: a warm drain runtime that stops answering mid-plan (SIGSTOP of its process group: the node
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

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from lagpilot_dev.paths import free_port
from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain_plan import DrainPlan, parallelism_for, split_ranges
from tests.real.test_drain_job import PARTS, drain_env, ledger, produce, progress, start_drain, wait_for
from tests.real.test_drain_runtime_cancel import _events, _health

pytestmark = [pytest.mark.real, pytest.mark.slow]
PER_PARTITION = 3000


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_a_stopped_runtime_fails_the_attempt_and_the_retry_finishes(kafka_bootstrap: str, postgres_dsn: str,
                                                                    spark_jars: list[str], new_topic: Callable[..., str],
                                                                    tmp_path: Path) -> None:
    topic = new_topic(partitions=PARTS, prefix="drainstop")
    produce(kafka_bootstrap, topic, PER_PARTITION)
    ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
    subs = split_ranges(ranges, 2, min_records_per_task=200)
    plan = DrainPlan("1", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, parallelism_for(subs, 6)).validate()
    table = "dst_" + uuid.uuid4().hex[:8]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = drain_env(kafka_bootstrap, topic, plan.group_id, postgres_dsn, spark_jars, table,
                    LAGPILOT_SINK="ledger", LAGPILOT_LEDGER_TABLE=table,
                    LAGPILOT_HANDLER_CONFIG=json.dumps({"ledger.cost_ms": "500"}))
    runtime_log = tmp_path / "runtime.log"
    key, cr_uid = plan_auth.new_key(), f"uid-{uuid.uuid4()}"  # what the operator gives a runtime (its Secret, its CR)

    def job_env(attempt: int) -> dict[str, str]:  # a warm Job: the URL, the heartbeat, the operator's signature
        auth = plan_auth.sign(plan_auth.parse_key(key), plan.to_json(), cr_uid, plan.drain_id, attempt,
                              time.time() + plan_auth.PLAN_TTL_S)
        return dict(env, LAGPILOT_DRAIN_RUNTIME_URL=url, LAGPILOT_DRAIN_RUNTIME_HEARTBEAT_SECONDS="2",
                    **{plan_auth.AUTH_ENV: auth.to_json()})

    with open(runtime_log, "wb") as fh:
        runtime = subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "drain", "--serve"],
                                   env=dict(env, LAGPILOT_DRAIN_RUNTIME_PORT=str(port), LAGPILOT_DRAIN_MAX_PARALLELISM="6",
                                            **{plan_auth.KEY_ENV: key, plan_auth.CR_UID_ENV: cr_uid}),
                                   stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    total = sum(b - a for a, b in ranges.values())
    stopped = False
    first = None
    try:
        wait_for(lambda: runtime.poll() is not None or _health(url), "the runtime to be warm", 300)
        assert runtime.poll() is None, runtime_log.read_text()[-3000:]
        # the Job's process checks the runtime every 2 s and gives up after 3 unanswered checks
        first = start_drain(plan, job_env(1), tmp_path / "s1.json", tmp_path / "d1.log")
        done = wait_for(lambda: (lambda n: n if n >= 600 else 0)(sum(r for _, r in progress(kafka_bootstrap, plan).values())),
                        "some progress before the stop", 300)
        os.killpg(runtime.pid, signal.SIGSTOP)  # the runtime's driver, its JVM and its Python workers
        stopped = True
        # the fault fired: the runtime's process is stopped (a signal is delivered asynchronously)
        wait_for(lambda: _state(runtime.pid) == "T", "the runtime's process to be stopped", 30)
        assert first.poll() is None, "the Job's process ended before the runtime stopped"
        assert done < total, "the drain finished before the runtime was stopped; slow the handler down"

        rc = first.wait(timeout=300)  # ends by itself (seconds with the fix), or the test fails here
        assert _state(runtime.pid) == "T", "the runtime was resumed before the Job's process gave up"
        d1 = (tmp_path / "d1.log").read_text(errors="replace")
        assert rc == 1, d1[-3000:]
        failed = _events(tmp_path / "d1.log", "drain_failed")
        assert failed and "stopped answering" in failed[-1].get("msg", ""), d1[-3000:]

        os.killpg(runtime.pid, signal.SIGCONT)
        stopped = False
        wait_for(lambda: _events(runtime_log, "drain_runtime_cancel"), "the runtime to cancel the abandoned plan", 120)
        second = start_drain(plan, job_env(2), tmp_path / "s2.json", tmp_path / "d2.log")  # the operator's retry
        assert second.wait(timeout=600) == 0, (tmp_path / "d2.log").read_text()[-3000:]
        assert _events(tmp_path / "d2.log", "drain_runtime_used"), "the retry did not run in the runtime"
        served = _events(runtime_log, "drain_runtime_served")
        assert [e["exit"] == 0 for e in served] == [False, True], served
        rep = ledger(postgres_dsn, table, ranges)
        print("after the retry:", {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")})
        assert (rep["lost"], rep["outside"], rep["distinct"]) == (0, 0, total), rep
        assert rep["duplicated"] <= len(subs) * plan.batch_max_records, rep
    finally:
        if first is not None and first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        if stopped:
            os.killpg(runtime.pid, signal.SIGCONT)
        if runtime.poll() is None:
            os.killpg(runtime.pid, signal.SIGKILL)
            runtime.wait(timeout=30)
