"""Longest files first for `./dev/test`'s pytest-xdist workers.

`./dev/test` runs whole files per worker (`--dist loadfile`) and hands the next file to whichever
worker is about to run out. xdist's default order (`--loadscope-reorder`) is by number of tests per
file, so the one-test real files (a single drain scenario of 2-5 minutes) came last and whichever
worker took the last of them set the suite's tail. Here the files are sorted by their recorded
duration, longest first (the classic longest-processing-time-first rule: the short files fill the
gaps at the end), and `./dev/test` passes `--no-loadscope-reorder` so xdist keeps that order.

The durations are `tests/durations.json` (seconds per file, setup and teardown included), written
by `python -m tests.schedule <junit.xml>` from a full run's JUnit report. A file not in it (a new
one) counts as `NEW_REAL_S` under tests/real (real files are the long ones) and 0 elsewhere. Every
worker reads the same committed file, so all collect the same order (xdist requires it).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

DURATIONS = Path(__file__).with_name("durations.json")
NEW_REAL_S = 120.0  # a real file with no recorded duration: assume a long one (start it early)


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def estimate(path: str, durations: Mapping[str, float]) -> float:
    if path in durations:
        return durations[path]
    return NEW_REAL_S if path.startswith("tests/real/") else 0.0


def longest_files_first(nodeids: Sequence[str], durations: Mapping[str, float]) -> list[int]:
    """Indices of `nodeids` reordered: grouped by file, files by estimated duration descending
    (ties: their first appearance), tests within a file in their collected order."""
    first: dict[str, int] = {}
    for i, n in enumerate(nodeids):
        first.setdefault(file_of(n), i)
    rank = {f: (-estimate(f, durations), pos) for f, pos in first.items()}
    return sorted(range(len(nodeids)), key=lambda i: (rank[file_of(nodeids[i])], i))


def estimate_wall(
    files: Sequence[tuple[str, float, int]], workers: int, pending_limit: int = 2
) -> tuple[float, list[list[str]]]:
    """`./dev/test`'s pytest wall time estimated from per-file (path, seconds, number of tests), in
    the order given (`longest_files_first`'s), on `workers` xdist workers with `--dist loadfile`:
    xdist gives each worker one file, then one more to any worker with at most `pending_limit` tests
    left (its `_reschedule` rule, checked at the start and after every test), so a worker on a
    long file of one or two tests already holds the next file. A file's tests are taken as equally
    long. Returns (seconds, the files each worker ran)."""
    queue = [(path, max(0.0, secs), max(1, n)) for path, secs, n in files]
    ran: list[list[str]] = [[] for _ in range(workers)]
    tests: list[list[float]] = [[] for _ in range(workers)]  # each worker's pending test durations
    clock = [0.0] * workers

    def take(w: int) -> None:
        path, secs, n = queue.pop(0)
        ran[w].append(path)
        tests[w].extend([secs / n] * n)

    for w in range(workers):
        if queue:
            take(w)
    for w in range(workers):
        if queue and len(tests[w]) <= pending_limit:
            take(w)
    while any(tests):
        # the worker whose current test ends first finishes it, then may take more work
        w = min((i for i in range(workers) if tests[i]), key=lambda i: clock[i] + tests[i][0])
        clock[w] += tests[w].pop(0)
        if queue and len(tests[w]) <= pending_limit:  # a worker is never idle while files are left
            take(w)
    return max(clock, default=0.0), ran


def durations_from_junit(path: str) -> dict[str, float]:
    """Seconds per test file from a pytest JUnit XML report (its testcase times, summed)."""
    out: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        cls = (case.get("classname") or "").split(".")
        # classname is the module path (tests.real.test_x) plus any class names
        parts: list[str] = []
        for p in cls:
            parts.append(p)
            if p.startswith("test_"):
                break
        f = "/".join(parts) + ".py"
        out[f] = out.get(f, 0.0) + float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(out.items())}


def counts_from_collection(text: str) -> dict[str, int]:
    """Tests per file from `pytest --collect-only -q`'s output (one node id a line)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if "::" in line and line.startswith("tests/"):
            out[file_of(line.strip())] = out.get(file_of(line.strip()), 0) + 1
    return out


def estimate_suite(counts: Mapping[str, int], durations: Mapping[str, float], workers: int) -> float:
    """`estimate_wall` over every collected file in `longest_files_first` order (recorded durations;
    an unrecorded file as `estimate`)."""
    ids = [f"{f}::t{i}" for f, n in counts.items() for i in range(n)]
    order: list[str] = []
    for i in longest_files_first(ids, durations):
        if file_of(ids[i]) not in order:
            order.append(file_of(ids[i]))
    return estimate_wall([(f, estimate(f, durations), counts[f]) for f in order], workers)[0]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--estimate":
        # python -m tests.schedule --estimate WORKERS <pytest --collect-only -q output>
        n = estimate_suite(counts_from_collection(Path(sys.argv[3]).read_text()), load(), int(sys.argv[2]))
        print(f"estimated pytest wall time with {sys.argv[2]} workers: {n:.0f} s ({n / 60:.1f} min)")
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit(
            "usage: python -m tests.schedule <junit.xml>  (writes tests/durations.json)\n"
            "       python -m tests.schedule --estimate WORKERS <collect-only.txt>"
        )
    DURATIONS.write_text(json.dumps(durations_from_junit(sys.argv[1]), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DURATIONS}")
