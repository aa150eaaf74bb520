"""Where the chaos bench's pods run, and how its faults reach them (docs/chaos.md "Pods on the real
node"): `NodePods`, the machine's real node (containers), answers what the fault rounds ask of
`self.runner` (the name from the pod runner's days, retired in issue 24 step 6):

- `pid_of(ns, pod)`: the host pid of the pod's running process (the init process of the pod's
  running container, from `crictl inspect`: killing it with SIGKILL
  ends every process of the container, as the kernel's OOM killer would, and the kubelet restarts
  or fails the pod by its restartPolicy). The drain faults walk its descendants in the host's /proc
  (the container's processes are host processes in their own PID namespace).
- `log_path(ns, pod)`: a file holding the pod's log (the API's log, the previous run first, written to the bench's work dir at each call, the last read kept
  when the pod is gone).

What only the pod runner could do (`hold`: keep a Deployment's new pods Pending, "no node fits")
has no counterpart on the shared node: the kinds that need it are "not applicable"
(`NODE_NOT_APPLICABLE`)."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from lagpilot_dev.node import container_pids

# kinds the bench cannot inject with its pods on the real node, and why (listed as not applicable,
# never injected, never counted as not fired): the node is the default state's, registered with the
# shared control plane, which no bench restarts; the pod runner's `hold` had no counterpart on a real
# node shared by other sessions (cordoning it would stop theirs too)
NODE_NOT_APPLICABLE: dict[str, str] = {
    "apiserver_restart": "the real node's apiserver is the shared stack's: never restarted by a bench",
    "etcd_restart": "the real node's etcd is the shared stack's: never restarted by a bench",
    "operator_at_next_alter_offsets": "needs a hold of new pods Pending (no node fits), which only the "
    "retired pod runner gave",
}

# the eos handler's crash hook on the node (bench/chaos/handler.py `crash_after_write`): LP_TEST_*
# through a CR is refused, and containers share no marker directory with the bench
CRASH_TABLE_KEY = "chaos.crash_table"


def node_kinds(kinds: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """(kinds injected on the node, kinds not applicable there) of `kinds` (pure)."""
    ks = set(kinds)
    na = tuple(sorted(ks & set(NODE_NOT_APPLICABLE)))
    return frozenset(ks - set(na)), na


CLAIM_SLACK_S = 1.0  # the API's times have whole seconds: a crash in the claim's second counts


def epoch(stamp: Any) -> float:
    """Seconds since the epoch of an RFC 3339 time (the API's whole seconds, crictl's nanoseconds),
    or of an epoch in seconds; 0.0 when unset (pure)."""
    if isinstance(stamp, (int, float)):
        return float(stamp)
    if not stamp or str(stamp).startswith("0001-"):
        return 0.0
    text = str(stamp).replace("Z", "+00:00")
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)  # nanoseconds: fromisoformat takes microseconds
    return datetime.fromisoformat(text).timestamp()


def hook_crash_in_status(statuses: Iterable[dict[str, Any]], claimed_at: float) -> dict[str, Any] | None:
    """The crash hook's crash seen in the pod's API container statuses (camelCase dicts, as
    `sanitize_for_serialization` gives them): a container whose last run ended with 137 at or after
    the claim and that runs again. None until then (pure). No restart count read before arming:
    the claim's time tells this crash from an earlier one (consumer_kill's, also 137)."""
    for c in statuses:
        last = (c.get("lastState") or {}).get("terminated") or {}
        if (
            last.get("exitCode") == 137
            and epoch(last.get("finishedAt")) >= claimed_at - CLAIM_SLACK_S
            and (c.get("state") or {}).get("running") is not None
            and int(c.get("restartCount") or 0) >= 1
        ):
            return {"exit_code": 137, "restarts": int(c["restartCount"]), "seen_by": "api"}
    return None


def hook_crash_in_runtime(containers: Iterable[dict[str, Any]], claimed_at: float) -> dict[str, Any] | None:
    """The same crash seen by the node's container runtime (`crictl inspect`'s `status` of each of
    the pod's containers, the kubelet's own source): one exited with 137 at or after the claim, and a
    later attempt of it running. None until then (pure)."""
    cs = list(containers)

    def attempt(c: dict[str, Any]) -> int:
        return int((c.get("metadata") or {}).get("attempt") or 0)

    for ended in cs:
        if (
            ended.get("state") != "CONTAINER_EXITED"
            or ended.get("exitCode") != 137
            or epoch(ended.get("finishedAt")) < claimed_at - CLAIM_SLACK_S
        ):
            continue
        again = [c for c in cs if c.get("state") == "CONTAINER_RUNNING" and attempt(c) > attempt(ended)]
        if again:
            return {"exit_code": 137, "restarts": max(attempt(c) for c in again), "seen_by": "runtime"}
    return None


class NodePods:
    """The bench's pods on the real node (the default state's node part)."""

    where = "node"

    def __init__(self, node: Any, core: Any, workdir: Path) -> None:
        self.node = node
        self.core = core
        self.workdir = workdir
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    def _inspect(self, cid: str) -> Any:
        return json.loads(self.node.crictl("inspect", cid).stdout or "{}")

    def _pod_containers(self, namespace: str, name: str, *state: str) -> dict[str, Any]:
        """`crictl ps -o json` of the pod's containers (`state`: e.g. `--state Running`, or `-a`)."""
        return dict(
            json.loads(
                self.node.crictl(
                    "ps",
                    *state,
                    "-o",
                    "json",
                    "--namespace",
                    namespace,
                    "--label",
                    f"io.kubernetes.pod.name={name}",
                ).stdout
                or "{}"
            )
        )

    def container_statuses(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """`crictl inspect`'s `status` of every container of the pod, running or exited."""
        listed = self._pod_containers(namespace, name, "-a")
        return [self._inspect(c["id"]).get("status") or {} for c in listed.get("containers", [])]

    def running_pids(self, namespace: str | None = None) -> dict[str, int]:
        return self.node.running_pids(namespace)  # type: ignore[no-any-return]

    def pid_of(self, namespace: str, name: str) -> int | None:
        listed = self._pod_containers(namespace, name, "--state", "Running")
        return container_pids(listed, self._inspect).get(name)

    def log_path(self, namespace: str, name: str) -> Path:
        from kubernetes.client.rest import ApiException

        path = self.workdir / "logs" / f"{namespace}_{name}.log"
        parts = []
        for previous in (True, False):
            try:
                parts.append(self.core.read_namespaced_pod_log(name, namespace, previous=previous))
            except ApiException as exc:  # no previous run, or the pod is gone: keep the last read
                if exc.status not in (400, 404):
                    raise
        if parts and "".join(parts):
            path.write_text("".join(parts))
        elif not path.exists():
            path.write_text("")
        return path

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """`sig` to the container's init process group (runc's init is a session leader: the group
        is the container's first process and what it did not move to a group of its own)."""
        os.killpg(pid, sig)

    def stop(self) -> None:
        """Nothing to stop: the node is the default state's (the namespace's deletion ends its pods)."""
