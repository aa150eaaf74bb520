"""Deadlines and the no-progress detector of a drain attempt (pure; ``now`` is passed in).

A drain attempt must never hang unnoticed (docs/drain.md "Deadlines and stalls"):

- ``attempt_deadline_s``: the Job's ``activeDeadlineSeconds`` — a start-up allowance plus
  ``DEADLINE_FACTOR`` times the time the attempt's records take at the measured throughput (the
  median records/s of this group's past drains, ``measured_rate``; nothing measured yet: a slow
  ``ASSUMED_TASK_RATE`` per task), never below a floor. The Job controller fails the Job past it,
  whatever the pod does; the operator then retries as for any failed attempt. Generous by design:
  it is the backstop, the detector below is what catches a hang early.
- ``stall``: an attempt whose tasks have not started within ``startup_s`` of its launch (no sign of
  life: executor pods, the Spark session or the warm runtime not coming up), whose progress (the
  progress groups, read every cycle) has not moved for ``no_progress_s`` since its first sign of life
  or its last move, or whose Job has had no running pod for ``no_pod_s`` since the attempt launched
  or last moved (a missing ServiceAccount, an unschedulable pod, a pod stuck pulling its image) is
  stalled; the hand-off machine deletes its Job and counts the attempt as failed.
- ``first_sighting``: when the operator first saw the attempt's sign of life (each task commits its
  progress group with the attempt's number at its start, ``lagpilot_runtime.drain.task``).
- ``stalled_condition``: the ``DrainStalled`` condition from the recorded status.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lagpilot.model.status import Stall as StallReason

if TYPE_CHECKING:
    from .handoff import DrainStatus

# activeDeadlineSeconds never below this (operator env LAGPILOT_DRAIN_DEADLINE_FLOOR_SECONDS)
DEADLINE_FLOOR_S = 3600
DEADLINE_FACTOR = 3.0  # x the expected duration at the measured rate
STARTUP_ALLOWANCE_S = 300  # JVM, session, executor pods, image pull on a busy node
ASSUMED_TASK_RATE = 10.0  # records/s per task when no drain of this group was measured yet
NO_PROGRESS_S = 600.0  # LAGPILOT_DRAIN_STALL_SECONDS
NO_POD_S = 300.0  # LAGPILOT_DRAIN_NO_POD_SECONDS
STARTUP_S = 600.0  # LAGPILOT_DRAIN_STARTUP_SECONDS: launch -> the first task's sign of life

NO_PROGRESS = StallReason.NO_PROGRESS.value
NO_RUNNING_POD = StallReason.NO_RUNNING_POD.value


def measured_rate(history: Iterable[Mapping[str, Any]]) -> float | None:
    """Records/s of this group's past drains (median over ``status.drain.history`` entries with
    records and a duration; each entry's duration runs from its first launch to its end, retries
    and start-up included, so the rate is on the low side: the deadline errs long). None: none."""
    rates = []
    for h in history:
        done, secs = h.get("recordsDone"), h.get("seconds")
        if isinstance(done, (int, float)) and isinstance(secs, (int, float)) and done > 0 and secs > 0:
            rates.append(float(done) / float(secs))
    return statistics.median(rates) if rates else None


def attempt_deadline_s(
    records: int,
    tasks: int,
    rate: float | None,
    floor_s: int = DEADLINE_FLOOR_S,
    factor: float = DEADLINE_FACTOR,
) -> int:
    """``activeDeadlineSeconds`` of an attempt that has ``records`` left on ``tasks`` Spark tasks."""
    r = rate if rate is not None and rate > 0 else ASSUMED_TASK_RATE * max(1, tasks)
    expected = STARTUP_ALLOWANCE_S + math.ceil(factor * max(0, records) / r) if records > 0 else 0
    return int(max(floor_s, expected))


@dataclass(frozen=True)
class StallLimits:
    """The detector's limits, and what the executor saw of the attempt's start this cycle."""

    no_progress_s: float = NO_PROGRESS_S
    no_pod_s: float = NO_POD_S
    startup_s: float = STARTUP_S
    # not a limit: when the operator first saw the current attempt's sign of life (``first_sighting``);
    # None: not seen yet (the attempt is still starting) or not observed
    started_at: float | None = None


@dataclass(frozen=True)
class Sighting:
    """The first sighting of an attempt's sign of life, by the operator's clock."""

    drain: int
    attempt: int
    at: float


def first_sighting(
    prev: Sighting | None, drain: int, attempt: int, alive: bool, now: float
) -> Sighting | None:
    """The attempt's first sighting: ``prev`` when it is of this drain and attempt, else ``now`` when
    a sign of life of it is seen now (``alive``: a progress group carries the attempt's number),
    else None. The operator's own clock, never the pod's: no clock skew enters the detector (as
    client-go's leader election takes a lease's ``observedTime``). Kept by the executor, not in
    status: a restarted operator sees it first at its next read, so it counts later, never earlier."""
    if prev is not None and (prev.drain, prev.attempt) == (drain, attempt):
        return prev
    return Sighting(drain, attempt, now) if alive else None


@dataclass(frozen=True)
class Stall:
    reason: str  # NoProgress | NoRunningPod
    seconds: float  # since the attempt launched (not started) or started or last moved
    message: str


def stall(
    now: float, progress_at: float | None, running_pods: int | None, limits: StallLimits
) -> Stall | None:
    """Is the attempt stalled? ``progress_at``: when it launched or its progress last moved;
    ``running_pods``: its Job's pods in phase Running (None: not observed); ``limits.started_at``:
    its first sign of life as the operator saw it (None: still starting).

    Before its first sign of life the attempt is starting: stalled past ``startup_s``; after it, the
    no-progress window counts from the later of the sign of life and the last move, so a slow
    start-up is neither read as a stall nor eats the window."""
    if progress_at is None:
        return None
    idle = now - progress_at
    if running_pods == 0 and idle >= limits.no_pod_s:
        return Stall(
            NO_RUNNING_POD,
            idle,
            f"the Job has had no running pod for {idle:.0f} s "
            f"(limit {limits.no_pod_s:g} s: ServiceAccount missing, pod unschedulable or not starting?)",
        )
    if limits.started_at is None:
        if idle >= limits.startup_s:
            return Stall(
                NO_PROGRESS,
                idle,
                f"no progress for {idle:.0f} s: no drain task started (start-up "
                f"limit {limits.startup_s:g} s: executors, Spark session or warm "
                f"runtime not coming up, or the topic not readable?)",
            )
        return None
    quiet = now - max(progress_at, limits.started_at)
    if quiet >= limits.no_progress_s:
        return Stall(
            NO_PROGRESS,
            quiet,
            f"no progress for {quiet:.0f} s since the attempt's tasks started "
            f"or last moved (limit {limits.no_progress_s:g} s: a hung handler, "
            f"sink or warm runtime?)",
        )
    return None


def stalled_condition(d: DrainStatus | None) -> tuple[str, str, str]:
    """``DrainStalled``: True from a stall's detection until the drain's progress moves again (or it
    ends); the reason names why (NoProgress | NoRunningPod), the message what was done."""
    if d is None:
        return "False", "NoDrain", "no drain has run"
    if d.stalled:
        return "True", d.stalled, (d.last_error or f"drain {d.id} stalled")[:1000]
    return "False", "Progressing", f"drain {d.id}: no stall"
