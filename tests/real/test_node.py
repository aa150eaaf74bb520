"""The real node (lagpilot_dev.node): kubelet + containerd + runc + CNI on the local control plane.

Checked with real clients only: kubectl for the API's view, crictl against the node's containerd
for the runtime's, the memory cgroup's verdict (OOMKilled) as the kubelet reports it, and a TCP
connection from the host to a pod IP. The pods go to the node's scheduler, the cluster's default
(lagpilot_dev.node.SCHEDULER_NAME), and run as containers.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import KubeEnv, wait_until
from tests.fixtures.node import netpol, node  # noqa: F401 - fixtures (imported from here by the other node tests)

pytestmark = [pytest.mark.real, pytest.mark.node]


def _restricted_ns(kube: KubeEnv, namespace: Callable[..., str]) -> str:
    ns = namespace("node")
    kube.kubectl(
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    return ns


RESTRICTED_CONTAINER_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod(
    name: str,
    node: Any,
    command: str,
    *,
    restricted: bool = True,
    memory: str | None = None,
    restart: str = "Never",
    grace: int | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": node.info()["test_image"],
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", command],
    }
    if restricted:
        container["securityContext"] = RESTRICTED_CONTAINER_SC
    if memory:
        container["resources"] = {
            "limits": {"memory": memory, "cpu": "200m"},
            "requests": {"memory": memory, "cpu": "10m"},
        }
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [container],
        "automountServiceAccountToken": False,
    }
    if restricted:
        spec["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _apply(kube: KubeEnv, ns: str, obj: dict[str, Any], check: bool = True) -> Any:
    return kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(obj), check=check)


def _get_pod(kube: KubeEnv, ns: str, name: str) -> dict[str, Any]:
    return json.loads(kube.kubectl("get", "pod", "-n", ns, name, "-o", "json").stdout)


def _running(kube: KubeEnv, ns: str, name: str) -> dict[str, Any] | None:
    pod = _get_pod(kube, ns, name)
    statuses = pod.get("status", {}).get("containerStatuses") or []
    if pod["status"].get("phase") == "Running" and statuses and statuses[0].get("ready"):
        return pod
    return None


def test_node_registers_ready_with_containerd(node: Any, kube: KubeEnv) -> None:
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    (mine,) = [n for n in nodes if n["metadata"]["name"] == node.info()["node_name"]]
    ready = {c["type"]: c["status"] for c in mine["status"]["conditions"]}
    assert ready["Ready"] == "True"
    info = mine["status"]["nodeInfo"]
    assert info["kubeletVersion"] == node.info()["kube_version"]
    assert info["containerRuntimeVersion"] == "containerd://" + node.info()["containerd_version"].lstrip("v")
    addresses = {a["type"]: a["address"] for a in mine["status"]["addresses"]}
    assert addresses["InternalIP"] == node.info()["node_ip"]


def test_restricted_pod_runs_as_container_reachable_from_host(
    node: Any, kube: KubeEnv, namespace: Callable[..., str]
) -> None:
    ns = _restricted_ns(kube, namespace)
    # the enforcement fires: a pod without the restricted securityContext is refused at admission
    refused = _apply(kube, ns, _pod("plain", node, "sleep 3600", restricted=False), check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr
    # a restricted pod serving HTTP from its (writable) /tmp as uid 65534
    _apply(
        kube,
        ns,
        _pod(
            "web",
            node,
            "echo served-by-$(id -u) > /tmp/index.html && exec httpd -f -p 8080 -h /tmp",
            memory="32Mi",
        ),
    )
    pod = wait_until(lambda: _running(kube, ns, "web"), "pod web Running", timeout=180)
    assert pod["spec"]["nodeName"] == node.info()["node_name"]  # bound by the real scheduler
    # the runtime's view: a sandbox and a running container for it, on the node's containerd
    sandboxes = json.loads(node.crictl("pods", "--namespace", ns, "--name", "web", "-o", "json").stdout)[
        "items"
    ]
    (sandbox,) = [s for s in sandboxes if s["state"] == "SANDBOX_READY"]
    containers = json.loads(node.crictl("ps", "--pod", sandbox["id"], "-o", "json").stdout)["containers"]
    (ctr,) = containers
    assert ctr["state"] == "CONTAINER_RUNNING" and ctr["metadata"]["name"] == "main"
    assert ctr["id"].startswith(pod["status"]["containerStatuses"][0]["containerID"].split("//", 1)[1][:12])
    # the host reaches the pod IP (CNI bridge); the answer proves the non-root uid
    pod_ip = pod["status"]["podIP"]
    with urllib.request.urlopen(f"http://{pod_ip}:8080/index.html", timeout=10) as resp:
        assert resp.read().decode().strip() == "served-by-65534"


def test_memory_limit_is_enforced_by_the_cgroup(
    node: Any, kube: KubeEnv, namespace: Callable[..., str]
) -> None:
    ns = _restricted_ns(kube, namespace)
    hog = "dd if=/dev/zero of=/dev/null bs=96M count=1 && echo allocated"
    # control: the same allocation under a limit that holds it completes
    _apply(kube, ns, _pod("roomy", node, hog, memory="256Mi"))
    done = wait_until(
        lambda: (p := _get_pod(kube, ns, "roomy"))["status"].get("phase") in ("Succeeded", "Failed") and p,
        "pod roomy finished",
        timeout=180,
    )
    assert done["status"]["phase"] == "Succeeded"
    # under a 48 Mi limit the kernel's memory cgroup kills it, and the kubelet says so
    _apply(kube, ns, _pod("tight", node, hog, memory="48Mi", restart="Always"))

    def oom_killed() -> dict[str, Any] | None:
        (st,) = _get_pod(kube, ns, "tight")["status"].get("containerStatuses") or [None]
        return (
            st
            if st and (st.get("lastState") or {}).get("terminated", {}).get("reason") == "OOMKilled"
            else None
        )

    st = wait_until(oom_killed, "container of pod tight OOMKilled", timeout=180)
    assert st["lastState"]["terminated"]["exitCode"] == 137
    # and the limit is the container's cgroup limit as the runtime set it
    cid = st["containerID"].split("//", 1)[1]
    inspect = json.loads(node.crictl("inspect", cid).stdout)
    assert inspect["info"]["runtimeSpec"]["linux"]["resources"]["memory"]["limit"] == 48 * 1024 * 1024


def test_deleted_pod_gets_sigterm_within_its_grace_period(
    node: Any, kube: KubeEnv, kube_api: Any, namespace: Callable[..., str]
) -> None:
    from kubernetes import client, watch

    ns = _restricted_ns(kube, namespace)
    # exit 42 only from the TERM trap: SIGKILL (after the grace period) would give 137
    _apply(
        kube,
        ns,
        _pod("term", node, "trap 'echo got-TERM; exit 42' TERM; while true; do sleep 1; done", grace=60),
    )
    wait_until(lambda: _running(kube, ns, "term"), "pod term Running", timeout=180)
    core = client.CoreV1Api(kube_api)
    rv = core.read_namespaced_pod("term", ns).metadata.resource_version
    kube.kubectl("delete", "pod", "-n", ns, "term", "--wait=false")
    seen: list[dict[str, Any]] = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod,
        ns,
        field_selector="metadata.name=term",
        resource_version=rv,
        timeout_seconds=120,
    ):
        statuses = ev["object"].status.container_statuses or []
        term = statuses[0].state.terminated if statuses else None
        if term is not None:
            seen.append({"type": ev["type"], "exit_code": term.exit_code, "reason": term.reason})
        if ev["type"] == "DELETED":
            w.stop()
    assert seen, "the kubelet never reported the container terminated"
    assert seen[-1]["exit_code"] == 42, seen


def test_service_cluster_ip_reaches_the_pod_through_kube_proxy(
    node: Any, kube: KubeEnv, namespace: Callable[..., str]
) -> None:
    ns = _restricted_ns(kube, namespace)
    web = _pod(
        "web",
        node,
        "echo served-by-$(id -u) > /tmp/index.html && exec httpd -f -p 8080 -h /tmp",
        memory="32Mi",
    )
    web["metadata"]["labels"] = {"app": "web"}
    _apply(kube, ns, web)
    _apply(
        kube,
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    wait_until(lambda: _running(kube, ns, "web"), "pod web Running", timeout=180)
    svc = json.loads(kube.kubectl("get", "service", "-n", ns, "web", "-o", "json").stdout)
    cluster_ip = svc["spec"]["clusterIP"]

    def served_from_host() -> str | None:
        with urllib.request.urlopen(f"http://{cluster_ip}/index.html", timeout=5) as resp:
            return resp.read().decode().strip()

    # kube-proxy programs the Service once the EndpointSlice names the ready pod
    assert (
        wait_until(served_from_host, f"Service {cluster_ip}:80 answering from the host", timeout=120)
        == "served-by-65534"
    )
    # and from another pod: exit 0 only if the page came back through the Service
    _apply(
        kube,
        ns,
        _pod(
            "client",
            node,
            "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | "
            f"nc -w 5 {cluster_ip} 80 | grep -qx served-by-65534",
        ),
    )
    done = wait_until(
        lambda: (p := _get_pod(kube, ns, "client"))["status"].get("phase") in ("Succeeded", "Failed") and p,
        "pod client finished",
        timeout=180,
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_cluster_dns_answers_service_names_to_pods(
    node: Any, kube: KubeEnv, namespace: Callable[..., str]
) -> None:
    ns = _restricted_ns(kube, namespace)
    _apply(
        kube,
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "names"},
            "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]},
        },
    )
    cluster_ip = json.loads(kube.kubectl("get", "service", "-n", ns, "names", "-o", "json").stdout)["spec"][
        "clusterIP"
    ]
    fqdn = f"names.{ns}.svc.cluster.local"
    # exit 0 only if the kubelet gave the pod the cluster DNS and it answered the Service's IP
    script = (
        f"grep -qx 'nameserver {node.info()['cluster_dns']}' /etc/resolv.conf && "
        f"grep -q 'search {ns}.svc.cluster.local svc.cluster.local cluster.local' /etc/resolv.conf && "
        f"nslookup {fqdn} | grep -q 'Address: {cluster_ip}$'"
    )
    _apply(kube, ns, _pod("resolver", node, script))
    done = wait_until(
        lambda: (p := _get_pod(kube, ns, "resolver"))["status"].get("phase") in ("Succeeded", "Failed") and p,
        "pod resolver finished",
        timeout=180,
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]
