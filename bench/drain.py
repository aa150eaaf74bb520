#!/usr/bin/env python3
"""Benchmark of the Spark drain (issue 10): the partition-capped group vs a real drain with hand-off.

    .venv/bin/python bench/drain.py [--json] [--quick] [--records 720000] [--split-factor 4]

The case a drain exists for: a latency-bound sink (a fixed 50 ms per call, batch 100: at most
2,000 records/s per consumer) and a backlog on 3 partitions that the group, capped at 3 consumers,
needs >= 120 s to clear (720,000 records). Everything is counted in delivery ledgers
(the built-in ledger sink, lagpilot_runtime.sinks.ledger: PostgreSQL, one row per delivery, no key), so lost and duplicated offsets are
counted, not assumed. Two phases on the same topic, broker and run:

1. group: 3 `lagpilot consume` processes (fresh group) on the backlog. Its clock starts when the
   group has joined (every partition has a first commit), so no rebalance is inside its window; it
   stops when the committed offsets reach the end. `group_clear_s`, steady rate from the ledger.
2. drain with hand-off: a second fresh group of 3 consumers on the same backlog while a producer
   adds fresh records (`--live-rate` per partition). Once it has joined, the bench acts as the
   operator: split = the end offsets now; it writes the hand-off requests to the group's mailbox
   (lagpilot_runtime.handoff_mailbox: the live owners ack at a batch boundary and seek to the
   split, nobody stops), waits for every partition to resolve (`resolve`: group offset first, then
   the ack), launches `lagpilot drain` on [ack, split) cut into split_factor x 3 sub-ranges, and
   lets the live group go on with the fresh records. When the drain is done and the live group has
   caught up with the producer, it stops.

Reported: `speedup` (drain steady rate / group steady rate), `start_up_s` (plan: hand-off request
written → first drained record in the sink, the cost a user waits for), `launch_to_first_drained_s`
(`lagpilot drain` launched → first drained record: the Spark part of it), `end_to_end_speedup` (the group's time for the drained record count at its measured
wall rate / the drain's time from the hand-off request to its last record), `handoff_pause_s`
{max, p95} over the live group's partitions in every hand-off (the longest gap between two sink
commits of that partition from the request to 10 s after the ack), `lost`/`duplicated` over both
ledgers, the drain's start-up breakdown (its `drain_startup` milestones) and per-process CPU seconds
during the drain (Spark JVM, Python workers, drain driver, live consumers; broker and PostgreSQL are
shared with whatever else runs on the machine). Prints a table, then ONE JSON line last (--json).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PARTITIONS = 3

from lagpilot_runtime.sinks import ledger  # noqa: E402


# ---- Kafka helpers ----------------------------------------------------------------------------

def produce(bootstrap: str, topic: str, n: int) -> dict[int, int]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000})
    counts = {i: 0 for i in range(PARTITIONS)}
    for i in range(n):
        part = i % PARTITIONS
        while True:
            try:
                p.produce(topic, key=b"%d" % (i % 1000), value=b'{"id":%d}' % i, partition=part)
                break
            except BufferError:
                p.poll(0.05)
        counts[part] += 1
    if p.flush(120) != 0:
        raise RuntimeError("producer could not deliver every record")
    return counts


class LiveProducer(threading.Thread):
    """Fresh records at `rate` per partition per second until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate, self.stop_evt, self.sent = topic, rate, threading.Event(), 0

    def run(self) -> None:
        tick = 0.1
        per_tick = max(1, round(self.rate * tick))
        nxt = time.monotonic()
        while not self.stop_evt.is_set():
            for part in range(PARTITIONS):
                for _ in range(per_tick):
                    self.p.produce(self.topic, value=b'{"live":1}', partition=part)
                    self.sent += 1
            self.p.poll(0)
            nxt += tick
            time.sleep(max(0.0, nxt - time.monotonic()))
        self.p.flush(60)

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(120)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks", "isolation.level": "read_committed"})
    try:
        return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]) for p in range(PARTITIONS)}
    finally:
        c.close()


def committed(admin: Any, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])])[group].result(30)
    return {tp.partition: int(tp.offset) for tp in res.topic_partitions}


def wait_until(check: Any, what: str, timeout: float, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


# ---- processes and their CPU -----------------------------------------------------------------

def base_env(bootstrap: str, topic: str, group: str, dsn: str, table: str, cost_ms: int, batch: int) -> dict[str, str]:
    # the drain's own switches (LAGPILOT_DRAIN_*, e.g. LAGPILOT_DRAIN_WARM_WORKERS=0) pass through, so
    # a whole bench run can be repeated with one changed
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_") or k.startswith("LAGPILOT_DRAIN_")}
    env.update({
        "PYTHONPATH": str(REPO), "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap, "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group, "LAGPILOT_BATCH_MAX_RECORDS": str(batch), "LAGPILOT_BATCH_TIMEOUT_MS": "200",
        "LAGPILOT_HANDLER": "lagpilot_runtime.sinks.ledger:process",
        "LAGPILOT_HANDLER_CONFIG": json.dumps({"table": table, "cost_ms": str(cost_ms)}),
        "LAGPILOT_POSTGRES_DSN": dsn, "LAGPILOT_FAILURE_POLICY": "exit", "LAGPILOT_LOG_LEVEL": "WARNING",
    })
    return env


def start_consumers(env: dict[str, str], n: int, workdir: Path, tag: str) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        e = dict(env, LAGPILOT_POD_NAME=f"bench-{tag}-{i}", LAGPILOT_METRICS_PORT="0")
        log = open(workdir / f"{tag}-consumer-{i}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "consume"], env=e, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def stop_procs(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, cpu seconds) of a process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return int(f[1]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def classify(cmd: str, drain_tree: bool, live_tree: bool) -> str | None:
    """Which bucket a process's CPU goes to (pure)."""
    if drain_tree:
        if "java" in cmd.split(" ")[0] or "SparkSubmit" in cmd:
            return "spark_jvm"
        if "spark_daemon" in cmd or "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            return "python_workers"
        return "drain_driver"
    if live_tree:
        return "live_group"
    if "kafka.Kafka" in cmd:
        return "broker_shared"
    if cmd.startswith("postgres") or "/postgres" in cmd.split(" ")[0]:
        return "postgres_shared"
    return None


class CpuSampler(threading.Thread):
    """Every 0.5 s: CPU seconds of each process of the drain's tree, the live consumers, the broker and
    PostgreSQL; per bucket, the growth between start and stop (processes born meanwhile count from 0)."""

    def __init__(self, drain_roots: list[int], live_roots: list[int], extra_drain_roots: Any = None) -> None:
        super().__init__(daemon=True)
        self.drain_roots, self.live_roots = set(drain_roots), set(live_roots)
        # a callable -> pids that join the drain's roots when seen (--k8s: executor pods' processes)
        self.extra_drain_roots = extra_drain_roots
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.stop_evt = threading.Event()
        self.started_at = time.time()

    def sample(self, initial: bool = False) -> None:
        if self.extra_drain_roots is not None:
            self.drain_roots.update(self.extra_drain_roots())
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _stat(int(name))
                if st:
                    stats[int(name)] = st
        for pid, (ppid, cpu) in stats.items():
            chain, cur = set(), pid
            for _ in range(12):
                chain.add(cur)
                cur = stats.get(cur, (0, 0.0))[0]
                if cur <= 1:
                    break
            in_drain, in_live = bool(chain & self.drain_roots), bool(chain & self.live_roots)
            bucket = self.last.get(pid, (None, 0.0))[0] or classify(_cmdline(pid), in_drain, in_live)
            if bucket is None:
                continue
            if initial:
                self.first[pid] = cpu
            self.last[pid] = (bucket, cpu)

    def run(self) -> None:
        self.sample(initial=True)
        while not self.stop_evt.wait(0.5):
            self.sample()

    def stop(self) -> dict[str, float]:
        self.stop_evt.set()
        self.join(10)
        out: dict[str, float] = {}
        for pid, (bucket, cpu) in self.last.items():
            out[bucket] = out.get(bucket, 0.0) + cpu - self.first.get(pid, 0.0)
        wall = time.time() - self.started_at
        res = {k: round(v, 1) for k, v in sorted(out.items())}
        res["wall_s"] = round(wall, 1)
        res["cores"] = os.cpu_count() or 0
        return res


# ---- the phases ------------------------------------------------------------------------------

def joined(admin: Any, group: str, topic: str) -> dict[int, int] | None:
    """The group's committed offsets once every partition has a first commit."""
    got = committed(admin, group, topic)
    return got if all(got.get(p, -1) >= 0 for p in range(PARTITIONS)) else None


def run_group(bootstrap: str, topic: str, dsn: str, counts: dict[int, int], args: argparse.Namespace,
              workdir: Path) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    group = f"bench-group-{uuid.uuid4().hex[:6]}"
    table = f"bench_group_{uuid.uuid4().hex[:8]}"
    ledger.create_table(dsn, table)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    procs = start_consumers(base_env(bootstrap, topic, group, dsn, table, args.cost_ms, args.batch),
                            args.consumers, workdir, "group")
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
    return {"records": total, "consumers": args.consumers, "clear_s": round(clear_s, 1),
            "records_after_join": total - at_join, "wall_records_per_s": (total - at_join) / clear_s,
            "records_per_s": total / steady if steady > 0 else None,
            "lost": st["lost"], "duplicated": st["duplicated"], "table": table}


def handoff(bootstrap: str, admin: Any, group: str, topic: str, drain_id: int, split: dict[int, int],
            timeout: float) -> tuple[dict[int, int], float]:
    """Operator side of the mailbox hand-off: request, wait for every partition to resolve, seal.
    Returns {partition: start} and when the last partition resolved."""
    from confluent_kafka import Consumer, TopicPartition

    from lagpilot_runtime import handoff_mailbox as mbx

    mb = Consumer({"bootstrap.servers": bootstrap, "group.id": mbx.mailbox_group(group), "enable.auto.commit": False})
    try:
        reqs = [TopicPartition(topic, p, s, metadata=mbx.request(drain_id, s).encode()) for p, s in split.items()]
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
                seal.append(TopicPartition(topic, tp.partition, entry.split, metadata=entry.sealed().encode()))
        if seal:
            mb.commit(offsets=seal, asynchronous=False)
        return starts, t_resolved
    finally:
        mb.close()


def longest_gap(ats: list[float], t_from: float, t_to: float) -> float:
    """The longest time without a commit in [t_from, t_to], given commit times (pure): the window is
    bounded by the last commit before it (or t_from) and t_to."""
    # the LAST commit before the window (``ats`` comes from SQL in no particular order)
    before = max((a for a in ats if a < t_from), default=t_from)
    edges = [before] + sorted(a for a in ats if t_from <= a <= t_to) + [t_to]
    return max(b - a for a, b in zip(edges, edges[1:]))


def commit_gaps(dsn: str, table: str, t_from: float, t_to: float) -> dict[int, float]:
    """Per partition, the longest gap between sink commits of the live group in [t_from, t_to]."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {p: longest_gap([float(r[0]) for r in conn.execute(
            f"SELECT DISTINCT delivered_at FROM {table} WHERE source = 'consumer' AND partition = %s AND delivered_at BETWEEN %s AND %s",
            (p, t_from - 30.0, t_to))], t_from, t_to) for p in range(PARTITIONS)}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (pure)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


RUNTIME_URL_ENV = "LAGPILOT_DRAIN_RUNTIME_URL"


def tree_pss_mb(root: int) -> float:
    """Proportional set size of a process and its descendants (MB): shared pages (the forked Python
    workers share the daemon's) counted once, unlike a sum of RSS."""
    from bench.chaos_faults import descendants

    total = 0
    for pid in [root, *descendants(root)]:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            pass
    return round(total / 2**20, 1)


class WarmRuntime:
    """`lagpilot drain --serve` as the operator runs it per group (warmRuntime): started, waited for
    until warm (its cost: warm-up seconds and idle memory, reported), stopped after the run."""

    def __init__(self, env: dict[str, str], max_tasks: int, workdir: Path) -> None:
        from lagpilot_dev.paths import free_port

        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        t0 = time.time()
        self._log = open(workdir / "drain-runtime.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "drain", "--serve"],
                                     env=dict(env, LAGPILOT_DRAIN_RUNTIME_PORT=str(port),
                                              LAGPILOT_DRAIN_MAX_PARALLELISM=str(max_tasks)),
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

        def warm() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the drain runtime exited {self.proc.returncode}: see {workdir / 'drain-runtime.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_until(warm, "the warm drain runtime", 300, 0.2)
        self.warm_up_s = round(time.time() - t0, 2)
        time.sleep(2.0)  # idle: the warm-up's tasks are done
        self.idle_pss_mb = tree_pss_mb(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()


def run_drain(bootstrap: str, topic: str, dsn: str, counts: dict[int, int], jars: list[str],
              args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    from lagpilot_runtime.drain_plan import DrainPlan, parallelism_for, split_ranges

    group = f"bench-live-{uuid.uuid4().hex[:6]}"
    table = f"bench_drain_{uuid.uuid4().hex[:8]}"
    ledger.create_table(dsn, table)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    env = base_env(bootstrap, topic, group, dsn, table, args.cost_ms, args.batch)
    live = LiveProducer(bootstrap, topic, args.live_rate)
    denv = dict(env, LAGPILOT_SPARK_JARS=",".join(jars), LAGPILOT_LOG_LEVEL="INFO")
    # the warm runtime is up before the live group starts (the operator keeps it up per group)
    runtime = WarmRuntime(denv, args.max_tasks, workdir) if args.runtime == "warm" else None
    procs = start_consumers(env, args.consumers, workdir, "live")
    drain_proc = None
    try:
        if runtime:
            denv[RUNTIME_URL_ENV] = runtime.url
        wait_until(lambda: joined(admin, group, topic), "the live group to join", 300, 0.2)
        live.start()
        time.sleep(1.0)
        split = end_offsets(bootstrap, topic)
        drain_id = int(time.time()) % 1_000_000
        t_plan = time.time()
        starts, t_ack = handoff(bootstrap, admin, group, topic, drain_id, split, args.handoff_timeout)
        ranges = {p: (starts[p], split[p]) for p in split if starts[p] < split[p]}
        subs = split_ranges(ranges, args.split_factor, min_records_per_task=args.batch)
        plan = DrainPlan(str(drain_id), topic, group, subs, args.batch, parallelism_for(subs, args.max_tasks)).validate()
        summary_file = workdir / "drain-summary.json"
        t_launch = time.time()
        with open(workdir / "drain.log", "wb") as log:
            drain_proc = subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "drain", "--plan", plan.to_json(),
                                           "--summary-file", str(summary_file)], env=denv, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
            cpu = CpuSampler([drain_proc.pid] + ([runtime.proc.pid] if runtime else []), [p.pid for p in procs])
            cpu.start()
            rc = drain_proc.wait(timeout=3600)
            cpu_s = cpu.stop()
        t_drain_done = time.time()
        if rc != 0:
            raise RuntimeError(f"lagpilot drain exited {rc}: see {workdir / 'drain.log'}")
        live.stop()
        final = end_offsets(bootstrap, topic)
        wait_until(lambda: all(o >= final[p] for p, o in committed(admin, group, topic).items()),
                   "the live group to catch up with the fresh records", 600, 0.5)
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
        "records": drained_n, "tasks": len(subs), "split_factor": args.split_factor, "ranges": ranges,
        "records_per_s": drained_n / steady if steady > 0 else None,
        "start_up_s": drained["first_at"] - t_plan if drained["first_at"] else None,
        "launch_to_first_drained_s": drained["first_at"] - t_launch if drained["first_at"] else None,
        "handoff_ack_s": t_ack - t_plan, "drain_wall_s": t_drain_done - t_launch,
        "plan_to_last_drained_s": (drained["last_at"] or t_drain_done) - t_plan,
        "handoff_gaps_s": gaps, "startup_breakdown": summary.get("startup"),
        "cpu_s": cpu_s, "live_sent": live.sent, "runtime": args.runtime,
        "runtime_warm_up_s": runtime.warm_up_s if runtime else None,
        "runtime_idle_pss_mb": runtime.idle_pss_mb if runtime else None,
        "lost": everything["lost"], "duplicated": everything["duplicated"], "outside": everything["outside"],
        "drained_lost": drained["lost"], "drained_duplicated": drained["duplicated"], "table": table,
    }


def parse_variants(items: list[str]) -> dict[str, dict[str, str]]:
    """``NAME=ENVJSON`` (e.g. ``old={"LAGPILOT_DRAIN_WARM_WORKERS":"0"}``) -> {name: env} (pure)."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--startup-ab wants NAME=ENVJSON, got {item!r}")
        env = json.loads(value or "{}")
        if not isinstance(env, dict):
            raise ValueError(f"--startup-ab {name}: the environment must be a JSON object")
        out[name] = {str(k): str(v) for k, v in env.items()}
    return out


def round_order(names: list[str], rnd: int) -> list[str]:
    """Alternate which variant runs first (pure): even rounds as given, odd rounds reversed."""
    return list(names) if rnd % 2 == 0 else list(reversed(names))


def median_diffs(rows: dict[str, list[dict[str, Any]]], key: str, base: str) -> dict[str, float | None]:
    """Per variant, the median over rounds of (variant - base) for ``key`` (pure; same round pairs)."""
    import statistics

    out: dict[str, float | None] = {}
    for name, rs in rows.items():
        if name == base:
            continue
        d = [b[key] - a[key] for a, b in zip(rows[base], rs) if a.get(key) is not None and b.get(key) is not None]
        out[name] = round(statistics.median(d), 2) if d else None
    return out


def median_ratios(rows: dict[str, list[dict[str, Any]]], key: str, base: str) -> dict[str, float | None]:
    """Per variant, the median over rounds of (variant / base) for ``key`` (pure; same round pairs)."""
    import statistics

    out: dict[str, float | None] = {}
    for name, rs in rows.items():
        if name == base:
            continue
        q = [b[key] / a[key] for a, b in zip(rows[base], rs) if a.get(key) and b.get(key) is not None]
        out[name] = round(statistics.median(q), 2) if q else None
    return out


def executor_variants(counts: list[int], slots: int, memory_mb: int = 1024) -> dict[str, dict[str, str]]:
    """``--executors 1,2,4``: the same drain on Spark's local-cluster (separate executor JVMs, each
    with its own Python worker daemon) with the same total task slots split over N executors (pure)."""
    out = {}
    for n in counts:
        if n < 1:
            raise ValueError("--executors wants counts >= 1")
        cores = max(1, math.ceil(slots / n))
        out[f"{n}x{cores}"] = {"LAGPILOT_SPARK_MASTER": f"local-cluster[{n},{cores},{memory_mb}]"}
    return out


K8S_EXECUTORS_ENV, K8S_CORES_ENV = "LAGPILOT_BENCH_K8S_EXECUTORS", "LAGPILOT_BENCH_K8S_CORES"


def k8s_executor_variants(counts: list[int], slots: int) -> dict[str, dict[str, str]]:
    """``--executors 1,2,4 --k8s``: a ``local`` variant (the drain's own default master,
    ``local[<slots>,4]``) and, per count N, the same drain on Spark's Kubernetes backend with N
    executor pods of ceil(slots / N) task slots each (pure; the bench fills in the master and conf
    per round, these two keys only name the shape)."""
    out: dict[str, dict[str, str]] = {"local": {}}
    for n in counts:
        if n < 1:
            raise ValueError("--executors wants counts >= 1")
        cores = max(1, math.ceil(slots / n))
        out[f"k8s-{n}x{cores}"] = {K8S_EXECUTORS_ENV: str(n), K8S_CORES_ENV: str(cores)}
    return out


def k8s_drain_env(env: dict[str, str], k8s: Any, executors: int, cores: int, pod_prefix: str, run_label: str,
                  memory: str = "512m") -> dict[str, str]:
    """The drain process's environment for Spark's Kubernetes backend in client mode (pure but for
    ``k8s``'s names): the driver is this local process, acting as the chart's drain ServiceAccount;
    executors get the plain LAGPILOT_* settings through spark.executorEnv and the DSN through the
    Secret (never literal)."""
    from lagpilot_dev.spark_k8s import client_mode_conf

    plain = {k: v for k, v in env.items() if k.startswith("LAGPILOT_") and k != "LAGPILOT_POSTGRES_DSN"
             and not k.startswith(("LAGPILOT_SPARK_", "LAGPILOT_BENCH_"))}
    plain["PYTHONPATH"] = env.get("PYTHONPATH", str(REPO))
    conf = client_mode_conf(k8s.namespace, executors, cores, memory, pod_prefix, plain,
                            {"LAGPILOT_POSTGRES_DSN": ("drain-env", "dsn")}, labels={"lagpilot.io/bench-run": run_label})
    return dict(env, LAGPILOT_SPARK_MASTER=k8s.master, LAGPILOT_SPARK_CONF=json.dumps(conf, sort_keys=True),
                KUBECONFIG=str(k8s.driver_kubeconfig))


class PodWatch(threading.Thread):
    """Polls the API server (0.5 s) for the executor pods of one drain (label lagpilot.io/bench-run):
    names seen, the most Running at once."""

    def __init__(self, k8s: Any, run_label: str) -> None:
        super().__init__(daemon=True)
        self.k8s, self.selector = k8s, f"spark-role=executor,lagpilot.io/bench-run={run_label}"
        self.seen: set[str] = set()
        self.running_max = 0
        self.stop_evt = threading.Event()

    def poll(self) -> int:
        from lagpilot_dev.spark_k8s import executor_summary

        pods = self.k8s.executor_pods(self.selector)
        self.seen.update(p["metadata"]["name"] for p in pods)
        self.running_max = max(self.running_max, executor_summary(pods)["running"])
        return len(pods)

    def run(self) -> None:
        while not self.stop_evt.wait(0.5):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a failed poll: the next one counts
                pass

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(10)


def run_startup_ab(bootstrap: str, topic: str, dsn: str, counts: dict[int, int], jars: list[str],
                   variants: dict[str, dict[str, str]], args: argparse.Namespace, workdir: Path,
                   k8s: Any = None) -> dict[str, Any]:
    """The drain's start-up alone, variants side by side: per round, each variant (its extra
    environment) drains the same backlog as a fresh drain (fresh progress groups, fresh ledger),
    launched as a process; launch -> first drained record in the sink, steady rate, the drain's
    CPU seconds and its start-up milestones. The order alternates per round (load drifts)."""
    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in variants}
    ranges = {p: (0, n) for p, n in counts.items()}
    # a variant with LAGPILOT_DRAIN_RUNTIME=warm (a bench switch) sends its drains to one warm
    # runtime, started before the rounds (the operator keeps it up per group): one group and ledger
    # table for all its rounds, each round a fresh drain id, counted by that id
    runtimes: dict[str, tuple[str, str, WarmRuntime]] = {}

    def variant_env(name: str, group: str, table: str) -> dict[str, str]:
        env = base_env(bootstrap, topic, group, dsn, table, args.cost_ms, args.batch)
        env.update(LAGPILOT_SPARK_JARS=",".join(jars), LAGPILOT_LOG_LEVEL="INFO", **variants[name])
        return env

    try:
        for name, extra in variants.items():
            if extra.get("LAGPILOT_DRAIN_RUNTIME") == "warm":
                group, table = f"bench-ab-{uuid.uuid4().hex[:6]}", f"bench_ab_{uuid.uuid4().hex[:8]}"
                ledger.create_table(dsn, table)
                runtimes[name] = (group, table, WarmRuntime(variant_env(name, group, table), args.max_tasks, workdir))
        return _startup_rounds(bootstrap, topic, dsn, counts, variants, args, workdir, rows, ranges, runtimes, variant_env,
                               k8s)
    finally:
        for _, _, rt in runtimes.values():
            rt.stop()


def _startup_rounds(bootstrap: str, topic: str, dsn: str, counts: dict[int, int], variants: dict[str, dict[str, str]],
                    args: argparse.Namespace, workdir: Path, rows: dict[str, list[dict[str, Any]]],
                    ranges: dict[int, tuple[int, int]], runtimes: dict[str, tuple[str, str, "WarmRuntime"]],
                    variant_env: Any, k8s: Any = None) -> dict[str, Any]:
    import statistics

    from lagpilot_runtime.drain_plan import DrainPlan, parallelism_for, split_ranges

    for rnd in range(args.rounds):
        for name in round_order(list(variants), rnd):
            drain_id = None
            if name in runtimes:
                group, table, rt = runtimes[name]
                env = dict(variant_env(name, group, table), **{RUNTIME_URL_ENV: rt.url})
            else:
                group, table = f"bench-ab-{uuid.uuid4().hex[:6]}", f"bench_ab_{uuid.uuid4().hex[:8]}"
                ledger.create_table(dsn, table)
                env = variant_env(name, group, table)
            subs = split_ranges(ranges, args.split_factor, min_records_per_task=args.batch)
            plan = DrainPlan(uuid.uuid4().hex[:8], topic, group, subs, args.batch,
                             parallelism_for(subs, args.max_tasks)).validate()
            if name in runtimes:
                drain_id = plan.drain_id
            watch = None
            if k8s is not None and K8S_EXECUTORS_ENV in variants[name]:
                run_label = f"{name}-{rnd}-{plan.drain_id}"
                env = k8s_drain_env(env, k8s, int(variants[name][K8S_EXECUTORS_ENV]), int(variants[name][K8S_CORES_ENV]),
                                    f"bench-{plan.drain_id}", run_label)
                watch = PodWatch(k8s, run_label)
                watch.start()
            summary_file = workdir / f"ab-{name}-{rnd}.json"
            load = os.getloadavg()[0]
            t_launch = time.time()
            with open(workdir / f"ab-{name}-{rnd}.log", "wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "lagpilot.cli", "drain", "--plan", plan.to_json(),
                                         "--summary-file", str(summary_file)], env=env, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                cpu = CpuSampler([proc.pid] + ([runtimes[name][2].proc.pid] if name in runtimes else []), [],
                                 (lambda: k8s.runner.running_pids(k8s.namespace).values()) if watch else None)
                cpu.start()
                rc = proc.wait(timeout=1800)
                cpu_s = cpu.stop()
            pods_row: dict[str, Any] = {}
            if watch is not None:
                watch.stop()
                watch.poll()
                t_end = time.time()
                # Spark deletes its executor pods when the driver stops; the runner then ends them
                left = wait_until(lambda: watch.poll() == 0 or None, f"executor pods of {name} deleted", 120, 0.5)
                log_text = (workdir / f"ab-{name}-{rnd}.log").read_text(errors="replace")
                pods_row = {"executor_pods_seen": len(watch.seen), "executor_pods_running_max": watch.running_max,
                            "executor_pods_gone_after_exit_s": round(time.time() - t_end, 1) if left else None,
                            # the driver acts as the chart's drain ServiceAccount: any RBAC refusal shows here
                            "driver_log_forbidden": sum(1 for ln in log_text.splitlines()
                                                        if "Forbidden" in ln or " 403" in ln)}
            if rc != 0:
                raise RuntimeError(f"lagpilot drain ({name}) exited {rc}: see {workdir}")
            st = ledger.stats(dsn, table, ranges, source="drain", drain_id=drain_id)
            steady = (st["last_at"] or 0) - (st["first_at"] or 0)
            summary = json.loads(summary_file.read_text())
            row = {"round": rnd, "load_1m": round(load, 1),
                   "launch_to_first_drained_s": round(st["first_at"] - t_launch, 2) if st["first_at"] else None,
                   "launch_to_last_drained_s": round(st["last_at"] - t_launch, 2) if st["last_at"] else None,
                   "records_per_s": round(sum(counts.values()) / steady) if steady > 0 else None,
                   "drain_cpu_s": round(sum(v for k, v in cpu_s.items() if k in ("spark_jvm", "python_workers", "drain_driver")), 1),
                   "lost": st["lost"], "duplicated": st["duplicated"], "startup": summary.get("startup"), **pods_row}
            rows[name].append(row)
            print(f"round {rnd} {name}: {json.dumps(row)}", file=sys.stderr, flush=True)
    base = next(iter(variants))

    def med(name: str, key: str) -> float | None:
        got = [r[key] for r in rows[name] if r.get(key) is not None]
        return round(statistics.median(got), 2) if got else None

    out = _ab_result(rows, variants, args, counts, base, med)
    if k8s is not None:
        out["median_ratio_vs_base"] = {k: median_ratios(rows, k, base) for k in
                                       ("launch_to_first_drained_s", "launch_to_last_drained_s", "records_per_s",
                                        "drain_cpu_s")}
        for n, v in out["variants"].items():
            if K8S_EXECUTORS_ENV in variants[n]:
                v["median_executor_pods_seen"] = med(n, "executor_pods_seen")
                v["median_executor_pods_running_max"] = med(n, "executor_pods_running_max")
        out["k8s"] = {"master": k8s.master, "namespace": k8s.namespace, "service_account": k8s.service_account,
                      "executor_memory": "512m", "driver": "local process (client mode), the drain ServiceAccount's token"}
    return out


def _ab_result(rows: dict[str, list[dict[str, Any]]], variants: dict[str, dict[str, str]], args: argparse.Namespace,
               counts: dict[int, int], base: str, med: Any) -> dict[str, Any]:
    return {"mode": "startup_ab", "records": sum(counts.values()), "rounds": args.rounds, "base": base,
            "variants": {n: {"env": variants[n], "median_launch_to_first_drained_s": med(n, "launch_to_first_drained_s"),
                             "median_launch_to_last_drained_s": med(n, "launch_to_last_drained_s"),
                             "median_records_per_s": med(n, "records_per_s"), "median_drain_cpu_s": med(n, "drain_cpu_s"),
                             "rounds": rows[n]} for n in variants},
            "median_diff_vs_base": {"launch_to_first_drained_s": median_diffs(rows, "launch_to_first_drained_s", base),
                                    "launch_to_last_drained_s": median_diffs(rows, "launch_to_last_drained_s", base),
                                    "records_per_s": median_diffs(rows, "records_per_s", base),
                                    "records_per_s_ratio": median_ratios(rows, "records_per_s", base),
                                    "drain_cpu_s": median_diffs(rows, "drain_cpu_s", base)},
            "lost": sum(r["lost"] for rs in rows.values() for r in rs),
            "duplicated": sum(r["duplicated"] for rs in rows.values() for r in rs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None, help="backlog (default 720,000; --quick 30,000)")
    ap.add_argument("--cost-ms", type=int, default=50, help="sink latency per call")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--split-factor", type=int, default=4, help="sub-ranges per partition (3 x 4 = 12 tasks)")
    ap.add_argument("--max-tasks", type=int, default=12)
    ap.add_argument("--live-rate", type=int, default=None, help="fresh records/s per partition during the drain "
                    "(default 200; --quick 50)")
    ap.add_argument("--handoff-timeout", type=float, default=120.0)
    ap.add_argument("--quick", action="store_true", help="a short run for CI: 30,000 records")
    ap.add_argument("--runtime", choices=("warm", "cold"), default="warm",
                    help="warm: the drain runs in a warm drain runtime started before the run (spec.drain."
                    "warmRuntime; its warm-up and idle memory reported); cold: the drain process starts Spark itself")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--startup-ab", nargs="+", metavar="NAME=ENVJSON", default=None,
                    help="only the drain's start-up, variants side by side (no group phase, no hand-off): "
                    "each NAME=ENVJSON is a variant's extra environment, e.g. old='{\"LAGPILOT_DRAIN_WARM_WORKERS\":\"0\"}' "
                    "new='{}'; the first is the base of the per-round differences (default backlog 36,000); "
                    "LAGPILOT_DRAIN_RUNTIME=warm in a variant sends its drains to a warm runtime started before the rounds")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of --startup-ab / --executors")
    ap.add_argument("--executors", default=None, metavar="1,2,4",
                    help="the drain alone on Spark's local-cluster with 1, 2, 4 executor processes sharing the "
                    "same --max-tasks slots, side by side (like --startup-ab; ratios vs the first count)")
    ap.add_argument("--k8s", action="store_true",
                    help="with --executors: the counts on Spark's Kubernetes backend (client mode against the local "
                    "kube-apiserver, executor pods run by a pod runner started here, the driver as the chart's drain "
                    "ServiceAccount) beside a 'local' variant (local[<max-tasks>,4]), the base of the ratios")
    args = ap.parse_args(argv)
    if args.k8s and not args.executors:
        ap.error("--k8s goes with --executors")
    variants = parse_variants(args.startup_ab) if args.startup_ab else None
    if args.executors:
        counts_arg = [int(x) for x in args.executors.split(",") if x.strip()]
        variants = (k8s_executor_variants(counts_arg, args.max_tasks) if args.k8s
                    else executor_variants(counts_arg, args.max_tasks))
    args.records = args.records or (120_000 if args.executors else 36_000 if variants else 30_000 if args.quick else 720_000)
    args.live_rate = args.live_rate if args.live_rate is not None else (50 if args.quick else 200)

    from confluent_kafka.admin import AdminClient, NewTopic

    from lagpilot_dev.stack import Stack

    stack = Stack()
    info, lease = stack.acquire(["kafka", "postgres", "spark"] + (["kube"] if args.k8s else []))
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"lagpilot-bench-drain-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    load_before = os.getloadavg()
    try:
        bootstrap, dsn = str(info.bootstrap_servers), str(info.postgres_dsn)
        topic = f"bench-drain-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        counts = produce(bootstrap, topic, args.records)
        print(f"produced {sum(counts.values())} records on {PARTITIONS} partitions; work dir {workdir}", file=sys.stderr)
        if variants:
            k8s = None
            if args.k8s:
                from lagpilot_dev.spark_k8s import LocalSparkK8s

                k8s = LocalSparkK8s(stack.part("kube"), workdir, secret_data={"dsn": dsn}, prefix="bench-drain-k8s")
            try:
                if k8s is not None:
                    k8s.start()
                ab = run_startup_ab(bootstrap, topic, dsn, counts, list(info.spark_jars), variants, args, workdir, k8s)
            finally:
                if k8s is not None:
                    k8s.stop()
            ab["load_avg_1m"] = {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}
            ab["cores"] = os.cpu_count()
            if args.executors:
                ab["mode"] = "executors_k8s" if args.k8s else "executors"
                ab["note"] = (f"{os.cpu_count()} cores on this host: every executor JVM and its Python workers share "
                              "them, so more executors add processes, not CPU; on a cluster each executor brings its own")
                print(ab["note"])
            if args.k8s:
                for name, v in ab["variants"].items():
                    print(f"{name:<12} executor pods seen via the API {v.get('median_executor_pods_seen', '-')} "
                          f"(running at once {v.get('median_executor_pods_running_max', '-')})")
                print(f"median per-round ratio vs {ab['base']}: {ab['median_ratio_vs_base']}")
            for name, v in ab["variants"].items():
                print(f"{name:<12} launch->first drained {v['median_launch_to_first_drained_s']} s (median)  "
                      f"launch->last drained {v['median_launch_to_last_drained_s']} s  "
                      f"records/s {v['median_records_per_s']}  drain CPU {v['median_drain_cpu_s']} s  env {v['env']}")
            print(f"median per-round difference vs {ab['base']}: {ab['median_diff_vs_base']}  lost {ab['lost']} "
                  f"duplicated {ab['duplicated']}  load {ab['load_avg_1m']}")
            if args.json:
                print(json.dumps(ab))
            return 0 if ab["lost"] == 0 and ab["duplicated"] == 0 else 1
        group = run_group(bootstrap, topic, dsn, counts, args, workdir)
        print(f"group: {group}", file=sys.stderr)
        drain = run_drain(bootstrap, topic, dsn, counts, list(info.spark_jars), args, workdir)
        print(f"drain: {drain}", file=sys.stderr)
    finally:
        stack.release(lease, stop=os.environ.get("LAGPILOT_KEEP_STACK", "") in ("", "0", "false"))
    gaps = list(drain["handoff_gaps_s"].values())
    group_time_same = drain["records"] / group["wall_records_per_s"]
    drain_time = drain["plan_to_last_drained_s"]

    def r(x: Any, n: int = 2) -> Any:
        return round(x, n) if isinstance(x, float) else x

    result = {
        "records": sum(counts.values()), "partitions": PARTITIONS, "sink_ms_per_call": args.cost_ms,
        "batch": args.batch, "tasks": drain["tasks"], "quick": args.quick,
        "group_records_per_s": r(group["records_per_s"], 1), "group_clear_s": group["clear_s"],
        "drain_records_per_s": r(drain["records_per_s"], 1), "drained_records": drain["records"],
        "speedup": r(drain["records_per_s"] / group["records_per_s"]) if drain["records_per_s"] and group["records_per_s"] else None,
        "start_up_s": r(drain["start_up_s"]), "launch_to_first_drained_s": r(drain["launch_to_first_drained_s"]),
        "handoff_ack_s": r(drain["handoff_ack_s"]),
        "end_to_end_speedup": r(group_time_same / drain_time) if drain_time > 0 else None,
        "handoff_pause_s": {"max": r(max(gaps)), "p95": r(percentile(gaps, 95)), "samples": len(gaps)},
        "lost": group["lost"] + drain["lost"], "duplicated": group["duplicated"] + drain["duplicated"],
        "startup_breakdown_s": drain["startup_breakdown"], "cpu_s_during_drain": drain["cpu_s"],
        "runtime": drain["runtime"], "runtime_warm_up_s": drain["runtime_warm_up_s"],
        "runtime_idle_pss_mb": drain["runtime_idle_pss_mb"],
        "load_avg_1m": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
    }
    print(f"{'path':<34}{'tasks':>6}{'records':>10}{'records/s':>11}{'time s':>9}{'lost':>6}{'dup':>6}")
    print(f"{'group (3 consumers, the cap)':<34}{args.consumers:>6}{group['records']:>10}{group['records_per_s'] or 0:>11.0f}"
          f"{group['clear_s']:>9.1f}{group['lost']:>6}{group['duplicated']:>6}")
    print(f"{'drain + live group (hand-off)':<34}{drain['tasks']:>6}{drain['records']:>10}{drain['records_per_s'] or 0:>11.0f}"
          f"{drain_time:>9.1f}{drain['lost']:>6}{drain['duplicated']:>6}")
    print(f"speedup {result['speedup']}  end_to_end_speedup {result['end_to_end_speedup']}  start_up_s "
          f"{result['start_up_s']}  launch_to_first_drained_s {result['launch_to_first_drained_s']}  handoff_pause_s "
          f"{result['handoff_pause_s']}")
    if drain["runtime"] == "warm":
        print(f"warm drain runtime: warm-up {drain['runtime_warm_up_s']} s before the run, idle memory (PSS) "
              f"{drain['runtime_idle_pss_mb']} MB (kept up per group); start-up below is since the plan reached it")
    print(f"drain start-up (s since process start): {drain['startup_breakdown']}")
    print(f"CPU seconds during the drain ({result['cpu_s_during_drain'].get('cores')} cores): {drain['cpu_s']}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
