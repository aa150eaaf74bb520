"""What `lagpilot demo --keep` leaves running on the real node: the record of it (<out>/kept.json)
and what the demo prints about it. That is the helm release and the kubelet's pods: nothing of the
demo's process keeps running, and the next run with that --namespace uninstalls the release first
(lagpilot_dev.demo.node.NodeRun.install)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any


def write_kept(out: Path, kept: dict[str, Any]) -> None:
    """<out>/kept.json (best effort)."""
    with contextlib.suppress(OSError):
        (out / "kept.json").write_text(json.dumps(kept, indent=2) + "\n")


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
