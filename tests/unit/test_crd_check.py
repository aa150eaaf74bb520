"""The installed CRD checked against the operator's own (issue 26): an older CRD (another checkout's,
or a `helm upgrade`, which never upgrades `crds/`) makes the API server prune the status fields the
operator writes, silently (`status.drain.idleSince`, seen 2026-11-27). The comparison and the
condition are pure (lagpilot.decide.crd_check); the cycle lays the condition over every CR it
reconciles and goes on acting; the operator-wide check (act/crd_check.CrdCheck) re-reads the CRD
on a slow interval.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot.act.crd_check import CrdCheck
from lagpilot.act.kubeapi import KubeError
from lagpilot.decide import crd_check
from lagpilot.decide.status import TRUE, Condition, find_condition, merge_conditions
from lagpilot.model.crd import VERSION, crd
from lagpilot.model.status import DegradedReason
from tests.unit.test_handlers_reconcile import World, base_spec

T0 = 1_700_000_000.0
OURS = crd()


def _schema(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _props(obj: dict[str, Any], path: str) -> dict[str, Any]:
    """The node at a dotted path of the CRD's schema ("status.drain"; "[]" steps into items)."""
    node = _schema(obj)
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        else:
            node = node["properties"][part]
    return node


def _edit(fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    installed = copy.deepcopy(OURS)
    fn(installed)
    return installed


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    head, _, leaf = path.rpartition(".")
    return lambda o: _props(o, head)["properties"].pop(leaf)


def _set(path: str, **kv: Any) -> Callable[[dict[str, Any]], None]:
    return lambda o: _props(o, path).update(kv)


def _not_served(o: dict[str, Any]) -> None:
    o["spec"]["versions"][0]["served"] = False


def _preserve_status(o: dict[str, Any]) -> None:
    _schema(o)["properties"]["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _extra(o: dict[str, Any]) -> None:
    _props(o, "status.drain")["properties"]["newerField"] = {"type": "string"}


# (installed CRD, the gaps named): ours is this checkout's generated CRD
GAPS = [
    ("same", lambda o: None, []),
    ("idleSince pruned", _drop("status.drain.idleSince"), ["status.drain.idleSince (missing)"]),
    # a missing object is one gap, not one per field below it
    ("no drain at all", _drop("status.drain"), ["status.drain (missing)"]),
    ("a spec field", _drop("spec.drain.busy"), ["spec.drain.busy (missing)"]),
    (
        "in a list's items",
        _drop("status.conditions.[].observedGeneration"),
        ["status.conditions[].observedGeneration (missing)"],
    ),
    (
        "a changed type",
        _set("status.totalLag", type="string"),
        ["status.totalLag (type string, this operator writes integer)"],
    ),
    (
        "an enum without a value",
        _set("status.drain.phase", enum=["Planned", "HandedOff", "Running", "Succeeded", "Failed"]),
        ["status.drain.phase (enum lacks Verified, Cancelled)"],
    ),
    # a newer CRD than the operator: nothing of ours is pruned
    ("a field the operator does not know", _extra, []),
    # nothing below a preserve-unknown-fields node is pruned
    ("status preserved whole", _preserve_status, []),
    ("version not served", _not_served, [f"{VERSION} (not served)"]),
]


@pytest.mark.parametrize(("edit", "want"), [(e, w) for _, e, w in GAPS], ids=[i for i, _, _ in GAPS])
def test_the_gaps_of_an_installed_crd(edit: Callable[[dict[str, Any]], None], want: list[str]) -> None:
    gaps = crd_check.crd_gaps(_schema(OURS), _edit(edit), VERSION)
    assert [str(g) for g in gaps] == want


def test_no_crd_at_all_is_a_gap() -> None:
    assert [str(g) for g in crd_check.crd_gaps(_schema(OURS), {}, VERSION)] == [f"{VERSION} (not served)"]


def test_the_condition_names_the_fields_and_the_fix() -> None:
    assert crd_check.outdated_condition([]) is None
    gaps = crd_check.crd_gaps(_schema(OURS), _edit(_drop("status.drain.idleSince")), VERSION)
    cond = crd_check.outdated_condition(gaps)
    assert cond is not None
    assert (cond.type, cond.status, cond.reason) == ("Degraded", TRUE, "CRDOutdated")
    assert cond.reason == DegradedReason.CRD_OUTDATED.value  # the vocabulary's word
    assert "status.drain.idleSince" in cond.message
    assert "kubectl apply --server-side -f crds/" in cond.message and "docs/helm.md" in cond.message


def test_the_condition_names_at_most_a_few_fields() -> None:
    many = [crd_check.Gap(f"status.f{i}", "missing") for i in range(20)]
    cond = crd_check.outdated_condition(many)
    assert cond is not None
    assert "status.f0 (missing)" in cond.message and "status.f19" not in cond.message
    assert "and 12 more" in cond.message


OUTDATED = Condition("Degraded", TRUE, "CRDOutdated", "the installed CRD lacks status.drain.idleSince")


def _merged(*conds: Condition) -> list[dict[str, Any]]:
    return merge_conditions(None, list(conds), 1, T0)


# (conditions the cycle computed, the Degraded condition written)
OVERLAY = [
    ("normal: Degraded added", [Condition("Ready", TRUE, "ConsumersReady")], ("True", "CRDOutdated")),
    (
        "another cause stays",
        [Condition("Degraded", TRUE, "DataLoss", "retention deleted records")],
        ("True", "DataLoss"),
    ),
    ("no check result", None, None),
]


@pytest.mark.parametrize(
    ("computed", "want"), [(c, w) for _, c, w in OVERLAY], ids=[i for i, _, _ in OVERLAY]
)
def test_the_outdated_crd_is_laid_over_the_cycles_conditions(
    computed: list[Condition] | None, want: tuple[str, str] | None
) -> None:
    conds = _merged(*(computed or [Condition("Ready", TRUE, "ConsumersReady")]))
    out = crd_check.with_outdated(conds, None, OUTDATED if computed is not None else None, 1, T0 + 5)
    got = find_condition(out, "Degraded")
    assert (None if got is None else (got["status"], got["reason"])) == want
    if want == ("True", "CRDOutdated"):  # kstatus: needs someone to act
        assert find_condition(out, "Stalled")["reason"] == "CRDOutdated"  # type: ignore[index]


def test_the_condition_keeps_its_transition_time() -> None:
    first = crd_check.with_outdated(
        _merged(Condition("Ready", TRUE, "ConsumersReady")), None, OUTDATED, 1, T0
    )
    # the next cycle computes Degraded False again (dropped from the list); the old one is True
    computed = merge_conditions(first, [Condition("Degraded", "False", "AsExpected")], 1, T0 + 60)
    again = crd_check.with_outdated(computed, first, OUTDATED, 1, T0 + 60)
    for type_ in ("Degraded", "Stalled"):  # kstatus' Stalled follows Degraded, its time kept too
        assert find_condition(again, type_) == find_condition(first, type_)


# --------------------------------------------------------------------- the cycle: it keeps acting


def test_the_cycle_says_degraded_crd_outdated_and_keeps_scaling() -> None:
    w = World(base_spec())
    verdict: list[Condition | None] = [OUTDATED]
    w.deps.crd_outdated = lambda: verdict[0]
    w.kafka.set([(0, 100, 100, None)] * 3)
    res = w.cycle()
    assert res.ok and w.kube.replicas == 1  # it acted: the Deployment exists
    deg = w.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "CRDOutdated")
    assert "status.drain.idleSince" in deg["message"]
    assert w.cond("Ready")["status"] == "True"
    # a backlog is still scaled for
    w.kafka.set([(0, 10_000, 0, 50.0)] * 3)
    for _ in range(3):
        w.cycle(advance=5)
    assert w.kube.replicas > 1
    # one Warning event per CR while the verdict stays the same
    assert [r for t, r, _ in w.events if t == "Warning"] == ["CRDOutdated"]
    # the CRD applied: the next cycle clears it
    verdict[0] = None
    w.cycle(advance=5)
    assert w.absent("Degraded")


def test_a_failing_cycle_keeps_its_own_cause() -> None:
    from lagpilot.observe.kafka_observe import ObserveError

    w = World(base_spec())
    w.deps.crd_outdated = lambda: OUTDATED
    w.kafka.error = ObserveError("BrokerUnreachable", "cause on k:9092")
    w.cycle()
    assert w.cond("Degraded")["reason"] == "BrokerUnreachable"


# --------------------------------------------------------------------- the operator-wide check


class Reads:
    def __init__(self, crd_obj: dict[str, Any] | Exception) -> None:
        self.crd = crd_obj
        self.calls = 0

    def __call__(self) -> dict[str, Any] | None:
        self.calls += 1
        if isinstance(self.crd, Exception):
            raise self.crd
        return self.crd


def test_the_check_reads_the_crd_on_a_slow_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    reads = Reads(_edit(_drop("status.drain.idleSince")))
    check = CrdCheck(reads, every_s=300.0, clock=lambda: clock[0])
    with caplog.at_level(logging.INFO, logger="lagpilot.act.crd_check"):
        first = check.outdated()
        assert first is not None and "status.drain.idleSince" in first.message
        clock[0] = 299.0
        assert check.outdated() == first and reads.calls == 1
        reads.crd = copy.deepcopy(OURS)  # someone applied this version's CRD
        clock[0] = 300.0
        assert check.outdated() is None and reads.calls == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "status.drain.idleSince" in errors[0].getMessage() + str(errors[0].__dict__)


def test_a_crd_the_operator_may_not_read_is_not_checked(caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    reads = Reads(KubeError(403, "Forbidden", "get CustomResourceDefinition"))
    check = CrdCheck(reads, every_s=300.0, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="lagpilot.act.crd_check"):
        assert check.outdated() is None
        clock[0] = 600.0
        assert check.outdated() is None
    assert reads.calls == 2
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1  # said once


def test_a_cycle_never_waits_for_another_cycles_read_of_the_crd() -> None:
    """The read is made outside the lock: a slow API server holds one cycle, not all of them."""
    import threading

    entered, release = threading.Event(), threading.Event()
    stale = _edit(_drop("status.drain.idleSince"))

    def slow_read() -> dict[str, Any]:
        entered.set()
        assert release.wait(30)
        return stale

    check = CrdCheck(slow_read, every_s=300.0, clock=lambda: 0.0)
    got: list[Condition | None] = []
    reader = threading.Thread(target=lambda: got.append(check.outdated()))
    reader.start()
    assert entered.wait(30)
    assert check.outdated() is None  # the previous verdict (none yet), at once
    release.set()
    reader.join(30)
    assert got and got[0] is not None and check.outdated() == got[0]


def test_the_operator_checks_the_crd_at_start_up_and_hands_the_verdict_to_every_cycle(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """settings.configure (kopf's start-up) builds the check and reads the CRD once; the cycles'
    Deps (handlers._deps) ask the same check."""
    import kopf

    from lagpilot import handlers, settings

    class Kube:
        _client = None

        def __init__(self) -> None:
            self.reads: list[str] = []

        def get_crd(self, name: str) -> dict[str, Any]:
            self.reads.append(name)
            return _edit(_drop("status.drain.idleSince"))

    monkeypatch.setenv("LAGPILOT_CRD_CHECK_SECONDS", "300")
    memo = kopf.Memo()
    memo.kube = Kube()
    memo.drain = object()  # no drain executor built (it needs a real API client)
    with caplog.at_level(logging.ERROR, logger="lagpilot.act.crd_check"):
        settings.configure(settings=kopf.OperatorSettings(), memo=memo)
    try:
        assert memo.kube.reads == ["batchconsumergroups.lagpilot.io"]
        assert [r for r in caplog.records if "status.drain.idleSince" in r.getMessage()]
        deps = handlers._deps(memo, {"metadata": {"name": "x", "namespace": "ns"}})
        verdict = deps.crd_outdated() if deps.crd_outdated is not None else None
        assert verdict is not None and verdict.reason == "CRDOutdated"
        assert memo.kube.reads == ["batchconsumergroups.lagpilot.io"]  # one read per interval
    finally:
        memo.cycle_pool.shutdown(wait=False)
