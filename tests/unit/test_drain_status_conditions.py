"""C1 (review): the drain's conditions (Draining, DataLoss, DrainStalled) are written in the same
guarded status write as `status.drain`, so no reader ever sees a drain's phase without its matching
condition (before: the executor wrote status.drain, the cycle's report wrote the conditions
seconds later)."""

from __future__ import annotations

import dataclasses
from typing import Any

from lagpilot.decide.handoff import DrainStatus, condition
from tests.unit.test_drain_executor import FakeExecutor, ctx, world0

READY = {
    "type": "Ready",
    "status": "True",
    "reason": "ConsumersReady",
    "message": "3/3 consumers ready",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def _by_type(conds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conds}


def test_every_status_drain_write_carries_the_matching_draining_condition() -> None:
    log: list[tuple[str, Any]] = []
    w = world0()
    patches: list[dict[str, Any]] = []

    def patch_drain(patch: dict[str, Any], basis: Any) -> None:
        patches.append(patch)
        w["status"] = patch["drain"]

    c = dataclasses.replace(ctx(log, w, None, wanted=(0,)), patch_drain=patch_drain)
    c.conditions = [READY]  # the status's conditions as the cycle read them
    ex = FakeExecutor(log, w)
    ex.reconcile(c)
    # the owner acks and commits the split: handed off and launched in the next call
    w["mailbox"][0] = w["mailbox"][0].with_ack(100)
    w["committed"][0] = 500
    c2 = dataclasses.replace(ctx(log, w, w["status"]), patch_drain=patch_drain)
    c2.conditions = patches[-1].get("conditions", [READY])
    ex.reconcile(c2)
    assert [p["drain"]["phase"] for p in patches][-1] == "Running", patches
    for p in patches:
        what = f"{p['drain']['phase']}/{p['drain']['reason']}"
        assert "conditions" in p, f"status.drain ({what}) written without its conditions"
        conds = _by_type(p["conditions"])
        want = condition(DrainStatus.from_dict(p["drain"]))
        got = conds["Draining"]
        assert (got["status"], got["reason"], got["message"]) == want, (got, want)
        assert got["observedGeneration"] == 1
        assert conds["Ready"] == READY  # the other conditions are kept as they were (merge patch of the list)


def test_the_cycle_adapter_hands_the_status_conditions_to_the_guarded_write() -> None:
    """run_in_cycle (reconcile.py's call) gives the executor the status's conditions, and the
    guarded write it makes carries them with the Draining condition; the result names the list
    written, which the cycle's report merges its own conditions over."""
    from types import SimpleNamespace

    from lagpilot.act.drain import run_in_cycle
    from tests.unit.test_drain_executor import SPEC

    log: list[tuple[str, Any]] = []
    w = world0()
    ex = FakeExecutor(log, w)
    ex.runtime = None  # type: ignore[assignment]  # no warm runtime here
    guarded: list[dict[str, Any]] = []

    def patch_status_guarded(namespace: str, name: str, patch: dict[str, Any], basis: Any) -> None:
        assert basis({"drain": w["status"]})
        guarded.append(patch)
        w["status"] = patch["drain"]

    part = SimpleNamespace(partition=0, committed=100, earliest=0, latest=500)
    obs = SimpleNamespace(partitions=[part])
    deps = SimpleNamespace(
        kube=SimpleNamespace(patch_status_guarded=patch_status_guarded),
        emit=lambda *e: None,
        kafka_timeout_seconds=1.0,
        observe=lambda handle, topic, group, timeout: obs,
    )
    ref = SimpleNamespace(namespace="ns", name="orders", uid="u", generation=1)
    decision = SimpleNamespace(drain=SimpleNamespace(partitions=(0,), tasks_by_partition={0: 2}))
    handle = SimpleNamespace(safe_admin=lambda timeout: None)
    r = run_in_cycle(
        ex,
        ref,
        SPEC,
        {},
        {"conditions": [READY]},
        obs,
        decision,
        3,
        handle,
        deps,
        apply_deployment=lambda *a, **k: 3,
    )
    assert guarded, log
    for p in guarded:
        conds = _by_type(p["conditions"])
        assert conds["Ready"] == READY
        want = condition(DrainStatus.from_dict(p["drain"]))
        got = conds["Draining"]
        assert (got["status"], got["reason"], got["message"]) == want
    assert r.conditions == guarded[-1]["conditions"]
