"""The local control plane is a real one: kubectl talks to it, RBAC applies, and the real
kube-controller-manager collects garbage, runs Deployments and Jobs (pods through the pod runner)."""
from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import KubeEnv, wait_until

pytestmark = pytest.mark.real


def _cm(name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
        }]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def test_kubectl_reports_pinned_server_version(kube: KubeEnv) -> None:
    out = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == out["clientVersion"]["gitVersion"] == "v1.35.4"


def test_service_account_kubeconfig_is_subject_to_rbac(kube: KubeEnv, namespace: Any) -> None:
    ns = namespace()
    sa_kubeconfig = kube.kubeconfig_for_service_account(ns, "limited")
    who = kube.kubectl("auth", "whoami", "-o", "json", kubeconfig=sa_kubeconfig)
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:limited"
    denied = kube.kubectl("get", "configmaps", "-n", ns, kubeconfig=sa_kubeconfig, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    kube.kubectl("create", "role", "cm-reader", "-n", ns, "--verb=get,list", "--resource=configmaps")
    kube.kubectl("create", "rolebinding", "cm-reader", "-n", ns, "--role=cm-reader", f"--serviceaccount={ns}:limited")
    wait_until(lambda: kube.kubectl("get", "configmaps", "-n", ns, kubeconfig=sa_kubeconfig, check=False).returncode == 0,
               "the RoleBinding to take effect", timeout=60)


def test_owned_configmap_is_garbage_collected_with_its_owner(kube_api: Any, namespace: Any) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    ns = namespace()
    owner = kube_api.sanitize_for_serialization(core.create_namespaced_config_map(ns, _cm("owner")))
    owner.update(apiVersion="v1", kind="ConfigMap")
    core.create_namespaced_config_map(ns, _cm("owned", owner))
    core.create_namespaced_config_map(ns, _cm("bystander"))
    core.delete_namespaced_config_map("owner", ns)

    def owned_gone() -> bool:
        names = {cm.metadata.name for cm in core.list_namespaced_config_map(ns).items}
        return "owned" not in names

    wait_until(owned_gone, "the garbage collector to delete the owned ConfigMap", timeout=120)
    assert core.read_namespaced_config_map("bystander", ns).data == {"k": "v"}


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.lagpilot.io"},
    "spec": {
        "group": "test.lagpilot.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


def test_object_owned_by_a_custom_resource_is_collected_on_foreground_delete(kube_api: Any, namespace: Any) -> None:
    """The operator's Deployments are owned by a CR: the GC must discover a new CRD and honour
    foreground deletion (the owner stays until its dependents are gone)."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_api)
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    wait_until(lambda: any(c.type == "Established" and c.status == "True"
                           for c in (ext.read_custom_resource_definition("widgets.test.lagpilot.io").status.conditions or [])),
               "the Widget CRD to be established", timeout=60)
    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    ns = namespace()
    widget = wait_until(lambda: custom.create_namespaced_custom_object(
        "test.lagpilot.io", "v1", ns, "widgets", {"apiVersion": "test.lagpilot.io/v1", "kind": "Widget",
                                                   "metadata": {"name": "w1"}}), "Widget creation", timeout=60)
    core.create_namespaced_config_map(ns, _cm("child", widget))
    custom.delete_namespaced_custom_object("test.lagpilot.io", "v1", ns, "widgets", "w1",
                                           body={"propagationPolicy": "Foreground"})

    def both_gone() -> bool:
        cms = {cm.metadata.name for cm in core.list_namespaced_config_map(ns).items}
        widgets = custom.list_namespaced_custom_object("test.lagpilot.io", "v1", ns, "widgets")["items"]
        return "child" not in cms and not widgets

    # the GC picks up new resource types on its discovery resync (30 s): allow for several
    wait_until(both_gone, "the Widget and its ConfigMap to be deleted (foreground)", timeout=180)
