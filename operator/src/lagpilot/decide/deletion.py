"""Deleting a CR while a drain holds a range: wait for it (bounded), else hand the remainder back.

Pure decisions (the clock and every observation are inputs); the kopf handler in ``handlers.py``
gathers the inputs and performs the one effect. See docs/drain.md, "Deleting a CR mid-drain".

Why not simply let the CR go: once a range is handed off, the group's committed offset is already
at ``split`` and the only record of ``[start, split)`` is ``status.drain`` (sub-ranges) plus the
progress groups. Deleting the CR would garbage-collect the Job and drop the status: the unfinished
records would be processed by nobody, silently. So lagpilot's finalizer (kopf's, kept while the
``on.delete`` handler has not succeeded):

1. **No drain holds a range** (none, ``Verified``, ``Cancelled`` with nothing left): release at once.
2. **A drain Job is running** and the bound (``LAGPILOT_DELETE_DRAIN_WAIT_SECONDS``, default 600 s,
   counted from ``metadata.deletionTimestamp``, so an operator restart does not extend it) has not
   passed: wait; condition ``Terminating=True/WaitingForDrain`` with the progress, event
   ``DeletionWaitingForDrain``. When every sub-range's progress reached its end: release
   (event ``DrainFinished``).
3. **Otherwise** (bound passed, the Job failed or is gone, the drain was Failed/Cancelled/HandedOff
   but not launched): stop the Job (foreground delete; wait until its pods are gone, so its progress
   is final), then **hand the remainder back**: the unfinished sub-ranges ``[next, end)`` are
   committed to the memberless consumer group ``<groupId>.lagpilot-remainder`` (one committed offset
   per partition = the lowest unfinished offset, the exact ranges in the commit metadata
   ``lpr1;d=<drainId>;r=<a>-<b>,...``), event ``DrainRemainderHandedBack``; then release. The group's
   own offsets never move backwards.

A CR later created with the same ``groupId`` finds the remainder when its control loop starts
(:func:`adoption`) and drains it first as a new drain (phase ``HandedOff`` with those sub-ranges),
then deletes the remainder group once the status records it.

A drain still ``Planned`` may already hold ranges although its status has no start yet: the hand-off
was published and owners acked (start = their committed offset) and moved themselves to the split
(issue 23, H1). The finalizer completes the hand-off instead of dropping it (:func:`_planned`): it
reads the group's committed offsets BEFORE the mailbox (the operator's rule, ``handoff_mailbox.resolve``);
an acked partition with the group at/past the split is ``[ack, split)`` → handed back like a remainder;
a partition still pending gets ``ACK_WAIT_S`` for its live owner to ack, then the CR's consumers are
stopped (Deployment to 0) and, once none is left (no pod, 0 replicas: nobody can act on the request any
more), its request is withdrawn — the group keeps ``[committed, split)``, its committed offset never
moved. Every entry of the drain is sealed before the CR goes. Moving the owners' offsets back to the
acked start instead was rejected: the broker refuses an offset alter while the group has members, and
a group past the split would re-process everything it did since (and one committed offset cannot
express a gap).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagpilot_runtime import handoff_mailbox as mbx

from .handoff import (
    DrainStatus,
    JobObservation,
    JobState,
    PartitionRange,
    Phase,
    SubProgress,
    seal_entries,
    with_progress,
)

REMAINDER_SUFFIX = ".lagpilot-remainder"
REMAINDER_PREFIX = "lpr1"
DEFAULT_WAIT_S = 600.0
SETTLE_S = 10.0  # let the stopped control loop's last cycle end before acting on status.drain
POLL_S = 5.0
# Planned: how long after the settle live owners get to ack before the consumers are stopped
ACK_WAIT_S = 30.0


def remainder_group(group_id: str) -> str:
    """The memberless group that holds a deleted CR's unprocessed sub-ranges."""
    return group_id + REMAINDER_SUFFIX


@dataclass(frozen=True)
class Remainder:
    """Unprocessed ranges ``(partition, start, end)`` of drain ``drain_id`` (sorted, non-overlapping)."""

    drain_id: int
    ranges: tuple[tuple[int, int, int], ...]

    @property
    def records(self) -> int:
        return sum(b - a for _, a, b in self.ranges)


def encode_remainder(r: Remainder) -> dict[int, tuple[int, str]]:
    """partition → (offset to commit = its lowest unfinished offset, metadata with every range)."""
    by_part: dict[int, list[tuple[int, int]]] = {}
    for p, a, b in sorted(r.ranges):
        if b > a:
            by_part.setdefault(p, []).append((a, b))
    return {
        p: (rs[0][0], f"{REMAINDER_PREFIX};d={r.drain_id};r=" + ",".join(f"{a}-{b}" for a, b in rs))
        for p, rs in by_part.items()
    }


def decode_remainder(committed: Mapping[int, tuple[int, str | None]]) -> Remainder | None:
    """Inverse of :func:`encode_remainder`; partitions without our metadata are ignored."""
    ranges: list[tuple[int, int, int]] = []
    ids: set[int] = set()
    for p, (_offset, meta) in committed.items():
        if not meta or not meta.startswith(REMAINDER_PREFIX + ";"):
            continue
        fields = dict(f.split("=", 1) for f in meta.split(";")[1:] if "=" in f)
        try:
            ids.add(int(fields["d"]))
            for part in fields.get("r", "").split(","):
                if part:
                    a, b = part.split("-")
                    if int(b) > int(a):
                        ranges.append((int(p), int(a), int(b)))
        except (KeyError, ValueError):
            continue
    if not ranges:
        return None
    return Remainder(max(ids), tuple(sorted(ranges)))


def remainder_of(d: DrainStatus, committed: Mapping[int, int | None] | None = None) -> Remainder:
    """What nobody will process once the CR is gone: unfinished sub-ranges ``[next, end)``; for a
    drain still Planned, the fixed ranges whose offsets were already altered (committed >= split)."""
    if d.sub_ranges:
        rs = tuple(
            sorted((s.partition, max(s.next, s.start), s.end) for s in d.sub_ranges if s.remaining > 0)
        )
        return Remainder(d.id, rs)
    out = []
    for r in d.ranges:
        c = (committed or {}).get(r.partition)
        if r.start is not None and c is not None and c >= r.split and r.split > r.start:
            out.append((r.partition, r.start, r.split))
    return Remainder(d.id, tuple(sorted(out)))


class DeleteKind(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    RELEASE = "Release"  # let the CR go (nothing held, or finished)
    WAIT = "Wait"  # check again in `delay_s`
    DELETE_JOB = "DeleteJob"  # stop the drain's Job (foreground), then check again
    HAND_BACK = "HandBack"  # write the remainder group, then release
    STOP_CONSUMERS = "StopConsumers"  # Planned: scale the consumer Deployment to 0, then check again


@dataclass(frozen=True)
class DeleteDecision:
    kind: DeleteKind
    reason: str
    message: str
    remainder: Remainder | None = None
    delay_s: float = POLL_S
    event: tuple[str, str, str] | None = None  # (type, reason, message)
    # Planned: sealed mailbox entries to write (after the remainder, before the release)
    entries: Mapping[int, mbx.Entry] = field(default_factory=dict)

    @property
    def condition(self) -> tuple[str, str, str]:
        """``Terminating`` (status, reason, message)."""
        return "True", self.reason, self.message[:1000]


def holds_range(d: DrainStatus | None) -> bool:
    """Whether deleting the CR could drop records this drain is responsible for."""
    if d is None or d.phase is Phase.VERIFIED:
        return False
    if d.phase is Phase.PLANNED:
        return True  # owners may have acked and moved to the split already (the starts are in the mailbox)
    return d.remaining > 0 or (
        d.phase in (Phase.RUNNING, Phase.SUCCEEDED, Phase.HANDED_OFF) and not d.sub_ranges
    )


def decide(
    d: DrainStatus | None,
    *,
    job: JobObservation | None,
    progress: Mapping[tuple[int, int], tuple[int, int]] | None,
    committed: Mapping[int, int | None] | None,
    deleting_since: float,
    now: float,
    wait_s: float = DEFAULT_WAIT_S,
    settle_s: float = SETTLE_S,
    mailbox: Mapping[int, mbx.Entry | None] | None = None,
    consumers_alive: int | None = None,
    owner: str = "",
    ack_wait_s: float = ACK_WAIT_S,
) -> DeleteDecision:
    """One step of the finalizer (pure). ``progress``/``committed``/``mailbox``/``consumers_alive``
    None: not measured (waits). For a Planned drain: ``committed`` read BEFORE ``mailbox`` (the
    hand-off mailbox entries), ``consumers_alive`` (the CR's consumer pods, or its Deployment's
    replicas if more) read before both; ``owner`` is the CR's uid."""
    if not holds_range(d):
        return DeleteDecision(DeleteKind.RELEASE, "NothingHeld", "no drain holds a range; released")
    assert d is not None
    age = now - deleting_since
    if age < settle_s:
        return DeleteDecision(
            DeleteKind.WAIT,
            "Settling",
            f"drain {d.id} {d.phase.value}: waiting for the control loop to stop",
            delay_s=max(1.0, settle_s - age),
        )
    if d.phase is Phase.PLANNED:
        return _planned(d, committed, mailbox, consumers_alive, owner, age, settle_s + ack_wait_s)
    if progress is None:
        if age < wait_s:
            return DeleteDecision(DeleteKind.WAIT, "WaitingForKafka", f"drain {d.id}: reading its progress")
        # Kafka unreachable past the bound: the recorded progress is a lower bound (a replay, never a gap)
        progress = {}
    d = with_progress(d, progress)
    if d.sub_ranges and d.remaining == 0:
        return _finished(d, job)
    running = (
        d.phase in (Phase.RUNNING, Phase.SUCCEEDED)
        and job is not None
        and job.state in (JobState.ACTIVE, JobState.SUCCEEDED)
    )
    if running and age < wait_s:
        left = wait_s - age
        msg = (
            f"deletion waits for drain {d.id} (up to {left:.0f}s more): "
            f"{d.records_done}/{d.records_total} records, "
            f"{d.remaining} remaining; after that the remainder is handed back to {{group}}{REMAINDER_SUFFIX}"
        )
        return DeleteDecision(
            DeleteKind.WAIT,
            "WaitingForDrain",
            msg,
            delay_s=min(POLL_S, max(1.0, left)),
            event=("Normal", "DeletionWaitingForDrain", msg),
        )
    if job is not None and (job.state is JobState.ACTIVE or job.pods_alive > 0):
        why = "the wait bound passed" if running else f"the drain cannot finish ({job.state.value})"
        return DeleteDecision(
            DeleteKind.DELETE_JOB,
            "StoppingDrain",
            f"drain {d.id}: {why}; stopping its Job to hand the remainder back",
        )
    return _hand_back(d, remainder_of(d), "the drain did not finish before the CR was deleted")


def _finished(d: DrainStatus, job: JobObservation | None) -> DeleteDecision:
    """Every sub-range done while the CR is deleted: release once its pods ended (a busy drain's
    idle driver is stopped instead of waited for)."""
    msg = (
        f"drain {d.id} finished ({d.records_done}/{d.records_total} records) while the CR was being "
        f"deleted; released"
    )
    if job is not None and (job.state is JobState.ACTIVE or job.pods_alive > 0):
        if d.busy:
            # a busy drain's driver, every sub-range done, only waits for a next part that a
            # deleted CR never sends (LAGPILOT_DRAIN_PART_WAIT_SECONDS): nothing left to write
            return DeleteDecision(
                DeleteKind.DELETE_JOB,
                "StoppingIdleDrain",
                f"drain {d.id}: all ranges done; its busy driver only waits for a next part: "
                "stopping its Job",
            )
        return DeleteDecision(
            DeleteKind.WAIT,
            "WaitingForDrainExit",
            f"drain {d.id}: all ranges done, waiting for its pods to end",
        )
    return DeleteDecision(DeleteKind.RELEASE, "DrainFinished", msg, event=("Normal", "DrainFinished", msg))


def _planned(
    d: DrainStatus,
    committed: Mapping[int, int | None] | None,
    mailbox: Mapping[int, mbx.Entry | None] | None,
    consumers_alive: int | None,
    owner: str,
    age: float,
    ack_until: float,
) -> DeleteDecision:
    """Complete (or safely withdraw) a published hand-off before the CR goes; see the module docstring."""
    if committed is None or mailbox is None:
        return DeleteDecision(
            DeleteKind.WAIT,
            "WaitingForKafka",
            f"drain {d.id}: reading the group's offsets and the hand-off mailbox",
        )
    posted, known = _hand_off_entries(d, mailbox, owner)
    res = {
        r.partition: mbx.resolve(committed.get(r.partition), known.get(r.partition), d.id, r.split, owner)
        for r in d.ranges
    }
    # unresolved with a live request (or ack) of this drain: its owner may still ack and move
    pending = sorted(p for p, x in res.items() if not x.resolved and p in posted and not posted[p].done)
    if pending:
        waiting = _while_owners_may_ack(d, pending, consumers_alive, age, ack_until)
        if waiting is not None:
            return waiting
        # no consumer of this CR is left and none will start: nobody can act on the request any more;
        # withdrawn (sealed as an empty range): the group keeps [committed, split)
        res = {**res, **{p: mbx.Resolution(True, res[p].split, res[p].split) for p in pending}}
    seal = seal_entries(d, res, posted, owner)
    rem = Remainder(
        d.id,
        tuple(
            sorted(
                (p, int(x.start), x.split)
                for p, x in res.items()
                if x.resolved and not x.empty and x.start is not None
            )
        ),
    )
    if not rem.ranges:
        return DeleteDecision(
            DeleteKind.RELEASE,
            "NothingHandedOff",
            f"drain {d.id} was not handed off: the group still owns its records; released",
            entries=seal,
        )
    h = _hand_back(d, rem, "the owners had acknowledged the hand-off (Planned) and moved to the split")
    return DeleteDecision(h.kind, h.reason, h.message, h.remainder, h.delay_s, h.event, entries=seal)


def _hand_off_entries(
    d: DrainStatus, mailbox: Mapping[int, mbx.Entry | None], owner: str
) -> tuple[dict[int, mbx.Entry], dict[int, mbx.Entry]]:
    """(posted, known): this drain's entries in the mailbox (an owner may act on them), and those plus
    the starts a pre-mailbox operator fixed (acks nobody else sees)."""
    posted: dict[int, mbx.Entry] = {}
    known: dict[int, mbx.Entry] = {}
    for r in d.ranges:
        e = mailbox.get(r.partition)
        if e is not None and mbx.of_drain(e, d.id, r.split, owner):
            posted[r.partition] = known[r.partition] = e
        elif r.start is not None:
            known[r.partition] = mbx.Entry(d.id, r.split, r.start, owner=owner)
    return posted, known


def _while_owners_may_ack(
    d: DrainStatus, pending: list[int], consumers_alive: int | None, age: float, ack_until: float
) -> DeleteDecision | None:
    """Partitions whose owners may still acknowledge the hand-off: wait for them (or for the pods to
    be read), then stop the consumers; None when no consumer is left (the requests are withdrawn)."""
    if consumers_alive is None:
        return DeleteDecision(
            DeleteKind.WAIT, "WaitingForKubernetes", f"drain {d.id}: reading the consumer pods"
        )
    if consumers_alive <= 0:
        return None
    if age < ack_until:
        return DeleteDecision(
            DeleteKind.WAIT,
            "WaitingForHandOff",
            f"drain {d.id} Planned: waiting for the owners of partitions {pending} to acknowledge "
            f"the hand-off before the CR goes",
            delay_s=2.0,
        )
    return DeleteDecision(
        DeleteKind.STOP_CONSUMERS,
        "StoppingConsumers",
        f"drain {d.id} Planned: no acknowledgement for partitions {pending}; stopping the "
        f"consumers ({consumers_alive} left) so nobody acts on the hand-off after the CR is gone",
    )


def _hand_back(d: DrainStatus, rem: Remainder, why: str) -> DeleteDecision:
    parts = ", ".join(f"p{p}[{a}..{b})" for p, a, b in rem.ranges[:20]) + (
        " ..." if len(rem.ranges) > 20 else ""
    )
    msg = (
        f"drain {d.id}: {why}; {rem.records} unprocessed records handed back to {{group}}{REMAINDER_SUFFIX} "
        f"({parts}); a CR created with the same groupId drains them first"
    )
    return DeleteDecision(
        DeleteKind.HAND_BACK,
        "RemainderHandedBack",
        msg,
        remainder=rem,
        event=("Warning", "DrainRemainderHandedBack", msg),
    )


# ------------------------------------------------------------------------------- adoption


class AdoptKind(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    NONE = "None"
    ADOPT = "Adopt"  # write the new drain to status.drain, then delete the remainder group
    CLEAR = "Clear"  # already recorded by a drain in status: delete the remainder group


def _covered(rem: Remainder, drains: Iterable[Mapping[str, Any]]) -> bool:
    """A drain newer than the remainder's whose ranges cover every remainder range (already adopted)."""
    for h in drains:
        if int(h.get("id", 0)) <= rem.drain_id:
            continue
        spans = [(r["partition"], r.get("start"), r["end"]) for r in h.get("ranges") or ()]
        if all(
            any(p == q and s is not None and int(s) <= a and b <= e for q, s, e in spans)
            for p, a, b in rem.ranges
        ):
            return True
    return False


def adoption(
    rem: Remainder | None, d: DrainStatus | None, restore_replicas: int, now: float
) -> tuple[AdoptKind, DrainStatus | None]:
    """At control-loop start: turn a remainder left by a deleted CR into this CR's next drain."""
    if rem is None or not rem.ranges:
        return AdoptKind.NONE, None
    recorded = [dict(h) for h in (d.history if d else ())] + ([d.to_dict()] if d else [])
    if _covered(rem, recorded):
        return AdoptKind.CLEAR, None
    idle = d is None or d.phase is Phase.VERIFIED or (d.phase is Phase.CANCELLED and d.remaining == 0)
    if not idle:
        return AdoptKind.NONE, None  # a drain holds ranges: adopt after it (next start of the loop)
    new_id = max(rem.drain_id, d.id if d else 0) + 1
    subs: list[SubProgress] = []
    index: dict[int, int] = {}
    for p, a, b in rem.ranges:
        k = index.get(p, 0)
        index[p] = k + 1
        subs.append(SubProgress(p, k, a, b, a))
    spans: dict[int, tuple[int, int]] = {}
    for p, a, b in rem.ranges:
        lo, hi = spans.get(p, (a, b))
        spans[p] = (min(lo, a), max(hi, b))
    parts = ", ".join(f"p{p}[{a}..{b})" for p, a, b in rem.ranges[:20])
    new = DrainStatus(
        id=new_id,
        phase=Phase.HANDED_OFF,
        reason="AdoptedRemainder",
        message=(
            f"drain {new_id}: {rem.records} records handed back by a deleted CR (drain {rem.drain_id}) "
            f"of this group: {parts}"
        ),
        ranges=tuple(PartitionRange(p, split=b, start=a) for p, (a, b) in sorted(spans.items())),
        sub_ranges=tuple(subs),
        restore_replicas=max(0, restore_replicas),
        planned_at=now,
        handed_off_at=now,
        history=d.history if d else (),
    )
    return AdoptKind.ADOPT, new


def group_offsets_of(tps: Sequence[Any]) -> dict[int, tuple[int, str | None]]:
    """Committed (offset, metadata) per partition from confluent-kafka TopicPartitions (no commit: absent)."""
    return {
        int(tp.partition): (int(tp.offset), getattr(tp, "metadata", None))
        for tp in tps
        if tp.offset is not None and tp.offset >= 0
    }
