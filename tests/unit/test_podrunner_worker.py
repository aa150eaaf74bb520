"""One pod's lifecycle in the pod runner, driven against a fake API (local processes, no cluster):
restart policy, crash back-off, graceful deletion and SIGKILL after the grace period."""

from __future__ import annotations

import copy
import os
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.podrunner import DEFAULT_ENTRYPOINTS, PodWorker


class FakeRunner:
    """The slice of PodRunner a PodWorker uses, recording what it would send to the apiserver."""

    def __init__(self, workdir: Path, secrets: dict[str, dict[str, str]] | None = None) -> None:
        self.workdir = workdir
        self.stopping = threading.Event()
        self.stop_grace = 2.0
        self.node_name = "n1"
        self.venv_bin = Path(sys.executable).parent
        self.python = sys.executable
        self.entrypoints = DEFAULT_ENTRYPOINTS
        self.backoff_initial = 0.05
        self.backoff_max = 0.2
        self.secrets = secrets or {}
        self.statuses: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def base_env(self, pod_name: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOSTNAME": pod_name,
            "PYTHONUNBUFFERED": "1",
        }

    def get_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.secrets.get(name)

    def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return None

    def test_env(self, namespace: str) -> dict[str, str]:
        return {}

    def pod_credentials(self, pod: dict[str, Any], pod_dir: Path) -> Path:
        path = pod_dir / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return path

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        with self.lock:
            self.statuses.append(copy.deepcopy(status))
        return True

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.deleted.append((namespace, name, uid))

    def last(self) -> dict[str, Any]:
        with self.lock:
            return self.statuses[-1] if self.statuses else {}


def _pod(
    command: list[str], restart: str = "Always", env: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "x", "command": command, "env": env or []}],
        },
    }


def _wait(check: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _cs(runner: FakeRunner) -> dict[str, Any]:
    return (runner.last().get("containerStatuses") or [{}])[0]


@pytest.fixture
def runner(tmp_path: Path) -> FakeRunner:
    return FakeRunner(tmp_path)


def _start(runner: FakeRunner, pod: dict[str, Any]) -> PodWorker:
    w = PodWorker(runner, pod)  # type: ignore[arg-type]
    w.update(pod)
    w.start()
    return w


def test_crashing_container_restarts_with_backoff_and_restart_count(runner: FakeRunner) -> None:
    w = _start(runner, _pod([sys.executable, "-c", "import sys; sys.exit(3)"]))
    try:
        _wait(lambda: _cs(runner).get("restartCount", 0) >= 2, "two restarts")
        cs = _cs(runner)
        assert cs["lastState"]["terminated"]["exitCode"] == 3
        assert runner.last()["phase"] == "Running"
        assert any(
            "waiting" in (s["containerStatuses"][0]["state"])
            and s["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            for s in runner.statuses
        )
    finally:
        runner.stopping.set()
        w.finished.wait(10)


@pytest.mark.parametrize(
    ("restart", "code", "phase"),
    [("Never", 0, "Succeeded"), ("Never", 4, "Failed"), ("OnFailure", 0, "Succeeded")],
    ids=["never-ok", "never-fail", "onfailure-ok"],
)
def test_terminal_phase(runner: FakeRunner, restart: str, code: int, phase: str) -> None:
    w = _start(runner, _pod([sys.executable, "-c", f"import sys; sys.exit({code})"], restart=restart))
    try:
        _wait(lambda: runner.last().get("phase") == phase, phase)
        cs = _cs(runner)
        assert (
            cs["state"]["terminated"]["exitCode"] == code and cs["restartCount"] == 0 and cs["ready"] is False
        )
        assert runner.statuses[0]["phase"] == "Pending"
    finally:
        runner.stopping.set()
        w.finished.wait(10)


TERM_SCRIPT = textwrap.dedent("""
    import signal, sys, time
    marker = sys.argv[1]
    def on_term(*_):
        open(marker, "w").close()
        if "--ignore" not in sys.argv:
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("up", flush=True)
    while True:
        time.sleep(0.05)
""")


@pytest.mark.parametrize(
    ("ignore", "grace", "exit_code"),
    [(False, 30, 0), (True, 0.5, 137)],
    ids=["sigterm-honoured", "sigkill-after-grace"],
)
def test_deletion_sigterms_then_kills_then_removes_the_pod(
    runner: FakeRunner, tmp_path: Path, ignore: bool, grace: float, exit_code: int
) -> None:
    script = tmp_path / "term.py"
    script.write_text(TERM_SCRIPT)
    marker = tmp_path / "got-term"
    pod = _pod([sys.executable, str(script), str(marker), *(["--ignore"] if ignore else [])])
    w = _start(runner, pod)
    _wait(lambda: w.pid() is not None and "up" in w.log_path.read_text(), "the process to run")
    deleting = copy.deepcopy(pod)
    deleting["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=grace)
    w.update(deleting)
    assert w.finished.wait(30)
    assert marker.exists()
    assert runner.deleted == [("ns", "p", "uid-1")]
    assert _cs(runner)["state"]["terminated"]["exitCode"] == exit_code


def test_missing_secret_is_reported_then_container_starts(runner: FakeRunner) -> None:
    env = [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "later", "key": "pw"}}}]
    w = _start(
        runner, _pod([sys.executable, "-c", "import os; print(os.environ['PW'])"], restart="Never", env=env)
    )
    try:
        _wait(
            lambda: (
                _cs(runner).get("state", {}).get("waiting", {}).get("reason") == "CreateContainerConfigError"
            ),
            "CreateContainerConfigError",
        )
        assert runner.last()["phase"] == "Pending"
        runner.secrets["later"] = {"pw": "ok"}
        _wait(
            lambda: runner.last().get("phase") == "Succeeded", "the container to run once the Secret exists"
        )
        assert "ok" in w.log_path.read_text()
    finally:
        runner.stopping.set()
        w.finished.wait(10)


def test_each_pod_gets_its_own_port_in_its_env(runner: FakeRunner, tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    code = (
        f"import os; open({str(out)!r}, 'w').write(os.environ['LAGPILOT_METRICS_PORT'] + ' ' + os.environ['PORT']"
        " + ' ' + os.environ['KUBECONFIG'])"
    )
    w = _start(
        runner,
        _pod(
            [sys.executable, "-c", code],
            restart="Never",
            env=[{"name": "LAGPILOT_METRICS_PORT", "value": "8080"}],
        ),
    )
    try:
        _wait(lambda: runner.last().get("phase") == "Succeeded", "the container to finish")
        metrics, port, kubeconfig = out.read_text().split()
        assert metrics == port == str(w.port) != "8080"
        assert kubeconfig == str(w.pod_dir / "kubeconfig")  # the pod's own ServiceAccount credentials
    finally:
        runner.stopping.set()
        w.finished.wait(10)


def test_deleting_a_pod_that_never_started_fails_it(runner: FakeRunner) -> None:
    env = [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "never", "key": "pw"}}}]
    pod = _pod([sys.executable, "-c", "pass"], restart="Never", env=env)
    w = _start(runner, pod)
    _wait(
        lambda: _cs(runner).get("state", {}).get("waiting", {}).get("reason") == "CreateContainerConfigError",
        "CreateContainerConfigError",
    )
    deleting = copy.deepcopy(pod)
    deleting["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    w.update(deleting)
    assert w.finished.wait(30)
    assert runner.last()["phase"] == "Failed"  # not Succeeded: a Job must not count it
    assert _cs(runner)["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert runner.deleted == [("ns", "p", "uid-1")]


def test_test_hooks_come_from_the_namespace_annotation_only_lp_test_names() -> None:
    """issue 23 Low: the CRD refuses LP_TEST_* in a CR; the dev pod runner takes a namespace's hooks
    from its annotation (and nothing else from it)."""
    import json as _json
    import threading as _threading
    from types import SimpleNamespace

    from lagpilot_dev.podrunner.base import TEST_ENV_ANNOTATION
    from lagpilot_dev.podrunner.kubeapi import PodApi

    ann = {
        TEST_ENV_ANNOTATION: _json.dumps({"LP_TEST_NO_HANDOFF": "1", "PATH": "/evil", "LAGPILOT_TOPIC": "x"})
    }
    core = SimpleNamespace(
        read_namespace=lambda ns: SimpleNamespace(metadata=SimpleNamespace(annotations=ann))
    )
    assert PodApi(core, None, _threading.Event()).test_env("ns") == {"LP_TEST_NO_HANDOFF": "1"}
    none = SimpleNamespace(
        read_namespace=lambda ns: SimpleNamespace(metadata=SimpleNamespace(annotations=None))
    )
    assert PodApi(none, None, _threading.Event()).test_env("ns") == {}
