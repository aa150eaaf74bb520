"""The local control plane is a real one: kubectl talks to it, RBAC applies, and the real
kube-controller-manager collects garbage, runs Deployments and Jobs, whose pods run where the `pods`
fixture says (tests/fixtures/node.py): containers of the real node (the test image, Pod Security
`restricted`).

`test_control_plane_survives_kill_and_restart_on_its_data_dir` kills and restarts a private control
plane (its own state dir, so that the shared one is never disturbed); the real node is one per
machine and registered with the shared apiserver, so no pod runs there: it checks that objects
(pods among them) survive and that the restarted controller-manager serves a new namespace."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.paths import pid_alive
from tests.fixtures.kube import KubeEnv, wait_until
from tests.fixtures.node import PodIO, Pods

pytestmark = pytest.mark.real


def _cm(name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
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
    kube.kubectl(
        "create", "rolebinding", "cm-reader", "-n", ns, "--role=cm-reader", f"--serviceaccount={ns}:limited"
    )
    wait_until(
        lambda: (
            kube.kubectl("get", "configmaps", "-n", ns, kubeconfig=sa_kubeconfig, check=False).returncode == 0
        ),
        "the RoleBinding to take effect",
        timeout=60,
    )


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
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def test_object_owned_by_a_custom_resource_is_collected_on_foreground_delete(
    kube_api: Any, namespace: Any
) -> None:
    """The operator's Deployments are owned by a CR: the GC must discover a new CRD and honour
    foreground deletion (the owner stays until its dependents are gone)."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_api)
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    wait_until(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in (ext.read_custom_resource_definition("widgets.test.lagpilot.io").status.conditions or [])
        ),
        "the Widget CRD to be established",
        timeout=60,
    )
    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    ns = namespace()
    widget = wait_until(
        lambda: custom.create_namespaced_custom_object(
            "test.lagpilot.io",
            "v1",
            ns,
            "widgets",
            {"apiVersion": "test.lagpilot.io/v1", "kind": "Widget", "metadata": {"name": "w1"}},
        ),
        "Widget creation",
        timeout=60,
    )
    core.create_namespaced_config_map(ns, _cm("child", widget))
    custom.delete_namespaced_custom_object(
        "test.lagpilot.io", "v1", ns, "widgets", "w1", body={"propagationPolicy": "Foreground"}
    )

    def both_gone() -> bool:
        cms = {cm.metadata.name for cm in core.list_namespaced_config_map(ns).items}
        widgets = custom.list_namespaced_custom_object("test.lagpilot.io", "v1", ns, "widgets")["items"]
        return "child" not in cms and not widgets

    # the GC picks up new resource types on its discovery resync (30 s): allow for several
    wait_until(both_gone, "the Widget and its ConfigMap to be deleted (foreground)", timeout=180)


# A worker as a container of the real node: it says who it is on stdout and, on SIGTERM,
# writes its termination message (the kubelet's /dev/termination-log, reported in the container's
# terminated state) and exits 0; a SIGKILL after the grace period would end it with 137.
NODE_WORKER = textwrap.dedent("""
    import os, signal, sys, time
    me = os.environ["HOSTNAME"]
    def on_term(signum, frame):
        with open("/dev/termination-log", "w") as f:
            f.write("SIGTERM " + me)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("worker", me, "pid", os.getpid(), flush=True)
    while True:
        time.sleep(0.2)
""")

RESTRICTED_CONTAINER_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _deployment(name: str, replicas: int, command: list[str], pods: Pods | None = None) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "containers": [_container("worker", command, pods)],
                },
            },
        },
    }


def _container(name: str, command: list[str], pods: Pods) -> dict[str, Any]:
    """A container spec: the test image (never pulled) under Pod Security `restricted`."""
    return {
        "name": name,
        "image": pods.image,
        "imagePullPolicy": "Never",
        "command": command,
        "securityContext": RESTRICTED_CONTAINER_SC,
    }


@pytest.mark.slow
def test_deployment_replicas_run_as_pods_and_scale_to_zero(
    kube: KubeEnv, kube_api: Any, pods: Pods, pod_io: PodIO
) -> None:
    """The real Deployment and ReplicaSet controllers make two pods that run (containers of the real
    node), each with its pod name as HOSTNAME; scaled to 0 the pods are
    deleted and each process ends on its SIGTERM, gracefully (not killed after the grace period)."""
    from kubernetes import client, watch

    apps = client.AppsV1Api(kube_api)
    core = client.CoreV1Api(kube_api)
    ns = pods.namespace()
    command = ["python", "-c", NODE_WORKER]
    marker = "/dev/termination-log"  # the container's init is `python -c <NODE_WORKER>`
    apps.create_namespaced_deployment(ns, _deployment("workers", 2, command, pods))

    def two_ready() -> bool:
        line = kube.kubectl("get", "deploy", "workers", "-n", ns, "--no-headers").stdout.split()
        return len(line) > 1 and line[1] == "2/2"

    wait_until(two_ready, "kubectl get deploy to show 2/2", timeout=180)

    def two_running() -> dict[str, int] | None:
        got = pods.node.running_pids(ns)
        return got if len(got) == 2 else None

    pids = wait_until(two_running, "two running pods", 60)
    assert len(pids) == 2
    for pod_name, pid in pids.items():
        # HOSTNAME is the pod name, as in a pod; the log through the API (the kubelet)
        wait_until(lambda n=pod_name: f"worker {n} pid" in pod_io.logs(ns, n), f"{pod_name}'s log", 60)
        assert core.read_namespaced_pod(pod_name, ns).spec.node_name == pods.node_name
        assert pid_alive(pid)
        assert marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ")
    # the real ReplicaSet controller created them: they are owned by the Deployment's ReplicaSet
    rs_names = {rs.metadata.name for rs in apps.list_namespaced_replica_set(ns).items}
    listed = core.list_namespaced_pod(ns)
    assert {p.metadata.owner_references[0].name for p in listed.items} <= rs_names and len(rs_names) == 1

    # each container's end as the kubelet reports it before the pod goes (exit code, message)
    ended: dict[str, Any] = {}
    stop = threading.Event()

    def watch_pods() -> None:
        w = watch.Watch()
        for ev in w.stream(
            core.list_namespaced_pod,
            ns,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=300,
        ):
            for cs in ev["object"].status.container_statuses or []:
                if cs.state is not None and cs.state.terminated is not None:
                    ended[ev["object"].metadata.name] = cs.state.terminated
            if stop.is_set():
                w.stop()

    threading.Thread(target=watch_pods, daemon=True).start()
    kube.kubectl("scale", "deploy", "workers", "-n", ns, "--replicas=0")
    wait_until(lambda: not core.list_namespaced_pod(ns).items, "the pods to be deleted", timeout=180)
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), "the processes to exit", timeout=60)
    stop.set()
    # SIGTERMed, gracefully: the handler's message and exit 0 (137 = SIGKILL after the grace period)
    assert set(ended) == set(pids), (ended, pids)
    for name, term in ended.items():
        assert (term.exit_code, term.message) == (0, f"SIGTERM {name}"), (name, term)
    assert pods.node.running_pids(ns) == {}


@pytest.mark.slow
def test_job_pod_runs_to_completion_and_the_job_controller_completes_the_job(
    kube: KubeEnv, kube_api: Any, pods: Pods, pod_io: PodIO
) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_api)
    ns = pods.namespace()
    main = _container("main", ["python", "-c", "import os; print('job done in', os.environ['JOB_NS'])"], pods)
    main["env"] = [{"name": "JOB_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [main]}},
        },
    }
    batch.create_namespaced_job(ns, job)

    def complete() -> bool:
        st = batch.read_namespaced_job_status("once", ns).status
        return any(c.type == "Complete" and c.status == "True" for c in st.conditions or [])

    wait_until(complete, "the Job to be Complete", timeout=180)
    st = batch.read_namespaced_job_status("once", ns).status
    assert st.succeeded == 1 and not st.failed
    job_pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns, label_selector="job-name=once").items
    assert [p.status.phase for p in job_pods] == ["Succeeded"]
    assert job_pods[0].spec.node_name == pods.node_name
    assert f"job done in {ns}" in pod_io.logs(ns, job_pods[0].metadata.name)
    out = kube.kubectl("get", "job", "once", "-n", ns, "--no-headers").stdout
    assert "Complete" in out and "1/1" in out


@pytest.mark.slow
def test_control_plane_survives_kill_and_restart_on_its_data_dir(kube: KubeEnv, tmp_path: Path) -> None:
    """Fault tests SIGKILL parts and start them again: objects survive, the address and the
    kubeconfig stay valid, and the controller-manager's controllers reconnect by themselves (a
    namespace made after the restart gets its default ServiceAccount). On a private control plane
    (its own state dir) so that other test sessions sharing the stack are not disturbed. No pod runs
    here: the one node per machine is registered with the shared apiserver (docs/node.md), so the
    pods this test makes stay Pending; that they survive the kills and can still be created is
    what it checks of them."""
    from kubernetes import client, config

    from lagpilot_dev import paths
    from lagpilot_dev.kube import KubePart

    part = KubePart(paths.cache_dir(), tmp_path / "state")
    part.start()
    try:
        kubeconfig_text = part.admin_kubeconfig.read_text()
        server = part.server()
        assert part.kubectl("create", "configmap", "survivor", "--from-literal=k=v").returncode == 0
        api = config.new_client_from_config(config_file=str(part.admin_kubeconfig))
        core = client.CoreV1Api(api)
        wait_until(
            lambda: core.read_namespaced_service_account("default", "default"), "default SA", timeout=60
        )
        sleeper = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "before"},
            "spec": {"containers": [{"name": "c", "image": "x", "command": ["sleep", "600"]}]},
        }
        uid = core.create_namespaced_pod("default", sleeper).metadata.uid

        for component in ("apiserver", "etcd", "controller-manager"):
            part.kill(component)
            assert not part.component_running(component)
        part.start()
        assert part.server() == server and part.admin_kubeconfig.read_text() == kubeconfig_text
        got = part.kubectl("get", "configmap", "survivor", "-o", "jsonpath={.data.k}")
        assert got.returncode == 0 and got.stdout == "v"
        assert core.read_namespaced_pod("before", "default").metadata.uid == uid

        sleeper["metadata"]["name"] = "after"
        wait_until(
            lambda: core.create_namespaced_pod("default", sleeper),
            "pod creation after the restart",
            timeout=60,
        )
        # the ServiceAccount controller (in the restarted controller-manager) serves a new namespace
        core.create_namespace({"metadata": {"name": "after-restart"}})
        wait_until(
            lambda: core.read_namespaced_service_account("default", "after-restart"),
            "the restarted controller-manager to make the new namespace's default ServiceAccount",
            timeout=120,
        )
        api.close()

        part.stop()  # a graceful stop and start works the same
        assert not part.is_running()
        part.start()
        assert part.is_running()
    finally:
        part.stop()
