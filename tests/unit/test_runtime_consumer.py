"""The batch loop against a fake confluent-kafka consumer: batching, commits, policies, rebalances, shutdown."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition

from lagpilot_runtime.batch_consumer import BatchConsumer
from lagpilot_runtime.commit_metadata import decode
from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.handler import Record

TOPIC = "t"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Msg:
    def __init__(self, partition: int, offset: int, value: bytes, error=None) -> None:
        self._p, self._o, self._v, self._e = partition, offset, value, error

    def error(self):
        return self._e

    def topic(self):
        return TOPIC

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def key(self):
        return None

    def value(self):
        return self._v

    def headers(self):
        return None

    def timestamp(self):
        return (1, 5000 + self._o)


class FakeConsumer:
    """Serves the partitions' records from committed positions; rebalance events are scripted by call number."""

    def __init__(self, clock: Clock, logs: dict[int, list[bytes]], per_call: int = 1000) -> None:
        self.clock = clock
        self.logs = logs
        self.pos = {p: 0 for p in logs}
        self.start = dict(self.pos)
        self.assigned: list[int] = []
        self.paused: set[int] = set()
        self.commits: list[dict[int, tuple[int, str]]] = []
        self.per_call = per_call
        self.calls = 0
        self.script: dict[int, callable] = {}
        self.closed = False
        self.cb: dict = {}
        self.extra: list[Msg] = []

    def subscribe(self, topics, on_assign, on_revoke, on_lost):
        self.cb = dict(assign=on_assign, revoke=on_revoke, lost=on_lost)
        self.script.setdefault(0, lambda: self.assign(list(self.logs)))

    def assign(self, parts):
        self.assigned += parts
        self.cb["assign"](self, [TopicPartition(TOPIC, p) for p in parts])

    def revoke(self, parts):
        self.cb["revoke"](self, [TopicPartition(TOPIC, p) for p in parts])
        self.assigned = [p for p in self.assigned if p not in parts]

    def lose(self, parts):
        self.cb["lost"](self, [TopicPartition(TOPIC, p) for p in parts])
        self.assigned = [p for p in self.assigned if p not in parts]

    def consume(self, num_messages, timeout):
        event = self.script.pop(self.calls, None)
        self.calls += 1
        if event is not None:
            event()
        out: list[Msg] = self.extra[:num_messages]
        self.extra = self.extra[len(out) :]
        budget = min(num_messages, self.per_call) - len(out)
        progressed = True
        while budget > 0 and progressed:
            progressed = False
            for p in sorted(self.assigned):
                if p in self.paused or self.pos[p] >= len(self.logs[p]) or budget <= 0:
                    continue
                out.append(Msg(p, self.pos[p], self.logs[p][self.pos[p]]))
                self.pos[p] += 1
                budget -= 1
                progressed = True
        self.clock.t += timeout if len(out) < num_messages else 0.001
        return out

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.commits.append({tp.partition: (tp.offset, tp.metadata) for tp in offsets})
        return offsets

    def position(self, tps):
        """Next offset per partition, invalid (-1001) until a record of it was handed out (as librdkafka)."""
        out = []
        for tp in tps:
            p = tp.partition
            handed = self.pos[p] > self.start[p]
            out.append(TopicPartition(TOPIC, p, self.pos[p] if handed else -1001))
        return out

    def pause(self, tps):
        self.paused |= {tp.partition for tp in tps}

    def close(self):
        self.closed = True

    def committed_positions(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in self.commits:
            for p, (off, _) in c.items():
                out[p] = off
        return out


def cfg(**env) -> ConsumerConfig:
    base = {
        "LAGPILOT_BOOTSTRAP_SERVERS": "k:9092",
        "LAGPILOT_TOPIC": TOPIC,
        "LAGPILOT_GROUP_ID": "g",
        "LAGPILOT_HANDLER": "x:y",
        "LAGPILOT_BATCH_MAX_RECORDS": "10",
        "LAGPILOT_BATCH_TIMEOUT_MS": "1000",
        "LAGPILOT_RETRY_BACKOFF_MS": "0",
        "LAGPILOT_MAX_RETRIES": "1",
    }
    base.update({k: str(v) for k, v in env.items()})
    return ConsumerConfig.from_env(base)


class Recorder:
    """A handler that fails pieces containing b'FAIL' and records each successful call."""

    def __init__(self, on_call=None) -> None:
        self.batches: list[list[tuple[int, int]]] = []
        self.on_call = on_call

    def __call__(self, records: list[Record], ctx) -> None:
        if self.on_call is not None:
            self.on_call(records)
        if any(r.value and b"FAIL" in r.value for r in records):
            raise ValueError("contains FAIL")
        self.batches.append([(r.partition, r.offset) for r in records])

    @property
    def processed(self) -> list[tuple[int, int]]:
        return sorted(x for b in self.batches for x in b)


def make(logs, handler, dead=None, per_call=1000, **env):
    clock = Clock()
    fake = FakeConsumer(clock, logs, per_call=per_call)
    loop = BatchConsumer(
        cfg(**env), fake, handler, dead_letter=dead, clock=clock, wall_ms=lambda: 1_700_000_000_000
    )
    return loop, fake


def stop_when_drained(loop, fake, total):
    """Stop the loop once every record was handed over (the fake never blocks)."""
    orig = fake.consume

    def consume(num_messages, timeout):
        out = orig(num_messages, timeout)
        if not out and sum(fake.pos.values()) >= total and not loop.pending:
            loop.request_stop("test")
        return out

    fake.consume = consume


def test_batches_fill_to_n_then_flush_on_timeout_and_commit_each():
    logs = {0: [b"v"] * 13, 1: [b"v"] * 12}
    h = Recorder()
    loop, fake = make(logs, h)
    stop_when_drained(loop, fake, 25)
    assert loop.run() == 0
    assert [len(b) for b in h.batches] == [10, 10, 5]
    assert h.processed == sorted([(0, i) for i in range(13)] + [(1, i) for i in range(12)])
    assert len(fake.commits) == 3
    assert fake.committed_positions() == {0: 13, 1: 12}


def test_commit_is_highest_processed_offset_plus_one_per_partition():
    logs = {0: [b"v"] * 4, 1: [b"v"] * 6}
    loop, fake = make(logs, Recorder(), LAGPILOT_BATCH_MAX_RECORDS=100)
    stop_when_drained(loop, fake, 10)
    loop.run()
    assert fake.commits[0].keys() == {0, 1}
    assert fake.commits[0][0][0] == 4 and fake.commits[0][1][0] == 6


def test_commit_carries_capacity_metadata():
    logs = {0: [b"v"] * 30}
    clock_holder = {}

    def slow(records, ctx):
        clock_holder["c"].t += 0.01 * len(records)  # 100 records per busy second

    loop, fake = make(logs, slow)
    clock_holder["c"] = loop.clock
    stop_when_drained(loop, fake, 30)
    loop.run()
    rep = decode(fake.commits[-1][0][1])
    assert rep is not None and rep.ts_ms == 1_700_000_000_000
    assert rep.records_per_second == pytest.approx(100, rel=0.05)
    assert loop.metrics.capacity._value.get() == pytest.approx(100, rel=0.05)


def test_failing_records_are_dead_lettered_and_the_rest_committed():
    logs = {0: [b"ok", b"FAIL-1", b"ok", b"ok"], 1: [b"ok", b"ok", b"FAIL-2", b"ok"]}
    dead: list = []
    h = Recorder()
    loop, fake = make(logs, h, dead=dead.extend)
    stop_when_drained(loop, fake, 8)
    assert loop.run() == 0
    assert sorted((f.record.partition, f.record.offset) for f in dead) == [(0, 1), (1, 2)]
    assert all("contains FAIL" in f.error for f in dead)
    assert set(h.processed) == {(0, 0), (0, 2), (0, 3), (1, 0), (1, 1), (1, 3)}
    assert fake.committed_positions() == {0: 4, 1: 4}
    assert loop.metrics.dlq_records._value.get() == 2


def test_dead_letter_failure_commits_nothing_and_exits():
    logs = {0: [b"ok", b"FAIL"]}

    def broken_dlq(failures):
        from lagpilot_runtime.failure import DeadLetterError

        raise DeadLetterError("broker down")

    loop, fake = make(logs, Recorder(), dead=broken_dlq)
    assert loop.run() == 1
    assert fake.commits == []


def test_pause_policy_commits_up_to_the_failure_and_stops_the_partition():
    logs = {0: [b"ok", b"FAIL", b"ok"] + [b"ok"] * 20, 1: [b"ok"] * 30}
    h = Recorder()
    loop, fake = make(logs, h, LAGPILOT_FAILURE_POLICY="pause", per_call=4)
    stop_when_drained(loop, fake, 23 + 30)
    calls = {"n": 0}
    orig = fake.consume

    def consume(num_messages, timeout):  # the fake keeps no queue for paused partitions: stop on idle
        calls["n"] += 1
        out = orig(num_messages, timeout)
        if not out and calls["n"] > 50:
            loop.request_stop("test")
        return out

    fake.consume = consume
    assert loop.run() == 0
    assert fake.committed_positions()[0] == 1
    assert fake.committed_positions()[1] == 30
    assert 0 in fake.paused and loop.metrics.paused._value.get() == 1
    # only the first batch's p0 records (offsets 0-4 at 4 records per fetch over 2 partitions) reached the handler
    assert max(off for p, off in h.processed if p == 0) <= 4


def test_exit_policy_commits_up_to_failure_and_exits_nonzero():
    logs = {0: [b"ok", b"ok", b"FAIL", b"ok"]}
    loop, fake = make(logs, Recorder(), LAGPILOT_FAILURE_POLICY="exit")
    assert loop.run() == 1
    assert fake.committed_positions() == {0: 2}


def test_systemic_failure_commits_nothing_and_exits():
    def down(records, ctx):
        raise ConnectionError("db down")

    loop, fake = make({0: [b"v"] * 20}, down)
    assert loop.run() == 1
    assert fake.commits == []


def test_revoke_finishes_in_flight_records_and_commits_before_giving_up():
    logs = {0: [b"v"] * 6, 1: [b"v"] * 6}
    h = Recorder()
    loop, fake = make(logs, h, per_call=4, LAGPILOT_BATCH_MAX_RECORDS=100, LAGPILOT_BATCH_TIMEOUT_MS=100000)
    seen = {}
    fake.script[2] = lambda: (
        seen.setdefault("pending", len(loop.pending)),
        fake.revoke([1]),
        seen.setdefault("commits", list(fake.commits)),
    )
    stop_when_drained(loop, fake, 10)  # p1 stops at offset 4 when revoked
    loop.run()
    assert seen["pending"] == 8
    assert seen["commits"] and seen["commits"][0] == {
        0: (4, seen["commits"][0][0][1]),
        1: (4, seen["commits"][0][1][1]),
    }
    assert 1 not in {p for c in fake.commits[1:] for p in c}  # nothing committed for p1 after it was revoked
    assert h.processed == sorted([(0, i) for i in range(6)] + [(1, i) for i in range(4)])


def test_lost_partitions_pending_records_are_dropped_not_committed():
    logs = {0: [b"v"] * 6, 1: [b"v"] * 6}
    h = Recorder()
    loop, fake = make(logs, h, per_call=4, LAGPILOT_BATCH_MAX_RECORDS=100, LAGPILOT_BATCH_TIMEOUT_MS=100000)
    fake.script[2] = lambda: fake.lose([1])
    stop_when_drained(loop, fake, 10)
    loop.run()
    assert (1, 0) not in h.processed and (1, 1) not in h.processed
    assert all(1 not in c for c in fake.commits)


def test_stop_during_fill_abandons_pending_uncommitted():
    logs = {0: [b"v"] * 100}
    h = Recorder()
    loop, fake = make(logs, h, per_call=3, LAGPILOT_BATCH_MAX_RECORDS=50, LAGPILOT_BATCH_TIMEOUT_MS=100000)
    fake.script[4] = lambda: loop.request_stop("SIGTERM")
    assert loop.run() == 0
    assert h.batches == [] and fake.commits == []


def test_stop_during_handler_finishes_and_commits_that_batch():
    logs = {0: [b"v"] * 100}
    loop_ref = {}
    h = Recorder(on_call=lambda records: loop_ref["loop"].request_stop("SIGTERM"))
    loop, fake = make(logs, h)
    loop_ref["loop"] = loop
    assert loop.run() == 0
    assert len(h.batches) == 1 and fake.committed_positions() == {0: 10}


def test_kafka_error_messages_do_not_crash_the_loop(caplog):
    class Err:
        def name(self):
            return "_MSG_TIMED_OUT"

        def fatal(self):
            return False

        def __str__(self):
            return "a transient error"

    logs = {0: [b"v"] * 5}
    h = Recorder()
    loop, fake = make(logs, h)
    fake.extra = [Msg(0, 99, b"", error=Err())]
    stop_when_drained(loop, fake, 5)
    with caplog.at_level(logging.WARNING):
        assert loop.run() == 0
    assert len(h.processed) == 5
    assert any(getattr(r, "fields", {}).get("code") == "_MSG_TIMED_OUT" for r in caplog.records)


def test_metrics_count_records_and_batches():
    logs = {0: [b"v"] * 25}
    loop, fake = make(logs, Recorder())
    stop_when_drained(loop, fake, 25)
    loop.run()
    m = loop.metrics
    assert m.records._value.get() == 25
    assert m.batches.labels("ok")._value.get() == 3
    assert m.committed_offset.labels(TOPIC, "0")._value.get() == 25


def _failing_commits(fake, times: int):
    from confluent_kafka import KafkaError, KafkaException

    orig = fake.commit
    state = {"left": times}

    def commit(offsets, asynchronous):
        if state["left"] > 0:
            state["left"] -= 1
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION))
        return orig(offsets, asynchronous)

    fake.commit = commit


def test_failed_commit_is_carried_into_the_next_commit():
    logs = {0: [b"v"] * 10, 1: [b"v"] * 20}
    loop, fake = make(logs, Recorder(), per_call=1000)
    _failing_commits(fake, 1)
    stop_when_drained(loop, fake, 30)
    loop.run()
    # first batch (10 records) failed to commit; the next batch's commit carries both partitions
    assert fake.committed_positions() == {0: 10, 1: 20}
    assert loop.metrics.commits.labels("failed")._value.get() == 1


def _stop_after_consumes(loop, fake, n):
    """The loop is asked to stop at its (n+1)-th consume() call."""
    calls = {"n": 0}
    orig = fake.consume

    def consume(num_messages, timeout):
        calls["n"] += 1
        if calls["n"] > n:
            loop.request_stop("test")
        return orig(num_messages, timeout)

    fake.consume = consume


def test_failed_commit_is_retried_on_revoke_before_giving_up():
    logs = {0: [b"v"] * 3, 1: [b"v"] * 3}
    loop, fake = make(logs, Recorder(), per_call=1000)
    _failing_commits(fake, 1)
    fake.script[3] = lambda: fake.revoke([0, 1])
    _stop_after_consumes(loop, fake, 6)
    loop.run()
    assert fake.committed_positions() == {0: 3, 1: 3}
    assert loop.uncommitted == {}


def test_failed_commit_is_retried_while_idle_when_no_next_batch_comes():
    # the last batch before the traffic stops is processed, its commit refused (ILLEGAL_GENERATION:
    # a member joined meanwhile), and the partition stays ours after the rebalance (no revoke): no
    # next batch carries the position, so the idle loop must commit it again by itself. Seen in CI
    # (stop 35): partitions 1 and 2 stayed committed at 15417 of 15421 for 13 minutes, every record
    # processed, until the consumer's close() at teardown committed them.
    from lagpilot_runtime import batch_commit

    logs = {0: [b"v"] * 3}
    loop, fake = make(logs, Recorder(), per_call=1000)
    _failing_commits(fake, batch_commit.COMMIT_ATTEMPTS)  # every attempt of the batch's own commit
    _stop_after_consumes(loop, fake, 40)  # then ~20 s of the fake clock with nothing to consume
    loop.run()
    assert loop.processed_records == 3
    assert fake.committed_positions() == {0: 3} and loop.uncommitted == {}, (fake.commits, loop.uncommitted)
    assert loop.metrics.commits.labels("failed")._value.get() == batch_commit.COMMIT_ATTEMPTS


def test_commit_refused_until_the_partition_moves_is_given_up_and_said_exactly(caplog):
    # every commit refused (ILLEGAL_GENERATION through a whole rebalance), then the partition moves
    # to another member: the processed position cannot be committed by us any more; the loop says
    # so once, naming the partition, our last commit and the position the next owner replays up to
    logs = {0: [b"v"] * 3, 1: [b"v"] * 3}
    loop, fake = make(logs, Recorder(), per_call=1000)
    _failing_commits(fake, 100)
    fake.script[3] = lambda: fake.revoke([1])
    _stop_after_consumes(loop, fake, 6)
    with caplog.at_level(logging.WARNING, logger="lagpilot.consumer"):
        loop.run()
    given = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("event") == "commit_given_up"]
    assert len(given) == 1, [r.getMessage() for r in caplog.records]
    assert given[0]["positions"] == {f"{TOPIC}/1": {"committed": None, "position": 3}}, given[0]
    assert loop.metrics.commits.labels("given_up")._value.get() == 1
    assert 1 not in {p for _, p in loop.uncommitted}  # partition 0 stays ours: retried later, not given up
    assert fake.committed_positions() == {}


def test_commit_refused_while_stopping_is_retried_at_close_before_the_partitions_go(monkeypatch):
    # the last batch before a SIGTERM is processed, its commit refused (a rebalance in progress):
    # close() tries again while the partitions are still ours, so the next owner does not replay it
    from lagpilot_runtime import batch_commit, batch_consumer

    monkeypatch.setattr(batch_consumer, "CLOSE_COMMIT_BACKOFF_S", 0.0)
    logs = {0: [b"v"] * 3}
    loop, fake = make(logs, Recorder(), per_call=1000)
    _failing_commits(
        fake, batch_commit.COMMIT_ATTEMPTS + 1
    )  # every attempt of the batch's commit + the first at close
    orig = fake.consume

    def consume(num_messages, timeout):
        out = orig(num_messages, timeout)
        if not out and loop.processed_records:
            loop.request_stop("test")
        return out

    fake.consume = consume
    loop.run()
    assert loop.uncommitted and fake.committed_positions() == {}  # the batch's own commit failed
    loop.close()
    assert fake.committed_positions() == {0: 3} and loop.uncommitted == {} and fake.closed


def test_unexpected_error_stops_with_exit_code_1_and_no_commit(caplog):
    logs = {0: [b"v"] * 5}
    loop, fake = make(logs, Recorder())

    def broken_position(tps):
        raise RuntimeError("client bug")

    fake.position = broken_position
    with caplog.at_level(logging.ERROR):
        assert loop.run() == 1
    assert fake.commits == []
    assert any(getattr(r, "fields", {}).get("event") == "fatal" for r in caplog.records)


# ---- drain hand-off (the owner's side of lagpilot_runtime.handoff_mailbox) ------------------------


class FakeMailbox:
    """The memberless mailbox group: committed() reads entries, commit() writes them."""

    def __init__(self, entries=None) -> None:
        self.entries: dict[int, tuple[int, str]] = dict(entries or {})
        self.writes: list[tuple[int, str]] = []
        self.reads = 0

    def committed(self, tps, timeout):
        self.reads += 1
        out = []
        for tp in tps:
            off, meta = self.entries.get(tp.partition, (-1001, None))
            out.append(
                TopicPartition(TOPIC, tp.partition, off)
                if meta is None
                else TopicPartition(TOPIC, tp.partition, off, metadata=meta)
            )
        return out

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        for tp in offsets:
            self.entries[tp.partition] = (tp.offset, tp.metadata)
            self.writes.append((tp.partition, tp.metadata))
        return offsets


class HandoffConsumer(FakeConsumer):
    """FakeConsumer + seek/committed/watermarks, recording the order of effects."""

    def __init__(self, clock, logs, events, broker_committed=None, per_call=1000):
        super().__init__(clock, logs, per_call=per_call)
        self.events = events
        self.broker_committed = dict(broker_committed or {})
        for p, off in self.broker_committed.items():
            self.pos[p] = self.start[p] = off

    def commit(self, offsets, asynchronous):
        self.events.append(("commit", {tp.partition: tp.offset for tp in offsets}))
        for tp in offsets:
            self.broker_committed[tp.partition] = tp.offset
        return super().commit(offsets, asynchronous)

    def seek(self, tp):
        if tp.partition not in self.assigned:
            raise RuntimeError("Local: Erroneous state")  # as librdkafka before the assign took effect
        self.events.append(("seek", tp.partition, tp.offset))
        self.pos[tp.partition] = tp.offset

    def committed(self, tps, timeout):
        return [
            TopicPartition(TOPIC, tp.partition, self.broker_committed.get(tp.partition, -1001)) for tp in tps
        ]

    def get_watermark_offsets(self, tp, timeout):
        return 0, len(self.logs[tp.partition])


def handoff_loop(logs, mailbox, handler, broker_committed=None, per_call=1000, **env):
    clock = Clock()
    events: list = []
    fake = HandoffConsumer(clock, logs, events, broker_committed, per_call=per_call)
    orig = mailbox.commit

    def mb_commit(offsets, asynchronous):
        events.append(("ack", [tp.metadata for tp in offsets]))
        return orig(offsets, asynchronous)

    mailbox.commit = mb_commit
    loop = BatchConsumer(
        cfg(**env), fake, handler, clock=clock, wall_ms=lambda: 1_700_000_000_000, mailbox=mailbox
    )
    return loop, fake, events


def run_batches(loop, n):
    if not loop.consumer.cb:
        loop.subscribe()
    for _ in range(n):
        fake = loop.consumer
        if fake.calls > 0 and all(fake.pos[p] >= len(fake.logs[p]) for p in fake.assigned):
            break  # nothing left: fill_batch would wait for records forever
        batch = loop.fill_batch()
        if batch:
            loop.process(batch)
        loop.check_handoff()
        loop.clock.t += 1.5  # past the check interval


def test_request_is_acked_then_split_committed_then_seeked_at_a_batch_boundary():
    logs = {0: [b"x"] * 100, 1: [b"y"] * 30}
    mailbox = FakeMailbox({0: (60, "lph1;id=4;split=60")})
    rec = Recorder()
    loop, _fake, events = handoff_loop(logs, mailbox, rec, LAGPILOT_BATCH_MAX_RECORDS="10")
    run_batches(loop, 20)
    # on_assign saw the request before any record: own committed = low watermark 0 → ack 0, move to 60
    assert mailbox.entries[0] == (60, "lph1;id=4;split=60;ack=0")
    first = [e for e in events if e[0] in ("ack", "commit", "seek")][:3]
    assert first[0] == ("ack", ["lph1;id=4;split=60;ack=0"]) and first[1] == ("commit", {0: 60}), events[:4]
    p0 = [o for p, o in rec.processed if p == 0]
    assert p0 == list(range(60, 100))  # [0, 60) belongs to the drain, nothing below split processed here
    assert [o for p, o in rec.processed if p == 1] == list(range(30))  # the other partition never paused
    assert loop.handoffs.labels("moved")._value.get() == 1


def test_request_seen_mid_stream_acks_the_committed_offset_and_drops_prefetched_records():
    logs = {0: [b"x"] * 200}
    mailbox = FakeMailbox()
    rec = Recorder()
    loop, fake, events = handoff_loop(logs, mailbox, rec, per_call=10, LAGPILOT_BATCH_MAX_RECORDS="10")
    run_batches(loop, 3)  # 30 processed and committed
    assert fake.broker_committed[0] == 30
    mailbox.entries[0] = (150, "lph1;id=9;split=150")  # the operator publishes
    loop.pending = []
    run_batches(loop, 8)
    # the next boundary (after one more batch, committed 40) acks its committed offset
    assert mailbox.entries[0][1] == "lph1;id=9;split=150;ack=40"
    i_ack = next(i for i, e in enumerate(events) if e[0] == "ack")
    assert events[i_ack + 1] == ("commit", {0: 150}) and events[i_ack + 2] == ("seek", 0, 150)
    p0 = [o for p, o in rec.processed if p == 0]
    assert p0 == list(range(0, 40)) + list(range(150, 200))  # [40, 150) is the drain's
    # never a commit below split after the hand-off
    after = [c[0][0] for c in fake.commits if 0 in c][[c[0][0] for c in fake.commits if 0 in c].index(150) :]
    assert min(after) == 150


def test_acker_died_between_its_commits_the_next_owner_finishes_or_reacks():
    # the previous owner acked 40 and died before committing split: own committed is still 40
    logs = {0: [b"x"] * 100}
    mailbox = FakeMailbox({0: (80, "lph1;id=2;split=80;ack=40")})
    rec = Recorder()
    loop, _fake, events = handoff_loop(logs, mailbox, rec, broker_committed={0: 40})
    run_batches(loop, 5)
    assert ("commit", {0: 80}) in events and not [e for e in events if e[0] == "ack"]  # c == s: no re-ack
    assert [o for _, o in rec.processed] == list(range(80, 100))
    # records after the ack were processed meanwhile (own 50 > ack 40): re-ack 50, then move
    mailbox2 = FakeMailbox({0: (80, "lph1;id=2;split=80;ack=40")})
    rec2 = Recorder()
    loop2, _fake2, events2 = handoff_loop(logs, mailbox2, rec2, broker_committed={0: 50})
    run_batches(loop2, 5)
    assert mailbox2.entries[0][1] == "lph1;id=2;split=80;ack=50"
    assert [e[0] for e in events2 if e[0] in ("ack", "commit")][:2] == ["ack", "commit"]


def test_frozen_sealed_and_garbage_entries_change_nothing():
    logs = {0: [b"x"] * 50, 1: [b"x"] * 50, 2: [b"x"] * 50}
    mailbox = FakeMailbox(
        {
            0: (20, "lph1;id=1;split=20;ack=5"),  # acked, group already past split
            1: (20, "lph1;id=1;split=20;ack=5;done=1"),  # sealed
            2: (20, "lp1;cap=3"),
        }
    )  # not ours
    rec = Recorder()
    loop, _fake, events = handoff_loop(logs, mailbox, rec, broker_committed={0: 30, 1: 0, 2: 0})
    run_batches(loop, 30)
    assert not [e for e in events if e[0] in ("ack", "seek")]
    assert sorted(rec.processed) == sorted(
        [(0, o) for o in range(30, 50)] + [(1, o) for o in range(50)] + [(2, o) for o in range(50)]
    )


def test_mailbox_reads_are_rate_limited_and_a_failed_commit_blocks_the_ack():
    logs = {0: [b"x"] * 100}
    mailbox = FakeMailbox()
    loop, _fake, _ = handoff_loop(logs, mailbox, Recorder(), per_call=10)
    loop.subscribe()
    reads = mailbox.reads
    for _ in range(5):
        loop.check_handoff()  # same instant: one read at most
    assert mailbox.reads - reads <= 1
    loop.uncommitted[(TOPIC, 0)] = 7
    mailbox.entries[0] = (90, "lph1;id=3;split=90")
    loop.clock.t += 2
    loop.check_handoff()
    assert mailbox.entries[0][1] == "lph1;id=3;split=90"  # not acked while a commit is outstanding


def test_crash_hook_is_off_without_its_env(monkeypatch, tmp_path):
    from lagpilot_runtime import handoff_owner as mod

    monkeypatch.delenv("LP_TEST_HANDOFF_CRASH_AT", raising=False)
    mod._test_crash_point("after_commit")  # returns: no env, no crash
    monkeypatch.setenv("LP_TEST_HANDOFF_CRASH_AT", "after_ack")
    monkeypatch.setenv("LP_TEST_HANDOFF_CRASH_DIR", str(tmp_path))
    mod._test_crash_point("after_commit")  # another point: returns
    assert not list(tmp_path.iterdir())


def test_on_assign_retries_a_failed_mailbox_read_before_any_record_is_processed():
    class Flaky(FakeMailbox):
        def __init__(self, entries):
            super().__init__(entries)
            self.fail = 2

        def committed(self, tps, timeout):
            if self.fail:
                self.fail -= 1
                raise RuntimeError("NOT_COORDINATOR")
            return super().committed(tps, timeout)

    logs = {0: [b"x"] * 60}
    mailbox = Flaky({0: (50, "lph1;id=2;split=50;ack=10")})  # the previous owner died before its split commit
    rec = Recorder()
    loop, _fake, events = handoff_loop(logs, mailbox, rec, broker_committed={0: 10})
    run_batches(loop, 5)
    assert ("commit", {0: 50}) in events
    assert [o for _, o in rec.processed] == list(range(50, 60))  # nothing of the drain's [10, 50)


def test_a_fatal_client_error_stops_the_loop_and_marks_it_not_live():
    class Fenced:
        def name(self):
            return "_FENCED"

        def fatal(self):
            return True

        def __str__(self):
            return "Static consumer fenced by other consumer with same group.instance.id"

    loop, _fake = make({0: [b"v"] * 5}, Recorder())
    loop.on_error(Fenced())
    assert loop.stop_event.is_set() and not loop.health.live()[0]


# ---- H2/M4: the owner acts only on entries of its own CR (LAGPILOT_OWNER_UID) ---------------------

CR_UID = "0b6f7c1e-8f3a-4c1d-9e2b-3f4a5b6c7d8e"
OTHER_UID = "5d1e2f3a-1b2c-4d3e-8f4a-6b7c8d9e0f1a"


@pytest.mark.parametrize(
    "meta",
    [
        f"lph2;cr={OTHER_UID};id=1;split=60",  # another CR with the same groupId
        "lph1;id=1;split=60",
    ],
)  # no CR uid (a stale or foreign writer)
def test_owner_ignores_requests_of_another_cr(meta):
    logs = {0: [b"x"] * 100}
    mailbox = FakeMailbox({0: (60, meta)})
    rec = Recorder()
    loop, _fake, events = handoff_loop(logs, mailbox, rec, LAGPILOT_OWNER_UID=CR_UID)
    run_batches(loop, 20)
    assert mailbox.writes == [] and not [e for e in events if e[0] == "seek"], events[:5]
    assert [o for p, o in rec.processed if p == 0] == list(range(100))  # nothing skipped


def test_owner_acts_on_its_own_crs_request():
    from lagpilot_runtime import handoff_mailbox as mbx

    key = bytes(range(32))
    logs = {0: [b"x"] * 100}
    mailbox = FakeMailbox(
        {0: (60, mbx.sign(mbx.request(1, 60, CR_UID), key, TOPIC, 0).encode())}
    )  # M8: signed
    rec = Recorder()
    loop, _fake, _events = handoff_loop(
        logs, mailbox, rec, LAGPILOT_OWNER_UID=CR_UID, LAGPILOT_HANDOFF_KEY=key.hex()
    )
    run_batches(loop, 20)
    assert mailbox.entries[0] == (60, mbx.sign(mbx.Entry(1, 60, 0, owner=CR_UID), key, TOPIC, 0).encode())
    assert [o for p, o in rec.processed if p == 0] == list(range(60, 100))


# ---- M8: the owner acts only on requests the operator signed (per-CR hand-off key) ----------------

HANDOFF_KEY = bytes(range(32))


@pytest.mark.parametrize("forge", ["no_mac", "zero_mac", "other_key"])
def test_owner_ignores_a_forged_request_with_its_own_uid(forge):
    from lagpilot_runtime import handoff_mailbox as mbx

    if forge == "no_mac":
        meta = f"lph2;cr={CR_UID};id=1;split=60"
    elif forge == "zero_mac":
        meta = f"lph2;cr={CR_UID};id=1;split=60;mac={'0' * 64}"
    else:
        meta = mbx.sign(mbx.request(1, 60, CR_UID), bytes(range(1, 33)), TOPIC, 0).encode()
    logs = {0: [b"x"] * 100}
    mailbox = FakeMailbox({0: (60, meta)})
    rec = Recorder()
    loop, _fake, events = handoff_loop(
        logs, mailbox, rec, LAGPILOT_OWNER_UID=CR_UID, LAGPILOT_HANDOFF_KEY=HANDOFF_KEY.hex()
    )
    run_batches(loop, 20)
    assert mailbox.writes == [] and not [e for e in events if e[0] == "seek"], events[:5]
    assert [o for p, o in rec.processed if p == 0] == list(range(100))  # nothing skipped


def test_owner_acts_on_a_signed_request_and_signs_its_ack():
    from lagpilot_runtime import handoff_mailbox as mbx

    logs = {0: [b"x"] * 100}
    mailbox = FakeMailbox({0: (60, mbx.sign(mbx.request(1, 60, CR_UID), HANDOFF_KEY, TOPIC, 0).encode())})
    rec = Recorder()
    loop, _fake, _events = handoff_loop(
        logs, mailbox, rec, LAGPILOT_OWNER_UID=CR_UID, LAGPILOT_HANDOFF_KEY=HANDOFF_KEY.hex()
    )
    run_batches(loop, 20)
    off, meta = mailbox.entries[0]
    ack = mbx.decode(meta, off)
    assert ack is not None and ack.ack == 0 and mbx.verify(ack, HANDOFF_KEY, TOPIC, 0), meta
    assert [o for p, o in rec.processed if p == 0] == list(range(60, 100))


def test_the_handoff_key_is_redacted():
    from lagpilot_runtime import redaction

    cfg(LAGPILOT_OWNER_UID=CR_UID, LAGPILOT_HANDOFF_KEY=HANDOFF_KEY.hex())
    assert HANDOFF_KEY.hex() not in redaction.redact(f"boom {HANDOFF_KEY.hex()}")
