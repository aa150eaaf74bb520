"""deletion.py: the finalizer's decisions (table tests + properties) and the remainder encoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide.deletion import (
    AdoptKind,
    DeleteKind,
    Remainder,
    adoption,
    decide,
    decode_remainder,
    encode_remainder,
    holds_range,
    remainder_group,
    remainder_of,
)
from lagpilot.decide.handoff import DrainStatus, JobObservation, JobState, PartitionRange, Phase, SubProgress

T0 = 1000.0
ACTIVE = JobObservation(JobState.ACTIVE, pods_alive=1)
FAILED = JobObservation(JobState.FAILED)
ABSENT = JobObservation(JobState.ABSENT)
DONE_JOB = JobObservation(JobState.SUCCEEDED)


def running(
    phase: Phase = Phase.RUNNING, nexts: tuple[int, int] = (150, 200), attempt: int = 1
) -> DrainStatus:
    subs = (
        SubProgress(0, 0, 100, 200, nexts[0], nexts[0] - 100),
        SubProgress(0, 1, 200, 300, nexts[1], nexts[1] - 200),
    )
    return DrainStatus(
        id=3, phase=phase, ranges=(PartitionRange(0, 300, 100),), sub_ranges=subs, attempt=attempt
    )


def step(d, job=ACTIVE, progress=None, committed=None, age=60.0, wait_s=600.0):
    return decide(
        d,
        job=job,
        progress=progress if progress is not None else {},
        committed=committed,
        deleting_since=T0,
        now=T0 + age,
        wait_s=wait_s,
        mailbox={},
    )


@pytest.mark.parametrize(
    "d, kw, kind, reason",
    [
        # nothing held: release at once, whatever else is observed
        (None, {}, DeleteKind.RELEASE, "NothingHeld"),
        (running(Phase.VERIFIED, (200, 300)), {}, DeleteKind.RELEASE, "NothingHeld"),
        (
            DrainStatus(id=1, phase=Phase.CANCELLED, sub_ranges=(SubProgress(0, 0, 0, 10, 10),)),
            {},
            DeleteKind.RELEASE,
            "NothingHeld",
        ),
        # the control loop's last cycle may still run: settle first
        (running(), {"age": 2.0}, DeleteKind.WAIT, "Settling"),
        # a running drain within the bound: wait for it
        (running(), {}, DeleteKind.WAIT, "WaitingForDrain"),
        # Kafka not answering: wait (within the bound)
        (running(), {"progress": None}, DeleteKind.WAIT, "WaitingForDrain"),
        # it finished meanwhile (progress at every end): release
        (
            running(),
            {"progress": {(0, 0): (200, 100), (0, 1): (300, 100)}, "job": DONE_JOB},
            DeleteKind.RELEASE,
            "DrainFinished",
        ),
        # finished but its pods still exit
        (
            running(),
            {"progress": {(0, 0): (200, 100), (0, 1): (300, 100)}},
            DeleteKind.WAIT,
            "WaitingForDrainExit",
        ),
        # the bound passed with the Job still running: stop it first, so its progress is final
        (running(), {"age": 700.0}, DeleteKind.DELETE_JOB, "StoppingDrain"),
        # ... then hand back
        (running(), {"age": 700.0, "job": ABSENT}, DeleteKind.HAND_BACK, "RemainderHandedBack"),
        # the Job failed: the drain cannot finish (nobody retries it any more): hand back now
        (running(), {"job": FAILED}, DeleteKind.HAND_BACK, "RemainderHandedBack"),
        (running(Phase.FAILED), {"job": FAILED}, DeleteKind.HAND_BACK, "RemainderHandedBack"),
        (running(Phase.CANCELLED), {"job": ABSENT}, DeleteKind.HAND_BACK, "RemainderHandedBack"),
        # handed off, never launched
        (
            running(Phase.HANDED_OFF, (100, 200), attempt=0),
            {"job": None},
            DeleteKind.HAND_BACK,
            "RemainderHandedBack",
        ),
        # Planned, starts fixed, offsets not altered: the group still owns its records
        (
            DrainStatus(id=2, phase=Phase.PLANNED, ranges=(PartitionRange(0, 300, 100),)),
            {"committed": {0: 100}},
            DeleteKind.RELEASE,
            "NothingHandedOff",
        ),
        # Planned, alter happened but not recorded: [start, split) has no other owner
        (
            DrainStatus(id=2, phase=Phase.PLANNED, ranges=(PartitionRange(0, 300, 100),)),
            {"committed": {0: 310}},
            DeleteKind.HAND_BACK,
            "RemainderHandedBack",
        ),
        (
            DrainStatus(id=2, phase=Phase.PLANNED, ranges=(PartitionRange(0, 300, 100),)),
            {"committed": None},
            DeleteKind.WAIT,
            "WaitingForKafka",
        ),
    ],
)
def test_decide(d, kw, kind, reason) -> None:
    got = step(d, **kw)
    assert (got.kind, got.reason) == (kind, reason), got
    assert got.condition[0] == "True" and got.message


def test_hand_back_names_exactly_the_unfinished_ranges() -> None:
    # progress moved past the status: the remainder starts at the observed next offsets
    got = step(running(), job=FAILED, progress={(0, 0): (180, 80)})
    assert got.remainder == Remainder(3, ((0, 180, 200), (0, 200, 300)))
    assert "120 unprocessed records" in got.message and "p0[180..200)" in got.message
    assert got.event is not None and got.event[:2] == ("Warning", "DrainRemainderHandedBack")


def test_progress_never_moves_backwards_and_missing_progress_hands_back_the_recorded_rest() -> None:
    # Kafka unreachable past the bound: the status' progress is used (a replay at worst, never a gap)
    got = step(running(), job=ABSENT, progress=None, age=700.0)
    assert got.kind is DeleteKind.HAND_BACK and got.remainder == Remainder(3, ((0, 150, 200), (0, 200, 300)))
    got = step(running(), job=FAILED, progress={(0, 0): (120, 20)})  # older than the status
    assert got.remainder == Remainder(3, ((0, 150, 200), (0, 200, 300)))


def test_encoding_round_trip_and_foreign_commits_ignored() -> None:
    r = Remainder(7, ((0, 5, 10), (0, 20, 30), (2, 0, 1)))
    enc = encode_remainder(r)
    assert enc[0] == (5, "lpr1;d=7;r=5-10,20-30") and enc[2][0] == 0
    assert decode_remainder(enc) == r
    assert decode_remainder({0: (3, None), 1: (4, "something else")}) is None
    assert remainder_group("orders") == "orders.lagpilot-remainder"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**9), st.integers(1, 10**6)), max_size=12),
    st.integers(1, 10**6),
)
def test_encoding_property(spans, drain_id) -> None:
    # non-overlapping ranges per partition (as sub-ranges are)
    ranges, cursor = [], {}
    for p, a, n in sorted(spans):
        a = max(a, cursor.get(p, 0))
        ranges.append((p, a, a + n))
        cursor[p] = a + n
    r = Remainder(drain_id, tuple(sorted(ranges)))
    enc = encode_remainder(r)
    assert all(len(meta) < 4096 for _, meta in enc.values())  # Kafka's default offset.metadata.max.bytes
    assert decode_remainder(enc) == (r if ranges else None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 200), st.integers(1, 100), st.integers(0, 120)),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(list(Phase)),
    st.sampled_from([ACTIVE, FAILED, ABSENT, DONE_JOB, None]),
    st.floats(0, 2000),
    st.floats(10, 1000),
)
def test_never_a_silent_drop(subs, phase, job, age, wait_s) -> None:
    """Whatever is observed: a step either keeps the CR (wait/stop Job), or releases with nothing
    unfinished, or hands back exactly every unfinished offset."""
    idx: dict[int, int] = {}
    sps = []
    for p, a, n, done in subs:
        k = idx.get(p, 0)
        idx[p] = k + 1
        start = a + k * 1000  # sub-ranges of a partition do not overlap
        sps.append(SubProgress(p, k, start, start + n, start + min(done, n)))
    d = DrainStatus(
        id=1,
        phase=phase,
        sub_ranges=tuple(sps),
        attempt=1,
        ranges=tuple(PartitionRange(p, 10**6, 0) for p in sorted(idx)),
    )
    got = decide(d, job=job, progress={}, committed={}, deleting_since=T0, now=T0 + age, wait_s=wait_s)
    unfinished = {(s.partition, o) for s in sps for o in range(s.next, s.end)}
    if got.kind is DeleteKind.RELEASE:
        assert not unfinished or phase is Phase.VERIFIED
    if got.kind is DeleteKind.HAND_BACK:
        handed = {(p, o) for p, a, b in got.remainder.ranges for o in range(a, b)}
        assert handed == unfinished
    if phase is not Phase.VERIFIED and unfinished:
        assert holds_range(d)


def test_adoption_makes_a_handed_off_drain_and_clears_only_when_recorded() -> None:
    rem = Remainder(3, ((0, 150, 200), (0, 200, 300), (1, 5, 9)))
    kind, new = adoption(rem, None, 2, T0)
    assert kind is AdoptKind.ADOPT and new is not None
    assert new.phase is Phase.HANDED_OFF and new.id == 4 and new.restore_replicas == 2
    assert [(s.partition, s.index, s.start, s.end, s.next) for s in new.sub_ranges] == [
        (0, 0, 150, 200, 150),
        (0, 1, 200, 300, 200),
        (1, 0, 5, 9, 5),
    ]
    assert new.records_total == rem.records == 154
    # the status now records it (e.g. the operator died before clearing the group): clear, never adopt twice
    assert adoption(rem, new, 2, T0)[0] is AdoptKind.CLEAR
    verified = DrainStatus(
        id=4, phase=Phase.VERIFIED, history=({"id": 4, "ranges": [r.to_dict() for r in new.ranges]},)
    )
    assert adoption(rem, verified, 2, T0)[0] is AdoptKind.CLEAR
    # a drain of this CR holding other ranges: adopt later; an idle older status: adopt with a fresh id
    assert adoption(rem, running(), 2, T0)[0] is AdoptKind.NONE
    old = DrainStatus(
        id=9, phase=Phase.VERIFIED, history=({"id": 9, "ranges": [{"partition": 5, "start": 0, "end": 1}]},)
    )
    kind, new = adoption(rem, old, 1, T0)
    assert kind is AdoptKind.ADOPT and new.id == 10 and new.history == old.history
    assert adoption(None, None, 1, T0) == (AdoptKind.NONE, None)


def test_remainder_of_planned_uses_committed() -> None:
    d = DrainStatus(
        id=2,
        phase=Phase.PLANNED,
        ranges=(PartitionRange(0, 300, 100), PartitionRange(1, 50, None), PartitionRange(2, 80, 70)),
    )
    assert remainder_of(d, {0: 300, 1: 60, 2: 75}).ranges == ((0, 100, 300),)


# ---- H1: a CR deleted while its drain is Planned (published, acks in the mailbox) ----------------------

from lagpilot_runtime import handoff_mailbox as mbx  # noqa: E402

UID = "0b6f7c1e-8f3a-4c1d-9e2b-3f4a5b6c7d8e"
# drain 4 of CR UID, published: p0 [?, 1000), p1 [?, 500), p2 [?, 800); starts unresolved (None)
PUB = DrainStatus(
    id=4,
    phase=Phase.PLANNED,
    ranges=(PartitionRange(0, 1000), PartitionRange(1, 500), PartitionRange(2, 800)),
    published_at=T0 - 5,
    hand_off_path="ConsumerAck",
)


def req(p_split: int) -> mbx.Entry:
    return mbx.request(4, p_split, owner=UID)


def planned_step(d=PUB, committed=None, mailbox=None, consumers=1, age=20.0):
    return decide(
        d,
        job=None,
        progress=None,
        committed=committed,
        mailbox=mailbox,
        consumers_alive=consumers,
        owner=UID,
        deleting_since=T0,
        now=T0 + age,
        wait_s=600.0,
    )


def test_planned_with_acks_is_held() -> None:
    assert holds_range(PUB)  # the starts are unresolved, but owners may have acked and moved already


def test_planned_with_every_owner_acked_and_moved_hands_the_acked_ranges_back() -> None:
    mailbox = {0: req(1000).with_ack(200), 1: req(500).with_ack(450), 2: req(800).with_ack(800)}
    got = planned_step(committed={0: 1000, 1: 530, 2: 900}, mailbox=mailbox)
    assert got.kind is DeleteKind.HAND_BACK, got
    assert got.remainder == Remainder(4, ((0, 200, 1000), (1, 450, 500)))  # p2 acked an empty range
    assert got.entries == {p: e.sealed() for p, e in mailbox.items()}  # every resolved entry sealed


def test_planned_with_a_pending_owner_waits_for_its_ack_then_stops_the_consumers() -> None:
    mailbox = {0: req(1000).with_ack(200), 1: req(500), 2: req(800)}
    committed = {0: 1000, 1: 300, 2: 900}  # p1 not acked yet; p2 got past its split by itself
    assert (
        planned_step(committed=committed, mailbox=mailbox).kind,
        planned_step(committed=committed, mailbox=mailbox).reason,
    ) == (DeleteKind.WAIT, "WaitingForHandOff")
    late = planned_step(committed=committed, mailbox=mailbox, age=120.0)
    assert late.kind is DeleteKind.STOP_CONSUMERS, late
    # no consumer of this CR left: nobody can act on p1's request any more; the group keeps [300, 500)
    gone = planned_step(committed=committed, mailbox=mailbox, consumers=0, age=130.0)
    assert gone.kind is DeleteKind.HAND_BACK and gone.remainder == Remainder(4, ((0, 200, 1000),)), gone
    assert gone.entries == {
        0: mailbox[0].sealed(),
        1: mbx.sealed_entry(4, 500, 500, owner=UID),
        2: mbx.sealed_entry(4, 800, 800, owner=UID),
    }


def test_planned_reads_are_needed() -> None:
    assert planned_step(committed=None, mailbox={}).kind is DeleteKind.WAIT
    assert planned_step(committed={0: 1, 1: 1, 2: 1}, mailbox=None).kind is DeleteKind.WAIT
    assert (
        planned_step(committed={0: 1, 1: 1, 2: 1}, mailbox={0: req(1000)}, consumers=None, age=300.0).kind
        is DeleteKind.WAIT
    )


def test_planned_never_published_releases_at_once_after_settling() -> None:
    d = DrainStatus(id=4, phase=Phase.PLANNED, ranges=(PartitionRange(0, 1000),))
    got = planned_step(d, committed={0: 100}, mailbox={0: None})
    assert (got.kind, got.reason) == (DeleteKind.RELEASE, "NothingHandedOff") and not got.entries


def test_planned_another_crs_ack_is_not_handed_back() -> None:
    foreign = mbx.request(4, 1000, owner="another-uid").with_ack(200)
    got = planned_step(
        DrainStatus(id=4, phase=Phase.PLANNED, ranges=(PartitionRange(0, 1000),), published_at=T0 - 5),
        committed={0: 1000},
        mailbox={0: foreign},
    )
    assert got.kind is DeleteKind.RELEASE and got.remainder is None, got


# a partition's state when the CR is deleted, in the hand-off's own terms (the owner's rule)
STATES = st.sampled_from(["none", "request", "acked", "acked-moved", "moved-on", "by-itself"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(STATES, st.integers(0, 400), st.integers(1, 400), st.integers(0, 300)),
        min_size=1,
        max_size=4,
    ),
    st.data(),
)
def test_no_offset_without_an_owner_across_delete_reset_recreate(parts, data) -> None:
    """The finalizer runs to the end on a drain deleted while Planned, in any state the owners left
    it; live owners of the CR may ack between its steps until it stopped them. At the end every
    offset of [committed before the hand-off, end) has exactly one owner — the group (at or above its
    committed offset) or the remainder — and nothing left in the mailbox moves anyone afterwards:
    not this CR's consumers after a manual offset reset, not a re-created CR's consumers."""
    ranges, committed, mailbox, c0, by_group = [], {}, {}, {}, {}
    for p, (state, c, n, extra) in enumerate(parts):
        split = c + n
        ranges.append(PartitionRange(p, split))
        c0[p] = c
        committed[p], mailbox[p] = {
            "none": (c, None),
            "request": (c, req(split)),
            "acked": (c, req(split).with_ack(c)),
            "acked-moved": (split, req(split).with_ack(c)),
            "moved-on": (split + extra, req(split).with_ack(c)),
            "by-itself": (split + extra, req(split)),
        }[state]
        # offsets the group already processed (after its commit at c)
        by_group[p] = (
            set(range(split, split + extra))
            if state == "moved-on"
            else (set(range(c, split + extra)) if state == "by-itself" else set())
        )
    d = DrainStatus(id=4, phase=Phase.PLANNED, ranges=tuple(ranges), published_at=T0 - 5)
    consumers, age, handed = 1, 11.0, None
    for _ in range(50):
        got = decide(
            d,
            job=None,
            progress=None,
            committed=dict(committed),
            mailbox=dict(mailbox),
            consumers_alive=consumers,
            owner=UID,
            deleting_since=T0,
            now=T0 + age,
            wait_s=600.0,
        )
        for p, e in got.entries.items():  # the finalizer writes the seals before it releases
            mailbox[p] = e
        if got.kind in (DeleteKind.RELEASE, DeleteKind.HAND_BACK):
            handed = got.remainder
            break
        if got.kind is DeleteKind.STOP_CONSUMERS:
            consumers = 0
        if consumers and data.draw(st.booleans()):  # a live owner runs the owner's rule meanwhile
            p = data.draw(st.sampled_from(sorted(mailbox)))
            step_ = mbx.owner_step(mailbox[p], committed[p], owner=UID)
            if step_.ack is not None:
                mailbox[p] = step_.ack
            if step_.move_to is not None:
                committed[p] = step_.move_to
        age += data.draw(st.sampled_from([1.0, 30.0]))
    else:
        raise AssertionError("the finalizer never finished")
    rem = {(p, o) for p, a, b in (handed.ranges if handed else ()) for o in range(a, b)}
    for p, r in enumerate(ranges):
        for o in range(c0[p], max(r.split, committed[p]) + 1):
            owners = [o in by_group[p], o >= committed[p], (p, o) in rem]
            assert sum(owners) == 1, (p, o, owners, committed[p], handed)
    for p, e in mailbox.items():  # afterwards: a reset to anything, or a re-created CR, moves nobody
        for reset in (0, c0[p], ranges[p].split - 1):
            assert mbx.owner_step(e, reset, owner=UID).noop, (p, e)
            assert mbx.owner_step(e, reset, owner="recreated-uid").noop


def test_a_busy_drain_done_while_deleting_has_its_idle_job_stopped() -> None:
    """A busy drain's driver, its sub-ranges done, waits (up to LAGPILOT_DRAIN_PART_WAIT_SECONDS,
    300 s) for a next part that a deleted CR never sends: the finalizer must not wait for its pods to
    end (tests/real/test_finalizer.py::test_cr_deleted_mid_drain_waits_for_the_drain took 388 s on the
    merged tree, 91 s before busy drains). Every sub-range is done, so stopping the Job loses nothing."""
    import dataclasses

    busy = dataclasses.replace(running(), busy=True)
    dec = step(busy, progress={(0, 0): (200, 100), (0, 1): (300, 100)})
    assert dec.kind is DeleteKind.DELETE_JOB, dec
    # then, with its pods gone: released as finished (the DrainFinished event)
    dec = step(busy, progress={(0, 0): (200, 100), (0, 1): (300, 100)}, job=DONE_JOB)
    assert (dec.kind, dec.reason) == (DeleteKind.RELEASE, "DrainFinished"), dec
