"""The --no-operator development aid: one bare `lagpilot consume` process (the operator itself is the
helm release's pod: lagpilot_dev.demo.node)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lagpilot_dev.demo.config import HANDLER, RunNames
from lagpilot_dev.demo.traffic import Profile
from lagpilot_dev.paths import free_port

log = logging.getLogger("lagpilot_dev.demo")


def _lagpilot_exe() -> Path:
    return Path(sys.executable).parent / "lagpilot"


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
