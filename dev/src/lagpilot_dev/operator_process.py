"""`lagpilot operator --standalone` as a restartable subprocess (dev tooling: tests, benches).

One process group per operator, output appended to a log file (its tail is shown on failure).
`ensure()` restarts a dead operator the way its Deployment would and records the death, so fault
tests and `bench/chaos.py` can count restarts and prove a kill fired. Never used by the operator or
the images.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

# fail fast and retry often on the dev stack (its one node is near: pods start in seconds there)
DEV_OPERATOR_ENV = {
    "LAGPILOT_POD_START_SECONDS": "3",
    "LAGPILOT_KAFKA_TIMEOUT_SECONDS": "5",
    "LAGPILOT_MAX_BACKOFF_SECONDS": "15",
}
# spec.kafka.sessionTimeoutMs of the groups the real tests and the chaos campaign create: a consumer
# they SIGKILL (no LeaveGroup) keeps its partitions this long; 10 s instead of the 30 s default
DEV_SESSION_TIMEOUT_MS = 10_000


# a checkout's package source dirs (pyproject.toml's package-dir, dev/pyproject.toml)
SOURCE_DIRS = ("operator/src", "consumer_image/src", "dev/src")


def checkout_pythonpath(pythonpath: Path | str) -> str:
    """`pythonpath` preceded by its package source dirs when it is a checkout: the operator runs the
    code of the tree that launched it. With the repo root alone, `lagpilot` would be imported through
    the venv's editable install, i.e. from the checkout the venv was installed from (/work/main for a
    git worktree sharing that venv)."""
    root = Path(pythonpath)
    dirs = [str(root / d) for d in SOURCE_DIRS if (root / d).is_dir()]
    return os.pathsep.join([*dirs, str(pythonpath)])


def operator_env(
    kubeconfig: Path | str,
    pythonpath: Path | str,
    extra: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """This process's environment without any LAGPILOT_ setting, plus the kubeconfig, the repo and
    its package source dirs on PYTHONPATH (handlers of tests and benches; the checkout's own
    operator), the dev stack's timings and `extra`."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("LAGPILOT_")}
    env.update(
        {
            "KUBECONFIG": str(kubeconfig),
            "PYTHONPATH": checkout_pythonpath(pythonpath),
            **DEV_OPERATOR_ENV,
            **(extra or {}),
        }
    )
    return env


class OperatorProcess:
    def __init__(
        self,
        namespace: str,
        log_path: Path,
        env: Mapping[str, str],
        metrics_port: int = 0,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        self.namespace, self.log_path, self.env = namespace, Path(log_path), dict(env)
        # the leader-election identity, stable across ensure() restarts like a pod's name across
        # container restarts: a restarted operator takes its own Lease back at once
        self.env.setdefault("LAGPILOT_POD_NAME", f"dev-operator-{namespace}")
        self.metrics_port, self.metrics_host = metrics_port, metrics_host
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.deaths: list[tuple[float, int, int]] = []  # (when seen dead, pid, return code)
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as fh:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lagpilot.cli",
                    "operator",
                    "--namespace",
                    self.namespace,
                    "--standalone",
                    "--metrics-port",
                    str(self.metrics_port),
                    "--metrics-host",
                    self.metrics_host,
                ],
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> bool:
        """Restart it if it died (fault-injection points exit it like kill -9); True when restarted."""
        if self.alive():
            return False
        if self.proc is not None:
            self.deaths.append((time.time(), self.proc.pid, int(self.proc.returncode)))
        self.restarts += 1
        self.start()
        return True

    def tail(self, n: int = 80) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL of the whole process group: no shutdown at all (a node failure, an OOM kill)."""
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
