"""The node pods' CPU weight (docs/node.md "CPU"): the kubelet's kubepods cpu.shares, or the
value of LAGPILOT_NODE_CPU_SHARES."""
from __future__ import annotations

from pathlib import Path

import pytest

from lagpilot_dev.node import CPU_SHARES_ENV, pods_cpu_shares


def test_unset_leaves_the_kubelets_weight(tmp_path: Path) -> None:
    shares = tmp_path / "cpu.shares"
    shares.write_text("2048\n")
    assert pods_cpu_shares({}, shares) == 2048 and shares.read_text() == "2048\n"


def test_set_writes_the_weight(tmp_path: Path) -> None:
    shares = tmp_path / "cpu.shares"
    shares.write_text("2048\n")
    assert pods_cpu_shares({CPU_SHARES_ENV: "16384"}, shares) == 16384


@pytest.mark.parametrize("bad", ["1", "0", "-5", "lots", "262145"])
def test_a_value_that_is_no_weight_is_refused_naming_the_variable(tmp_path: Path, bad: str) -> None:
    shares = tmp_path / "cpu.shares"
    shares.write_text("2048\n")
    with pytest.raises(ValueError, match=CPU_SHARES_ENV):
        pods_cpu_shares({CPU_SHARES_ENV: bad}, shares)
    assert shares.read_text() == "2048\n"


def test_no_cgroup_no_weight(tmp_path: Path) -> None:
    assert pods_cpu_shares({CPU_SHARES_ENV: "4096"}, tmp_path / "absent") is None
