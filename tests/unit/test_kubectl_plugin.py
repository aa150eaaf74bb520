"""`kubectl lagpilot` (issue 28 item 1) against a fake API: output of every command in table, json
and yaml; the status read only through lagpilot.status_view. On the real stack with the real
kubectl: tests/real/test_kubectl_plugin.py."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot import kubectl_plugin as kp
from lagpilot import status_view as sv
from lagpilot.decide.status import FALSE, TRUE, Condition, merge_conditions

T0 = 1_700_000_000.0
ROOT = Path(__file__).resolve().parents[2]


def _bcg(name: str = "orders", ns: str = "shop", **status: Any) -> dict[str, Any]:
    conds = merge_conditions(
        [],
        [
            Condition("Ready", TRUE, "ConsumersReady", "2/2 consumers ready"),
            Condition("Scaling", TRUE, "ScaleUp", "scale 2->4: projected 900s > SLA 600s"),
            Condition("CatchUpAtRisk", TRUE, "ProjectedAboveSLA", "projected catch-up 900s > SLA 600s"),
            Condition("Degraded", FALSE, "AsExpected"),
        ],
        1,
        T0,
    )
    st = {
        "observedGeneration": 1,
        "partitions": 2,
        "replicas": 2,
        "desiredReplicas": 4,
        "totalLag": 9000,
        "maxPartitionLag": 6000,
        "produceRate": 10.0,
        "capacityPerReplica": 5.0,
        "projectedCatchUpSeconds": 900,
        "lastScaleTime": "2023-11-14T22:10:00Z",
        "conditions": conds,
        "lastObservedTime": "2023-11-14T22:13:20Z",
        "partitionStatuses": [
            {
                "partition": 0,
                "committed": 1000,
                "end": 7000,
                "low": 0,
                "lag": 6000,
                "oldestAgeSeconds": 120,
                "produceRate": 6,
                "consumeRate": 3,
            },
            {
                "partition": 1,
                "committed": 2000,
                "end": 5000,
                "low": 0,
                "lag": 3000,
                "produceRate": 4,
                "consumeRate": 2,
            },
        ],
        "drain": {
            "id": 3,
            "phase": "Running",
            "reason": "DrainRunning",
            "message": "drain 3 runs",
            "attempt": 1,
            "ranges": [{"partition": 0, "start": 1000, "end": 7000, "tasks": 2}],
            "subRanges": [
                {"partition": 0, "index": 0, "start": 1000, "end": 4000, "next": 2500, "records": 1500},
                {"partition": 0, "index": 1, "start": 4000, "end": 7000, "next": 7000, "records": 3000},
            ],
            "recordsDone": 4500,
            "recordsTotal": 6000,
            "history": [
                {
                    "id": 2,
                    "phase": "Verified",
                    "reason": "AllRangesDone",
                    "ranges": [{"partition": 1, "start": 0, "end": 500}],
                    "recordsDone": 500,
                    "recordsTotal": 500,
                    "seconds": 12.5,
                    "pauseSeconds": 0.0,
                }
            ],
        },
        **status,
    }
    return {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name, "namespace": ns, "generation": 1},
        "spec": {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "orders",
            "groupId": "g",
            "processing": {"sink": "log"},
            "catchUpSLASeconds": 600,
            "scaling": {"minReplicas": 1, "maxReplicas": 8},
        },
        "status": st,
    }


class FakeClient:
    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}
        self.default_namespace = "shop"
        self.patches: list[tuple[str, str, bool]] = []

    def get(self, ns: str, name: str) -> dict[str, Any]:
        if (ns, name) not in self.objs:
            raise kp.PluginError(f"not found: {name}")
        return copy.deepcopy(self.objs[(ns, name)])

    def list(self, ns: str | None) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (n, _), o in sorted(self.objs.items()) if ns is None or n == ns]

    def set_paused(self, ns: str, name: str, paused: bool) -> dict[str, Any]:
        self.patches.append((ns, name, paused))
        self.objs[(ns, name)]["spec"]["paused"] = paused
        return self.get(ns, name)


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient([_bcg(), _bcg("billing", "finance", totalLag=0, desiredReplicas=2, drain=None)])


def run(fake: FakeClient, *argv: str) -> str:
    return kp.run(list(argv), client_factory=lambda kubeconfig, context: fake)


def test_top(fake: FakeClient) -> None:
    out = run(fake, "top")
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["NAME", "MODE", "READY", "HEALTH", "REPLICAS"]
    assert len(lines) == 2 and lines[1].split()[:7] == ["orders", "Act", "True", "Current", "2", "4", "9000"]
    assert "15.0m" in lines[1] and "Running" in lines[1]  # projected 900 s vs SLA 600 s; the drain
    everything = run(fake, "top", "-A", "-o", "json")
    assert [(g["namespace"], g["name"]) for g in json.loads(everything)] == [
        ("finance", "billing"),
        ("shop", "orders"),
    ]
    assert yaml.safe_load(run(fake, "top", "-n", "finance", "-o", "yaml"))[0]["name"] == "billing"


def test_status(fake: FakeClient) -> None:
    out = run(fake, "status", "orders")
    assert (
        "lag 9000 records, produce 10.0/s, capacity 5.0/s per replica, projected catch-up 15.0m (SLA 10.0m)"
        in out
    )
    part0 = next(line for line in out.splitlines() if line.startswith("0 "))
    assert part0.split() == ["0", "6000", "2.0m", "6.00", "3.00", "1000", "7000"]  # the time lag: 120 s
    assert "DRAIN 3  phase=Running" in out and "records 4500/6000  tasks 1/2 done" in out
    assert "p0#0" in out and "50%" in out
    data = json.loads(run(fake, "status", "orders", "-o", "json"))
    assert data["partitions"][1] == {
        "partition": 1,
        "lag": 3000,
        "oldest_age_s": None,
        "produce_rate": 4.0,
        "consume_rate": 2.0,
        "committed": 2000,
        "end": 5000,
    }
    # Degraded, Reconciling and Stalled are False: absent (abnormal-true types)
    assert [c["type"] for c in data["conditions"]] == ["Ready", "Scaling", "CatchUpAtRisk"]


def test_why(fake: FakeClient) -> None:
    out = run(fake, "why", "orders")
    assert out.splitlines()[0].startswith("shop/orders: ScaleUp (Scaling=True")
    assert "scale 2->4: projected 900s > SLA 600s" in out
    assert "replicas 2 -> desired 4" in out and "capacity 5.0/s per replica" in out
    w = json.loads(run(fake, "why", "orders", "-o", "json"))
    assert w["inputs"]["capacityPerReplica"] == 5.0 and w["policy"]["maxReplicas"] == 8


def test_why_within_the_sla_says_so(fake: FakeClient) -> None:
    """CatchUpAtRisk False is not listed (abnormal-true): `why` reads its absence as not at risk."""
    obj = fake.objs[("finance", "billing")]
    obj["status"]["conditions"] = merge_conditions(
        [],
        [
            Condition("Ready", TRUE, "ConsumersReady"),
            Condition("Scaling", FALSE, "Steady", "keep 2->2"),
            Condition("CatchUpAtRisk", FALSE, "WithinSLA", "projected catch-up 0s <= SLA 600s"),
        ],
        1,
        T0,
    )
    assert "CatchUpAtRisk" not in {c["type"] for c in obj["status"]["conditions"]}
    out = run(fake, "why", "billing", "-n", "finance")
    assert "catch-up at risk: False (not listed: within the SLA)" in out, out
    w = json.loads(run(fake, "why", "billing", "-n", "finance", "-o", "json"))
    assert (w["catchUpAtRisk"], w["catchUpReason"], w["catchUpMessage"]) == ("False", None, None)


def test_why_in_recommend_mode(fake: FakeClient) -> None:
    fake.objs[("shop", "orders")]["spec"]["mode"] = "Recommend"
    fake.objs[("shop", "orders")]["status"]["recommendation"] = {
        "replicas": 4,
        "currentReplicas": 2,
        "source": "GroupMembers",
        "capacitySource": "CommittedRate",
        "reason": "ScaleUp",
        "message": "m",
        "drain": False,
        "since": "2023-11-14T22:13:20Z",
    }
    assert "mode Recommend: would go 2 -> 4 replicas; not applied (capacity from CommittedRate)" in run(
        fake, "why", "orders"
    )
    assert "RECOMMENDATION  2 -> 4 replicas" in run(fake, "status", "orders")
    assert run(fake, "top").splitlines()[1].split()[1] == "Recommend"


def test_drains(fake: FakeClient) -> None:
    out = run(fake, "drains", "orders")
    assert (
        "DRAIN 3" in out
        and "drain 2 Verified (AllRangesDone): p1[0..500); 500/500 records in 12.5 s, pause 0 s" in out
    )
    assert "1000" in out and "7000" in out  # the range p0 [1000..7000) with its 2 tasks
    hist = json.loads(run(fake, "drains", "orders", "-o", "json"))["history"]
    assert hist[0]["id"] == 2 and hist[0]["ranges"] == "p1[0..500)"
    assert run(fake, "drains", "billing", "-n", "finance").startswith("no drain recorded")


def test_pause_resume(fake: FakeClient) -> None:
    assert run(fake, "pause", "orders") == "batchconsumergroup.lagpilot.io/orders paused"
    assert json.loads(run(fake, "resume", "orders", "-o", "json"))["paused"] is False
    assert fake.patches == [("shop", "orders", True), ("shop", "orders", False)]


def test_simulate(fake: FakeClient) -> None:
    out = run(fake, "simulate", "bcg/orders", "--horizon", "1200")
    assert "backlog 9000 records now, produce 10.0/s, capacity 5.0/s per replica, 2 partitions" in out
    assert "lagpilot" in out and "static" in out
    data = json.loads(run(fake, "simulate", "bcg/orders", "--horizon", "1200", "-o", "json"))
    assert set(data["results"]) == {"lagpilot", "static"}
    with pytest.raises(kp.PluginError):
        run(fake, "simulate", "deploy/orders")


def test_errors_are_clear(fake: FakeClient) -> None:
    with pytest.raises(kp.PluginError, match="not found"):
        run(fake, "status", "nope")
    assert kp.main(["status", "nope", "--kubeconfig", "/nonexistent/kubeconfig"]) == 1


def test_the_plugin_reads_the_status_only_through_status_view() -> None:
    """The status's shape (structured lists since issue 26) is known to one module: status_view."""
    src = (ROOT / "operator" / "src" / "lagpilot" / "kubectl_plugin.py").read_text()
    tree = ast.parse(src)
    reads = [
        n
        for n in ast.walk(tree)
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and n.args[0].value == "status"
        )
        or (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "status")
    ]
    assert reads == [], "kubectl_plugin reads obj['status'] itself"
    encoded = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and n.value in ("estimator", "subRanges", "scalingHistory", "ranges", "partitionStatuses")
    ]
    assert encoded == [], encoded
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names} | {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
    }
    assert "status_codec" not in imported and "lagpilot.decide.status_codec" not in imported
    assert sv.summary(_bcg())["totalLag"] == 9000


def test_the_fixture_is_a_valid_status() -> None:
    """The fixture's status is what the operator writes (lagpilot.model.status, unknown fields
    forbidden): the view is tested against the real shape, not an invented one."""
    from lagpilot.model.status import validate_status

    validate_status(_bcg()["status"])
    validate_status(
        _bcg(
            recommendation={
                "replicas": 4,
                "currentReplicas": 2,
                "source": "GroupMembers",
                "capacitySource": "CommittedRate",
                "reason": "ScaleUp",
                "message": "m",
                "drain": False,
                "since": "2023-11-14T22:13:20Z",
            }
        )["status"]
    )


def test_malformed_entries_are_skipped(fake: FakeClient) -> None:
    obj = _bcg()
    obj["status"]["partitionStatuses"].append({"lag": 5})
    obj["status"]["drain"]["subRanges"].append("p9#0 [0..1) next=0 records=0")
    obj["status"]["drain"]["history"].append({"id": 1})
    assert [r.partition for r in sv.partitions(obj)] == [0, 1]
    d = sv.drain(obj)
    assert d is not None and len(d.sub_ranges) == 2 and d.ranges[0]["end"] == 7000
    assert sv.drain_history(obj)[1]["line"] == "drain 1 Unknown (): none; 0/0 records"
