"""The operator the demo runs: `lagpilot operator` as a subprocess in its own session, restarted
when it crashes (as its Deployment would be), stopped or left running at the end; and the
--no-operator development aid (one bare `lagpilot consume` process)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lagpilot_dev.demo.config import HANDLER, RunNames
from lagpilot_dev.demo.console import Console, DemoError
from lagpilot_dev.demo.traffic import Profile
from lagpilot_dev.paths import free_port

log = logging.getLogger("lagpilot_dev.demo")

MAX_OPERATOR_RESTARTS = 3


def _lagpilot_exe() -> Path:
    return Path(sys.executable).parent / "lagpilot"


@dataclass
class OperatorProcess:
    """`lagpilot operator --namespace NS --standalone`, logging to <out>/operator.log."""

    console: Console
    names: RunNames
    info: Any  # the stack's connection details (StackInfo)
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    port: int = 0  # its metrics port
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """`lagpilot operator` for the demo namespace, in its own session, logging to <out>/operator.log."""
        self.port = free_port()
        if self.log_file is None:
            self.log_file = open(self.names.out / "operator.log", "ab")  # closed in cleanup
        env = dict(
            os.environ,
            KUBECONFIG=str(self.info.kubeconfig),
            LAGPILOT_LOG_LEVEL="INFO",
            PYTHONFAULTHANDLER="1",  # a crash in native code leaves a Python traceback in the log
            # the drain Job's pod runs here, not in the image: point it at the cached connector jars
            LAGPILOT_DRAIN_SPARK_JARS=",".join(self.info.spark_jars),
            # the leader-election identity, stable across restarts (like a pod's name): a
            # restarted operator takes its own Lease back at once
            LAGPILOT_POD_NAME=f"demo-operator-{self.names.ns}",
        )
        exe = _lagpilot_exe()
        argv = [
            str(exe) if exe.exists() else sys.executable,
            *([] if exe.exists() else ["-m", "lagpilot.cli"]),
            "operator",
            "--namespace",
            self.names.ns,
            "--standalone",
            "--metrics-port",
            str(self.port),
            "--metrics-host",
            "127.0.0.1",
        ]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def dead(self) -> str | None:
        """None while the operator runs. A crashed operator is restarted (as its Deployment would
        be, up to MAX_OPERATOR_RESTARTS times, each restart shown and counted in the summary);
        after that, the reason to give up."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        tail = ""
        with contextlib.suppress(OSError):
            tail = "\n".join((self.names.out / "operator.log").read_text(errors="replace").splitlines()[-15:])
        log.warning("operator exited", extra={"exit_code": code, "restarts": self.restarts})
        if self.restarts >= MAX_OPERATOR_RESTARTS:
            return f"the operator exited with {code} (restarted {self.restarts}x already); last lines of operator.log:\n{tail}"
        self.restarts += 1
        self.exit_codes.append(code)
        if not self.console.live:
            self.console.say(
                f"the operator exited with {code}: restarting it, as its Deployment would "
                f"(restart {self.restarts}/{MAX_OPERATOR_RESTARTS}; see operator.log)",
                indent=True,
            )
        self.start()
        return None

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # its own session: pgid == its pid
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self.log_file is not None:
            self.log_file.close()
        self.proc = None

    def leave_running(self) -> None:
        """--keep: the operator runs on in its own session (not stopped, not restarted any more)."""
        if self.log_file is not None:
            self.log_file.close()  # the operator has its own copy of the descriptor
            self.log_file = None
        if self.proc is not None and self.proc.poll() is not None:
            raise DemoError(f"the operator had already exited with {self.proc.returncode}")


@dataclass
class BareConsumer:
    """--no-operator (a development aid): the env the operator would render, one `lagpilot consume` process."""

    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None

    def start(self, names: RunNames, profile: Profile, info: Any, handler_config: dict[str, Any]) -> None:
        p = profile
        env = dict(
            os.environ,
            LAGPILOT_BOOTSTRAP_SERVERS=info.bootstrap_servers,
            LAGPILOT_TOPIC=names.topic,
            LAGPILOT_GROUP_ID=names.group_id,
            LAGPILOT_BATCH_MAX_RECORDS=str(p.batch_max_records),
            LAGPILOT_BATCH_TIMEOUT_MS=str(p.batch_timeout_ms),
            LAGPILOT_HANDLER=HANDLER,
            LAGPILOT_HANDLER_CONFIG=json.dumps(handler_config),
            DEMO_POSTGRES_DSN=info.postgres_dsn,
            LAGPILOT_METRICS_PORT=str(free_port()),
            LAGPILOT_POD_NAME="bare-consumer-0",
        )
        self.log_file = open(names.out / "consumer.log", "ab")  # closed in cleanup
        self.proc = subprocess.Popen(
            [str(_lagpilot_exe()), "consume"],
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None
