"""What the drain benchmark (bench/drain.py) measures besides the ledgers: CPU seconds per bucket of
processes (Spark JVM, Python workers, drain driver, live group, broker, PostgreSQL), a process
tree's memory (PSS), the live group's longest pause between sink commits, percentiles."""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from bench.drain.workload import PARTITIONS


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
        for pid, (_ppid, cpu) in stats.items():
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


def longest_gap(ats: list[float], t_from: float, t_to: float) -> float:
    """The longest time without a commit in [t_from, t_to], given commit times (pure): the window is
    bounded by the last commit before it (or t_from) and t_to."""
    # the LAST commit before the window (``ats`` comes from SQL in no particular order)
    before = max((a for a in ats if a < t_from), default=t_from)
    edges = [before, *sorted(a for a in ats if t_from <= a <= t_to), t_to]
    return max(b - a for a, b in itertools.pairwise(edges))


def commit_gaps(dsn: str, table: str, t_from: float, t_to: float) -> dict[int, float]:
    """Per partition, the longest gap between sink commits of the live group in [t_from, t_to]."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {
            p: longest_gap(
                [
                    float(r[0])
                    for r in conn.execute(
                        f"SELECT DISTINCT delivered_at FROM {table} WHERE source = 'consumer' AND partition = %s AND delivered_at BETWEEN %s AND %s",
                        (p, t_from - 30.0, t_to),
                    )
                ],
                t_from,
                t_to,
            )
            for p in range(PARTITIONS)
        }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (pure)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


def tree_pss_mb(root: int) -> float:
    """Proportional set size of a process and its descendants (MB): shared pages (the forked Python
    workers share the daemon's) counted once, unlike a sum of RSS."""
    from bench.chaos.faults import descendants

    total = 0
    for pid in [root, *descendants(root)]:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            pass
    return round(total / 2**20, 1)
