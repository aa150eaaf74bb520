"""tests/fixtures/node.py: `pods`' template (the test image, never pulled) and `PodIO`, the pods'
logs and processes on the real node."""

from __future__ import annotations

import json
import signal
import subprocess
from types import SimpleNamespace

from tests.fixtures.node import PodIO, Pods


def _on_node(node: object = None) -> Pods:
    return Pods("10.0.0.1:9092", lambda prefix=None: "ns", "lagpilot-worker", image="i", node=node)


def test_pods_template_names_the_test_image_and_keeps_the_tests_env() -> None:
    t = _on_node().template(env=[{"name": "X", "value": "1"}], resources={})
    assert t == {
        "env": [{"name": "X", "value": "1"}],
        "resources": {},
        "image": "i",
        "imagePullPolicy": "Never",
    }
    assert "PYTHONPATH" not in json.dumps(t)  # the image's own, never overridden


class _Core:
    """CoreV1Api's pod list and log reads: `logs[(pod, previous)]`, a missing key is a 400/404."""

    def __init__(self) -> None:
        self.pods: list[str] = []
        self.logs: dict[tuple[str, bool], str] = {}

    def list_namespaced_pod(self, namespace: str) -> object:
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n)) for n in self.pods])

    def read_namespaced_pod_log(self, name: str, namespace: str, previous: bool = False) -> str:
        from kubernetes.client.rest import ApiException

        if (name, previous) not in self.logs:
            raise ApiException(status=404 if name not in self.pods else 400)
        return self.logs[(name, previous)]


def test_pod_io_on_the_node_keeps_the_log_of_a_pod_deleted_since_it_was_read() -> None:
    core = _Core()
    core.pods = ["orders-consumer-1", "orders-consumer-2"]
    core.logs = {
        ("orders-consumer-1", True): "run 1\n",
        ("orders-consumer-1", False): "run 2\n",
        ("orders-consumer-2", False): "only run\n",
    }
    io = PodIO(_on_node(), core=core)
    assert io.namespace_logs("ns", "consumer") == {
        "orders-consumer-1": "run 1\nrun 2\n",  # the previous run first
        "orders-consumer-2": "only run\n",
    }
    core.pods = ["orders-consumer-1"]  # scaled down: the API has no log of the deleted pod
    del core.logs[("orders-consumer-2", False)]
    assert io.namespace_logs("ns", "consumer")["orders-consumer-2"] == "only run\n"
    assert io.logs("ns", "never-seen") == ""


def test_pod_io_on_the_node_sigkills_the_containers_init_process() -> None:
    victim = subprocess.Popen(["sleep", "60"])
    calls: list[tuple[str, ...]] = []

    class Node:
        def crictl(self, *args: str) -> object:
            calls.append(args)
            if args[0] == "ps":
                return SimpleNamespace(stdout="c1\n")
            return SimpleNamespace(stdout=json.dumps({"info": {"pid": victim.pid}}))

    try:
        assert PodIO(_on_node(Node()), core=None).kill("ns", "orders-drain-1-1-x") is True
        assert victim.wait(10) == -signal.SIGKILL
    finally:
        victim.kill()
    assert "io.kubernetes.pod.name=orders-drain-1-1-x" in calls[0] and "Running" in calls[0], calls
    assert calls[1] == ("inspect", "c1")


def test_pod_io_running_on_the_node_counts_pods_whose_containers_run() -> None:
    def pod(name: str, *states: str, deleting: bool = False) -> object:
        statuses = [
            SimpleNamespace(state=SimpleNamespace(running=object() if s == "running" else None))
            for s in states
        ]
        return SimpleNamespace(
            metadata=SimpleNamespace(name=name, deletion_timestamp="now" if deleting else None),
            status=SimpleNamespace(container_statuses=statuses or None),
        )

    core = SimpleNamespace(
        list_namespaced_pod=lambda ns: SimpleNamespace(
            items=[
                pod("up", "running"),
                pod("pending"),  # no container yet
                pod("crashed", "terminated"),
                pod("leaving", "running", deleting=True),
            ]
        )
    )
    assert PodIO(_on_node(), core=core).running("ns") == {"up"}
