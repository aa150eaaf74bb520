"""lagpilot_dev.paths: dirs, persisted ports, the detached Process helper, wait_for."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from lagpilot_dev import paths
from lagpilot_dev.paths import Ports, Process, port_is_free, wait_for, wait_started


def test_cache_and_state_dirs_follow_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAGPILOT_CACHE", str(tmp_path / "c"))
    monkeypatch.delenv("LAGPILOT_STATE", raising=False)
    assert paths.cache_dir() == tmp_path / "c"
    assert paths.state_dir() == tmp_path / "c" / "state" / "default"
    monkeypatch.setenv("LAGPILOT_STATE", str(tmp_path / "s"))
    assert paths.state_dir() == tmp_path / "s"


def test_cache_dir_default_is_home_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAGPILOT_CACHE", raising=False)
    assert paths.cache_dir() == Path.home() / ".cache" / "lagpilot"


def test_ports_are_persisted_and_distinct(tmp_path: Path) -> None:
    a = Ports(tmp_path).ensure("a")
    b = Ports(tmp_path).ensure("b")
    assert a != b
    assert Ports(tmp_path).ensure("a") == a  # a new object (a restarted process) reads the same port
    assert Ports(tmp_path).get("b") == b
    assert Ports(tmp_path).get("c") is None


def test_port_taken_by_a_stranger_is_replaced_when_it_must_be_free(tmp_path: Path) -> None:
    ports = Ports(tmp_path)
    p = ports.ensure("x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))
        s.listen()
        assert not port_is_free(p)
        assert ports.ensure("x") == p  # not required free: unchanged
        q = ports.ensure("x", must_be_free=True, wait_free=0.3)
    assert q != p
    assert ports.get("x") == q


def _sleeper(tmp_path: Path, ignore_term: bool = False) -> Process:
    code = "import signal,time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('up', flush=True)\ntime.sleep(600)\n"
    return Process(
        name="sleeper",
        argv=[sys.executable, "-c", code, f"lagpilot-test-{tmp_path.name}"],
        log_file=tmp_path / "s.log",
        pid_file=tmp_path / "s.pid",
        marker=f"lagpilot-test-{tmp_path.name}",
    )


def test_process_start_stop(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path)
    pid = proc.start()
    try:
        assert proc.is_running()
        assert proc.start() == pid  # idempotent
        wait_for(lambda: "up" in proc.log_file.read_text(), "sleeper output", timeout=30)
    finally:
        proc.stop(grace=10)
    assert not proc.is_running()
    assert not proc.pid_file.exists()


def test_process_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path, ignore_term=True)
    proc.start()
    wait_for(lambda: "up" in proc.log_file.read_text(), "sleeper output", timeout=30)
    proc.stop(grace=0.5)
    assert not proc.is_running()


def test_process_kill_leaves_pid_file_and_restart_works(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path)
    first = proc.start()
    proc.kill()
    assert not proc.is_running()
    assert proc.pid_file.exists()  # as after a crash
    second = proc.start()
    try:
        assert second != first
        assert proc.is_running()
    finally:
        proc.stop(grace=5)


def test_recycled_pid_without_marker_is_not_ours(tmp_path: Path) -> None:
    proc = Process(
        name="x",
        argv=["true"],
        log_file=tmp_path / "x.log",
        pid_file=tmp_path / "x.pid",
        marker="lagpilot-no-such-marker",
    )
    proc.pid_file.write_text(f"{__import__('os').getpid()}\n")  # a live pid, but not our process
    assert not proc.is_running()


def test_wait_for_times_out_with_what() -> None:
    with pytest.raises(TimeoutError, match="the moon"):
        wait_for(lambda: False, "the moon", timeout=0.3, interval=0.05)


def test_wait_for_fails_fast_when_process_died() -> None:
    # a 1-day timeout: the test only finishes because the dead process is noticed
    with pytest.raises(RuntimeError, match="exited"):
        wait_for(lambda: False, "a dead thing", timeout=86400, interval=0.05, alive=lambda: False)


def test_wait_for_treats_exceptions_as_not_yet() -> None:
    calls = iter([ValueError("no"), True])

    def check() -> bool:
        v = next(calls)
        if isinstance(v, Exception):
            raise v
        return v

    wait_for(check, "flaky probe", timeout=10, interval=0.01)


def test_wait_started_gives_up_when_the_part_exits_and_shows_its_log(tmp_path: Path) -> None:
    # one helper for every part a dev stack starts (kube.py, node.py): a part that dies while we wait
    # fails at once (a 1-day timeout), and the error carries the tail of its log
    proc = Process(
        name="dies",
        argv=[sys.executable, "-c", "print('bad flag --x', flush=True)", f"lagpilot-test-{tmp_path.name}"],
        log_file=tmp_path / "d.log",
        pid_file=tmp_path / "d.pid",
        marker=f"lagpilot-test-{tmp_path.name}",
    )
    proc.start()
    with pytest.raises(
        RuntimeError, match=r"(?s)gave up waiting for dies /healthz: the process exited.*bad flag --x"
    ):
        wait_started(proc, lambda: False, "dies /healthz", timeout=86400, interval=0.05)


def test_wait_started_returns_once_the_check_holds(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path)
    proc.start()
    try:
        wait_started(
            proc, lambda: "up" in proc.log_file.read_text(), "sleeper output", timeout=30, interval=0.05
        )
    finally:
        proc.stop()
