"""C2 (review): a busy drain that ran several splits records every range it processed in its
history entry (before: only the last range of each partition, as in status.drain.ranges), so an
exactly-once check can read what the drain owned from its status alone. The list is bounded
(`handoff.HISTORY_RANGES`; past it the oldest extra ranges are left out and counted)."""

from __future__ import annotations

from typing import Any

from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import DrainStatus, JobObservation, JobState, Observed, Phase
from lagpilot.model.status import status_openapi_schema, validate_status
from lagpilot.spec import parse_spec

SPEC = parse_spec(
    {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "t",
        "groupId": "g",
        "batch": {"maxRecords": 10},
        "drain": {"splitFactor": 2},
    }
)


def _keys_unique(schema: dict[str, Any], value: Any, path: str = "status") -> list[str]:
    """Where `value` repeats a key of a list-type map of `schema` (the API server refuses that)."""
    bad: list[str] = []
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                bad += _keys_unique(sub, value[name], f"{path}.{name}")
    elif isinstance(value, list):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(v.get(k) for k in schema["x-kubernetes-list-map-keys"]) for v in value]
            if len(keys) != len(set(keys)):
                bad.append(f"{path}: {keys}")
        for i, v in enumerate(value):
            bad += _keys_unique(schema.get("items") or {}, v, f"{path}[{i}]")
    return bad


def _succeeded_after_two_splits() -> DrainStatus:
    # round 0 handed off p0 [50, 100) and p1 [40, 90); round 1 (a next split) p0 [300, 500): the
    # live group processed p0 [100, 300) in between. status.drain.ranges names the latest of each.
    subs = (
        h.SubProgress(0, 0, 50, 75, 75, 25),
        h.SubProgress(0, 1, 75, 100, 100, 25),
        h.SubProgress(1, 0, 40, 90, 90, 50),
        h.SubProgress(0, 2, 300, 400, 400, 100),
        h.SubProgress(0, 3, 400, 500, 500, 100),
    )
    return DrainStatus(
        id=7,
        phase=Phase.SUCCEEDED,
        busy=True,
        round=1,
        attempt=1,
        started_at=900.0,
        hand_off_path=h.PATH_ACK,
        sub_ranges=subs,
        ranges=(h.PartitionRange(0, 500, 300, 2), h.PartitionRange(1, 90, 40, 2)),
    )


def _verify(d: DrainStatus) -> DrainStatus:
    done = {(s.partition, s.index): (s.end, s.records) for s in d.sub_ranges}
    a = h.next_action(
        SPEC,
        d,
        Observed(
            generation=1,
            offsets=None,
            group_empty=None,
            replicas=1,
            job=JobObservation(JobState.SUCCEEDED),
            progress=done,
        ),
        1000.0,
    )
    assert a.status is not None and a.status.phase is Phase.VERIFIED, a
    return a.status


def test_a_busy_drains_history_entry_names_every_range_it_processed() -> None:
    v = _verify(_succeeded_after_two_splits())
    entry = v.to_dict()["history"][-1]
    got = sorted((r["partition"], r["start"], r["end"]) for r in entry["ranges"])
    assert got == [(0, 50, 100), (0, 300, 500), (1, 40, 90)], entry
    # the ranges account for every record the drain counted
    assert sum(e - s for _, s, e in got) == entry["recordsTotal"] == entry["recordsDone"] == 300
    # and the status stays one the API server takes: no list-type map repeats a key
    status = {"drain": v.to_dict()}
    validate_status(status)
    assert not _keys_unique(status_openapi_schema(), status)


def test_past_its_bound_the_entry_leaves_the_oldest_extra_ranges_out_and_counts_them() -> None:
    # 70 splits of p0 (the live group processed 10 offsets between two), one range of p1
    subs = tuple(h.SubProgress(0, k, 100 * k, 100 * k + 90, 100 * k + 90, 90) for k in range(70))
    subs += (h.SubProgress(1, 0, 5, 9, 9, 4),)
    d = DrainStatus(
        id=3,
        phase=Phase.SUCCEEDED,
        busy=True,
        round=69,
        attempt=1,
        started_at=900.0,
        hand_off_path=h.PATH_ACK,
        sub_ranges=subs,
        ranges=(h.PartitionRange(0, 6990, 6900), h.PartitionRange(1, 9, 5)),
    )
    entry = _verify(d).to_dict()["history"][-1]
    got = [(r["partition"], r["start"], r["end"]) for r in entry["ranges"]]
    assert len(got) == h.HISTORY_RANGES and entry["rangesOmitted"] == 71 - h.HISTORY_RANGES
    assert (1, 5, 9) in got  # every partition keeps a range
    assert got[:2] == [(0, 700, 790), (0, 800, 890)] and (0, 6900, 6990) in got  # the oldest of p0 left out
    assert entry["recordsTotal"] == 70 * 90 + 4  # still counts every record
    status = {"drain": _verify(d).to_dict()}
    validate_status(status)
    assert not _keys_unique(status_openapi_schema(), status)
    from lagpilot.status_view import drain_history

    assert "(+7 earlier ranges not kept)" in drain_history({"status": status})[0]["ranges"]


def test_a_drain_without_next_splits_records_its_ranges_as_before() -> None:
    d = _succeeded_after_two_splits()
    one = DrainStatus(
        id=2,
        phase=Phase.SUCCEEDED,
        attempt=1,
        started_at=900.0,
        hand_off_path=h.PATH_ACK,
        ranges=(h.PartitionRange(1, 90, 40, 2),),
        sub_ranges=d.sub_ranges[2:3],
    )
    entry = _verify(one).to_dict()["history"][-1]
    assert entry["ranges"] == [{"partition": 1, "start": 40, "end": 90}] and "rangesOmitted" not in entry
