"""H3: a drain attempt can never hang unnoticed. Pure tables (``now`` injected):

- ``attempt_deadline_s``: the Job's ``activeDeadlineSeconds`` from the plan's size and the measured
  throughput (past drains' records/s), never below the floor;
- ``stall``: the no-progress detector — an attempt whose progress has not moved for N seconds, or
  whose Job has had no running pod for N seconds, is stalled (reason named);
- the hand-off machine: a stalled attempt's Job is deleted and the attempt counted as failed (retry
  with back-off), a ``DrainStalled`` condition names why, and progress clears it.
"""
from __future__ import annotations

import dataclasses

import pytest

from lagpilot.decide import drain_watch as w
from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import JobObservation, JobState, Kind, Phase, next_action
from tests.unit.test_handoff import NOW, RUNNING, assert_round_trip, obs, spec

LIMITS = w.StallLimits(no_progress_s=600, no_pod_s=300)


# (id, records left, tasks, measured records/s, floor, expected seconds)
DEADLINES = [
    ("nothing-measured-small-plan-gets-the-floor", 1_000, 4, None, 1800, 1800),
    ("nothing-measured-assumes-a-slow-rate-per-task", 1_000_000, 4, None, 1800,
     w.STARTUP_ALLOWANCE_S + int(w.DEADLINE_FACTOR * 1_000_000 / (w.ASSUMED_TASK_RATE * 4))),
    ("measured-rate-sizes-a-big-plan", 3_600_000, 12, 1000.0, 1800,
     w.STARTUP_ALLOWANCE_S + int(w.DEADLINE_FACTOR * 3600)),
    ("measured-fast-rate-small-plan-floor", 50_000, 12, 20_000.0, 1800, 1800),
    ("nothing-left", 0, 4, 1000.0, 600, 600),
    ("zero-rate-is-unknown", 1_000_000, 2, 0.0, 60,
     w.STARTUP_ALLOWANCE_S + int(w.DEADLINE_FACTOR * 1_000_000 / (w.ASSUMED_TASK_RATE * 2))),
]


@pytest.mark.parametrize("records,tasks,rate,floor,expected", [c[1:] for c in DEADLINES], ids=[c[0] for c in DEADLINES])
def test_attempt_deadline(records, tasks, rate, floor, expected):
    got = w.attempt_deadline_s(records, tasks, rate, floor_s=floor)
    assert isinstance(got, int) and got == expected
    assert got >= floor


# (id, history entries, expected records/s)
RATES = [
    ("none", (), None),
    ("one", ({"recordsDone": 6000, "seconds": 30.0},), 200.0),
    ("median-of-three", ({"recordsDone": 1000, "seconds": 10.0}, {"recordsDone": 9000, "seconds": 30.0},
                         {"recordsDone": 100, "seconds": 100.0}), 100.0),
    ("skips-unfinished-and-empty", ({"recordsDone": 0, "seconds": 10.0}, {"recordsDone": 10, "seconds": None},
                                    {"recordsDone": 500, "seconds": 5.0}), 100.0),
]


@pytest.mark.parametrize("history,expected", [c[1:] for c in RATES], ids=[c[0] for c in RATES])
def test_measured_rate(history, expected):
    assert w.measured_rate(history) == expected


# (id, now - progress_at, running pods (None: unknown), expected reason or None)
STALLS = [
    ("fresh-attempt", 0, 0, None),
    ("no-pod-yet-within-limit", 299, 0, None),
    ("no-pod-past-limit", 300, 0, "NoRunningPod"),
    ("pod-running-progress-recent", 599, 1, None),
    ("pod-running-no-progress", 600, 1, "NoProgress"),
    ("no-pod-and-no-progress-names-the-pod", 900, 0, "NoRunningPod"),
    ("pods-unknown-only-progress-counts", 400, None, None),
    ("pods-unknown-no-progress", 600, None, "NoProgress"),
]


@pytest.mark.parametrize("idle,running,reason", [c[1:] for c in STALLS], ids=[c[0] for c in STALLS])
def test_stall(idle, running, reason):
    got = w.stall(NOW, NOW - idle, running, LIMITS)
    if reason is None:
        assert got is None
    else:
        assert got is not None and got.reason == reason and got.seconds == idle
        assert f"{idle}" in got.message


def test_no_progress_clock_is_required():
    assert w.stall(NOW, None, 0, LIMITS) is None


def _running(**kw):
    return dataclasses.replace(RUNNING, progress_at=NOW - 700, **kw)


def test_stalled_attempt_is_deleted_counted_as_failed_and_retried():
    a = next_action(spec(), _running(), obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), NOW)
    assert a.kind is Kind.DELETE_JOB and a.attempt == 1
    s = a.status
    assert s is not None and s.phase is Phase.RUNNING and s.retry_at == NOW + h.backoff_seconds(1)
    assert s.stalled == "NoProgress" and "no progress" in s.last_error
    assert a.event is not None and a.event[:2] == ("Warning", "DrainStalled")
    assert_round_trip(s)
    cond = w.stalled_condition(s)
    assert cond[0] == "True" and cond[1] == "NoProgress" and "attempt 1" in cond[2]
    # while the Job is being deleted nothing is detected twice
    again = next_action(spec(), s, obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), NOW + 5)
    assert again.kind is Kind.NONE
    # once it is gone and the back-off passed: the next attempt
    nxt = next_action(spec(), s, obs(job=JobObservation(JobState.ABSENT, 0), progress={}), s.retry_at)
    assert nxt.kind is Kind.LAUNCH and nxt.attempt == 2 and nxt.status.progress_at == s.retry_at
    # the condition stays until that attempt moves
    assert w.stalled_condition(nxt.status)[0] == "True"
    moved = next_action(spec(), nxt.status, obs(job=JobObservation(JobState.ACTIVE, 1, running=1),
                                                 progress={(0, 0): (300, 100)}), s.retry_at + 30)
    assert moved.status is not None and moved.status.progress_at == s.retry_at + 30 and moved.status.stalled == ""
    assert w.stalled_condition(moved.status)[0] == "False"


def test_job_without_a_running_pod_is_stalled():
    a = next_action(spec(), _running(), obs(job=JobObservation(JobState.ACTIVE, 0, running=0), progress={}), NOW)
    assert a.kind is Kind.DELETE_JOB and a.status.stalled == "NoRunningPod"


def test_stall_in_the_last_attempt_ends_failed():
    a = next_action(spec(), _running(attempt=h.MAX_ATTEMPTS), obs(job=JobObservation(JobState.ACTIVE, 1, running=1),
                                                                  progress={}), NOW)
    assert a.kind is Kind.DELETE_JOB and a.status.phase is Phase.FAILED and a.status.stalled == "NoProgress"


def test_progress_within_the_limit_is_no_stall():
    d = dataclasses.replace(RUNNING, progress_at=NOW - 599)
    a = next_action(spec(), d, obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), NOW)
    assert a.kind is Kind.NONE


def test_a_running_status_of_an_older_operator_starts_the_clock():
    d = dataclasses.replace(RUNNING, progress_at=None)
    a = next_action(spec(), d, obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), NOW)
    assert a.kind is Kind.NONE and a.status is not None and a.status.progress_at == NOW


def test_launch_starts_the_progress_clock():
    a = next_action(spec(), dataclasses.replace(RUNNING, phase=Phase.HANDED_OFF, attempt=0), obs(), NOW)
    assert a.kind is Kind.LAUNCH and a.status.progress_at == NOW


def test_condition_without_a_drain():
    assert w.stalled_condition(None) == ("False", "NoDrain", "no drain has run")


def test_the_job_carries_its_deadline():
    from lagpilot.act.drain_manifests import DrainSettings, build_drain_job, drain_plan_for

    sp = spec()
    d = dataclasses.replace(RUNNING, history=({"id": 0, "recordsDone": 60_000, "seconds": 60.0},))
    job = build_drain_job("orders", "ns", "uid", sp, d, 1, DrainSettings(deadline_floor_s=900))
    want = w.attempt_deadline_s(d.remaining, drain_plan_for(sp, d, "uid").parallelism, 1000.0, floor_s=900)
    assert job["spec"]["activeDeadlineSeconds"] == want >= 900


def test_a_slow_start_up_is_not_read_as_a_stall():
    """The no-progress window counts from the attempt's start, not its launch: an attempt launched
    300 s ago whose tasks have not started yet (no sign of life: a cold Spark start-up under load)
    has made no progress for a reason the no-progress limit (240 s here) does not describe — it is
    still starting, within the start-up's own bound — and must not be stalled (seen in
    tests/real/test_drain_no_progress.py: attempt 2 hung on nothing, yet was stalled at 240 s of a
    cold start at load 40-50)."""
    limits = w.StallLimits(no_progress_s=240, no_pod_s=300)
    assert w.stall(NOW, NOW - 300, 1, limits) is None
    starting = dataclasses.replace(RUNNING, progress_at=NOW - 300)
    a = next_action(spec(), starting, dataclasses.replace(
        obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), stall_limits=limits), NOW)
    assert a.kind is Kind.NONE and (a.status is None or not a.status.stalled), a
