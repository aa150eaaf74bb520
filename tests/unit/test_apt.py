"""The stack's apt-get runs (lagpilot_dev.images.tools.ensure_apt_packages: the node's, the policy
agent's and the images' Debian packages). On a cold run they start side by side (the parts install in
parallel, the images build beside them), and `apt-get update` does not wait for another apt run's lists
lock (`DPkg::Lock::Timeout` covers dpkg's lock only). Seen here: `apt-get update -o
DPkg::Lock::Timeout=5` with its lists lock held exits 100 at once (0.1 s): "E: Could not get lock
/tmp/cold-apt/lists/lock. It is held by process 12690 (python3)"."""

from __future__ import annotations

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


def test_every_apt_run_of_the_stack_takes_the_one_apt_lock() -> None:
    """ensure_apt_packages (node, policy agent, images) and PostgreSQL's install: both under APT_LOCK,
    so the stack's own apt runs never meet each other's locks."""
    import inspect

    from lagpilot_dev import postgres

    for fn in (tools.ensure_apt_packages, postgres.PostgresPart.install):
        src = inspect.getsource(fn)
        assert "file_lock(APT_LOCK)" in src and "run_apt(" in src, fn
