"""A busy drain's status stays bounded across a long burst: every next split appends its
sub-ranges to status.drain.subRanges, and a drain that takes one split a poll for a 20-minute burst
would list thousands (the status rewritten each poll, etcd's object limit). Done sub-ranges past
the bound are folded into counts; what is unfinished is always listed (the driver's part needs it)."""

from __future__ import annotations

import dataclasses

from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import DrainStatus, Extension, PartitionRange, Phase, SubProgress
from lagpilot.model.status import validate_status
from lagpilot.spec import parse_spec
from lagpilot_runtime import handoff_mailbox as mbx

NOW = 1_000_000.0


def spec():
    return parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "t",
            "groupId": "g",
            "batch": {"maxRecords": 10},
            "drain": {"splitFactor": 2},
        }
    )


def test_a_busy_drain_taking_a_split_each_poll_keeps_a_bounded_status_and_its_counts() -> None:
    sp = spec()
    start = 0
    first = PartitionRange(0, split=1000, start=0, tasks=2)
    d = DrainStatus(
        id=1,
        phase=Phase.RUNNING,
        ranges=(first,),
        busy=True,
        attempt=1,
        started_at=NOW,
        handed_off_at=NOW,
        published_at=NOW,
        hand_off_path=h.PATH_ACK,
        sub_ranges=tuple(SubProgress(0, i, a, b, a) for i, (a, b) in enumerate(((0, 500), (500, 1000)))),
    )
    for rnd in range(1, 201):  # 200 next splits of one partition, each done before the next
        d = dataclasses.replace(
            d,
            sub_ranges=tuple(
                dataclasses.replace(s, next=s.end, records=s.end - s.start) for s in d.sub_ranges
            ),
        )
        start = 1000 * rnd + 100  # the group consumed [1000 * rnd, +100) itself between the splits
        ext = Extension(
            rnd, (PartitionRange(0, split=start + 900, tasks=2),), planned_at=NOW, published_at=NOW
        )
        res = {0: mbx.Resolution(True, start + 900, start)}
        act = h._append_next_split(sp, d, ext, res, {}, "uid-1", NOW + rnd)
        d = act.status
    assert d.round == 200
    assert len(d.sub_ranges) <= 2 * h.MAX_PART_SUB_RANGES, len(d.sub_ranges)
    unfinished = [s for s in d.sub_ranges if not s.done]
    assert [(s.start, s.end) for s in unfinished] == [(200_100, 200_550), (200_550, 201_000)]
    # nothing folded away is lost from the counts: 1,000 first + 200 splits of 900
    assert d.records_total == 1000 + 200 * 900
    assert d.records_done == 1000 + 199 * 900
    validate_status({"drain": d.to_dict()})
    back = DrainStatus.from_dict(d.to_dict())
    assert back is not None and back.records_total == d.records_total and back.records_done == d.records_done
    # the history names how many ranges it cannot list
    ranges, omitted = h.processed_ranges(back)
    assert omitted > 0 and len(ranges) + omitted == 201
