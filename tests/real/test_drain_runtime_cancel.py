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
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from lagpilot_dev.paths import free_port
from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain_plan import DrainPlan, parallelism_for, split_ranges
from tests.real.test_drain_job import PARTS, drain_env, ledger, produce, progress, start_drain, wait_for

pytestmark = [pytest.mark.real, pytest.mark.slow]
PER_PARTITION = 3000


def _health(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            return json.loads(r.read()) if r.status == 200 else None
    except OSError:
        return None


def _events(log: Path, name: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if f'"{name}"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def test_a_killed_caller_cancels_its_plan_and_the_retry_is_exact(kafka_bootstrap: str, postgres_dsn: str,
                                                                 spark_jars: list[str], new_topic: Callable[..., str],
                                                                 tmp_path: Path) -> None:
    topic = new_topic(partitions=PARTS, prefix="drainrt")
    produce(kafka_bootstrap, topic, PER_PARTITION)
    ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
    subs = split_ranges(ranges, 2, min_records_per_task=200)
    plan = DrainPlan("1", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, parallelism_for(subs, 6)).validate()
    table = "drt_" + uuid.uuid4().hex[:8]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = drain_env(kafka_bootstrap, topic, plan.group_id, postgres_dsn, spark_jars, table,
                    LAGPILOT_SINK="ledger", LAGPILOT_LEDGER_TABLE=table,
                    LAGPILOT_HANDLER_CONFIG=json.dumps({"ledger.cost_ms": "500"}))
    runtime_log = tmp_path / "runtime.log"
    key, cr_uid = plan_auth.new_key(), f"uid-{uuid.uuid4()}"  # what the operator gives a runtime (its Secret, its CR)

    def job_env(attempt: int) -> dict[str, str]:  # a warm Job: the URL and the operator's signature of its plan
        auth = plan_auth.sign(plan_auth.parse_key(key), plan.to_json(), cr_uid, plan.drain_id, attempt,
                              time.time() + plan_auth.PLAN_TTL_S)
        return dict(env, LAGPILOT_DRAIN_RUNTIME_URL=url, **{plan_auth.AUTH_ENV: auth.to_json()})

    with open(runtime_log, "wb") as fh:
        runtime = subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "drain", "--serve"],
                                   env=dict(env, LAGPILOT_DRAIN_RUNTIME_PORT=str(port), LAGPILOT_DRAIN_MAX_PARALLELISM="6",
                                            **{plan_auth.KEY_ENV: key, plan_auth.CR_UID_ENV: cr_uid}),
                                   stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    total = sum(b - a for a, b in ranges.values())
    try:
        wait_for(lambda: runtime.poll() is not None or _health(url), "the runtime to be warm", 300)
        assert runtime.poll() is None, runtime_log.read_text()[-3000:]
        first = start_drain(plan, job_env(1), tmp_path / "s1.json", tmp_path / "d1.log")
        done = wait_for(lambda: (lambda n: n if n >= 600 else 0)(sum(r for _, r in progress(kafka_bootstrap, plan).values())),
                        "some progress before the kill", 300)
        os.killpg(first.pid, signal.SIGKILL)  # the Job's process: the runtime's caller
        first.wait(timeout=30)
        with pytest.raises(ProcessLookupError):
            os.kill(first.pid, 0)  # the fault fired: the caller is gone
        assert done < total, "the drain finished before its caller was killed; slow the handler down"
        wait_for(lambda: _events(runtime_log, "drain_runtime_cancel"), "the runtime to cancel the plan", 60)
        wait_for(lambda: (_health(url) or {"busy": True})["busy"] is False, "the runtime to be free again", 120)
        cancelled = _events(runtime_log, "drain_runtime_served")
        assert cancelled and cancelled[-1]["cancelled"] is True and cancelled[-1]["exit"] != 0, cancelled
        stopped_at = sum(r for _, r in progress(kafka_bootstrap, plan).values())
        assert stopped_at < total, "the cancelled plan went on to the end"

        second = start_drain(plan, job_env(2), tmp_path / "s2.json", tmp_path / "d2.log")  # the operator's retry
        assert second.wait(timeout=600) == 0, (tmp_path / "d2.log").read_text()[-3000:]
        assert _events(tmp_path / "d2.log", "drain_runtime_used"), "the retry did not run in the runtime"
        assert len(_events(runtime_log, "drain_runtime_served")) == 2
        summary = json.loads((tmp_path / "s2.json").read_text())
        assert summary["records_done_before"] >= done
        rep = ledger(postgres_dsn, table, ranges)
        print("after the retry:", {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")})
        assert (rep["lost"], rep["outside"], rep["distinct"]) == (0, 0, total), rep
        # the ledger keeps no progress of its own (a handler like a user's): the cancel interrupts each
        # task inside its batch, so at most that batch per sub-range is delivered again, never more
        assert rep["duplicated"] <= len(subs) * plan.batch_max_records, rep
    finally:
        if runtime.poll() is None:
            os.killpg(runtime.pid, signal.SIGKILL)
            runtime.wait(timeout=30)
