"""The status leaves fields out at their default so `kubectl describe bcg` stays short (issue 26
item 2; tests/real/test_describe.py measures it): a sub-range's ``next`` while it is ``start`` and its
``records`` while 0, an empty drain history, a partition's ``low``, ``lag`` and rates while 0. Each
is read back exactly (the drain's sub-ranges are crash-recovery records: nothing may be lost), by
the operator (``DrainStatus.from_dict``) and by the kubectl plugin's one reader (status_view)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lagpilot import status_view as sv
from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import DrainStatus, PartitionRange, Phase, SubProgress
from lagpilot.model.status import DrainHoldReason, validate_status


@st.composite
def sub_ranges(draw: st.DrawFn) -> SubProgress:
    start = draw(st.integers(0, 10**12))
    end = start + draw(st.integers(1, 10**6))
    nxt = draw(st.integers(start, end))
    records = draw(st.integers(0, nxt - start))
    return SubProgress(draw(st.integers(0, 1000)), draw(st.integers(0, 500)), start, end, nxt, records)


@given(st.lists(sub_ranges(), min_size=1, max_size=8, unique_by=lambda s: (s.partition, s.index)))
def test_a_drain_s_sub_ranges_read_back_exactly_with_their_defaults_left_out(subs: list[SubProgress]) -> None:
    d = DrainStatus(
        id=3,
        phase=Phase.RUNNING,
        ranges=(PartitionRange(0, split=10, start=0),),
        sub_ranges=tuple(subs),
        attempt=1,
    )
    raw = d.to_dict()
    for s, x in zip(subs, raw["subRanges"], strict=True):
        assert ("next" in x) == (s.next != s.start) and ("records" in x) == (s.records != 0), (s, x)
    validate_status({"drain": raw})
    back = DrainStatus.from_dict(raw)
    assert back is not None and back.sub_ranges == d.sub_ranges
    assert (back.records_done, back.records_total, back.remaining) == (
        d.records_done,
        d.records_total,
        d.remaining,
    )
    # the kubectl plugin's reader fills them in as the operator does
    view = sv.drain({"status": {"drain": raw}})
    assert view is not None
    assert sorted(
        (x["partition"], x["index"], x["start"], x["end"], x["next"], x["records"]) for x in view.sub_ranges
    ) == sorted((s.partition, s.index, s.start, s.end, s.next, s.records) for s in subs)


def test_a_sub_range_not_begun_is_four_fields_and_a_begun_one_keeps_its_progress() -> None:
    assert SubProgress(0, 1, 100, 200, 100, 0).to_dict() == {
        "partition": 0,
        "index": 1,
        "start": 100,
        "end": 200,
    }
    assert SubProgress(0, 1, 100, 200, 150, 48).to_dict() == {
        "partition": 0,
        "index": 1,
        "start": 100,
        "end": 200,
        "next": 150,
        "records": 48,  # 48, not 50: offsets without a record (transaction markers) are not records
    }


def test_no_history_is_left_out_and_a_history_is_kept() -> None:
    d = DrainStatus(id=1, phase=Phase.PLANNED, ranges=(PartitionRange(0, split=10),))
    assert d.to_dict()["history"] is None  # a merge patch's null: nothing stored, nothing described
    back = DrainStatus.from_dict({k: v for k, v in d.to_dict().items() if v is not None})
    assert back is not None and back.history == ()
    entry = {
        "id": 0,
        "phase": "Verified",
        "reason": "AllRangesDone",
        "ranges": [{"partition": 0, "start": 0, "end": 5}],
    }
    kept = DrainStatus(id=1, phase=Phase.PLANNED, history=(entry,)).to_dict()["history"]
    assert kept == [h.history_entry(entry)]


def test_a_partition_s_zero_fields_read_back_as_zero() -> None:
    rows = sv.partitions({"status": {"partitionStatuses": [{"partition": 2, "committed": 100, "end": 100}]}})
    assert [(r.partition, r.lag, r.produce_rate, r.consume_rate, r.committed, r.end) for r in rows] == [
        (2, 0, 0.0, 0.0, 100, 100)
    ]
    validate_status({"partitionStatuses": [{"partition": 2, "committed": 100, "end": 100}]})


def test_the_hold_reason_is_in_the_model_s_vocabulary() -> None:
    assert h.REASON_HOLDING == DrainHoldReason.HOLDING_SLOTS.value == "HoldingSlots"
