"""The per-CR key Secrets, one way to say them (act/key_secret.KeyKind.secret, review of issue 26):
each kind builds exactly the Secret main built with its own build_*_secret function (the literals
below are main's output at 62672e7), and the fingerprints stay main's (a changed one would roll
every consumer and runtime)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from lagpilot.act.drain_part_key import PART_KEY, PartKeys
from lagpilot.act.drain_runtime import RUNTIME_KEY
from lagpilot.act.handoff_key import HANDOFF_KEY, HandoffKeys
from lagpilot.act.key_secret import CrKeys, KeyKind
from lagpilot.act.spark_rpc_key import SPARK_RPC_KEY, SparkRpcKeys

OWNER = [
    {
        "apiVersion": "lagpilot.io/v1alpha1",
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": "BatchConsumerGroup",
        "name": "orders",
        "uid": "uid-1",
    }
]
COMMON = {
    "app.kubernetes.io/instance": "orders",
    "app.kubernetes.io/managed-by": "lagpilot",
    "app.kubernetes.io/part-of": "lagpilot",
    "app.kubernetes.io/version": "1.2.3",
}
RUNTIME_EXTRA = {"app.kubernetes.io/name": "lagpilot-drain-runtime", "lagpilot.io/drain-runtime-of": "orders"}


def _main(name: str, component: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "immutable": True,
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "labels": {**COMMON, "app.kubernetes.io/component": component, **(extra or {})},
            "name": name,
            "namespace": "ns1",
            "ownerReferences": OWNER,
        },
        "stringData": {"key": "ab" * 32},
    }


@pytest.mark.parametrize(
    "kind, want",
    [
        (HANDOFF_KEY, _main("orders-handoff-key", "handoff-key")),
        (PART_KEY, _main("orders-drain-part-key", "drain-part-key")),
        (SPARK_RPC_KEY, _main("orders-drain-rpc-key", "drain-rpc-key")),
        (RUNTIME_KEY, _main("orders-drain-runtime-key", "drain-runtime", RUNTIME_EXTRA)),
    ],
    ids=lambda x: x.what if isinstance(x, KeyKind) else "",
)
def test_each_kind_builds_mains_secret(kind: KeyKind, want: dict[str, Any]) -> None:
    assert kind.secret("orders", "ns1", "uid-1", "ab" * 32, version="1.2.3") == want


def test_the_fingerprints_are_mains() -> None:
    key = bytes(range(32))
    assert HANDOFF_KEY.key_id is not None and HANDOFF_KEY.key_id(key) == "5270186253f32eef"
    from lagpilot_runtime import plan_auth

    assert plan_auth.key_id(key) == "679f0751c7321cb4"  # the runtime key's, in its Deployment's pod spec
    for kind in (PART_KEY, SPARK_RPC_KEY, RUNTIME_KEY):
        assert kind.key_id is None


class _Core:
    def __init__(self) -> None:
        self.secrets: dict[str, Any] = {}

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        if name not in self.secrets:
            raise type("NotFound", (Exception,), {"status": 404})()
        return self.secrets[name]

    def create_namespaced_secret(self, namespace: str, body: Any) -> None:
        data = {k: base64.b64encode(v.encode()).decode() for k, v in body["stringData"].items()}
        self.secrets[body["metadata"]["name"]] = {**body, "data": data}


@pytest.mark.parametrize(
    "make", [HandoffKeys, PartKeys, SparkRpcKeys, lambda c, s: CrKeys(RUNTIME_KEY, c, s)]
)
def test_one_reader_creates_each_kind_once_and_reads_it_back(make: Any) -> None:
    core = _Core()
    keys = make(core, lambda x: x)
    k = keys.key("ns1", "orders", "uid-1")
    assert len(k) == 32 and list(core.secrets) == [keys.kind.secret_name("orders")]
    assert make(core, lambda x: x).key("ns1", "orders", "uid-1") == k  # another process reads the same key
    assert (
        core.secrets[keys.kind.secret_name("orders")]["metadata"]["labels"]["app.kubernetes.io/component"]
        == keys.kind.component
    )
