"""Status writes the next cycle depends on (status.drain: the hand-off's record) are guarded by the
resourceVersion (issue 23, M3): a concurrent writer's change is never overwritten blindly.

`KubeApi.patch_status_guarded` reads the status (and its resourceVersion), checks that the part the
write is based on is still what the caller read, and patches with that resourceVersion; a 409
(another write in between) re-reads and retries; a changed basis raises `StatusConflict`, nothing
written."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from lagpilot.act.kubeapi import KubeApi, StatusConflict


class FakeCustom:
    """The CR's status subresource with a resourceVersion; `interleave` runs before the n-th patch
    lands (another writer), which bumps the version like the API server does."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.rv = 1
        self.status = status
        self.gets = 0
        self.patches: list[dict[str, Any]] = []
        self.interleave: dict[int, dict[str, Any]] = {}

    def get_namespaced_custom_object_status(
        self, group: str, version: str, ns: str, plural: str, name: str
    ) -> dict[str, Any]:
        self.gets += 1
        return {
            "metadata": {"name": name, "namespace": ns, "resourceVersion": str(self.rv)},
            "status": copy.deepcopy(self.status),
        }

    def patch_namespaced_custom_object_status(
        self, group: str, version: str, ns: str, plural: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        n = len(self.patches)
        self.patches.append(copy.deepcopy(body))
        if n in self.interleave:  # another writer got there first
            self.status.update(self.interleave.pop(n))
            self.rv += 1
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != str(self.rv):
            raise ApiException(status=409, reason="Conflict")
        self.status.update(body["status"])
        self.rv += 1
        return {}


def kube_with(fake: FakeCustom) -> KubeApi:
    k = KubeApi.__new__(KubeApi)
    k.custom = fake
    return k


def same_drain(drain_id: int, phase: str) -> Any:
    return lambda st: (
        (st.get("drain") or {}).get("id") == drain_id and (st.get("drain") or {}).get("phase") == phase
    )


def test_a_409_re_reads_and_retries_when_the_basis_still_holds() -> None:
    fake = FakeCustom({"drain": {"id": 3, "phase": "Planned"}, "totalLag": 5})
    # another writer changes an unrelated field between our read and our patch
    fake.interleave[0] = {"totalLag": 7}
    kube_with(fake).patch_status_guarded(
        "ns", "cr", {"drain": {"id": 3, "phase": "HandedOff"}}, same_drain(3, "Planned")
    )
    assert len(fake.patches) == 2 and fake.gets == 2
    assert fake.patches[0]["metadata"]["resourceVersion"] == "1"
    assert fake.patches[1]["metadata"]["resourceVersion"] == "2"  # the version read again after the 409
    assert fake.status == {"drain": {"id": 3, "phase": "HandedOff"}, "totalLag": 7}


def test_a_changed_basis_is_a_conflict_and_nothing_is_written() -> None:
    fake = FakeCustom({"drain": {"id": 3, "phase": "Planned"}})
    fake.interleave[0] = {"drain": {"id": 3, "phase": "Cancelled"}}  # a concurrent decision about the drain
    with pytest.raises(StatusConflict) as err:
        kube_with(fake).patch_status_guarded(
            "ns", "cr", {"drain": {"id": 3, "phase": "HandedOff"}}, same_drain(3, "Planned")
        )
    assert err.value.status == 409
    assert fake.status["drain"] == {"id": 3, "phase": "Cancelled"}  # the other writer's record stands
    assert len(fake.patches) == 1  # the first (refused) attempt only


def test_a_basis_already_gone_at_the_first_read_is_a_conflict() -> None:
    fake = FakeCustom({"drain": {"id": 4, "phase": "Planned"}})
    with pytest.raises(StatusConflict):
        kube_with(fake).patch_status_guarded(
            "ns", "cr", {"drain": {"id": 4, "phase": "HandedOff"}}, same_drain(3, "Planned")
        )
    assert fake.patches == []


def test_endless_conflicts_give_up_with_a_conflict() -> None:
    fake = FakeCustom({"drain": {"id": 3, "phase": "Planned"}})
    fake.interleave = {n: {"totalLag": n} for n in range(20)}
    with pytest.raises(StatusConflict):
        kube_with(fake).patch_status_guarded(
            "ns", "cr", {"drain": {"id": 3, "phase": "HandedOff"}}, same_drain(3, "Planned"), attempts=4
        )
    assert len(fake.patches) == 4 and fake.status["drain"]["phase"] == "Planned"


def test_the_drain_executor_writes_status_drain_guarded_by_the_drain_it_decided_on() -> None:
    """Every status.drain write of a hand-off names as its basis the drain the step was decided on
    (the previous write), and every effect is checked against it first."""
    import dataclasses

    from lagpilot.act.drain import normalized
    from lagpilot.decide.handoff import DrainStatus
    from tests.unit.test_drain_executor import FakeExecutor, ctx, world0

    log: list[tuple[str, Any]] = []
    w = world0()
    writes: list[tuple[Any, Any]] = []
    verified: list[Any] = []

    def patch_drain(patch: dict[str, Any], basis: Any) -> None:
        writes.append((patch["drain"], basis))
        w["status"] = patch["drain"]

    c = dataclasses.replace(
        ctx(log, w, None, wanted=(0,)), patch_drain=patch_drain, verify_drain=verified.append
    )
    FakeExecutor(log, w).reconcile(c)
    assert [p["reason"] for p, _ in writes] == ["Planned", "Published", "WaitingForAcks"]
    assert writes[0][1] is None  # planned over no drain
    for (prev, _), (_, basis) in itertools.pairwise(writes):
        assert normalized(basis) == normalized(DrainStatus.from_dict(prev))
    assert (
        verified and verified[0] is not None and verified[0].reason == "Planned"
    )  # the publish checked its basis


def test_a_changed_drain_before_an_effect_stops_the_step() -> None:
    import dataclasses

    from tests.unit.test_drain_executor import FakeExecutor, ctx, world0

    log: list[tuple[str, Any]] = []
    w = world0()

    def conflict(basis: Any) -> None:
        raise StatusConflict("changed", "test")

    c = dataclasses.replace(
        ctx(log, w, None, wanted=(0,)),
        patch_drain=lambda p, b: log.append(("status", p)),
        verify_drain=conflict,
    )
    with pytest.raises(StatusConflict):
        FakeExecutor(log, w).reconcile(c)
    assert not [e for e in log if e[0] == "mailbox"]  # the publish (an effect) was not made
