"""bench/consumer.py --quick runs end to end on the real broker and prints its JSON line with the
per-round ratios and their median. No timing is asserted (shared machine)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_bench_consumer_quick_reports_the_median_of_per_round_ratios(kafka_bootstrap: str) -> None:
    env = dict(os.environ, LAGPILOT_KEEP_STACK="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "consumer.py"), "--quick", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rounds = result["noop_ratio_rounds"]
    assert result["quick"] is True and len(rounds) == result["rounds"] == 3
    assert result["noop_ratio"] == pytest.approx(statistics.median(rounds), abs=0.002)
    assert len(result["raw_runs_records_per_s"]) == len(result["lagpilot_runs_records_per_s"]) == 3
    assert (
        sum(1 for ln in proc.stdout.splitlines() if ln.startswith("round ")) == 3
    )  # each round's ratio printed
    assert result["batch_speedup"] > 0
