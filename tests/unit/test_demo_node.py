"""`lagpilot demo` on the node, its default (lagpilot_dev.demo.node): the pure parts. The CR names the demo image and
never pulls it, the release's values, the namespaces' labels, the demo image's build definition,
and the record of which pods ran as containers (from `crictl ps -a -o json` and the API's pods)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lagpilot.spec import parse_spec
from lagpilot_dev.demo.config import HANDLER, RunNames, manifest, profile_for
from lagpilot_dev.demo.node import (
    DRAIN_CPU_PER_TASK_M,
    NODE_CPU_M,
    NODE_PARTS,
    containers_of,
    format_listing,
    helm_values,
    image_names,
    namespace_labels,
    operator_namespace,
    pods_without_containers,
)
from lagpilot_dev.demo.run import parse_args
from lagpilot_dev.images.build import IMAGES

REPO = Path(__file__).resolve().parents[2]


def test_the_node_is_the_demos_only_path() -> None:
    """Issue 24 step 6: `./dev/demo` runs on the real node; the pod runner is gone, and --runner with
    it. --node, the old opt-in, still parses and means the default."""
    assert parse_args([]).node is True and not hasattr(parse_args([]), "runner")
    assert parse_args(["--node"]).node is True
    # the bare-consumer aid has no pods at all
    assert parse_args(["--no-operator"]).node is False
    assert NODE_PARTS[-2:] == ("node", "netpol") and {"kafka", "kube", "postgres", "spark"} <= set(NODE_PARTS)
    for argv in (["--node", "--no-operator"], ["--runner"]):
        with pytest.raises(SystemExit):
            parse_args(argv)


def test_keep_on_the_node_names_the_release_and_no_background_process() -> None:
    """--keep on the node leaves the helm release, the namespaces and the CR: the kubelet runs the
    pods, so no pid to kill (no background pod runner); how to take it down is helm + kubectl."""
    from lagpilot_dev.demo.keep import kept_lines_node

    lines = kept_lines_node(
        ns="lagpilot-demo",
        name="orders-demo",
        op_ns="lagpilot-demo-operator",
        release="lagpilot-demo",
        exports=["export KUBECONFIG=/s/admin.kubeconfig"],
        kubectl="/c/kube/bin/kubectl",
        crictl="/c/node/bin/crictl --runtime-endpoint unix:///run/x.sock",
        prometheus_url=None,
    )
    text = "\n".join(lines)
    assert "kill" not in text and "podrunner" not in text and "pod runner" not in text
    assert "  helm uninstall lagpilot-demo -n lagpilot-demo-operator" in text
    assert "kubectl delete bcg -n lagpilot-demo orders-demo" in text  # before the release goes: the finalizer
    assert text.index("kubectl delete bcg") < text.index("helm uninstall")
    assert "  kubectl describe bcg -n lagpilot-demo orders-demo" in lines
    assert "/c/node/bin/crictl --runtime-endpoint unix:///run/x.sock ps" in text
    assert "export KUBECONFIG=/s/admin.kubeconfig" in lines[lines.index("Try:") + 1]


def test_manifest_on_the_node_names_the_demo_image_never_pulled(tmp_path: Path) -> None:
    names = RunNames.new("ns", str(tmp_path))
    profile = profile_for("default", False)
    plain = manifest(names, profile, "127.0.0.1:9092")["spec"]
    on_node = manifest(names, profile, "10.244.0.1:9093", IMAGES["demo"].reference)["spec"]
    parse_spec(on_node)  # the operator accepts it
    assert "image" not in plain["template"] and "imagePullPolicy" not in plain["template"]
    assert on_node["template"]["image"] == "lagpilot/demo-consumer:0.1.0"
    assert on_node["template"]["imagePullPolicy"] == "Never"
    assert on_node["kafka"]["bootstrapServers"] == "10.244.0.1:9093"
    assert on_node["template"]["env"] == plain["template"]["env"]  # the DSN still only as a secretKeyRef
    assert on_node["processing"] == plain["processing"] and on_node["processing"]["handler"] == HANDLER


def test_demo_image_adds_the_handler_package_to_the_consumer_image() -> None:
    img = IMAGES["demo"]
    assert list(IMAGES).index("demo") > list(IMAGES).index("consumer")  # built after its FROM
    dockerfile = (REPO / img.dockerfile).read_text().splitlines()
    steps = [line for line in dockerfile if line and not line.startswith("#")]
    assert steps[0] == f"FROM {IMAGES['consumer'].reference}"
    module, _ = HANDLER.split(":")
    package = module.split(".")[0]
    assert steps[1].endswith(f"/opt/lagpilot/handlers/{package}/")  # on the consumer image's PYTHONPATH
    for src in steps[1].split()[1:-1]:
        assert (REPO / src).is_file(), src
        assert f"!{src}" in (REPO / img.ignorefile).read_text()  # in the build context


def test_release_values_render_the_operator_with_the_loaded_image_and_the_cpu_per_task() -> None:
    from lagpilot_dev import helm as h

    helm = h.find_helm()
    if helm is None:
        pytest.skip("helm not installed (dev/install-helm.sh)")
    values = helm_values("lagpilot-demo", "lagpilot/operator:0.1.0")
    rendered = h.template(values, release="lagpilot-demo", namespace="lagpilot-demo-operator", helm=helm)
    container = rendered.get("Deployment", "lagpilot-demo")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "lagpilot/operator:0.1.0" and container["imagePullPolicy"] == "Never"
    assert "--namespace=lagpilot-demo" in container["args"]
    assert {"name": "LAGPILOT_DRAIN_CPU_PER_TASK_M", "value": str(DRAIN_CPU_PER_TASK_M)} in container["env"]
    assert values["watchNamespaces"] == ["lagpilot-demo"]
    assert values["image"] == {"repository": "lagpilot/operator", "tag": "0.1.0", "pullPolicy": "Never"}
    assert values["operator"]["extraEnv"] == [
        {"name": "LAGPILOT_DRAIN_CPU_PER_TASK_M", "value": str(DRAIN_CPU_PER_TASK_M)}
    ]
    # what the scheduler reserves on the 2-core node: the operator, the most consumers, the warm
    # runtime and a cold drain Job (lagpilot.act.drain_manifests: max(500m, tasks x per task)) at once
    import yaml

    from lagpilot.act.deployment import DEFAULT_RESOURCES

    def milli(cpu: str) -> int:
        return int(cpu.removesuffix("m")) if cpu.endswith("m") else int(float(cpu) * 1000)

    operator_m = milli(
        yaml.safe_load((REPO / "charts/lagpilot/values.yaml").read_text())["resources"]["requests"]["cpu"]
    )
    consumer_m = milli(DEFAULT_RESOURCES["requests"]["cpu"])
    for name in ("default", "fast"):
        p = profile_for(name, False)
        runtime_m = p.max_tasks * DRAIN_CPU_PER_TASK_M
        cold_job_m = max(500, runtime_m)
        assert operator_m + p.partitions * consumer_m + runtime_m + cold_job_m <= NODE_CPU_M, name
    assert "node" not in json.dumps(values)


def test_namespaces_enforce_restricted_and_need_no_label_for_the_node() -> None:
    labels = namespace_labels()
    assert labels == {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    assert operator_namespace("lagpilot-demo") == "lagpilot-demo-operator"


def _container(
    cid: str, ns: str, pod: str, uid: str, name: str = "consumer", state: str = "CONTAINER_RUNNING"
) -> dict:
    return {
        "id": cid,
        "metadata": {"name": name},
        "image": {"image": "docker.io/lagpilot/demo-consumer:0.1.0"},
        "state": state,
        "labels": {
            "io.kubernetes.pod.namespace": ns,
            "io.kubernetes.pod.name": pod,
            "io.kubernetes.pod.uid": uid,
        },
    }


def test_containers_of_keeps_the_demo_namespaces_only() -> None:
    listing = {
        "containers": [
            _container("a" * 64, "lagpilot-demo", "c-1", "u1"),
            _container("b" * 64, "other", "x", "u9"),
            _container("c" * 64, "lagpilot-demo-operator", "op", "u2", "operator", "CONTAINER_EXITED"),
        ]
    }
    rows = containers_of(listing, ("lagpilot-demo", "lagpilot-demo-operator"))
    assert [(r["pod"], r["pod_uid"], r["container"], r["state"]) for r in rows] == [
        ("c-1", "u1", "consumer", "CONTAINER_RUNNING"),
        ("op", "u2", "operator", "CONTAINER_EXITED"),
    ]
    assert rows[0]["id"] == "a" * 13
    lines = format_listing(rows)
    assert lines[0].startswith("CONTAINER") and len(lines) == 3 and "lagpilot-demo-operator" in lines[2]


def test_pods_without_containers_are_the_started_pods_the_runtime_never_listed() -> None:
    pods = {
        "u1": {"namespace": "d", "name": "c-1", "started": True},
        "u2": {"namespace": "d", "name": "drain-1", "started": True},
        "u3": {"namespace": "d", "name": "pending-then-deleted", "started": False},
    }
    assert pods_without_containers(pods, {"u1": [{}]}) == ["d/drain-1"]
    assert pods_without_containers(pods, {"u1": [{}], "u2": [{}]}) == []


def test_image_names_prefer_the_name_pods_use() -> None:
    listing = {
        "images": [
            {
                "id": "sha256:aa",
                "repoTags": [
                    "localhost/lagpilot/demo-consumer:0.1.0",
                    "docker.io/lagpilot/demo-consumer:0.1.0",
                ],
            },
            {"id": "sha256:bb", "repoTags": ["lagpilot.local/pause:v1.35.4"]},
            {"id": "sha256:cc", "repoTags": []},
        ]
    }
    assert image_names(listing) == {
        "sha256:aa": "docker.io/lagpilot/demo-consumer:0.1.0",
        "sha256:bb": "lagpilot.local/pause:v1.35.4",
    }


def test_cpu_window_is_the_node_pods_cpu_share_of_the_machine(tmp_path: Path) -> None:
    from lagpilot_dev.demo.node import cpu_window, drain_cpu, read_cpu

    # (epoch s, cumulative CPU-s of the node's pods, load1): 3 CPU-s in 10 s on 2 cores = 15 %
    samples = [[100.0, 50.0, 20.0], [105.0, 51.0, 22.0], [110.0, 53.0, 24.0], [200.0, 90.0, 1.0]]
    assert cpu_window(samples, 100.0, 110.0, 2) == {
        "seconds": 10.0,
        "cpu_seconds": 3.0,
        "share_of_machine": 0.15,
        "load1": 22.0,
    }
    assert cpu_window(samples, 150.0, 160.0, 2) is None  # no two samples in the window
    drains = [{"id": 1, "times": {"plannedAt": 100.0}, "start_up_seconds": 10.0}, {"id": 2, "times": {}}]
    drain_cpu({"cpu_samples": samples, "cpus": 2}, drains)
    assert drains[0]["node_cpu"]["cpu_seconds"] == 3.0 and "node_cpu" not in drains[1]
    usage = tmp_path / "cpuacct.usage"
    usage.write_text("2500000000\n")
    got = read_cpu(str(usage))
    assert got is not None and got[1] == 2.5
    assert read_cpu(str(tmp_path / "absent")) is None
