"""status.py: conditions (observedGeneration, lastTransitionTime) and diff-before-write."""
from __future__ import annotations

import pytest

from lagpilot.status import Condition, find_condition, merge_conditions, rfc3339, status_patch

T0, T1 = 1_700_000_000.0, 1_700_000_100.0


def test_new_condition_is_stamped() -> None:
    (c,) = merge_conditions([], [Condition("Ready", "True", "Observing", "ok")], generation=3, now=T0)
    assert c == {"type": "Ready", "status": "True", "reason": "Observing", "message": "ok",
                 "observedGeneration": 3, "lastTransitionTime": rfc3339(T0)}
    assert rfc3339(T0) == "2023-11-14T22:13:20Z"


@pytest.mark.parametrize("old_status, new_status, new_reason, keeps_time", [
    ("True", "True", "Same", True),
    ("True", "True", "OtherReason", True),  # reason/message changes do not move the time
    ("True", "False", "Same", False),
    ("Unknown", "True", "Same", False),
], ids=["same", "reason-only", "flip", "from-unknown"])
def test_transition_time(old_status: str, new_status: str, new_reason: str, keeps_time: bool) -> None:
    old = merge_conditions([], [Condition("Degraded", old_status, "Same", "m")], 1, T0)
    new = merge_conditions(old, [Condition("Degraded", new_status, new_reason, "m2")], 2, T1)
    c = find_condition(new, "Degraded")
    assert c is not None
    assert c["lastTransitionTime"] == (rfc3339(T0) if keeps_time else rfc3339(T1))
    assert c["observedGeneration"] == 2 and c["reason"] == new_reason


def test_other_types_kept_and_order_stable() -> None:
    old = merge_conditions([], [Condition("Degraded", "False", "AsExpected"),
                                Condition("Ready", "True", "Observing")], 1, T0)
    new = merge_conditions(old, [Condition("Scaling", "True", "ScaledUp")], 1, T1)
    assert [c["type"] for c in new] == ["Ready", "Scaling", "Degraded"]


@pytest.mark.parametrize("bad", [
    dict(type="Ready", status="yes", reason="Fine"),
    dict(type="Ready", status="True", reason="not camel"),
    dict(type="Ready", status="True", reason=""),
])
def test_condition_validation(bad: dict) -> None:
    with pytest.raises(ValueError):
        Condition(**bad)


def test_patch_none_when_only_time_differs() -> None:
    a = merge_conditions([], [Condition("Ready", "True", "Observing")], 1, T0)
    b = [dict(a[0], lastTransitionTime=rfc3339(T1))]
    assert status_patch({"conditions": a, "totalLag": 5}, {"conditions": b, "totalLag": 5}) is None


def test_patch_contains_only_changes() -> None:
    old = {"totalLag": 5, "replicas": 2, "other": "kept"}
    assert status_patch(old, {"totalLag": 6, "replicas": 2}) == {"totalLag": 6}
    assert status_patch(old, {"replicas": None}) == {"replicas": None}
    assert status_patch({}, {"replicas": None}) is None
    assert status_patch(None, {"partitions": 3}) == {"partitions": 3}
