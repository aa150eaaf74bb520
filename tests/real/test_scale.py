"""bench/scale.py --quick runs end to end on the real parts (one operator, 20 CRs over 4 topics on
the local Kafka and kube-apiserver): every CR reaches Ready, the JSON line has its shape, and the
shared watermark requests per poll interval do not scale with the CRs (one batch of 3 per cluster
cycle, counted by the operator's own `lagpilot_kafka_requests_total`). No timing is asserted."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_bench_scale_quick_reaches_ready_and_reports_its_figures(kafka_bootstrap: str, kube: object) -> None:
    env = dict(os.environ, LAGPILOT_KEEP_STACK="1")
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--quick", "--json"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # the bench raises unless every CR reached Ready=True; it reports how many it waited for
    assert result["crs"] == 20 and result["topics"] == 4 and result["clusters"] == 1
    for key in ("ready_seconds", "cycle_p50_s", "cycle_p99_s", "admin_requests_per_cycle",
                "watermark_requests_per_cycle", "offset_fetch_per_cycle", "api_requests_per_cycle",
                "operator_rss_mb", "load_before", "load_after", "window_s"):
        assert isinstance(result[key], (int, float)), key
    assert result["observe_errors"] == {}
    kinds = result["kafka_requests_by_kind"]
    # the cycles really observed Kafka: each CR cycle fetches its group's offsets once (counted
    # when sent; cycles in flight at the window's edges make the two counts differ a little)
    assert result["cr_cycles"] > 0 and kinds["offset_fetch"] > 0
    # 20 CRs' cycles shared the watermark batches: far fewer DescribeTopics than OffsetFetches (the
    # cycles are aligned to the poll interval; a batch is 1 DescribeTopics + 2 ListOffsets)
    assert kinds["list_offsets"] == 2 * kinds["describe_topics"]
    assert kinds["describe_topics"] * 4 <= kinds["offset_fetch"]
