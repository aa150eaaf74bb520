"""The set-up the warm drain runtime's fault tests share (tests/real/test_drain_runtime_cancel.py,
test_drain_runtime_stop.py): a topic with a backlog, one drain plan over it (2 sub-ranges per
partition), the delivery ledger as sink behind 500 ms per batch, and a runtime process (`lagpilot
drain --serve`, as the runtime pod runs it) holding a fresh key and CR uid; `job_env(attempt)` is a
warm Job's env for that plan, signed as the operator signs it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lagpilot_dev.paths import free_port
from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain.plan import DrainPlan, parallelism_for, split_ranges
from tests.real.test_drain_job import PARTS, drain_env, produce, wait_for


def health(url: str) -> dict | None:
    """The runtime's `GET /healthz` answer, None while it does not answer 200."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            return json.loads(r.read()) if r.status == 200 else None
    except OSError:
        return None


def events(log: Path, name: str) -> list[dict]:
    """The structured log lines of `log` that name the event `name`."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if f'"{name}"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it. The runtime's whole tree, not its process group: PySpark's
    worker daemon makes a process group of its own (daemon.py: setpgid), so killpg misses the Python
    workers — the processes that call the handler."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def signal_tree(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def not_stopped(pids: list[int]) -> dict[int, str]:
    """pid -> state of the processes of ``pids`` not stopped (state T) and not gone (exited, Z: its
    parent was stopped before it could reap it; or reaped)."""
    out = {}
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("T", "t", "Z", "X"):
            out[p] = state
    return out


def stop_tree(pid: int, wait: Callable[..., object]) -> list[int]:
    """SIGSTOP ``pid``'s whole process tree (as a frozen node would be) and wait until it is stopped;
    returns the pids (for :func:`signal_tree` SIGCONT)."""
    frozen = process_tree(pid)
    signal_tree(frozen, signal.SIGSTOP)
    try:
        wait(lambda: not not_stopped(frozen), "the runtime's processes to be stopped", 60)
    except AssertionError:
        left = not_stopped(frozen)
        signal_tree(frozen, signal.SIGCONT)  # never leave a half-stopped tree behind
        raise AssertionError(f"the runtime's processes not stopped: {left} of {frozen}") from None
    return frozen


@dataclass
class WarmDrain:
    plan: DrainPlan
    ranges: dict[int, tuple[int, int]]
    table: str
    url: str
    env: dict[str, str]  # the drain's env (Kafka, Spark, the ledger sink), without the runtime's
    key: str  # what the operator gives a runtime (its Secret) ...
    cr_uid: str  # ... and its CR
    runtime_log: Path
    runtime: subprocess.Popen[bytes]

    @property
    def total(self) -> int:
        return sum(b - a for a, b in self.ranges.values())

    def job_env(self, attempt: int, **extra: str) -> dict[str, str]:
        """A warm Job's env: the runtime's URL and the operator's signature of the plan for `attempt`."""
        auth = plan_auth.sign(
            plan_auth.parse_key(self.key),
            self.plan.to_json(),
            self.cr_uid,
            self.plan.drain_id,
            attempt,
            time.time() + plan_auth.PLAN_TTL_S,
        )
        return dict(
            self.env, LAGPILOT_DRAIN_RUNTIME_URL=self.url, **extra, **{plan_auth.AUTH_ENV: auth.to_json()}
        )


@contextlib.contextmanager
def warm_drain(
    kafka_bootstrap: str,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Callable[..., str],
    tmp_path: Path,
    prefix: str,
    per_partition: int,
    sink: Callable[[str], dict[str, str]] | None = None,
) -> Iterator[WarmDrain]:
    """The runtime started and warm (`/healthz` answers) on entry, SIGKILLed (its process group) on exit.
    ``sink(table)``: the sink's env instead of the delivery ledger's (e.g. an exactly-once handler)."""
    topic = new_topic(partitions=PARTS, prefix=prefix)
    produce(kafka_bootstrap, topic, per_partition)
    ranges = {p: (0, per_partition) for p in range(PARTS)}
    subs = split_ranges(ranges, 2, min_records_per_task=200)
    plan = DrainPlan("1", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, parallelism_for(subs, 6)).validate()
    table = f"{prefix}_{uuid.uuid4().hex[:8]}"
    port = free_port()
    sink_env = (
        sink(table)
        if sink is not None
        else {
            "LAGPILOT_SINK": "ledger",
            "LAGPILOT_LEDGER_TABLE": table,
            "LAGPILOT_HANDLER_CONFIG": json.dumps({"ledger.cost_ms": "500"}),
        }
    )
    env = drain_env(kafka_bootstrap, topic, plan.group_id, postgres_dsn, spark_jars, table, **sink_env)
    key, cr_uid = plan_auth.new_key(), f"uid-{uuid.uuid4()}"
    runtime_log = tmp_path / "runtime.log"
    with open(runtime_log, "wb") as fh:
        runtime = subprocess.Popen(
            [sys.executable, "-m", "lagpilot.cli", "drain", "--serve"],
            env=dict(
                env,
                LAGPILOT_DRAIN_RUNTIME_PORT=str(port),
                LAGPILOT_DRAIN_MAX_PARALLELISM="6",
                **{plan_auth.KEY_ENV: key, plan_auth.CR_UID_ENV: cr_uid},
            ),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    w = WarmDrain(plan, ranges, table, f"http://127.0.0.1:{port}", env, key, cr_uid, runtime_log, runtime)
    try:
        wait_for(lambda: runtime.poll() is not None or health(w.url), "the runtime to be warm", 300)
        assert runtime.poll() is None, runtime_log.read_text()[-3000:]
        yield w
    finally:
        if runtime.poll() is None:
            os.killpg(runtime.pid, signal.SIGKILL)
            runtime.wait(timeout=30)
