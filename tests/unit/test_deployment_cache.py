"""deployment_cache: the cycles read their Deployment from the watch's cache; our own answers are
trusted briefly; nothing ever goes back to an older version."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.act.deployment_cache import CachingKube, DeploymentCache


def dep(rv: int | str, replicas: int = 1, ready: int = 0, name: str = "g-consumer") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv), "labels": {"x": "y"}},
        "spec": {"replicas": replicas, "template": {"big": "x" * 100}},
        "status": {"replicas": replicas, "readyReplicas": ready},
    }


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Api:
    def __init__(self) -> None:
        self.server: dict[str, Any] | None = dep(5)
        self.gets = 0
        self.applies = 0

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.server

    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.applies += 1
        rv = int(self.server["metadata"]["resourceVersion"]) + 1 if self.server else 1
        self.server = dep(rv, manifest["spec"]["replicas"])
        return self.server

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patched = patch


def test_watched_entries_answer_every_cycle_without_a_get() -> None:
    api, cache = Api(), DeploymentCache(monotonic=Clock())
    kube = CachingKube(api, cache)
    cache.watched(None, dep(5, 2, 2))  # the initial listing
    for _ in range(10):
        got = kube.get_deployment("ns", "g-consumer")
        assert got is not None and got["spec"] == {"replicas": 2} and got["status"]["readyReplicas"] == 2
    assert api.gets == 0
    assert "template" not in got["spec"] and "labels" not in got["metadata"]  # kept slim
    cache.watched("MODIFIED", dep(6, 2, 1))  # a pod went unready
    assert kube.get_deployment("ns", "g-consumer")["status"]["readyReplicas"] == 1


def test_a_miss_is_a_get_and_its_answer_is_trusted_only_briefly() -> None:
    clock = Clock()
    api, cache = Api(), DeploymentCache(provisional_s=5.0, monotonic=clock)
    kube = CachingKube(api, cache)
    assert kube.get_deployment("ns", "g-consumer")["metadata"]["resourceVersion"] == "5"
    assert api.gets == 1
    kube.get_deployment("ns", "g-consumer")
    assert api.gets == 1
    clock.t += 5.0  # no watch confirmed it (a dead watch): ask again
    kube.get_deployment("ns", "g-consumer")
    assert api.gets == 2
    api.server = None  # deleted, and the watch is dead: a 404 is not cached
    clock.t += 5.0
    assert kube.get_deployment("ns", "g-consumer") is None
    assert kube.get_deployment("ns", "g-consumer") is None
    assert api.gets == 4


def test_an_apply_is_seen_by_the_next_cycle_before_the_watch_delivers_it() -> None:
    """No double scale: the cycle after an apply reads the applied replica count."""
    clock = Clock()
    api, cache = Api(), DeploymentCache(monotonic=clock)
    kube = CachingKube(api, cache)
    cache.watched(None, dep(5, 1))
    kube.apply_deployment({"metadata": {"namespace": "ns", "name": "g-consumer"}, "spec": {"replicas": 3}})
    assert kube.get_deployment("ns", "g-consumer")["spec"]["replicas"] == 3
    cache.watched("MODIFIED", dep(5, 1))  # a late event of the older version: ignored
    assert kube.get_deployment("ns", "g-consumer")["spec"]["replicas"] == 3
    cache.watched("MODIFIED", dep(6, 3, 3))  # the watch delivers the apply: trusted from now on
    clock.t += 3600
    assert kube.get_deployment("ns", "g-consumer")["status"]["readyReplicas"] == 3
    assert api.gets == 0


def test_deleted_means_ask_again() -> None:
    api, cache = Api(), DeploymentCache(monotonic=Clock())
    kube = CachingKube(api, cache)
    cache.watched(None, dep(5))
    cache.watched("DELETED", dep(7))
    api.server = None
    assert kube.get_deployment("ns", "g-consumer") is None and api.gets == 1  # the cycle then re-creates it
    cache.watched("DELETED", dep(3))  # an older deletion cannot remove a newer object
    cache.watched("ADDED", dep(9))
    cache.watched("DELETED", dep(8))
    assert kube.get_deployment("ns", "g-consumer")["metadata"]["resourceVersion"] == "9"


def test_other_calls_go_to_the_api() -> None:
    api = Api()
    kube = CachingKube(api, DeploymentCache())
    kube.patch_status("ns", "g", {"a": 1})
    assert api.patched == {"a": 1}


def test_answers_are_copies() -> None:
    cache = DeploymentCache(monotonic=Clock())
    cache.watched(None, dep(5, 2))
    got = cache.get("ns", "g-consumer")
    got["status"]["readyReplicas"] = 99
    assert cache.get("ns", "g-consumer")["status"]["readyReplicas"] == 0


events = st.lists(st.tuples(st.sampled_from(["watch", "put", "delete"]), st.integers(1, 20)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(events)
def test_never_answers_an_older_version_than_it_was_given(evs: list[tuple[str, int]]) -> None:
    """Whatever the order of watch events and our own answers, an answer is never older than a
    version the cache already answered with (unless the object was deleted after it)."""
    clock = Clock()
    cache = DeploymentCache(monotonic=clock)
    newest_answered = 0
    for kind, rv in evs:
        if kind == "watch":
            cache.watched("MODIFIED", dep(rv))
        elif kind == "put":
            cache.put(dep(rv))
        else:
            cache.watched("DELETED", dep(rv))
            if rv >= newest_answered:
                newest_answered = 0
        got = cache.get("ns", "g-consumer")
        if got is not None:
            v = int(got["metadata"]["resourceVersion"])
            assert v >= newest_answered
            newest_answered = v


@pytest.mark.parametrize("rv", ["abc", None])
def test_opaque_resource_versions_take_the_latest(rv: Any) -> None:
    cache = DeploymentCache(monotonic=Clock())
    cache.watched(None, dep(5, 1))
    d = dep(5, 4)
    d["metadata"]["resourceVersion"] = rv
    cache.watched("MODIFIED", d)
    assert cache.get("ns", "g-consumer")["spec"]["replicas"] == 4


def test_the_watch_selector_is_the_label_the_deployments_carry() -> None:
    from lagpilot.act import deployment
    from lagpilot.act.deployment_cache import MANAGED_BY, MANAGED_BY_LABEL, WATCH_SELECTOR

    assert deployment.labels("orders", "0.1.0")[MANAGED_BY_LABEL] == MANAGED_BY
    assert WATCH_SELECTOR == f"{MANAGED_BY_LABEL}={MANAGED_BY}"
