"""What `lagpilot demo --keep` leaves running: the record of it (<out>/kept.json and one file per
namespace in the cache), what the demo prints about it, and how the next run in that namespace
stops it. On the real node (the default) that is the helm release and the kubelet's pods: nothing
of the demo's process keeps running. With --runner, the operator process and a background pod
runner."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lagpilot_dev.paths import cache_dir


def kept_file(ns: str) -> Path:
    """Where a --keep run records the pids it left for namespace ``ns``."""
    return cache_dir() / "demo" / f"kept-{ns}.json"


def write_kept(out: Path, ns: str, kept: dict[str, Any]) -> None:
    """<out>/kept.json, and the namespace's record the next run reads (best effort)."""
    with contextlib.suppress(OSError):
        (out / "kept.json").write_text(json.dumps(kept, indent=2) + "\n")
        kept_file(ns).parent.mkdir(parents=True, exist_ok=True)
        kept_file(ns).write_text(json.dumps({**kept, "out": str(out)}, indent=2) + "\n")


def stop_kept(ns: str, say: Callable[[str], None]) -> None:
    """The operator and pod runner a previous `--keep` run left for this namespace: stopped
    before the namespace is recreated (two operators must not reconcile one CR). Only pids whose
    command line is still that operator / pod runner are signalled."""
    path = kept_file(ns)
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    for key, marker, what in (
        ("podrunner_pid", "lagpilot_dev.podrunner", "pod runner"),
        ("operator_pid", "operator", "operator"),
    ):
        pid = kept.get(key)
        try:
            cmd = Path(f"/proc/{int(pid)}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, TypeError, ValueError):
            continue
        if marker not in cmd or "lagpilot" not in cmd or ns not in cmd:
            continue
        say(f"stopping the {what} (pid {pid}) a previous --keep run left")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGTERM)  # its own session: pgid == pid
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Path(f"/proc/{int(pid)}").exists():
            time.sleep(0.5)
        if Path(f"/proc/{int(pid)}").exists():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)
    with contextlib.suppress(OSError):
        path.unlink()


def kept_lines(
    *,
    ns: str,
    name: str,
    exports: list[str],
    kubectl: str | None,
    operator_pid: int | None,
    podrunner_pid: int | None,
    operator_metrics: str | None,
    operator_log: str,
    podrunner_log: str,
    prometheus_url: str | None,
) -> list[str]:
    """What `lagpilot demo --keep` prints at the end: what still runs, how to stop it, what to try."""
    out = ["The stack, the namespace and the BatchConsumerGroup stay up."]
    pids = [p for p in (operator_pid, podrunner_pid) if p is not None]
    if pids:
        out.append(
            "The operator and the pod runner keep running: a CR you apply or edit there is reconciled."
        )
        if operator_pid is not None:
            out.append(
                f"  operator:   pid {operator_pid}, log {operator_log}"
                + (f", metrics {operator_metrics}" if operator_metrics else "")
            )
        if podrunner_pid is not None:
            out.append(
                f"  pod runner: pid {podrunner_pid}, log {podrunner_log} (runs the consumer and drain pods)"
            )
        out.append(f"  stop them:  kill -TERM -- {' '.join(f'-{p}' for p in pids)}   # their process groups")
    else:
        out.append("The operator and the pod runner stopped with the demo (they were not running).")
    if prometheus_url:
        out.append(f"  Prometheus: {prometheus_url}")
    return out + _try_lines(ns, name, exports, kubectl)


def _try_lines(ns: str, name: str, exports: list[str], kubectl: str | None) -> list[str]:
    out = ["Try:"]
    out += [f"  {line}" for line in exports]
    if kubectl:
        out.append(f"  export PATH={Path(kubectl).parent}:$PATH   # the version-matched kubectl")
    out += [
        f"  kubectl get bcg -n {ns} -o wide",
        f"  kubectl describe bcg -n {ns} {name}",
        f"  kubectl get pods -n {ns} -w",
        f'  kubectl patch bcg -n {ns} {name} --type merge -p \'{{"spec":{{"scaling":{{"maxReplicas":2}}}}}}\'',
        f"  kubectl get events -n {ns} --sort-by=.lastTimestamp | tail",
        f"  kubectl delete bcg -n {ns} {name}   # with the operator running: its finalizer lets it go",
        "  .venv/bin/lagpilot dev down    # stops the stack",
    ]
    return out


def kept_lines_node(
    *,
    ns: str,
    name: str,
    op_ns: str,
    release: str,
    exports: list[str],
    kubectl: str | None,
    crictl: str | None,
    prometheus_url: str | None,
) -> list[str]:
    """What `lagpilot demo --keep` prints on the real node: the kubelet keeps running the pods and the
    operator is the helm release's Deployment, so there is no process of the demo's to stop; taking
    it down is the CR first (while the operator still runs, so its finalizer is released), then the
    release and both namespaces. The next run with this --namespace does the same by itself."""
    out = [
        "The stack, the namespace, the BatchConsumerGroup and the operator stay up on the node:",
        f"  operator:   helm release {release} in {op_ns} (a Deployment; the kubelet runs its pod)",
        f"  pods:       kubectl get pods -n {ns} -o wide"
        + (f";  the runtime's listing: {crictl} ps" if crictl else ""),
        "  a CR you apply or edit there is reconciled.",
        "  take it down (or run the demo again with this --namespace):",
        f"    kubectl delete bcg -n {ns} {name}   # first: the running operator releases its finalizer",
        f"    helm uninstall {release} -n {op_ns} && kubectl delete namespace {ns} {op_ns}",
    ]
    if prometheus_url:
        out.append(f"  Prometheus: {prometheus_url}")
    return out + _try_lines(ns, name, exports, kubectl)
