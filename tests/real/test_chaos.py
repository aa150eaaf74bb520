"""The CI version of the fault campaign (bench/chaos.py, issue 12 item 6): `bench/chaos.py --quick --json`
as a subprocess, on its own private stack (its Kafka and PostgreSQL are restarted: never the shared
one). One round of: a consumer SIGKILLed at a random moment, a consumer killed by the sink's crash
hook right after a batch's transaction and before its Kafka commit (the worst moment for
exactly-once), the operator SIGKILLed, a second operator instance that must stand by and take over
when the leader is SIGKILLed (issue 23 M3), PostgreSQL and the Kafka broker SIGKILLed and restarted;
each confirmed fired (pid gone / port closed) and recovered; then the delivery ledgers (tables
without any key: one row per delivery) compared with the topic's end offsets.

Its pods (the CRs' consumers) run on the real node (the default state's node, with that state's
control plane; the bench's own state keeps Kafka and PostgreSQL): the consumer kill is a SIGKILL to
the container's init process, the crash hook the eos handler's (bench/chaos/handler.py). The
operator stays a host process. With LAGPILOT_NODE=0 it skips.

The assertions can fail: a fault that did not fire is reported as not fired (`not_fired` > 0), a
recovery that timed out is not counted in `recovered`; the exactly-once table is checked to have no
index (a key would hide duplicates), and with the negative-control handler
(`--eos-handler bench.chaos.handler:process_at_least_once`, docs/chaos.md) the same run reports
duplicated = 100 (one batch replayed after the crash hook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lagpilot_dev.operator_process import checkout_pythonpath

pytestmark = [pytest.mark.real]

REPO = Path(__file__).resolve().parents[2]


def test_quick_fault_campaign_loses_and_duplicates_nothing(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
    # this checkout's sources first (lagpilot_dev builds the node's test image from its own checkout:
    # with the repo root alone a worktree's bench imports the venv's editable install, another tree)
    env["PYTHONPATH"] = checkout_pythonpath(REPO)
    env["TMPDIR"] = str(tmp_path)
    if os.environ.get("LAGPILOT_CACHE"):
        env["LAGPILOT_CACHE"] = os.environ["LAGPILOT_CACHE"]
    state = os.environ.get("LAGPILOT_CHAOS_STATE")  # default: <cache>/state/chaos (bench/chaos.py)
    # the CRs' pods run on the real node (the default state's; docs/chaos.md "Pods on the real
    # node"): this session's node (started if down; LAGPILOT_NODE=0 skips) and its control plane
    request.getfixturevalue("node")
    argv = [sys.executable, str(REPO / "bench" / "chaos.py"), "--quick", "--json"]
    argv += ["--node-state", str(request.getfixturevalue("stack").state_dir)]
    if state:
        argv += ["--state-dir", state]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=800)
    tail = f"\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, tail
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(proc.stdout)
    detail = json.loads(Path(result["workdir"], "result.json").read_text())["faults_detail"]
    # every kind of the quick round fired, and each fired fault carries its confirmation
    assert result["pods"] == "node" and result["not_applicable"] == [], result
    assert result["not_fired"] == 0, [f for f in detail if not f["fired"]]
    assert result["faults"] == len(detail) == 6 and result["kinds"] == 6, result["per_kind"]
    for f in detail:
        assert f["fired"] and f["at"] is not None and f["evidence"], f
        assert f["evidence"].get("pid") or f["evidence"].get("port"), f
    # the consumers' faults acted on containers: the hook's pod ended with 137 and ran again
    crashed = next(f for f in detail if f["kind"] == "consumer_kill_after_write")
    assert crashed["evidence"]["exit_code"] == 137 and crashed["evidence"]["restarts"] >= 1, crashed
    standby = next(f for f in detail if f["kind"] == "second_operator")
    assert standby["evidence"]["standby_reconciled_before_kill"] == 0, standby  # it stood by
    assert standby["evidence"]["took_over_s"] is not None, standby  # and took over from the dead leader
    assert result["recovered"] == result["faults"], [f for f in detail if not f["recovered"]]
    assert result["caught_up"] is True and result["eos_table_keyless"] is True, result
    assert result["produced"] > 0 and result["produced"] == result["produced_acked"], result
    assert result["lost"] == 0, result
    assert result["duplicated"] == 0, result
    assert result["eos"]["delivered"] == result["eos"]["produced"] == result["produced"], result["eos"]
    assert result["problems"] == [] and result["repairs"] == [], result
