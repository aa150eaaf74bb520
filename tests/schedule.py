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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.schedule <junit.xml>  (writes tests/durations.json)")
    DURATIONS.write_text(json.dumps(durations_from_junit(sys.argv[1]), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DURATIONS}")
