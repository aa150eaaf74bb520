"""Why consumer pods are not ready, from what the kubelet and the scheduler reported (pure).

The `Ready` condition says `ConsumersNotReady: 0/1 consumers ready`; on a real node the reason is
in the pods: a container killed by its memory limit (`OOMKilled`, exit 137) and restarting in
`CrashLoopBackOff`, an image the node cannot get, a pod the scheduler cannot place (`Insufficient
cpu`). `not_ready_detail` puts that into the condition's message, so `kubectl get bcg -o yaml`
(or `kubectl describe`) shows the cause without looking for the pods (docs/operator.md). Only
what the pod objects carry; no secrets are in them (env values are not read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_PODS = 2  # pods described in the message (the rest are counted)
MAX_TEXT = 160  # characters of a scheduler's or a termination's message


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _ready(pod: Mapping[str, Any]) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []
    )


def pod_problem(pod: Mapping[str, Any]) -> str | None:
    """What keeps one pod from being ready, or None when nothing the kubelet reported explains it
    (starting, probes not passed yet): the scheduler's refusal first, else each container's."""
    st = pod.get("status") or {}
    unscheduled = _unscheduled(st)
    if unscheduled is not None:
        return unscheduled
    limits = memory_limits(pod)
    parts = [
        p for cs in st.get("containerStatuses") or [] if (p := _container_problem(cs, limits)) is not None
    ]
    return "; ".join(parts) or None


def memory_limits(pod: Mapping[str, Any]) -> dict[Any, str | None]:
    """Each container's memory limit as its spec gives it (None: no limit), by container name."""
    return {
        c.get("name"): ((c.get("resources") or {}).get("limits") or {}).get("memory")
        for c in (pod.get("spec") or {}).get("containers") or []
    }


def termination_text(reason: str, exit_code: Any, memory: str | None) -> str:
    """`<reason> (exit <code>)`, with `, memory limit <limit>` inside for an OOM kill under a limit."""
    limit = f", memory limit {memory}" if reason == "OOMKilled" and memory else ""
    return f"{reason} (exit {exit_code}{limit})"


def _unscheduled(st: Mapping[str, Any]) -> str | None:
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"not scheduled ({c.get('reason') or 'Unschedulable'}: {_clip(c.get('message') or '')})"
    return None


def _container_problem(cs: Mapping[str, Any], limits: Mapping[Any, str | None]) -> str | None:
    """A container's last termination (an OOM kill with its memory limit), restarts and what it
    waits for now; or a waiting reason other than creating."""
    last = (cs.get("lastState") or {}).get("terminated") or {}
    now = cs.get("state") or {}
    waiting = (now.get("waiting") or {}).get("reason")
    if last.get("reason"):
        restarts = int(cs.get("restartCount") or 0)
        memory = limits.get(cs.get("name"))
        what = f"{cs.get('name')}: last terminated {termination_text(last['reason'], last.get('exitCode'), memory)}"
        if restarts:
            what += f", {restarts} restart{'s' if restarts != 1 else ''}"
        if waiting:
            what += f", now {waiting}"
        return what
    if waiting and waiting not in ("ContainerCreating", "PodInitializing"):
        msg = (now.get("waiting") or {}).get("message")
        return f"{cs.get('name')}: {waiting}" + (f" ({_clip(msg)})" if msg else "")
    return None


def not_ready_detail(pods: Sequence[Mapping[str, Any]]) -> str:
    """`<pod>: <problem>` for the not-ready pods that show one (at most MAX_PODS, then a count);
    "" when none does."""
    found = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name") or "")):
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or _ready(pod):
            continue
        problem = pod_problem(pod)
        if problem:
            found.append(f"{meta.get('name')}: {problem}")
    if not found:
        return ""
    more = len(found) - MAX_PODS
    return "; ".join(found[:MAX_PODS]) + (
        f"; and {more} more pod{'s' if more != 1 else ''}" if more > 0 else ""
    )
