"""status.py: conditions (observedGeneration, lastTransitionTime) and diff-before-write."""
from __future__ import annotations

import pytest

from lagpilot.decide.status import Condition, find_condition, merge_conditions, rfc3339, status_patch

T0, T1 = 1_700_000_000.0, 1_700_000_100.0


def test_new_condition_is_stamped() -> None:
    merged = merge_conditions([], [Condition("Ready", "True", "Observing", "ok")], generation=3, now=T0)
    # + the kstatus conditions derived from it (test_kstatus.py)
    assert [c["type"] for c in merged] == ["Ready", "Reconciling", "Stalled"]
    c = merged[0]
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
    assert [c["type"] for c in new] == ["Ready", "Scaling", "Degraded", "Reconciling", "Stalled"]


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
    b = [dict(c, lastTransitionTime=rfc3339(T1)) for c in a]
    assert status_patch({"conditions": a, "totalLag": 5}, {"conditions": b, "totalLag": 5}) is None


def test_patch_contains_only_changes() -> None:
    old = {"totalLag": 5, "replicas": 2, "other": "kept"}
    assert status_patch(old, {"totalLag": 6, "replicas": 2}) == {"totalLag": 6}
    assert status_patch(old, {"replicas": None}) == {"replicas": None}
    assert status_patch({}, {"replicas": None}) is None
    assert status_patch(None, {"partitions": 3}) == {"partitions": 3}


# --- one line per partition / range / sub-range / past drain (kubectl describe stays short) --------
import dataclasses  # noqa: E402
import json  # noqa: E402

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lagpilot.decide import status as sm  # noqa: E402
from lagpilot.decide import status_codec as sc  # noqa: E402
from lagpilot.decide.estimate import EstimatorState, PartitionEstimate  # noqa: E402


def _est(**kw) -> EstimatorState:
    p = PartitionEstimate(partition=0, end=6737, low=0, committed=6737, lag=0, produce_rate=25.59719614538485,
                          consume_rate=29.579436374452087, samples=25,
                          window=((T0 - 120.001, 1785), (T0 - 4.997, 6737), (T0, 6737)))
    return EstimatorState(at_s=T0, partitions={0: PartitionEstimate(**{**p.__dict__, **kw})}, capacity_per_replica=37.8)


def _rounded(pe: PartitionEstimate) -> PartitionEstimate:
    """What a restarted operator reads back: the rates to 0.001 records/s (sc.RATE_DECIMALS)."""
    return dataclasses.replace(pe, produce_rate=round(pe.produce_rate, 3), consume_rate=round(pe.consume_rate, 3))


def test_estimator_partition_is_one_line_and_round_trips() -> None:
    out = sc.estimator_to_status(_est().to_dict())
    line = out["partitions"]["0"]
    assert line == ("committed=6737 end=6737 low=0 lag=0 produceRate=25.597 "
                    "consumeRate=29.579 samples=25 window=-120.001:1785 -4.997:6737 0.000:6737")
    back = EstimatorState.from_dict(sc.estimator_from_status(json.loads(json.dumps(out))))
    assert back.partitions[0].produce_rate == 25.597 and back.partitions[0].committed == 6737
    assert back.partitions[0] == _rounded(_est().partitions[0])  # everything else exactly
    assert sc.estimator_to_status(back.to_dict()) == out  # re-written unchanged: no diff, no write


def test_the_estimator_line_is_the_per_partition_view_with_the_oldest_age() -> None:
    """status.estimator.partitions is the status's one per-partition list (no status.partitionLag):
    the oldest waiting record's age sits after the lag, is not estimator memory (not read back), and
    partitions_view gives a reader every figure of the line."""
    out = sc.estimator_to_status(_est(lag=40, committed=6697).to_dict(), {0: 12.345, 7: 1.0})
    line = out["partitions"]["0"]
    assert line.startswith("committed=6697 end=6737 low=0 lag=40 oldestAgeSeconds=12.3 produceRate=25.597 "), line
    back = EstimatorState.from_dict(sc.estimator_from_status(json.loads(json.dumps(out))))
    assert back.partitions[0] == _rounded(_est(lag=40, committed=6697).partitions[0])
    assert sc.estimator_to_status(back.to_dict()) == {**out, "partitions": {"0": line.replace(" oldestAgeSeconds=12.3", "")}}
    assert sc.partitions_view({"estimator": out}) == [{"partition": 0, "committed": 6697, "end": 6737, "low": 0, "lag": 40,
                                                       "oldestAgeSeconds": 12.3, "produceRate": 25.597,
                                                       "consumeRate": 29.579, "samples": 25}]
    assert sc.partitions_view({}) == [] and sc.partitions_view({"estimator": {"partitions": {"0": "x=y=z"}}}) == []
    with pytest.raises(ValueError):
        sc.estimator_from_status({**out, "partitions": {"0": line.replace("=12.3", "=soon")}})


@pytest.mark.parametrize("kw, has, lacks", [
    (dict(committed=None), "end=6737", "committed="),                # no commit yet: left out, read as None
    (dict(lost_through=120), "lostThrough=120", None),
    (dict(window=()), "samples=25 window=", None),                    # empty window
], ids=["no-commit", "lost-through", "empty-window"])
def test_estimator_line_cases(kw, has, lacks) -> None:
    out = sc.estimator_to_status(_est(**kw).to_dict())
    line = out["partitions"]["0"]
    assert has in line and (lacks is None or lacks not in line)
    back = EstimatorState.from_dict(sc.estimator_from_status(out))
    assert back.partitions[0] == _rounded(_est(**kw).partitions[0])


def test_estimator_status_keeps_no_copy_of_the_top_level_facts() -> None:
    """status.capacityPerReplica and status.dataLossRecords are the estimator's capacity and loss
    count: status.estimator does not repeat them (null: the merge patch deletes an older copy)."""
    e = dataclasses.replace(_est(), data_loss_records=7)
    out = sc.estimator_to_status(e.to_dict())
    assert out["capacityPerReplica"] is None and out["dataLossRecords"] is None
    assert {k for k, v in out.items() if v is not None} == {"at", "resets", "partitions"}


@pytest.mark.parametrize("top, inner, cap, lost", [
    ({"capacityPerReplica": 37.8, "dataLossRecords": 7}, {}, 37.8, 7),             # this operator
    ({}, {"capacityPerReplica": 12.5, "dataLossRecords": 3}, 12.5, 3),             # an older status
    ({"capacityPerReplica": 37.8, "dataLossRecords": 7}, {"capacityPerReplica": 1.0, "dataLossRecords": 1}, 37.8, 7),
    ({}, {}, None, 0),                                                              # nothing measured yet
], ids=["top-level", "older-inner-copy", "top-level-wins", "none"])
def test_step_memory_reads_the_estimator_facts_from_the_top_level(top, inner, cap, lost) -> None:
    from lagpilot.decide.step import StepState
    est = {**sc.estimator_to_status(dataclasses.replace(_est(), capacity_per_replica=None).to_dict()), **inner}
    status = {**top, "estimator": {k: v for k, v in est.items() if v is not None}}
    back = StepState.from_status(sc.step_memory_from_status(json.loads(json.dumps(status)))).estimator
    assert back is not None and back.capacity_per_replica == cap and back.data_loss_records == lost
    assert back.partitions == {0: _rounded(_est().partitions[0])}


def test_estimator_object_form_of_an_older_operator_still_reads() -> None:
    old = {"at": sm.format_time(T0), "capacityPerReplica": 37.8, "partitions": {"0": {
        "end": 10, "low": 0, "committed": 8, "lag": 2, "partition": 0, "produceRate": 1.5, "consumeRate": 1.0,
        "samples": 3, "window": "-5.000:9 0.000:10"}}}
    back = EstimatorState.from_dict(sc.estimator_from_status(old))
    assert back.partitions[0].produce_rate == 1.5 and back.partitions[0].window == ((T0 - 5, 9), (T0, 10))
    with pytest.raises(ValueError):
        sc.estimator_from_status({**old, "partitions": {"0": "end=10 bogus"}})


@given(st.integers(0, 10**12), st.integers(0, 10**6), st.integers(0, 10**9), st.floats(0, 1e6, allow_nan=False),
       st.floats(0, 1e6, allow_nan=False), st.one_of(st.none(), st.integers(0, 10**12)))
def test_estimator_line_round_trips_any_values(end, lag, samples, pr, cr, committed) -> None:
    e = _est(end=end, lag=lag, samples=samples, produce_rate=pr, consume_rate=cr, committed=committed)
    out = sc.estimator_to_status(e.to_dict())
    back = EstimatorState.from_dict(sc.estimator_from_status(json.loads(json.dumps(out))))
    p, q = back.partitions[0], e.partitions[0]
    assert (p.end, p.lag, p.samples, p.committed) == (q.end, q.lag, q.samples, committed)
    assert (p.produce_rate, p.consume_rate) == (round(pr, 3), round(cr, 3))
    assert sc.estimator_to_status(back.to_dict()) == out


@pytest.mark.parametrize("entry, line", [
    ({"id": 3, "phase": "Verified", "reason": "AllRangesDone", "ranges": [{"partition": 0, "start": 400, "split": 6300, "tasks": 4},
      {"partition": 2, "start": 0, "split": 75}], "recordsTotal": 5975, "recordsDone": 5975, "pauseSeconds": 0.0, "seconds": 41.5},
     "drain 3 Verified (AllRangesDone): p0[400..6300) p2[0..75); 5975/5975 records in 41.5 s, pause 0 s"),
    ({"id": 4, "phase": "Cancelled", "reason": "NothingToDrain", "ranges": [], "recordsTotal": 0, "recordsDone": 0,
      "pauseSeconds": None, "seconds": None},
     "drain 4 Cancelled (NothingToDrain): none; 0/0 records"),
    ({"id": 5, "phase": "Failed", "reason": "AttemptsExhausted", "ranges": "p1[10..20)", "recordsTotal": 10, "recordsDone": 3,
      "pauseSeconds": 12.25, "seconds": 300},
     "drain 5 Failed (AttemptsExhausted): p1[10..20); 3/10 records in 300 s, pause 12.25 s"),
], ids=["verified", "nothing", "failed-quiesce"])
def test_history_entry_is_one_line_and_reads_back(entry, line) -> None:
    assert sc.format_history_entry(entry) == line
    back = sc.parse_history_entry(line)
    assert sc.format_history_entry(back) == line
    assert (back["id"], back["recordsDone"], back["seconds"], back["pauseSeconds"]) == (
        entry["id"], entry["recordsDone"], entry["seconds"], entry["pauseSeconds"])
    assert sc.parse_ranges(back["ranges"]) == [{k: r[k] for k in ("partition", "start", "split")}
                                               for r in sc.parse_ranges(entry["ranges"])]


@pytest.mark.parametrize("bad", ["p0[1..2", "q0[1..2)", "p0[a..2)", "p0[1..2)x", "p0[1..2)y3"])
def test_malformed_ranges_raise(bad) -> None:
    with pytest.raises(ValueError):
        sc.parse_ranges(bad)


@given(st.lists(st.tuples(st.integers(0, 999), st.one_of(st.none(), st.integers(0, 10**12)), st.integers(0, 10**12),
                          st.one_of(st.none(), st.integers(1, 64))), max_size=20))
def test_ranges_line_round_trips(items) -> None:
    ranges = [{"partition": p, "start": a, "split": b, **({} if n is None else {"tasks": n})} for p, a, b, n in items]
    assert sc.parse_ranges(sc.format_ranges_line(ranges)) == ranges


@given(st.integers(0, 999), st.integers(0, 999), st.integers(0, 10**12), st.integers(0, 10**6), st.integers(0, 10**6))
def test_sub_range_line_round_trips(p, i, start, n, done) -> None:
    s = {"partition": p, "index": i, "start": start, "end": start + n, "next": start + min(done, n), "records": min(done, n)}
    line = sc.format_sub_range(s)
    assert "\n" not in line and sc.parse_sub_range(line) == s == sc.parse_sub_range(s)
