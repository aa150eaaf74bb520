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

A drain still ``Planned`` handed nothing off — unless the offset alter happened and its status write
was lost (the group's committed offset is at or past ``split`` for a fixed start): those ranges are
handed back like a remainder.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .handoff import DrainStatus, JobObservation, JobState, Phase, SubProgress, PartitionRange, ranges_of, with_progress

REMAINDER_SUFFIX = ".lagpilot-remainder"
REMAINDER_PREFIX = "lpr1"
DEFAULT_WAIT_S = 600.0
SETTLE_S = 10.0  # let the stopped control loop's last cycle end before acting on status.drain
POLL_S = 5.0


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
    return {p: (rs[0][0], f"{REMAINDER_PREFIX};d={r.drain_id};r=" + ",".join(f"{a}-{b}" for a, b in rs))
            for p, rs in by_part.items()}


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
        rs = tuple(sorted((s.partition, max(s.next, s.start), s.end) for s in d.sub_ranges if s.remaining > 0))
        return Remainder(d.id, rs)
    out = []
    for r in d.ranges:
        c = (committed or {}).get(r.partition)
        if r.start is not None and c is not None and c >= r.split and r.split > r.start:
            out.append((r.partition, r.start, r.split))
    return Remainder(d.id, tuple(sorted(out)))


class DeleteKind(str, enum.Enum):
    RELEASE = "Release"        # let the CR go (nothing held, or finished)
    WAIT = "Wait"              # check again in `delay_s`
    DELETE_JOB = "DeleteJob"   # stop the drain's Job (foreground), then check again
    HAND_BACK = "HandBack"     # write the remainder group, then release


@dataclass(frozen=True)
class DeleteDecision:
    kind: DeleteKind
    reason: str
    message: str
    remainder: Remainder | None = None
    delay_s: float = POLL_S
    event: tuple[str, str, str] | None = None  # (type, reason, message)

    @property
    def condition(self) -> tuple[str, str, str]:
        """``Terminating`` (status, reason, message)."""
        return "True", self.reason, self.message[:1000]


def holds_range(d: DrainStatus | None) -> bool:
    """Whether deleting the CR could drop records this drain is responsible for."""
    if d is None or d.phase is Phase.VERIFIED:
        return False
    if d.phase is Phase.PLANNED:
        return any(r.start is not None for r in d.ranges)
    return d.remaining > 0 or d.phase in (Phase.RUNNING, Phase.SUCCEEDED, Phase.HANDED_OFF) and not d.sub_ranges


def decide(d: DrainStatus | None, *, job: JobObservation | None, progress: Mapping[tuple[int, int], tuple[int, int]] | None,
           committed: Mapping[int, int | None] | None, deleting_since: float, now: float,
           wait_s: float = DEFAULT_WAIT_S, settle_s: float = SETTLE_S) -> DeleteDecision:
    """One step of the finalizer (pure). ``progress``/``committed`` None: not measured (waits)."""
    if not holds_range(d):
        return DeleteDecision(DeleteKind.RELEASE, "NothingHeld", "no drain holds a range; released")
    assert d is not None
    age = now - deleting_since
    if age < settle_s:
        return DeleteDecision(DeleteKind.WAIT, "Settling", f"drain {d.id} {d.phase.value}: waiting for the control loop to stop",
                              delay_s=max(1.0, settle_s - age))
    if d.phase is Phase.PLANNED:
        if committed is None:
            return DeleteDecision(DeleteKind.WAIT, "WaitingForKafka", "reading the group's committed offsets")
        rem = remainder_of(d, committed)
        if not rem.ranges:
            return DeleteDecision(DeleteKind.RELEASE, "NothingHandedOff",
                                  f"drain {d.id} was not handed off: the group still owns its records; released")
        return _hand_back(d, rem, "the offsets were already moved to the split before the hand-off was recorded")
    if progress is None:
        if age < wait_s:
            return DeleteDecision(DeleteKind.WAIT, "WaitingForKafka", f"drain {d.id}: reading its progress")
        # Kafka unreachable past the bound: the recorded progress is a lower bound (a replay, never a gap)
        progress = {}
    d = with_progress(d, progress)
    if d.sub_ranges and d.remaining == 0:
        msg = f"drain {d.id} finished ({d.records_done}/{d.records_total} records) while the CR was being deleted; released"
        if job is not None and (job.state is JobState.ACTIVE or job.pods_alive > 0):
            return DeleteDecision(DeleteKind.WAIT, "WaitingForDrainExit", f"drain {d.id}: all ranges done, waiting for its pods to end")
        return DeleteDecision(DeleteKind.RELEASE, "DrainFinished", msg, event=("Normal", "DrainFinished", msg))
    running = (d.phase in (Phase.RUNNING, Phase.SUCCEEDED) and job is not None
               and job.state in (JobState.ACTIVE, JobState.SUCCEEDED))
    if running and age < wait_s:
        left = wait_s - age
        msg = (f"deletion waits for drain {d.id} (up to {left:.0f}s more): {d.records_done}/{d.records_total} records, "
               f"{d.remaining} remaining; after that the remainder is handed back to {{group}}{REMAINDER_SUFFIX}")
        return DeleteDecision(DeleteKind.WAIT, "WaitingForDrain", msg, delay_s=min(POLL_S, max(1.0, left)),
                              event=("Normal", "DeletionWaitingForDrain", msg))
    if job is not None and (job.state is JobState.ACTIVE or job.pods_alive > 0):
        why = "the wait bound passed" if running else f"the drain cannot finish ({job.state.value})"
        return DeleteDecision(DeleteKind.DELETE_JOB, "StoppingDrain",
                              f"drain {d.id}: {why}; stopping its Job to hand the remainder back")
    return _hand_back(d, remainder_of(d), "the drain did not finish before the CR was deleted")


def _hand_back(d: DrainStatus, rem: Remainder, why: str) -> DeleteDecision:
    parts = ", ".join(f"p{p}[{a}..{b})" for p, a, b in rem.ranges[:20]) + (" ..." if len(rem.ranges) > 20 else "")
    msg = (f"drain {d.id}: {why}; {rem.records} unprocessed records handed back to {{group}}{REMAINDER_SUFFIX} "
           f"({parts}); a CR created with the same groupId drains them first")
    return DeleteDecision(DeleteKind.HAND_BACK, "RemainderHandedBack", msg, remainder=rem,
                          event=("Warning", "DrainRemainderHandedBack", msg))


# ------------------------------------------------------------------------------- adoption

class AdoptKind(str, enum.Enum):
    NONE = "None"
    ADOPT = "Adopt"    # write the new drain to status.drain, then delete the remainder group
    CLEAR = "Clear"    # already recorded by a drain in status: delete the remainder group


def _covered(rem: Remainder, drains: Iterable[Mapping[str, Any]]) -> bool:
    """A drain newer than the remainder's whose ranges cover every remainder range (already adopted)."""
    for h in drains:
        if int(h.get("id", 0)) <= rem.drain_id:
            continue
        spans = [(r["partition"], r["start"], r["split"]) for r in ranges_of(h)]  # history keeps them on one line
        if all(any(p == q and s is not None and int(s) <= a and b <= e for q, s, e in spans) for p, a, b in rem.ranges):
            return True
    return False


def adoption(rem: Remainder | None, d: DrainStatus | None, restore_replicas: int, now: float) -> tuple[AdoptKind, DrainStatus | None]:
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
        id=new_id, phase=Phase.HANDED_OFF, reason="AdoptedRemainder",
        message=f"drain {new_id}: {rem.records} records handed back by a deleted CR (drain {rem.drain_id}) of this group: {parts}",
        ranges=tuple(PartitionRange(p, split=b, start=a) for p, (a, b) in sorted(spans.items())),
        sub_ranges=tuple(subs), restore_replicas=max(0, restore_replicas), planned_at=now, handed_off_at=now,
        history=d.history if d else (),
    )
    return AdoptKind.ADOPT, new


def group_offsets_of(tps: Sequence[Any]) -> dict[int, tuple[int, str | None]]:
    """Committed (offset, metadata) per partition from confluent-kafka TopicPartitions (no commit: absent)."""
    return {int(tp.partition): (int(tp.offset), getattr(tp, "metadata", None))
            for tp in tps if tp.offset is not None and tp.offset >= 0}

