"""Leader election (issue 23, M3): the pure Lease decisions and the elector against a fake Lease API
with the API server's optimistic concurrency (a write with a stale resourceVersion is a 409)."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from lagpilot.act.leader_lease import LeaseElector
from lagpilot.decide.leader import LeaseRecord, LeaseTiming, Step, lease_namespaces, next_step


def test_next_step() -> None:
    assert next_step(None, "a", 0, 100) == (Step.CREATE, 0.0)
    assert next_step(LeaseRecord("a", 15), "a", 0, 100) == (Step.RENEW, 0.0)
    assert next_step(LeaseRecord("", 15), "a", 99, 100) == (Step.TAKE, 0.0)  # released
    # another holder: expiry counted on OUR clock from when we first saw this version
    assert next_step(LeaseRecord("b", 15), "a", 90, 100) == (Step.WAIT, 5.0)
    assert next_step(LeaseRecord("b", 15), "a", 85, 100) == (Step.TAKE, 0.0)


def test_timings_must_let_the_holder_stop_before_a_standby_takes_over() -> None:
    LeaseTiming(15, 10, 2)
    for bad in ((15, 15, 2), (10, 15, 2), (15, 10, 10), (15, 10, 0)):
        with pytest.raises(ValueError):
            LeaseTiming(*bad)
    assert LeaseTiming.from_env(
        {
            "LAGPILOT_LEASE_DURATION_SECONDS": "6",
            "LAGPILOT_LEASE_RENEW_DEADLINE_SECONDS": "4",
            "LAGPILOT_LEASE_RETRY_SECONDS": "1",
        }
    ) == LeaseTiming(6, 4, 1)


def test_lease_namespaces() -> None:
    assert lease_namespaces(["b", "a", "b"], None) == ["a", "b"]  # sorted: no lock-order deadlock
    assert lease_namespaces([], "lagpilot-system") == ["lagpilot-system"]
    assert lease_namespaces(["team-*"], "lagpilot-system") == ["lagpilot-system"]  # a kopf glob
    with pytest.raises(ValueError, match="LAGPILOT_OPERATOR_NAMESPACE"):
        lease_namespaces([], None)


class FakeLeases:
    """coordination.k8s.io/v1 leases with resourceVersions (409 on a stale one, like the API server)."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 0

    def read_namespaced_lease(self, name: str, ns: str) -> dict[str, Any]:
        if (ns, name) not in self.store:
            raise ApiException(status=404)
        return copy.deepcopy(self.store[(ns, name)])

    def create_namespaced_lease(self, ns: str, body: dict[str, Any]) -> None:
        key = (ns, body["metadata"]["name"])
        if key in self.store:
            raise ApiException(status=409)
        self.rv += 1
        self.store[key] = {
            **copy.deepcopy(body),
            "metadata": {**body["metadata"], "resourceVersion": str(self.rv)},
        }

    def replace_namespaced_lease(self, name: str, ns: str, body: dict[str, Any]) -> None:
        cur = self.store[(ns, name)]
        if body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        self.rv += 1
        self.store[(ns, name)] = {
            **copy.deepcopy(body),
            "metadata": {**body["metadata"], "resourceVersion": str(self.rv)},
        }


def elector(fake: FakeLeases, who: str, clock: list[float]) -> LeaseElector:
    e = LeaseElector.__new__(LeaseElector)
    e.api, e._sanitize = fake, (lambda x: x)
    e.namespaces, e.name, e.identity = ["ns"], "lagpilot-operator", who
    e.timing = LeaseTiming(15, 10, 2)
    e.clock, e.wall = (lambda: clock[0]), (lambda: 1.7e9 + clock[0])
    e._seen, e.renewed = {}, {}
    return e


def test_one_holder_a_standby_takes_over_only_after_the_lease_expired_unrenewed() -> None:
    fake, clock = FakeLeases(), [0.0]
    a, b = elector(fake, "a", clock), elector(fake, "b", clock)
    assert a.try_once("ns") == (True, "a")
    assert b.try_once("ns") == (False, "a")
    clock[0] = 10.0
    assert a.try_once("ns") == (True, "a")  # renewed: a new version, b's expiry restarts
    clock[0] = 20.0
    assert b.try_once("ns") == (False, "a")  # 10 s since b saw the renewal: not expired
    clock[0] = 34.0
    assert b.try_once("ns") == (False, "a")  # b first saw that version at 20: 14 s ago
    clock[0] = 35.0
    assert b.try_once("ns") == (True, "b")  # unchanged for a lease duration on b's clock: taken over
    lease = fake.store[("ns", "lagpilot-operator")]["spec"]
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
    assert a.try_once("ns") == (False, "b")  # the old leader sees it lost


def test_a_race_for_an_expired_lease_has_one_winner() -> None:
    fake, clock = FakeLeases(), [0.0]
    a = elector(fake, "a", clock)
    a.try_once("ns")
    b, c = elector(fake, "b", clock), elector(fake, "c", clock)
    b.try_once("ns"), c.try_once("ns")
    clock[0] = 30.0
    # both read the same expired version; only the first write lands
    lease = fake.read_namespaced_lease("lagpilot-operator", "ns")
    real_read = fake.read_namespaced_lease
    fake.read_namespaced_lease = lambda name, ns: copy.deepcopy(lease)  # type: ignore[method-assign]
    assert b.try_once("ns")[0] is True
    assert c.try_once("ns")[0] is False  # 409
    fake.read_namespaced_lease = real_read  # type: ignore[method-assign]
    assert fake.store[("ns", "lagpilot-operator")]["spec"]["holderIdentity"] == "b"


def test_release_lets_a_standby_take_over_at_once_and_renewal_loss_is_reported() -> None:
    fake, clock = FakeLeases(), [0.0]
    a, b = elector(fake, "a", clock), elector(fake, "b", clock)
    assert a.acquire(threading.Event())
    assert b.try_once("ns")[0] is False
    a.release()
    assert b.try_once("ns") == (True, "b")  # no waiting for the 15 s expiry
    lost: list[tuple[str, str]] = []
    a.timing = LeaseTiming(0.3, 0.2, 0.01)
    a.renew_forever(threading.Event(), lambda ns, why: lost.append((ns, why)))
    assert lost and "held by b" in lost[0][1]
