"""A busy drain's next parts (issue 25 item 2; docs/drain.md "Busy drains: the executor"): the wire
format the operator writes and the drain's driver reads, its signature, and the driver's bounded wait."""

from __future__ import annotations

import pytest

from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain import job as drain_job
from lagpilot_runtime.drain.plan import (
    MAX_PART_BYTES,
    MAX_PART_SUB_RANGES,
    DrainPlan,
    NextPart,
    SubRange,
    owner_tag,
    parts_group,
    progress_group,
)

KEY = bytes(range(32))
OWNER = owner_tag("uid-1")


def plan(**kw) -> DrainPlan:
    return DrainPlan(
        "7",
        "t",
        "g",
        (SubRange(0, 0, 100, 200), SubRange(0, 1, 200, 300)),
        owner=OWNER,
        busy=True,
        round=kw.pop("round", 0),
        **kw,
    )


def test_a_part_round_trips_and_its_signature_binds_every_field():
    part = NextPart("7", 2, False, (SubRange(0, 2, 300, 350), SubRange(0, 3, 350, 400)))
    meta = plan_auth.sign_part(KEY, OWNER, "t", part.body())
    assert NextPart.from_body(plan_auth.verify_part(KEY, OWNER, "t", meta)) == part
    body, _, mac = meta.rpartition(plan_auth.PART_MAC_SEP)
    forged = [
        body.replace("r=2", "r=3"),
        body.replace("more=1", "more=0"),
        body.replace("350-400", "350-450"),
        body.replace("id=7", "id=8"),
    ]
    for f in forged:
        with pytest.raises(plan_auth.Refused):
            plan_auth.verify_part(KEY, OWNER, "t", f + plan_auth.PART_MAC_SEP + mac)
    for key, owner, topic in ((bytes(32), OWNER, "t"), (KEY, owner_tag("uid-2"), "t"), (KEY, OWNER, "u")):
        with pytest.raises(plan_auth.Refused):
            plan_auth.verify_part(key, owner, topic, meta)
    with pytest.raises(plan_auth.Refused):
        plan_auth.verify_part(KEY, OWNER, "t", body)  # unsigned
    with pytest.raises(plan_auth.Refused):
        plan_auth.verify_part(b"", OWNER, "t", meta)  # no key: nothing is trusted


def test_the_largest_part_fits_one_commits_metadata():
    big = 10**19 - 1
    part = NextPart(
        "999999",
        10**6,
        False,
        tuple(SubRange(1023, 10**4 + k, big - 1, big) for k in range(MAX_PART_SUB_RANGES)),
    )
    assert len(plan_auth.sign_part(KEY, OWNER, "t", part.body())) <= MAX_PART_BYTES


def test_the_parts_group_is_under_the_drains_prefix_beside_its_progress_groups():
    assert parts_group("g", "7", OWNER) == f"g.lagpilot-drain.{OWNER}.7.next"
    assert (
        parts_group("g", "7", OWNER).rsplit(".", 1)[0] == progress_group("g", "7", 0, OWNER).rsplit(".", 1)[0]
    )


def test_a_plan_extended_by_a_part_takes_its_new_sub_ranges_and_round_and_refuses_a_changed_one():
    p = plan()
    part = NextPart("7", 1, False, (SubRange(0, 1, 200, 300), SubRange(0, 2, 300, 350)))
    e = p.extended(part)
    assert e.round == 1 and e.sub_ranges == (*p.sub_ranges, SubRange(0, 2, 300, 350))
    assert DrainPlan.from_json(e.to_json()) == e  # busy and round travel with the plan (and its signature)
    with pytest.raises(ValueError):
        p.extended(NextPart("7", 1, False, (SubRange(0, 1, 200, 310),)))  # another bound for a known index
    with pytest.raises(ValueError):
        p.extended(NextPart("7", 1, False, (SubRange(0, 5, 250, 260),)))  # overlaps a known sub-range


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_driver_waits_for_a_newer_part_and_no_longer_than_its_bound():
    c = Clock()
    seen = [None, NextPart("7", 0, False, ()), NextPart("7", 1, False, (SubRange(0, 2, 300, 350),))]
    got = drain_job.wait_for_part(None, plan(), KEY, 60.0, sleep=c.sleep, clock=c, read=lambda: seen.pop(0))
    assert got is not None and got.round == 1 and c.t == 2.0  # round 0 is the plan's own: not new
    # the final part of the plan's own round ends the wait
    fin = NextPart("7", 1, True, ())
    assert (
        drain_job.wait_for_part(None, plan(round=1), KEY, 60.0, sleep=c.sleep, clock=c, read=lambda: fin)
        == fin
    )
    # nothing new: None once the bound passed, never a hang
    c.t = 0.0
    assert (
        drain_job.wait_for_part(
            None, plan(round=1), KEY, 30.0, sleep=c.sleep, clock=c, read=lambda: NextPart("7", 1, False, ())
        )
        is None
    )
    assert 30.0 <= c.t <= 31.0
    # a read error is waited out (bounded) like an absent part
    c.t = 0.0

    def boom() -> NextPart:
        raise RuntimeError("broker down")

    assert drain_job.wait_for_part(None, plan(), KEY, 5.0, sleep=c.sleep, clock=c, read=boom) is None


def test_the_driver_stops_waiting_when_its_caller_went_away_or_it_has_no_key():
    c = Clock()
    with pytest.raises(RuntimeError, match="stopped"):
        drain_job.wait_for_part(
            None, plan(), KEY, 60.0, sleep=c.sleep, clock=c, read=lambda: None, stopped=lambda: True
        )
    assert (
        drain_job.wait_for_part(
            None, plan(), b"", 60.0, sleep=c.sleep, clock=c, read=lambda: NextPart("7", 5, False, ())
        )
        is None
    )


class FakeConsumer:
    def __init__(self, metadata: str | None, offset: int = 1) -> None:
        self.metadata, self.offset = metadata, offset

    def committed(self, tps, timeout=None):
        from confluent_kafka import TopicPartition

        if self.metadata is None:
            return [TopicPartition("t", 0, self.offset)]
        return [TopicPartition("t", 0, self.offset, metadata=self.metadata)]


def test_the_driver_reads_only_the_operators_signed_part_of_its_own_drain():
    part = NextPart("7", 1, False, (SubRange(0, 2, 300, 350),))
    good = plan_auth.sign_part(KEY, OWNER, "t", part.body())
    assert drain_job.read_part(None, plan(), KEY, consumer=FakeConsumer(good)) == part
    assert drain_job.read_part(None, plan(), KEY, consumer=FakeConsumer(part.body())) is None  # unsigned
    other = plan_auth.sign_part(KEY, OWNER, "t", NextPart("8", 1, False, ()).body())
    assert drain_job.read_part(None, plan(), KEY, consumer=FakeConsumer(other)) is None  # another drain's
    assert (
        drain_job.read_part(None, plan(), KEY, consumer=FakeConsumer(None, offset=-1001)) is None
    )  # none yet
