"""Spark's Kubernetes backend on the local stack: shared by tests and benches.

What tests/real/test_drain_k8s.py and the benches need:

- `drain_rbac_objects` / `apply_drain_rbac`: the chart's drain ServiceAccount, Role and RoleBinding
  for one namespace, as `helm template` renders them, applied with kubectl (the driver then runs
  with exactly that least-privilege identity);
- `client_mode_conf` (pure): the Spark conf of a driver that runs OUTSIDE a pod (a host process,
  e.g. a bench's `lagpilot drain`) and asks the API server for N executor pods of the consumer
  image (their entrypoint starts Spark's KubernetesExecutorBackend); plain values reach the
  executors through spark.executorEnv, Secret material only through secretKeyRef; the executor
  containers reach the driver at `driver_host`, on the real node the pod bridge's gateway;
- `executor_summary` (pure): how many executor pods a listing holds, running, terminating;
- `NodeSparkK8s`: for `bench/drain.py --executors ... --k8s` (client mode, the driver a host
  process): a namespace enforcing Pod Security `restricted` whose executor pods run as containers
  on the real node (`lagpilot_dev.node`), the chart's drain RBAC (+ `local_driver_objects`), a
  Secret, the drain ServiceAccount's kubeconfig for the driver, and the executors' host pids from
  the node's runtime (crictl). It replaced `LocalSparkK8s`, whose executors were the pod runner's
  local processes (issue 24 step 6).

Inside a pod (the operator's Job) the conf comes from `lagpilot.act.drain_manifests.spark_k8s_conf`
instead; this module is for the local stack only.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONSUMER_IMAGE = (
    "lagpilot/consumer:dev"  # the executors' image (its entrypoint: lagpilot_runtime.image_entrypoint)
)
DRAIN_COMPONENT = "drain"


DRAIN_KINDS = (
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def drain_rbac_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's drain ServiceAccount/Role/RoleBinding and its admission policy (+ binding) among
    rendered objects (pure)."""
    return [
        o
        for o in objects
        if o.get("kind") in DRAIN_KINDS
        and ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")
        == DRAIN_COMPONENT
    ]


def local_driver_objects(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """Dev-only extra rights of a driver that runs OUTSIDE a pod (the bench's local `lagpilot
    drain`): its executors have no driver pod to be owned by, so it must delete them itself (a
    label-selector delete: deletecollection); the chart's admission policy (executors owned by a
    pod) is not applied for it. Never part of the chart."""
    name = f"{service_account}-local-driver"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "deletecollection"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]


def apply_drain_rbac(kube_part: Any, namespace: str, release: str, local_driver: bool = False) -> str:
    """Render the chart for `release` with drain.namespaces=[namespace], apply its drain RBAC and
    admission policy; returns the drain ServiceAccount's name. `local_driver`: a driver outside any
    pod (the bench): no admission policy, plus `local_driver_objects`."""
    from lagpilot_dev import helm as h

    rendered = h.template(
        {"drain": {"namespaces": [namespace]}}, release=release, namespace=namespace, helm=h.ensure_helm()
    )
    rbac = drain_rbac_objects(rendered.objects)
    kinds = sorted(o["kind"] for o in rbac)
    if kinds != sorted(DRAIN_KINDS):
        raise RuntimeError(f"the chart's drain RBAC is not one of each of {DRAIN_KINDS}: {kinds}")
    sa = next(str(o["metadata"]["name"]) for o in rbac if o["kind"] == "ServiceAccount")
    if local_driver:
        rbac = [o for o in rbac if not o["kind"].startswith("ValidatingAdmissionPolicy")]
        rbac += local_driver_objects(namespace, sa)
    h.kubectl_apply(kube_part, rbac)
    return sa


def client_mode_conf(
    namespace: str,
    executors: int,
    cores: int,
    memory: str,
    pod_prefix: str,
    env: Mapping[str, str],
    secret_refs: Mapping[str, tuple[str, str]],
    labels: Mapping[str, str] | None = None,
    image: str = CONSUMER_IMAGE,
    driver_host: str = "127.0.0.1",
    request_cores: str | None = None,
    memory_overhead: str | None = None,
) -> dict[str, str]:
    """Spark conf for a driver outside the cluster asking the API server for `executors` pods of
    `cores` task slots each (pure). `env`: plain values for the executors; `secret_refs`:
    variable -> (Secret, key), never literal. The executors connect back to `driver_host` (the
    driver binds there too: on the real node the pod bridge's gateway, the host as pods see it).
    `request_cores`: each executor pod's CPU request (spark.kubernetes.executor.request.cores;
    Spark's default, a whole CPU per slot, leaves executors Pending on a small node).
    `memory_overhead`: spark.executor.memoryOverhead, the pod's memory beyond the JVM heap (its
    Python workers live there: the container's limit is heap + overhead, enforced by the cgroup)."""
    if executors < 1 or cores < 1:
        raise ValueError("executors and cores must be >= 1")
    conf = {
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.executor.podNamePrefix": pod_prefix.lower()[:40],
        "spark.executor.instances": str(executors),
        "spark.executor.cores": str(cores),
        "spark.executor.memory": memory,
        "spark.kubernetes.executor.deleteOnTermination": "true",  # no driver pod to own them: deleted here
        # as the operator's drains (spark_k8s_security_conf): RPC authenticated and encrypted, no
        # service or ConfigMap cleanup (the drain Role grants neither)
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        "spark.kubernetes.driver.service.deleteOnTermination": "false",
        "spark.kubernetes.executor.disableConfigMap": "true",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        # the driver is a host process: executors reach it at driver_host (containers on the node:
        # the bridge gateway; loopback would be the container's own)
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        # wait for every executor before the first task (as the Job's drain does with its instances)
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.kubernetes.executor.label.app.kubernetes.io/part-of": "lagpilot",
    }
    if request_cores:
        conf["spark.kubernetes.executor.request.cores"] = request_cores
    if memory_overhead:
        conf["spark.executor.memoryOverhead"] = memory_overhead
    for k, v in (labels or {}).items():
        conf[f"spark.kubernetes.executor.label.{k}"] = str(v)
    for name, (secret, key) in secret_refs.items():
        conf[f"spark.kubernetes.executor.secretKeyRef.{name}"] = f"{secret}:{key}"
    for k, v in env.items():
        if k not in secret_refs:
            conf[f"spark.executorEnv.{k}"] = str(v)
    return conf


def executor_summary(pods: list[dict[str, Any]]) -> dict[str, int]:
    """{total, running, terminating} of executor pod objects (pure)."""
    running = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return {
        "total": len(pods),
        "running": len(running),
        "terminating": sum(1 for p in pods if p["metadata"].get("deletionTimestamp")),
    }


RESTRICTED_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@dataclass
class NodeSparkK8s:
    """A namespace on the local kube-apiserver enforcing Pod Security `restricted`, whose pods the
    real node runs as containers (the default scheduler binds them there), with the chart's drain
    RBAC (+ `local_driver_objects`), a Secret `drain-env` holding `secret_data`, and the drain
    ServiceAccount's kubeconfig (`driver_kubeconfig`) for a driver that runs as a host process.
    `driver_host`: where the executor containers reach that driver (the node's bridge gateway).

    `kube_part`: lagpilot_dev.kube.KubePart; `node_part`: lagpilot_dev.node.NodePart (its crictl);
    `image`: the executors' image as the node names it."""

    kube_part: Any
    node_part: Any
    image: str = CONSUMER_IMAGE  # the executors' image, loaded into the node (never pulled)
    secret_data: Mapping[str, str] = field(default_factory=dict)
    prefix: str = "lpk8s"
    namespace: str = ""
    service_account: str = ""
    driver_kubeconfig: Path | None = None
    _api: Any = None
    _pids: dict[str, int] = field(default_factory=dict)  # container id -> host pid (crictl inspect)

    @property
    def server(self) -> str:
        return str(self.kube_part.server())

    @property
    def master(self) -> str:
        return f"k8s://{self.server}"

    @property
    def driver_host(self) -> str:
        from lagpilot_dev.node import POD_GATEWAY

        return POD_GATEWAY

    def start(self) -> NodeSparkK8s:
        from kubernetes import client, config

        self._api = config.new_client_from_config(config_file=str(self.kube_part.admin_kubeconfig))
        core = client.CoreV1Api(self._api)
        self.namespace = f"{self.prefix}-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": self.namespace, "labels": dict(RESTRICTED_LABELS)}})
        deadline = time.monotonic() + 120
        while True:  # the ServiceAccount admission plugin rejects pods until "default" exists
            try:
                core.read_namespaced_service_account("default", self.namespace)
                break
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        if self.secret_data:
            core.create_namespaced_secret(
                self.namespace, {"metadata": {"name": "drain-env"}, "stringData": dict(self.secret_data)}
            )
        self.service_account = apply_drain_rbac(
            self.kube_part, self.namespace, f"lpb-{uuid.uuid4().hex[:5]}", local_driver=True
        )
        self.driver_kubeconfig = self.kube_part.kubeconfig_for_service_account(
            self.namespace, self.service_account, create=False
        )
        return self

    def executor_pods(self, selector: str = "spark-role=executor") -> list[dict[str, Any]]:
        """Executor pod objects in the namespace, from the API server."""
        from kubernetes import client

        resp = client.CoreV1Api(self._api).list_namespaced_pod(
            self.namespace, label_selector=selector, _preload_content=False
        )
        return list(json.loads(resp.data)["items"])

    def running_pids(self) -> list[int]:
        """Host pids of the namespace's running containers' init processes, as the node's runtime
        reports them (`NodePart.running_pids`; each container inspected once, `_pids` its memory)."""
        return list(self.node_part.running_pids(self.namespace, known=self._pids).values())

    def stop(self) -> None:
        from kubernetes import client

        if self._api is not None:
            try:
                client.CoreV1Api(self._api).delete_namespace(self.namespace, propagation_policy="Background")
            except client.ApiException:
                pass
            self._api.close()
