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
from typing import Any

import pytest

from tests.fixtures.kube import KubeEnv, wait_until
from tests.real.test_node import RESTRICTED_CONTAINER_SC, _restricted_ns, node  # noqa: F401 - fixture

pytestmark = [pytest.mark.real, pytest.mark.node, pytest.mark.images, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def pods_kafka(tmp_path_factory: pytest.TempPathFactory, node: Any) -> Any:  # noqa: F811
    """A private broker with the PODS listener (the node's bridge exists: the node part made it)."""
    from lagpilot_dev import paths
    from lagpilot_dev.kafka import KafkaPart

    part = KafkaPart(paths.cache_dir(), tmp_path_factory.mktemp("pods-kafka-state"))
    part.start()
    try:
        yield part
    finally:
        part.stop()


def _built_and_loaded(node: Any, name: str) -> str:  # noqa: F811
    from lagpilot_dev import images_tools
    from lagpilot_dev.images_build import IMAGES, build

    problems = images_tools.missing_preconditions(images_tools.default_layout())
    if problems:
        pytest.fail("images: cannot build here: " + "; ".join(problems))
    img = IMAGES[name]
    build(images_tools.default_layout(), img)  # cached layers when nothing changed
    node.load_built_image(img.tag)
    return img.tag


@pytest.fixture(scope="module")
def consumer_image(node: Any) -> str:  # noqa: F811
    return _built_and_loaded(node, "consumer")


def test_operator_image_runs_as_a_restricted_pod(node: Any, kube: KubeEnv, namespace: Any) -> None:  # noqa: F811
    tag = _built_and_loaded(node, "operator")
    ns = _restricted_ns(kube, namespace)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-help"}, "spec": {
        "schedulerName": node.info()["scheduler_name"], "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "operator", "image": tag, "imagePullPolicy": "Never", "args": ["--help"],
                        "securityContext": {k: v for k, v in RESTRICTED_CONTAINER_SC.items()
                                            if k not in ("runAsUser", "runAsGroup")}}]}}
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))

    def finished() -> dict[str, Any] | None:
        st = json.loads(kube.kubectl("get", "pod", "-n", ns, "operator-help", "-o", "json").stdout)["status"]
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    st = wait_until(finished, "operator --help pod finished", timeout=300)
    assert st["phase"] == "Succeeded", st
    assert st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_consumer_image_pod_consumes_from_host_kafka(node: Any, kube: KubeEnv, namespace: Any,  # noqa: F811
                                                    pods_kafka: Any, consumer_image: str) -> None:
    from lagpilot_dev.images_run import committed_offsets, produce

    pods_bootstrap = pods_kafka.pods_bootstrap_servers()
    assert pods_bootstrap and pods_bootstrap.startswith(node.info()["host_from_pods"] + ":"), pods_bootstrap
    topic, group = f"node-{uuid.uuid4().hex[:8]}", f"node-g-{uuid.uuid4().hex[:8]}"
    produce(pods_kafka.bootstrap_servers(), topic, 600, partitions=2)
    ns = _restricted_ns(kube, namespace)
    env = {"LAGPILOT_BOOTSTRAP_SERVERS": pods_bootstrap, "LAGPILOT_TOPIC": topic, "LAGPILOT_GROUP_ID": group,
           "LAGPILOT_SINK": "log", "LAGPILOT_POD_NAME": "consumer", "LAGPILOT_BATCH_MAX_RECORDS": "200"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "consumer"}, "spec": {
        "schedulerName": node.info()["scheduler_name"], "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "consumer", "image": consumer_image, "imagePullPolicy": "Never",
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "securityContext": {k: v for k, v in RESTRICTED_CONTAINER_SC.items()
                                            if k not in ("runAsUser", "runAsGroup")},  # the image's USER 10001
                        "resources": {"limits": {"memory": "512Mi", "cpu": "500m"},
                                      "requests": {"memory": "256Mi", "cpu": "50m"}}}]}}
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))

    def all_committed() -> dict[int, int] | None:
        got = committed_offsets(pods_kafka.bootstrap_servers(), group, topic, 2)
        return got if got == {0: 300, 1: 300} else None

    assert wait_until(all_committed, "the pod's group committed every record", timeout=600) == {0: 300, 1: 300}
    status = json.loads(kube.kubectl("get", "pod", "-n", ns, "consumer", "-o", "json").stdout)["status"]
    assert status["phase"] == "Running"
    assert status["podIP"].startswith(node.info()["pod_subnet"].rsplit(".", 2)[0])  # on the pod network
    running = json.loads(node.crictl("ps", "--namespace", ns, "--name", "consumer", "-o", "json").stdout)
    assert [c["image"]["image"] for c in running["containers"]] != []
