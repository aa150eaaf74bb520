"""bench/chaos/drain_faults.py's drain 1 without a stack: the drain statuses it polls are scripted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from bench.chaos import faults as cf
from bench.chaos.drain_faults import DrainFaults
from bench.chaos.faults import Fault

RUNNING_AT_0 = {"id": 2, "phase": "Running", "recordsDone": 0, "recordsTotal": 7407}
MID_WAY = {"id": 3, "phase": "Running", "recordsDone": 3000, "recordsTotal": 9000}


class Scripted(DrainFaults):
    """drain 1 as seen under load in the full campaign (2026-11-26 02:47, round 1): the operator,
    down after its launch crash, came back when the warm attempt had already finished; no status
    showed the drain mid-way. Any later drain is seen mid-way."""

    def __init__(self, passes: list[list[dict[str, Any]]]) -> None:
        self.kinds = frozenset(cf.KINDS)
        self.passes, self.labels, self.recorded = passes, [], []
        self.gen, self.timeout, self.timeout_ms = 1, 300.0, 500
        self.custom, self.ns = self, "chaos-x"
        self.armed: dict[str, Fault] = {}

    def drain_polls(
        self, before: str, before_burst: Any = None, each: Any = None, burst: int | None = None
    ) -> Iterator[tuple[dict[str, Any], bool]]:
        self.labels.append(before)
        if before_burst is not None:
            before_burst()
        for d in self.passes[len(self.labels) - 1]:
            if each is not None:
                each()
            yield d, True

    def arm(self) -> None:
        self.armed_now = True

    def check_markers(self, faults: dict[str, Fault]) -> None:  # every crash point is reached in drain 1
        for f in faults.values():
            if not f.fired:
                f.fired, f.at = True, time.time()

    def kill_executor(self, f: Fault, d: dict[str, Any]) -> None:
        f.fired, f.at = True, time.time() - 10
        f.evidence = {**f.evidence, "pid": 4242}

    def cr(self, which: str) -> dict[str, Any]:
        return {
            "metadata": {"generation": self.gen},
            "status": {
                "drain": {"phase": "Running"},
                "conditions": [{"type": "Ready", "observedGeneration": self.gen}],
            },
        }

    def patch_namespaced_custom_object(self, *a: Any) -> None:
        self.gen += 1

    def how_ran(self, d: dict[str, Any]) -> dict[str, Any]:
        return {"status_runtime": "warm"}

    def recover_wait(
        self, since: float, what: str, timeout: float, base: Any = None, extra: Any = None
    ) -> float:
        assert extra is None or extra() is None
        return 1.0

    def record(self, f: Fault) -> Fault:
        self.recorded.append(f)
        return f


def test_mid_drain_faults_get_their_own_drain_when_drain_1_left_them_no_window() -> None:
    c = Scripted(
        [
            [RUNNING_AT_0, {**RUNNING_AT_0, "phase": "Verified", "recordsDone": 7407}],
            [MID_WAY, MID_WAY, {**MID_WAY, "phase": "Verified", "recordsDone": 9000}],
        ]
    )
    out = {f.kind: f for f in c.drain_one(1)}
    assert set(out) == {*cf.HANDOFF_POINTS, "drain_executor_kill", "spec_change_mid_drain"}
    assert [(k, f.detail) for k, f in out.items() if not (f.fired and f.recovered)] == []
    assert c.labels == ["drain 1 of round 1", "drain 1b of round 1"]
    assert out["spec_change_mid_drain"].evidence["generation"] == [1, 2]
    assert "drain_1_missed" in out["drain_executor_kill"].evidence


def test_one_drain_when_drain_1_had_the_window() -> None:
    c = Scripted([[MID_WAY, MID_WAY, {**MID_WAY, "phase": "Verified", "recordsDone": 9000}]])
    out = c.drain_one(1)
    assert all(f.fired and f.recovered for f in out) and c.labels == ["drain 1 of round 1"]


def test_without_crash_points_a_missed_window_is_reported_not_fired() -> None:
    c = Scripted([[RUNNING_AT_0, {**RUNNING_AT_0, "phase": "Verified", "recordsDone": 7407}]])
    c.kinds = frozenset({"drain_executor_kill", "spec_change_mid_drain"})
    out = c.drain_one(1)
    assert [f.fired for f in out] == [False, False] and c.labels == ["drain 1 of round 1"]
    assert all("not running mid-way" in f.detail for f in out)
