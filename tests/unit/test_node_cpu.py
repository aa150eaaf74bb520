"""The node pods' CPU weight (docs/node.md "CPU"): the node part gives the kubelet's kubepods cgroup
DEFAULT_PODS_CPU_SHARES, or LAGPILOT_NODE_CPU_SHARES (`kubelet`: the kubelet's own value stays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lagpilot_dev.node import (
    CPU_SHARES_ENV,
    DEFAULT_PODS_CPU_SHARES,
    pods_cpu_shares,
    pods_cpu_shares_setting,
    read_pods_cpu_shares,
)


def _kubepods(tmp_path: Path) -> Path:
    shares = tmp_path / "cpu.shares"
    shares.write_text("2048\n")  # what the kubelet writes for 2 allocatable cores
    return shares


def test_the_default_weighs_eight_host_sessions() -> None:
    # a host session (an autogroup) weighs 1024; the kubelet's 2048 is two of them
    assert DEFAULT_PODS_CPU_SHARES == 8 * 1024
    assert pods_cpu_shares_setting({}) == DEFAULT_PODS_CPU_SHARES
    assert pods_cpu_shares_setting({CPU_SHARES_ENV: "  "}) == DEFAULT_PODS_CPU_SHARES


def test_unset_writes_the_default_over_the_kubelets_weight(tmp_path: Path) -> None:
    shares = _kubepods(tmp_path)
    assert pods_cpu_shares({}, shares) == DEFAULT_PODS_CPU_SHARES
    assert shares.read_text() == str(DEFAULT_PODS_CPU_SHARES)


def test_kubelet_leaves_the_kubelets_weight(tmp_path: Path) -> None:
    shares = _kubepods(tmp_path)
    assert pods_cpu_shares_setting({CPU_SHARES_ENV: "kubelet"}) is None
    assert pods_cpu_shares({CPU_SHARES_ENV: "kubelet"}, shares) == 2048 and shares.read_text() == "2048\n"


def test_set_writes_the_weight(tmp_path: Path) -> None:
    shares = _kubepods(tmp_path)
    assert pods_cpu_shares({CPU_SHARES_ENV: "16384"}, shares) == 16384
    assert shares.read_text() == "16384"


@pytest.mark.parametrize("bad", ["1", "0", "-5", "lots", "262145", "Kubelet"])
def test_a_value_that_is_no_weight_is_refused_naming_the_variable(tmp_path: Path, bad: str) -> None:
    shares = _kubepods(tmp_path)
    with pytest.raises(ValueError, match=CPU_SHARES_ENV):
        pods_cpu_shares({CPU_SHARES_ENV: bad}, shares)
    assert shares.read_text() == "2048\n"


def test_reading_the_weight_writes_nothing(tmp_path: Path) -> None:
    # NodePart.info() reports the weight in force: a status call must not change it
    shares = _kubepods(tmp_path)
    assert read_pods_cpu_shares(shares) == 2048 and shares.read_text() == "2048\n"


def test_no_cgroup_no_weight(tmp_path: Path) -> None:
    assert pods_cpu_shares({CPU_SHARES_ENV: "4096"}, tmp_path / "absent") is None
    assert pods_cpu_shares({}, tmp_path / "absent") is None
    assert not (tmp_path / "absent").exists()
