"""NetworkPolicy enforced on the real node (issue 24; issue 23's "NetworkPolicy enforced").

The policy is the one the operator creates for a CR's warm drain runtime
(`lagpilot.act.drain_runtime.build_network_policy`, owned by a real BatchConsumerGroup); the drain
pods carry the labels the operator gives a drain attempt's pods (`drain_manifests._labels`). The
node's policy agent is kube-router's policy controller (the `netpol` part, lagpilot_dev.netpol,
`--run-firewall` only).

A stand-in runtime (busybox httpd on the CR's runtime port, with the runtime's selector labels) and
three clients that ask it once a second: a pod labelled as the CR's drain pod, a pod without those
labels in the same namespace, and a pod with the drain labels in another namespace. First, without
the policy, all three reach it (the control: a refusal later is the policy's); then, with it, the
drain pod still does and the two others are refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import KubeEnv, wait_until
from tests.real.test_node import RESTRICTED_CONTAINER_SC, netpol, node  # noqa: F401 - fixtures

pytestmark = [pytest.mark.real, pytest.mark.node, pytest.mark.timeout(1800)]

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "batchconsumergroup.yaml"
# one line a second: OK (the runtime answered) or NO (refused or timed out); nc's own complaints
# go to /dev/null so that the log holds nothing else
CLIENT = (
    "while true; do if printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $TARGET_IP $TARGET_PORT 2>/dev/null "
    "| grep -q '200 OK'; then echo OK; else echo NO; fi; sleep 1; done"
)


def _pod(
    name: str,
    node: Any,
    labels: dict[str, str],
    command: str,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": node.info()["test_image"],
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", command],
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                    "securityContext": RESTRICTED_CONTAINER_SC,
                }
            ],
        },
    }


def _answers(node: Any, ns: str, name: str) -> list[str]:
    """The client's answers so far, read from the runtime (`crictl logs`): no apiserver-to-kubelet
    path needed (a control plane started before kube.py's --kubelet-preferred-address-types has none)."""
    ids = node.crictl(
        "ps", "-a", "-q", "--namespace", ns, "--label", f"io.kubernetes.pod.name={name}"
    ).stdout.split()
    if not ids:
        return []
    proc = node.crictl("logs", ids[0])
    return [line for line in (proc.stdout + proc.stderr).split() if line in ("OK", "NO")]


def test_drain_runtime_policy_admits_its_drain_pods_and_refuses_others(
    node: Any, netpol: Any, kube: KubeEnv, namespace: Callable[..., str]
) -> None:
    from lagpilot.act.drain_manifests import _labels as drain_pod_labels
    from lagpilot.act.drain_runtime import build_network_policy, runtime_port, selector_labels

    assert netpol.is_running(), "kube-router (the node's policy agent) is not running"
    ns, other_ns = namespace("np"), namespace("np-other")
    for n in (ns, other_ns):
        kube.kubectl("label", "namespace", n, "pod-security.kubernetes.io/enforce=restricted")
    cr = "np-cr"
    # the CR owns the policy (the garbage collector would delete a policy whose owner does not exist)
    kube.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=lagpilot-tests", "-f", str(CRD_FILE)
    )
    kube.kubectl(
        "wait", "--for=condition=Established", "crd/batchconsumergroups.lagpilot.io", "--timeout=120s"
    )
    bcg = {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": cr},
        "spec": {
            "kafka": {"bootstrapServers": "kafka.invalid:9092"},
            "topic": "t",
            "groupId": "np-cr-g",
            "processing": {"sink": "log"},
            "paused": True,
        },
    }
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(bcg))
    uid = json.loads(kube.kubectl("get", "bcg", cr, "-n", ns, "-o", "json").stdout)["metadata"]["uid"]
    port = runtime_port(ns, cr)

    server = _pod(
        "runtime",
        node,
        selector_labels(cr),
        f"mkdir -p /tmp/www && echo warm > /tmp/www/index.html && exec httpd -f -p {port} -h /tmp/www",
    )
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(server))

    def server_ip() -> str | None:
        pod = json.loads(kube.kubectl("get", "pod", "-n", ns, "runtime", "-o", "json").stdout)
        return pod["status"].get("podIP") if pod["status"].get("phase") == "Running" else None

    ip = wait_until(server_ip, "the stand-in runtime pod running", 300)
    target = {"TARGET_IP": ip, "TARGET_PORT": str(port)}
    drain_labels = drain_pod_labels(cr, f"{cr}-drain-1", "0.1.0")
    clients = {
        "drain": (ns, drain_labels),
        "stranger": (ns, {"app": "stranger"}),
        "elsewhere": (other_ns, drain_labels),
    }
    for name, (cns, labels) in clients.items():
        kube.kubectl(
            "apply", "-n", cns, "-f", "-", input_text=json.dumps(_pod(name, node, labels, CLIENT, target))
        )

    def all_reach() -> bool:
        return all(_answers(node, cns, name)[-3:] == ["OK"] * 3 for name, (cns, _) in clients.items())

    wait_until(all_reach, "every client reaching the runtime before the policy (the control)", 300)

    policy = build_network_policy(cr, ns, uid)
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(policy))

    def refused() -> dict[str, int] | None:
        answers = {name: _answers(node, cns, name) for name, (cns, _) in clients.items()}
        if all(a[-3:] == ["NO"] * 3 for n, a in answers.items() if n != "drain"):
            return {n: len(a) for n, a in answers.items()}
        return None

    seen = wait_until(refused, "the policy refusing the stranger and the other namespace's pod", 300)

    def later(name: str, count: int) -> list[str] | None:
        cns = clients[name][0]
        tail = _answers(node, cns, name)[seen[name] :]
        return tail if len(tail) >= count else None

    # from the moment both others were refused on: 5 more answers each
    drain_tail = wait_until(lambda: later("drain", 5), "5 more answers to the drain pod", 120)
    assert set(drain_tail) == {"OK"}, drain_tail
    assert set(wait_until(lambda: later("stranger", 5), "5 more answers to the stranger", 120)) == {"NO"}
    assert set(wait_until(lambda: later("elsewhere", 5), "5 more answers to the other namespace", 120)) == {
        "NO"
    }
