"""M7: a drain that used up its attempts is retried on its own, like a Strimzi KafkaConnector with
``autoRestart`` (back-off n*n + n minutes after the n-th failed round, capped at 60 minutes, for
ever) — never left ``Failed`` until someone edits the spec. Meanwhile its ranges stay recorded
(it holds them: no new drain is planned, the finalizer hands them back), the next retry time is in
``status.drain.retryAt`` and in the Draining condition's message. Pure tables, ``now`` injected."""

from __future__ import annotations

import dataclasses

import pytest

from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import JobObservation, JobState, Kind, Phase, next_action
from lagpilot.decide.status import format_time
from tests.unit.test_handoff import NOW, RUNNING, assert_round_trip, obs, spec

# (n-th failed round, seconds until the next round)
BACKOFF = [(1, 120), (2, 360), (3, 720), (4, 1200), (5, 1800), (6, 2520), (7, 3360), (8, 3600), (30, 3600)]


@pytest.mark.parametrize("rounds,seconds", BACKOFF)
def test_failed_round_backoff(rounds, seconds):
    assert h.failed_round_backoff_seconds(rounds) == seconds


def _exhaust(d, now):
    """The last attempt of a round fails: the drain goes Failed with its next round scheduled."""
    a = next_action(
        spec(),
        dataclasses.replace(d, attempt=d.attempt_base + h.MAX_ATTEMPTS - 1),
        obs(job=JobObservation(JobState.FAILED, 0, "boom")),
        now,
    )
    assert a.kind is Kind.WRITE_STATUS and a.status.phase is Phase.FAILED
    assert_round_trip(a.status)
    return a.status


def test_exhausted_attempts_schedule_the_next_round_visibly():
    f = _exhaust(RUNNING, NOW)
    assert f.failed_rounds == 1 and f.retry_at == NOW + 120
    assert format_time(f.retry_at) in f.message
    status, reason, message = h.condition(f)
    assert (status, reason) == ("False", "DrainFailed") and format_time(f.retry_at) in message
    assert not h.is_idle(f)  # it still holds its ranges: nothing else is planned meanwhile
    assert f.sub_ranges == RUNNING.sub_ranges


def test_failed_waits_for_its_retry_time():
    f = _exhaust(RUNNING, NOW)
    assert next_action(spec(), f, obs(job=JobObservation(JobState.FAILED)), NOW + 119).kind is Kind.NONE


def test_failed_retries_a_new_round_when_due_and_the_pods_are_gone():
    f = _exhaust(RUNNING, NOW)
    waiting = next_action(spec(), f, obs(job=JobObservation(JobState.FAILED, 1)), f.retry_at)
    assert waiting.kind is Kind.NONE  # the failed attempt's pod still runs: never two at once
    a = next_action(spec(), f, obs(job=JobObservation(JobState.FAILED, 0)), f.retry_at)
    assert a.kind is Kind.LAUNCH and a.attempt == f.attempt + 1 and a.status.reason == "RetriedAfterBackoff"
    r = a.status
    assert (
        r.phase is Phase.RUNNING
        and r.attempt_base == r.attempt
        and r.failed_rounds == 1
        and r.retry_at is None
    )
    assert_round_trip(r)
    # the next round fails too: a longer back-off
    f2 = _exhaust(r, f.retry_at + 500)
    assert f2.failed_rounds == 2 and f2.retry_at == f.retry_at + 500 + 360


def test_a_verified_drain_forgets_its_failed_rounds():
    f = _exhaust(RUNNING, NOW)
    r = next_action(spec(), f, obs(job=JobObservation(JobState.ABSENT)), f.retry_at).status
    s = next_action(spec(), r, obs(job=JobObservation(JobState.SUCCEEDED)), f.retry_at + 10).status
    v = next_action(
        spec(), s, obs(progress={(0, 0): (600, 400), (0, 1): (1000, 400)}), f.retry_at + 20
    ).status
    assert v.phase is Phase.VERIFIED and v.retry_at is None


def test_a_spec_change_still_retries_at_once():
    f = _exhaust(RUNNING, NOW)
    a = next_action(spec(), f, obs(job=JobObservation(JobState.ABSENT), generation=2), NOW + 1)
    assert a.kind is Kind.LAUNCH and a.status.reason == "RetriedAfterSpecChange"


def test_cancel_while_failed_stops_the_retries():
    f = _exhaust(RUNNING, NOW)
    a = next_action(spec(cancel=True), f, obs(job=JobObservation(JobState.ABSENT)), f.retry_at)
    assert a.status.phase is Phase.CANCELLED


def test_a_failed_status_of_an_older_operator_gets_a_retry_time():
    old = dataclasses.replace(
        RUNNING, phase=Phase.FAILED, failed_generation=1, retry_at=None, finished_at=NOW
    )
    a = next_action(spec(), old, obs(job=JobObservation(JobState.FAILED)), NOW + 5)
    assert a.kind is Kind.NONE and a.status is not None and a.status.retry_at == NOW + 5 + 120
    assert a.status.failed_rounds == 1
