"""A test session killed mid-run (an interrupted ./dev/test, a machine restart) leaves its
namespaces on the node: their consumers, drain Jobs and warm runtimes keep their CPU requests, and
the next run's pods stay Pending (seen 2026-11-27: six namespaces of killed sessions held 1,950m of
the node's 2,000m; the next ./dev/test ran 70 tests in 44 minutes, four of them failed). ./dev/test
deletes them before its own session starts, when no other test session holds the stack."""

from __future__ import annotations

from typing import Any

from tests.fixtures.kube import (
    TEST_NAMESPACE_LABEL,
    Leftovers,
    leftover_namespaces,
    sweep_leftover_namespaces,
)


def ns(name: str, labels: dict[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T17:00:00Z"
    return {"metadata": meta}


TEST = {TEST_NAMESPACE_LABEL: "true"}
LISTED = [
    ns("drain-6336aa", TEST),
    ns("secrets-drain-bd51c5", TEST),
    ns("lpn-team-18e62c", TEST, deleting=True),  # already going
    ns("orders", {"team": "a"}),  # a person's
    ns("lagpilot-demo", {"lagpilot.io/demo": "true"}),  # a kept demo: not a test's
    ns("kube-system"),
]


def test_only_test_namespaces_are_leftovers_when_no_session_runs() -> None:
    assert leftover_namespaces(LISTED, other_sessions=0) == Leftovers(
        delete=["drain-6336aa", "secrets-drain-bd51c5"],  # not the one already going
        unblock=["drain-6336aa", "secrets-drain-bd51c5", "lpn-team-18e62c"],  # its CR's finalizer holds it
    )


def test_nothing_is_a_leftover_while_another_test_session_holds_the_stack() -> None:
    assert leftover_namespaces(LISTED, other_sessions=1) == Leftovers([], [])


class FakeCore:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items, self.deleted = items, []

    def list_namespace(self, label_selector: str = "") -> Any:
        key, _, value = label_selector.partition("=")
        return {"items": [i for i in self.items if i["metadata"]["labels"].get(key) == value]}

    def delete_namespace(self, name: str, propagation_policy: str = "") -> None:
        self.deleted.append((name, propagation_policy))


class FakeCustom:
    """One CR with the operator's finalizer in lpn-team-18e62c, one without in drain-6336aa."""

    def __init__(self) -> None:
        self.crs = {
            "lpn-team-18e62c": [{"metadata": {"name": "drain-on-node", "finalizers": ["lagpilot.io/drain"]}}],
            "drain-6336aa": [{"metadata": {"name": "orders"}}],
        }
        self.patched: list[tuple[str, str, Any]] = []

    def list_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str) -> Any:
        assert (group, version, plural) == ("lagpilot.io", "v1alpha1", "batchconsumergroups")
        return {"items": self.crs.get(ns, [])}

    def patch_namespaced_custom_object(
        self, group: str, version: str, ns: str, plural: str, name: str, body: Any
    ) -> None:
        self.patched.append((ns, name, body))


def test_sweep_deletes_the_leftovers_and_lifts_their_crs_finalizers() -> None:
    core, custom = FakeCore(LISTED), FakeCustom()
    left = sweep_leftover_namespaces(core, custom, other_sessions=0)
    assert left.delete == ["drain-6336aa", "secrets-drain-bd51c5"]
    assert core.deleted == [("drain-6336aa", "Background"), ("secrets-drain-bd51c5", "Background")]
    assert custom.patched == [("lpn-team-18e62c", "drain-on-node", {"metadata": {"finalizers": None}})]
    core, custom = FakeCore(LISTED), FakeCustom()
    assert sweep_leftover_namespaces(core, custom, other_sessions=2) == Leftovers([], [])
    assert core.deleted == [] and custom.patched == []
