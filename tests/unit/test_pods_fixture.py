"""tests/fixtures/node.py `pods` on the pod runner: the CR's template must make the runner's pods (host
processes sharing the venv) run the code of the checkout the tests run from. The venv's editable
install points at the checkout it was installed from (/work/main for a worktree sharing the venv),
so PYTHONPATH=<repo> alone would run that checkout's `lagpilot_runtime` in the consumers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

from tests.fixtures.node import REPO, PodIO, Pods, runner_pods


def _pythonpath(repo: Path) -> list[str]:
    p = runner_pods(lambda prefix=None: "ns", "127.0.0.1:9092", "lagpilot-test-1", repo=repo)
    env = {e["name"]: e["value"] for e in p.template()["env"]}
    return env["PYTHONPATH"].split(os.pathsep)


def test_runner_pods_put_the_checkouts_sources_before_the_repo_root() -> None:
    path = _pythonpath(REPO)
    for d in ("consumer_image/src", "operator/src"):
        assert str(REPO / d) in path, (d, path)
        assert path.index(str(REPO / d)) < path.index(str(REPO)), path
    assert path[-1] == str(REPO)  # the tests' handler modules (tests.real.*) still import from the root


def test_runner_pods_template_keeps_the_tests_env_after_its_own() -> None:
    p = runner_pods(lambda prefix=None: "ns", "127.0.0.1:9092", "lagpilot-test-1")
    env = p.template(env=[{"name": "X", "value": "1"}], resources={})["env"]
    assert [e["name"] for e in env] == ["PYTHONPATH", "X"]
    assert p.image is None and "image" not in p.template()


# ---- PodIO: the pods' logs and processes, the same on the runner and on the node ------------------


class _Runner:
    def __init__(self, workdir: Path, pids: dict[str, int] | None = None) -> None:
        self.workdir, self.pids = workdir, pids or {}

    def pid_of(self, namespace: str, name: str) -> int | None:
        return self.pids.get(f"{namespace}/{name}")


def _on_node(node: object = None) -> Pods:
    return Pods("node", "10.0.0.1:9092", lambda prefix=None: "ns", "lagpilot-worker", image="i", node=node)


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


def test_pod_io_on_the_runner_reads_every_pod_the_runner_ran_in_the_namespace(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "drain-ab_orders-consumer-1_main.log").write_text("a\n")
    (logs / "drain-ab_orders-consumer-2_main.log").write_text("b\n")
    (logs / "drain-ab_orders-drain-1-1-x_main.log").write_text("d\n")
    (logs / "drain-abc_orders-consumer-9_main.log").write_text("other namespace\n")
    io = PodIO(runner_pods(lambda prefix=None: "ns", "b", "n"), core=None, runner=_Runner(tmp_path))
    assert io.namespace_logs("drain-ab", "consumer") == {
        "orders-consumer-1": "a\n",
        "orders-consumer-2": "b\n",
    }
    assert io.logs("drain-ab", "orders-drain-1-1-x") == "d\n"
    assert io.kill("drain-ab", "orders-consumer-1") is False  # no process: nothing killed


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
    runner = _Runner(Path("/nonexistent"))
    runner.running_pids = lambda ns: {"c-1": 11}  # type: ignore[attr-defined]
    assert PodIO(runner_pods(lambda prefix=None: "ns", "b", "n"), core=None, runner=runner).running("ns") == {
        "c-1"
    }
