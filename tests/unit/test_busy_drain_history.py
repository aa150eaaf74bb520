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

SPEC = parse_spec({"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g",
                   "batch": {"maxRecords": 10}, "drain": {"splitFactor": 2}})


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
    subs = (h.SubProgress(0, 0, 50, 75, 75, 25), h.SubProgress(0, 1, 75, 100, 100, 25),
            h.SubProgress(1, 0, 40, 90, 90, 50),
            h.SubProgress(0, 2, 300, 400, 400, 100), h.SubProgress(0, 3, 400, 500, 500, 100))
    return DrainStatus(id=7, phase=Phase.SUCCEEDED, busy=True, round=1, attempt=1, started_at=900.0,
                       hand_off_path=h.PATH_ACK,
                       ranges=(h.PartitionRange(0, 500, 300, 2), h.PartitionRange(1, 90, 40, 2)), sub_ranges=subs)


def _verify(d: DrainStatus) -> DrainStatus:
    done = {(s.partition, s.index): (s.end, s.records) for s in d.sub_ranges}
    a = h.next_action(SPEC, d, Observed(generation=1, offsets=None, group_empty=None, replicas=1,
                                        job=JobObservation(JobState.SUCCEEDED), progress=done), 1000.0)
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
