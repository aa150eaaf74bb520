"""The kubelet's decisions and status shapes for a single-container pod: restart or end after an
exit (restart policy, crash back-off), exit codes of signals, terminated states, pod conditions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def terminated_state(
    exit_code: int,
    sig: int | None,
    started_at: str | None,
    finished_at: str,
    reason: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
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


# the kubelet's limits: a termination message file is read up to 4096 bytes; FallbackToLogsOnError
# takes the last 80 lines / 2048 bytes of the log
TERMINATION_MESSAGE_MAX = 4096
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048
# the runner's stand-in for the file the kubelet mounts at the container's terminationMessagePath
# (a local process cannot get its own /dev/termination-log): the runtime writes where this names
TERMINATION_LOG_ENV = "LAGPILOT_TERMINATION_LOG"


def termination_message(
    container: Mapping[str, Any], exit_code: int, message_file: Path, log_tail: str
) -> str | None:
    """What the kubelet puts in `state.terminated.message`: the termination message file's content,
    else (terminationMessagePolicy FallbackToLogsOnError and a failed exit) the log's tail."""
    try:
        text = message_file.read_bytes()[:TERMINATION_MESSAGE_MAX].decode("utf-8", "replace")
    except OSError:
        text = ""
    if text.strip():
        return text
    if exit_code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        lines = log_tail.splitlines()[-FALLBACK_LINES:]
        tail = "\n".join(lines).encode()[-FALLBACK_BYTES:].decode("utf-8", "replace")
        return tail or None
    return None


def pod_conditions(
    *, phase: str, ready: bool, started_at: str, transitions: dict[str, tuple[str, str]], now: str
) -> list[dict[str, Any]]:
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
        cond: dict[str, Any] = {
            "type": ctype,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": transitions[ctype][1],
        }
        if status == "False" and ctype in ("ContainersReady", "Ready"):
            cond["reason"] = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        out.append(cond)
    return out
