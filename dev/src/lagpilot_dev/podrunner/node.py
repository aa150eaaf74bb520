"""The runner's Node: registered Ready with capacity, its status and Lease heartbeat kept fresh (so
the node-lifecycle controller never taints it), and runner Nodes nobody heartbeats any more reaped."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from .base import KUBELET_VERSION, LOOPBACK, NODE_CAPACITY, log, now_micro, now_rfc3339


class NodeAgent:
    """Node `node_name` (labels `labels`) through one CoreV1Api (`core`) of `api_client`."""

    def __init__(
        self, core: Any, api_client: Any, node_name: str, labels: Mapping[str, str], stale_node_seconds: float
    ) -> None:
        self._core = core
        self._api_client = api_client
        self.node_name = node_name
        self.labels = dict(labels)
        self.stale_node_seconds = stale_node_seconds
        self._node_started = now_rfc3339()

    def status(self) -> dict[str, Any]:
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
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": "lagpilot pod runner",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": self._node_started,
                }
                for t, s, r in conds
            ],
            "addresses": [
                {"type": "InternalIP", "address": LOOPBACK},
                {"type": "Hostname", "address": self.node_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "lagpilot",
                "systemUUID": "lagpilot",
                "bootID": "lagpilot",
                "kernelVersion": os.uname().release,
                "osImage": "lagpilot pod runner (local processes)",
                "containerRuntimeVersion": "lagpilot-podrunner://0.1",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        from kubernetes import client

        self._node_started = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": self.labels},
            "spec": {},
            "status": self.status(),
        }
        try:
            self._core.create_node(body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            self._core.patch_node(
                self.node_name,
                {"metadata": {"labels": self.labels}, "spec": {"unschedulable": False}},
                _preload_content=False,
            )
        self.heartbeat()

    def reap_stale_nodes(self) -> None:
        """Delete runner Nodes nobody heartbeats any more (a test session that crashed), so the pod
        GC removes their pods and their namespaces can finish terminating."""
        try:
            nodes = (
                json.loads(
                    self._core.list_node(
                        label_selector="lagpilot.io/pod-runner=true", _preload_content=False
                    ).data
                ).get("items")
                or []
            )
        except Exception as exc:  # noqa: BLE001 - housekeeping only
            log.warning("could not list runner nodes", extra={"error": repr(exc)[:300]})
            return
        now = dt.datetime.now(dt.UTC)
        for node in nodes:
            name = node["metadata"]["name"]
            beats = [
                c.get("lastHeartbeatTime")
                for c in (node.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready" and c.get("lastHeartbeatTime")
            ]
            if name == self.node_name or not beats:
                continue
            last = dt.datetime.strptime(beats[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
            if (now - last).total_seconds() > self.stale_node_seconds:
                log.info("deleting stale pod-runner node", extra={"node": name, "last_heartbeat": beats[0]})
                with contextlib.suppress(Exception):
                    self._core.delete_node(name, _preload_content=False)

    def heartbeat(self) -> None:
        from kubernetes import client

        self._core.patch_node_status(self.node_name, {"status": self.status()}, _preload_content=False)
        coord = client.CoordinationV1Api(self._api_client)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": self.node_name, "leaseDurationSeconds": 40, "renewTime": now_micro()},
        }
        try:
            coord.patch_namespaced_lease(
                self.node_name, "kube-node-lease", {"spec": lease["spec"]}, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            coord.create_namespaced_lease("kube-node-lease", lease, _preload_content=False)

    def heartbeat_loop(self, stopping: threading.Event, period_s: float) -> None:
        while not stopping.wait(period_s):
            try:
                self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - apiserver restarts in fault tests: keep beating
                log.warning("node heartbeat failed", extra={"node": self.node_name, "error": repr(exc)})
