"""The handler contract: Record, loading handlers and sinks, per-record concurrency, decode helpers, sinks' pure parts."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from lagpilot_runtime.handler import (
    BatchContext,
    HandlerLoadError,
    Record,
    RecordDecodeError,
    RecordError,
    RecordsFailed,
    decode_json,
    decode_text,
    load_handler,
    per_record,
)
from lagpilot_runtime.sinks import log as log_sink
from lagpilot_runtime.sinks import postgres as pg


def rec(offset: int, value: bytes | None = b"v", key: bytes | None = None, partition: int = 0) -> Record:
    return Record("t", partition, offset, key, value, [("h", b"1")], 99)


def ctx(concurrency: int = 1, **config: str) -> BatchContext:
    return BatchContext(config=config, logger=logging.getLogger("test.handler"), concurrency=concurrency)


def test_record_is_frozen():
    r = rec(5)
    with pytest.raises(AttributeError):
        r.offset = 6  # type: ignore[misc]
    assert r.where == "t/0/5"


class _Msg:
    """The parts of confluent_kafka.Message a KafkaRecord reads; counts reads."""

    def __init__(self) -> None:
        self.reads = 0

    def _read(self, v):
        self.reads += 1
        return v

    def timestamp(self):
        return self._read((1, 99))

    def headers(self):
        return self._read([("h", b"1"), ("n", None)])

    def topic(self):
        return self._read("t")

    def partition(self):
        return self._read(0)

    def offset(self):
        return self._read(5)

    def key(self):
        return self._read(None)

    def value(self):
        return self._read(b"v")


def test_kafka_record_is_lazy_and_behaves_as_a_record():
    import copy
    import dataclasses
    import pickle

    from lagpilot_runtime.kafka_record import to_record

    msg = _Msg()
    r = to_record(msg)
    assert msg.reads == 0  # nothing read until a field is used
    expected = Record("t", 0, 5, None, b"v", [("h", b"1"), ("n", b"")], 99)
    assert r.value == b"v" and msg.reads == 7
    assert r.offset == 5 and msg.reads == 7  # materialised once
    assert (
        r == expected
        and expected == r
        and hash(dataclasses.replace(r, headers=())) == hash(dataclasses.replace(expected, headers=()))
    )
    assert isinstance(r, Record) and r.where == "t/0/5"
    assert pickle.loads(pickle.dumps(to_record(_Msg()))) == expected
    assert copy.copy(to_record(_Msg())) == expected
    assert dataclasses.asdict(to_record(_Msg())) == dataclasses.asdict(expected)
    assert dataclasses.replace(to_record(_Msg()), value=b"x").value == b"x"
    with pytest.raises(AttributeError):
        r.no_such_field  # noqa: B018
    with pytest.raises(AttributeError):
        r.offset = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("postgres", pg.process),
        ("log", log_sink.process),
        ("lagpilot_runtime.sinks.log:process", log_sink.process),
    ],
    ids=["builtin-postgres", "builtin-log", "module-function"],
)
def test_load_handler(spec, expected):
    assert load_handler(spec) is expected


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nocolon", "module:function"),
        ("no_such_module_xyz:fn", "cannot import"),
        ("lagpilot_runtime.sinks.log:nope", "no attribute"),
        ("lagpilot_runtime.handler:__doc__", "not callable"),
    ],
    ids=["no-colon", "missing-module", "missing-function", "not-callable"],
)
def test_load_handler_errors_are_clear(spec, message):
    with pytest.raises(HandlerLoadError, match=message):
        load_handler(spec)


def test_per_record_runs_concurrently_and_waits_for_all():
    active, peak, lock = [0], [0], threading.Lock()
    done: list[int] = []

    @per_record
    def slow(record: Record, c: BatchContext) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
            done.append(record.offset)

    c = ctx(concurrency=4)
    try:
        slow([rec(i) for i in range(12)], c)
    finally:
        c.close()
    assert sorted(done) == list(range(12))  # all finished before the handler returned
    assert peak[0] > 1


def test_per_record_failures_name_the_records():
    @per_record
    def picky(record: Record, c: BatchContext) -> None:
        if record.offset % 5 == 0:
            raise ValueError("five")

    c = ctx(concurrency=3)
    with pytest.raises(RecordsFailed) as info:
        picky([rec(i) for i in range(11)], c)
    c.close()
    assert sorted(e.record.offset for e in info.value.errors) == [0, 5, 10]
    assert all(e.retriable for e in info.value.errors)


@pytest.mark.parametrize(
    "value, ok",
    [(b'{"a": 1}', True), (b"\xff", False), (b"{", False), (None, False)],
    ids=["json", "not-utf8", "not-json", "tombstone"],
)
def test_decode_json(value, ok):
    r = rec(3, value)
    if ok:
        assert decode_json(r) == {"a": 1}
    else:
        with pytest.raises(RecordDecodeError) as info:
            decode_json(r)
        assert info.value.record is r and info.value.retriable is False
        assert str(info.value).startswith("t/0/3: ")


def test_decode_text():
    assert decode_text(rec(1, "é".encode())) == "é"
    assert decode_text(rec(1, None)) is None
    with pytest.raises(RecordDecodeError):
        decode_text(rec(1, b"\xff"))


def test_record_error_defaults_to_retriable():
    assert RecordError(rec(1), "x").retriable is True
    assert RecordError(rec(1), "x", retriable=False).retriable is False


def test_log_sink_logs_each_record_without_failing_on_binary(caplog):
    with caplog.at_level(logging.INFO, logger="test.handler"):
        log_sink.process([rec(1, b"\xff\xfebinary"), rec(2, None)], ctx(**{"log.max_value_bytes": "4"}))
    fields = [r.fields for r in caplog.records]
    assert [f["offset"] for f in fields] == [1, 2]
    assert fields[0]["value"] == "\\xff\\xfebi..." and fields[1]["value"] is None


@pytest.mark.parametrize(
    "env, config, expected",
    [
        ({"LAGPILOT_POSTGRES_DSN": "postgresql://x"}, {}, ("lagpilot_records", "insert", "auto")),
        (
            {
                "LAGPILOT_POSTGRES_DSN": "postgresql://x",
                "LAGPILOT_POSTGRES_TABLE": "t1",
                "LAGPILOT_POSTGRES_MODE": "upsert",
            },
            {},
            ("t1", "upsert", "auto"),
        ),
        (
            {"LAGPILOT_POSTGRES_DSN": "postgresql://x"},
            {"postgres.table": "s.t2", "postgres.method": "copy"},
            ("s.t2", "insert", "copy"),
        ),
    ],
    ids=["defaults", "env", "config-overrides"],
)
def test_postgres_settings(env, config, expected):
    s = pg.PostgresSettings.resolve(config, env)
    assert (s.table, s.mode, s.method) == expected
    assert "postgresql://x" not in repr(s)


@pytest.mark.parametrize(
    "env, config, message",
    [
        ({}, {}, "LAGPILOT_POSTGRES_DSN"),
        ({"LAGPILOT_POSTGRES_DSN": "d"}, {"postgres.table": "a;drop"}, "plain identifier"),
        ({"LAGPILOT_POSTGRES_DSN": "d"}, {"postgres.mode": "merge"}, "insert or upsert"),
    ],
    ids=["no-dsn", "bad-table", "bad-mode"],
)
def test_postgres_settings_errors(env, config, message):
    with pytest.raises(ValueError, match=message):
        pg.PostgresSettings.resolve(config, env)


def test_insert_rows_one_per_record():
    rows = pg.rows_for([rec(1), rec(2)], "insert", "tid")
    assert [r[:4] for r in rows] == [
        ("t", "tid", 0, 1),
        ("t", "tid", 0, 2),
    ]  # topic, incarnation, partition, offset
    assert rows[0][6] == '[["h", "1"]]'


def test_upsert_rows_keep_newest_offset_per_key():
    records = [rec(1, b"a1", b"a"), rec(2, b"b1", b"b"), rec(3, b"a2", b"a"), rec(0, b"a0", b"a")]
    rows = {r[4]: r[5] for r in pg.rows_for(records, "upsert")}
    assert rows == {b"a": b"a2", b"b": b"b1"}


def test_upsert_rejects_keyless_records_permanently():
    with pytest.raises(RecordsFailed) as info:
        pg.rows_for([rec(1, key=b"k"), rec(2, key=None)], "upsert")
    assert [e.record.offset for e in info.value.errors] == [2]
    assert info.value.errors[0].retriable is False


def test_ddl_keys():
    assert 'PRIMARY KEY (topic, topic_id, partition, "offset")' in pg.ddl("t", "insert")
    assert "PRIMARY KEY (topic, key)" in pg.ddl("s.t", "upsert") and '"s"."t"' in pg.ddl("s.t", "upsert")
