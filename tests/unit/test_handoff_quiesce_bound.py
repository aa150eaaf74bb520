"""The quiesce fallback's wait for an empty group is bounded (issue 23, M6; pure, `now` passed in).

A member that is not one of the CR's consumers (a `kafka-console-consumer --group`, a debug client)
keeps the group non-empty after the consumers were scaled to 0. Past `Observed.quiesce_timeout_s`
the operator names the member(s) (client id, host) in the status and a Warning event, gives the
consumers their replicas back and continues with the exact hand-off (owners ack; a partition
resolves when its owner acks or passes the split by itself); it never falls back to the quiesce
again for this drain, and while foreign members stay the reason says so (the `Draining` condition
reason `ForeignGroupMembers`)."""

from __future__ import annotations

import dataclasses

from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import (
    DrainStatus,
    GroupMember,
    Kind,
    Observed,
    Offsets,
    PartitionRange,
    Phase,
    next_action,
)
from lagpilot.spec import parse_spec
from lagpilot_runtime import handoff_mailbox as mbx

NOW = 1_000_000.0
SPEC = parse_spec(
    {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "t",
        "groupId": "g",
        "batch": {"maxRecords": 10},
        "drain": {"splitFactor": 2},
    }
)
REQ = mbx.request(1, 1000)
O200 = {0: Offsets(200, 0, 1000), 1: Offsets(300, 0, 1000)}
PUBLISHED = DrainStatus(
    id=1,
    phase=Phase.PLANNED,
    ranges=(PartitionRange(0, split=1000), PartitionRange(1, split=1000)),
    restore_replicas=3,
    planned_at=NOW - 100,
    published_at=NOW - 100,
    hand_off_path=h.PATH_ACK,
)
FOREIGN = (GroupMember("console-consumer-1a2b", "console-consumer", "/10.0.0.7"),)
BOUND = 60.0


def obs(
    empty: bool | None, replicas: int, members: tuple[GroupMember, ...] | None, mailbox: dict | None = None
) -> Observed:
    return Observed(
        generation=1,
        offsets=O200,
        group_empty=empty,
        replicas=replicas,
        mailbox=mailbox if mailbox is not None else {0: REQ, 1: REQ},
        members=members,
        quiesce_timeout_s=BOUND,
    )


def quiesced(at: float) -> DrainStatus:
    late = next_action(SPEC, PUBLISHED, obs(False, 3, FOREIGN), at)
    assert late.kind is Kind.QUIESCE and late.replicas == 0
    return late.status


def test_within_the_bound_the_quiesce_waits() -> None:
    q = quiesced(NOW)
    a = next_action(SPEC, q, obs(False, 0, FOREIGN), NOW + BOUND - 1)
    assert a.kind is Kind.NONE and h.replicas_override(a.status or q) == 0


def test_past_the_bound_a_foreign_member_is_named_and_the_replicas_come_back() -> None:
    q = quiesced(NOW)
    a = next_action(SPEC, q, obs(False, 0, FOREIGN), NOW + BOUND)
    assert a.kind is Kind.RESTORE and a.replicas == 3
    assert a.status.phase is Phase.PLANNED and a.status.reason == "ForeignGroupMembers"
    assert "console-consumer" in a.status.message and "10.0.0.7" in a.status.message
    assert a.event is not None and a.event[:2] == ("Warning", "DrainHandOffForeignMembers")
    assert "console-consumer" in a.event[2]
    # the scaler is free again, and the Draining condition says why the hand-off waits
    assert h.replicas_override(a.status) is None and not h.holds_replicas(a.status)
    assert h.condition(a.status)[1] == "ForeignGroupMembers"
    assert a.status.pause_seconds == BOUND  # the consumers were away this long


def test_after_giving_up_it_never_quiesces_again_and_stays_loud() -> None:
    back = next_action(SPEC, quiesced(NOW), obs(False, 0, FOREIGN), NOW + BOUND).status
    ours = (GroupMember("m1", "lagpilot-orders-consumer-abc", "/10.0.0.8"),)
    # long past the ack timeout, the group non-empty, our consumers back: no second quiesce
    a = next_action(SPEC, back, obs(False, 3, FOREIGN + ours), NOW + 10 * BOUND)
    assert a.kind is Kind.NONE
    assert (a.status or back).reason == "ForeignGroupMembers"
    # our consumers ack and move partition 0; partition 1 (the foreign member's) stays pending
    mb = {0: REQ.with_ack(200), 1: REQ}
    offs_after = {0: Offsets(1000, 0, 1100), 1: Offsets(300, 0, 1100)}
    b = next_action(
        SPEC,
        back,
        dataclasses.replace(obs(False, 3, FOREIGN + ours, mb), offsets=offs_after),
        NOW + 11 * BOUND,
    )
    assert b.kind is Kind.NONE and (b.status or back).phase is Phase.PLANNED
    # the foreign member leaves; our consumer takes partition 1, acks and moves it: handed off, exact
    mb = {0: REQ.with_ack(200), 1: REQ.with_ack(300)}
    offs_done = {0: Offsets(1000, 0, 1100), 1: Offsets(1000, 0, 1100)}
    c = next_action(
        SPEC, back, dataclasses.replace(obs(False, 3, ours, mb), offsets=offs_done), NOW + 12 * BOUND
    )
    assert c.kind is Kind.SEAL and c.status.phase is Phase.HANDED_OFF
    assert [(r.partition, r.start, r.split) for r in c.status.ranges] == [(0, 200, 1000), (1, 300, 1000)]


def test_unknown_membership_past_the_bound_keeps_waiting() -> None:
    q = quiesced(NOW)
    a = next_action(SPEC, q, obs(None, 0, None), NOW + 2 * BOUND)
    assert a.kind is Kind.NONE


def test_the_group_emptying_in_time_still_takes_the_empty_group_step() -> None:
    q = quiesced(NOW)
    a = next_action(SPEC, q, obs(True, 0, ()), NOW + BOUND + 5)
    assert a.kind is Kind.ALTER_OFFSETS and a.status.hand_off_path == h.PATH_QUIESCE


def test_status_round_trip_keeps_the_given_up_quiesce() -> None:
    back = next_action(SPEC, quiesced(NOW), obs(False, 0, FOREIGN), NOW + BOUND).status
    again = DrainStatus.from_dict(back.to_dict())
    assert again == back
    a = next_action(SPEC, again, obs(False, 3, FOREIGN), NOW + 20 * BOUND)
    assert a.kind is not Kind.QUIESCE
