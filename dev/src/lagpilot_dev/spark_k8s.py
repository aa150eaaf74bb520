"""Spark's Kubernetes backend on the local stack: shared by tests and benches.

What tests/real/test_drain_k8s.py and the benches need:

- `drain_rbac_objects` / `apply_drain_rbac`: the chart's drain ServiceAccount, Role and RoleBinding
  for one namespace, as `helm template` renders them, applied with kubectl (the driver then runs
  with exactly that least-privilege identity);
- `client_mode_conf` (pure): the Spark conf of a driver that runs OUTSIDE a pod (a local process,
  e.g. a bench's `lagpilot drain`) and asks the API server for N executor pods of the consumer
  image (their entrypoint starts Spark's KubernetesExecutorBackend); plain values reach the
  executors through spark.executorEnv, Secret material only through secretKeyRef;
- `executor_summary` (pure): how many executor pods a listing holds, running, terminating.

`LocalSparkK8s` (a namespace served by its own pod runner, for `bench/drain.py --executors ...
--k8s`'s driver outside a pod) went with the pod runner (issue 24 step 6); that bench mode refuses.

Inside a pod (the operator's Job) the conf comes from `lagpilot.act.drain_manifests.spark_k8s_conf`
instead; this module is for the local stack only.
"""

from __future__ import annotations

from collections.abc import Mapping
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
) -> dict[str, str]:
    """Spark conf for a driver outside the cluster asking the API server for `executors` pods of
    `cores` task slots each (pure). `env`: plain values for the executors; `secret_refs`:
    variable -> (Secret, key), never literal. The executors connect back to `driver_host`."""
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
        # the driver is a local process: executors (local processes too) reach it on loopback
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        # wait for every executor before the first task (as the Job's drain does with its instances)
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.kubernetes.executor.label.app.kubernetes.io/part-of": "lagpilot",
    }
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
