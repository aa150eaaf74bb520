"""Pure helpers of Spark's Kubernetes backend on the local stack (lagpilot_dev.spark_k8s) and of
`bench/drain.py --executors ... --k8s`: the client-mode conf (Secret material never literal), the
chart's drain RBAC selection, executor pod counts, the variants (same task slots) and the drain's
environment."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev.spark_k8s import client_mode_conf, drain_rbac_objects, executor_summary

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.drain.variants import (
    CPU_PER_TASK_M,
    IMAGE_PYTHON,
    K8S_CORES_ENV,
    K8S_EXECUTORS_ENV,
    executor_memory_overhead,
    k8s_drain_env,
    k8s_executor_variants,
)

DSN = "postgresql://u:s3cret@127.0.0.1:5432/db"


def test_client_mode_conf_sizes_executors_and_keeps_secrets_as_refs():
    conf = client_mode_conf(
        "ns1",
        2,
        6,
        "512m",
        "Bench-AB12",
        {"LAGPILOT_TOPIC": "t", "LAGPILOT_POSTGRES_DSN": DSN},
        {"LAGPILOT_POSTGRES_DSN": ("drain-env", "dsn")},
        labels={"lagpilot.io/bench-run": "x-0"},
    )
    assert conf["spark.kubernetes.namespace"] == "ns1"
    assert (
        conf["spark.executor.instances"],
        conf["spark.executor.cores"],
        conf["spark.executor.memory"],
    ) == ("2", "6", "512m")
    assert conf["spark.kubernetes.executor.podNamePrefix"] == "bench-ab12"  # pod names are lower case
    assert conf["spark.kubernetes.executor.deleteOnTermination"] == "true"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.kubernetes.executor.label.lagpilot.io/bench-run"] == "x-0"
    assert conf["spark.executorEnv.LAGPILOT_TOPIC"] == "t"
    assert conf["spark.kubernetes.executor.secretKeyRef.LAGPILOT_POSTGRES_DSN"] == "drain-env:dsn"
    assert "s3cret" not in json.dumps(conf)
    for bad in ((0, 1), (1, 0)):
        with pytest.raises(ValueError):
            client_mode_conf("ns", bad[0], bad[1], "512m", "p", {}, {})


def test_drain_rbac_objects_takes_only_the_drain_component():
    objs = [
        {
            "kind": "ServiceAccount",
            "metadata": {"name": "op", "labels": {"app.kubernetes.io/component": "operator"}},
        },
        {
            "kind": "ServiceAccount",
            "metadata": {"name": "d", "labels": {"app.kubernetes.io/component": "drain"}},
        },
        {"kind": "Role", "metadata": {"name": "d", "labels": {"app.kubernetes.io/component": "drain"}}},
        {
            "kind": "RoleBinding",
            "metadata": {"name": "d", "labels": {"app.kubernetes.io/component": "drain"}},
        },
        {"kind": "Deployment", "metadata": {"name": "d", "labels": {"app.kubernetes.io/component": "drain"}}},
        {"kind": "Role", "metadata": {"name": "x"}},
    ]
    assert [(o["kind"], o["metadata"]["name"]) for o in drain_rbac_objects(objs)] == [
        ("ServiceAccount", "d"),
        ("Role", "d"),
        ("RoleBinding", "d"),
    ]


def test_executor_summary_counts_running_and_terminating():
    pods = [
        {"metadata": {}, "status": {"phase": "Running"}},
        {"metadata": {"deletionTimestamp": "t"}, "status": {"phase": "Running"}},
        {"metadata": {}, "status": {"phase": "Pending"}},
        {"metadata": {}},
    ]
    assert executor_summary(pods) == {"total": 4, "running": 1, "terminating": 1}
    assert executor_summary([]) == {"total": 0, "running": 0, "terminating": 0}


@given(st.lists(st.integers(1, 16), min_size=1, max_size=4, unique=True), st.integers(1, 24))
def test_k8s_variants_keep_a_local_base_and_never_fewer_slots(counts, slots):
    v = k8s_executor_variants(counts, slots)
    assert next(iter(v)) == "local" and v["local"] == {}
    assert len(v) == len(counts) + 1
    for n in counts:
        cores = math.ceil(slots / n)
        shape = v[f"k8s-{n}x{cores}"]
        assert shape == {K8S_EXECUTORS_ENV: str(n), K8S_CORES_ENV: str(cores)}
        # never fewer slots than tasks, and no executor larger than needed
        assert n * cores >= slots and (cores == 1 or n * (cores - 1) < slots)


def test_k8s_variants_reject_zero():
    with pytest.raises(ValueError):
        k8s_executor_variants([0], 12)


def test_k8s_drain_env_points_the_driver_at_the_api_server_as_the_drain_account():
    k8s = SimpleNamespace(
        namespace="ns1",
        master="k8s://https://127.0.0.1:6443",
        driver_kubeconfig=Path("/x/sa.kubeconfig"),
        driver_host="10.244.0.1",
    )
    env = {
        "LAGPILOT_TOPIC": "t",
        "LAGPILOT_POSTGRES_DSN": DSN,
        "LAGPILOT_SPARK_JARS": "/a.jar",
        "LAGPILOT_BENCH_K8S_CORES": "6",
        "PYTHONPATH": "/repo",
        "HOME": "/root",
    }
    out = k8s_drain_env(env, k8s, 2, 6, "bench-1", "k8s-2x6-0-1", "lagpilot/consumer:0.1.0-cabc")
    assert out["LAGPILOT_SPARK_MASTER"] == "k8s://https://127.0.0.1:6443"
    assert out["KUBECONFIG"] == "/x/sa.kubeconfig"
    assert out["LAGPILOT_POSTGRES_DSN"] == DSN  # the driver (a host process) keeps its own environment
    assert out["PYTHONPATH"] == "/repo"  # ... its own PYTHONPATH too
    conf = json.loads(out["LAGPILOT_SPARK_CONF"])
    assert conf["spark.executor.instances"] == "2" and conf["spark.executor.cores"] == "6"
    assert conf["spark.executorEnv.LAGPILOT_TOPIC"] == "t"
    assert not any(k.endswith(("LAGPILOT_SPARK_JARS", "LAGPILOT_BENCH_K8S_CORES", "HOME")) for k in conf)
    assert "s3cret" not in out["LAGPILOT_SPARK_CONF"]  # the DSN reaches executors through the Secret only


def test_k8s_drain_env_runs_executors_as_restricted_containers_reaching_the_driver_on_the_bridge():
    """The real node's executors: containers of the given image (never pulled), its own PYTHONPATH
    and Python, the operator's restricted pod template, a small CPU request per slot, the driver
    bound to and reached at the bridge gateway (loopback would be the container's own)."""
    from lagpilot.act.drain_manifests import EXECUTOR_POD_TEMPLATE_ENV, executor_pod_template

    k8s = SimpleNamespace(
        namespace="ns1",
        master="k8s://https://127.0.0.1:6443",
        driver_kubeconfig=Path("/x/sa.kubeconfig"),
        driver_host="10.244.0.1",
    )
    env = {"LAGPILOT_TOPIC": "t", "PYTHONPATH": "/work/wt/repo", "PYSPARK_PYTHON": "/work/.venv/bin/python"}
    out = k8s_drain_env(env, k8s, 3, 4, "bench-1", "k8s-3x4-0-1", "lagpilot/consumer:0.1.0-cabc")
    conf = json.loads(out["LAGPILOT_SPARK_CONF"])
    assert conf["spark.kubernetes.container.image"] == "lagpilot/consumer:0.1.0-cabc"
    assert conf["spark.kubernetes.container.image.pullPolicy"] == "IfNotPresent"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "10.244.0.1"
    assert conf["spark.kubernetes.executor.request.cores"] == f"{4 * CPU_PER_TASK_M}m"
    assert conf["spark.executor.memoryOverhead"] == executor_memory_overhead(4)
    assert not any("PYTHONPATH" in k for k in conf)  # the image's PYTHONPATH, never the host's checkout
    assert out["PYSPARK_PYTHON"] == IMAGE_PYTHON  # what the executors' Python workers run
    assert json.loads(out[EXECUTOR_POD_TEMPLATE_ENV]) == executor_pod_template()
    spec = json.loads(out[EXECUTOR_POD_TEMPLATE_ENV])["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False


def test_client_mode_conf_sets_a_cpu_request_only_when_asked():
    base = client_mode_conf("ns", 1, 2, "512m", "p", {}, {})
    assert "spark.kubernetes.executor.request.cores" not in base
    assert "spark.executor.memoryOverhead" not in base
    assert base["spark.driver.host"] == "127.0.0.1"
    conf = client_mode_conf("ns", 1, 2, "512m", "p", {}, {}, driver_host="10.244.0.1", request_cores="100m")
    assert conf["spark.kubernetes.executor.request.cores"] == "100m"
    assert conf["spark.driver.bindAddress"] == "10.244.0.1"


@given(st.integers(1, 64))
def test_executor_memory_overhead_grows_with_its_python_workers(cores):
    """One Python worker per task slot lives beside the JVM in the pod's memory limit."""
    mb = int(executor_memory_overhead(cores).removesuffix("m"))
    assert mb >= 384 + 100 * cores  # Spark's floor, plus room for every slot's worker
    assert int(executor_memory_overhead(cores + 1).removesuffix("m")) > mb


def test_node_spark_k8s_takes_executor_pids_from_the_node_runtime_inspecting_each_container_once(tmp_path):
    """`running_pids`: the namespace's running containers' init pids through the node part's
    `running_pids` (tests/unit/test_node_pids.py), with the bench's memory of containers already
    inspected: each container inspected once; a container gone drops out."""
    from lagpilot_dev.node import NodePart
    from lagpilot_dev.spark_k8s import NodeSparkK8s
    from tests.unit.test_node_pids import FakeCrictl

    node = NodePart(tmp_path / "cache", tmp_path / "state")
    fake = FakeCrictl({"c1": 101, "c2": 202, "c3": 0})
    node.crictl = fake
    k8s = NodeSparkK8s(kube_part=None, node_part=node, namespace="ns1")
    fake.running = {"c1": "exec-1", "c2": "exec-2"}
    assert k8s.running_pids() == [101, 202]
    fake.running = {"c2": "exec-2", "c3": "exec-3"}  # c1 ended; c3 has no pid yet
    assert k8s.running_pids() == [202]
    assert fake.inspected() == ["c1", "c2", "c3"]  # c2 not inspected twice
