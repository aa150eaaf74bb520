"""The two phases of the drain benchmark (bench/drain.py): the capped group clearing the backlog, and
the drain with hand-off (the bench acting as the operator: split, mailbox hand-off, `lagpilot drain`
on the rest, cold or in a warm drain runtime started before the run); the plan and the launch of
`lagpilot drain` that the start-up A/B (bench/drain/ab.py) shares."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any

from bench.drain.measure import CpuSampler, commit_gaps, tree_pss_mb
from bench.drain.workload import (
    LiveProducer,
    base_env,
    committed,
    drain_env,
    end_offsets,
    joined,
    start_consumers,
    stop_procs,
    wait_until,
)
from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain.plan import DrainPlan, parallelism_for, split_ranges
from lagpilot_runtime.sinks import ledger

RUNTIME_URL_ENV = "LAGPILOT_DRAIN_RUNTIME_URL"


def make_plan(
    drain_id: str, topic: str, group: str, ranges: dict[int, tuple[int, int]], args: argparse.Namespace
) -> DrainPlan:
    """[start, end) per partition cut into --split-factor sub-ranges, at most --max-tasks at once."""
    subs = split_ranges(ranges, args.split_factor, min_records_per_task=args.batch)
    return DrainPlan(
        drain_id, topic, group, subs, args.batch, parallelism_for(subs, args.max_tasks)
    ).validate()


def start_drain(
    plan: DrainPlan, env: dict[str, str], summary_file: Path, log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """`lagpilot drain --plan` in its own process group, its start-up summary written to `summary_file`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lagpilot.cli",
            "drain",
            "--plan",
            plan.to_json(),
            "--summary-file",
            str(summary_file),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def run_group(
    bootstrap: str, topic: str, dsn: str, counts: dict[int, int], args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    group = f"bench-group-{uuid.uuid4().hex[:6]}"
    table = f"bench_group_{uuid.uuid4().hex[:8]}"
    ledger.create_table(dsn, table)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    procs = start_consumers(
        base_env(bootstrap, topic, group, dsn, table, args.cost_ms, args.batch),
        args.consumers,
        workdir,
        "group",
    )
    try:
        first = wait_until(lambda: joined(admin, group, topic), "the group to join", 300, 0.2)
        t_joined = time.time()
        at_join = sum(first.values())

        def done() -> bool:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a consumer exited: see {workdir}")
            return all(o >= counts[p] for p, o in committed(admin, group, topic).items())

        wait_until(done, "the group to clear the backlog", 7200, 0.5)
        t_done = time.time()
    finally:
        stop_procs(procs)
    st = ledger.stats(dsn, table, {p: (0, n) for p, n in counts.items()})
    total = sum(counts.values())
    steady = (st["last_at"] or 0) - (st["first_at"] or 0)
    clear_s = t_done - t_joined
    return {
        "records": total,
        "consumers": args.consumers,
        "clear_s": round(clear_s, 1),
        "records_after_join": total - at_join,
        "wall_records_per_s": (total - at_join) / clear_s,
        "records_per_s": total / steady if steady > 0 else None,
        "lost": st["lost"],
        "duplicated": st["duplicated"],
        "table": table,
    }


def handoff(
    bootstrap: str, admin: Any, group: str, topic: str, drain_id: int, split: dict[int, int], timeout: float
) -> tuple[dict[int, int], float]:
    """Operator side of the mailbox hand-off: request, wait for every partition to resolve, seal.
    Returns {partition: start} and when the last partition resolved."""
    from confluent_kafka import Consumer, TopicPartition

    from lagpilot_runtime import handoff_mailbox as mbx

    mb = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": mbx.mailbox_group(group), "enable.auto.commit": False}
    )
    try:
        reqs = [
            TopicPartition(topic, p, s, metadata=mbx.request(drain_id, s).encode()) for p, s in split.items()
        ]
        mb.commit(offsets=reqs, asynchronous=False)
        starts: dict[int, int] = {}

        def resolved() -> bool:
            own = committed(admin, group, topic)  # the group's offsets FIRST, then the mailbox
            got = mb.committed([TopicPartition(topic, p) for p in split], timeout=30)
            for tp in got:
                if tp.partition in starts:
                    continue
                entry = mbx.decode(getattr(tp, "metadata", None), tp.offset)
                r = mbx.resolve(own.get(tp.partition), entry, drain_id, split[tp.partition])
                if r.resolved:
                    starts[tp.partition] = split[tp.partition] if r.start is None else r.start
            return len(starts) == len(split)

        wait_until(resolved, "the live owners to ack the hand-off", timeout, 0.1)
        t_resolved = time.time()
        got = mb.committed([TopicPartition(topic, p) for p in split], timeout=30)
        seal = []
        for tp in got:
            entry = mbx.decode(getattr(tp, "metadata", None), tp.offset)
            if entry is not None and entry.acked and entry.drain_id == drain_id:
                seal.append(
                    TopicPartition(topic, tp.partition, entry.split, metadata=entry.sealed().encode())
                )
        if seal:
            mb.commit(offsets=seal, asynchronous=False)
        return starts, t_resolved
    finally:
        mb.close()


class WarmRuntime:
    """`lagpilot drain --serve` as the operator runs it per group (warmRuntime): started, waited for
    until warm (its cost: warm-up seconds and idle memory, reported), stopped after the run."""

    def __init__(self, env: dict[str, str], max_tasks: int, workdir: Path) -> None:
        from lagpilot_dev.paths import free_port

        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        # what the operator gives its runtime: the CR's key (its Secret) and uid; here made up per run
        self.key, self.cr_uid = plan_auth.new_key(), f"bench-{uuid.uuid4()}"
        env = dict(env, **{plan_auth.KEY_ENV: self.key, plan_auth.CR_UID_ENV: self.cr_uid})
        t0 = time.time()
        self._log = open(workdir / "drain-runtime.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lagpilot.cli", "drain", "--serve"],
            env=dict(
                env, LAGPILOT_DRAIN_RUNTIME_PORT=str(port), LAGPILOT_DRAIN_MAX_PARALLELISM=str(max_tasks)
            ),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def warm() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the drain runtime exited {self.proc.returncode}: see {workdir / 'drain-runtime.log'}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_until(warm, "the warm drain runtime", 300, 0.2)
        self.warm_up_s = round(time.time() - t0, 2)
        time.sleep(2.0)  # idle: the warm-up's tasks are done
        self.idle_pss_mb = tree_pss_mb(self.proc.pid)

    def job_env(self, env: dict[str, str], plan: DrainPlan, attempt: int = 1) -> dict[str, str]:
        """A drain Job's environment for this runtime: its URL and the operator's signature of the plan."""
        auth = plan_auth.sign(
            plan_auth.parse_key(self.key),
            plan.to_json(),
            self.cr_uid,
            plan.drain_id,
            attempt,
            time.time() + plan_auth.PLAN_TTL_S,
        )
        return dict(env, **{RUNTIME_URL_ENV: self.url, plan_auth.AUTH_ENV: auth.to_json()})

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()


def run_drain(
    bootstrap: str,
    topic: str,
    dsn: str,
    counts: dict[int, int],
    jars: list[str],
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    group = f"bench-live-{uuid.uuid4().hex[:6]}"
    table = f"bench_drain_{uuid.uuid4().hex[:8]}"
    ledger.create_table(dsn, table)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    env = base_env(bootstrap, topic, group, dsn, table, args.cost_ms, args.batch)
    live = LiveProducer(bootstrap, topic, args.live_rate)
    denv = drain_env(env, jars)
    # the warm runtime is up before the live group starts (the operator keeps it up per group)
    runtime = WarmRuntime(denv, args.max_tasks, workdir) if args.runtime == "warm" else None
    procs = start_consumers(env, args.consumers, workdir, "live")
    drain_proc = None
    try:
        wait_until(lambda: joined(admin, group, topic), "the live group to join", 300, 0.2)
        live.start()
        time.sleep(1.0)
        split = end_offsets(bootstrap, topic)
        drain_id = int(time.time()) % 1_000_000
        t_plan = time.time()
        starts, t_ack = handoff(bootstrap, admin, group, topic, drain_id, split, args.handoff_timeout)
        ranges = {p: (starts[p], split[p]) for p in split if starts[p] < split[p]}
        plan = make_plan(str(drain_id), topic, group, ranges, args)
        if runtime:
            denv = runtime.job_env(denv, plan)
        summary_file = workdir / "drain-summary.json"
        t_launch = time.time()
        with open(workdir / "drain.log", "wb") as log:
            drain_proc = start_drain(plan, denv, summary_file, log)
            cpu = CpuSampler(
                [drain_proc.pid] + ([runtime.proc.pid] if runtime else []), [p.pid for p in procs]
            )
            cpu.start()
            rc = drain_proc.wait(timeout=3600)
            cpu_s = cpu.stop()
        t_drain_done = time.time()
        if rc != 0:
            raise RuntimeError(f"lagpilot drain exited {rc}: see {workdir / 'drain.log'}")
        live.stop()
        final = end_offsets(bootstrap, topic)
        wait_until(
            lambda: all(o >= final[p] for p, o in committed(admin, group, topic).items()),
            "the live group to catch up with the fresh records",
            600,
            0.5,
        )
    finally:
        if live.is_alive():
            live.stop()
        stop_procs(procs)
        if drain_proc is not None and drain_proc.poll() is None:
            os.killpg(drain_proc.pid, signal.SIGKILL)
        if runtime:
            runtime.stop()
    summary = json.loads(summary_file.read_text())
    drained = ledger.stats(dsn, table, ranges, source="drain")
    everything = ledger.stats(dsn, table, {p: (0, final[p]) for p in final})
    drained_n = sum(b - a for a, b in ranges.values())
    steady = (drained["last_at"] or 0) - (drained["first_at"] or 0)
    gaps = commit_gaps(dsn, table, t_plan, t_ack + 10.0)
    return {
        "records": drained_n,
        "tasks": len(plan.sub_ranges),
        "split_factor": args.split_factor,
        "ranges": ranges,
        "records_per_s": drained_n / steady if steady > 0 else None,
        "start_up_s": drained["first_at"] - t_plan if drained["first_at"] else None,
        "launch_to_first_drained_s": drained["first_at"] - t_launch if drained["first_at"] else None,
        "handoff_ack_s": t_ack - t_plan,
        "drain_wall_s": t_drain_done - t_launch,
        "plan_to_last_drained_s": (drained["last_at"] or t_drain_done) - t_plan,
        "handoff_gaps_s": gaps,
        "startup_breakdown": summary.get("startup"),
        "cpu_s": cpu_s,
        "live_sent": live.sent,
        "runtime": args.runtime,
        "runtime_warm_up_s": runtime.warm_up_s if runtime else None,
        "runtime_idle_pss_mb": runtime.idle_pss_mb if runtime else None,
        "lost": everything["lost"],
        "duplicated": everything["duplicated"],
        "outside": everything["outside"],
        "drained_lost": drained["lost"],
        "drained_duplicated": drained["duplicated"],
        "table": table,
    }
