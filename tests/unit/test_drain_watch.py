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
    (
        "nothing-measured-assumes-a-slow-rate-per-task",
        1_000_000,
        4,
        None,
        1800,
        w.STARTUP_ALLOWANCE_S + int(w.DEADLINE_FACTOR * 1_000_000 / (w.ASSUMED_TASK_RATE * 4)),
    ),
    (
        "measured-rate-sizes-a-big-plan",
        3_600_000,
        12,
        1000.0,
        1800,
        w.STARTUP_ALLOWANCE_S + int(w.DEADLINE_FACTOR * 3600),
    ),
    ("measured-fast-rate-small-plan-floor", 50_000, 12, 20_000.0, 1800, 1800),
    ("nothing-left", 0, 4, 1000.0, 600, 600),
    (
        "zero-rate-is-unknown",
        1_000_000,
        2,
        0.0,
        60,
        w.STARTUP_ALLOWANCE_S + int(w.DEADLINE_FACTOR * 1_000_000 / (w.ASSUMED_TASK_RATE * 2)),
    ),
]


@pytest.mark.parametrize(
    "records,tasks,rate,floor,expected", [c[1:] for c in DEADLINES], ids=[c[0] for c in DEADLINES]
)
def test_attempt_deadline(records, tasks, rate, floor, expected):
    got = w.attempt_deadline_s(records, tasks, rate, floor_s=floor)
    assert isinstance(got, int) and got == expected
    assert got >= floor


# (id, history entries, expected records/s)
RATES = [
    ("none", (), None),
    ("one", ({"recordsDone": 6000, "seconds": 30.0},), 200.0),
    (
        "median-of-three",
        (
            {"recordsDone": 1000, "seconds": 10.0},
            {"recordsDone": 9000, "seconds": 30.0},
            {"recordsDone": 100, "seconds": 100.0},
        ),
        100.0,
    ),
    (
        "skips-unfinished-and-empty",
        (
            {"recordsDone": 0, "seconds": 10.0},
            {"recordsDone": 10, "seconds": None},
            {"recordsDone": 500, "seconds": 5.0},
        ),
        100.0,
    ),
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
    a = next_action(
        spec(), _running(), obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), NOW
    )
    assert a.kind is Kind.DELETE_JOB and a.attempt == 1
    s = a.status
    assert s is not None and s.phase is Phase.RUNNING and s.retry_at == NOW + h.backoff_seconds(1)
    assert s.stalled == "NoProgress" and "no progress" in s.last_error
    assert a.event is not None and a.event[:2] == ("Warning", "DrainStalled")
    assert_round_trip(s)
    cond = w.stalled_condition(s)
    assert cond[0] == "True" and cond[1] == "NoProgress" and "attempt 1" in cond[2]
    # while the Job is being deleted nothing is detected twice
    again = next_action(
        spec(), s, obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), NOW + 5
    )
    assert again.kind is Kind.NONE
    # once it is gone and the back-off passed: the next attempt
    nxt = next_action(spec(), s, obs(job=JobObservation(JobState.ABSENT, 0), progress={}), s.retry_at)
    assert nxt.kind is Kind.LAUNCH and nxt.attempt == 2 and nxt.status.progress_at == s.retry_at
    # the condition stays until that attempt moves
    assert w.stalled_condition(nxt.status)[0] == "True"
    moved = next_action(
        spec(),
        nxt.status,
        obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={(0, 0): (300, 100)}),
        s.retry_at + 30,
    )
    assert (
        moved.status is not None
        and moved.status.progress_at == s.retry_at + 30
        and moved.status.stalled == ""
    )
    assert w.stalled_condition(moved.status)[0] == "False"


def test_job_without_a_running_pod_is_stalled():
    a = next_action(
        spec(), _running(), obs(job=JobObservation(JobState.ACTIVE, 0, running=0), progress={}), NOW
    )
    assert a.kind is Kind.DELETE_JOB and a.status.stalled == "NoRunningPod"


def test_stall_in_the_last_attempt_ends_failed():
    a = next_action(
        spec(),
        _running(attempt=h.MAX_ATTEMPTS),
        obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}),
        NOW,
    )
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
    a = next_action(
        spec(),
        starting,
        dataclasses.replace(
            obs(job=JobObservation(JobState.ACTIVE, 1, running=1), progress={}), stall_limits=limits
        ),
        NOW,
    )
    assert a.kind is Kind.NONE and (a.status is None or not a.status.stalled), a


# With the sign of life: limits no-progress 60 s, start-up 600 s, no pod 300 s. (id, seconds since
# launch or the last move, seconds since the first sign of life (None: not seen), running pods,
# expected (reason, seconds) or None)
SIGNED = w.StallLimits(no_progress_s=60, no_pod_s=300, startup_s=600)
STARTS = [
    ("starting-within-its-bound", 599, None, 1, None),
    ("starting-past-its-bound", 600, None, 1, ("NoProgress", 600)),
    ("starting-without-a-pod-names-the-pod", 300, None, 0, ("NoRunningPod", 300)),
    ("started-late-the-window-counts-from-the-start", 500, 59, 1, None),
    ("started-late-and-hung", 500, 60, 1, ("NoProgress", 60)),
    ("moved-after-the-start-counts-from-the-move", 30, 400, 1, None),
    ("moved-after-the-start-then-hung", 61, 400, 1, ("NoProgress", 61)),
    ("pods-unknown-started-and-hung", 900, 70, None, ("NoProgress", 70)),
]


@pytest.mark.parametrize(
    "idle,since_start,running,expected", [c[1:] for c in STARTS], ids=[c[0] for c in STARTS]
)
def test_the_window_counts_from_the_first_sign_of_life(idle, since_start, running, expected):
    limits = dataclasses.replace(SIGNED, started_at=None if since_start is None else NOW - since_start)
    got = w.stall(NOW, NOW - idle, running, limits)
    if expected is None:
        assert got is None
        return
    assert got is not None and (got.reason, got.seconds) == expected
    assert "no progress" in got.message or got.reason == "NoRunningPod"
    if got.reason == "NoProgress":
        assert ("no drain task started" in got.message) is (since_start is None), got.message


S1 = w.Sighting(drain=3, attempt=1, at=NOW - 100)
# (id, previous sighting, drain, attempt, alive now, expected)
SIGHTINGS = [
    ("none-yet", None, 3, 1, False, None),
    ("first-seen-now", None, 3, 1, True, w.Sighting(3, 1, NOW)),
    ("kept-while-seen", S1, 3, 1, True, S1),
    ("kept-when-a-read-fails-or-it-is-overwritten", S1, 3, 1, False, S1),
    ("a-new-attempt-is-not-started-by-the-old-ones", S1, 3, 2, False, None),
    ("a-new-attempt-seen", S1, 3, 2, True, w.Sighting(3, 2, NOW)),
    ("a-new-drain", S1, 4, 1, True, w.Sighting(4, 1, NOW)),
]


@pytest.mark.parametrize(
    "prev,drain,attempt,alive,expected", [c[1:] for c in SIGHTINGS], ids=[c[0] for c in SIGHTINGS]
)
def test_first_sighting(prev, drain, attempt, alive, expected):
    assert w.first_sighting(prev, drain, attempt, alive, NOW) == expected


def test_the_executor_starts_the_window_at_its_first_sighting_of_the_attempt():
    """Through the executor's loop: attempt 2 launched at 1000 while attempt 1's sign of life is still
    in the progress group; it starts 500 s later (a cold start); no-progress limit 60 s."""
    from lagpilot.decide.handoff import DrainStatus
    from tests.unit.test_drain_executor import FakeExecutor, ctx, world0

    log: list = []
    world = world0()
    ex = FakeExecutor(log, world)
    ex.stall_limits = w.StallLimits(no_progress_s=60, no_pod_s=300, startup_s=900)
    running = dataclasses.replace(RUNNING, attempt=2, progress_at=1000.0, started_at=1000.0)
    world["jobs"][h.job_name("orders", running.id, 2)] = JobObservation(JobState.ACTIVE, 1, running=1)
    world["progress"] = {(0, 0): (200, 0), (0, 1): (600, 0)}
    world["attempts"] = {(0, 0): 1}  # attempt 1's sign of life: not this attempt's

    def step(now: float) -> DrainStatus:
        world["now"] = now
        log.clear()
        r = ex.reconcile(ctx(log, world, running.to_dict() if world["status"] is None else world["status"]))
        return DrainStatus.from_dict(r.status) if r.status else running

    assert not step(1100.0).stalled and "delete_job" not in [e[0] for e in log]  # still starting
    world["attempts"] = {(0, 0): 1, (0, 1): 2}  # a task of attempt 2 started
    assert not step(1500.0).stalled
    assert ex.sightings["u"] == w.Sighting(running.id, 2, 1500.0)
    assert not step(1559.0).stalled and "delete_job" not in [e[0] for e in log]
    s = step(1560.0)
    assert s.stalled == "NoProgress" and ("delete_job", h.job_name("orders", running.id, 2)) in log, log
    assert "no progress for 60 s since the attempt's tasks started" in s.last_error
