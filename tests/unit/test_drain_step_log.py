"""The drain loop says where a hand-off's start-up goes: one "drain step" log line per pass that acted,
with the seconds of its observation, decision (+ the warm runtime's URL and the basis check), effect
and status write (docs/node.md "Plan → first record on the node")."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from lagpilot.act.drain import STEP_PHASES, step_timings
from tests.unit.test_drain_executor import FakeExecutor, ctx, world0


def test_step_timings_are_the_differences_between_the_marks() -> None:
    assert step_timings([10.0, 10.5, 10.75, 12.0, 12.125]) == {
        "observe_s": 0.5,
        "decide_s": 0.25,
        "effect_s": 1.25,
        "record_s": 0.125,
    }


def test_every_pass_that_acted_logs_its_phases(caplog: pytest.LogCaptureFixture) -> None:
    log: list[tuple[str, Any]] = []
    w = world0()
    ex = FakeExecutor(log, w)
    with caplog.at_level(logging.INFO, logger="lagpilot.act.drain"):
        ex.reconcile(ctx(log, w, None, wanted=(0,)))
    steps = [r for r in caplog.records if r.getMessage() == "drain step"]
    # plan (a status write), publish (an effect), then waiting for the acks (a status write)
    assert [(r.action, r.reason) for r in steps] == [  # type: ignore[attr-defined]
        ("WriteStatus", "Planned"),
        ("Publish", "Published"),
        ("None", "WaitingForAcks"),
    ], steps
    for r in steps:
        assert r.group == "ns/orders"  # type: ignore[attr-defined]
        for k in STEP_PHASES:
            assert isinstance(getattr(r, k), float) and getattr(r, k) >= 0, (k, r.__dict__)
