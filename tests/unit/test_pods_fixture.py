"""tests/fixtures/node.py: `pods`' template (the test image, never pulled) and `PodIO`, the pods'
logs and processes on the real node."""

from __future__ import annotations

import json
import signal
import subprocess
from types import SimpleNamespace

import pytest

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


def _status(state: str, cid: str, last: str = "", phase: str = "Running") -> object:
    """A single-container pod: its container `state` (running/terminated/waiting) with id `cid`,
    `last` the id of its last ended run."""

    def st(kind: str, container_id: str) -> object:
        return SimpleNamespace(
            running=object() if kind == "running" else None,
            terminated=SimpleNamespace(container_id=container_id) if kind == "terminated" else None,
            waiting=object() if kind == "waiting" else None,
        )

    cs = SimpleNamespace(
        container_id=cid or None,
        state=st(state, cid),
        last_state=st("terminated", last) if last else st("", ""),
    )
    return SimpleNamespace(
        spec=SimpleNamespace(containers=[object()]),
        status=SimpleNamespace(phase=phase, container_statuses=[cs]),
    )


class _Streams:
    """CoreV1Api's pod reads (`pods`: what each read_namespaced_pod returns in turn, None a 404) and
    followed log streams (`streams`: the chunks of each in turn, an exception a cut stream)."""

    def __init__(self, pods: list[object | None], streams: list[list[bytes | Exception]]) -> None:
        self.pods, self.streams, self.log_calls = pods, streams, []

    def list_namespaced_pod(self, namespace: str) -> object:
        return SimpleNamespace(items=[])  # every pod gone by the time a test lists them

    def read_namespaced_pod(self, name: str, namespace: str) -> object:
        from kubernetes.client.rest import ApiException

        pod = self.pods.pop(0)
        if pod is None:
            raise ApiException(status=404)
        return pod

    def read_namespaced_pod_log(
        self, name: str, namespace: str, previous: bool = False, **kw: object
    ) -> object:
        from kubernetes.client.rest import ApiException

        if kw.get("_preload_content", True) is not False:  # a plain read: the pod is gone
            raise ApiException(status=404)
        self.log_calls.append((previous, kw.get("follow")))
        chunks = self.streams.pop(0)

        def stream(_amt: int) -> object:
            for c in chunks:
                if isinstance(c, Exception):
                    raise c
                yield c

        return SimpleNamespace(stream=stream, release_conn=lambda: None)


def test_pod_io_stream_keeps_every_run_of_a_pod_to_its_end() -> None:
    """A stream cut mid-run is opened again (the run kept once, whole); the next run after a restart
    is read too; a character split across chunks stays whole; the pod gone, `logs` gives them all."""
    import threading

    from urllib3.exceptions import ProtocolError

    core = _Streams(
        pods=[
            _status("running", "c1"),
            _status("running", "c1"),  # the stream was cut: c1 still runs
            _status("waiting", "", last="c1"),  # _ended: c1 ended
            _status("waiting", "", last="c1"),  # waiting for the restart: c1 already read
            _status("running", "c2", last="c1"),
            _status("terminated", "c2", last="c1"),  # _ended
            None,  # the pod deleted
        ],
        streams=[[b"a\n", ProtocolError("cut")], [b"a\n", b"b\n"], [b"c\xc3", b"\xa9\n"]],
    )
    io = PodIO(_on_node(), core=core)
    io.stream_pod("ns", "orders-consumer-1", threading.Event())
    assert core.log_calls == [(False, True)] * 3  # followed, never `previous`
    assert not core.pods and not core.streams
    assert io.logs("ns", "orders-consumer-1") == "a\nb\ncé\n"
    assert io.namespace_logs("ns", "consumer") == {"orders-consumer-1": "a\nb\ncé\n"}


def test_pod_io_stream_keeps_the_tail_of_a_long_run_and_reads_an_ended_one_as_previous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    import tests.fixtures.node as node_fixture

    monkeypatch.setattr(node_fixture, "LOG_KEEP_CHARS", 8)
    core = _Streams(
        pods=[
            _status("waiting", "", last="c1"),  # crashed before it was followed: its last run
            _status("waiting", "", last="c1", phase="Failed"),
        ],
        streams=[[b"aaa\n", b"bbb\n", b"ccc\n"]],
    )
    io = PodIO(_on_node(), core=core)
    io.stream_pod("ns", "p", threading.Event())
    assert core.log_calls == [(True, False)]
    assert io.logs("ns", "p") == "[...]\nbbb\nccc\n"
