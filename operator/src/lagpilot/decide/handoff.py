"""The drain hand-off as a pure state machine, persisted in ``status.drain`` and in Kafka (docs/drain.md).

Phases (a transition per phase, Strimzi-style):

    (idle) --plan--> Planned --publish split, owners ack + move to split--> HandedOff
    HandedOff --create Job--> Running --Job complete--> Succeeded --progress complete--> Verified;
    Running --Job failed--> Running (retry with backoff) ... --> Failed;
    any phase --spec.drain.cancel--> Cancelled (unfinished sub-ranges stay recorded; resumed when
    cancel is cleared).

``next_action(spec, drain, observed, now)`` is pure: it compares the recorded status with what was
observed (Kafka offsets, the hand-off mailbox, group emptiness, the Deployment's replicas, the Job,
the progress groups) and returns ONE action for the executor (``lagpilot.act.drain``).

The hand-off never stops the live group (``lagpilot_runtime.handoff_mailbox``, the wire contract):

- The plan (split offsets = end offsets at plan time) is written to status before anything moves.
- PUBLISH: a request ``(id, split)`` per planned partition in the mailbox group (only where no entry
  of this drain exists yet: a re-publish must never overwrite an ack).
- The consumer owning a partition acks (start = its committed offset) and then commits ``split``
  itself, at a batch boundary (path ``ConsumerAck``). The operator reads the group's committed
  offsets BEFORE the mailbox: group >= split with an ack → ``[ack, split)``; without an ack → the
  group got there by itself (nothing to drain); group < split → pending.
- A group with no members: the operator applies the owner's rule for it (writes the ack, then
  alters the group's offsets to ``split``; the broker refuses while a member is in) — path
  ``EmptyGroup``. No ack within ``ack_timeout_s`` (an older consumer image): the old quiesce —
  scale to 0, wait for the group to be empty, then the same EmptyGroup step — path ``Quiesce``.
  Only then does the scaler's replica count stay held (``replicas_override``).
- A published request is never withdrawn (a withdrawal could race an ack and lose a range):
  cancel/disable wait until every partition resolved; cancel then records the ranges as
  Cancelled-with-remainder.
- Every resolved partition is sealed in the mailbox (``done=1``) with its HandedOff (or Cancelled)
  status write — acked or not (a partition that reached the split by itself is sealed with an empty
  range) — so no entry of a finished hand-off ever moves a group again, e.g. after its offsets were
  reset by hand; a lost status write is recognised from the sealed entries.
- Every entry carries the CR's uid (``Observed.owner``); entries of another CR are not this drain's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lagpilot.decide.drain_policy import RollOver
from lagpilot.model.status import HISTORY_RANGES, DrainEndReason, DrainHoldReason, DrainPhase, HandOffPath
from lagpilot.spec import GroupSpec
from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime.drain.plan import MAX_PART_SUB_RANGES, NextPart, SubRange, parallelism_for, split_ranges

from .drain_watch import Stall, StallLimits, stall
from .status import format_time, parse_time

# Job attempts per round before phase Failed (then a new round after a back-off, or on a spec change)
MAX_ATTEMPTS = 4
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 300.0
# Failed → next round: n*n+n minutes, capped (Strimzi's connector autoRestart)
FAILED_ROUND_BACKOFF_MAX_S = 3600.0
HISTORY = 5  # finished drains kept in status.drain.history
ACK_TIMEOUT_S = 30.0  # no consumer ack within this long after the publish: quiesce fallback
# the quiesce fallback waits at most this long (from quiescedAt) for the group to empty; past it the
# members still in the group are named and the consumers get their replicas back (``_give_up_quiesce``)
QUIESCE_TIMEOUT_S = 120.0
REASON_FOREIGN = "ForeignGroupMembers"
# an idle busy drain holds its slots at most this long before it hands its partitions back
# (``hold_seconds``): half the driver's own wait for a part (lagpilot_runtime.drain.job.PART_WAIT_S,
# 300 s), so the driver never ends by itself in the middle of a hold
HOLD_MAX_S = 150.0
# status.drain.reason of a busy drain in its hold (``_holding``)
REASON_HOLDING = DrainHoldReason.HOLDING_SLOTS.value
CONSUMER_CLIENT_PREFIX = "lagpilot-"  # the CR's consumers' client.id: lagpilot-<pod> (docs/CONTRACTS.md)

# the hand-off paths (status.drain.handOffPath), declared in the status model:
PATH_ACK = HandOffPath.CONSUMER_ACK.value  # the owners acked and moved themselves; the group never stopped
# the group had no members: the operator acted for the absent owner
PATH_EMPTY = HandOffPath.EMPTY_GROUP.value
PATH_QUIESCE = HandOffPath.QUIESCE.value  # no ack in time: scaled to 0, then as EmptyGroup


Phase = DrainPhase  # the drain's phases: declared once, in the status model (status.drain.phase)


# a StrEnum would format as its value (not its name) in f-strings and logs: kept (str, Enum)
class Kind(str, enum.Enum):  # noqa: UP042
    """What the executor does; status (if any) is written AFTER the effect succeeded."""

    NONE = "None"  # wait; maybe write status (progress, messages)
    WRITE_STATUS = "WriteStatus"  # no side effect, only the new status
    PUBLISH = "Publish"  # write hand-off requests to the mailbox (Action.entries)
    QUIESCE = "Quiesce"  # fallback: scale the consumer Deployment to 0
    ALTER_OFFSETS = "AlterOffsets"  # empty group: write Action.entries (acks), then alter the group's offsets
    SEAL = "Seal"  # write the sealed entries (Action.entries), then the status
    LAUNCH = "Launch"  # restore replicas, create the drain Job for `attempt`
    DELETE_JOB = "DeleteJob"  # cancel: delete the Job and its pods
    RESTORE = "Restore"  # abort before hand-off: give the replicas back
    DELIVER = "Deliver"  # a busy drain: write its next part (Action.part) where its driver reads it


@dataclass(frozen=True)
class PartitionRange:
    """One drained partition: ``[start, split)``; start is None until fixed with the group empty."""

    partition: int
    split: int
    start: int | None = None
    tasks: int | None = None  # Spark tasks the planner gave this partition (None: spec.drain.splitFactor)

    def to_dict(self, tasks: bool = True) -> dict[str, Any]:
        """``status.drain.ranges[]``: {partition, start, end, tasks}; ``end`` is the split offset
        (start absent until fixed; tasks absent when unknown or not wanted: history entries)."""
        d: dict[str, Any] = {"partition": self.partition}
        if self.start is not None:
            d["start"] = self.start
        d["end"] = self.split
        if tasks and self.tasks is not None:
            d["tasks"] = self.tasks
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PartitionRange:
        start, tasks = d.get("start"), d.get("tasks")
        return cls(
            int(d["partition"]),
            int(d["end"]),
            None if start is None else int(start),
            None if tasks is None else max(1, int(tasks)),
        )


@dataclass(frozen=True)
class SubProgress:
    """A sub-range and how far it got: next offset to process and records done (from Kafka)."""

    partition: int
    index: int
    start: int
    end: int
    next: int
    records: int = 0

    @property
    def done(self) -> bool:
        return self.next >= self.end

    @property
    def remaining(self) -> int:
        return max(0, self.end - max(self.next, self.start))

    def sub_range(self) -> SubRange:
        return SubRange(self.partition, self.index, self.start, self.end)

    def to_dict(self) -> dict[str, int]:
        """``status.drain.subRanges[]`` (lagpilot.model.status.SubRange): ``next`` left out while it
        is ``start`` and ``records`` while 0 (``from_dict`` reads them back so: lossless), so a
        sub-range not begun is 4 lines in ``kubectl describe``, not 6."""
        d = {"partition": self.partition, "index": self.index, "start": self.start, "end": self.end}
        if self.next != self.start:
            d["next"] = self.next
        if self.records:
            d["records"] = self.records
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SubProgress:
        return cls(
            int(d["partition"]),
            int(d["index"]),
            int(d["start"]),
            int(d["end"]),
            int(d.get("next", d["start"])),
            int(d.get("records", 0)),
        )


@dataclass(frozen=True)
class Extension:
    """The next split of a busy drain (issue 25 item 2, docs/drain.md "Busy drains"): planned while
    the drain runs (its tasks about to run out of work), handed off through the same mailbox
    protocol as a first split (request, owner's ack at a batch boundary, seal), then its ranges'
    sub-ranges join the running drain's, processed by the tasks it already runs: no new start-up.
    ``round`` numbers the drain's splits (the first is round 0)."""

    round: int
    ranges: tuple[PartitionRange, ...]
    planned_at: float | None = None
    published_at: float | None = None

    @property
    def partitions(self) -> list[int]:
        return [r.partition for r in self.ranges]

    def to_dict(self) -> dict[str, Any]:
        """``status.drain.extension`` (lagpilot.model.status.DrainExtension)."""
        d: dict[str, Any] = {"round": self.round, "ranges": [r.to_dict() for r in self.ranges]}
        if self.planned_at is not None:
            d["plannedAt"] = format_time(self.planned_at)
        if self.published_at is not None:
            d["publishedAt"] = format_time(self.published_at)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Extension | None:
        if not d:
            return None
        return cls(
            int(d["round"]),
            tuple(PartitionRange.from_dict(r) for r in d.get("ranges") or ()),
            parse_time(d.get("plannedAt")),
            parse_time(d.get("publishedAt")),
        )


@dataclass(frozen=True)
class DrainStatus:
    """``status.drain``; every field survives an operator restart."""

    id: int
    phase: Phase
    reason: str = ""
    message: str = ""
    ranges: tuple[PartitionRange, ...] = ()
    sub_ranges: tuple[SubProgress, ...] = ()
    restore_replicas: int = 1
    attempt: int = 0
    attempt_base: int = 1  # attempts are counted from here (reset on resume / spec change)
    retry_at: float | None = None
    cancel_requested: bool = False
    failed_generation: int | None = None
    planned_at: float | None = None
    quiesced_at: float | None = None
    handed_off_at: float | None = None
    resumed_at: float | None = None  # live group given its replicas back
    started_at: float | None = None
    finished_at: float | None = None
    last_error: str = ""
    history: tuple[Mapping[str, Any], ...] = ()
    hand_off_path: str = ""  # ConsumerAck | EmptyGroup | Quiesce ("" before the publish)
    published_at: float | None = None
    # retention deleted these offsets of handed-off ranges before the drain read them:
    # (partition, start, end) ranges, recorded by the drain job in its progress metadata
    lost: tuple[tuple[int, int, int], ...] = ()
    runtime: str = ""  # warm | cold: how the current attempt's Job was launched (lagpilot.act.drain_runtime)
    # (records done, records total) of a finished drain read back from a status that no longer
    # lists its sub-ranges (``_finished``: nothing will be read from them again)
    done_counts: tuple[int, int] | None = None
    # when the current attempt launched or its progress last moved (the no-progress detector's clock)
    progress_at: float | None = None
    stalled: str = ""  # NoProgress | NoRunningPod from a stall's detection until progress moves again
    # rounds of MAX_ATTEMPTS that ended Failed (the next round's back-off grows with it)
    failed_rounds: int = 0
    # a busy drain (issue 25 item 2): while the capped group cannot hold its partitions it takes
    # their next split (``extension``) without a new start-up, its tasks kept; ``round`` counts the
    # splits taken after the first, ``slots`` the tasks its executor holds (0: one per unfinished sub-range)
    busy: bool = False
    round: int = 0
    slots: int = 0
    # records/s of one slot, the task capacity the planner sized ``slots`` with (DrainNeed.slot_rate;
    # 0: not recorded): the drain's next splits and its roll-over judge the slots by it
    slot_rate: float = 0.0
    extension: Extension | None = None
    # a busy drain's done sub-ranges no longer listed (``fold_done``): (ranges, records done,
    # records total); the listed ones and these make the drain's counts
    folded: tuple[int, int, int] = (0, 0, 0)
    # a busy drain idle (every sub-range done, no next split wanted, none in hand-off) since then:
    # its hold before the hand-back (``hand_back_hold``); None: not idle, or not yet seen idle
    idle_since: float | None = None

    @property
    def records_lost(self) -> int:
        return sum(b - a for _, a, b in self.lost)

    @property
    def quiescing(self) -> bool:
        """The quiesce fallback (or a pre-mailbox hand-off) is under way or done for this drain."""
        return self.hand_off_path == PATH_QUIESCE or (not self.hand_off_path and self.quiesced_at is not None)

    @property
    def partitions(self) -> list[int]:
        return [r.partition for r in self.ranges]

    @property
    def records_total(self) -> int:
        if self.sub_ranges:
            return sum(s.end - s.start for s in self.sub_ranges) + self.folded[2]
        if self.done_counts is not None:
            return self.done_counts[1]
        return sum(r.split - r.start for r in self.ranges if r.start is not None)

    @property
    def records_done(self) -> int:
        if not self.sub_ranges and self.done_counts is not None:
            return self.done_counts[0]
        return sum(s.records for s in self.sub_ranges) + self.folded[1]

    @property
    def remaining(self) -> int:
        return sum(s.remaining for s in self.sub_ranges)

    @property
    def pause_seconds(self) -> float | None:
        """How long the live group had its consumers removed for this hand-off: 0 on the ConsumerAck
        and EmptyGroup paths (nothing was stopped; the owners' per-partition pause of at most one
        batch is the consumers' lagpilot_consumer_handoff_pause_seconds)."""
        if self.quiescing:
            if self.quiesced_at is None or self.resumed_at is None:
                return None
            return round(self.resumed_at - self.quiesced_at, 3)
        # a quiesce given up (foreign members)
        if self.quiesced_at is not None and self.resumed_at is not None:
            return round(self.resumed_at - self.quiesced_at, 3)
        return 0.0 if self.handed_off_at is not None else None

    def to_dict(self) -> dict[str, Any]:
        """``status.drain`` (lagpilot.model.status.DrainStatus). A finished drain (``_finished``)
        keeps what a reader and a restarted operator use (id, phase, message, ranges, times, path,
        pause, records done/total, losses, history) but not its sub-ranges or restoreReplicas. The
        status is a JSON merge patch, which merges nested objects: a field absent now is sent as
        null (deleted); fields at their default are left out that way too."""
        over = _finished(self)
        d: dict[str, Any] = {
            "id": self.id,
            "phase": self.phase.value,
            "reason": self.reason,
            "message": self.message,
            "ranges": [r.to_dict() for r in self.ranges],
            "subRanges": None if over else [s.to_dict() for s in self.sub_ranges],
            "subRangesFolded": None
            if over or not self.folded[0]
            else {"ranges": self.folded[0], "recordsDone": self.folded[1], "recordsTotal": self.folded[2]},
            "restoreReplicas": None if over else self.restore_replicas,
            "attempt": self.attempt,
            "attemptBase": _unless(self.attempt_base == 1, self.attempt_base),
            "retryAt": format_time(self.retry_at),
            "cancelRequested": _or_none(self.cancel_requested),
            "failedGeneration": self.failed_generation,
            "plannedAt": format_time(self.planned_at),
            "quiescedAt": format_time(self.quiesced_at),
            "handedOffAt": format_time(self.handed_off_at),
            "resumedAt": format_time(self.resumed_at),
            "startedAt": format_time(self.started_at),
            "finishedAt": format_time(self.finished_at),
            "pauseSeconds": self.pause_seconds,
            "recordsTotal": self.records_total,
            "recordsDone": self.records_done,
            "lastError": _or_none(self.last_error),
            "history": [history_entry(h) for h in self.history] or None,
            "handOffPath": _or_none(self.hand_off_path),
            "publishedAt": format_time(self.published_at),
            "lostRanges": _or_none([{"partition": p, "start": a, "end": b} for p, a, b in self.lost]),
            "recordsLost": _or_none(self.records_lost),
            "runtime": _or_none(self.runtime),
            "progressAt": format_time(self.progress_at),
            "stalled": _or_none(self.stalled),
            "failedRounds": _or_none(self.failed_rounds),
            "busy": _or_none(self.busy),
            "round": _or_none(self.round),
            "slots": _unless(over, _or_none(self.slots)),
            "slotRate": _unless(over, _or_none(round(self.slot_rate, 3))),
            "extension": None if self.extension is None else self.extension.to_dict(),
            "idleSince": _unless(over, format_time(self.idle_since)),
        }
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> DrainStatus | None:
        if not d or "phase" not in d or "id" not in d:
            return None

        def f(key: str) -> float | None:
            return parse_time(d.get(key))

        subs = tuple(SubProgress.from_dict(s) for s in d.get("subRanges") or ())
        done_counts = _done_counts(d, subs)
        return cls(
            id=int(d["id"]),
            phase=Phase(d["phase"]),
            reason=_text(d, "reason"),
            message=_text(d, "message"),
            ranges=tuple(PartitionRange.from_dict(r) for r in d.get("ranges") or ()),
            sub_ranges=subs,
            restore_replicas=_int(d, "restoreReplicas"),
            attempt=_int(d, "attempt"),
            attempt_base=_int(d, "attemptBase", 1),
            retry_at=f("retryAt"),
            cancel_requested=bool(d.get("cancelRequested")),
            failed_generation=_opt_int(d, "failedGeneration"),
            planned_at=f("plannedAt"),
            quiesced_at=f("quiescedAt"),
            handed_off_at=f("handedOffAt"),
            resumed_at=f("resumedAt"),
            started_at=f("startedAt"),
            finished_at=f("finishedAt"),
            last_error=_text(d, "lastError"),
            history=tuple(history_entry(h) for h in d.get("history") or ()),
            hand_off_path=_text(d, "handOffPath"),
            published_at=f("publishedAt"),
            lost=tuple(
                (int(x["partition"]), int(x["start"]), int(x["end"])) for x in d.get("lostRanges") or ()
            ),
            runtime=_text(d, "runtime"),
            done_counts=done_counts,
            progress_at=f("progressAt"),
            stalled=_text(d, "stalled"),
            failed_rounds=_int(d, "failedRounds"),
            busy=bool(d.get("busy")),
            round=_int(d, "round"),
            slots=_int(d, "slots"),
            slot_rate=float(d.get("slotRate") or 0.0),
            extension=Extension.from_dict(d.get("extension")),
            folded=_folded(d.get("subRangesFolded") if subs else None),
            idle_since=f("idleSince"),
        )


_T = TypeVar("_T")


def _or_none(v: _T) -> _T | None:
    """``v``, or None when it is falsy (at its default: left out of the merge patch)."""
    return v or None


def _unless(absent: bool, v: _T) -> _T | None:
    """``v``, or None (left out of the merge patch) when ``absent``."""
    return None if absent else v


def _text(d: Mapping[str, Any], key: str) -> str:
    return str(d.get(key) or "")


def _int(d: Mapping[str, Any], key: str, default: int = 0) -> int:
    return int(d.get(key) or default)


def _opt_int(d: Mapping[str, Any], key: str) -> int | None:
    v = d.get(key)
    return None if v is None else int(v)


def _folded(d: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """``status.drain.subRangesFolded`` as (ranges, records done, records total)."""
    if not d:
        return (0, 0, 0)
    return (_int(d, "ranges"), _int(d, "recordsDone"), _int(d, "recordsTotal"))


def fold_done(
    subs: Sequence[SubProgress], folded: tuple[int, int, int], listed: int = MAX_PART_SUB_RANGES
) -> tuple[tuple[SubProgress, ...], tuple[int, int, int]]:
    """A busy drain's sub-ranges bounded: past ``listed``, its done sub-ranges leave the list into
    the folded counts (ranges, records done, records total), a range at a time (done sub-ranges
    joined where one ends at the next's start), the oldest of the partition with the most done
    sub-ranges first. Unfinished ones always stay (the driver's part and the progress reads need
    them; a next split is only taken while they fit one part: at most MAX_PART_SUB_RANGES), and so
    does each partition's highest index (a next split numbers its sub-ranges after it: an index is
    never reused, its progress group's commits never read for another range)."""
    out = list(subs)
    n, done, total = folded
    last = {x.partition: max(y.index for y in subs if y.partition == x.partition) for x in subs}
    while len(out) > listed:
        done_of: dict[int, list[SubProgress]] = {}
        for x in sorted(out, key=lambda y: (y.partition, y.start)):
            if x.done and x.index != last[x.partition]:
                done_of.setdefault(x.partition, []).append(x)
        if not done_of:
            break
        p = max(done_of, key=lambda q: (len(done_of[q]), -q))
        span = done_of[p][:1]
        for x in done_of[p][1:]:
            if x.start != span[-1].end:
                break
            span.append(x)
        for x in span:
            out.remove(x)
        n, done = n + 1, done + sum(x.records for x in span)
        total += sum(x.end - x.start for x in span)
    return tuple(out), (n, done, total)


def _done_counts(d: Mapping[str, Any], subs: tuple[SubProgress, ...]) -> tuple[int, int] | None:
    """(records done, records total) of a finished drain whose status no longer lists its sub-ranges."""
    if (
        not subs
        and Phase(d["phase"]) in (Phase.VERIFIED, Phase.CANCELLED)
        and d.get("recordsTotal") is not None
    ):
        return int(d.get("recordsDone") or 0), int(d["recordsTotal"])
    return None


def _finished(d: DrainStatus) -> bool:
    """Over for good: nothing will ever be read from its sub-ranges again (see ``is_idle``); a busy
    drain's published next split is not resolved yet (its ranges would join the drain)."""
    if d.extension is not None and d.extension.published_at is not None:
        return False
    return d.phase is Phase.VERIFIED or (d.phase is Phase.CANCELLED and d.remaining == 0)


HISTORY_FIELDS = (
    "id",
    "phase",
    "reason",
    "ranges",
    "rangesOmitted",
    "recordsDone",
    "recordsTotal",
    "seconds",
    "pauseSeconds",
)


def history_entry(h: Mapping[str, Any]) -> dict[str, Any]:
    """One ``status.drain.history[]`` entry (lagpilot.model.status.DrainHistoryEntry) as stored:
    the fields of ``HISTORY_FIELDS`` that are set, ranges without task counts. Idempotent, so a
    drain read back from its status compares equal to the one written."""
    out = {k: h[k] for k in HISTORY_FIELDS if h.get(k) is not None and k != "ranges"}
    out["ranges"] = [PartitionRange.from_dict(r).to_dict(tasks=False) for r in h.get("ranges") or ()]
    return out


def format_ranges(ranges: Sequence[Mapping[str, Any]]) -> str:
    """Ranges for a message or a table, ``p0[400..6300) p2[?..75)`` (start absent: ``?``)."""
    return " ".join(
        f"p{int(r['partition'])}[{'?' if r.get('start') is None else int(r['start'])}..{int(r['end'])})"
        for r in ranges
    )


@dataclass(frozen=True)
class Offsets:
    """One partition as observed in Kafka: committed (None: no commit yet), low and end watermarks."""

    committed: int | None
    low: int
    end: int

    @property
    def position(self) -> int:
        """Where the group resumes: its commit, else the earliest record (auto.offset.reset)."""
        return self.committed if self.committed is not None else self.low


@dataclass(frozen=True)
class GroupMember:
    """A member of the consumer group as the broker describes it (DescribeGroups)."""

    member_id: str
    client_id: str
    host: str

    @property
    def ours(self) -> bool:
        """One of the CR's consumer pods (client.id ``lagpilot-<pod>``)."""
        return self.client_id.startswith(CONSUMER_CLIENT_PREFIX)

    def describe(self) -> str:
        return f"client.id {self.client_id} from {self.host.lstrip('/') or '?'}"


def describe_members(members: Sequence[GroupMember], limit: int = 5) -> str:
    """``client.id X from host, ...`` (sorted; at most `limit`, then how many more)."""
    names = sorted({m.describe() for m in members})
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class JobState(str, enum.Enum):  # noqa: UP042 (as Kind)
    ABSENT = "Absent"
    ACTIVE = "Active"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class JobObservation:
    state: JobState
    pods_alive: int = 0
    message: str = ""
    running: int | None = None  # its pods in phase Running (None: not observed)


@dataclass(frozen=True)
class HandBack:
    """The hand-back rule's inputs for an idle busy drain (docs/drain.md "Busy drains", the hold
    before the hand-back), from the decision step: how long it holds its slots first
    (``hold_seconds``: a new drain's start-up, as the planner would pay it now) and whether the
    estimator is warm (every partition's rate measured: an operator started without its memory has
    none, and the group would seem to hold every partition)."""

    hold_s: float = 0.0
    warm: bool = True


def hold_seconds(start_up_s: float, poll_s: float) -> float:
    """How long an idle busy drain holds its slots before it hands its partitions back: a new
    drain's start-up (the learned one of this CR, as the planner pays it now: warm or cold), the
    ski-rental bound — idle slots cost what a new drain's start-up would, no more — and at least
    two polls (the planner sees the drain's lanes as the status the cycle read: a cycle's "no next
    split" may be a lane that was still at work then, or one poll's rate), at most ``HOLD_MAX_S``.
    Pure."""
    return min(HOLD_MAX_S, max(2.0 * max(0.0, poll_s), max(0.0, start_up_s)))


def hand_back_hold(d: DrainStatus, rule: HandBack, now: float) -> float | None:
    """An idle busy drain (every sub-range done, no next split wanted, none in hand-off, no
    roll-over): None when it hands its partitions back now — idle since ``d.idle_since`` for the
    whole hold (``rule.hold_s``) and the estimator warm — else when its hold started (the
    ``idleSince`` to record: ``now`` on its first idle cycle). The one rule of the operator
    (``_deliver``) and the simulator (``sim.world.settle``). Pure."""
    since = d.idle_since if d.idle_since is not None else now
    if rule.warm and now - since >= rule.hold_s:
        return None
    return since


@dataclass(frozen=True)
class Observed:
    """What the executor measured this cycle; None means "not measured" (never "empty")."""

    generation: int
    offsets: Mapping[int, Offsets] | None
    group_empty: bool | None
    replicas: int
    wanted: Sequence[int] = ()
    job: JobObservation | None = None
    # (partition, index) -> (next offset, records done), from the progress groups
    progress: Mapping[tuple[int, int], tuple[int, int]] | None = None
    # the hand-off mailbox entries of the planned partitions, read AFTER `offsets` (None: not read)
    mailbox: Mapping[int, mbx.Entry | None] | None = None
    ack_timeout_s: float = ACK_TIMEOUT_S
    # Spark tasks per wanted partition, from the planner (missing: spec.drain.splitFactor)
    tasks: Mapping[int, int] = field(default_factory=dict)
    # a busy drain's first split: the task slots the planner asks its Job to hold (DrainNeed.slots;
    # 0: its sub-ranges), recorded at the plan and turned into the Job's parallelism at launch
    slots: int = 0
    slot_rate: float = 0.0  # records/s of one of those slots as the planner sized them (DrainNeed.slot_rate)
    # the running busy drain takes no next split because the load outgrew its slots (the planner's
    # drain_policy.roll_over): its final part is a roll-over (reason RollingOver), not a hand-back
    roll_over: RollOver | None = None
    # (partition, index) -> [start, end) ranges retention deleted, from the progress metadata (None: not read)
    lost: Mapping[tuple[int, int], Sequence[tuple[int, int]]] | None = None
    stall_limits: StallLimits = field(default_factory=StallLimits)
    # the group's members (None: not read); read while the quiesce fallback runs or after it gave up
    members: Sequence[GroupMember] | None = None
    quiesce_timeout_s: float = QUIESCE_TIMEOUT_S
    # the CR's uid: written into every mailbox entry; entries of another CR are not this drain's
    owner: str = ""
    # the executor keeps drains busy (issue 25 item 2): a new drain is planned busy, and ``wanted``
    # on a Running busy drain asks for the next split of those partitions (``_next_split``)
    busy: bool = False
    # a Running busy drain: the next part its driver can read now (None: not read; NO_PART: none)
    part: PartSeen | None = None
    # when an idle busy drain hands its partitions back (the step's ``StepDecision.hand_back``);
    # the default hands back at once (no hold)
    hand_back: HandBack = field(default_factory=HandBack)


@dataclass(frozen=True)
class PartSeen:
    """The signed next part a busy drain's driver reads (``drain_plan.NextPart``), as observed:
    its round and whether it is final (no further split: the drain ends once its sub-ranges are done)."""

    round: int
    final: bool


NO_PART = PartSeen(-1, False)  # no valid part delivered yet


@dataclass(frozen=True)
class Action:
    kind: Kind
    status: DrainStatus | None = None  # to write after the effect; None: leave status alone
    reason: str = ""
    message: str = ""
    offsets: Mapping[int, int] = field(default_factory=dict)  # ALTER_OFFSETS
    # PUBLISH / ALTER_OFFSETS / SEAL: mailbox writes first
    entries: Mapping[int, mbx.Entry] = field(default_factory=dict)
    replicas: int | None = None  # QUIESCE / LAUNCH / RESTORE
    attempt: int = 0  # LAUNCH: which Job
    event: tuple[str, str, str] | None = None  # (type Normal|Warning, reason, message)
    lost_records: int = 0  # records newly recorded as lost (lagpilot_drain_records_lost_total)
    part: NextPart | None = None  # DELIVER: the part to write (signed by the executor)


def job_name(cr_name: str, drain_id: int, attempt: int) -> str:
    """Deterministic, so a Job created before a lost status write is found again (409 → adopt)."""
    suffix = f"-drain-{drain_id}-{attempt}"
    return cr_name[: 63 - len(suffix)].rstrip("-.") + suffix


def backoff_seconds(attempt: int) -> float:
    """10 s, 20 s, 40 s ... capped at 5 min: the same range, later."""
    return float(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, attempt - 1)))


def failed_round_backoff_seconds(rounds: int) -> float:
    """After the n-th round of attempts ended Failed: n*n + n minutes (2, 6, 12, 20, 30, 42, 56),
    then every 60 minutes, for ever — Strimzi's back-off for a KafkaConnector's autoRestart. The
    drain holds its ranges meanwhile (nobody else may process them); cancel stops the retries."""
    n = max(1, rounds)
    return min(FAILED_ROUND_BACKOFF_MAX_S, 60.0 * (n * n + n))


def _failed(d: DrainStatus, what: str, last_error: str, observed: Observed, now: float) -> DrainStatus:
    """A round of MAX_ATTEMPTS used up: phase Failed, the next round scheduled (retryAt, in the
    message and so in the Draining condition), the ranges kept."""
    n = d.failed_rounds + 1
    retry_at = now + failed_round_backoff_seconds(n)
    f = _finish(
        d,
        Phase.FAILED,
        "AttemptsExhausted",
        f"{what}; {d.remaining} records stay recorded; next retry at {format_time(retry_at)} "
        f"(failed round {n}; a spec change retries at once, spec.drain.cancel stops it)",
        now,
    )
    return dataclasses.replace(
        f, failed_generation=observed.generation, last_error=last_error, failed_rounds=n, retry_at=retry_at
    )


def replicas_override(drain: DrainStatus | None) -> int | None:
    """What the scaler must use instead of its own decision: 0 while the quiesce fallback is under
    way (phase Planned on path Quiesce); None otherwise — on the ConsumerAck/EmptyGroup paths the
    scaler stays free (a rebalance moves a partition with its committed offset and mailbox entry,
    and the new owner applies the same rule)."""
    if drain is not None and drain.phase is Phase.PLANNED and drain.quiescing:
        return 0
    return None


def holds_replicas(drain: DrainStatus | None) -> bool:
    """The scaler must not act: the quiesce fallback owns the replica count until the Job launch
    gives the replicas back (Planned or HandedOff on path Quiesce)."""
    return drain is not None and drain.phase in (Phase.PLANNED, Phase.HANDED_OFF) and drain.quiescing


def replicas_override_raw(raw: Mapping[str, Any] | None) -> int | None:
    """``replicas_override`` for the raw ``status.drain`` (an apply outside the control loop)."""
    try:
        return replicas_override(DrainStatus.from_dict(raw))
    except (KeyError, TypeError, ValueError):
        return None


def with_progress(
    drain: DrainStatus, progress: Mapping[tuple[int, int], tuple[int, int]] | None
) -> DrainStatus:
    """Merge observed progress into the sub-ranges; never moves backwards (a lost read is ignored)."""
    if not progress or not drain.sub_ranges:
        return drain
    subs = []
    for s in drain.sub_ranges:
        nxt, recs = progress.get((s.partition, s.index), (s.next, s.records))
        subs.append(
            dataclasses.replace(
                s, next=max(s.next, min(max(nxt, s.start), s.end)), records=max(s.records, recs)
            )
        )
    return dataclasses.replace(drain, sub_ranges=tuple(subs))


def progress_message(d: DrainStatus) -> str:
    parts = ", ".join(f"p{r.partition}[{r.start}..{r.split})" for r in d.ranges if r.start is not None)
    return f"drain {d.id} {d.phase.value}: {d.records_done}/{d.records_total} records; {parts}".strip()


def processed_ranges(d: DrainStatus) -> tuple[list[PartitionRange], int]:
    """Every range the drain was handed, each split of a busy drain's included (``d.ranges`` names
    only the latest of each partition): its sub-ranges, joined where one ends at the next's start,
    by partition and offset; without sub-ranges (nothing handed off) its ranges. At most
    max(HISTORY_RANGES, partitions): past it the oldest range of the partition with the most ranges
    is left out, again and again (each partition keeps its latest). Returns (ranges, left out:
    those and the ranges ``fold_done`` folded)."""
    if not d.sub_ranges:
        return list(d.ranges), 0
    spans: dict[int, list[list[int]]] = {}
    for x in sorted(d.sub_ranges, key=lambda x: (x.partition, x.start)):
        mine = spans.setdefault(x.partition, [])
        if mine and mine[-1][1] == x.start:
            mine[-1][1] = x.end
        else:
            mine.append([x.start, x.end])
    omitted = d.folded[0]
    while sum(len(v) for v in spans.values()) > max(HISTORY_RANGES, len(spans)):
        del spans[max(spans, key=lambda p: (len(spans[p]), -p))][0]
        omitted += 1
    return [PartitionRange(p, split=b, start=a) for p in sorted(spans) for a, b in spans[p]], omitted


def _summary(d: DrainStatus) -> dict[str, Any]:
    ranges, omitted = processed_ranges(d)
    return {
        "id": d.id,
        "phase": d.phase.value,
        "reason": d.reason,
        "ranges": [r.to_dict(tasks=False) for r in ranges],
        "rangesOmitted": omitted or None,
        "recordsTotal": d.records_total,
        "recordsDone": d.records_done,
        "pauseSeconds": d.pause_seconds,
        "seconds": None
        if d.started_at is None or d.finished_at is None
        else round(d.finished_at - d.started_at, 3),
    }


def _finish(d: DrainStatus, phase: Phase, reason: str, message: str, now: float) -> DrainStatus:
    done = dataclasses.replace(d, phase=phase, reason=reason, message=message, finished_at=now, retry_at=None)
    kept = tuple(h for h in done.history if h.get("id") != done.id)  # one entry per drain id
    return dataclasses.replace(done, history=(*kept, history_entry(_summary(done)))[-HISTORY:])


def is_idle(d: DrainStatus | None) -> bool:
    """No drain holds a range: a new one may be planned."""
    if d is None:
        return True
    if d.extension is not None and d.extension.published_at is not None:
        return False  # a busy drain's next split in hand-off: its ranges are the drain's once resolved
    if d.phase is Phase.VERIFIED:
        return True
    return d.phase is Phase.CANCELLED and d.remaining == 0


def next_action(spec: GroupSpec, drain: DrainStatus | None, observed: Observed, now: float) -> Action:
    """The one next step of the hand-off; pure (the clock and every observation are inputs).

    A pipeline of named steps, each returning the ``Action`` (kind, status, reason, message) it
    decided, or ``None`` to let the next step decide (docs/decision.md "The hand-off's steps"):

    1. idle: ``_maybe_plan``; Planned: ``_planned``; HandedOff: ``_handed_off`` (phase steps before
       the range is handed off);
    2. from here the range is handed off and only ever finishes, fails or is cancelled:
       ``_merge_progress`` (observed progress, the stall clock) -> ``_record_data_loss`` ->
       ``_busy_next_split`` (a busy drain's next split, or what the drain's end waits for) ->
    3. the phase's own step: ``_running``, ``_succeeded``, ``_after_failure``, ``_cancelled``.
    """
    if is_idle(drain):
        return _maybe_plan(spec, drain, observed, now)
    assert drain is not None
    stop = spec.drain.cancel or not spec.drain.enabled
    if drain.phase is Phase.PLANNED:
        return _planned(spec, drain, observed, now, stop)
    if drain.phase is Phase.HANDED_OFF:
        return _handed_off(spec, drain, observed, now)
    d = _merge_progress(drain, observed, now)
    lost = _record_data_loss(spec, d, observed)
    if lost is not None:
        return lost
    waiting = _busy_next_split(spec, d, observed, now, stop)
    if waiting is not None and _acts(waiting):
        return waiting
    if d.phase is Phase.RUNNING:
        return _running(spec, drain, d, observed, now, waiting)
    if d.phase is Phase.SUCCEEDED:
        return _succeeded(drain, d, observed, now, waiting)
    if d.phase is Phase.FAILED:
        return _after_failure(spec, drain, d, observed, now)
    if d.phase is Phase.CANCELLED:  # with a remainder (else idle)
        return _cancelled(spec, drain, d, observed, now)
    return Action(Kind.NONE)


def _acts(a: Action) -> bool:
    """The action does something or writes a status (not only a wait)."""
    return a.kind is not Kind.NONE or a.status is not None


def _last_attempt(d: DrainStatus) -> bool:
    """The current attempt is the last of its round (MAX_ATTEMPTS counted from ``attempt_base``)."""
    return d.attempt - d.attempt_base + 1 >= MAX_ATTEMPTS


def _cancelled_by_spec(d: DrainStatus, message: str, now: float) -> DrainStatus:
    return _finish(
        d,
        Phase.CANCELLED,
        "CancelledBySpec",
        f"{message}; {d.remaining} records stay recorded and resume when spec.drain.cancel is false",
        now,
    )


def _handed_off(spec: GroupSpec, d: DrainStatus, observed: Observed, now: float) -> Action:
    """HandedOff: launch the first attempt (the quiesced replicas given back), or cancel keeping the range."""
    if spec.drain.cancel:
        c = _cancelled_by_spec(d, f"drain {d.id} cancelled before launch", now)
        return Action(
            Kind.RESTORE,
            c,
            c.reason,
            c.message,
            replicas=d.restore_replicas if d.quiescing else None,
            event=("Normal", "DrainCancelled", c.message),
        )
    return _launch(spec, d, observed, now, attempt=d.attempt or 1, reason="Launched", restore=d.quiescing)


def _merge_progress(drain: DrainStatus, observed: Observed, now: float) -> DrainStatus:
    """The observed progress merged in; when it moved, the stall clock restarts and a stall is over."""
    d = with_progress(drain, observed.progress)
    if d.sub_ranges != drain.sub_ranges:
        d = dataclasses.replace(d, progress_at=now, stalled="")
    return d


def _record_data_loss(spec: GroupSpec, d: DrainStatus, observed: Observed) -> Action | None:
    """Retention deleted part of a handed-off range before the drain read it: record it (once), say
    exactly which offsets, and let the drain go on with the rest (still exact)."""
    new_lost = lost_ranges(d, observed.lost)
    if not new_lost:
        return None
    n = sum(b - a for _, a, b in new_lost)
    what = "; ".join(f"partition {p}: offsets [{a}, {b})" for p, a, b in new_lost)
    msg = (
        f"drain {d.id}: retention deleted {n} records of topic {spec.topic!r} before the drain read them "
        f"({what}); the rest of the range is drained"
    )
    lost_d = dataclasses.replace(d, lost=tuple(sorted(d.lost + new_lost)), message=msg)
    return Action(
        Kind.WRITE_STATUS, lost_d, "DataLoss", msg, event=("Warning", "DataLoss", msg[:1000]), lost_records=n
    )


def _busy_next_split(
    spec: GroupSpec, d: DrainStatus, observed: Observed, now: float, stop: bool
) -> Action | None:
    """A busy drain's next split (``_next_split``): an action that acts is the step; a wait is
    returned too, since the drain's end waits for a published next split to resolve (its ranges are
    the drain's); None: no next split in flight."""
    published = d.extension is not None and d.extension.published_at is not None
    waiting: Action | None = None
    if d.busy and (d.phase is Phase.RUNNING or published):
        waiting = _next_split(spec, d, observed, now, stop)
    if waiting is None and published:
        waiting = Action(Kind.NONE, reason="WaitingForAcks", message=f"drain {d.id}: next split pending")
    return waiting


def _running(
    spec: GroupSpec,
    drain: DrainStatus,
    d: DrainStatus,
    observed: Observed,
    now: float,
    waiting: Action | None,
) -> Action:
    """Running: the attempt's Job decides: succeeded -> ``_job_succeeded``; cancel ->
    ``_cancel_running``; active -> ``_job_active`` (deliver a part, stall detection); failed (or
    succeeded with work left, retry_at set) -> ``_attempt_over``; vanished -> ``_job_absent``."""
    job = observed.job
    if job is None:
        return _progress_only(drain, d)
    if job.state is JobState.SUCCEEDED and d.retry_at is None:
        return _job_succeeded(d, waiting)
    if spec.drain.cancel:
        return _cancel_running(d, job, now)
    if job.state is JobState.ACTIVE and d.retry_at is None:
        active = _job_active(drain, d, job, observed, now, waiting)
        if active is not None:
            return active
    # a failed attempt, or one whose Job succeeded with work left (IncompleteProgress set
    # retry_at): the next attempt after the back-off, once the attempt's pods are gone; never the
    # same finished Job again (before, Succeeded <-> Running flipped every cycle, no retry)
    if job.state is JobState.FAILED or job.state is JobState.SUCCEEDED:
        return _attempt_over(spec, drain, d, job, observed, now)
    if job.state is JobState.ABSENT:
        return _job_absent(spec, drain, d, job, observed, now)
    return _progress_only(drain, d)


def _job_succeeded(d: DrainStatus, waiting: Action | None) -> Action:
    """The Job succeeded: phase Succeeded (verified next), unless a published next split resolves first."""
    if waiting is not None:  # a published next split resolves first (its ranges are the drain's)
        return waiting
    s = dataclasses.replace(
        d,
        phase=Phase.SUCCEEDED,
        reason="JobSucceeded",
        retry_at=None,
        message=progress_message(dataclasses.replace(d, phase=Phase.SUCCEEDED)),
    )
    return Action(Kind.WRITE_STATUS, s, s.reason, s.message)


def _cancel_running(d: DrainStatus, job: JobObservation, now: float) -> Action:
    """spec.drain.cancel on a Running drain: delete the Job, then (pods gone) Cancelled, remainder kept."""
    if job.state is not JobState.ABSENT or job.pods_alive > 0:
        c = dataclasses.replace(
            d,
            cancel_requested=True,
            reason="Cancelling",
            message=f"drain {d.id}: deleting Job attempt {d.attempt}",
        )
        return Action(Kind.DELETE_JOB, c, c.reason, c.message, attempt=d.attempt)
    c = _finish(
        d,
        Phase.CANCELLED,
        "CancelledBySpec",
        f"drain {d.id} cancelled: {d.records_done}/{d.records_total} records done; {d.remaining} remaining "
        "stay recorded and resume when spec.drain.cancel is false",
        now,
    )
    return Action(Kind.WRITE_STATUS, c, c.reason, c.message, event=("Normal", "DrainCancelled", c.message))


def _job_active(
    drain: DrainStatus,
    d: DrainStatus,
    job: JobObservation,
    observed: Observed,
    now: float,
    waiting: Action | None,
) -> Action | None:
    """The attempt's Job runs: a busy drain's next part (``_deliver``), the stall clock started, a
    stall detected (``_stalled``); None: only progress to record."""
    if d.busy and waiting is None:
        part = _deliver(drain, d, observed, now)
        if part is not None:
            return part
    if d.progress_at is None:  # a status written before the detector: start its clock now
        return Action(Kind.NONE, dataclasses.replace(d, progress_at=now))
    if d.busy and d.remaining == 0:
        # its driver waits for the next part (bounded by its own wait): not a stall
        return _progress_only(drain, d)
    st = stall(now, d.progress_at, job.running, observed.stall_limits)
    if st is not None:
        return _stalled(d, st, observed, now)
    return None


def _attempt_over(
    spec: GroupSpec, drain: DrainStatus, d: DrainStatus, job: JobObservation, observed: Observed, now: float
) -> Action:
    """The attempt's Job failed (or succeeded with work left): schedule the retry (``_attempt_failed``),
    wait out the back-off and the attempt's pods, then launch the next attempt."""
    if d.retry_at is None:
        return _attempt_failed(d, job, observed, now)
    if now < d.retry_at:
        return _progress_only(drain, d)
    if job.pods_alive > 0:  # the failed attempt's processes may still commit progress
        return _waiting_for_pods(drain, d)
    return _launch(spec, d, observed, now, attempt=d.attempt + 1, reason="Retried", restore=False)


def _attempt_failed(d: DrainStatus, job: JobObservation, observed: Observed, now: float) -> Action:
    """A failed attempt: the round's last one ends Failed (``_failed``); else a retry after the back-off."""
    if _last_attempt(d):
        f = _failed(
            d,
            f"drain {d.id} attempt {d.attempt} failed ({job.message or 'Job failed'}), "
            f"{MAX_ATTEMPTS} attempts in this round",
            job.message,
            observed,
            now,
        )
        return Action(Kind.WRITE_STATUS, f, f.reason, f.message, event=("Warning", "DrainFailed", f.message))
    delay = backoff_seconds(d.attempt)
    r = dataclasses.replace(
        d,
        retry_at=now + delay,
        reason="RetryScheduled",
        last_error=job.message,
        message=f"drain {d.id} attempt {d.attempt} failed ({job.message or 'Job failed'}); retrying in "
        f"{delay:.0f}s",
    )
    return Action(
        Kind.WRITE_STATUS, r, r.reason, r.message, event=("Warning", "DrainAttemptFailed", r.message)
    )


def _job_absent(
    spec: GroupSpec, drain: DrainStatus, d: DrainStatus, job: JobObservation, observed: Observed, now: float
) -> Action:
    """No Job: a retry due once the back-off and the pods are over; a Job deleted by someone is
    recreated (same attempt, same ranges)."""
    if d.retry_at is not None and now < d.retry_at:
        return _progress_only(drain, d)
    if job.pods_alive > 0:
        return _waiting_for_pods(drain, d)
    if d.retry_at is not None:
        return _launch(spec, d, observed, now, attempt=d.attempt + 1, reason="Retried", restore=False)
    # the Job vanished (deleted by someone): recreate the same attempt, same ranges
    return _launch(spec, d, observed, now, attempt=d.attempt, reason="Recreated", restore=False)


def _succeeded(
    drain: DrainStatus, d: DrainStatus, observed: Observed, now: float, waiting: Action | None
) -> Action:
    """Succeeded: verified against the progress groups (Verified), else the remainder is retried as
    a new attempt after the back-off (IncompleteProgress), or the round ends Failed."""
    if observed.progress is None:
        return _progress_only(drain, d)
    if d.remaining == 0 and waiting is None:
        v = _finish(d, Phase.VERIFIED, "AllRangesDone", "", now)
        v = dataclasses.replace(v, message=progress_message(v))
        return Action(Kind.WRITE_STATUS, v, v.reason, v.message, event=("Normal", "DrainFinished", v.message))
    if _last_attempt(d):
        f = _failed(
            d,
            f"drain {d.id}: attempt {d.attempt} succeeded with {d.remaining} records unfinished, "
            f"{MAX_ATTEMPTS} attempts in this round",
            "Job succeeded but progress shows unfinished sub-ranges",
            observed,
            now,
        )
        return Action(Kind.WRITE_STATUS, f, f.reason, f.message, event=("Warning", "DrainFailed", f.message))
    delay = backoff_seconds(d.attempt)
    r = dataclasses.replace(
        d,
        phase=Phase.RUNNING,
        reason="IncompleteProgress",
        retry_at=now + delay,
        last_error="Job succeeded but progress shows unfinished sub-ranges",
        message=f"drain {d.id}: attempt {d.attempt} succeeded with {d.remaining} records "
        f"unfinished; retrying in {delay:.0f}s",
    )
    return Action(Kind.WRITE_STATUS, r, r.reason, r.message, event=("Warning", "DrainIncomplete", r.message))


def _after_failure(
    spec: GroupSpec, drain: DrainStatus, d: DrainStatus, observed: Observed, now: float
) -> Action:
    """Failed: cancel ends it; the next round starts after its back-off (retryAt) or at once on a
    spec change, never while the last attempt's pods run."""
    if spec.drain.cancel:
        c = _cancelled_by_spec(d, f"drain {d.id} cancelled after failure", now)
        return Action(Kind.WRITE_STATUS, c, c.reason, c.message)
    spec_changed = d.failed_generation is not None and observed.generation > d.failed_generation
    if d.retry_at is None and not spec_changed:
        # Failed by an operator that only retried on a spec change: schedule its next round
        n = max(1, d.failed_rounds)
        at = now + failed_round_backoff_seconds(n)
        r = dataclasses.replace(
            d, failed_rounds=n, retry_at=at, message=f"{d.message}; next retry at {format_time(at)}"[:1000]
        )
        return Action(Kind.NONE, r, r.reason, r.message)
    if spec_changed or (d.retry_at is not None and now >= d.retry_at):
        job = observed.job
        if job is not None and (job.state is JobState.ACTIVE or job.pods_alive > 0):
            return _waiting_for_pods(drain, d)  # never two attempts at once
        return _launch(
            spec,
            dataclasses.replace(d, phase=Phase.RUNNING, failed_generation=None),
            observed,
            now,
            attempt=d.attempt + 1,
            reason="RetriedAfterSpecChange" if spec_changed else "RetriedAfterBackoff",
            restore=False,
            reset_attempts=True,
        )
    return _progress_only(drain, d)


def _cancelled(spec: GroupSpec, drain: DrainStatus, d: DrainStatus, observed: Observed, now: float) -> Action:
    """Cancelled with a remainder: resumed (a new attempt, same ranges) once spec.drain.cancel is
    cleared and the cancelled Job's pods are gone."""
    if spec.drain.cancel:
        return _progress_only(drain, d)
    job = observed.job
    if job is not None and (job.state is JobState.ACTIVE or job.pods_alive > 0):
        return Action(
            Kind.NONE, reason="WaitingForJobGone", message="waiting for the cancelled Job's pods to stop"
        )
    return _launch(
        spec,
        dataclasses.replace(d, phase=Phase.RUNNING, cancel_requested=False, finished_at=None),
        observed,
        now,
        attempt=d.attempt + 1,
        reason="Resumed",
        restore=False,
        reset_attempts=True,
    )


def _next_split(spec: GroupSpec, d: DrainStatus, observed: Observed, now: float, stop: bool) -> Action | None:
    """A busy drain's next split (issue 25 item 2; docs/drain.md "Busy drains"), or None (the
    Running drain's own transitions apply). The hand-off of a first split, on the drain's id and the
    new split offsets: plan (status first, ``_plan_next_split``) -> publish the requests
    (``_publish_next_split``) -> the owners ack at a batch boundary and move to the split (an empty
    group: the owner's rule applied for it) -> seal, the new ranges' sub-ranges appended with fresh
    indices (each its own progress group), ``round + 1`` (``_resolve_next_split``). A next split is
    planned only while the attempt's Job runs (no retry pending, not stopping); once published it is
    never withdrawn: it resolves, and its ranges belong to the drain whatever happens next (a
    succeeded Job then leaves work: the next attempt takes it). No quiesce fallback for a next split
    (it would stop the group mid-burst): it waits for its owners. Pure."""
    ext = d.extension
    if ext is None:
        return _plan_next_split(spec, d, observed, now, stop)
    if ext.published_at is None:
        return _publish_next_split(d, ext, observed, now, stop)
    return _resolve_next_split(spec, d, ext, observed, now)


def _may_take_next_split(d: DrainStatus, observed: Observed, stop: bool) -> bool:
    """A next split is planned only while the attempt's Job runs, busy drains are on and the driver
    was not handed back (its final part); which partitions it takes is ``_split_plan``'s."""
    job = observed.job
    return not (
        stop
        or d.retry_at is not None
        # spec.drain.busy turned off
        or job is None
        or job.state is not JobState.ACTIVE
        or not observed.busy
        or (observed.part is not None and observed.part.final)
    )  # handed back: the driver ends


def _plan_next_split(
    spec: GroupSpec, d: DrainStatus, observed: Observed, now: float, stop: bool
) -> Action | None:
    """Plan the next split (status first): the wanted partitions' backlog up to their end offsets,
    if the unfinished sub-ranges and the new ones fit one part."""
    if not _may_take_next_split(d, observed, stop):
        return None
    ranges, splits = _split_plan(observed)
    if not ranges:
        return None
    # the driver learns its sub-ranges from one signed commit: the unfinished ones must fit it
    pieces = sum(r.tasks or spec.drain.fallback_tasks for r in ranges)
    if pieces + sum(1 for x in d.sub_ranges if not x.done) > MAX_PART_SUB_RANGES:
        return None
    e = Extension(d.round + 1, tuple(ranges), planned_at=now)
    n = dataclasses.replace(
        d,
        extension=e,
        idle_since=None,
        reason="NextSplitPlanned",
        message=(
            f"drain {d.id}: next split {e.round} planned for partitions {e.partitions} up to {splits}; "
            "publishing the hand-off"
        ),
    )
    return Action(Kind.WRITE_STATUS, n, n.reason, n.message)


def _publish_next_split(d: DrainStatus, ext: Extension, observed: Observed, now: float, stop: bool) -> Action:
    """Publish the planned next split's requests (never over an entry of this drain), or drop it
    when stopping (nothing was published: nothing to hand off)."""
    if stop:  # nothing published: nothing to hand off
        n = dataclasses.replace(
            d,
            extension=None,
            reason="NextSplitDropped",
            message=f"drain {d.id}: next split {ext.round} dropped before its hand-off",
        )
        return Action(Kind.WRITE_STATUS, n, n.reason, n.message)
    mb, owner = observed.mailbox, observed.owner
    if mb is None:
        return Action(Kind.NONE, reason="WaitingForKafka", message="waiting for the hand-off mailbox")
    mine = _entries_of_drain(d.id, ext.ranges, mb, owner)
    entries: dict[int, mbx.Entry] = {
        r.partition: mbx.request(d.id, r.split, owner) for r in ext.ranges if r.partition not in mine
    }
    n = dataclasses.replace(
        d,
        extension=dataclasses.replace(ext, published_at=now),
        reason="NextSplitPublished",
        message=f"drain {d.id}: next split {ext.round} published; waiting for the owners of "
        f"partitions {ext.partitions} to acknowledge",
    )
    if entries:
        return Action(Kind.PUBLISH, n, n.reason, n.message, entries=entries)
    return Action(Kind.WRITE_STATUS, n, n.reason, n.message)


def _resolve_next_split(
    spec: GroupSpec, d: DrainStatus, ext: Extension, observed: Observed, now: float
) -> Action:
    """The published next split: wait for its owners (or act for the absent owners of an empty
    group); once every partition resolved, seal and append (``_append_next_split``)."""
    offs, mb, owner = observed.offsets, observed.mailbox, observed.owner
    if offs is None or mb is None or any(r.partition not in offs for r in ext.ranges):
        return Action(
            Kind.NONE, reason="WaitingForKafka", message="waiting for offsets and the hand-off mailbox"
        )
    mine = _entries_of_drain(d.id, ext.ranges, mb, owner)
    res = _resolutions(d.id, ext.ranges, offs, mine, owner)
    pending = sorted(p for p, x in res.items() if not x.resolved)
    if not pending:
        return _append_next_split(spec, d, ext, res, mine, owner, now)
    if observed.group_empty is True:  # nobody owns them: the owner's rule for the absent owner
        entries, alter = _act_for_absent_owners(d.id, ext.ranges, pending, offs, mine, owner)
        return Action(
            Kind.ALTER_OFFSETS,
            None,
            "MovingEmptyGroup",
            f"drain {d.id}: next split {ext.round}: the group has no members; acknowledging "
            f"partitions {pending} for it and moving them to split",
            offsets=alter,
            entries=entries,
        )
    return Action(
        Kind.NONE,
        reason="WaitingForAcks",
        message=f"drain {d.id}: next split {ext.round}: waiting for the owners of partitions {pending}",
    )


def _append_next_split(
    spec: GroupSpec,
    d: DrainStatus,
    ext: Extension,
    res: Mapping[int, mbx.Resolution],
    mine: Mapping[int, mbx.Entry],
    owner: str,
    now: float,
) -> Action:
    """Every partition of the next split resolved: seal its entries; its non-empty ranges join the
    drain's, their sub-ranges appended with fresh indices; ``round`` moves on."""
    seal = seal_entries(dataclasses.replace(d, ranges=ext.ranges), res, mine, owner)
    new = tuple(
        dataclasses.replace(r, start=res[r.partition].start) for r in ext.ranges if not res[r.partition].empty
    )
    subs = list(d.sub_ranges)
    for r in new:
        base = 1 + max((x.index for x in subs if x.partition == r.partition), default=-1)
        for k, x in enumerate(sub_ranges_of((r,), spec)):
            subs.append(SubProgress(x.partition, base + k, x.start, x.end, x.start))
    latest = {r.partition: r for r in d.ranges}
    latest.update({r.partition: r for r in new})
    listed, folded = fold_done(subs, d.folded)
    # the stall clock restarts: the driver may have waited (no work, no progress) for this split
    n = dataclasses.replace(
        d,
        extension=None,
        round=ext.round,
        sub_ranges=listed,
        folded=folded,
        progress_at=now,
        ranges=tuple(latest[p] for p in sorted(latest)),
        reason="NextSplitHandedOff",
    )
    n = dataclasses.replace(n, message=progress_message(n) + f" (next split {ext.round} handed off)")
    return Action(
        Kind.SEAL,
        n,
        n.reason,
        n.message,
        entries=seal,
        event=("Normal", "DrainNextSplitHandedOff", n.message),
    )


def _entries_of_drain(
    drain_id: int, ranges: Sequence[PartitionRange], mb: Mapping[int, mbx.Entry | None], owner: str
) -> dict[int, mbx.Entry]:
    """The mailbox entries of this drain (its id and split, this CR's uid or none) by partition."""
    return {
        r.partition: e
        for r in ranges
        if (e := mb.get(r.partition)) is not None and mbx.of_drain(e, drain_id, r.split, owner)
    }


def _resolutions(
    drain_id: int,
    ranges: Sequence[PartitionRange],
    offs: Mapping[int, Offsets],
    mine: Mapping[int, mbx.Entry],
    owner: str,
) -> dict[int, mbx.Resolution]:
    """The operator's rule (``mbx.resolve``) per planned partition: the group's committed offset
    (read before the mailbox) against this drain's entry."""
    return {
        r.partition: mbx.resolve(offs[r.partition].committed, mine.get(r.partition), drain_id, r.split, owner)
        for r in ranges
    }


def _split_plan(observed: Observed) -> tuple[list[PartitionRange], str]:
    """What a split takes, a drain's first (``_maybe_plan``) or a busy drain's next
    (``_plan_next_split``): the wanted partitions with records between the group's position and the
    end offset, each up to that end offset (its split offset) with the tasks the planner gave it,
    and the plan's message naming the splits (``p0@1200, p2@900``). No ranges while nothing is
    wanted, the offsets are unknown or no wanted partition has a backlog."""
    if not observed.wanted or observed.offsets is None:
        return [], ""
    ranges = []
    for p in sorted(set(observed.wanted)):
        o = observed.offsets.get(p)
        if o is None or o.end - o.position <= 0:
            continue
        ranges.append(PartitionRange(p, split=o.end, tasks=(observed.tasks or {}).get(p)))
    return ranges, ", ".join(f"p{r.partition}@{r.split}" for r in ranges)


def _deliver(drain: DrainStatus, d: DrainStatus, observed: Observed, now: float) -> Action | None:
    """A Running busy drain's next part for its driver (docs/drain.md "Busy drains: the executor"),
    or None. After a next split was handed off (``round`` above the delivered part's): the drain's
    unfinished sub-ranges at this round, which the driver runs with the session it holds. Once
    every sub-range is done and no next split is wanted (the capped group holds the partitions):
    the final part, which hands them back (the driver ends; no next split is planned after it) —
    after the hold (``hand_back_hold``: the drain keeps its slots meanwhile, ``_holding``), at once
    for a roll-over or with busy drains turned off. Pure; the executor reads the delivered part
    first (``Observed.part``); ``drain`` is the status as read, ``d`` with this cycle's progress."""
    seen, ext = observed.part, d.extension
    if seen is None or seen.final or (ext is not None and ext.published_at is not None):
        return None
    unfinished = tuple(s.sub_range() for s in d.sub_ranges if not s.done)
    if 0 < d.round and seen.round < d.round:  # (round 0 is the Job's own plan: nothing to deliver)
        part = NextPart(str(d.id), d.round, False, unfinished)
        return Action(
            Kind.DELIVER,
            None,
            "NextPartDelivered",
            f"drain {d.id}: next split {d.round} delivered to attempt {d.attempt} "
            f"({len(unfinished)} sub-ranges unfinished)",
            part=part,
        )
    if not unfinished and (not observed.wanted or not observed.busy) and ext is None:
        part = NextPart(str(d.id), d.round, True, ())
        rolled = observed.roll_over if observed.busy and not observed.wanted else None
        if rolled is None and observed.busy:
            since = hand_back_hold(d, observed.hand_back, now)
            if since is not None:
                return _holding(drain, d, since, observed.hand_back)
        if rolled is not None:  # the load outgrew its slots: it ends, a drain with more slots follows
            h = dataclasses.replace(
                d,
                reason=DrainEndReason.ROLLING_OVER.value,
                message=(
                    f"drain {d.id}: every sub-range done; rolling over: {rolled.message}; no further split; "
                    f"attempt {d.attempt} ends"
                ),
            )
            event = "DrainRollingOver"
        else:
            h = dataclasses.replace(
                d,
                reason=DrainEndReason.HANDING_BACK.value,
                message=(
                    f"drain {d.id}: every sub-range done and the group holds partitions {d.partitions} again: "
                    f"no further split; attempt {d.attempt} ends"
                ),
            )
            event = "DrainHandedBack"
        return Action(Kind.DELIVER, h, h.reason, h.message, part=part, event=("Normal", event, h.message))
    return None


def _holding(drain: DrainStatus, d: DrainStatus, since: float, rule: HandBack) -> Action:
    """An idle busy drain in its hold: its slots kept (the driver waits for a part), the hold's
    start recorded once (``status.drain.idleSince``, so an operator restart resumes the same hold;
    reason ``HoldingSlots``); a next split wanted meanwhile goes to this drain
    (``_plan_next_split`` clears it). No write while nothing moved."""
    if d.idle_since == since and d.reason == REASON_HOLDING:
        return _progress_only(drain, d) if d.sub_ranges != drain.sub_ranges else Action(Kind.NONE)
    why = "" if rule.warm else " (the rates are not measured yet)"
    w = dataclasses.replace(
        d,
        idle_since=since,
        reason=REASON_HOLDING,
        message=(
            f"drain {d.id}: every sub-range done and no next split wanted; holding its {d.slots} slots "
            f"from {format_time(since)} for {rule.hold_s:.0f}s (a new drain's start-up){why} before handing "
            f"partitions {d.partitions} back"
        ),
    )
    return Action(Kind.NONE, w, w.reason, w.message)


def lost_ranges(
    d: DrainStatus, observed: Mapping[tuple[int, int], Sequence[tuple[int, int]]] | None
) -> tuple[tuple[int, int, int], ...]:
    """(partition, start, end) losses in ``observed`` not yet in ``d.lost``, clipped to the drain's
    sub-ranges (pure; a foreign or garbled range is ignored)."""
    if not observed:
        return ()
    known = set(d.lost)
    bounds = {(s.partition, s.index): (s.start, s.end) for s in d.sub_ranges}
    out = []
    for (p, k), ranges in sorted(observed.items()):
        if (p, k) not in bounds:
            continue
        lo, hi = bounds[(p, k)]
        for a, b in ranges:
            a, b = max(int(a), lo), min(int(b), hi)
            if (
                a < b
                and (p, a, b) not in known
                and not any(q == p and x <= a and b <= y for q, x, y in known)
            ):
                out.append((p, a, b))
    return tuple(sorted(set(out)))


def data_loss_condition(d: DrainStatus | None) -> tuple[str, str, str] | None:
    """The ``DataLoss`` condition for handed-off ranges: True naming the partitions and exact offsets
    retention deleted before the drain read them (while that drain is the current one)."""
    if d is None:
        return None
    if not d.lost:
        return "False", "NoDataLoss", f"drain {d.id}: no record of its ranges was deleted before it read them"
    what = "; ".join(f"partition {p}: offsets [{a}, {b})" for p, a, b in d.lost)
    return (
        "True",
        "RetentionDeletedRecords",
        (f"drain {d.id}: {d.records_lost} records deleted by retention before the drain read them ({what})")[
            :1000
        ],
    )


def _stalled(d: DrainStatus, st: Stall, observed: Observed, now: float) -> Action:
    """A running attempt without progress (or without a running pod) for too long: delete its Job
    and count the attempt as failed — the retry (same ranges, back-off) launches once its pods are
    gone; in the last attempt the drain goes Failed. ``stalled`` keeps the DrainStalled condition
    True until progress moves again."""
    what = f"drain {d.id} attempt {d.attempt} stalled: {st.message}"
    if d.attempt - d.attempt_base + 1 >= MAX_ATTEMPTS:
        failed = _failed(d, f"{what}; Job deleted", what, observed, now)
        after = dataclasses.replace(failed, stalled=st.reason)
    else:
        delay = backoff_seconds(d.attempt)
        after = dataclasses.replace(
            d,
            retry_at=now + delay,
            reason="Stalled",
            stalled=st.reason,
            last_error=what,
            message=f"{what}; Job deleted, retrying in {delay:.0f}s",
        )
    return Action(
        Kind.DELETE_JOB,
        after,
        after.reason,
        after.message,
        attempt=d.attempt,
        event=("Warning", "DrainStalled", after.message[:1000]),
    )


def _waiting_for_pods(before: DrainStatus, after: DrainStatus) -> Action:
    """A retry starts only after the previous attempt's pods have ended (no two attempts at once)."""
    a = _progress_only(before, after)
    return dataclasses.replace(
        a,
        reason=a.reason or "WaitingForPodsGone",
        message=a.message or "waiting for the previous attempt's pods to end",
    )


def _progress_only(before: DrainStatus, after: DrainStatus) -> Action:
    """Nothing to do but record progress (only when it changed: no write, no echo)."""
    if after.sub_ranges != before.sub_ranges:
        after = dataclasses.replace(after, message=progress_message(after))
        return Action(Kind.NONE, after, "Progress", after.message)
    return Action(Kind.NONE)


def _maybe_plan(spec: GroupSpec, prev: DrainStatus | None, observed: Observed, now: float) -> Action:
    cfg = spec.drain
    if not cfg.enabled or cfg.cancel or spec.paused:
        return Action(Kind.NONE)
    ranges, splits = _split_plan(observed)
    if not ranges:
        return Action(Kind.NONE)
    d = DrainStatus(
        id=(prev.id + 1) if prev else 1,
        phase=Phase.PLANNED,
        reason="Planned",
        ranges=tuple(ranges),
        restore_replicas=max(0, observed.replicas),
        planned_at=now,
        history=prev.history if prev else (),
        busy=observed.busy,
        # the slots its Job will hold (job_slots at launch: at least one a sub-range, at most maxTasks)
        slots=max(0, observed.slots) if observed.busy else 0,
        slot_rate=max(0.0, observed.slot_rate) if observed.busy and observed.slots > 0 else 0.0,
    )
    d = dataclasses.replace(
        d,
        message=f"drain {d.id} planned for partitions {d.partitions} up to split {splits}; "
        "publishing the hand-off",
    )
    return Action(Kind.WRITE_STATUS, d, d.reason, d.message, event=("Normal", "DrainPlanned", d.message))


def _planned(spec: GroupSpec, d: DrainStatus, observed: Observed, now: float, stop: bool) -> Action:
    """Planned: ``_publish`` the requests -> resolve every planned partition (``_resolved`` once all
    are) -> for the pending ones: an empty group ``_move_empty_group``; the quiesce fallback
    ``_quiescing``; else ``_awaiting_acks`` (which starts the fallback after ``ack_timeout_s``)."""
    offs, mb = observed.offsets, observed.mailbox
    if offs is None or mb is None or any(r.partition not in offs for r in d.ranges):
        return Action(
            Kind.NONE, reason="WaitingForKafka", message="waiting for offsets and the hand-off mailbox"
        )
    owner = observed.owner
    mine = _entries_of_drain(d.id, d.ranges, mb, owner)
    if d.published_at is None:
        return _publish(spec, d, mine, owner, now, stop)
    res = _resolutions(d.id, d.ranges, offs, mine, owner)
    pending = sorted(p for p, x in res.items() if not x.resolved)
    if not pending:
        return _resolved(spec, d, res, mine, now, owner)
    if observed.group_empty is True:
        return _move_empty_group(d, pending, offs, mine, owner, now)
    if d.quiescing:
        return _quiescing(d, observed, pending, now)
    return _awaiting_acks(d, observed, pending, now)


def _publish(
    spec: GroupSpec, d: DrainStatus, mine: Mapping[int, mbx.Entry], owner: str, now: float, stop: bool
) -> Action:
    """Publish a request per planned partition without an entry of this drain (a re-publish never
    overwrites an ack); stopping before anything was published drops the drain."""
    if stop and not mine:
        c = _finish(
            d,
            Phase.CANCELLED,
            "CancelledBeforeHandOff",
            f"drain {d.id} dropped before hand-off "
            f"(spec.drain.{'cancel' if spec.drain.cancel else 'enabled'}); nothing was handed off",
            now,
        )
        c = dataclasses.replace(c, ranges=(), sub_ranges=())
        return Action(
            Kind.RESTORE, c, c.reason, c.message, replicas=d.restore_replicas if d.quiescing else None
        )
    # a start fixed by a pre-mailbox operator (group emptied, maybe already altered) is an ack
    entries: dict[int, mbx.Entry] = {
        r.partition: (
            mbx.request(d.id, r.split, owner)
            if r.start is None
            else mbx.Entry(d.id, r.split, r.start, owner=owner)
        )
        for r in d.ranges
        if r.partition not in mine
    }
    path = d.hand_off_path or (PATH_QUIESCE if d.quiescing else PATH_ACK)
    p = dataclasses.replace(
        d,
        published_at=now,
        hand_off_path=path,
        reason="Published",
        message=f"drain {d.id}: hand-off published; waiting for the owners of partitions {d.partitions} to "
        "acknowledge",
    )
    if entries:
        return Action(Kind.PUBLISH, p, p.reason, p.message, entries=entries)
    return Action(Kind.WRITE_STATUS, p, p.reason, p.message)


def _move_empty_group(
    d: DrainStatus,
    pending: Sequence[int],
    offs: Mapping[int, Offsets],
    mine: Mapping[int, mbx.Entry],
    owner: str,
    now: float,
) -> Action:
    """Nobody owns the pending partitions: apply the owner's rule for them (ack, then move)."""
    entries, alter = _act_for_absent_owners(d.id, d.ranges, pending, offs, mine, owner)
    path = PATH_QUIESCE if d.quiescing else PATH_EMPTY
    q = d if d.quiesced_at is not None or path != PATH_QUIESCE else dataclasses.replace(d, quiesced_at=now)
    q = dataclasses.replace(
        q,
        hand_off_path=path,
        reason="MovingEmptyGroup",
        message=f"drain {d.id}: the group has no members; acknowledging partitions {pending} for it and "
        "moving them to split",
    )
    return Action(Kind.ALTER_OFFSETS, q, q.reason, q.message, offsets=alter, entries=entries)


def _quiescing(d: DrainStatus, observed: Observed, pending: Sequence[int], now: float) -> Action:
    """The quiesce fallback: scale the group to 0 and wait for its members to leave; past
    ``quiesce_timeout_s`` with members still in, ``_give_up_quiesce``."""
    q = d if d.quiesced_at is not None else dataclasses.replace(d, quiesced_at=now)
    if (
        observed.group_empty is False
        and observed.members is not None
        and d.quiesced_at is not None
        and now - d.quiesced_at >= observed.quiesce_timeout_s
    ):
        return _give_up_quiesce(d, observed, pending, now)
    if observed.replicas > 0:
        q = dataclasses.replace(
            q,
            hand_off_path=PATH_QUIESCE,
            reason="Quiescing",
            message=f"drain {d.id}: no acknowledgement from the owners of {pending}; scaling the group to 0 "
            "(fallback)",
        )
        return Action(Kind.QUIESCE, q, q.reason, q.message, replicas=0)
    q = dataclasses.replace(
        q,
        hand_off_path=PATH_QUIESCE,
        reason="WaitingForGroupEmpty",
        message=f"drain {d.id}: waiting for the group's members to leave (session timeout for killed "
        "members)",
    )
    return Action(Kind.NONE, q if q != d else None, q.reason, q.message)


def _awaiting_acks(d: DrainStatus, observed: Observed, pending: Sequence[int], now: float) -> Action:
    """Published, owners not all acked: no ack within ``ack_timeout_s`` starts the quiesce fallback
    (``_start_quiesce``, at most once per drain); foreign members are named; else wait."""
    assert d.published_at is not None
    # the quiesce fallback runs at most once per drain: after a given-up quiesce (quiescedAt set,
    # path ConsumerAck) the hand-off waits for the owners, loudly while foreign members stay
    if (
        d.quiesced_at is None
        and observed.group_empty is False
        and now - d.published_at >= observed.ack_timeout_s
    ):
        return _start_quiesce(d, observed, pending, now)
    foreign = [m for m in observed.members or () if not m.ours]
    if d.quiesced_at is not None and foreign:
        w = dataclasses.replace(
            d,
            reason=REASON_FOREIGN,
            message=(
                f"drain {d.id}: partitions {pending} wait for their owners to acknowledge the hand-off; "
                "foreign members "
                f"in the group: {describe_members(foreign)} (a partition one of them owns resolves when it "
                "leaves the "
                f"group or commits past the split itself)"
            ),
        )
        return Action(Kind.NONE, w if w != d else None, w.reason, w.message)
    if d.quiesced_at is not None and observed.members is None and d.reason == REASON_FOREIGN:
        # membership unknown this cycle: keep saying so
        return Action(Kind.NONE, reason=d.reason, message=d.message)
    w = dataclasses.replace(
        d,
        reason="WaitingForAcks",
        message=f"drain {d.id}: waiting for the owners of partitions {pending} to acknowledge the hand-off",
    )
    return Action(Kind.NONE, w if w.reason != d.reason else None, w.reason, w.message)


def _start_quiesce(d: DrainStatus, observed: Observed, pending: Sequence[int], now: float) -> Action:
    """No acknowledgement in time (an older consumer image?): path Quiesce, the replicas to give
    back recorded, the group scaled to 0."""
    q = dataclasses.replace(
        d,
        hand_off_path=PATH_QUIESCE,
        quiesced_at=now,
        restore_replicas=observed.replicas if observed.replicas > 0 else d.restore_replicas,
        reason="Quiescing",
        message=f"drain {d.id}: no acknowledgement for partitions {pending} within "
        f"{observed.ack_timeout_s:.0f}s (older consumer image?); scaling the group to 0 (fallback)",
    )
    if observed.replicas > 0:
        return Action(
            Kind.QUIESCE,
            q,
            q.reason,
            q.message,
            replicas=0,
            event=("Warning", "DrainHandOffFallback", q.message),
        )
    return Action(Kind.WRITE_STATUS, q, q.reason, q.message)


def _act_for_absent_owners(
    drain_id: int,
    ranges: Sequence[PartitionRange],
    pending: Sequence[int],
    offs: Mapping[int, Offsets],
    mine: Mapping[int, mbx.Entry],
    owner: str,
) -> tuple[dict[int, mbx.Entry], dict[int, int]]:
    """The owner's rule applied for the absent owners of the ``pending`` partitions of a group with
    no members (a first split and a busy drain's next split alike): (the acks to write, then the
    offsets to move the group to). A partition that never committed, with retention already past
    its split, is moved to ``max(position, split)``. Pure."""
    entries: dict[int, mbx.Entry] = {}
    alter: dict[int, int] = {}
    for r in ranges:
        if r.partition not in pending:
            continue
        o = offs[r.partition]
        step = mbx.owner_step(mine.get(r.partition, mbx.request(drain_id, r.split, owner)), o.position)
        if step.ack is not None:
            entries[r.partition] = step.ack
        if step.move_to is not None:
            alter[r.partition] = step.move_to
        elif o.committed is None:  # never committed and retention already past split
            alter[r.partition] = max(o.position, r.split)
    return entries, alter


def _give_up_quiesce(d: DrainStatus, observed: Observed, pending: Sequence[int], now: float) -> Action:
    """The quiesce fallback's bound passed with the group still not empty: members that are not the
    CR's consumers (a ``kafka-console-consumer --group``, a debug client) keep it non-empty. Holding
    the consumers at 0 would not end that and would stop the live group for as long as they stay
    (its lag growing, retention possibly deleting records nobody read). So: name them, give the
    consumers their replicas back and continue the hand-off on the exact mailbox path (an owner acks
    and moves itself; a partition passing the split without an ack resolves as nothing to drain).
    ``quiescedAt`` stays set: this drain never quiesces again (``_planned``)."""
    who = describe_members(observed.members or ()) or "unknown members"
    waited = now - (d.quiesced_at if d.quiesced_at is not None else now)
    q = dataclasses.replace(
        d,
        hand_off_path=PATH_ACK,
        resumed_at=now,
        reason=REASON_FOREIGN,
        message=(
            f"drain {d.id}: the group stayed non-empty {waited:.0f}s after its consumers were scaled to 0; "
            f"members still in it: {who}. Consumers given back their {d.restore_replicas} replicas; the "
            "hand-off "
            f"of partitions {list(pending)} continues (owners acknowledge; nothing is handed off without "
            "its owner)"
        ),
    )
    return Action(
        Kind.RESTORE,
        q,
        q.reason,
        q.message,
        replicas=d.restore_replicas,
        event=("Warning", "DrainHandOffForeignMembers", q.message[:1000]),
    )


def _resolved(
    spec: GroupSpec,
    d: DrainStatus,
    res: Mapping[int, mbx.Resolution],
    mine: Mapping[int, mbx.Entry],
    now: float,
    owner: str = "",
) -> Action:
    """Every planned partition resolved: seal the entries, record the ranges (HandedOff), or
    Cancelled (nothing to drain / cancel requested meanwhile: the remainder stays recorded)."""
    seal = seal_entries(d, res, mine, owner)
    ranges = tuple(
        dataclasses.replace(r, start=res[r.partition].start) for r in d.ranges if not res[r.partition].empty
    )
    restore = d.restore_replicas if d.quiescing else None
    path = d.hand_off_path or PATH_ACK
    if not ranges:
        c = _finish(
            dataclasses.replace(d, hand_off_path=path, handed_off_at=now),
            Phase.CANCELLED,
            "NothingToDrain",
            f"drain {d.id}: the group reached the split points by itself",
            now,
        )
        c = dataclasses.replace(c, ranges=(), resumed_at=now if restore is not None else d.resumed_at)
        return Action(Kind.SEAL, c, c.reason, c.message, replicas=restore, entries=seal)
    subs = sub_ranges_of(ranges, spec)
    h = dataclasses.replace(
        d,
        phase=Phase.HANDED_OFF,
        handed_off_at=now,
        reason="HandedOff",
        ranges=ranges,
        hand_off_path=path,
        sub_ranges=tuple(SubProgress(s.partition, s.index, s.start, s.end, s.start) for s in subs),
    )
    h = dataclasses.replace(h, message=progress_message(h) + f" (hand-off path {path})")
    if spec.drain.cancel:
        c = _finish(
            dataclasses.replace(h, resumed_at=now if restore is not None else None),
            Phase.CANCELLED,
            "CancelledBySpec",
            f"drain {d.id} cancelled during the hand-off; {h.remaining} records stay recorded and resume "
            "when spec.drain.cancel is false",
            now,
        )
        return Action(
            Kind.SEAL,
            c,
            c.reason,
            c.message,
            replicas=restore,
            entries=seal,
            event=("Normal", "DrainCancelled", c.message),
        )
    return Action(
        Kind.SEAL, h, h.reason, h.message, entries=seal, event=("Normal", "DrainHandedOff", h.message)
    )


def seal_entries(
    d: DrainStatus, res: Mapping[int, mbx.Resolution], mine: Mapping[int, mbx.Entry], owner: str
) -> dict[int, mbx.Entry]:
    """The sealed entry of every resolved partition not sealed yet: an ack sealed as it is; a
    partition the group got past by itself (a request nobody acked, or no entry at all) sealed with
    the empty range ``[split, split)`` — left as a request, a later offset reset (by hand, or a CR
    re-created with this groupId) would make its owner ack and jump to the split with no drain."""
    out: dict[int, mbx.Entry] = {}
    for r in d.ranges:
        x, e = res.get(r.partition), mine.get(r.partition)
        if x is None or not x.resolved or (e is not None and e.done):
            continue
        out[r.partition] = (
            e.sealed() if e is not None and e.acked else mbx.sealed_entry(d.id, r.split, r.split, owner)
        )
    return out


def forward_moves(moves: Mapping[int, int], committed_now: Mapping[int, int | None]) -> dict[int, int]:
    """The part of an empty group's move (ALTER_OFFSETS) to perform, given the group's committed
    offsets read again right before the alter: only partitions still below their target. Between
    the observation the move was decided on and the alter, a consumer may have joined, found the
    hand-off in the mailbox, moved itself to the split, processed and committed records past it and
    left again (the group is empty again, so the broker accepts the alter): moving such a partition
    "to split" would take it backwards and the next owner would process those records twice."""
    return {p: off for p, off in moves.items() if (c := committed_now.get(p)) is None or c < off}


def sub_ranges_of(ranges: Sequence[PartitionRange], spec: GroupSpec) -> tuple[SubRange, ...]:
    """Each handed-off range cut into the tasks the planner gave its partition (``DrainSpec.fallback_tasks``
    when the plan predates per-partition tasks); pieces tile ``[start, split)`` exactly."""
    subs: list[SubRange] = []
    for r in ranges:
        subs.extend(
            split_ranges(
                {r.partition: (int(r.start or 0), r.split)},
                r.tasks or spec.drain.fallback_tasks,
                min_records_per_task=spec.batch.max_records,
            )
        )
    return tuple(subs)


def job_slots(d: DrainStatus, max_tasks: int) -> int:
    """The tasks a drain attempt's Job runs at once (its parallelism): every recorded sub-range at
    once, at most ``max_tasks`` (``spec.drain.maxTasks``); a busy drain at least the slots recorded
    for it (the planner's ask at its plan, or what an earlier attempt held), at most ``max_tasks``.
    One figure for both sides: the Job's manifest (``drain_manifests.drain_plan_for``) and the
    ``status.drain.slots`` a busy drain's launch records (``_launch``), which the planner budgets
    its next splits within (``step.busy_drain_of``): a Job's parallelism is fixed at launch. Pure."""
    n = parallelism_for((s.sub_range() for s in d.sub_ranges), max_tasks)
    if d.busy:
        n = max(n, min(max_tasks, d.slots))
    return n


def _launch(
    spec: GroupSpec,
    d: DrainStatus,
    observed: Observed,
    now: float,
    attempt: int,
    reason: str,
    restore: bool,
    reset_attempts: bool = False,
) -> Action:
    """Launch ``attempt``: Running, the Job created by the executor from the status written here; a
    busy drain records the slots its Job holds (:func:`job_slots`, the Job's own parallelism)."""
    attempt = max(1, attempt)
    r = dataclasses.replace(
        d,
        phase=Phase.RUNNING,
        attempt=attempt,
        retry_at=None,
        reason=reason,
        progress_at=now,
        started_at=d.started_at if d.started_at is not None else now,
        resumed_at=d.resumed_at if d.resumed_at is not None else (now if restore else None),
        slots=job_slots(d, spec.drain.max_tasks) if d.busy else d.slots,
        idle_since=None,  # a new attempt's driver: a hold starts again when it is idle
    )
    if reset_attempts:
        # attempts are counted from here again (spec changed / resumed after cancel); job names stay unique
        r = dataclasses.replace(r, failed_generation=None, attempt_base=attempt)
    r = dataclasses.replace(
        r, message=f"drain {d.id} attempt {attempt}: " + progress_message(r).split(": ", 1)[1]
    )
    return Action(
        Kind.LAUNCH,
        r,
        r.reason,
        r.message,
        replicas=d.restore_replicas if restore else None,
        attempt=attempt,
        event=("Normal", "DrainStarted", r.message),
    )


def condition(d: DrainStatus | None) -> tuple[str, str, str]:
    """The ``Draining`` condition (status, reason, message) for status.conditions."""
    if d is None:
        return "False", "NoDrain", "no drain has run"
    active = d.phase in (Phase.PLANNED, Phase.HANDED_OFF, Phase.RUNNING, Phase.SUCCEEDED)
    if d.phase is Phase.PLANNED and d.reason == REASON_FOREIGN:
        return "True", REASON_FOREIGN, d.message[:1000]
    reason = {
        Phase.PLANNED: "HandOffInProgress",
        Phase.HANDED_OFF: "HandedOff",
        Phase.RUNNING: "DrainRunning",
        Phase.SUCCEEDED: "Verifying",
        Phase.VERIFIED: "DrainVerified",
        Phase.FAILED: "DrainFailed",
        Phase.CANCELLED: "DrainCancelled",
    }[d.phase]
    return ("True" if active else "False"), reason, (d.message or progress_message(d))[:1000]
