"""The exactly-once capability (issue 12 item 3): a handler that stores its progress with its output.

Table/unit level: what the consumer does with the sink's progress on assignment (commit, seek, skip),
which offsets a handler call is told to store, the drain scope, and the postgres sink's SQL pieces.
The real proof (crash between the sink's commit and Kafka's, table without a key) is
tests/real/test_exactly_once_sink.py.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from lagpilot_runtime.handler import BatchContext, Record, batch_offsets, commits_progress
from lagpilot_runtime.sinks import postgres as pg
from tests.unit.test_runtime_consumer import TOPIC, FakeConsumer, Recorder, make, stop_when_drained


class ProgressSink(Recorder):
    """A Recorder that stores ctx.offsets like a progress-committing sink."""

    commits_progress = True

    def __init__(self, stored: dict[int, int]) -> None:
        super().__init__()
        self.stored = dict(stored)
        self.offsets_seen: list[dict | None] = []
        self.scopes: list[str] = []

    def __call__(self, records, ctx) -> None:
        super().__call__(records, ctx)
        self.offsets_seen.append(ctx.offsets)
        self.scopes.append(ctx.progress_scope)
        for (_, p), o in (ctx.offsets or {}).items():
            self.stored[p] = max(self.stored.get(p, 0), o)

    def progress(self, topic, partitions, ctx):
        assert topic == TOPIC
        return {p: o for p, o in self.stored.items() if p in partitions}


class FakeWithOffsets(FakeConsumer):
    def committed(self, tps, timeout=None):
        got = self.committed_positions()
        return [TopicPartition(TOPIC, tp.partition, got.get(tp.partition, -1001)) for tp in tps]

    def get_watermark_offsets(self, tp, timeout=None):
        return (0, len(self.logs[tp.partition]))

    def seek(self, tp):
        raise RuntimeError("not assigned yet")  # as librdkafka inside on_assign: skip_below must guard


def make_with_offsets(logs, handler, **env):
    loop, fake = make(logs, handler, **env)
    fake.__class__ = FakeWithOffsets
    return loop, fake


@pytest.mark.parametrize(
    "stored, expect_first_commit, skipped",
    [
        ({}, None, set()),  # nothing stored: Kafka's offset (none) rules
        ({0: 5}, {0: 5}, {(0, o) for o in range(5)}),  # sink ahead on p0: commit 5 first, never deliver 0..4
        ({0: 12, 1: 3}, {0: 12, 1: 3}, {(0, o) for o in range(12)} | {(1, o) for o in range(3)}),
        ({0: 50}, None, set()),  # beyond the partition's end (topic recreated?): ignored, nothing skipped
    ],
)
def test_on_assign_the_consumer_resumes_from_the_sinks_progress(stored, expect_first_commit, skipped):
    logs = {0: [b"v"] * 12, 1: [b"v"] * 7}
    h = ProgressSink(stored)
    loop, fake = make_with_offsets(logs, h)
    stop_when_drained(loop, fake, 19)
    assert loop.run() == 0
    everything = {(p, o) for p, v in logs.items() for o in range(len(v))}
    assert set(h.processed) == everything - skipped
    assert len(h.processed) == len(set(h.processed))  # nothing twice
    if expect_first_commit is not None:
        assert {p: o for p, (o, _) in fake.commits[0].items()} == expect_first_commit
    assert fake.committed_positions() == {0: 12, 1: 7}
    assert set(h.scopes) == {"group:g"}


def test_every_full_batch_call_is_told_its_next_offsets_pieces_are_not():
    logs = {0: [b"v", b"FAIL", b"v", b"v"], 1: [b"v"] * 3}
    h = ProgressSink({})
    loop, fake = make_with_offsets(
        logs, h, LAGPILOT_BATCH_MAX_RECORDS=100, LAGPILOT_FAILURE_POLICY="deadLetter"
    )
    loop.dead_letter = lambda failures: None
    stop_when_drained(loop, fake, 7)
    assert loop.run() == 0
    # the whole batch failed once (no progress stored); the isolated pieces carried no offsets
    assert h.offsets_seen and all(o is None for o in h.offsets_seen)
    logs2 = {0: [b"v"] * 4}
    h2 = ProgressSink({})
    loop2, fake2 = make_with_offsets(logs2, h2, LAGPILOT_BATCH_MAX_RECORDS=100)
    stop_when_drained(loop2, fake2, 4)
    loop2.run()
    assert h2.offsets_seen == [{(TOPIC, 0): 4}]


def test_a_handler_without_the_capability_is_at_least_once_as_before():
    assert not commits_progress(Recorder())
    assert commits_progress(ProgressSink({}))
    assert commits_progress(pg.process)


def test_batch_offsets_and_the_drain_scope():
    recs = [Record("t", 0, 5, None, b""), Record("t", 0, 9, None, b""), Record("t", 2, 1, None, b"")]
    assert batch_offsets(recs) == {("t", 0): 10, ("t", 2): 2}
    ctx = BatchContext(config={}, logger=None, source="drain", drain_id="7", group_id="g")  # type: ignore[arg-type]
    ctx.sub_range = (1, 2, 100, 300)
    # the range's identity: group, partition and end (not the drain id, index or start: a retry and a
    # remainder [next, end) handed back to a re-created CR share it)
    assert ctx.progress_scope == "drain:g:1:300"
    ctx.drain_id, ctx.sub_range = "9", (1, 0, 250, 300)
    assert ctx.progress_scope == "drain:g:1:300"
    assert BatchContext(config={}, logger=None, group_id="g").progress_scope == "group:g"  # type: ignore[arg-type]


def test_postgres_sink_sql_pieces():
    assert "PRIMARY KEY" not in pg.ddl("t", "insert", "none")
    # the topic's incarnation is part of the insert key (issue 23 M5)
    assert 'PRIMARY KEY (topic, topic_id, partition, "offset")' in pg.ddl("t", "insert")
    assert (
        pg._conflict_clause("t", "insert") == 'ON CONFLICT (topic, topic_id, partition, "offset") DO NOTHING'
    )
    assert (
        pg._conflict_clause("t", "insert", legacy_key=True)
        == 'ON CONFLICT (topic, partition, "offset") DO NOTHING'
    )
    # newest-wins: offset order inside one partition of one incarnation, else (timestamp, partition, offset)
    assert pg.supersedes(("a", 0, 9, 1), ("a", 0, 8, 5))
    assert not pg.supersedes(("a", 0, 900, 1_000), ("a", 1, 5, 2_000))
    assert pg.supersedes(("a", 2, 0, 1_500), ("a", 1, 6, 1_500)) and not pg.supersedes(
        ("a", 0, 901, 1_500), ("a", 1, 6, 1_500)
    )
    assert pg.supersedes(("b", 0, 0, 10), ("a", 0, 99, 5))  # a re-created topic: the timestamp decides
    assert not pg.supersedes(("a", 1, 0, None), ("a", 0, 0, 0))  # no timestamp: the oldest
    assert pg._conflict_clause("t", "insert", "none") == ""
    assert pg.progress_table("s.t") == "s.t_lagpilot_progress"
    assert "PRIMARY KEY (scope, topic, partition)" in pg.progress_ddl("t")
    assert pg.progress_rows("group:g", {("t", 1): 5, ("t", 0): 3}) == [
        ("group:g", "t", 0, 3),
        ("group:g", "t", 1, 5),
    ]
    assert pg.progress_rows("x", None) == []
    s = pg.PostgresSettings.resolve({"postgres.key": "none"}, {"LAGPILOT_POSTGRES_DSN": "postgresql://x"})
    assert s.key == "none"
    with pytest.raises(ValueError):
        pg.PostgresSettings.resolve(
            {"postgres.key": "none", "postgres.mode": "upsert"}, {"LAGPILOT_POSTGRES_DSN": "x"}
        )
    with pytest.raises(ValueError):
        pg.PostgresSettings.resolve({"postgres.key": "maybe"}, {"LAGPILOT_POSTGRES_DSN": "x"})
