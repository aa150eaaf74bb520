"""Readiness and liveness probes of a local pod: where a probe goes (one network namespace for all
local pods, so the pod's own port replaces LAGPILOT_METRICS_PORT / PORT), when it runs next, and
one probe attempt (httpGet, tcpSocket, exec)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import LOOPBACK

PORT_ENV_VARS = ("LAGPILOT_METRICS_PORT", "PORT")


def remapped_ports(container: Mapping[str, Any]) -> set[int]:
    """The in-pod port numbers that become the local pod's own port: the literal values the spec
    gives LAGPILOT_METRICS_PORT / PORT (the runner overrides both with a free port)."""
    ports = set()
    for var in container.get("env") or []:
        if var.get("name") in PORT_ENV_VARS and "value" in var:
            with contextlib.suppress(TypeError, ValueError):
                ports.add(int(var["value"]))
    return ports


def resolve_probe_port(port: Any, container: Mapping[str, Any]) -> int | None:
    """A probe's port (number, numeric string, or a named containerPort) as a number."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    return None


def probe_target(probe: Mapping[str, Any], pod_port: int, container: Mapping[str, Any]) -> dict[str, Any]:
    """Where to send a probe: 127.0.0.1 (one network namespace for all local pods). A port the
    spec ties to LAGPILOT_METRICS_PORT / PORT goes to the pod's own port `pod_port` (so does an
    unresolvable one); any other port is probed as written (e.g. the operator's fixed health port).
    Kind, path, scheme and headers are kept."""
    mapped = remapped_ports(container)

    def port_of(spec_port: Any) -> int:
        number = resolve_probe_port(spec_port, container)
        return pod_port if number is None or number in mapped else number

    if "httpGet" in probe:
        hg = probe["httpGet"]
        path = hg.get("path") or "/"
        if not path.startswith("/"):
            path = "/" + path
        scheme = str(hg.get("scheme") or "HTTP").lower()
        return {
            "kind": "http",
            "url": f"{scheme}://{LOOPBACK}:{port_of(hg.get('port'))}{path}",
            "headers": {h["name"]: h["value"] for h in hg.get("httpHeaders") or []},
        }
    if "tcpSocket" in probe:
        return {"kind": "tcp", "port": port_of(probe["tcpSocket"].get("port"))}
    if "exec" in probe:
        return {"kind": "exec", "command": list(probe["exec"].get("command") or [])}
    return {"kind": "none"}


@dataclass
class Probe:
    """One probe of a running container and its counters (thresholds apply to consecutive results)."""

    spec: Mapping[str, Any]
    started: float
    next_at: float = 0.0
    successes: int = 0
    failures: int = 0

    def __post_init__(self) -> None:
        self.next_at = self.started + float(self.spec.get("initialDelaySeconds") or 0)

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds") or 10)

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds") or 1)


def probe_once(
    probe: Probe,
    pod_port: int,
    container: Mapping[str, Any],
    exec_env: Callable[[], dict[str, str]],
    cwd: Path,
) -> bool:
    """One attempt of `probe` (kubelet semantics: 2xx/3xx, a TCP connect, exit 0); `exec_env` is
    called only for an exec probe."""
    target = probe_target(probe.spec, pod_port, container)
    try:
        if target["kind"] == "http":
            req = urllib.request.Request(target["url"], headers=target["headers"])
            ctx = ssl._create_unverified_context()  # kubelet probes skip TLS verification too
            with urllib.request.urlopen(req, timeout=probe.timeout, context=ctx) as resp:
                return 200 <= int(resp.status) < 400
        if target["kind"] == "tcp":
            with socket.create_connection((LOOPBACK, target["port"]), timeout=probe.timeout):
                return True
        if target["kind"] == "exec":
            return (
                subprocess.run(
                    target["command"],
                    env=exec_env(),
                    cwd=cwd,
                    timeout=probe.timeout,
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            )
    except (urllib.error.URLError, OSError, subprocess.TimeoutExpired, ValueError):
        return False
    return True
