"""kafka_observe.py: capacity metadata, admin config from a Secret, the shared pool, error
classification, and one observation against a fake AdminClient (no broker)."""

from __future__ import annotations

import base64
import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given as _given
from hypothesis import settings as _settings
from hypothesis import strategies as _st

from lagpilot.observe.kafka_observe import (
    AdminHandle,
    AdminPool,
    ObserveError,
    SecretError,
    admin_config,
    classify,
    config_key,
    observe,
)
from lagpilot.spec import KafkaSpec
from tests.fixtures.futures import done


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def test_admin_config_plaintext() -> None:
    assert admin_config(KafkaSpec("k:9092"), None) == {
        "bootstrap.servers": "k:9092",
        "security.protocol": "PLAINTEXT",
    }


def test_admin_config_sasl_ssl() -> None:
    k = KafkaSpec("k:9093", "SASL_SSL", "SCRAM-SHA-512", "creds")
    conf = admin_config(k, {"username": b64("u"), "password": b64("p"), "ca.crt": b64("CA")})
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512" and conf["sasl.username"] == "u"
    assert conf["sasl.password"] == "p" and conf["ssl.ca.pem"] == "CA" and "ssl.key.pem" not in conf


@pytest.mark.parametrize(
    "data, reason",
    [
        (None, "SecretNotFound"),
        ({"password": b64("topsecret")}, "SecretMalformed"),
        ({"username": b64("u"), "password": b64("topsecret"), "tls.crt": b64("C")}, "SecretMalformed"),
    ],
)
def test_admin_config_secret_errors_never_echo_values(data: dict[str, str] | None, reason: str) -> None:
    k = KafkaSpec("k:9093", "SASL_SSL", "PLAIN", "creds")
    with pytest.raises(SecretError) as info:
        admin_config(k, data)
    assert info.value.reason == reason and "creds" in info.value.message
    assert "topsecret" not in str(info.value)


def test_pool_shares_one_client_per_config() -> None:
    made: list[dict[str, Any]] = []
    pool = AdminPool(factory=lambda conf: made.append(conf) or SimpleNamespace(poll=lambda t: 0))
    a = {"bootstrap.servers": "k:9092", "security.protocol": "PLAINTEXT"}
    b = {"bootstrap.servers": "other:9092", "security.protocol": "PLAINTEXT"}
    h1 = pool.acquire("ns/one", a)
    h2 = pool.acquire("ns/two", dict(a))
    assert h1 is h2 and len(made) == 1 and pool.size() == 1
    h3 = pool.acquire("ns/three", b)
    assert h3 is not h1 and pool.size() == 2
    pool.acquire("ns/three", a)  # switching config releases the old client
    assert pool.size() == 1
    pool.release("ns/one")
    pool.release("ns/two")
    assert pool.size() == 1  # ns/three still uses it
    pool.release("ns/three")
    assert pool.size() == 0
    assert "k:9092" not in config_key(a)


def kerr(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


@pytest.mark.parametrize(
    "err, reason",
    [
        (kerr(KafkaError.UNKNOWN_TOPIC_OR_PART), "TopicNotFound"),
        (kerr(KafkaError._TRANSPORT), "BrokerUnreachable"),
        (kerr(KafkaError._ALL_BROKERS_DOWN), "BrokerUnreachable"),
        (kerr(KafkaError.SASL_AUTHENTICATION_FAILED), "AuthenticationFailed"),
        (kerr(KafkaError._AUTHENTICATION), "AuthenticationFailed"),
        (kerr(KafkaError.TOPIC_AUTHORIZATION_FAILED), "AuthorizationFailed"),
        (kerr(KafkaError._TIMED_OUT), "KafkaTimeout"),
        (concurrent.futures.TimeoutError(), "KafkaTimeout"),
        (kerr(KafkaError.INVALID_REQUEST), "KafkaError"),
    ],
)
def test_classify(err: BaseException, reason: str) -> None:
    e = classify(err, None, "orders", "k:9092")
    assert e.reason == reason and "k:9092" in e.message


@pytest.mark.parametrize(
    "recent, reason", [("_TRANSPORT", "BrokerUnreachable"), ("_AUTHENTICATION", "AuthenticationFailed")]
)
def test_timeout_explained_by_recent_client_error(recent: str, reason: str) -> None:
    h = AdminHandle(SimpleNamespace(poll=lambda t: 0), "k:9092")
    h.on_error(KafkaError(getattr(KafkaError, recent)))
    assert classify(kerr(KafkaError._TIMED_OUT), h, "orders", "k:9092").reason == reason


class FakeAdmin:
    """Answers like confluent-kafka's AdminClient, from a table of offsets."""

    def __init__(self, parts: dict[int, tuple[int, int, int, str | None]], missing: bool | set[str] = False):
        self.parts = parts
        self.missing = missing
        self.calls: list[str] = []
        self.topics_asked: list[list[str]] = []

    def poll(self, t: float) -> int:
        return 0

    def _missing(self, topic: str) -> bool:
        return self.missing is True or (isinstance(self.missing, set) and topic in self.missing)

    def describe_topics(self, coll: Any, **kw: Any) -> dict[str, concurrent.futures.Future]:
        self.calls.append("describe_topics")
        self.topics_asked.append(list(coll.topic_names))
        return {
            t: done(exc=kerr(KafkaError.UNKNOWN_TOPIC_OR_PART))
            if self._missing(t)
            else done(SimpleNamespace(partitions=[SimpleNamespace(id=i) for i in self.parts]))
            for t in coll.topic_names
        }

    def list_offsets(self, req: dict[Any, Any], **kw: Any) -> dict[Any, concurrent.futures.Future]:
        self.calls.append("list_offsets")
        earliest = next(iter(req.values()))._value == -2
        return {
            tp: done(SimpleNamespace(offset=self.parts[tp.partition][0 if earliest else 1])) for tp in req
        }

    def list_consumer_group_offsets(self, reqs: list[Any], **kw: Any) -> dict[str, concurrent.futures.Future]:
        raise AssertionError("never through the admin client: librdkafka crashes on a coordinator error")

    def reader(self, group_id: str) -> FakeGroupReader:
        """The per-group offsets consumer: answers committed() from the same table."""
        return FakeGroupReader(self, group_id)


class FakeGroupReader:
    def __init__(self, admin: FakeAdmin, group_id: str) -> None:
        self.admin, self.group_id, self.closed = admin, group_id, False

    def committed(self, tps: list[Any], timeout: float) -> list[Any]:
        assert timeout > 0
        self.admin.calls.append(f"committed:{self.group_id}")
        return [
            SimpleNamespace(
                partition=tp.partition,
                offset=self.admin.parts[tp.partition][2],
                error=None,
                metadata=self.admin.parts[tp.partition][3],
            )
            for tp in tps
        ]

    def poll(self, t: float) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def handle_for(admin: FakeAdmin) -> AdminHandle:
    return AdminHandle(admin, "k:9092", group_reader_factory=admin.reader)


def test_observe_without_snapshot_reads_commits_first_then_the_cluster_view() -> None:
    admin = FakeAdmin({0: (0, 100, 40, "lp1;cap=12.5;ts=1700000000000"), 1: (10, 50, -1001, None)})
    h = handle_for(admin)
    obs = observe(h, "orders", "g")
    # no snapshot: a view gives the partitions, the group's OffsetFetch follows, then a view started
    # after it answered (the end offsets are always read after the commits)
    assert admin.calls == [
        "describe_topics",
        "list_offsets",
        "list_offsets",
        "committed:g",
        "list_offsets",
        "list_offsets",
    ]
    admin.calls.clear()
    obs = observe(h, "orders", "g")
    assert admin.calls == ["list_offsets", "list_offsets", "committed:g", "list_offsets", "list_offsets"]
    assert obs.partition_count == 2 and obs.observed_at == h.observer.latest().read_at
    p0, p1 = obs.partitions
    assert (p0.earliest, p0.latest, p0.committed) == (0, 100, 40)
    assert p0.capacity is not None and p0.capacity.records_per_second == 12.5
    assert p1.committed is None and p1.capacity is None


def test_observe_missing_topic() -> None:
    with pytest.raises(ObserveError) as info:
        observe(handle_for(FakeAdmin({}, missing=True)), "orders", "g")
    assert info.value.reason == "TopicNotFound" and "'orders'" in info.value.message


class FakeMsg:
    def __init__(self, topic: str, p: int, off: int, ts: tuple[int, int]) -> None:
        self._t, self._p, self._o, self._ts = topic, p, off, ts

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def timestamp(self) -> tuple[int, int]:
        return self._ts


class FakeConsumer:
    def __init__(self, msgs: list[FakeMsg]) -> None:
        self.msgs = msgs
        self.assigned: list[Any] = []
        self.unassigned = 0

    def assign(self, tps: list[Any]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]

    def consume(self, num_messages: int, timeout: float) -> list[FakeMsg]:
        out, self.msgs = self.msgs, []
        return out

    def unassign(self) -> None:
        self.unassigned += 1


def test_peek_oldest_reads_one_record_per_partition() -> None:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE

    from lagpilot.observe.kafka_observe import peek_oldest

    c = FakeConsumer(
        [
            FakeMsg("t", 0, 40, (TIMESTAMP_CREATE_TIME, 1_700_000_000_000)),
            FakeMsg("t", 0, 41, (TIMESTAMP_CREATE_TIME, 1_700_000_099_000)),  # later record: ignored
            FakeMsg("t", 1, 7, (TIMESTAMP_NOT_AVAILABLE, -1)),
        ]
    )
    h = AdminHandle(SimpleNamespace(poll=lambda t: 0), "k:9092", consumer_factory=lambda: c)
    out = peek_oldest(h, "t", {0: 40, 1: 7, 2: 3}, timeout_s=0.3)
    assert c.assigned == [(0, 40), (1, 7), (2, 3)]
    assert out == {0: 1_700_000_000.0}  # 1 had no timestamp, 2 never arrived: left out
    assert c.unassigned == 1


def test_peek_oldest_never_raises() -> None:
    from lagpilot.observe.kafka_observe import peek_oldest

    def boom() -> Any:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    h = AdminHandle(SimpleNamespace(poll=lambda t: 0), "k:9092", consumer_factory=boom)
    assert peek_oldest(h, "t", {0: 1}, timeout_s=0.1) == {}


def test_repeated_librdkafka_lines_are_thinned() -> None:
    import logging

    from lagpilot.observe.kafka_observe import _RepeatFilter

    f = _RepeatFilter(every_s=60)

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("lagpilot.kafka", logging.ERROR, __file__, 1, msg, None, None)

    assert f.filter(rec("Connect to 127.0.0.1:41 failed (after 0ms)"))
    assert not f.filter(rec("Connect to 127.0.0.1:41 failed (after 3ms)"))
    assert f.filter(rec("SASL handshake failed"))


# --- thread safety and lifetime of the shared clients (the first-cycle crash, docs/operator.md) ---


def wait_for(cond: Any, what: str, timeout: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def fake_pool(readers: list[FakeGroupReader], peeks: list[FakeConsumer]) -> AdminPool:
    admin = FakeAdmin({0: (0, 10, 5, None)})

    def reader_factory(conf: Any) -> Any:
        def make(group_id: str) -> FakeGroupReader:
            readers.append(admin.reader(group_id))
            return readers[-1]

        return make

    def peek_factory(conf: Any) -> Any:
        def make() -> FakeConsumer:
            peeks.append(FakeConsumer([]))
            peeks[-1].close = lambda: setattr(peeks[-1], "closed", True)  # type: ignore[method-assign]
            return peeks[-1]

        return make

    return AdminPool(
        factory=lambda conf: admin, consumer_factory=peek_factory, group_reader_factory=reader_factory
    )


CONF = {"bootstrap.servers": "k:9092", "security.protocol": "PLAINTEXT"}


def test_a_leased_handle_outlives_its_release_and_closes_after() -> None:
    readers: list[FakeGroupReader] = []
    peeks: list[FakeConsumer] = []
    pool = fake_pool(readers, peeks)
    with pool.lease("ns/a", CONF) as h:
        observe(h, "orders", "g")
        pool.release("ns/a")  # e.g. the daemon stopping while its cycle still runs in a thread
        assert pool.size() == 0
        observe(h, "orders", "g")  # still usable: not closed under the running cycle
        assert h.client is not None and not readers[0].closed
    wait_for(lambda: readers[0].closed and h.client is None, "the last lease to close the handle")


def test_release_without_lease_closes_every_consumer() -> None:
    from lagpilot.observe.kafka_observe import peek_oldest

    readers: list[FakeGroupReader] = []
    peeks: list[FakeConsumer] = []
    pool = fake_pool(readers, peeks)
    with pool.lease("ns/a", CONF) as h:
        observe(h, "orders", "g1")
        observe(h, "orders", "g2")
        peek_oldest(h, "orders", {0: 5}, timeout_s=0.05)
    assert [r.group_id for r in readers] == ["g1", "g2"] and len(peeks) == 1
    pool.release("ns/a")
    wait_for(
        lambda: all(r.closed for r in readers) and getattr(peeks[0], "closed", False), "consumers closed"
    )


def test_one_reader_per_group_and_idle_readers_are_closed() -> None:
    admin = FakeAdmin({0: (0, 10, 5, None)})
    made: list[FakeGroupReader] = []
    h = AdminHandle(admin, "k:9092", group_reader_factory=lambda g: made.append(admin.reader(g)) or made[-1])
    observe(h, "orders", "g")
    observe(h, "orders", "g")
    assert len(made) == 1 and h.group_readers() == 1
    h.GROUP_IDLE_S = -1.0  # every reader is now idle: the next use closes the others (and itself)
    observe(h, "orders", "other")
    assert made[0].closed and h.group_readers() == 0


def test_observe_is_bounded_when_another_thread_holds_the_client() -> None:
    h = handle_for(FakeAdmin({0: (0, 10, 5, None)}))
    assert h._lock.acquire()  # a call stuck in another thread
    try:
        with pytest.raises(ObserveError) as info:
            observe(h, "orders", "g", timeout_s=0.2)
        assert info.value.reason == "KafkaTimeout"
    finally:
        h._lock.release()


def test_peek_is_skipped_while_another_peek_holds_the_consumer() -> None:
    from lagpilot.observe.kafka_observe import peek_oldest

    c = FakeConsumer([])
    h = AdminHandle(SimpleNamespace(poll=lambda t: 0), "k:9092", consumer_factory=lambda: c)
    with h.peek_lock:
        assert peek_oldest(h, "t", {0: 1}, timeout_s=0.1) == {}
    assert c.assigned == []


def test_error_callback_is_served_only_under_the_handle_lock() -> None:
    seen: list[bool] = []
    h: AdminHandle

    def poll(t: float) -> int:
        seen.append(h._lock.locked())
        h.on_error(KafkaError(KafkaError._TRANSPORT))  # librdkafka calls error_cb from poll()
        return 1

    h = AdminHandle(SimpleNamespace(poll=poll), "k:9092")
    assert h.recent_error() == "_TRANSPORT" and seen == [True]


def test_committed_offsets_for_other_modules() -> None:
    from lagpilot.observe.kafka_observe import committed_offsets

    admin = FakeAdmin({0: (0, 10, 5, None), 1: (0, 10, -1001, None)})
    assert committed_offsets(handle_for(admin), "progress-g", "orders", [0, 1], 1.0) == {0: 5, 1: None}
    h = AdminHandle(admin, "k:9092")  # no reader factory: a classified error, not a crash
    with pytest.raises(ObserveError):
        committed_offsets(h, "g", "orders", [0], 1.0)


def test_consumers_get_the_queued_logger_but_never_the_error_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the admin client has error_cb (served by its poll() under the handle lock); the consumers
    keep the logger (queued by confluent-kafka, served by their own consume/poll calls)."""
    import confluent_kafka

    from lagpilot.observe import kafka_observe as ko

    made: list[dict[str, Any]] = []
    monkeypatch.setattr(confluent_kafka, "Consumer", lambda conf: made.append(conf) or SimpleNamespace())
    admin_conf: dict[str, Any] = {}
    pool = AdminPool(factory=lambda conf: admin_conf.update(conf) or SimpleNamespace(poll=lambda t: 0))
    h = pool.acquire("ns/a", CONF)
    h.peek_consumer()
    h._group_reader("orders-g")
    assert callable(admin_conf["error_cb"]) and admin_conf["logger"] is ko._KAFKA_LOG
    peek, reader = made
    assert reader["group.id"] == "orders-g" and reader["enable.auto.commit"] is False
    assert peek["group.id"] == "lagpilot-operator-peek"
    for conf in (peek, reader):
        assert "error_cb" not in conf and conf["logger"] is ko._KAFKA_LOG
        assert conf["bootstrap.servers"] == "k:9092"


def test_safe_admin_answers_offset_fetch_through_the_group_reader_and_locks_the_rest() -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = FakeAdmin({0: (0, 10, 7, "lp1;cap=1;ts=5"), 1: (0, 10, -1001, None)})
    seen_locked: list[bool] = []
    h = handle_for(admin)
    admin.describe_consumer_groups = lambda groups, **kw: (
        seen_locked.append(h._lock.locked()) or {"g": done("desc")}
    )
    safe = h.safe_admin(1.0)
    res = safe.list_consumer_group_offsets(
        [
            ConsumerGroupTopicPartitions(
                "progress-1", [TopicPartition("orders", 0), TopicPartition("orders", 1)]
            )
        ],
        request_timeout=1.0,
    )["progress-1"].result(timeout=1)
    assert [(tp.partition, tp.offset, tp.metadata) for tp in res.topic_partitions] == [
        (0, 7, "lp1;cap=1;ts=5"),
        (1, -1001, None),
    ]
    assert admin.calls == ["committed:progress-1"]
    assert safe.describe_consumer_groups(["g"])["g"].result() == "desc" and seen_locked == [True]


# --- the __consumer_offsets snapshot -------------------------------------------------------------


def _key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    s = lambda x: len(x.encode()).to_bytes(2, "big") + x.encode()  # noqa: E731
    return version.to_bytes(2, "big") + s(group) + s(topic) + partition.to_bytes(4, "big", signed=True)


def _value(version: int, offset: int, metadata: str) -> bytes:
    head = version.to_bytes(2, "big") + offset.to_bytes(8, "big", signed=True)
    if version >= 3:
        head += (-1).to_bytes(4, "big", signed=True)
    m = metadata.encode()
    meta = (bytes([len(m) + 1]) if version >= 4 else len(m).to_bytes(2, "big")) + m
    tail = (1700000000000).to_bytes(8, "big")
    if version == 1:
        tail += (1800000000000).to_bytes(8, "big")
    if version >= 4:
        tail += b"\x01\x00\x10" + bytes(16)  # one tagged field (topic id)
    return head + meta + tail


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_parse_offset_commit_value_versions(version: int) -> None:
    from lagpilot.observe.kafka_observe import parse_offset_commit

    assert parse_offset_commit(_key("g", "orders", 7), _value(version, 1234, "lp1;cap=2;ts=5")) == (
        "g",
        "orders",
        7,
        (1234, "lp1;cap=2;ts=5"),
    )


def test_parse_offset_commit_tombstone_other_records_and_garbage() -> None:
    from lagpilot.observe.kafka_observe import parse_offset_commit

    assert parse_offset_commit(_key("g", "t", 0, version=0), None) == ("g", "t", 0, None)  # offset deleted
    group_meta_key = (2).to_bytes(2, "big") + (1).to_bytes(2, "big") + b"g"
    assert parse_offset_commit(group_meta_key, b"\x00\x03whatever") is None
    assert parse_offset_commit(b"", b"") is None and parse_offset_commit(None, None) is None
    assert parse_offset_commit(_key("g", "t", 0)[:-2], b"x") is None  # truncated key
    assert parse_offset_commit(_key("g", "t", 0), b"\x00\x04\x00") is None  # truncated value
    # the Python client stores metadata with its C string's NUL; read back without it
    assert parse_offset_commit(_key("g", "t", 0), _value(4, 1, "lp1;cap=1;ts=2\x00"))[3] == (
        1,
        "lp1;cap=1;ts=2",
    )


@pytest.mark.parametrize(
    "group, parts, want",
    [
        ("test", 50, 3556498 % 50),  # "test".hashCode() == 3556498
        ("", 50, 0),
        ("polygenelubricants", 50, 0),  # hashCode() == Integer.MIN_VALUE: Utils.abs gives 0
        ("Aa", 8, 2112 % 8),
        ("BB", 8, 2112 % 8),  # the classic colliding pair
    ],
)
def test_offsets_partition_for_follows_kafka(group: str, parts: int, want: int) -> None:
    from lagpilot.observe.kafka_observe import offsets_partition_for

    assert offsets_partition_for(group, parts) == want


def test_snapshot_waits_for_the_groups_partition_to_reach_the_end_then_answers() -> None:
    import threading

    from lagpilot.observe.kafka_observe import OffsetsSnapshot, offsets_partition_for

    snap = OffsetsSnapshot(lambda: None)
    snap.partitions = 4
    gp = offsets_partition_for("g", 4)
    snap._offsets[("g", "t")] = {0: [(2, (10, "lp1;cap=3;ts=9"))]}
    snap._pos[gp] = 5
    assert snap.committed("g", "t", [0, 1], end=6, timeout_s=0.1) is None  # not caught up: fall back

    def advance() -> None:
        with snap._cond:
            snap._offsets[("g", "t")][1] = [(5, (7, None))]
            snap._offsets[("g", "t")][0].append((6, (11, None)))  # written at the end: after it
            snap._pos[gp] = 7
            snap._cond.notify_all()

    threading.Timer(0.1, advance).start()
    assert snap.committed("g", "t", [0, 1, 2], end=6, timeout_s=5) == [
        (0, 10, "lp1;cap=3;ts=9"),
        (1, 7, None),
        (2, None, None),
    ]
    snap.failed = "GROUP_AUTHORIZATION_FAILED"
    snap._pos[gp] = 0
    assert snap.committed("g", "t", [0], end=6, timeout_s=5) is None  # failed: at once, no wait


def test_a_client_that_cannot_be_created_is_an_observe_error_without_the_config() -> None:
    """A TLS key librdkafka cannot load makes AdminClient() raise: a Degraded reason, not a crash."""

    def factory(conf: Any) -> Any:
        raise KafkaException(
            KafkaError(KafkaError._INVALID_ARG, f"ssl.key.pem failed: {conf['ssl.key.pem']}")
        )

    pool = AdminPool(factory=factory, consumer_factory=None, group_reader_factory=None)
    with pytest.raises(ObserveError) as info:
        with pool.lease("ns/a", {**CONF, "ssl.key.pem": "KEYMATERIAL"}):
            pass
    assert info.value.reason == "KafkaConfigInvalid" and "k:9092" in info.value.message
    assert "KEYMATERIAL" not in str(info.value)


def test_a_failed_snapshot_is_retried_after_its_back_off_not_before() -> None:
    from lagpilot.observe.kafka_observe import OffsetsSnapshot

    made: list[int] = []

    def factory() -> Any:
        made.append(1)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))  # broker down

    snap = OffsetsSnapshot(factory)
    snap.start()
    wait_for(lambda: snap.failed is not None, "the first attempt to fail")
    snap.start()  # within the back-off: no new attempt
    assert len(made) == 1 and not snap.healthy
    snap.RESTART_S = 0.0
    snap.start()
    wait_for(lambda: len(made) == 2 and snap.failed is not None, "a second attempt")
    snap.stop()
    snap.start()  # stopped (handle closed): never again
    assert len(made) == 2


def test_snapshot_answers_the_commits_as_of_the_end_read_before_the_topics_end() -> None:
    """The snapshot may have read past the end the view's first request saw: commits written at or
    after that end are not returned (they could be beyond the topic's end read later); a tombstone
    deletes; only the last HISTORY records per partition are kept."""
    from lagpilot.observe.offsets_snapshot import OffsetsSnapshot, _as_of

    snap = OffsetsSnapshot(lambda: None)
    snap.partitions = 1
    snap._apply(
        [
            (10, ("g", "t", 0, (5, "a"))),
            (11, ("g", "t", 1, (9, None))),
            (12, ("g", "t", 0, (7, "b"))),
            (13, ("g", "t", 1, None)),
        ]
    )
    snap._pos[0] = 20
    assert snap.committed("g", "t", [0, 1], end=12, timeout_s=0.1) == [(0, 5, "a"), (1, 9, None)]
    assert snap.committed("g", "t", [0, 1], end=14, timeout_s=0.1) == [(0, 7, "b"), (1, None, None)]
    snap._apply([(20 + i, ("g", "t", 0, (100 + i, None))) for i in range(10)])
    assert len(snap._offsets[("g", "t")][0]) == OffsetsSnapshot.HISTORY
    assert _as_of(snap._offsets[("g", "t")][0], 27) == (106, None)
    # every kept record is past the end (more than HISTORY commits since): the closest one
    assert _as_of(snap._offsets[("g", "t")][0], 12) == (106, None) and _as_of(None, 5) is None


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _value_any(version: int, offset: int, metadata: str | None) -> bytes:
    head = version.to_bytes(2, "big") + offset.to_bytes(8, "big", signed=True)
    if version >= 3:
        head += (7).to_bytes(4, "big", signed=True)
    m = None if metadata is None else metadata.encode()
    if version >= 4:
        meta = _varint(0 if m is None else len(m) + 1) + (m or b"")
    else:
        meta = (-1 if m is None else len(m)).to_bytes(2, "big", signed=True) + (m or b"")
    return head + meta + (1700000000000).to_bytes(8, "big") + (b"\x00" if version >= 4 else b"")


@_settings(max_examples=400, deadline=None)
@_given(
    group=_st.text(max_size=40),
    topic=_st.text(min_size=1, max_size=60),
    partition=_st.integers(0, 2**31 - 1),
    key_version=_st.sampled_from([0, 1]),
    version=_st.integers(0, 5),
    offset=_st.integers(-1, 2**62),
    metadata=_st.one_of(_st.none(), _st.text(max_size=300)),
)
def test_parse_offset_commit_reads_every_well_formed_record(
    group: str, topic: str, partition: int, key_version: int, version: int, offset: int, metadata: str | None
) -> None:
    """Any group/topic (unicode), partition, offset and metadata (none, empty, long: a multi-byte
    varint, with a NUL) of every key/value version reads back as written; a tombstone too."""
    from lagpilot.observe.kafka_observe import parse_offset_commit

    if version < 4 and metadata is not None and len(metadata.encode()) > 32767:
        return
    key = _key(group, topic, partition, key_version)
    got = parse_offset_commit(key, _value_any(version, offset, metadata))
    want_meta = (
        None if metadata is None or (version >= 4 and metadata is None) else metadata.split("\x00", 1)[0]
    )
    assert got == (group, topic, partition, (offset, want_meta))
    assert parse_offset_commit(key, None) == (group, topic, partition, None)


@_settings(max_examples=400, deadline=None)
@_given(key=_st.binary(max_size=64), value=_st.one_of(_st.none(), _st.binary(max_size=64)))
def test_parse_offset_commit_never_raises_on_garbage(key: bytes, value: bytes | None) -> None:
    from lagpilot.observe.kafka_observe import parse_offset_commit

    got = parse_offset_commit(key, value)
    assert got is None or (isinstance(got[0], str) and isinstance(got[1], str) and isinstance(got[2], int))
