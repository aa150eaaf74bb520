"""The host pids of the real node's running containers (lagpilot_dev.node `container_pids`,
`NodePart.running_pids`): the one place that reads them from the runtime (`crictl ps` / `crictl
inspect`) for the chaos bench (bench/chaos/pods.py) and the drain bench's executors
(lagpilot_dev.spark_k8s.NodeSparkK8s)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lagpilot_dev.node import NodePart, container_pids


def _c(id_: str, pod: str, state: str = "CONTAINER_RUNNING") -> dict[str, Any]:
    return {"id": id_, "state": state, "labels": {"io.kubernetes.pod.name": pod}}


def test_container_pids_are_the_running_containers_init_pids() -> None:
    listing = {
        "containers": [
            _c("a", "eos-1"),
            _c("b", "eos-2", "CONTAINER_EXITED"),  # its last run: no process
            _c("c", "alo-1"),
            _c("d", "alo-2"),  # created, no pid yet
        ]
    }
    pids = {"a": 101, "b": 102, "c": 103}
    got = container_pids(listing, lambda cid: {"info": {"pid": pids.get(cid, 0)}})
    assert got == {"eos-1": 101, "alo-1": 103}
    assert container_pids({}, lambda cid: {}) == {}


class FakeCrictl:
    """`crictl ps -o json --state Running --namespace ns` and `crictl inspect` of a node whose
    running containers are `running` (container id -> pod); records every call."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.running: dict[str, str] = {}
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str, timeout: float = 0) -> SimpleNamespace:
        self.calls.append(args)
        if args[0] == "ps":
            assert args[args.index("--namespace") + 1] == "ns1" and "Running" in args and "json" in args
            return SimpleNamespace(
                stdout=json.dumps({"containers": [_c(c, p) for c, p in self.running.items()]})
            )
        return SimpleNamespace(stdout=json.dumps({"info": {"pid": self.pids[args[1]]}}))

    def inspected(self) -> list[str]:
        return [a[1] for a in self.calls if a[0] == "inspect"]


def test_running_pids_inspects_each_container_once_for_a_caller_that_keeps_its_memory(tmp_path: Path) -> None:
    """`NodePart.running_pids(namespace, known)`: the namespace's running containers (`crictl ps`)
    and their init pids (`crictl inspect`), each container inspected once across calls sharing
    `known`; a container gone drops out; one with no pid yet is asked again."""
    node = NodePart(tmp_path / "cache", tmp_path / "state")
    fake = FakeCrictl({"c1": 101, "c2": 202, "c3": 0})
    node.crictl = fake  # type: ignore[method-assign]
    known: dict[str, int] = {}
    fake.running = {"c1": "p1", "c2": "p2"}
    assert node.running_pids("ns1", known) == {"p1": 101, "p2": 202}
    fake.running = {"c2": "p2", "c3": "p3"}  # c1 ended; c3 has no pid yet
    assert node.running_pids("ns1", known) == {"p2": 202}
    assert node.running_pids("ns1", known) == {"p2": 202}
    assert fake.inspected() == ["c1", "c2", "c3", "c3"]  # c2 not inspected again, c3 until it has one
    # without a memory every call inspects every running container (the chaos bench's pid_of)
    fake.calls.clear()
    assert node.running_pids("ns1") == {"p2": 202}
    assert node.running_pids("ns1") == {"p2": 202}
    assert fake.inspected() == ["c2", "c3", "c2", "c3"]
