"""kstatus conditions (issue 28 item 4): Reconciling and Stalled derived from the group's own
conditions at every merge, and the verdict kstatus computes from them (its rules re-implemented in
lagpilot.decide.kstatus.verdict; tests/real/test_kstatus.py checks them against cli-utils itself)."""

from __future__ import annotations

from typing import Any

import pytest

from lagpilot.decide.kstatus import derive, verdict
from lagpilot.decide.status import FALSE, TRUE, Condition, find_condition, merge_conditions

T0, T1 = 1_700_000_000.0, 1_700_000_100.0


def _bcg(
    conds: list[dict[str, Any]], generation: int = 2, observed: int | None = 2, **meta: Any
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conds}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"kind": "BatchConsumerGroup", "metadata": {"generation": generation, **meta}, "status": status}


def _merged(*conds: Condition) -> list[dict[str, Any]]:
    return merge_conditions([], list(conds), 2, T0)


def test_ready_group_is_current() -> None:
    conds = _merged(
        Condition("Ready", TRUE, "ConsumersReady", "3/3 consumers ready"),
        Condition("Degraded", FALSE, "AsExpected"),
    )
    # Reconciling and Stalled False: absent (kstatus' abnormal-true pattern), as Degraded False is
    assert [c["type"] for c in conds] == ["Ready"]
    assert verdict(_bcg(conds)) == ("Current", "Resource is Ready")


def test_degraded_group_still_ready_is_failed_not_healthy() -> None:
    """The issue's case: consumers run (Ready=True) but the operator cannot observe Kafka."""
    conds = _merged(
        Condition("Ready", TRUE, "ConsumersReady", "3/3 consumers ready"),
        Condition("Degraded", TRUE, "KafkaUnreachable", "cannot reach the brokers"),
    )
    st = find_condition(conds, "Stalled")
    assert (st["status"], st["reason"], st["message"]) == (
        TRUE,
        "KafkaUnreachable",
        "cannot reach the brokers",
    )
    assert verdict(_bcg(conds)) == ("Failed", "cannot reach the brokers")


def test_consumers_starting_is_in_progress() -> None:
    conds = _merged(
        Condition("Ready", FALSE, "ConsumersNotReady", "1/3 consumers ready"),
        Condition("Degraded", FALSE, "AsExpected"),
    )
    rec = find_condition(conds, "Reconciling")
    assert (rec["status"], rec["reason"]) == (TRUE, "ConsumersNotReady")
    assert verdict(_bcg(conds)) == ("InProgress", "1/3 consumers ready")


def test_unobserved_generation_is_in_progress_whatever_the_conditions() -> None:
    conds = _merged(Condition("Ready", TRUE, "ConsumersReady"), Condition("Degraded", FALSE, "AsExpected"))
    assert verdict(_bcg(conds, generation=3, observed=2))[0] == "InProgress"
    assert verdict(_bcg(conds, deletionTimestamp="2026-01-01T00:00:00Z"))[0] == "Terminating"


def test_before_the_first_cycle() -> None:
    assert derive({})[1][:3] == ("Reconciling", TRUE, "Initializing")
    # no status at all (the operator has not seen it): kstatus cannot tell, says Current
    assert verdict({"kind": "BatchConsumerGroup", "metadata": {"generation": 1}}) == (
        "Current",
        "Resource is current",
    )


def test_paused_is_not_reconciling_but_kstatus_reads_ready_false() -> None:
    """Documented (docs/gitops.md): Paused is settled (Reconciling False), yet kstatus' Ready rule
    makes it InProgress; the Argo CD health check maps it to Suspended."""
    conds = _merged(
        Condition("Ready", FALSE, "Paused", "spec.paused is true"), Condition("Degraded", FALSE, "AsExpected")
    )
    assert find_condition(conds, "Reconciling") is None  # False (reason Paused): absent
    assert derive({c["type"]: c for c in conds})[1][:3] == ("Reconciling", FALSE, "Paused")
    assert verdict(_bcg(conds))[0] == "InProgress"


def test_derived_conditions_follow_any_writer_and_keep_transition_times() -> None:
    old = _merged(Condition("Ready", TRUE, "ConsumersReady"), Condition("Degraded", FALSE, "AsExpected"))
    # a writer that only sets Degraded (the error path): Stalled follows
    new = merge_conditions(old, [Condition("Degraded", TRUE, "SecretMissing", "no Secret x")], 3, T1)
    st = find_condition(new, "Stalled")
    assert find_condition(old, "Stalled") is None  # False before: absent
    assert st["status"] == TRUE and st["lastTransitionTime"] == "2023-11-14T22:15:00Z"  # T1: a transition
    assert st["observedGeneration"] == 3
    assert find_condition(new, "Reconciling") is None  # False (reason Stalled)
    # an unchanged Stalled keeps its time; a writer cannot set the derived ones by hand
    again = merge_conditions(
        new, [Condition("Stalled", FALSE, "Forced"), Condition("Reconciling", TRUE, "Forced")], 3, T1 + 5
    )
    assert find_condition(again, "Stalled")["status"] == TRUE
    assert find_condition(again, "Stalled")["lastTransitionTime"] == st["lastTransitionTime"]
    assert find_condition(again, "Reconciling") is None


@pytest.mark.parametrize(
    ("ready", "degraded", "expected"),
    [
        ((TRUE, "ConsumersReady"), (FALSE, "AsExpected"), "Current"),
        ((TRUE, "ScaledToZero"), (FALSE, "AsExpected"), "Current"),
        ((FALSE, "ConsumersNotReady"), (FALSE, "AsExpected"), "InProgress"),
        ((FALSE, "KafkaUnreachable"), (TRUE, "KafkaUnreachable"), "Failed"),
        ((FALSE, "InvalidSpec"), (TRUE, "InvalidSpec"), "Failed"),
        ((FALSE, "DuplicateGroupId"), (TRUE, "DuplicateGroupId"), "Failed"),
        ((TRUE, "ConsumersReady"), (TRUE, "DataLoss"), "Failed"),
    ],
)
def test_verdict_table(ready: tuple[str, str], degraded: tuple[str, str], expected: str) -> None:
    conds = _merged(Condition("Ready", *ready), Condition("Degraded", *degraded))
    assert verdict(_bcg(conds))[0] == expected
