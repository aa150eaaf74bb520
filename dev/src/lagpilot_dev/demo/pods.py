"""`lagpilot demo --runner`: the pod runner (the kubelet stand-in, deleted with issue 24 step 6) in
this process while the demo runs (consumer and drain pods become local processes), stopped at the
end, or with --keep handed over to a background `python -m lagpilot_dev.podrunner` on the same node.
The default demo runs on the real node instead (lagpilot_dev.demo.node)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from lagpilot_dev.demo.config import RunNames
from lagpilot_dev.demo.console import DemoError


@dataclass
class PodRunnerHandle:
    """The in-process pod runner, and with --keep the background process that took it over."""

    names: RunNames
    info: Any  # the stack's connection details (StackInfo)
    runner: Any = None  # lagpilot_dev.podrunner.PodRunner
    kept_runner: subprocess.Popen[bytes] | None = None  # --keep: the background pod runner

    def start(self) -> None:
        from lagpilot_dev.podrunner import PodRunner

        self.runner = PodRunner(
            self.info.kubeconfig,
            node_name=self.names.node_name,
            workdir=self.names.out / "pods",
            namespaces=[self.names.ns],
        )
        self.runner.start()

    def stop(self, api: Any, delete_node: bool) -> None:
        """Stop it and its processes; ``delete_node``: its Node object would stay behind, NotReady."""
        from kubernetes import client

        if self.runner is not None:
            self.runner.stop()
            if delete_node and api is not None:
                with contextlib.suppress(client.ApiException):
                    client.CoreV1Api(api).delete_node(self.runner.node_name)
            self.runner = None

    def detach(self, api: Any) -> None:
        """--keep: the in-process pod runner (threads of this process) cannot outlive the demo, so
        it stops (its processes end, as on a node restart) and `python -m lagpilot_dev.podrunner`
        takes over the same node in its own session: it adopts the pods bound there (their restart
        counts go up by one) and keeps running them after the demo exits."""
        out = self.names.out
        node = self.runner.node_name
        before = restart_counts(api, self.names.ns)
        self.runner.stop()
        self.runner = None
        with open(out / "podrunner.log", "ab") as fh:
            argv = [
                sys.executable,
                "-m",
                "lagpilot_dev.podrunner",
                "--kubeconfig",
                str(self.info.kubeconfig),
                "--node-name",
                node,
                "--workdir",
                str(out / "pods"),
                "--namespace",
                self.names.ns,
            ]
            self.kept_runner = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        ready = None
        while time.monotonic() < deadline:
            if self.kept_runner.poll() is not None:
                raise DemoError(
                    f"the background pod runner exited with {self.kept_runner.returncode} "
                    f"(see {out / 'podrunner.log'})"
                )
            with contextlib.suppress(Exception):
                ready = sum(
                    1
                    for n, c in restart_counts(api, self.names.ns, ready_only=True).items()
                    if c > before.get(n, -1)
                )
            if ready:
                break
            time.sleep(1)
        print(
            f"      pod runner pid {self.kept_runner.pid} (node {node}): "
            f"{ready or 0} pod(s) running and ready again under it",
            flush=True,
        )


def restart_counts(api: Any, ns: str, ready_only: bool = False) -> dict[str, int]:
    """Pod name -> its container's restartCount (ready_only: only pods running and ready)."""
    from kubernetes import client

    out = {}
    for pod in client.CoreV1Api(api).list_namespaced_pod(ns).items:
        for cs in pod.status.container_statuses or []:
            if not ready_only or (cs.ready and cs.state is not None and cs.state.running is not None):
                out[pod.metadata.name] = int(cs.restart_count or 0)
    return out
