"""bench/chaos/stack.py: the campaign's CRs run the code of the checkout that started the bench."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.chaos.procs import REPO
from bench.chaos.stack import CampaignBase


@pytest.mark.parametrize("which", ["eos", "alo"])
def test_pods_import_the_checkouts_own_runtime(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A git worktree shares /work/main's venv, whose editable install points at /work/main: with the
    # repo root alone on PYTHONPATH a pod would import lagpilot_runtime from that other checkout.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    args = argparse.Namespace(
        fault_timeout=1.0,
        warm_runtime=False,
        quick=False,
        eos_handler="bench.chaos.handler:process",
        cost_ms=500,
        alo_cost_ms=50,
        sla=20,
    )
    c = CampaignBase(args)
    c.bootstrap = c.pods_bootstrap = "127.0.0.1:9092"  # set by setup() from the private stack
    env = {e["name"]: e.get("value") for e in c.spec(which)["template"]["env"]}
    path = env["PYTHONPATH"].split(":")
    assert path[:3] == [str(REPO / d) for d in ("operator/src", "consumer_image/src", "dev/src")]
    assert str(REPO) in path
