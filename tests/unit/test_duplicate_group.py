"""M4: two BatchConsumerGroups with the same groupId on the same Kafka cluster (issue 23).

The older CR keeps the group; the newer one gets Degraded=True/DuplicateGroupId naming spec.groupId
and the other CR, and creates nothing (no Deployment, no drain, no shared side group touched)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from lagpilot import handlers
from lagpilot.config import OperatorConfig
from lagpilot.decide import duplicates as dup
from lagpilot.reconcile import delete

SPEC = {
    "kafka": {"bootstrapServers": "k1:9092,k2:9092"},
    "topic": "t",
    "groupId": "orders",
    "processing": {"sink": "log"},
}
FIRST = {
    "namespace": "ns",
    "name": "first",
    "uid": "uid-1",
    "creationTimestamp": "2026-11-25T10:00:00Z",
    "generation": 1,
}
SECOND = {
    "namespace": "ns",
    "name": "second",
    "uid": "uid-2",
    "creationTimestamp": "2026-11-25T11:00:00Z",
    "generation": 3,
}


def claims(*metas: dict[str, Any], spec: dict[str, Any] = SPEC) -> dict[Any, list[Any]]:
    """What the kopf index holds: key -> every CR's claim with that key."""
    out: dict[Any, list[Any]] = {}
    for m in metas:
        for k, v in handlers.group_claims(body={"metadata": m, "spec": spec}).items():
            out.setdefault(k, []).append(v)
    return out


def test_the_scope_is_the_kafka_cluster_and_the_group_any_topic_any_namespace() -> None:
    key = dup.index_key(SPEC)
    assert key == dup.index_key({**SPEC, "topic": "other"})  # one consumer group, whatever its topics
    assert key == dup.index_key({**SPEC, "kafka": {"bootstrapServers": " K2:9092, k1:9092 "}})  # same servers
    assert key != dup.index_key({**SPEC, "kafka": {"bootstrapServers": "other:9092"}})  # another cluster
    assert key != dup.index_key({**SPEC, "groupId": "orders-2"})
    assert dup.index_key({"topic": "t"}) is None  # not indexable (the CRD rejects it anyway)


def test_the_older_cr_holds_the_group_the_newer_is_the_duplicate() -> None:
    idx = claims(FIRST, SECOND)
    key = dup.index_key(SPEC)
    assert dup.other_holder(dup.claim_of(FIRST), idx[key]) is None
    other = dup.other_holder(dup.claim_of(SECOND), idx[key])
    assert other is not None and (other.namespace, other.name) == ("ns", "first")
    # a CR of another namespace is just as much the same group
    elsewhere = {**FIRST, "namespace": "team-b", "uid": "uid-0", "creationTimestamp": "2026-11-25T09:00:00Z"}
    assert dup.other_holder(dup.claim_of(FIRST), claims(FIRST, elsewhere)[key]).name == "first"


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        kopf, "event", lambda obj, type, reason, message: seen.append((type, reason, message))
    )
    return seen


class Kube:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.patches: list[dict[str, Any]] = []

    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(manifest)
        return manifest

    def get_deployment(self, namespace: str, name: str) -> None:
        return None

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)


def memo(kube: Kube) -> Any:
    cfg = OperatorConfig(
        pod_start_seconds=0,
        kafka_timeout_seconds=1,
        min_backoff_seconds=1,
        max_backoff_seconds=2,
        status_heartbeat_seconds=60.0,
    )
    # the drain executor's part the Deployment needs: the CR's hand-off key fingerprint (M8)
    return SimpleNamespace(
        kube=kube,
        config=cfg,
        admin_pool=None,
        metrics=None,
        drain=SimpleNamespace(handoff_key_id=lambda namespace, name, uid: "0" * 16),
    )


def test_the_second_cr_gets_duplicate_group_id_and_creates_nothing(events: list) -> None:
    kube = Kube()
    idx = claims(FIRST, SECOND)
    handlers.apply(
        body={"metadata": SECOND, "spec": SPEC}, spec=SPEC, status={}, memo=memo(kube), group_claims=idx
    )
    assert kube.applied == []  # no Deployment: its consumers would join the first CR's group
    (patch,) = kube.patches
    deg = next(c for c in patch["conditions"] if c["type"] == "Degraded")
    ready = next(c for c in patch["conditions"] if c["type"] == "Ready")
    assert (deg["status"], deg["reason"]) == ("True", "DuplicateGroupId") and (
        ready["status"],
        ready["reason"],
    ) == ("False", "DuplicateGroupId")
    assert (
        "spec.groupId" in deg["message"] and "'orders'" in deg["message"] and "ns/first" in deg["message"]
    ), deg
    assert events and events[0][:2] == ("Warning", "DuplicateGroupId") and "ns/first" in events[0][2]


def test_the_first_cr_is_unaffected(events: list) -> None:
    kube = Kube()
    handlers.apply(
        body={"metadata": FIRST, "spec": SPEC},
        spec=SPEC,
        status={"desiredReplicas": 2},
        memo=memo(kube),
        group_claims=claims(FIRST, SECOND),
    )
    (dep,) = kube.applied
    assert dep["metadata"]["name"] == "first-consumer" and kube.patches == [] and events == []


def test_deleting_the_duplicate_never_touches_the_shared_groups(
    events: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    touched: list[Any] = []
    monkeypatch.setattr(delete, "forget_progress_groups", lambda *a, **k: touched.append(a))
    verified = {"id": 1, "phase": "Verified", "ranges": [{"partition": 0, "start": 0, "end": 10}]}
    handlers.finalize(
        body={"metadata": SECOND, "spec": SPEC},
        spec=SPEC,
        status={"drain": verified},
        meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
        memo=memo(Kube()),
        group_claims=claims(FIRST, SECOND),
    )
    assert touched == []  # the first CR's progress groups stay
    handlers.finalize(
        body={"metadata": FIRST, "spec": SPEC},
        spec=SPEC,
        status={"drain": verified},
        meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
        memo=memo(Kube()),
        group_claims=claims(FIRST, SECOND),
    )
    assert len(touched) == 1
