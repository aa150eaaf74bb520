"""The drain hand-off mailbox: the wire contract between the operator and the consumers.

A drain of partition ``p`` takes ``[start, split)`` away from the live group without stopping it
(docs/drain.md, "The hand-off"). The operator and the consumer that owns ``p`` talk through the
committed offsets of one extra consumer group per group, the *mailbox* ``<groupId>.lagpilot-handoff``.
It never has members: both sides write it with "simple" commits (a Consumer that never subscribes)
and read it with OffsetFetch (``Consumer.committed``). No new topic, no Kubernetes access from pods.

Per partition the mailbox holds one entry, as committed offset ``split`` plus metadata:

- request (operator): ``lph2;cr=<CR uid>;id=<drainId>;split=<S>``
- ack (owner, or the operator for an empty group): ``lph2;cr=<CR uid>;id=<drainId>;split=<S>;ack=<start>``
- sealed (operator, when the partition resolved: acked or not): ``...;ack=<start>;done=1`` —
  ignored by consumers, so a resolved entry can never move a group whose offsets were later reset by
  hand (a partition that reached the split by itself is sealed with ``ack=<S>``, an empty range).

The CR uid (``cr=``) names the BatchConsumerGroup the drain belongs to: the operator writes it, the
consumers get their CR's uid as ``LAGPILOT_OWNER_UID`` and act only on entries that carry it, and the
operator takes only acks of its own CR. Another CR with the same ``groupId`` (refused by the
operator, ``DuplicateGroupId``), or a deleted CR's leftovers seen by a CR re-created with the same
``groupId``, can therefore never make an owner ack or jump. ``lph1`` entries (no uid) are written by
an older operator (and by the benches, which play the operator): only a consumer without
``LAGPILOT_OWNER_UID`` acts on them; the operator still accepts an ``lph1`` ack of its own drain id
and split (a drain published by an older operator and resolved after the upgrade).

Every ``lph2`` entry ends in ``;mac=<hex HMAC-SHA256>`` (issue 23, M8): the MAC, under the CR's
hand-off key (a Secret the operator owns, ``<cr>-handoff-key``; the consumers get it as
``LAGPILOT_HANDOFF_KEY``), of the topic, the partition and the entry's text before ``;mac=``. The
operator signs what it writes (requests, its acks for an empty group, seals), the owner signs its
ack; owners act only on a request (or ack) that verifies, the operator reads an entry that does not
verify as absent. Anyone who can commit to the mailbox group but does not hold the key can
therefore no longer make an owner ack and jump (the records in between would be owned by no drain)
nor make the operator take an ack. What it does not stop: docs/drain.md "Who may write the mailbox".

The order of effects that makes it exact (both sides use the pure rules below):

1. owner: write the ack (``start`` = its own committed offset ``c``: everything below ``c`` was
   processed and committed, nothing at or above it was), THEN commit its own group's offset ``S``,
   THEN seek to ``S``;
2. operator: read the group's committed offset FIRST, then the mailbox. If the group is at or past
   ``S`` and an ack exists, the ack was written before that commit, so this later read sees it:
   the drain gets ``[ack, S)``. At or past ``S`` without an ack means the group got there by itself
   (nothing to drain). Below ``S``: still pending.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, replace

from lagpilot_runtime import hex_key

PREFIX = "lph1"  # entries without a CR uid (an older operator, the benches)
PREFIX_CR = "lph2"  # entries of a CR: ``lph2;cr=<uid>;...``
MAILBOX_SUFFIX = ".lagpilot-handoff"
KEY_ENV = "LAGPILOT_HANDOFF_KEY"  # the consumers' copy of the CR's hand-off key (hex; secretKeyRef)
KEY_ID_ENV = (
    "LAGPILOT_HANDOFF_KEY_ID"  # a one-way fingerprint (in the pod template: a new key rolls the pods)
)
KEY_BYTES = hex_key.KEY_BYTES  # the one size of a per-CR key (hex_key)
_MAC_DOMAIN = b"lagpilot-handoff-mac-v1\0"

_ENTRY = re.compile(
    r"^(?:lph1|lph2;cr=([0-9A-Za-z-]{1,64}));id=(\d{1,19});split=(\d{1,19})(?:;ack=(\d{1,19}))?(;done=1)?"
    r"(?:;mac=([0-9a-f]{64}))?$"
)


def mailbox_group(group_id: str) -> str:
    """The mailbox consumer group of ``group_id`` (never has members)."""
    return f"{group_id}{MAILBOX_SUFFIX}"


@dataclass(frozen=True)
class Entry:
    """One partition's mailbox entry: a request (ack None), an ack, or a sealed ack; ``owner`` is
    the uid of the CR whose drain it is ("" for an ``lph1`` entry)."""

    drain_id: int
    split: int
    ack: int | None = None
    done: bool = False
    owner: str = ""
    mac: str = ""  # hex HMAC-SHA256 (sign/verify); "" unsigned

    def __post_init__(self) -> None:
        if self.drain_id < 0 or self.split < 0 or (self.ack is not None and self.ack < 0):
            raise ValueError(f"negative value in mailbox entry {self!r}")
        if self.done and self.ack is None:
            raise ValueError("a sealed mailbox entry carries its ack")

    @property
    def acked(self) -> bool:
        return self.ack is not None

    def body(self) -> str:
        """The entry's text without its MAC (what the MAC covers, with the topic and partition)."""
        head = f"{PREFIX_CR};cr={self.owner}" if self.owner else PREFIX
        s = f"{head};id={self.drain_id};split={self.split}"
        if self.ack is not None:
            s += f";ack={self.ack}"
        if self.done:
            s += ";done=1"
        return s

    def encode(self) -> str:
        return self.body() + (f";mac={self.mac}" if self.mac else "")

    def with_ack(self, start: int) -> Entry:
        return Entry(self.drain_id, self.split, int(start), owner=self.owner)

    def sealed(self) -> Entry:
        if self.ack is None:
            raise ValueError("only an acked entry can be sealed")
        return Entry(self.drain_id, self.split, self.ack, True, self.owner)


def request(drain_id: int, split: int, owner: str = "") -> Entry:
    return Entry(int(drain_id), int(split), owner=owner)


def sealed_entry(drain_id: int, split: int, start: int, owner: str = "") -> Entry:
    """The sealed entry of a resolved partition: ``[start, split)`` was the drain's (empty when
    ``start >= split``: the group got there by itself)."""
    return Entry(int(drain_id), int(split), int(start), True, owner)


def decode(metadata: str | bytes | None, committed_offset: int | None = None) -> Entry | None:
    """The entry in a mailbox commit's metadata; None for anything else (no commit, garbage, a
    commit whose offset disagrees with the split it names)."""
    if metadata is None:
        return None
    if isinstance(metadata, bytes):
        try:
            metadata = metadata.decode("ascii")
        except UnicodeDecodeError:
            return None
    m = _ENTRY.match(metadata.strip())
    if not m:
        return None
    try:
        e = Entry(
            int(m.group(2)),
            int(m.group(3)),
            None if m.group(4) is None else int(m.group(4)),
            m.group(5) is not None,
            m.group(1) or "",
            m.group(6) or "",
        )
    except ValueError:  # e.g. "done" without an ack
        return None
    if committed_offset is not None and committed_offset >= 0 and committed_offset != e.split:
        return None
    return e


def parse_key(text: str | bytes | None) -> bytes:
    """The hand-off key from its hex form; ValueError unless it is exactly KEY_BYTES bytes."""
    return hex_key.parse_key(text, "hand-off key", KEY_BYTES)


def key_id(key: bytes) -> str:
    """A one-way fingerprint of the key (safe in a pod spec): changes when the key does."""
    return hex_key.fingerprint(key, b"lagpilot-handoff-key-id")


def _mac(key: bytes, topic: str, partition: int, entry: Entry) -> str:
    msg = _MAC_DOMAIN + f"{topic}\0{int(partition)}\0{entry.body()}".encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def sign(entry: Entry, key: bytes, topic: str, partition: int) -> Entry:
    """``entry`` with its MAC for ``topic``/``partition`` under ``key`` (the operator's and the owner's writes)."""
    if not key:
        raise ValueError("no hand-off key to sign with")
    return replace(entry, mac=_mac(key, topic, partition, entry))


def verify(entry: Entry | None, key: bytes, topic: str, partition: int) -> bool:
    """Whether ``entry`` carries this key's MAC for ``topic``/``partition`` (constant-time compare).
    No key, or no MAC: False."""
    if entry is None or not key or not entry.mac:
        return False
    return hmac.compare_digest(_mac(key, topic, partition, entry).encode(), entry.mac.encode())


def trusted(entry: Entry | None, key: bytes, topic: str, partition: int) -> Entry | None:
    """``entry`` if it verifies, else None (what an owner with a CR uid and the operator act on)."""
    return entry if verify(entry, key, topic, partition) else None


@dataclass(frozen=True)
class OwnerStep:
    """What the owner of a partition does about its mailbox entry, in this order:
    write ``ack`` (if not None) to the mailbox, then commit its own offset ``move_to`` and seek
    there (if not None)."""

    ack: Entry | None = None
    move_to: int | None = None

    @property
    def noop(self) -> bool:
        return self.ack is None and self.move_to is None


def owner_step(entry: Entry | None, own: int, owner: str | None = None) -> OwnerStep:
    """The owner's rule (a consumer at a batch boundary, or the operator acting for an empty group).

    ``own``: the group's committed offset of the partition (its position if it never committed):
    everything below was processed, nothing at or above was. ``owner``: the consumer's CR uid
    (``LAGPILOT_OWNER_UID``; "" without one); None: the caller already chose the entry (the operator).

    - no entry, a sealed one, or an entry of another CR (``entry.owner != owner``): nothing.
    - a request: ack ``own``; move to ``split`` if ``own < split`` (else the range is empty).
    - an ack ``s`` with ``own >= split``: nothing (the hand-off is frozen from here).
    - an ack ``s`` with ``own < split`` (the acker died between its two commits): if ``own != s``
      (records after ``s`` were processed meanwhile, or offsets moved) re-ack ``own``; move to split.
    """
    if entry is None or entry.done or (owner is not None and entry.owner != owner):
        return OwnerStep()
    if not entry.acked:
        ack = entry.with_ack(own)
        return OwnerStep(ack, entry.split if own < entry.split else None)
    if own >= entry.split:
        return OwnerStep()
    return OwnerStep(None if own == entry.ack else entry.with_ack(own), entry.split)


@dataclass(frozen=True)
class Resolution:
    """The operator's view of one planned partition: pending, or resolved with ``[start, split)``
    (empty when ``start >= split``)."""

    resolved: bool
    split: int
    start: int | None = None

    @property
    def empty(self) -> bool:
        return self.resolved and (self.start is None or self.start >= self.split)


def of_drain(entry: Entry | None, drain_id: int, split: int, owner: str) -> bool:
    """Whether ``entry`` belongs to drain ``drain_id`` (split ``split``) of the CR ``owner``: its own
    uid, or no uid (an ``lph1`` entry of an older operator for this drain id and split)."""
    return (
        entry is not None
        and entry.drain_id == drain_id
        and entry.split == split
        and (entry.owner == owner or not entry.owner)
    )


def resolve(own: int | None, entry: Entry | None, drain_id: int, split: int, owner: str = "") -> Resolution:
    """The operator's rule. ``own`` must be read BEFORE ``entry`` (see the module docstring).

    An entry of another drain id, or of another CR (``owner``: this CR's uid), counts as absent."""
    if entry is not None and not of_drain(entry, drain_id, split, owner):
        entry = None
    if own is None or own < split:
        return Resolution(False, split)
    if entry is not None and entry.acked:
        return Resolution(True, split, min(int(entry.ack or 0), split))
    return Resolution(True, split, split)  # the group passed split by itself: nothing to drain
