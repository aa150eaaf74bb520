"""Failure policy: backoff schedule, isolation of failing records, commit positions, DLQ headers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot_runtime.failure import (
    Abandoned,
    Failure,
    RetryPolicy,
    SystemicFailure,
    backoff_ms,
    commit_positions,
    dlq_headers,
    run_batch,
)
from lagpilot_runtime.handler import Record, RecordDecodeError, RecordError, RecordsFailed, decode_json


def rec(offset: int, value: bytes = b"ok", partition: int = 0, topic: str = "t") -> Record:
    return Record(topic, partition, offset, None, value, [], 1000 + offset)


class Sink:
    """A handler that fails any piece containing a bad offset; records every successful call."""

    def __init__(
        self,
        bad: set[int] = frozenset(),
        transient_failures: int = 0,
        named: bool = False,
        decode: bool = False,
    ):
        self.bad = set(bad)
        self.transient = transient_failures
        self.named = named
        self.decode = decode
        self.calls: list[list[int]] = []
        self.ok: list[int] = []

    def __call__(self, piece: list[Record]) -> None:
        self.calls.append([r.offset for r in piece])
        if self.transient > 0:
            self.transient -= 1
            raise ConnectionError("sink unavailable")
        if self.decode:
            errors = []
            for r in piece:
                try:
                    decode_json(r)
                except RecordDecodeError as exc:
                    errors.append(exc)
            if errors:
                raise RecordsFailed(errors)
        bad = [r for r in piece if r.offset in self.bad]
        if bad:
            if self.named:
                raise RecordsFailed(RecordError(r, ValueError("bad record")) for r in bad)
            raise ValueError(f"bad record at {bad[0].offset}")
        self.ok.extend(r.offset for r in piece)


def run(records, sink, retries=3, stop=lambda: False):
    sleeps: list[float] = []
    result = run_batch(
        records, sink, RetryPolicy(retries, 100), sleep=sleeps.append, should_stop=stop, rng=random.Random(1)
    )
    return result, sleeps


@pytest.mark.parametrize(
    "attempt, base, lo, hi",
    [
        (0, 200, 100, 200),
        (1, 200, 200, 400),
        (2, 200, 400, 800),
        (3, 200, 800, 1600),
        (20, 200, 15000, 30000),  # capped
        (0, 0, 0, 0),
    ],
    ids=["first", "second", "third", "fourth", "capped", "no-backoff"],
)
def test_backoff_is_exponential_with_bounded_jitter(attempt, base, lo, hi):
    rng = random.Random(7)
    values = [backoff_ms(attempt, base, rng) for _ in range(200)]
    assert all(lo <= v <= hi for v in values)
    if base:
        assert len({round(v, 6) for v in values}) > 100  # jittered, not constant


def test_success_first_time_makes_one_call():
    sink = Sink()
    result, sleeps = run([rec(i) for i in range(10)], sink)
    assert result.ok and result.calls == 1 and sleeps == []


def test_transient_failure_is_retried_with_growing_backoff():
    sink = Sink(transient_failures=2)
    result, sleeps = run([rec(i) for i in range(10)], sink)
    assert result.ok and result.retries == 2 and len(sleeps) == 2
    assert 0.05 <= sleeps[0] <= 0.1 and 0.1 <= sleeps[1] <= 0.2
    assert sorted(sink.ok) == list(range(10))


@pytest.mark.parametrize(
    "n, bad, named",
    [
        (10, {3}, False),
        (10, {0}, False),
        (10, {9}, False),
        (10, {2, 7}, False),
        (100, {13, 14, 15, 80}, False),
        (10, {3}, True),
        (10, {2, 7}, True),
        (1, {0}, False),
    ],
    ids=["one-middle", "first", "last", "two", "cluster", "named-one", "named-two", "single-record-batch"],
)
def test_isolation_finds_exactly_the_bad_records(n, bad, named):
    sink = Sink(bad=bad, named=named)
    result, _ = run([rec(i) for i in range(n)], sink, retries=2)
    assert sorted(f.record.offset for f in result.failures) == sorted(bad)
    assert set(sink.ok) == set(range(n)) - bad
    assert all("bad record" in f.error for f in result.failures)
    assert all(call for call in sink.calls)  # never called with an empty piece


def test_single_record_batch_is_retried_then_failed_without_more_calls():
    sink = Sink(bad={0})
    result, sleeps = run([rec(0)], sink, retries=2)
    assert (
        [f.record.offset for f in result.failures] == [0]
        and sink.calls == [[0], [0], [0]]
        and len(sleeps) == 2
    )


def test_named_errors_skip_bisection():
    sink = Sink(bad={5}, named=True)
    result, _ = run([rec(i) for i in range(64)], sink, retries=0)
    assert [f.record.offset for f in result.failures] == [5]
    # whole batch, then the rest without 5, then 5 alone: no halving
    assert len(sink.calls) == 3


def test_decode_errors_are_not_retried():
    records = [rec(i, b'{"n": %d}' % i) for i in range(6)] + [rec(6, b"\xff\xfe not json")]
    sink = Sink(decode=True)
    result, sleeps = run(records, sink, retries=3)
    assert [f.record.offset for f in result.failures] == [6]
    assert result.failures[0].retriable is False
    assert "t/0/6" not in result.failures[0].error and "UnicodeDecodeError" in result.failures[0].error
    assert sleeps == [] and result.retries == 0
    assert sorted(sink.ok) == list(range(6))


def test_everything_failing_is_systemic_not_dead_lettered():
    sink = Sink(transient_failures=10**9)
    with pytest.raises(SystemicFailure):
        run([rec(i) for i in range(500)], sink, retries=1)
    assert len(sink.calls) < 40  # gave up early, did not bisect 500 records down to singles


def test_small_batch_all_failing_is_systemic():
    with pytest.raises(SystemicFailure):
        run([rec(0), rec(1)], Sink(transient_failures=10**9), retries=1)


def test_shutdown_abandons_retries():
    sink = Sink(transient_failures=10**9)
    with pytest.raises(Abandoned):
        run([rec(i) for i in range(10)], sink, retries=5, stop=lambda: len(sink.calls) >= 2)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=2, max_value=200), data=st.data())
def test_isolation_invariant(n, data):
    """Any bad subset (not all records) → exactly the bad records fail; every good one succeeded once or more."""
    bad = data.draw(st.sets(st.integers(min_value=0, max_value=n - 1), max_size=min(n - 1, 8)))
    named = data.draw(st.booleans())
    sink = Sink(bad=bad, named=named)
    try:
        result, _ = run([rec(i) for i in range(n)], sink, retries=1)
    except SystemicFailure:
        # only allowed when no piece could ever succeed before the bisection budget ran out
        assert not named and sink.ok == []
        return
    assert {f.record.offset for f in result.failures} == bad
    assert set(sink.ok) == set(range(n)) - bad
    assert all(sink.calls)  # never an empty piece


def f(offset: int, partition: int = 0) -> Failure:
    return Failure(rec(offset, partition=partition), "boom")


@pytest.mark.parametrize(
    "policy, failures, expected",
    [
        ("deadLetter", [], {("t", 0): 13, ("t", 1): 8}),
        ("deadLetter", [f(11)], {("t", 0): 13, ("t", 1): 8}),
        ("pause", [f(11)], {("t", 0): 11, ("t", 1): 8}),
        ("exit", [f(12), f(10)], {("t", 0): 10, ("t", 1): 8}),
        ("pause", [f(5, partition=1)], {("t", 0): 13, ("t", 1): 5}),
    ],
    ids=["dlq-clean", "dlq-failed", "pause", "exit-lowest-failure", "pause-other-partition"],
)
def test_commit_positions_never_pass_unprocessed_records(policy, failures, expected):
    records = [rec(10), rec(11), rec(12), rec(5, partition=1), rec(7, partition=1)]
    assert commit_positions(records, failures, policy) == expected


def test_dlq_headers_keep_original_and_add_source():
    r = Record("orders", 3, 42, b"k", b"\xff", [("trace", b"abc"), ("lagpilot.error", b"old")], 1234)
    h = dlq_headers(r, "ValueError: nope")
    assert ("trace", b"abc") in h
    d = dict(h)
    assert d["lagpilot.error"] == b"ValueError: nope"
    assert (d["lagpilot.source.topic"], d["lagpilot.source.partition"], d["lagpilot.source.offset"]) == (
        b"orders",
        b"3",
        b"42",
    )
    assert d["lagpilot.source.timestamp"] == b"1234"
    assert [k for k, _ in h].count("lagpilot.error") == 1
