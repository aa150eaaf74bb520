"""The demo (README command one), end to end on the real parts, with the fast profile.

Runs `lagpilot demo --profile fast` as a user would (a subprocess: its own stack lease, images, helm
release, cleanup) and checks what it wrote: the proof (produced = distinct records in PostgreSQL >
0, every partition gapless) and, from the delivery ledger — one row per delivery, no key, so a
redelivery is a second row — nothing lost and nothing delivered twice; a scale-up by the operator,
a drain that really processed records through the same handler, the live group never at 0
replicas during a non-quiescing hand-off, the trace it replayed and the simulator's view of it,
the plot, that it cleaned up after itself, and — the demo's default path since issue 24 step 5 —
that every pod it saw ran as a container on the real node, the operator installed by helm.

One demo in the suite (decided 2026-11-27): the real node, the demo's only path since the pod runner
retired (issue 24 step 6). With the node off (LAGPILOT_NODE=0) it skips, saying so (under CI=true
that is a failure instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.node import node_gate

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.node
@pytest.mark.images
@pytest.mark.timeout(3600)
def test_demo_fast_profile_end_to_end(tmp_path: Path) -> None:
    """`lagpilot demo --profile fast`: the proof and the story, and on the node (the default) every
    pod the run saw in its two namespaces ran as a container there (the runtime's listing), the
    operator among them, installed by helm."""
    verdict, why = node_gate(os.environ)
    if verdict == "fail":
        pytest.fail(why, pytrace=False)
    if verdict == "skip":  # the node is off on this machine: the demo has nowhere to run its pods
        pytest.skip(why)
    summary, proc = _run_and_check(tmp_path, [])
    node = summary["node"]
    assert node["every_pod_a_container"], node
    assert node["pods_without_containers"] == [] and node["pods_on_other_nodes"] == [], node
    containers = {(c["namespace"].endswith("-operator"), c["container"]) for c in node["containers"]}
    assert {(True, "operator"), (False, "consumer"), (False, "drain")} <= containers, containers
    assert "CONTAINER_RUNNING" in proc.stdout and "ps -a" in proc.stdout  # the runtime's listing, printed
    assert "$ helm install" in proc.stdout
    assert "pod runner" not in proc.stdout.split("[1/7]")[-1].split("[5/7]")[0]  # stages 1-4: no stand-in
    print(
        f"demo on the node: {node['pods_started']} pods, {len(node['containers'])} containers; latency "
        f"{summary['latency']}; drains {[(d.get('pause_seconds'), d.get('start_up_seconds')) for d in summary['drains']]}"
    )


def _run_and_check(tmp_path: Path, extra: list[str]) -> tuple[dict, subprocess.CompletedProcess[str]]:
    out = tmp_path / "demo"
    ns = f"lagpilot-demo-test-{uuid.uuid4().hex[:6]}"
    exe = Path(sys.executable).parent / "lagpilot"
    argv = [str(exe), "demo", "--profile", "fast", "--plain", "--out", str(out), "--namespace", ns, *extra]
    started = time.monotonic()
    # generous: a cold cache installs the parts first (the Kubernetes build alone takes 20-30 min)
    proc = subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=2300,
        check=False,
        env=dict(os.environ),
    )
    wall = time.monotonic() - started
    tail = proc.stdout[-6000:] + "\n--- stderr ---\n" + proc.stderr[-3000:]
    assert proc.returncode == 0, f"demo exited {proc.returncode} after {wall:.0f}s:\n{tail}"

    summary = json.loads((out / "summary.json").read_text())
    # the proof
    assert summary["produced"] > 0, tail
    assert summary["produced"] == summary["distinct_in_sink"], tail
    assert summary["duplicates"] == 0 and summary["missing"] == 0 and summary["gapless"], tail
    assert summary["ok"] and summary["failures"] == []
    # exactly once, counted in the ledger (no key: the sink's primary key cannot hide a redelivery)
    ledger = summary["ledger"]
    assert ledger is not None, tail
    assert summary["lost"] == 0 and ledger["lost"] == 0, ledger
    assert summary["delivered_more_than_once"] == 0 and ledger["duplicated"] == 0, ledger
    assert ledger["outside"] == 0 and ledger["delivered"] == summary["produced"], ledger
    assert "records processed more than once (ledger)" in proc.stdout
    for part in summary["per_partition"].values():
        assert part["distinct"] == part["end"] > 0
    # the story: the operator scaled up, and a drain processed part of the backlog with the same handler
    assert summary["scale_ups"] >= 1 and summary["max_replicas"] > 1, summary["scale_events"]
    assert len(summary["drains"]) >= 1, tail
    assert summary["processed_by"].get("drain", 0) > 0, summary["processed_by"]
    assert summary["processed_by"].get("consumer", 0) > 0, summary["processed_by"]
    assert summary["peak_lag"] > 0 and summary["catch_up_seconds"] is not None
    for d in summary["drains"]:
        assert d["ranges"] and all(r["start"] is not None and r["split"] > r["start"] for r in d["ranges"]), (
            d
        )  # the summary names the end "split"
        # the consumers hand off without stopping: the group keeps replicas through the hand-off
        # (only the Quiesce fallback, for a group with no live consumer, may empty it)
        if (
            d.get("hand_off_path")
            and d["hand_off_path"] != "Quiesce"
            and d.get("min_replicas_during_hand_off") is not None
        ):
            assert d["min_replicas_during_hand_off"] >= 1, d
    # the trace it replayed (one row a second) adds up to what it produced, and the calibrated
    # simulator's baselines and prediction are in the summary
    trace = (out / "trace.csv").read_text().splitlines()
    assert trace[0] == "t_s,produce_msgs_per_s" and len(trace) > 60
    assert sum(float(line.split(",")[1]) for line in trace[1:]) == summary["produced"]
    assert summary["sim_params"]["capacity"] and summary["sim_params"]["capacity"] > 0, summary["sim_params"]
    assert set(summary["baselines"]) == {"static", "keda"}, summary.get("baselines")
    assert summary["baselines"]["static"]["within_sla_fraction"] <= 0.8, summary["baselines"]
    assert set(summary["sim_to_real"]["comparison"]) == {
        "within_sla_fraction",
        "p99_latency_s",
        "replica_minutes",
        "drain_task_minutes",
    }
    # the outputs it printed
    png = Path(summary["paths"]["plot"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in proc.stdout and str(out / "summary.json") in proc.stdout
    assert "PROOF OK" in proc.stdout
    for stage in range(1, 8):
        assert f"[{stage}/7]" in proc.stdout
    assert "waiting for:" in proc.stdout
    keys = (
        "produced",
        "peak_lag",
        "catch_up_seconds",
        "replica_minutes",
        "drain_task_minutes",
        "latency",
        "max_pause_seconds",
        "baselines",
        "sim_to_real",
        "operator_restarts",
    )
    print(
        f"demo (fast profile) wall time {wall:.0f}s; summary {json.dumps({k: summary.get(k) for k in keys})}"
    )

    # it cleaned up: its namespaces are gone or going, its operator is not running
    kubectl = (
        Path(os.environ.get("LAGPILOT_CACHE") or Path.home() / ".cache" / "lagpilot")
        / "kube"
        / "bin"
        / "kubectl"
    )
    from lagpilot_dev.stack import Stack

    info = Stack().status(["kube"])
    if info.kubeconfig:  # the stack may have been stopped with the demo's lease: nothing is left then
        for gone in (ns, f"{ns}-operator"):  # on the node, also the helm release's namespace
            got = subprocess.run(
                [
                    str(kubectl),
                    f"--kubeconfig={info.kubeconfig}",
                    "get",
                    "namespace",
                    gone,
                    "-o",
                    "jsonpath={.status.phase}",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert got.returncode != 0 or got.stdout.strip() == "Terminating", (gone, got.stdout)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert not [line for line in ps.stdout.splitlines() if f"operator --namespace {ns}" in line]
    return summary, proc
