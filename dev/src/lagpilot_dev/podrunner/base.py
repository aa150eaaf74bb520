"""The pod runner's shared vocabulary: its node's identity constants, the kubelet-style errors, time
stamps, and the small host helpers (free port, private files, the project's venv)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import sys
from pathlib import Path

log = logging.getLogger("lagpilot_dev.podrunner")  # one logger for the whole runner (log filters match it)

LOOPBACK = "127.0.0.1"
DEFAULT_NODE_NAME = "lagpilot-local"
KUBELET_VERSION = "v1.35.4"
# host variables a local "container" inherits (a real one inherits none, but Java, Spark and the
# cache locations must be found); everything else comes from the Pod spec
INHERITED_ENV = (
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "JAVA_HOME",
    "SPARK_HOME",
    "LAGPILOT_CACHE",
    "LAGPILOT_STATE",
)
# the runtime's test fault hooks (LP_TEST_*) for a namespace's pods: a JSON object in this namespace
# annotation, added to every container's env by the runner (never from the pod spec: the CRD
# refuses LP_TEST_* in a CR's template.env)
TEST_ENV_ANNOTATION = "lagpilot.io/test-env"
TEST_HOOK_PREFIX = "LP_TEST_"
NODE_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
# a namespace labelled with this key belongs to the runner whose node name is the value
RUNNER_LABEL = "lagpilot.io/pod-runner"


class ContainerConfigError(Exception):
    """The Pod's env cannot be built (missing Secret/ConfigMap/key): the kubelet's CreateContainerConfigError."""


class StartError(Exception):
    """The command cannot be started (not found, no command): the kubelet's StartError (exit 128)."""


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def venv_bin() -> Path:
    """The project's .venv/bin (the interpreter we run in when it is a venv, else the repo's .venv)."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "bin"
    return Path(__file__).resolve().parents[4] / ".venv" / "bin"


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])
