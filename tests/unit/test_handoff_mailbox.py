"""The hand-off mailbox wire contract (lagpilot_runtime.handoff_mailbox): encoding, and the owner's
and the operator's pure rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime.handoff_mailbox import Entry, OwnerStep, owner_step, resolve

ints = st.integers(0, 2**62)


def test_group_name_follows_the_progress_group_pattern():
    assert mbx.mailbox_group("orders") == "orders.lagpilot-handoff"


@given(ints, ints, st.one_of(st.none(), ints), st.booleans())
def test_encode_decode_round_trip(drain_id, split, ack, done):
    if done and ack is None:
        with pytest.raises(ValueError):
            Entry(drain_id, split, ack, done)
        return
    e = Entry(drain_id, split, ack, done)
    assert mbx.decode(e.encode()) == e
    assert mbx.decode(e.encode().encode()) == e  # bytes metadata too
    assert mbx.decode(e.encode(), committed_offset=split) == e


def test_examples():
    assert mbx.request(3, 1500).encode() == "lph1;id=3;split=1500"
    assert mbx.request(3, 1500).with_ack(200).encode() == "lph1;id=3;split=1500;ack=200"
    assert mbx.request(3, 1500).with_ack(200).sealed().encode() == "lph1;id=3;split=1500;ack=200;done=1"


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        "",
        "lp1;cap=3;ts=1",
        "lpd1;n=5",
        "lph1",
        "lph1;id=1",
        "lph1;id=x;split=2",
        "lph1;id=1;split=-2",
        "lph1;id=1;split=2;ack=",
        "lph1;id=1;split=2;done=1",
        "lph2;id=1;split=2",
        "lph1;split=2;id=1",
        "lph1;id=1;split=2;ack=1;extra=3",
        b"\xff\xfe",
        "lph1;id=1;split=2\nlph1;id=2;split=3",
    ],
)
def test_garbage_is_no_entry(garbage):
    assert mbx.decode(garbage) is None


def test_offset_must_match_split():
    assert mbx.decode("lph1;id=1;split=10", committed_offset=11) is None
    assert mbx.decode("lph1;id=1;split=10", committed_offset=-1001) == Entry(1, 10)  # no commit info


REQ = Entry(7, 1000)
# (entry, own committed) -> (ack start written or None, move_to or None)
OWNER = [
    (None, 5, None, None),
    (REQ, 200, 200, 1000),  # request: ack own, then move to split
    (REQ, 1000, 1000, None),  # already there: ack (empty range), nothing to move
    (REQ, 1200, 1200, None),  # passed split by itself: ack (empty range)
    (REQ.with_ack(200), 200, None, 1000),  # acker died between its commits: finish the move
    (REQ.with_ack(200), 260, 260, 1000),  # records after the ack were processed: re-ack, move
    (REQ.with_ack(200), 150, 150, 1000),  # offsets moved back by hand: re-ack lower (no loss)
    (REQ.with_ack(200), 1000, None, None),  # frozen
    (REQ.with_ack(200), 1300, None, None),
    (REQ.with_ack(200).sealed(), 10, None, None),  # sealed: never acted on again
]


@pytest.mark.parametrize("entry,own,ack,move", OWNER)
def test_owner_rule(entry, own, ack, move):
    step = owner_step(entry, own)
    assert (None if step.ack is None else step.ack.ack) == ack
    assert step.move_to == move
    if step.ack is not None:
        assert (step.ack.drain_id, step.ack.split) == (entry.drain_id, entry.split)
    assert step.noop == (ack is None and move is None)
    assert OwnerStep().noop


@pytest.mark.parametrize(
    "own,entry,resolved,start",
    [
        (None, REQ, False, None),
        (500, REQ, False, None),
        (500, REQ.with_ack(200), False, None),  # acked, split not yet committed: pending
        (1000, REQ.with_ack(200), True, 200),  # the hand-off: [200, 1000)
        (1400, REQ.with_ack(200), True, 200),  # consumers moved on past split since
        (1000, REQ.with_ack(200).sealed(), True, 200),
        (1000, REQ, True, 1000),  # at split, no ack: the group got there itself
        (1000, None, True, 1000),
        (1000, REQ.with_ack(1200), True, 1000),  # ack past split: empty
        (1000, Entry(6, 1000, 3), True, 1000),  # another drain's entry counts as absent
    ],
)
def test_operator_rule(own, entry, resolved, start):
    r = resolve(own, entry, 7, 1000)
    assert r.resolved is resolved
    if resolved:
        assert r.start == start and r.empty == (start >= 1000)


# ---- H2/M4: entries carry the CR's uid; owners act only on their own CR's entries -------------------

UID_A = "0b6f7c1e-8f3a-4c1d-9e2b-3f4a5b6c7d8e"
UID_B = "5d1e2f3a-1b2c-4d3e-8f4a-6b7c8d9e0f1a"


def test_entries_of_a_cr_carry_its_uid_and_keep_it_through_ack_and_seal():
    r = mbx.request(3, 1500, owner=UID_A)
    assert r.encode() == f"lph2;cr={UID_A};id=3;split=1500"
    assert r.with_ack(200).encode() == f"lph2;cr={UID_A};id=3;split=1500;ack=200"
    assert r.with_ack(200).sealed().encode() == f"lph2;cr={UID_A};id=3;split=1500;ack=200;done=1"
    for e in (r, r.with_ack(200), r.with_ack(200).sealed()):
        assert mbx.decode(e.encode(), committed_offset=1500) == e and e.owner == UID_A


@pytest.mark.parametrize("which", ["other-cr-request", "other-cr-ack", "no-cr-uid"])
def test_an_owner_never_acts_on_another_crs_entry(which):
    entry = {
        "other-cr-request": lambda: mbx.request(7, 1000, owner=UID_B),
        "other-cr-ack": lambda: mbx.request(7, 1000, owner=UID_B).with_ack(200),
        "no-cr-uid": lambda: mbx.request(7, 1000),
    }[which]()
    # another CR with the same groupId, a deleted CR's leftover (re-created with the same groupId),
    # or an entry without a CR uid: the consumers of CR A do nothing with it
    assert owner_step(entry, 200, owner=UID_A).noop
    assert owner_step(entry, 1000, owner=UID_A).noop


def test_an_owner_acts_on_its_own_crs_entry():
    assert owner_step(mbx.request(7, 1000, owner=UID_A), 200, owner=UID_A) == OwnerStep(
        mbx.request(7, 1000, owner=UID_A).with_ack(200), 1000
    )


def test_the_operator_never_takes_another_crs_ack():
    foreign = mbx.request(7, 1000, owner=UID_B).with_ack(200)
    # CR A's drain 7 with the same split: B's ack is no ack of A's; A's group at the split got there by itself
    assert resolve(1000, foreign, 7, 1000, owner=UID_A) == mbx.Resolution(True, 1000, 1000)
    assert resolve(
        1000, mbx.request(7, 1000, owner=UID_A).with_ack(200), 7, 1000, owner=UID_A
    ) == mbx.Resolution(True, 1000, 200)


@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 5000))
def test_a_sealed_entry_never_moves_a_group_whose_offsets_were_reset(split, ack, reset_to):
    # after the drain resolved, a person resets the group's offsets to anything: a sealed entry of the
    # group's own CR never makes the owner ack or jump
    sealed = mbx.sealed_entry(4, split, ack, owner=UID_A)
    assert owner_step(sealed, reset_to, owner=UID_A).noop
