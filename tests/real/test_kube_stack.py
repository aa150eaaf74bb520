"""The local control plane is a real one: kubectl talks to it, RBAC applies, and the real
kube-controller-manager collects garbage, runs Deployments and Jobs (pods through the pod runner)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.paths import pid_alive
from tests.fixtures.kube import KubeEnv, wait_until

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


# A container that records its pid and, on SIGTERM, writes <dir>/<pod>.term and exits.
WORKER = textwrap.dedent("""
    import os, signal, sys, time
    out, me = sys.argv[1], os.environ["HOSTNAME"]
    def on_term(signum, frame):
        open(os.path.join(out, me + ".term"), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    with open(os.path.join(out, me + ".pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(out, me + ".pid.tmp"), os.path.join(out, me + ".pid"))  # atomic for the test
    while True:
        time.sleep(0.2)
""")


def _deployment(name: str, replicas: int, command: list[str]) -> dict[str, Any]:
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
                    "containers": [{"name": "worker", "image": "lagpilot/test:0", "command": command}],
                },
            },
        },
    }


@pytest.mark.slow
def test_deployment_replicas_are_local_processes_and_scale_to_zero(
    kube: KubeEnv, kube_api: Any, namespace: Any, pod_runner: Any, tmp_path: Path
) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(kube_api)
    ns = namespace()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    apps.create_namespaced_deployment(ns, _deployment("workers", 2, ["python", str(script), str(out)]))

    def two_ready() -> bool:
        line = kube.kubectl("get", "deploy", "workers", "-n", ns, "--no-headers").stdout.split()
        return len(line) > 1 and line[1] == "2/2"

    wait_until(two_ready, "kubectl get deploy to show 2/2", timeout=180)
    pids = pod_runner.running_pids(ns)
    assert len(pids) == 2
    for pod_name, pid in pids.items():
        # Ready comes with the process start (no probe): the script may not have written its file yet
        pid_file = out / f"{pod_name}.pid"
        wait_until(pid_file.exists, f"{pid_file.name}", timeout=60)
        assert pid_file.read_text() == str(pid)  # HOSTNAME is the pod name, as in a pod
        assert pid_alive(pid)
        assert str(script) in Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ")
    # the real ReplicaSet controller created them: they are owned by the Deployment's ReplicaSet
    rs_names = {rs.metadata.name for rs in apps.list_namespaced_replica_set(ns).items}
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns).items
    assert {p.metadata.owner_references[0].name for p in pods} <= rs_names and len(rs_names) == 1

    kube.kubectl("scale", "deploy", "workers", "-n", ns, "--replicas=0")
    wait_until(
        lambda: not client.CoreV1Api(kube_api).list_namespaced_pod(ns).items,
        "the pods to be deleted",
        timeout=180,
    )
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), "the processes to exit", timeout=60)
    assert {f.name for f in out.glob("*.term")} == {f"{name}.term" for name in pids}  # SIGTERMed, gracefully
    assert pod_runner.running_pids(ns) == {}


@pytest.mark.slow
def test_job_pod_runs_to_completion_and_the_job_controller_completes_the_job(
    kube: KubeEnv, kube_api: Any, namespace: Any, pod_runner: Any
) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_api)
    ns = namespace()
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "lagpilot/test:0",
                            "command": [
                                "python",
                                "-c",
                                "import os; print('job done in', os.environ['JOB_NS'])",
                            ],
                            "env": [
                                {
                                    "name": "JOB_NS",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                }
                            ],
                        }
                    ],
                }
            },
        },
    }
    batch.create_namespaced_job(ns, job)

    def complete() -> bool:
        st = batch.read_namespaced_job_status("once", ns).status
        return any(c.type == "Complete" and c.status == "True" for c in st.conditions or [])

    wait_until(complete, "the Job to be Complete", timeout=180)
    st = batch.read_namespaced_job_status("once", ns).status
    assert st.succeeded == 1 and not st.failed
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns, label_selector="job-name=once").items
    assert [p.status.phase for p in pods] == ["Succeeded"]
    log_path = pod_runner.log_path(ns, pods[0].metadata.name)
    assert f"job done in {ns}" in log_path.read_text()
    out = kube.kubectl("get", "job", "once", "-n", ns, "--no-headers").stdout
    assert "Complete" in out and "1/1" in out


@pytest.mark.slow
def test_control_plane_survives_kill_and_restart_on_its_data_dir(kube: KubeEnv, tmp_path: Path) -> None:
    """Fault tests SIGKILL parts and start them again: objects survive, the address and the
    kubeconfig stay valid, and a pod runner reconnects by itself. On a private control plane (its
    own state dir) so that other test sessions sharing the stack are not disturbed."""
    from kubernetes import client, config

    from lagpilot_dev import paths
    from lagpilot_dev.kube import KubePart
    from lagpilot_dev.podrunner import PodRunner

    part = KubePart(paths.cache_dir(), tmp_path / "state")
    part.start()
    runner = None
    try:
        kubeconfig_text = part.admin_kubeconfig.read_text()
        server = part.server()
        assert part.kubectl("create", "configmap", "survivor", "--from-literal=k=v").returncode == 0
        runner = PodRunner(
            part.admin_kubeconfig, node_name="restart-node", workdir=tmp_path / "runner"
        ).start()
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
        core.create_namespaced_pod("default", sleeper)
        wait_until(
            lambda: core.read_namespaced_pod("before", "default").status.phase == "Running", "pod Running"
        )

        for component in ("apiserver", "etcd", "controller-manager"):
            part.kill(component)
            assert not part.component_running(component)
        part.start()
        assert part.server() == server and part.admin_kubeconfig.read_text() == kubeconfig_text
        got = part.kubectl("get", "configmap", "survivor", "-o", "jsonpath={.data.k}")
        assert got.returncode == 0 and got.stdout == "v"

        sleeper["metadata"]["name"] = "after"
        wait_until(
            lambda: core.create_namespaced_pod("default", sleeper),
            "pod creation after the restart",
            timeout=60,
        )
        wait_until(
            lambda: core.read_namespaced_pod("after", "default").status.phase == "Running",
            "the reconnected pod runner to run a new pod",
            timeout=120,
        )
        assert core.read_namespaced_pod("before", "default").status.container_statuses[0].restart_count == 0
        api.close()

        part.stop()  # a graceful stop and start works the same
        assert not part.is_running()
        part.start()
        assert part.is_running()
    finally:
        if runner is not None:
            runner.stop()
        part.stop()
