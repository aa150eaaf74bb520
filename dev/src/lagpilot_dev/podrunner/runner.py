"""The runner: one per Node, it watches the Pods in its scope, binds unscheduled ones to its Node
(the scheduler's job), starts a PodWorker per Pod bound to it, and stops them all on stop()."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import DEFAULT_NODE_NAME, RUNNER_LABEL, log, venv_bin
from .container import DEFAULT_ENTRYPOINTS
from .env import base_env
from .kubeapi import PodApi
from .node import NodeAgent
from .worker import PodWorker


def node_selector_matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    sel = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(k) == v for k, v in sel.items())


def _default_metrics_sd_dir() -> Path | None:
    from lagpilot_dev.prometheus import pods_sd_dir

    return pods_sd_dir()


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
    # fault injection (bench/chaos.py): an unbound pod this returns True for is not bound, so it stays
    # Pending, as on a cluster where no node fits it; asked at each event and resync. After clearing it,
    # `bind_pending` binds the pods it held at once (else the next resync does)
    hold: Callable[[Mapping[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.stopping = threading.Event()
        self.venv_bin = venv_bin()
        self.python = str(self.venv_bin / "python") if (self.venv_bin / "python").exists() else sys.executable
        self.labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "lagpilot.io/pod-runner": "true",
        }
        self._workers: dict[str, PodWorker] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._responses: list[Any] = []
        self._ns_owner_cache: dict[str, tuple[str | None, float]] = {}
        self._api_client: Any = None
        self._core: Any = None
        self._api: Any = None  # kubeapi.PodApi, from start()
        self._node: NodeAgent | None = None

    # ---- lifecycle --------------------------------------------------------------------------------
    def start(self) -> PodRunner:
        """Register the Node, then watch Pods in background threads. Returns self."""
        from kubernetes import client, config

        self.workdir.mkdir(parents=True, exist_ok=True)
        self._api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        self._core = client.CoreV1Api(self._api_client)
        self._api = PodApi(self._core, self._api_client, self.stopping)
        self._node = NodeAgent(
            self._core, self._api_client, self.node_name, self.labels, self.stale_node_seconds
        )
        self._node.register()
        self._node.reap_stale_nodes()
        t = threading.Thread(target=self._watch_loop, name="podrunner-watch", daemon=True)
        t.start()
        self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat_loop, name="podrunner-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)
        log.info(
            "pod runner started",
            extra={
                "node": self.node_name,
                "workdir": str(self.workdir),
                "namespaces": "*" if self.namespaces is None else "(given)",
            },
        )
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
        return {
            w.name: pid
            for w in workers
            if (namespace is None or w.namespace == namespace) and (pid := w.pid()) is not None
        }

    # ---- API helpers used by the workers ---------------------------------------------------------
    def base_env(self, pod_name: str) -> dict[str, str]:
        return base_env(pod_name, self.venv_bin, self.extra_env)

    def get_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self._api.get_secret(namespace, name)

    def test_env(self, namespace: str) -> dict[str, str]:
        return self._api.test_env(namespace)

    def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self._api.get_config_map(namespace, name)

    def pod_credentials(self, pod: Mapping[str, Any], pod_dir: Path) -> Path:
        """The pod's in-cluster credentials as a kubeconfig path (kubeapi.PodApi.pod_credentials)."""
        return self._api.pod_credentials(pod, pod_dir)

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        return self._api.patch_pod_status(namespace, name, status)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._api.delete_pod(namespace, name, uid)

    # ---- node ---------------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        assert self._node is not None
        self._node.heartbeat_loop(self.stopping, self.heartbeat_seconds)

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
                    watch=True,
                    resource_version=rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=self.resync_seconds,
                    _preload_content=False,
                    _request_timeout=(10, self.resync_seconds + 30),
                )
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
            hold = self.hold
            if hold is not None and hold(pod):
                return
            if (
                self.bind
                and not meta.get("deletionTimestamp")
                and spec.get("schedulerName", "default-scheduler") == "default-scheduler"
                and node_selector_matches(pod, self.labels)
            ):
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

    def bind_pending(self, namespace: str) -> int:
        """Bind the unbound pods of `namespace` now (those `hold` kept Pending, once it no longer
        holds them) instead of at the next resync. Returns how many unbound pods it looked at."""
        listing = json.loads(self._core.list_namespaced_pod(namespace, _preload_content=False).data)
        pending = [p for p in listing.get("items") or [] if not (p.get("spec") or {}).get("nodeName")]
        for pod in pending:
            self._on_pod(pod, deleted=False)
        return len(pending)

    def _bind(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes import client

        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        try:
            self._core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
            log.info("bound pod", extra={"pod": f"{namespace}/{name}", "node": self.node_name})
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("binding failed", extra={"pod": f"{namespace}/{name}", "status": exc.status})
