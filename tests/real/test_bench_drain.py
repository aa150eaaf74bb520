"""bench/drain.py --quick runs end to end on the real parts (Kafka, PostgreSQL, Spark in a warm drain
runtime, the live group's mailbox hand-off): no offset lost or delivered twice, and the JSON line
has its shape. Its `--executors --k8s` mode runs once, short (CI's version of the campaign in
docs/drain.md "Executor pods on the k8s path"): one round, one executor pod on the real node beside
the local variant.
No timing is asserted (the machine is shared; the figures are the bench's business)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def run_bench(*args: str) -> dict[str, Any]:
    """`bench/drain.py ARGS --json` on the shared stack; its exit code 0 and its last line's JSON."""
    env = dict(os.environ, LAGPILOT_KEEP_STACK="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "drain.py"), *args, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_bench_drain_quick_is_exact_and_reports_its_figures(
    kafka_bootstrap: str, postgres_dsn: str, spark_jars: list[str]
) -> None:
    result = run_bench("--quick")
    # a partition whose [ack, split) holds fewer than splitFactor batches gets fewer pieces (the live
    # group's progress before the hand-off decides that), so only the bounds are fixed
    assert result["quick"] is True and 1 <= result["tasks"] <= 12
    assert result["drained_records"] > 0  # the hand-off really gave the drain a range
    assert result["lost"] == 0
    assert result["duplicated"] == 0
    for key in (
        "speedup",
        "start_up_s",
        "launch_to_first_drained_s",
        "end_to_end_speedup",
        "group_records_per_s",
        "drain_records_per_s",
    ):
        assert isinstance(result[key], (int, float)), key
    assert (
        set(result["handoff_pause_s"]) == {"max", "p95", "samples"}
        and result["handoff_pause_s"]["samples"] == 3
    )
    # the default drain runs in a warm runtime started before the run (its JVM and session were up
    # before the plan: their milestones are not part of this start-up); its own costs are reported
    assert result["runtime"] == "warm"
    assert result["runtime_warm_up_s"] > 0 and result["runtime_idle_pss_mb"] > 0
    assert {"relations_planned", "task_started", "first_record", "first_batch_handled"} <= set(
        result["startup_breakdown_s"]
    )
    assert not {"jvm_up", "session_ready"} & set(result["startup_breakdown_s"])
    assert {"spark_jvm", "python_workers", "drain_driver", "live_group"} <= set(result["cpu_s_during_drain"])


def test_bench_drain_executors_on_k8s_short_round_is_exact_and_reports_its_ratios(
    kafka_bootstrap: str, postgres_dsn: str, spark_jars: list[str], node: Any
) -> None:
    """`bench/drain.py --executors 1 --k8s --rounds 1`: the same drain alone, local and on Spark's
    Kubernetes backend with one executor pod (4 slots) on the real node; exact in both, the pod seen
    by the API, no RBAC refusal in the driver's log, the ratio against the local base reported."""
    result = run_bench(
        *("--executors", "1", "--k8s", "--rounds", "1", "--records", "12000", "--max-tasks", "4")
    )
    assert result["base"] == "local" and set(result["variants"]) == {"local", "k8s-1x4"}, result[
        "variants"
    ].keys()
    assert result["records"] == 12000
    assert result["lost"] == 0 and result["duplicated"] == 0
    k8s = result["variants"]["k8s-1x4"]
    (row,) = k8s["rounds"]
    assert row["executor_pods_seen"] == 1, row  # the drain really ran on an executor pod
    assert row["driver_log_forbidden"] == 0, row  # as the chart's drain ServiceAccount, nothing refused
    ratio = result["median_ratio_vs_base"]["records_per_s"]
    assert isinstance(ratio.get("k8s-1x4"), (int, float)) and ratio["k8s-1x4"] > 0, ratio
    rates = {n: v["median_records_per_s"] for n, v in result["variants"].items()}
    print(f"bench drain --executors 1 --k8s, one round: records/s {rates}, k8s/local {ratio}")
