"""The stack's apt-get runs (lagpilot_dev.images.tools.ensure_apt_packages: the node's, the policy
agent's and the images' Debian packages). On a cold run they start side by side (the parts install in
parallel, the images build beside them), and `apt-get update` does not wait for another apt run's lists
lock (`DPkg::Lock::Timeout` covers dpkg's lock only). Seen here: `apt-get update -o
DPkg::Lock::Timeout=5` with its lists lock held exits 100 at once (0.1 s): "E: Could not get lock
/tmp/cold-apt/lists/lock. It is held by process 12690 (python3)"."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.images import tools

BUSY = subprocess.CompletedProcess(
    ["apt-get", "update"],
    100,
    "Reading package lists...\n",
    "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)\n"
    "E: Unable to lock directory /var/lib/apt/lists/\n",
)


@pytest.fixture
def apt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """apt-get whose first `update` finds the lists lock held by another apt run."""
    monkeypatch.setattr(tools, "APT_LOCK", tmp_path / "apt.lock")
    monkeypatch.setattr(tools, "dpkg_installed", lambda p: False)
    monkeypatch.setattr(tools.os, "geteuid", lambda: 0)
    monkeypatch.setattr(tools.time, "sleep", lambda s: None)
    calls: list[list[str]] = []
    busy = [True]

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[:2] == ["apt-get", "update"] and busy[0]:
            busy[0] = False
            if kw.get("check", True):
                raise RuntimeError(f"command failed (exit 100): {' '.join(argv)}\n{BUSY.stderr}")
            return BUSY
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(tools, "run_cmd", run)
    return calls


def test_apt_get_update_is_retried_while_another_apt_run_holds_the_lists_lock(apt: list[list[str]]) -> None:
    assert tools.ensure_apt_packages(("runc",)) == ["runc"]
    assert [c[:2] for c in apt] == [["apt-get", "update"], ["apt-get", "update"], ["apt-get", "install"]]


def test_another_apt_failure_is_not_retried_and_says_what_apt_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tools, "APT_LOCK", tmp_path / "apt.lock")
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 100, "", "E: Unable to locate package nosuch\n")

    monkeypatch.setattr(tools, "run_cmd", run)
    with pytest.raises(RuntimeError, match="Unable to locate package nosuch"):
        tools.run_apt(["apt-get", "install", "nosuch"], env={})
    assert len(calls) == 1


def _lock_is_held(path: Path) -> bool:
    """Whether another open file holds the flock on `path` (flock locks belong to the open file: one
    of this process conflicts with another of this process)."""
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


@pytest.fixture
def locked_apt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[list[str], bool]]:
    """apt-get runs recorded with whether APT_LOCK was held while each ran."""
    lock = tmp_path / "apt.lock"
    monkeypatch.setattr(tools, "APT_LOCK", lock)
    runs: list[tuple[list[str], bool]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        runs.append((list(argv), _lock_is_held(lock)))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(tools, "run_cmd", run)
    return runs


def test_run_apt_commands_runs_each_in_order_under_the_one_apt_lock(
    locked_apt: list[tuple[list[str], bool]],
) -> None:
    tools.run_apt_commands([["apt-get", "update"], ["apt-get", "install", "x"]], env={})
    assert locked_apt == [(["apt-get", "update"], True), (["apt-get", "install", "x"], True)]
    assert not _lock_is_held(tools.APT_LOCK)  # released after


@pytest.mark.parametrize("who", ["ensure_apt_packages", "postgres"])
def test_every_apt_run_of_the_stack_takes_the_one_apt_lock(
    who: str, locked_apt: list[tuple[list[str], bool]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ensure_apt_packages (node, policy agent, images) and PostgreSQL's install both run apt-get
    under APT_LOCK (`run_apt_commands`), so the stack's own apt runs never meet each other's locks."""
    from lagpilot_dev import postgres

    monkeypatch.setattr(tools.os, "geteuid", lambda: 0)
    if who == "ensure_apt_packages":
        monkeypatch.setattr(tools, "dpkg_installed", lambda p: False)
        assert tools.ensure_apt_packages(("runc",)) == ["runc"]
    else:
        bindir = tmp_path / "usr/lib/postgresql/17/bin"
        monkeypatch.setattr(postgres, "CREATECLUSTER_CONF", tmp_path / "createcluster.conf")
        monkeypatch.setattr(postgres, "find_bindir", lambda: bindir if locked_apt else None)
        postgres.PostgresPart(tmp_path / "cache", tmp_path / "state").install()
        assert [argv for argv, _ in locked_apt] == postgres.apt_commands()
    assert [argv[:2] for argv, _ in locked_apt] == [["apt-get", "update"], ["apt-get", "install"]]
    assert all(held for _, held in locked_apt)
    assert all(tools.APT_LOCK_WAIT[1] in " ".join(argv) for argv, _ in locked_apt)
