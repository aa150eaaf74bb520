"""status.py: conditions (observedGeneration, lastTransitionTime) and diff-before-write."""

from __future__ import annotations

import pytest

from lagpilot.decide.status import Condition, find_condition, merge_conditions, rfc3339, status_patch

T0, T1 = 1_700_000_000.0, 1_700_000_100.0


def test_new_condition_is_stamped() -> None:
    merged = merge_conditions([], [Condition("Ready", "True", "Observing", "ok")], generation=3, now=T0)
    # the kstatus conditions derived from it (test_kstatus.py) are False: absent (abnormal-true)
    assert [c["type"] for c in merged] == ["Ready"]
    c = merged[0]
    assert c == {
        "type": "Ready",
        "status": "True",
        "reason": "Observing",
        "message": "ok",
        "observedGeneration": 3,
        "lastTransitionTime": rfc3339(T0),
    }
    assert rfc3339(T0) == "2023-11-14T22:13:20Z"


@pytest.mark.parametrize(
    "old_status, new_status, new_reason, keeps_time",
    [
        ("True", "True", "Same", True),
        ("True", "True", "OtherReason", True),  # reason/message changes do not move the time
        ("True", "False", "Same", False),
        ("Unknown", "True", "Same", False),
    ],
    ids=["same", "reason-only", "flip", "from-unknown"],
)
def test_transition_time(old_status: str, new_status: str, new_reason: str, keeps_time: bool) -> None:
    old = merge_conditions([], [Condition("Draining", old_status, "Same", "m")], 1, T0)
    new = merge_conditions(old, [Condition("Draining", new_status, new_reason, "m2")], 2, T1)
    c = find_condition(new, "Draining")
    assert c is not None
    assert c["lastTransitionTime"] == (rfc3339(T0) if keeps_time else rfc3339(T1))
    assert c["observedGeneration"] == 2 and c["reason"] == new_reason


def test_other_types_kept_and_order_stable() -> None:
    old = merge_conditions(
        [], [Condition("Degraded", "True", "KafkaTimeout"), Condition("Ready", "True", "Observing")], 1, T0
    )
    new = merge_conditions(old, [Condition("Scaling", "True", "ScaledUp")], 1, T1)
    # Stalled True follows Degraded (kstatus); Reconciling is False (reason Stalled): absent
    assert [(c["type"], c["status"]) for c in new] == [
        ("Ready", "True"),
        ("Scaling", "True"),
        ("Degraded", "True"),
        ("Stalled", "True"),
    ]


def test_abnormal_true_conditions_are_listed_only_while_not_false() -> None:
    """Degraded, DataLoss, DrainStalled, ... (model.status.ABNORMAL_TRUE): True and Unknown are
    listed, False is absent (kstatus: absence means normal); a later True starts a new transition.
    Ready, Scaling and Draining are listed whatever their status."""
    from lagpilot.model.status import ABNORMAL_TRUE, ConditionType

    assert set(ABNORMAL_TRUE) == {t.value for t in ConditionType} - {"Ready", "Scaling", "Draining"}
    up = merge_conditions(
        [],
        [
            Condition("Ready", "True", "Fine"),
            Condition("DataLoss", "True", "Lost"),
            Condition("CatchUpAtRisk", "Unknown", "CapacityUnknown"),
        ],
        1,
        T0,
    )
    assert [(c["type"], c["status"]) for c in up] == [
        ("Ready", "True"),
        ("CatchUpAtRisk", "Unknown"),
        ("DataLoss", "True"),
    ]
    down = merge_conditions(
        up,
        [Condition(t, "False", "AsExpected") for t in sorted(ABNORMAL_TRUE)]
        + [Condition("Scaling", "False", "Steady"), Condition("Draining", "False", "NoDrain")],
        1,
        T1,
    )
    assert [(c["type"], c["status"]) for c in down] == [
        ("Ready", "True"),
        ("Scaling", "False"),
        ("Draining", "False"),
    ]
    again = merge_conditions(down, [Condition("DataLoss", "True", "Lost")], 1, T1 + 5)
    lost = find_condition(again, "DataLoss")
    assert lost is not None and lost["lastTransitionTime"] == rfc3339(T1 + 5)


@pytest.mark.parametrize(
    "bad",
    [
        dict(type="Ready", status="yes", reason="Fine"),
        dict(type="Ready", status="True", reason="not camel"),
        dict(type="Ready", status="True", reason=""),
    ],
)
def test_condition_validation(bad: dict) -> None:
    with pytest.raises(ValueError):
        Condition(**bad)


def test_patch_none_when_only_time_differs() -> None:
    a = merge_conditions([], [Condition("Ready", "True", "Observing")], 1, T0)
    b = [dict(c, lastTransitionTime=rfc3339(T1)) for c in a]
    assert status_patch({"conditions": a, "totalLag": 5}, {"conditions": b, "totalLag": 5}) is None


def test_patch_contains_only_changes() -> None:
    old = {"totalLag": 5, "replicas": 2, "other": "kept"}
    assert status_patch(old, {"totalLag": 6, "replicas": 2}) == {"totalLag": 6}
    assert status_patch(old, {"replicas": None}) == {"replicas": None}
    assert status_patch({}, {"replicas": None}) is None
    assert status_patch(None, {"partitions": 3}) == {"partitions": 3}


# --- the per-partition view and the controller's memory ---------------------------------------------
import json  # noqa: E402

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lagpilot.decide.estimate import EstimatorState, PartitionEstimate  # noqa: E402
from lagpilot.decide.scaling import ScalingHistory  # noqa: E402
from lagpilot.decide.step import StepState  # noqa: E402
from lagpilot.model.status import validate_status  # noqa: E402
from lagpilot.reconcile.report import partition_statuses  # noqa: E402


def _est(**kw) -> EstimatorState:
    p = PartitionEstimate(
        partition=0,
        end=6737,
        low=0,
        committed=6737,
        lag=0,
        produce_rate=25.59719614538485,
        consume_rate=29.579436374452087,
        samples=25,
        window=((T0 - 120.001, 1785), (T0 - 4.997, 6737), (T0, 6737)),
    )
    return EstimatorState(
        at_s=T0, partitions={0: PartitionEstimate(**{**p.__dict__, **kw})}, capacity_per_replica=37.8
    )


def test_the_per_partition_view_is_one_object_per_partition() -> None:
    """status.partitionStatuses: offsets, lag, the rates to 0.001 records/s and the oldest waiting
    record's age where one waits; absent fields are left out (no committed offset yet, no age)."""
    est = EstimatorState(
        at_s=T0,
        partitions={0: _est(lag=40, committed=6697).partitions[0], 1: PartitionEstimate(1, 10, 0, None, 10)},
    )
    rows = partition_statuses(est, {0: 12.3})
    assert rows == [
        {
            "partition": 0,
            "committed": 6697,
            "end": 6737,
            "lag": 40,
            "oldestAgeSeconds": 12.3,
            "produceRate": 25.597,
            "consumeRate": 29.579,
        },
        {"partition": 1, "end": 10, "lag": 10},  # low and the rates left out while 0 (absent: 0)
    ]
    assert validate_status({"partitionStatuses": rows}).partition_statuses[1].committed is None


@given(
    st.integers(0, 10**12),
    st.integers(0, 10**6),
    st.integers(0, 10**9),
    st.floats(0, 1e6, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
    st.one_of(st.none(), st.integers(0, 10**12)),
    st.lists(st.tuples(st.floats(0, 4e9, allow_nan=False), st.integers(1, 5)), max_size=4),
)
def test_the_memory_round_trips_exactly_through_its_json(end, lag, samples, pr, cr, committed, recs) -> None:
    """What the ConfigMap holds (StepState.to_memory as JSON) reads back to the same state: a
    restarted operator resumes exactly where the memory was written (rates not rounded)."""
    est = _est(
        end=end,
        lag=lag,
        samples=samples,
        produce_rate=pr,
        consume_rate=cr,
        committed=committed,
        lost_through=committed,
    )
    state = StepState(est, ScalingHistory(tuple(recs), recs[-1][0] if recs else None))
    text = json.dumps(state.to_memory())
    back = StepState.from_memory(json.loads(text))
    assert back.estimator is not None and back.estimator.partitions == est.partitions
    assert back.history == state.history and json.dumps(back.to_memory()) == text


def test_an_unreadable_memory_starts_fresh() -> None:
    assert StepState.from_memory(None) == StepState()
    assert (
        StepState.from_memory({"estimator": {"atS": "soon"}, "scalingHistory": {"recommendations": "x"}})
        == StepState()
    )
