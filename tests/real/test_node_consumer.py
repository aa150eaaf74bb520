"""The consumer image as a pod on the real node, reaching Kafka on the host (issue 24, item 3).

The image is the one `lagpilot dev images` builds from the unchanged consumer_image/Dockerfile,
loaded into the node's containerd (`podman save` + `ctr images import`; no registry). The pod runs
in a namespace enforcing Pod Security `restricted`, on the pod network: it reaches the broker at the
bridge gateway through the broker's PODS listener (lagpilot_dev.kafka), never at 127.0.0.1.

The shared stack's broker may have started before the node's bridge existed (then it has no PODS
listener until its next restart, and the shared stack is not restarted by tests): this test starts
its own broker, in its own state dir, which has the listener. Checked through Kafka: the group's
committed offsets, not the pod's log.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import KubeEnv, wait_until
from tests.fixtures.node import image_on_node
from tests.real.test_node import RESTRICTED_CONTAINER_SC, _restricted_ns, node  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.real,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]


@pytest.fixture(scope="module")
def pods_kafka(tmp_path_factory: pytest.TempPathFactory, node: Any) -> Any:
    """A private broker with the PODS listener (the node's bridge exists: the node part made it)."""
    from lagpilot_dev import paths
    from lagpilot_dev.kafka import KafkaPart

    part = KafkaPart(paths.cache_dir(), tmp_path_factory.mktemp("pods-kafka-state"))
    part.start()
    try:
        yield part
    finally:
        part.stop()


def user_reference(name: str) -> str:
    """The name a user gives the image, as the chart and the CRD name it (docs/kind.md builds them
    under these names): the consumer image is the CRD's `spec.template.image` default, the operator
    image the chart's `image.repository` at its appVersion."""
    import yaml

    from lagpilot.spec import DEFAULT_IMAGE

    if name == "consumer":
        return DEFAULT_IMAGE
    chart = Path(__file__).resolve().parents[2] / "charts" / "lagpilot"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    return f"{values['image']['repository']}:{values['image']['tag'] or app_version}"


def _built_and_loaded(node: Any, name: str) -> str:
    """Build the image (cached layers when nothing changed), load it into the node, and return the
    name the chart / the CRD use for it: a pod naming it with `imagePullPolicy: Never` must run.
    Once per session and image (tests/fixtures/node.py)."""
    name_used = image_on_node(node, name)
    assert name_used == user_reference(name)
    return name_used


@pytest.fixture(scope="module")
def pods_postgres(tmp_path_factory: pytest.TempPathFactory, node: Any) -> Any:
    """A private PostgreSQL listening on the bridge gateway too (the shared one was started without)."""
    from lagpilot_dev import paths
    from lagpilot_dev.postgres import PostgresPart

    part = PostgresPart(paths.cache_dir(), tmp_path_factory.mktemp("pods-postgres-state"))
    part.start()
    try:
        yield part
    finally:
        part.purge()


@pytest.fixture(scope="module")
def consumer_image(node: Any) -> str:
    return _built_and_loaded(node, "consumer")


def _image_refused(status: dict[str, Any]) -> str | None:
    """The kubelet's reason when it will never start the container for its image (no pull here)."""
    for cs in status.get("containerStatuses") or []:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in ("ErrImageNeverPull", "InvalidImageName", "ErrImagePull", "ImagePullBackOff"):
            return f"{cs.get('image')}: {reason}"
    return None


def test_operator_image_runs_as_a_restricted_pod(node: Any, kube: KubeEnv, namespace: Any) -> None:
    tag = _built_and_loaded(node, "operator")
    ns = _restricted_ns(kube, namespace)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator-help"},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "operator",
                    "image": tag,
                    "imagePullPolicy": "Never",
                    "args": ["--help"],
                    "securityContext": {
                        k: v
                        for k, v in RESTRICTED_CONTAINER_SC.items()
                        if k not in ("runAsUser", "runAsGroup")
                    },
                }
            ],
        },
    }
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))

    def finished() -> dict[str, Any] | None:
        st = json.loads(kube.kubectl("get", "pod", "-n", ns, "operator-help", "-o", "json").stdout)["status"]
        return st if st.get("phase") in ("Succeeded", "Failed") or _image_refused(st) else None

    st = wait_until(finished, "operator --help pod finished", timeout=300)
    assert not _image_refused(st), _image_refused(st)
    assert st["phase"] == "Succeeded", st
    assert st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_consumer_image_pod_consumes_from_host_kafka(
    node: Any,
    kube: KubeEnv,
    namespace: Any,
    pods_kafka: Any,
    consumer_image: str,
) -> None:
    from lagpilot_dev.images.run import committed_offsets, produce

    pods_bootstrap = pods_kafka.pods_bootstrap_servers()
    assert pods_bootstrap and pods_bootstrap.startswith(node.info()["host_from_pods"] + ":"), pods_bootstrap
    topic, group = f"node-{uuid.uuid4().hex[:8]}", f"node-g-{uuid.uuid4().hex[:8]}"
    produce(pods_kafka.bootstrap_servers(), topic, 600, partitions=2)
    ns = _restricted_ns(kube, namespace)
    env = {
        "LAGPILOT_BOOTSTRAP_SERVERS": pods_bootstrap,
        "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group,
        "LAGPILOT_SINK": "log",
        "LAGPILOT_POD_NAME": "consumer",
        "LAGPILOT_BATCH_MAX_RECORDS": "200",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "consumer"},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "consumer",
                    "image": consumer_image,
                    "imagePullPolicy": "Never",
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {
                        k: v
                        for k, v in RESTRICTED_CONTAINER_SC.items()
                        if k not in ("runAsUser", "runAsGroup")
                    },  # the image's USER 10001
                    "resources": {
                        "limits": {"memory": "512Mi", "cpu": "500m"},
                        "requests": {"memory": "256Mi", "cpu": "50m"},
                    },
                }
            ],
        },
    }
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))

    def all_committed() -> dict[int, int] | None:
        st = json.loads(kube.kubectl("get", "pod", "-n", ns, "consumer", "-o", "json").stdout)["status"]
        assert not _image_refused(st), _image_refused(st)
        got = committed_offsets(pods_kafka.bootstrap_servers(), group, topic, 2)
        return got if got == {0: 300, 1: 300} else None

    assert wait_until(all_committed, "the pod's group committed every record", timeout=600) == {
        0: 300,
        1: 300,
    }

    # The kubelet reports Running after the container started, and on a loaded node a consumer can
    # commit 600 records before the API shows it (CI, stop 36: started 16:26:31.3, Running seen at
    # 16:26:34.1, the test read Pending between). Wait for the report; a crash would show Failed.
    def reported_running() -> dict[str, Any] | None:
        st = json.loads(kube.kubectl("get", "pod", "-n", ns, "consumer", "-o", "json").stdout)["status"]
        assert st["phase"] in ("Pending", "Running"), st
        return st if st["phase"] == "Running" and st.get("podIP") else None

    status = wait_until(reported_running, "the kubelet to report the consumer pod Running", timeout=120)
    assert status["podIP"].startswith(node.info()["pod_subnet"].rsplit(".", 2)[0])  # on the pod network
    running = json.loads(node.crictl("ps", "--namespace", ns, "--name", "consumer", "-o", "json").stdout)
    assert [c["image"]["image"] for c in running["containers"]] != []


def test_deleted_consumer_pod_finishes_its_batch_and_commits(
    node: Any,
    kube: KubeEnv,
    kube_api: Any,
    namespace: Any,
    pods_kafka: Any,
    pods_postgres: Any,
    consumer_image: str,
) -> None:
    """Scale-down on the real node: the kubelet's SIGTERM, the consumer's last batch in the ledger
    and its commit agree (every delivered record committed, none beyond), and it exits cleanly."""
    import psycopg
    from kubernetes import client, watch

    from lagpilot_dev.images.run import committed_offsets, produce

    pods_dsn = pods_postgres.pods_dsn()
    assert pods_dsn and f"@{node.info()['host_from_pods']}:" in pods_dsn
    topic, group, table = (
        f"node-{uuid.uuid4().hex[:8]}",
        f"node-g-{uuid.uuid4().hex[:8]}",
        f"ledger_{uuid.uuid4().hex[:8]}",
    )
    produced = 4000
    produce(pods_kafka.bootstrap_servers(), topic, produced, partitions=2)
    ns = _restricted_ns(kube, namespace)
    kube.kubectl(
        "create", "secret", "generic", "db", "-n", ns, "--from-file=dsn=/dev/stdin", input_text=pods_dsn
    )
    env = [
        {"name": "LAGPILOT_BOOTSTRAP_SERVERS", "value": pods_kafka.pods_bootstrap_servers()},
        {"name": "LAGPILOT_TOPIC", "value": topic},
        {"name": "LAGPILOT_GROUP_ID", "value": group},
        {"name": "LAGPILOT_SINK", "value": "ledger"},
        {"name": "LAGPILOT_LEDGER_TABLE", "value": table},
        # 100 records a batch, each batch's write padded to 400 ms: ~8 s of work, deleted midway
        {"name": "LAGPILOT_BATCH_MAX_RECORDS", "value": "100"},
        {"name": "LAGPILOT_HANDLER_CONFIG", "value": json.dumps({"ledger.cost_ms": "400"})},
        {"name": "LAGPILOT_POD_NAME", "value": "consumer"},
        {"name": "LAGPILOT_POSTGRES_DSN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "dsn"}}},
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "consumer"},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 60,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "consumer",
                    "image": consumer_image,
                    "imagePullPolicy": "Never",
                    "env": env,
                    "securityContext": {
                        k: v
                        for k, v in RESTRICTED_CONTAINER_SC.items()
                        if k not in ("runAsUser", "runAsGroup")
                    },
                    "resources": {
                        "limits": {"memory": "512Mi", "cpu": "500m"},
                        "requests": {"memory": "256Mi", "cpu": "50m"},
                    },
                }
            ],
        },
    }
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))

    def first_commit() -> int:
        got = committed_offsets(pods_kafka.bootstrap_servers(), group, topic, 2)
        return sum(max(o, 0) for o in got.values())

    wait_until(first_commit, "the consumer's first commit", timeout=300)
    core = client.CoreV1Api(kube_api)
    rv = core.read_namespaced_pod("consumer", ns).metadata.resource_version
    kube.kubectl("delete", "pod", "-n", ns, "consumer", "--wait=false")
    exits = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod,
        ns,
        field_selector="metadata.name=consumer",
        resource_version=rv,
        timeout_seconds=120,
    ):
        statuses = ev["object"].status.container_statuses or []
        if statuses and statuses[0].state.terminated is not None:
            exits.append(statuses[0].state.terminated.exit_code)
        if ev["type"] == "DELETED":
            w.stop()
    assert exits and exits[-1] == 0, (
        exits
    )  # a clean exit on SIGTERM, not SIGKILL (137) after the grace period

    committed = committed_offsets(pods_kafka.bootstrap_servers(), group, topic, 2)
    with psycopg.connect(pods_postgres.app_dsn()) as conn:
        rows = conn.execute(
            f'SELECT partition, count(*), count(DISTINCT "offset"), max("offset") '
            f"FROM {table} GROUP BY partition"
        ).fetchall()
    delivered = {p: (n, distinct, top) for p, n, distinct, top in rows}
    # the delete really interrupted the work: not every record was consumed
    assert sum(n for n, _, _ in delivered.values()) < produced, delivered
    for p, (n, distinct, top) in delivered.items():
        assert n == distinct, f"partition {p}: a record delivered twice"
        # the last batch written is the last batch committed: nothing delivered beyond the commit,
        # nothing committed that was not delivered
        assert committed[p] == top + 1 == n, (p, committed, delivered)


IN_CLUSTER_SCRIPT = """
import os
from kubernetes import client, config
config.load_incluster_config()  # the ServiceAccount token and the `kubernetes` Service (env)
ns = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
client.CoreV1Api().create_namespaced_config_map(ns, {"metadata": {"name": "written-by-the-pod"},
    "data": {"via": os.environ["KUBERNETES_SERVICE_HOST"] + ":" + os.environ["KUBERNETES_SERVICE_PORT"]}})
"""


def test_pod_reaches_the_apiserver_with_its_service_account(node: Any, kube: KubeEnv, namespace: Any) -> None:
    """An in-cluster client on the node (what the operator as a pod is): the `kubernetes` Service
    leads to the apiserver, which authenticates the pod's ServiceAccount token and authorizes it
    by RBAC (a Role that may create ConfigMaps in its namespace, nothing else)."""
    image = _built_and_loaded(node, "operator")
    slices = json.loads(
        kube.kubectl(
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            "kubernetes.io/service-name=kubernetes",
            "-o",
            "json",
        ).stdout
    )["items"]
    addresses = [a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]]
    assert addresses and not any(a.startswith("127.") for a in addresses), addresses
    ns = _restricted_ns(kube, namespace)
    kube.kubectl("create", "serviceaccount", "writer", "-n", ns)
    kube.kubectl("create", "role", "cm-writer", "--verb=create", "--resource=configmaps", "-n", ns)
    kube.kubectl(
        "create", "rolebinding", "cm-writer", "--role=cm-writer", f"--serviceaccount={ns}:writer", "-n", ns
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "in-cluster"},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "writer",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "client",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", IN_CLUSTER_SCRIPT],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": {
                        k: v
                        for k, v in RESTRICTED_CONTAINER_SC.items()
                        if k not in ("runAsUser", "runAsGroup")
                    },
                }
            ],
        },
    }
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))

    def finished() -> dict[str, Any] | None:
        st = json.loads(kube.kubectl("get", "pod", "-n", ns, "in-cluster", "-o", "json").stdout)["status"]
        return st if st.get("phase") in ("Succeeded", "Failed") or _image_refused(st) else None

    st = wait_until(finished, "the in-cluster client pod finished", timeout=300)
    assert st["phase"] == "Succeeded", json.dumps(st.get("containerStatuses"))[-3000:]
    written = json.loads(
        kube.kubectl("get", "configmap", "-n", ns, "written-by-the-pod", "-o", "json").stdout
    )
    assert written["data"]["via"] == "10.0.0.1:443"  # the `kubernetes` Service's ClusterIP
