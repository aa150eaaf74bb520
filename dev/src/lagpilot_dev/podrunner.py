"""The test-side pod runner: a stand-in for a kubelet, for the local dev stack only.

No kubelet (nor any container runtime) can run on these machines, yet the operator's whole point is
Pods: Deployments of consumers, drain Jobs. This runner makes the real controller-manager's
Deployment -> ReplicaSet -> Pod chain and Job controller observable end to end:

- it registers a Node (Ready, with capacity) and keeps its Lease and Ready condition fresh, so the
  node-lifecycle controller never taints it;
- it does the scheduler's one job too: an unbound Pod (default scheduler, nodeSelector matching)
  is bound to its Node through the `pods/binding` subresource (no kube-scheduler is run);
- for each Pod bound to its Node it runs the FIRST container's `command` + `args` as a local
  process (the image is ignored; a command without a path resolves through the project's
  `.venv/bin` first, `python` is the venv's interpreter; an image listed in `entrypoints` supplies
  the command when the container has none, and its CMD when there are no args either: test-side
  knowledge of our own images, e.g. Spark's executor pods of the consumer image), with the env the Pod spec gives (`value` with
  `$(VAR)` expansion, `secretKeyRef`, `configMapKeyRef`, `fieldRef`, `resourceFieldRef`, `envFrom`);
- it writes the status a kubelet would: phase Pending -> Running -> Succeeded/Failed, the
  PodScheduled / Initialized / ContainersReady / Ready conditions, containerStatuses (waiting /
  running / terminated with exit code, lastState, restartCount, ready), podIP 127.0.0.1, startTime;
- restart policy: Always / OnFailure restart after an exponential back-off (CrashLoopBackOff);
  Never (or OnFailure with exit 0) ends the pod Succeeded/Failed. A process that crashes or is
  killed (by anyone) is a crashed container: exit code 128+signal;
- deletion (deletionTimestamp set): SIGTERM to the process group, SIGKILL after the grace period,
  final status, then the Pod object is removed (delete with gracePeriodSeconds=0).

One network namespace for all: local pods cannot all listen on the same port, so each pod gets its
own free port in `LAGPILOT_METRICS_PORT` and `PORT` (overriding what the spec says). httpGet /
tcpSocket probes (readiness, liveness) go to 127.0.0.1: a probe port that is the spec's value of
LAGPILOT_METRICS_PORT or PORT (by number or through a named containerPort) goes to the pod's own
port; any other port is probed as written (fine for a single pod such as the operator).

Metrics: when the dev stack's Prometheus part exists (`metrics_sd_dir`), a pod whose container sets
LAGPILOT_METRICS_PORT gets a file-SD target `127.0.0.1:<its own port>` while its worker runs
(lagpilot_dev.prometheus, docs/observability.md).

In-cluster credentials: unless `automountServiceAccountToken: false`, the container's KUBECONFIG
points to a per-pod kubeconfig holding a TokenRequest token of the pod's ServiceAccount (bound to
the pod); `KUBERNETES_SERVICE_HOST` is not set, so `load_incluster_config()` fails over to it. So a
pod runs with exactly its ServiceAccount's RBAC, never the runner's admin identity.

Not emulated: init and sidecar containers (only the first container runs and is reported), volumes,
startup probes, service env links, resource limits, image pulls, Events.

Usage: `PodRunner(kubeconfig, node_name, workdir).start()` (threads) / `.stop()` (kills its
processes), or `python -m lagpilot_dev.podrunner --kubeconfig K` in the foreground.
"""
from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("lagpilot_dev.podrunner")

LOOPBACK = "127.0.0.1"
DEFAULT_NODE_NAME = "lagpilot-local"
KUBELET_VERSION = "v1.35.4"
# images whose entrypoint the runner knows (the container spec gives no command): repository -> argv
# (test-side only: a real kubelet reads them from the image). The consumer image's ENTRYPOINT is
# `python -m lagpilot_runtime.image_entrypoint` with CMD `consume`: Spark's executor pods carry no
# command and `args: ["executor"]`, which that entrypoint turns into the executor JVM (as Spark's
# entrypoint.sh does); other args go to `lagpilot`. As in a container, `args` replace the image's CMD.
DEFAULT_ENTRYPOINTS: dict[str, list[str]] = {
    "lagpilot/consumer": ["python", "-m", "lagpilot_runtime.image_entrypoint"],
    "lagpilot/operator": ["lagpilot", "operator"],
}
# the image's CMD, used when the container gives neither command nor args
DEFAULT_IMAGE_CMDS: dict[str, list[str]] = {
    "lagpilot/consumer": ["consume"],
}
# host variables a local "container" inherits (a real one inherits none, but Java, Spark and the
# cache locations must be found); everything else comes from the Pod spec
INHERITED_ENV = ("HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "JAVA_HOME", "SPARK_HOME",
                 "LAGPILOT_CACHE", "LAGPILOT_STATE")
NODE_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
# env names as Kubernetes >= 1.34 accepts them (RelaxedEnvironmentVariableValidation): printable ASCII but "="
# a namespace labelled with this key belongs to the runner whose node name is the value
RUNNER_LABEL = "lagpilot.io/pod-runner"
_ENV_NAME = re.compile(r"^[!-<>-~][ -<>-~]*$")


class ContainerConfigError(Exception):
    """The Pod's env cannot be built (missing Secret/ConfigMap/key): the kubelet's CreateContainerConfigError."""


class StartError(Exception):
    """The command cannot be started (not found, no command): the kubelet's StartError (exit 128)."""


# ---- pure helpers (unit-tested without a cluster) -----------------------------------------------

def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined vars are replaced, `$$` is a literal `$`, undefined
    references are left as written (as the kubelet does for command, args and env values)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


def _field_ref(pod: Mapping[str, Any], path: str, node_name: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName") or node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": LOOPBACK,
        "status.hostIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
        "status.hostIPs": LOOPBACK,
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef {path!r}")


_CPU_UNITS = {"m": 1e-3}
_MEM_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_quantity(q: str) -> float:
    """A Kubernetes quantity ("500m", "2", "64Mi") as a float in base units."""
    q = str(q).strip()
    for suffix, mult in {**_MEM_UNITS, **_CPU_UNITS}.items():
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * mult
    return float(q)


def _resource_field_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    import math

    res = container.get("resources") or {}
    kind, _, name = str(ref.get("resource", "")).partition(".")
    value = (res.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (res.get("limits") or {}).get(name)  # requests default to limits
    if value is None:
        value = NODE_CAPACITY.get(name, "0")  # limits default to node allocatable
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(parse_quantity(value) / divisor))


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any], *,
                get_secret: Callable[[str], Mapping[str, str] | None],
                get_config_map: Callable[[str], Mapping[str, str] | None],
                node_name: str = DEFAULT_NODE_NAME) -> dict[str, str]:
    """The container's environment as the kubelet builds it: `envFrom` first, then `env` in order
    (later entries override, values may reference earlier ones with `$(VAR)`).

    `get_secret(name)` returns the decoded Secret data (or None when missing), `get_config_map`
    likewise. A missing required source raises ContainerConfigError.
    """
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        if "configMapRef" in src:
            ref, data = src["configMapRef"], get_config_map(src["configMapRef"].get("name", ""))
            what = "configmap"
        elif "secretRef" in src:
            ref, data = src["secretRef"], get_secret(src["secretRef"].get("name", ""))
            what = "secret"
        else:
            continue
        if data is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(f'{what} "{ref.get("name")}" not found')
        for key, value in data.items():
            if _ENV_NAME.match(prefix + key):  # the kubelet skips invalid names
                env[prefix + key] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand_vars(str(var.get("value") or ""), env)
            continue
        vf = var["valueFrom"]
        if "secretKeyRef" in vf or "configMapKeyRef" in vf:
            is_secret = "secretKeyRef" in vf
            ref = vf["secretKeyRef"] if is_secret else vf["configMapKeyRef"]
            data = (get_secret if is_secret else get_config_map)(ref.get("name", ""))
            what = "secret" if is_secret else "configmap"
            if data is None or ref.get("key") not in data:
                if ref.get("optional"):
                    continue
                if data is None:
                    raise ContainerConfigError(f'{what} "{ref.get("name")}" not found')
                raise ContainerConfigError(f'couldn\'t find key {ref.get("key")} in {what} {ref.get("name")}')
            env[name] = data[ref["key"]]
        elif "fieldRef" in vf:
            env[name] = _field_ref(pod, vf["fieldRef"].get("fieldPath", ""), node_name)
        elif "resourceFieldRef" in vf:
            env[name] = _resource_field_ref(container, vf["resourceFieldRef"])
        else:
            raise ContainerConfigError(f"unsupported valueFrom for {name}")
    return env


def image_repository(image: str) -> str:
    """`registry:5000/lagpilot/consumer:0.1.0@sha256:...` -> `lagpilot/consumer` (best effort)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name.rsplit(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # drop the registry host
    if parts[:1] == ["library"]:
        parts = parts[1:]
    return "/".join(parts)


def build_argv(container: Mapping[str, Any], env: Mapping[str, str], *, bin_dirs: Sequence[str],
               python: str, entrypoints: Mapping[str, Sequence[str]] = DEFAULT_ENTRYPOINTS,
               search_path: str = "", image_cmds: Mapping[str, Sequence[str]] = DEFAULT_IMAGE_CMDS) -> list[str]:
    """The local argv for a container: command + args with `$(VAR)` expanded; the image's known
    entrypoint when there is no command; a bare program name resolved in `bin_dirs` first, then
    `search_path`; `python`/`python3` become `python` (the project's interpreter)."""
    command = [expand_vars(str(c), env) for c in container.get("command") or []]
    args = [expand_vars(str(a), env) for a in container.get("args") or []]
    if not command:
        repo = image_repository(str(container.get("image") or ""))
        key = next((k for k in entrypoints if repo == k or repo.endswith("/" + k)), None)
        if key is None:
            raise StartError(f"container {container.get('name')!r} has no command and the local runner does not "
                             f"know the entrypoint of image {container.get('image')!r}")
        command = list(entrypoints[key])
        if not args:
            args = list(image_cmds.get(key, ()))
    prog = command[0]
    if re.fullmatch(r"python(3(\.\d+)?)?", prog):
        resolved: str | None = python
    elif "/" in prog:
        resolved = prog if os.access(prog, os.X_OK) else None
    else:
        resolved = shutil.which(prog, path=os.pathsep.join([*bin_dirs, search_path]))
    if resolved is None:
        raise StartError(f'exec: "{prog}": executable file not found in $PATH')
    return [resolved, *command[1:], *args]


@dataclass(frozen=True)
class ExitOutcome:
    """What happens after the container exits: restart it, or end the pod in `phase`."""

    restart: bool
    phase: str | None  # "Succeeded" / "Failed" when not restarting


def exit_outcome(restart_policy: str | None, exit_code: int) -> ExitOutcome:
    """The kubelet's restart decision for a single-container pod."""
    policy = restart_policy or "Always"
    if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
        return ExitOutcome(restart=True, phase=None)
    return ExitOutcome(restart=False, phase="Succeeded" if exit_code == 0 else "Failed")


def crash_backoff(restarts: int, initial: float, cap: float) -> float:
    """Seconds to wait before restart number `restarts + 1`: initial * 2^restarts, capped (the
    kubelet uses 10 s doubling to 300 s; the runner's defaults are shorter so tests stay quick)."""
    return min(cap, initial * (2 ** max(0, restarts)))


def exit_code_of(returncode: int) -> tuple[int, int | None]:
    """Popen returncode -> (container exit code, signal): killed by signal N is 128+N, as in a container."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def terminated_state(exit_code: int, sig: int | None, started_at: str | None, finished_at: str,
                     reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": started_at or finished_at,
        "finishedAt": finished_at,
    }
    if sig is not None:
        state["signal"] = sig
    if message:
        state["message"] = message
    return state


def pod_conditions(*, phase: str, ready: bool, started_at: str, transitions: dict[str, tuple[str, str]],
                   now: str) -> list[dict[str, Any]]:
    """The four kubelet-owned conditions plus PodScheduled; `transitions` remembers (status, time)
    per type so lastTransitionTime only moves when the status does (updated in place)."""
    initialized = "True"
    containers_ready = "True" if ready and phase == "Running" else "False"
    wanted = {
        "PodReadyToStartContainers": "True" if phase in ("Running", "Pending") else "False",
        "Initialized": initialized,
        "ContainersReady": containers_ready,
        "Ready": containers_ready,
        "PodScheduled": "True",
    }
    out = []
    for ctype, status in wanted.items():
        prev = transitions.get(ctype)
        if prev is None or prev[0] != status:
            transitions[ctype] = (status, now if prev is not None else started_at)
        cond: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None,
                                "lastTransitionTime": transitions[ctype][1]}
        if status == "False" and ctype in ("ContainersReady", "Ready"):
            cond["reason"] = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        out.append(cond)
    return out


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
        return {"kind": "http", "url": f"{scheme}://{LOOPBACK}:{port_of(hg.get('port'))}{path}",
                "headers": {h["name"]: h["value"] for h in hg.get("httpHeaders") or []}}
    if "tcpSocket" in probe:
        return {"kind": "tcp", "port": port_of(probe["tcpSocket"].get("port"))}
    if "exec" in probe:
        return {"kind": "exec", "command": list(probe["exec"].get("command") or [])}
    return {"kind": "none"}


def node_selector_matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    sel = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(k) == v for k, v in sel.items())


# ---- the runner ---------------------------------------------------------------------------------

def _default_metrics_sd_dir() -> Path | None:
    from lagpilot_dev.prometheus import pods_sd_dir
    return pods_sd_dir()


def _venv_bin() -> Path:
    """The project's .venv/bin (the interpreter we run in when it is a venv, else the repo's .venv)."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "bin"
    return Path(__file__).resolve().parents[3] / ".venv" / "bin"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@dataclass
class _Probe:
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


class PodWorker:
    """Runs one Pod's container as a local process and reports its status (one thread per pod)."""

    TICK = 0.2

    def __init__(self, runner: PodRunner, pod: dict[str, Any]) -> None:
        self.runner = runner
        self.pod = pod
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.container: dict[str, Any] = (pod["spec"].get("containers") or [{}])[0]
        self.cname: str = self.container.get("name", "main")
        self.port = _free_port()
        safe = f"{self.namespace}_{self.name}_{self.cname}"
        self.log_path = runner.workdir / "logs" / f"{safe}.log"
        self.pod_dir = runner.workdir / "pods" / f"{self.namespace}_{self.name}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.container_started_at: str | None = None
        self.start_time = now_rfc3339()
        self.restart_count = 0
        self.last_state: dict[str, Any] = {}
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.ready = False
        self.phase = "Pending"
        self.done = False  # terminal phase reached
        self.backoff_until = 0.0
        self.readiness: _Probe | None = None
        self.liveness: _Probe | None = None
        self.transitions: dict[str, tuple[str, str]] = {}
        self.deleting = False
        self.gone = False
        self.finished = threading.Event()
        self._wake = threading.Event()
        self._last_status: dict[str, Any] | None = None
        self._retry_write_at: float | None = None
        self._adopt_existing_status(pod)
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.namespace}/{self.name}", daemon=True)

    def _adopt_existing_status(self, pod: Mapping[str, Any]) -> None:
        """After a runner restart: keep startTime and count the lost container as a restart."""
        status = pod.get("status") or {}
        self.start_time = status.get("startTime") or self.start_time
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == self.cname:
                self.restart_count = int(cs.get("restartCount") or 0)
                if "running" in (cs.get("state") or {}) or "terminated" in (cs.get("state") or {}):
                    self.restart_count += 1
                    self.last_state = {"terminated": terminated_state(137, 9, None, now_rfc3339(),
                                                                     reason="RunnerRestarted")}

    # -- called from the watch thread --
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting = True
        self._wake.set()

    def on_deleted(self) -> None:
        """The Pod object is gone (force-deleted, or our own final delete): stop the process."""
        self.gone = True
        self._wake.set()

    def start(self) -> None:
        self.thread.start()

    # -- the worker thread --
    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - a worker must never take the runner down
            log.exception("pod worker failed", extra={"pod": f"{self.namespace}/{self.name}"})
            self._kill_process(grace=2.0)
        finally:
            self._publish_metrics_target(False)
            self.finished.set()

    def _publish_metrics_target(self, up: bool) -> None:
        """The dev Prometheus's file-SD entry for this pod (see lagpilot_dev.prometheus): written when
        the container starts and its spec sets LAGPILOT_METRICS_PORT (the runner's own port for the
        pod), removed when the worker ends (pod deleted or gone, runner stopped)."""
        sd = getattr(self.runner, "metrics_sd_dir", None)
        if sd is None or not any(e.get("name") == "LAGPILOT_METRICS_PORT" for e in self.container.get("env") or []):
            return
        from lagpilot_dev import prometheus
        with contextlib.suppress(OSError):
            if not up:
                prometheus.remove_pod_target(Path(sd), self.namespace, self.name)
                return
            group = (self.pod["metadata"].get("labels") or {}).get("lagpilot.io/group", "")
            prometheus.write_pod_target(Path(sd), self.namespace, self.name, self.port, {"group": group})

    def _loop(self) -> None:
        phase0 = (self.pod.get("status") or {}).get("phase")
        if phase0 in ("Succeeded", "Failed"):
            self.done, self.phase = True, phase0
        else:
            self._write_status()
        while True:
            if self.runner.stopping.is_set():
                self._kill_process(grace=self.runner.stop_grace)
                return
            if self.gone:
                self._kill_process(grace=2.0)
                return
            if self.deleting:
                self._terminate_and_delete()
                return
            now = time.monotonic()
            if self._retry_write_at is not None and now >= self._retry_write_at:
                self._write_status()
            if self.proc is None:
                if not self.done and now >= self.backoff_until:
                    self._start_container()
            else:
                rc = self.proc.poll()
                if rc is not None:
                    self._on_exit(rc)
                else:
                    self._run_probes(now)
            self._wake.wait(self.TICK)
            self._wake.clear()

    def _start_container(self) -> None:
        pod, c = self.pod, self.container
        try:
            env = resolve_env(pod, c, get_secret=lambda n: self.runner.get_secret(self.namespace, n),
                              get_config_map=lambda n: self.runner.get_config_map(self.namespace, n),
                              node_name=self.runner.node_name)
            if "KUBECONFIG" not in env and pod["spec"].get("automountServiceAccountToken") is not False:
                env["KUBECONFIG"] = str(self.runner.pod_credentials(pod, self.pod_dir))
        except ContainerConfigError as exc:
            self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.backoff_until = time.monotonic() + 2.0
            self._write_status()
            return
        except Exception as exc:  # noqa: BLE001 - apiserver unreachable (fault tests): try again shortly
            log.warning("cannot prepare container yet", extra={"pod": f"{self.namespace}/{self.name}",
                                                                "error": repr(exc)[:300]})
            self.backoff_until = time.monotonic() + 2.0
            return
        # one network namespace for all local pods: each gets its own port (see module docstring)
        env["LAGPILOT_METRICS_PORT"] = str(self.port)
        env["PORT"] = str(self.port)
        full_env = self.runner.base_env(self.name)
        full_env.update(env)
        try:
            argv = build_argv(c, full_env, bin_dirs=[str(self.runner.venv_bin)], python=self.runner.python,
                              entrypoints=self.runner.entrypoints, search_path=os.environ.get("PATH", ""))
        except StartError as exc:
            self._record_exit(128, None, reason="StartError", message=str(exc), started_at=now_rfc3339())
            return
        cwd = Path(c["workingDir"]) if c.get("workingDir") and Path(c["workingDir"]).is_dir() else self.pod_dir
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            out.write(f"\n==== {now_rfc3339()} start #{self.restart_count} pod {self.namespace}/{self.name}: "
                      f"{json.dumps(argv)}\n".encode())
            out.flush()
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                             cwd=cwd, env=full_env, start_new_session=True)
            except OSError as exc:
                self._record_exit(128, None, reason="StartError", message=str(exc), started_at=now_rfc3339())
                return
        self.container_started_at = now_rfc3339()
        self.state = {"running": {"startedAt": self.container_started_at}}
        self._publish_metrics_target(True)
        self.phase = "Running"
        started = time.monotonic()
        rp, lp = c.get("readinessProbe"), c.get("livenessProbe")
        self.readiness = _Probe(rp, started) if rp else None
        self.liveness = _Probe(lp, started) if lp else None
        self.ready = self.readiness is None
        log.info("container started", extra={"pod": f"{self.namespace}/{self.name}", "pid": self.proc.pid,
                                             "port": self.port, "restart_count": self.restart_count,
                                             "log": str(self.log_path)})
        self._write_status()

    def _on_exit(self, returncode: int) -> None:
        code, sig = exit_code_of(returncode)
        pid = self.proc.pid if self.proc else None
        self.proc = None
        log.info("container exited", extra={"pod": f"{self.namespace}/{self.name}", "pid": pid, "exit_code": code})
        self._record_exit(code, sig, started_at=self.container_started_at)

    def _record_exit(self, code: int, sig: int | None, *, reason: str | None = None, message: str | None = None,
                     started_at: str | None) -> None:
        term = terminated_state(code, sig, started_at, now_rfc3339(), reason=reason, message=message)
        self.ready = False
        outcome = exit_outcome(self.pod["spec"].get("restartPolicy"), code)
        if outcome.restart:
            delay = crash_backoff(self.restart_count, self.runner.backoff_initial, self.runner.backoff_max)
            self.last_state = {"terminated": term}
            self.state = {"waiting": {"reason": "CrashLoopBackOff",
                                      "message": f"back-off {delay:.0f}s restarting failed container={self.cname} "
                                                 f"pod={self.name}_{self.namespace}({self.uid})"}}
            self.restart_count += 1
            self.backoff_until = time.monotonic() + delay
            # the phase stays as it was: Running once a process ran, Pending while none could start
        else:
            self.state = {"terminated": term}
            self.phase = outcome.phase or "Failed"
            self.done = True
        self._write_status()

    def _run_probes(self, now: float) -> None:
        for probe, is_readiness in ((self.readiness, True), (self.liveness, False)):
            if probe is None or now < probe.next_at:
                continue
            probe.next_at = now + probe.period
            ok = self._probe_once(probe)
            if ok:
                probe.successes, probe.failures = probe.successes + 1, 0
            else:
                probe.failures, probe.successes = probe.failures + 1, 0
            if is_readiness:
                success_threshold = int(probe.spec.get("successThreshold") or 1)
                failure_threshold = int(probe.spec.get("failureThreshold") or 3)
                if not self.ready and probe.successes >= success_threshold:
                    self.ready = True
                    self._write_status()
                elif self.ready and probe.failures >= failure_threshold:
                    self.ready = False
                    self._write_status()
            elif probe.failures >= int(probe.spec.get("failureThreshold") or 3):
                log.info("liveness probe failed, killing container", extra={"pod": f"{self.namespace}/{self.name}"})
                probe.failures = 0
                self._kill_process(grace=float(self.pod["spec"].get("terminationGracePeriodSeconds") or 30),
                                   reap=False)

    def _probe_once(self, probe: _Probe) -> bool:
        target = probe_target(probe.spec, self.port, self.container)
        try:
            if target["kind"] == "http":
                req = urllib.request.Request(target["url"], headers=target["headers"])  # noqa: S310
                import ssl

                ctx = ssl._create_unverified_context()  # noqa: S323 - kubelet probes skip TLS verification too
                with urllib.request.urlopen(req, timeout=probe.timeout, context=ctx) as resp:  # noqa: S310
                    return 200 <= int(resp.status) < 400
            if target["kind"] == "tcp":
                with socket.create_connection((LOOPBACK, target["port"]), timeout=probe.timeout):
                    return True
            if target["kind"] == "exec":
                env = self.runner.base_env(self.name)
                return subprocess.run(target["command"], env=env, cwd=self.pod_dir, timeout=probe.timeout,  # noqa: S603
                                      capture_output=True, check=False).returncode == 0
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired, ValueError):
            return False
        return True

    def _kill_process(self, grace: float, reap: bool = True) -> int | None:
        """SIGTERM the process group, SIGKILL after `grace` seconds; returns the returncode."""
        proc = self.proc
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            rc = proc.wait(timeout=max(0.0, grace))
        except subprocess.TimeoutExpired:
            log.info("grace period over, killing", extra={"pod": f"{self.namespace}/{self.name}", "pid": proc.pid})
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        # children that outlived the group leader
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if reap:
            self.proc = None
        return rc

    def _terminate_and_delete(self) -> None:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        if self.proc is not None:
            log.info("pod deleted: stopping container", extra={"pod": f"{self.namespace}/{self.name}",
                                                               "pid": self.proc.pid, "grace_s": grace})
            rc = self._kill_process(grace=float(grace))
            code, sig = exit_code_of(rc if rc is not None else -9)
            self.state = {"terminated": terminated_state(code, sig, self.container_started_at, now_rfc3339())}
            self.ready = False
            if not self.done:
                self.phase = "Succeeded" if code == 0 else "Failed"
                self.done = True
            self._write_status()
        elif not self.done:
            # no process (never started, or in back-off): what the kubelet reports for a container
            # it cannot account for; never Succeeded, or a Job would count a pod that did not run
            self.ready = False
            self.state = {"terminated": terminated_state(
                137, None, None, now_rfc3339(), reason="ContainerStatusUnknown",
                message="The container could not be located when the pod was terminated")}
            self.phase, self.done = "Failed", True
            self._write_status()
        self.runner.delete_pod(self.namespace, self.name, self.uid)

    def status(self) -> dict[str, Any]:
        now = now_rfc3339()
        ready = self.ready and self.proc is not None and not self.done
        cs: dict[str, Any] = {
            "name": self.cname,
            "image": str(self.container.get("image") or ""),
            "imageID": f"lagpilot-podrunner://{self.container.get('image') or ''}",
            "ready": ready,
            "started": self.proc is not None,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.proc is not None:
            cs["containerID"] = f"local://{self.proc.pid}"
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": pod_conditions(phase=self.phase, ready=ready, started_at=self.start_time,
                                         transitions=self.transitions, now=now),
            "hostIP": LOOPBACK,
            "hostIPs": [{"ip": LOOPBACK}],
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": self.start_time,
            "containerStatuses": [cs],
        }
        return status

    def _write_status(self) -> None:
        status = self.status()
        if status == self._last_status:
            return
        if self.runner.patch_pod_status(self.namespace, self.name, status):
            self._last_status = status
            self._retry_write_at = None
        else:  # apiserver down or restarting (fault tests): the loop retries
            self._retry_write_at = time.monotonic() + 2.0

    def pid(self) -> int | None:
        proc = self.proc
        return proc.pid if proc is not None and proc.poll() is None else None


@dataclass
class PodRunner:
    """Watches Pods and runs those bound to `node_name` as local processes (see the module docstring).

    `namespaces`: only pods in these namespaces (None: all not claimed by another runner through
    the namespace label `lagpilot.io/pod-runner=<node name>`). It is read on every event, so a set
    the caller keeps adding to works: that is how concurrent test sessions sharing one control plane
    keep their pods apart (each session's runner takes only the namespaces its tests created).
    `bind`: also bind unscheduled pods (in scope) to this node (the scheduler's job).
    `delete_node_on_stop`: remove the Node object on stop (for per-session node names); the
    controller-manager's pod GC then deletes any pod still bound to it. On start, runner Nodes
    (label lagpilot.io/pod-runner) without a heartbeat for `stale_node_seconds` are deleted likewise. Crash back-off starts at `backoff_initial` seconds and
    doubles up to `backoff_max` (shorter than the kubelet's 10 s -> 300 s, so tests stay quick).
    """

    kubeconfig: Path | str
    node_name: str = DEFAULT_NODE_NAME
    workdir: Path | str = Path("podrunner")
    namespaces: Collection[str] | None = None
    bind: bool = True
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    heartbeat_seconds: float = 10.0
    resync_seconds: int = 60
    stop_grace: float = 5.0
    delete_node_on_stop: bool = False
    stale_node_seconds: float = 300.0
    extra_env: Mapping[str, str] = field(default_factory=dict)
    entrypoints: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(DEFAULT_ENTRYPOINTS))
    # file-SD dir of the dev Prometheus (lagpilot_dev.prometheus); default: the dev stack's, if that part was set up
    metrics_sd_dir: Path | str | None = field(default_factory=lambda: _default_metrics_sd_dir())

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.stopping = threading.Event()
        self.venv_bin = _venv_bin()
        self.python = str(self.venv_bin / "python") if (self.venv_bin / "python").exists() else sys.executable
        self.labels = {"kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "lagpilot.io/pod-runner": "true"}
        self._workers: dict[str, PodWorker] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._responses: list[Any] = []
        self._ns_owner_cache: dict[str, tuple[str | None, float]] = {}
        self._api_client: Any = None
        self._core: Any = None

    # ---- lifecycle --------------------------------------------------------------------------------
    def start(self) -> PodRunner:
        """Register the Node, then watch Pods in background threads. Returns self."""
        from kubernetes import client, config

        self.workdir.mkdir(parents=True, exist_ok=True)
        self._api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        self._core = client.CoreV1Api(self._api_client)
        self._register_node()
        self._reap_stale_nodes()
        t = threading.Thread(target=self._watch_loop, name="podrunner-watch", daemon=True)
        t.start()
        self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat_loop, name="podrunner-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)
        log.info("pod runner started", extra={"node": self.node_name, "workdir": str(self.workdir),
                                              "namespaces": "*" if self.namespaces is None else "(given)"})
        return self

    def stop(self) -> None:
        """Stop watching and kill every process this runner started (like a node going down)."""
        self.stopping.set()
        for resp in list(self._responses):
            with contextlib.suppress(Exception):
                resp.shutdown()
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w._wake.set()
        for w in workers:
            w.finished.wait(self.stop_grace + 10)
        for t in self._threads:
            t.join(timeout=10)
        if self.delete_node_on_stop and self._core is not None:
            with contextlib.suppress(Exception):
                self._core.delete_node(self.node_name, _preload_content=False)
        if self._api_client is not None:
            self._api_client.close()
        log.info("pod runner stopped", extra={"node": self.node_name})

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- queries for tests --------------------------------------------------------------------------
    def worker(self, namespace: str, name: str) -> PodWorker | None:
        with self._lock:
            for w in self._workers.values():
                if w.namespace == namespace and w.name == name:
                    return w
        return None

    def pid_of(self, namespace: str, name: str) -> int | None:
        """The pid of the pod's running process, or None."""
        w = self.worker(namespace, name)
        return w.pid() if w else None

    def log_path(self, namespace: str, name: str) -> Path | None:
        w = self.worker(namespace, name)
        return w.log_path if w else None

    def running_pids(self, namespace: str | None = None) -> dict[str, int]:
        """pod name -> pid of every running process (optionally in one namespace)."""
        with self._lock:
            workers = list(self._workers.values())
        return {w.name: pid for w in workers
                if (namespace is None or w.namespace == namespace) and (pid := w.pid()) is not None}

    # ---- API helpers used by the workers ---------------------------------------------------------
    def base_env(self, pod_name: str) -> dict[str, str]:
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        env["PATH"] = os.pathsep.join([str(self.venv_bin), os.environ.get("PATH", "/usr/bin:/bin")])
        env["VIRTUAL_ENV"] = str(self.venv_bin.parent)
        env["HOSTNAME"] = pod_name
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def _get_data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        from kubernetes import client

        try:
            if kind == "secret":
                resp = self._core.read_namespaced_secret(name, namespace, _preload_content=False)
            else:
                resp = self._core.read_namespaced_config_map(name, namespace, _preload_content=False)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise ContainerConfigError(f"reading {kind} {name}: HTTP {exc.status}") from exc
        obj = json.loads(resp.data)
        if kind == "secret":
            data = {k: base64.b64decode(v).decode("utf-8", errors="surrogateescape")
                    for k, v in (obj.get("data") or {}).items()}
            data.update(obj.get("stringData") or {})
            return data
        data = dict(obj.get("data") or {})
        data.update({k: base64.b64decode(v).decode("utf-8", errors="surrogateescape")
                     for k, v in (obj.get("binaryData") or {}).items()})
        return data

    def get_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self._get_data("secret", namespace, name)

    def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self._get_data("configmap", namespace, name)

    def pod_credentials(self, pod: Mapping[str, Any], pod_dir: Path) -> Path:
        """In-cluster credentials, locally: a TokenRequest token of the pod's ServiceAccount (bound
        to the pod), as `<pod_dir>/kubeconfig` (returned; the container's KUBECONFIG) and as the usual
        `serviceaccount/{token,ca.crt,namespace}` files. The token is never logged."""
        from kubernetes import client

        from lagpilot_dev.kube import kubeconfig_yaml

        meta = pod["metadata"]
        ns, sa = meta["namespace"], pod["spec"].get("serviceAccountName") or "default"
        body = {"spec": {"expirationSeconds": 86400, "boundObjectRef": {
            "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}}
        try:
            resp = self._core.create_namespaced_service_account_token(sa, ns, body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status == 404:
                raise ContainerConfigError(f'serviceaccount "{sa}" not found') from exc
            raise ContainerConfigError(f"token request for serviceaccount {sa}: HTTP {exc.status}") from exc
        token = json.loads(resp.data)["status"]["token"]
        cfg = self._api_client.configuration
        sa_dir = pod_dir / "serviceaccount"
        sa_dir.mkdir(parents=True, exist_ok=True)
        ca = Path(cfg.ssl_ca_cert)
        for name, content in (("token", token), ("namespace", ns), ("ca.crt", ca.read_text())):
            _write_private(sa_dir / name, content)
        path = pod_dir / "kubeconfig"
        _write_private(path, kubeconfig_yaml(cfg.host, ca, f"system:serviceaccount:{ns}:{sa}", token=token,
                                             namespace=ns))
        return path

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        from kubernetes import client

        try:
            self._core.patch_namespaced_pod_status(name, namespace, {"status": status}, _preload_content=False)
            return True
        except client.ApiException as exc:
            if exc.status == 404:
                return True  # the pod is gone: nothing left to report
            log.warning("pod status update failed", extra={"pod": f"{namespace}/{name}", "status": exc.status,
                                                           "reason": exc.reason})
            return False
        except Exception as exc:  # noqa: BLE001 - apiserver down (fault tests): retried on the next change
            log.warning("pod status update failed", extra={"pod": f"{namespace}/{name}", "error": repr(exc)})
            return False

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete (grace 0, this uid only); retried while the apiserver is away."""
        from kubernetes import client

        while True:
            try:
                self._core.delete_namespaced_pod(name, namespace, body={"gracePeriodSeconds": 0,
                                                                        "preconditions": {"uid": uid}},
                                                 _preload_content=False)
                return
            except client.ApiException as exc:
                if exc.status in (404, 409):
                    return
                log.warning("final pod delete failed", extra={"pod": f"{namespace}/{name}", "status": exc.status})
            except Exception as exc:  # noqa: BLE001 - apiserver down (fault tests)
                log.warning("final pod delete failed", extra={"pod": f"{namespace}/{name}", "error": repr(exc)[:300]})
            if self.stopping.wait(2.0):
                return

    # ---- node ---------------------------------------------------------------------------------------
    def _node_status(self) -> dict[str, Any]:
        now = now_rfc3339()
        conds = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        return {
            "capacity": NODE_CAPACITY,
            "allocatable": NODE_CAPACITY,
            "conditions": [{"type": t, "status": s, "reason": r, "message": "lagpilot pod runner",
                            "lastHeartbeatTime": now, "lastTransitionTime": self._node_started}
                           for t, s, r in conds],
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": self.node_name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "lagpilot", "systemUUID": "lagpilot", "bootID": "lagpilot",
                "kernelVersion": os.uname().release, "osImage": "lagpilot pod runner (local processes)",
                "containerRuntimeVersion": "lagpilot-podrunner://0.1", "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            },
        }

    def _register_node(self) -> None:
        from kubernetes import client

        self._node_started = now_rfc3339()
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name, "labels": self.labels},
                "spec": {}, "status": self._node_status()}
        try:
            self._core.create_node(body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            self._core.patch_node(self.node_name, {"metadata": {"labels": self.labels},
                                                   "spec": {"unschedulable": False}}, _preload_content=False)
        self._heartbeat()

    def _reap_stale_nodes(self) -> None:
        """Delete runner Nodes nobody heartbeats any more (a test session that crashed), so the pod
        GC removes their pods and their namespaces can finish terminating."""
        try:
            nodes = json.loads(self._core.list_node(label_selector="lagpilot.io/pod-runner=true",
                                                    _preload_content=False).data).get("items") or []
        except Exception as exc:  # noqa: BLE001 - housekeeping only
            log.warning("could not list runner nodes", extra={"error": repr(exc)[:300]})
            return
        now = dt.datetime.now(dt.timezone.utc)
        for node in nodes:
            name = node["metadata"]["name"]
            beats = [c.get("lastHeartbeatTime") for c in (node.get("status") or {}).get("conditions") or []
                     if c.get("type") == "Ready" and c.get("lastHeartbeatTime")]
            if name == self.node_name or not beats:
                continue
            last = dt.datetime.strptime(beats[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
            if (now - last).total_seconds() > self.stale_node_seconds:
                log.info("deleting stale pod-runner node", extra={"node": name, "last_heartbeat": beats[0]})
                with contextlib.suppress(Exception):
                    self._core.delete_node(name, _preload_content=False)

    def _heartbeat(self) -> None:
        from kubernetes import client

        self._core.patch_node_status(self.node_name, {"status": self._node_status()}, _preload_content=False)
        coord = client.CoordinationV1Api(self._api_client)
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.node_name, "leaseDurationSeconds": 40, "renewTime": now_micro()}}
        try:
            coord.patch_namespaced_lease(self.node_name, "kube-node-lease", {"spec": lease["spec"]},
                                         _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            coord.create_namespaced_lease("kube-node-lease", lease, _preload_content=False)

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.heartbeat_seconds):
            try:
                self._heartbeat()
            except Exception as exc:  # noqa: BLE001 - apiserver restarts in fault tests: keep beating
                log.warning("node heartbeat failed", extra={"node": self.node_name, "error": repr(exc)})

    # ---- pods ---------------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        """List (and reconcile), then watch from that version; relist every `resync_seconds` or on error."""
        from kubernetes.watch.watch import iter_resp_lines

        while not self.stopping.is_set():
            try:
                resp = self._core.list_pod_for_all_namespaces(_preload_content=False)
                listing = json.loads(resp.data)
                rv = listing["metadata"]["resourceVersion"]
                self._resync(listing.get("items") or [])
                stream = self._core.list_pod_for_all_namespaces(
                    watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=self.resync_seconds,
                    _preload_content=False, _request_timeout=(10, self.resync_seconds + 30))
                self._responses.append(stream)
                try:
                    for line in iter_resp_lines(stream):
                        if self.stopping.is_set():
                            return
                        if not line:
                            continue
                        event = json.loads(line)
                        etype, obj = event.get("type"), event.get("object") or {}
                        if etype == "ERROR":
                            break  # e.g. 410 Gone: relist
                        if etype == "BOOKMARK":
                            continue
                        self._on_pod(obj, deleted=(etype == "DELETED"))
                finally:
                    self._responses.remove(stream)
                    with contextlib.suppress(Exception):
                        stream.release_conn()
            except Exception as exc:  # noqa: BLE001 - apiserver down or restarting: retry
                if self.stopping.is_set():
                    return
                log.warning("pod watch failed, retrying", extra={"error": repr(exc)[:300]})
                self.stopping.wait(2.0)

    def _in_scope(self, namespace: str) -> bool:
        """Given namespaces: exactly those. Otherwise every namespace but those labelled
        `lagpilot.io/pod-runner=<another node>` (claimed by another runner, e.g. a test session's)."""
        if self.namespaces is not None:
            return namespace in self.namespaces
        owner = self._namespace_owner(namespace)
        return owner is None or owner == self.node_name

    def _namespace_owner(self, namespace: str) -> str | None:
        now = time.monotonic()
        cached = self._ns_owner_cache.get(namespace)
        if cached is not None and now - cached[1] < 60:
            return cached[0]
        try:
            ns = json.loads(self._core.read_namespace(namespace, _preload_content=False).data)
            owner = ((ns.get("metadata") or {}).get("labels") or {}).get(RUNNER_LABEL)
        except Exception:  # noqa: BLE001 - gone or unreachable: treat as unclaimed
            owner = None
        self._ns_owner_cache[namespace] = (owner, now)
        return owner

    def _resync(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self._on_pod(pod, deleted=False)
        with self._lock:
            missing = [w for uid, w in self._workers.items() if uid not in seen]
        for w in missing:
            self._forget(w)

    def _forget(self, w: PodWorker) -> None:
        w.on_deleted()
        with self._lock:
            self._workers.pop(w.uid, None)

    def _on_pod(self, pod: dict[str, Any], deleted: bool) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        if not self._in_scope(ns):
            return
        with self._lock:
            worker = self._workers.get(uid)
        if deleted:
            if worker is not None:
                self._forget(worker)
            return
        node = spec.get("nodeName")
        if not node:
            if (self.bind and not meta.get("deletionTimestamp")
                    and spec.get("schedulerName", "default-scheduler") == "default-scheduler"
                    and node_selector_matches(pod, self.labels)):
                self._bind(ns, name, uid)
            return
        if node != self.node_name:
            return
        if worker is None:
            worker = PodWorker(self, pod)
            with self._lock:
                self._workers[uid] = worker
            worker.update(pod)
            worker.start()
        else:
            worker.update(pod)

    def _bind(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes import client

        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}}
        try:
            self._core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
            log.info("bound pod", extra={"pod": f"{namespace}/{name}", "node": self.node_name})
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("binding failed", extra={"pod": f"{namespace}/{name}", "status": exc.status})


def main(argv: list[str] | None = None) -> int:
    """`python -m lagpilot_dev.podrunner`: run the pod runner in the foreground until SIGINT/SIGTERM."""
    import argparse

    from lagpilot_dev import logutil, paths

    logutil.setup()
    default_state = paths.state_dir(paths.cache_dir())
    ap = argparse.ArgumentParser(prog="python -m lagpilot_dev.podrunner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(default_state / "kube" / "admin.kubeconfig"))
    ap.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    ap.add_argument("--workdir", default=str(default_state / "podrunner"))
    ap.add_argument("--namespace", action="append", dest="namespaces", help="only these namespaces (repeatable)")
    ap.add_argument("--no-bind", action="store_true", help="do not bind unscheduled pods to this node")
    args = ap.parse_args(argv)
    runner = PodRunner(args.kubeconfig, node_name=args.node_name, workdir=Path(args.workdir),
                       namespaces=args.namespaces, bind=not args.no_bind)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    runner.start()
    done.wait()
    runner.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
