"""The operator on the real node, as a user runs it (issue 24, item 2): `helm install` of
charts/lagpilot, the operator a Deployment whose pod is a container with the chart's ServiceAccount
and RBAC, reaching the apiserver through the `kubernetes` Service; a BatchConsumerGroup applied
with kubectl becomes a consumer Deployment whose pods are containers of `lagpilot/consumer:0.1.0`
consuming from Kafka (the shared broker's PODS listener on the bridge gateway).

Every pod created in both namespaces (by the Deployment controllers here) goes to the node's
scheduler, the cluster's default; nothing in the chart or the CR names the node. Checked through Kafka (the group's committed offsets), the API (pod
placement, CR status) and the runtime (`crictl ps`), not through logs alone.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.fixtures.kube import KubeEnv, wait_until
from tests.real.test_node import node  # noqa: F401 - fixture
from tests.real.test_node_consumer import _built_and_loaded, _image_refused

pytestmark = [
    pytest.mark.real,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

# an API call the operator's RBAC refused (a uid or a timestamp never holds a standalone 403)
DENIED_LINE = re.compile(r"(?i)forbidden|\b403\b")


@pytest.fixture(scope="module")
def helm_bin() -> Any:
    from lagpilot_dev import helm as h

    return h.ensure_helm()


@pytest.fixture
def on_node(kube: KubeEnv, namespace: Callable[..., str], node: Any) -> Callable[[str], str]:
    """A test namespace on the real node (the cluster's only one) with Pod Security `restricted`."""

    def make(prefix: str) -> str:
        ns = namespace(prefix)
        kube.kubectl(
            "label",
            "namespace",
            ns,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        )
        return ns

    return make


@pytest.fixture
def release(kube: KubeEnv) -> Iterator[str]:
    yield f"lpn-{uuid.uuid4().hex[:6]}"


def _pods(kube: KubeEnv, ns: str, selector: str) -> list[dict[str, Any]]:
    return list(
        json.loads(kube.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout)["items"]
    )


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
    )


def test_helm_installed_operator_pod_reconciles_a_cr_into_consumer_containers(
    node: Any,
    kube: KubeEnv,
    kafka_part: Any,
    helm_bin: Any,
    release: str,
    on_node: Callable[[str], str],
    tmp_path: Any,
) -> None:
    from lagpilot_dev import helm as h
    from lagpilot_dev.images.run import committed_offsets, produce

    pods_bootstrap = kafka_part.pods_bootstrap_servers()
    assert pods_bootstrap, (
        "the shared broker has no PODS listener (it started before the node's bridge existed)"
    )
    operator_image = _built_and_loaded(node, "operator")
    consumer_image = _built_and_loaded(node, "consumer")
    topic, produced = f"node-op-{uuid.uuid4().hex[:8]}", 2000
    group = f"{topic}-g"
    produce(kafka_part.bootstrap_servers(), topic, produced, partitions=2)  # creates the topic
    rel_ns, team = on_node("lpn-sys"), on_node("lpn-team")
    repository, tag = operator_image.rsplit(":", 1)
    values = {
        "watchNamespaces": [team],
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "operator": {"extraEnv": [{"name": "LAGPILOT_MAX_BACKOFF_SECONDS", "value": "15"}]},
    }
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    helm_args = ["--kubeconfig", str(kube.kubeconfig), "-n", rel_ns]
    out = h.run_helm(
        helm_bin, ["install", release, str(h.CHART_DIR), "-f", str(values_file), *helm_args]
    ).stdout
    assert "STATUS: deployed" in out
    full, name = f"{release}-lagpilot", "on-node"
    try:

        def operator_pod() -> dict[str, Any] | None:
            pods = _pods(kube, rel_ns, f"app.kubernetes.io/instance={release}")
            for p in pods:
                assert not _image_refused(p.get("status", {})), _image_refused(p["status"])
            ready = [p for p in pods if _ready(p)]
            return ready[0] if ready else None

        pod = wait_until(
            operator_pod, "the operator pod Ready on the real node (kopf /healthz, kubelet probes)", 300
        )
        assert pod["spec"]["nodeName"] == node.info()["node_name"]
        assert pod["spec"]["serviceAccountName"] == full
        assert pod["spec"]["containers"][0]["image"] == operator_image

        bcg = {
            "apiVersion": "lagpilot.io/v1alpha1",
            "kind": "BatchConsumerGroup",
            "metadata": {"name": name},
            "spec": {
                "kafka": {"bootstrapServers": pods_bootstrap},
                "topic": topic,
                "groupId": group,
                "processing": {"sink": "log"},
                "scaling": {"minReplicas": 1, "maxReplicas": 2},
                "catchUpSLASeconds": 120,
                "template": {"image": consumer_image, "imagePullPolicy": "Never"},
            },
        }
        kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))

        def consumers_running() -> list[dict[str, Any]] | None:
            pods = _pods(kube, team, f"app.kubernetes.io/instance={name}")
            for p in pods:
                assert not _image_refused(p.get("status", {})), _image_refused(p["status"])
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            return running or None

        consumers = wait_until(consumers_running, "consumer pods of the CR running", 300)
        for p in consumers:
            assert p["spec"]["nodeName"] == node.info()["node_name"], p["metadata"]["name"]
            assert p["spec"]["containers"][0]["image"] == consumer_image
            owner = p["metadata"]["ownerReferences"][0]
            assert owner["kind"] == "ReplicaSet" and owner["name"].startswith(f"{name}-consumer")

        def all_committed() -> dict[int, int] | None:
            got = committed_offsets(kafka_part.bootstrap_servers(), group, topic, 2)
            return got if sum(max(v, 0) for v in got.values()) == produced else None

        committed = wait_until(all_committed, "the consumer pods committed every record", 600)
        assert sum(committed.values()) == produced

        def cr_status() -> dict[str, Any]:
            return (
                json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout).get("status")
                or {}
            )

        st = wait_until(
            lambda: cr_status().get("partitions") == 2 and cr_status(), "status from the operator pod", 300
        )
        assert st.get("observedGeneration") == 1
        # the runtime's own listing: the operator and the consumers are containers on the node
        listed = {
            c["labels"]["io.kubernetes.pod.namespace"]
            for c in json.loads(node.crictl("ps", "-o", "json").stdout)["containers"]
        }
        assert {rel_ns, team} <= listed, listed

        kube.kubectl("delete", "bcg", name, "-n", team, "--wait=true", "--timeout=180s", timeout=200)
        log = kube.kubectl("logs", "-n", rel_ns, pod["metadata"]["name"], "--tail=-1").stdout
        assert log, "no operator log (kubectl logs through the kubelet)"
        denied = [line for line in log.splitlines() if DENIED_LINE.search(line)]
        assert denied == [], "the chart's RBAC is missing something:\n" + "\n".join(denied[:20])
    finally:
        kube.kubectl("delete", "bcg", name, "-n", team, "--ignore-not-found", "--wait=false", check=False)
        h.run_helm(helm_bin, ["uninstall", release, "--wait", "--timeout", "180s", *helm_args], timeout=240)
    assert kube.kubectl("get", "deployment", full, "-n", rel_ns, check=False).returncode != 0


@pytest.fixture
def pods_postgres(tmp_path_factory: pytest.TempPathFactory, node: Any) -> Iterator[Any]:
    """A private PostgreSQL listening on the bridge gateway too (started after the node's bridge)."""
    from lagpilot_dev import paths
    from lagpilot_dev.postgres import PostgresPart

    part = PostgresPart(paths.cache_dir(), tmp_path_factory.mktemp("node-op-postgres"))
    part.start()
    try:
        yield part
    finally:
        part.purge()


def test_drain_job_runs_as_a_container_to_verified(
    node: Any,
    kube: KubeEnv,
    kafka_part: Any,
    helm_bin: Any,
    release: str,
    on_node: Callable[[str], str],
    pods_postgres: Any,
    tmp_path: Any,
) -> None:
    """A backlog one consumer cannot clear within the SLA: the helm-installed operator pod plans a
    drain and launches its Job, whose pod (the consumer image: Spark in local mode, the ledger sink)
    runs as a container under Pod Security `restricted`; the drain reaches Verified and the ledger
    holds every produced record exactly once."""
    import psycopg

    from lagpilot_dev import helm as h
    from lagpilot_dev.images.run import produce

    pods_bootstrap, pods_dsn = kafka_part.pods_bootstrap_servers(), pods_postgres.pods_dsn()
    assert pods_bootstrap and pods_dsn
    operator_image = _built_and_loaded(node, "operator")
    consumer_image = _built_and_loaded(node, "consumer")
    topic, table, parts, per_part = (
        f"node-dr-{uuid.uuid4().hex[:8]}",
        f"ledger_{uuid.uuid4().hex[:8]}",
        3,
        4000,
    )
    produce(kafka_part.bootstrap_servers(), topic, parts * per_part, partitions=parts)
    rel_ns, team = on_node("lpn-sys"), on_node("lpn-team")
    kube.kubectl(
        "create", "secret", "generic", "pg", "-n", team, "--from-file=dsn=/dev/stdin", input_text=pods_dsn
    )
    repository, tag = operator_image.rsplit(":", 1)
    values = {
        "watchNamespaces": [team],
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
    }
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    helm_args = ["--kubeconfig", str(kube.kubeconfig), "-n", rel_ns]
    h.run_helm(helm_bin, ["install", release, str(h.CHART_DIR), "-f", str(values_file), *helm_args])
    name = "drain-on-node"
    try:
        bcg = {
            "apiVersion": "lagpilot.io/v1alpha1",
            "kind": "BatchConsumerGroup",
            "metadata": {"name": name},
            "spec": {
                "kafka": {"bootstrapServers": pods_bootstrap},
                "topic": topic,
                "groupId": f"{topic}-g",
                "batch": {"maxRecords": 100, "timeoutMs": 500},
                # ~100 records/s per consumer: 12,000 records are beyond one consumer's 60 s
                "processing": {
                    "handler": "lagpilot_runtime.sinks.ledger:process",
                    "config": {"table": table, "cost_ms": "1000"},
                },
                "scaling": {"minReplicas": 1, "maxReplicas": 1, "pollIntervalSeconds": 5},
                "catchUpSLASeconds": 60,
                "drain": {"enabled": True, "maxTasks": 6, "minBacklogRecords": 1000},
                "template": {
                    "image": consumer_image,
                    "imagePullPolicy": "Never",
                    "env": [
                        {"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}
                    ],
                },
            },
        }
        kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))

        def drain() -> dict[str, Any]:
            obj = json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout)
            return (obj.get("status") or {}).get("drain") or {}

        def drain_pods_refused() -> None:
            for p in _pods(kube, team, "app.kubernetes.io/name=lagpilot-drain"):
                assert not _image_refused(p.get("status", {})), _image_refused(p["status"])

        def finished() -> dict[str, Any] | None:
            drain_pods_refused()
            d = drain()
            return d if d.get("phase") in ("Verified", "Failed", "Cancelled") else None

        d = wait_until(finished, "the drain finished", 1200)
        assert d["phase"] == "Verified", json.dumps(d)[:2000]
        job_pods = _pods(kube, team, "app.kubernetes.io/name=lagpilot-drain")
        assert job_pods and all(p["spec"]["nodeName"] == node.info()["node_name"] for p in job_pods)

        def all_delivered() -> list[Any] | None:
            with psycopg.connect(pods_postgres.app_dsn()) as conn:
                rows = conn.execute(
                    f'SELECT partition, count(*), count(DISTINCT "offset"), '
                    f"count(*) FILTER (WHERE source = 'drain') FROM {table} GROUP BY partition"
                ).fetchall()
            return rows if sum(r[2] for r in rows) == parts * per_part else None

        rows = wait_until(all_delivered, "every record in the ledger", 600)
        assert all(n == distinct == per_part for _, n, distinct, _ in rows), rows  # none lost, none twice
        assert sum(r[3] for r in rows) > 0, rows  # the drain processed some
    finally:
        kube.kubectl(
            "delete",
            "bcg",
            name,
            "-n",
            team,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
            check=False,
            timeout=200,
        )
        h.run_helm(helm_bin, ["uninstall", release, "--wait", "--timeout", "180s", *helm_args], timeout=240)
