"""Fetch a consumer group's offsets from Kafka: batched, shared admin connections, classified errors.

One `AdminClient` per Kafka cluster and security configuration is shared by every CR that uses it
(`AdminPool`), not one per CR per cycle: a cluster with 50 groups sees one connection set. Each
observation reads:

1. OffsetFetch for the group (below), first: the end offsets are then read after the commits;
2. DescribeTopics (partition count; never auto-creates a topic, unlike Metadata), 3. ListOffsets
   earliest and 4. ListOffsets latest (read_committed: the LSO) come from the cluster's shared
   `WatermarkBatcher`: every CR cycle arriving within LAGPILOT_KAFKA_BATCH_WINDOW_SECONDS (0.3 s)
   of the first shares one DescribeTopics and one ListOffsets earliest + latest for all their
   topics, so these do not grow with the number of CRs on a cluster. Every request is counted
   (`set_request_counter` → `lagpilot_kafka_requests_total{kind}`).
   The OffsetFetch (one per CR cycle: librdkafka lets a consumer fetch only its own group's
   commits, and its admin OffsetFetch takes one group per call and crashes, below) also returns
   each commit's metadata string — the runtime's
   capacity report `lp1;cap=<records/s>;ts=<ms>` (docs/CONTRACTS.md), so capacity costs nothing.
   OffsetFetch goes through a per-group Consumer (`Consumer.committed`), never through
   `AdminClient.list_consumer_group_offsets`: librdkafka (2.16.0, and still on its master in 2026-07)
   dereferences the admin client's missing consumer-group object when an OffsetFetch answer says
   NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / REQUEST_TIMED_OUT (`rd_kafka_handle_OffsetFetch` →
   `rd_kafka_cgrp_op(rk->rk_cgrp == NULL)`): a SIGSEGV in librdkafka's own thread, which a freshly
   started broker (coordinator still loading) triggers within seconds. A Consumer has that object.

Threads: every call into a shared client is made under a lock taken with a timeout; every wait
has a timeout; a client leaves the pool only when no cycle holds a lease on it (`AdminPool.lease`).
Python callbacks: only the `logger` (librdkafka `log.queue=true`: lines are queued and served by
poll/consume in the calling thread, never from librdkafka's threads) and the admin client's
`error_cb` (served by `poll()` only, under the handle lock).

Errors become `ObserveError(reason, message)` with a CamelCase reason the handlers put in the
`Degraded` condition: TopicNotFound, AuthenticationFailed, AuthorizationFailed, BrokerUnreachable,
KafkaTimeout, KafkaError. Messages name the bootstrap servers and the topic, never credentials.
"""
from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lagpilot.spec import KafkaSpec

log = logging.getLogger(__name__)


class _RepeatFilter(logging.Filter):
    """librdkafka repeats a failing connection's line on every retry (every 1-5 s, per broker
    thread): let each distinct line through once a minute (digits ignored when comparing)."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < self.every_s:
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
        return True


_KAFKA_LOG = logging.getLogger("lagpilot.kafka")
_KAFKA_LOG.addFilter(_RepeatFilter())

CAPACITY_PREFIX = "lp1;"

# Kafka requests the operator issues, by kind (`describe_topics`, `list_offsets`, `offset_fetch`,
# `admin_other`): `lagpilot.run` points this at the `lagpilot_kafka_requests_total` counter.
RequestCounter = Callable[[str, int], None]
_request_counter: RequestCounter | None = None


def set_request_counter(counter: RequestCounter | None) -> None:
    global _request_counter
    _request_counter = counter


def _count(kind: str, n: int = 1) -> None:
    c = _request_counter
    if c is not None and n > 0:
        try:
            c(kind, n)
        except Exception:  # noqa: BLE001 - counting must never fail a cycle
            pass


def default_batch_window_s() -> float:
    """LAGPILOT_KAFKA_BATCH_WINDOW_SECONDS (default 0.3): how long the first cycle of a batch waits
    for the other CRs' cycles on the same cluster before the shared watermark requests go out."""
    import os
    try:
        return max(0.0, min(5.0, float(os.environ.get("LAGPILOT_KAFKA_BATCH_WINDOW_SECONDS") or 0.3)))
    except ValueError:
        return 0.3


class ObserveError(Exception):
    """An observation failed for a reason the user can act on; `reason` is CamelCase."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}")


class SecretError(ObserveError):
    """The Kafka credentials Secret is missing or lacks a key (values are never echoed)."""


@dataclasses.dataclass(frozen=True)
class CapacityReport:
    """What one consumer measured: records per busy second, when (unix ms)."""

    records_per_second: float
    ts_ms: int


def parse_capacity_metadata(metadata: str | None) -> CapacityReport | None:
    """Parse `lp1;cap=<float>;ts=<int>`; anything else (other tools' metadata) yields None."""
    if not metadata or not metadata.startswith(CAPACITY_PREFIX):
        return None
    fields: dict[str, str] = {}
    for part in metadata[len(CAPACITY_PREFIX):].split(";"):
        key, sep, value = part.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        cap = float(fields["cap"])
        ts = int(fields["ts"])
    except (KeyError, ValueError):
        return None
    if not (cap >= 0 and cap != float("inf")) or ts <= 0:
        return None
    return CapacityReport(records_per_second=cap, ts_ms=ts)


@dataclasses.dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition: log start, end (LSO), the group's commit (None: never committed)."""

    partition: int
    earliest: int
    latest: int
    committed: int | None
    capacity: CapacityReport | None = None


@dataclasses.dataclass(frozen=True)
class Observation:
    topic: str
    group_id: str
    observed_at: float  # unix seconds, taken when the responses arrived
    partitions: tuple[PartitionOffsets, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


# --- configuration -------------------------------------------------------------------------------

def _decode(data: Mapping[str, str], key: str, where: str) -> str | None:
    raw = data.get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise SecretError("SecretMalformed", f"{where}: key {key!r} is not valid base64-encoded UTF-8") from None


def admin_config(kafka: KafkaSpec, secret_data: Mapping[str, str] | None,
                 secret_name: str | None = None) -> dict[str, str]:
    """librdkafka configuration for the operator's own admin connection.

    `secret_data` is the Secret's `data` (base64 values, as the API returns them). Raises
    SecretError naming the Secret and the missing key — never a value.
    """
    conf: dict[str, str] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "security.protocol": kafka.security_protocol,
    }
    if kafka.sasl_mechanism and kafka.uses_sasl:
        conf["sasl.mechanism"] = kafka.sasl_mechanism
    if not kafka.secret_name:
        return conf
    where = f"Secret {secret_name or kafka.secret_name!r}"
    if secret_data is None:
        raise SecretError("SecretNotFound", f"{where} (spec.kafka.secretRef) does not exist")
    if kafka.uses_sasl:
        for key, opt in (("username", "sasl.username"), ("password", "sasl.password")):
            value = _decode(secret_data, key, where)
            if not value:
                raise SecretError("SecretMalformed", f"{where} has no non-empty key {key!r} (needed for {kafka.security_protocol})")
            conf[opt] = value
    if kafka.uses_ssl:
        for key, opt in (("ca.crt", "ssl.ca.pem"), ("tls.crt", "ssl.certificate.pem"),
                         ("tls.key", "ssl.key.pem")):
            value = _decode(secret_data, key, where)
            if value:
                conf[opt] = value
        if ("ssl.certificate.pem" in conf) != ("ssl.key.pem" in conf):
            raise SecretError("SecretMalformed", f"{where} must hold both tls.crt and tls.key, or neither")
    return conf


def config_key(conf: Mapping[str, str]) -> str:
    """A stable pool key for a configuration: a hash, so secrets never sit in a visible key."""
    return hashlib.sha256(json.dumps(sorted(conf.items())).encode()).hexdigest()[:16]


# --- the shared admin clients --------------------------------------------------------------------

def _timed_lock(lock: threading.Lock, timeout_s: float, what: str) -> "_Held":
    """Acquire `lock` within `timeout_s` or raise TimeoutError: a stuck holder never blocks a cycle forever."""
    if not lock.acquire(timeout=max(0.0, timeout_s)):
        raise TimeoutError(f"{what}: lock not free within {timeout_s:.1f}s")
    return _Held(lock)


class _Held:
    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


class _GroupReader:
    """A Consumer whose group.id is one observed group, used only for `committed()` (OffsetFetch).
    It never subscribes (no JoinGroup), never commits, never fetches records."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.lock = threading.Lock()
        self.last_used = time.monotonic()


OFFSETS_TOPIC = "__consumer_offsets"


def _java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def offsets_partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition holding a group's commits (Kafka's
    `Utils.abs(groupId.hashCode()) % partitions`; `Utils.abs(MIN_VALUE)` is 0)."""
    h = _java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def parse_offset_commit(key: bytes | None, value: bytes | None
                        ) -> tuple[str, str, int, tuple[int, str | None] | None] | None:
    """One `__consumer_offsets` record → (group, topic, partition, (offset, metadata) or None for a
    deleted offset); None for other record types (group metadata, new-protocol records) or bytes
    this parser does not understand. Key versions 0/1 = OffsetCommitKey; value versions 0-3 plain,
    4+ flexible (compact metadata string, tagged fields after it)."""
    try:
        if not key or len(key) < 2 or int.from_bytes(key[:2], "big", signed=True) not in (0, 1):
            return None
        pos = 2
        n = int.from_bytes(key[pos:pos + 2], "big", signed=True)
        group = key[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        n = int.from_bytes(key[pos:pos + 2], "big", signed=True)
        topic = key[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        if len(key) < pos + 4:
            return None
        partition = int.from_bytes(key[pos:pos + 4], "big", signed=True)
        if value is None:
            return group, topic, partition, None
        ver = int.from_bytes(value[:2], "big", signed=True)
        if ver < 0 or len(value) < 10:
            return None
        offset = int.from_bytes(value[2:10], "big", signed=True)
        pos = 10
        if ver >= 3:
            pos += 4  # leader epoch
        metadata: str | None
        if ver >= 4:  # compact string: unsigned varint length + 1
            n, shift = 0, 0
            while True:
                b = value[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            metadata = None if n == 0 else value[pos:pos + n - 1].decode()
        else:
            n = int.from_bytes(value[pos:pos + 2], "big", signed=True)
            metadata = None if n < 0 else value[pos + 2:pos + 2 + n].decode()
        if metadata is not None:
            # confluent-kafka's Python client stores the C string's terminating NUL with the metadata,
            # and reads it back as a C string: cut at the first NUL like it does
            metadata = metadata.split("\x00", 1)[0]
        return group, topic, partition, (offset, metadata)
    except (IndexError, UnicodeDecodeError):
        return None


class OffsetsSnapshot:
    """Every group's committed offsets on one cluster, read from `__consumer_offsets` by ONE consumer
    (manual assignment of all its partitions from the beginning, read_committed, no group, no
    commits) in a thread of its own: the OffsetFetch of N groups becomes one fetch stream whose
    requests do not depend on N. A cycle asks `committed(group, topic, partitions, end)` with the
    end offset of the group's `__consumer_offsets` partition read by the watermark batch BEFORE the
    topic's end offsets: the answer holds every commit made before that read (so never a commit
    beyond the topic's end). Not caught up within the wait (first load, a stalled fetch) or not
    readable (no permission on the internal topic): None, and the cycle falls back to its group's
    own OffsetFetch (`AdminHandle.committed`)."""

    def __init__(self, consumer_factory: Callable[[], Any], poll_s: float = 0.2) -> None:
        self._factory = consumer_factory
        self._poll_s = poll_s
        self._cond = threading.Condition()
        self._offsets: dict[tuple[str, str], dict[int, tuple[int, str | None]]] = {}
        self._pos: dict[int, int] = {}
        self._wanted: dict[int, int] = {}  # partition -> end offset a waiting cycle needs read
        self.partitions: int | None = None
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed_at = 0.0
        self.records = 0

    RESTART_S = 60.0  # a failed snapshot (broker down at start, no permission) is retried this often

    def start(self) -> None:
        """Start the reading thread; after a failure, start it again once RESTART_S have passed."""
        with self._cond:
            if self._stop.is_set():
                return
            if self._thread is not None and self.failed is not None and not self._thread.is_alive() \
                    and time.monotonic() - self._failed_at >= self.RESTART_S:
                self._thread, self.failed, self.partitions = None, None, None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lagpilot-offsets-snapshot", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def healthy(self) -> bool:
        return self.failed is None and self.partitions is not None

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        consumer = None
        try:
            consumer = self._factory()
            md = consumer.list_topics(OFFSETS_TOPIC, timeout=10)
            t = md.topics.get(OFFSETS_TOPIC)
            if t is None or t.error is not None or not t.partitions:
                raise RuntimeError(f"{OFFSETS_TOPIC} not readable ({_error_name(t.error) if t is not None and t.error else 'absent'})")
            tps = [TopicPartition(OFFSETS_TOPIC, p, OFFSET_BEGINNING) for p in sorted(t.partitions)]
            consumer.assign(tps)
            with self._cond:
                self.partitions = len(tps)
            every = {tp.partition for tp in tps}
            eof_seen: set[int] = set()
            active = set(every)
            while not self._stop.is_set():
                # fetch only while a cycle waits for a partition (or during the first load): a
                # caught-up snapshot is paused, so its Fetch requests follow the batches, not the
                # commit traffic of the cluster
                with self._cond:
                    behind = {p for p, e in self._wanted.items() if self._pos.get(p, -1) < e}
                want = set(every) if eof_seen != every else behind
                if want != active:
                    if every - want:
                        consumer.pause([TopicPartition(OFFSETS_TOPIC, p) for p in sorted(every - want)])
                    if want:
                        consumer.resume([TopicPartition(OFFSETS_TOPIC, p) for p in sorted(want)])
                    active = want
                msgs = consumer.consume(num_messages=5000, timeout=self._poll_s if active else 0.05)
                updates = []
                eofs: dict[int, int] = {}
                for m in msgs:
                    if m.error() is not None:
                        if _error_name(m.error()) == "_PARTITION_EOF":
                            eofs[m.partition()] = m.offset()  # the end, past any control records
                            continue
                        if _error_name(m.error()) in _AUTHZ:
                            raise RuntimeError(f"{OFFSETS_TOPIC}: {_error_name(m.error())}")
                        continue
                    rec = parse_offset_commit(m.key(), m.value())
                    if rec is not None:
                        updates.append(rec)
                pos = consumer.position([TopicPartition(OFFSETS_TOPIC, tp.partition) for tp in tps])
                with self._cond:
                    self.records += len(msgs)
                    for group, topic, part, val in updates:
                        d = self._offsets.setdefault((group, topic), {})
                        if val is None:
                            d.pop(part, None)
                        else:
                            d[part] = val
                    for tp in pos:
                        if tp.offset is not None and tp.offset >= 0:
                            self._pos[tp.partition] = max(self._pos.get(tp.partition, -1), tp.offset)
                    for part, off in eofs.items():
                        eof_seen.add(part)
                        if off is not None and off >= 0:
                            self._pos[part] = max(self._pos.get(part, -1), off)
                    self._cond.notify_all()
        except Exception as err:  # noqa: BLE001 - the cycles fall back to per-group OffsetFetch
            with self._cond:
                self.failed = str(err)[:200]
                self._failed_at = time.monotonic()
                self._cond.notify_all()
            log.warning("offsets snapshot stopped; per-group OffsetFetch is used", extra={"error": self.failed})
        finally:
            _close_quietly(consumer)

    def group_partition(self, group_id: str) -> int | None:
        n = self.partitions
        return offsets_partition_for(group_id, n) if n else None

    def committed(self, group_id: str, topic: str, partitions: list[int], end: int,
                  timeout_s: float) -> list[tuple[int, int | None, str | None]] | None:
        """[(partition, committed offset or None, metadata)] once the snapshot has read its group's
        `__consumer_offsets` partition up to `end`; None when it cannot within `timeout_s`."""
        gp = self.group_partition(group_id)
        if gp is None:
            return None
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._pos.get(gp, -1) < end:
                self._wanted[gp] = max(self._wanted.get(gp, -1), end)  # wakes the (paused) fetching
            while self._pos.get(gp, -1) < end:
                left = deadline - time.monotonic()
                if self.failed is not None or left <= 0:
                    return None
                self._cond.wait(left)
            d = self._offsets.get((group_id, topic), {})
            return [(p, *(d.get(p) or (None, None))) for p in partitions]


@dataclasses.dataclass(frozen=True)
class TopicWatermarks:
    """One topic's partitions with their log start and end (LSO) offsets, from one shared batch."""

    partitions: tuple[int, ...]
    earliest: Mapping[int, int]
    latest: Mapping[int, int]
    # end offsets of `__consumer_offsets` partitions, read BEFORE `latest` (OffsetsSnapshot); {}: not read
    offsets_ends: Mapping[int, int] = dataclasses.field(default_factory=dict)


class _Batch:
    def __init__(self) -> None:
        self.topics: set[str] = set()
        self.results: dict[str, TopicWatermarks | BaseException] = {}
        self.done = threading.Event()


class WatermarkBatcher:
    """Per cluster: the watermark reads of every cycle that arrives within `window_s` of the first
    one share ONE DescribeTopics (all their topics) and ONE ListOffsets earliest + ONE ListOffsets
    latest (all partitions of all those topics). The first caller of a batch leads: it waits the
    window, closes the batch, issues the three requests (DescribeTopics; ListOffsets earliest of the
    topics + latest of `__consumer_offsets` when the snapshot runs; then ListOffsets latest of the
    topics) and hands each topic its answer (or its own error: a missing topic fails only the
    cycles observing it). The others wait for that, bounded
    by their own timeout. Kafka round trips per batch: 3, whatever the number of CRs (librdkafka
    sends a ListOffsets per partition-leader broker: 1 on a one-broker cluster).

    `call(timeout_s, fn)` runs `fn(admin_client)` under the handle lock (`AdminHandle.call`).
    """

    def __init__(self, call: Callable[[float, Callable[[Any], Any]], Any], window_s: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep,
                 offsets_partitions: Callable[[], int | None] = lambda: None) -> None:
        self._call = call
        self._offsets_partitions = offsets_partitions
        self.window_s = window_s
        self._sleep = sleep
        self._lock = threading.Lock()
        self._open: _Batch | None = None
        self.batches = 0  # batches issued (for tests and the bench)

    def get(self, topic: str, timeout_s: float) -> TopicWatermarks:
        """The topic's watermarks from the current (or next) batch; raises its error, or
        TimeoutError within about `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            batch = self._open
            lead = batch is None
            if batch is None:
                batch = self._open = _Batch()
            batch.topics.add(topic)
        if lead:
            try:
                self._sleep(min(self.window_s, max(0.0, (deadline - time.monotonic()) / 2)))
            finally:
                with self._lock:
                    if self._open is batch:
                        self._open = None  # later arrivals start the next batch
            self._run(batch, deadline)
        elif not batch.done.wait(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError("the shared watermark batch did not answer in time")
        result = batch.results.get(topic)
        if result is None:
            raise TimeoutError("the shared watermark batch gave no answer for the topic")
        if isinstance(result, BaseException):
            raise result
        return result

    def _run(self, batch: _Batch, deadline: float) -> None:
        from confluent_kafka import IsolationLevel, TopicCollection, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        def left() -> float:
            return max(0.1, deadline - time.monotonic())

        topics = sorted(batch.topics)
        try:
            self.batches += 1
            desc_f = self._call(left(), lambda admin: admin.describe_topics(
                TopicCollection(topics), request_timeout=left()))
            _count("describe_topics")
            ids: dict[str, list[int]] = {}
            for t in topics:
                try:
                    desc = desc_f[t].result(timeout=left())
                    ids[t] = sorted(p.id for p in desc.partitions)
                except BaseException as err:  # noqa: BLE001 - this topic's own error
                    batch.results[t] = err
            tps = [TopicPartition(t, i) for t in sorted(ids) for i in ids[t]]
            n_off = self._offsets_partitions()
            off_tps = [TopicPartition(OFFSETS_TOPIC, p) for p in range(n_off or 0)]
            earliest: dict[tuple[str, int], Any] = {}
            latest: dict[tuple[str, int], Any] = {}
            offsets_ends: dict[int, int] = {}
            if tps:
                kw = {"request_timeout": left(), "isolation_level": IsolationLevel.READ_COMMITTED}
                # request A: the topics' log starts AND the __consumer_offsets ends, awaited before
                # request B asks for the topics' ends (so B follows every commit A's ends cover)
                first_f = self._call(left(), lambda admin: admin.list_offsets(
                    {**{tp: OffsetSpec.latest() for tp in off_tps}, **{tp: OffsetSpec.earliest() for tp in tps}}, **kw))
                _count("list_offsets")
                for tp, f in first_f.items():
                    try:
                        off = f.result(timeout=left()).offset
                    except BaseException as err:  # noqa: BLE001 - fails that partition's topic
                        off = err
                    if tp.topic == OFFSETS_TOPIC:
                        if not isinstance(off, BaseException):  # else: those groups fall back
                            offsets_ends[tp.partition] = int(off)
                    else:
                        earliest[(tp.topic, tp.partition)] = off
                latest_f = self._call(left(), lambda admin: admin.list_offsets(
                    {tp: OffsetSpec.latest() for tp in tps}, **kw))
                _count("list_offsets")
                for tp, f in latest_f.items():
                    try:
                        latest[(tp.topic, tp.partition)] = f.result(timeout=left()).offset
                    except BaseException as err:  # noqa: BLE001 - fails that partition's topic
                        latest[(tp.topic, tp.partition)] = err
            for t, parts in ids.items():
                if not parts:
                    batch.results[t] = _NoPartitions()
                    continue
                err = next((v for m in (earliest, latest) for p in parts
                            if isinstance(v := m.get((t, p)), BaseException) or v is None), None)
                if err is not None:
                    batch.results[t] = err if isinstance(err, BaseException) else TimeoutError("no offsets")
                    continue
                batch.results[t] = TopicWatermarks(
                    tuple(parts), {p: int(earliest[(t, p)]) for p in parts}, {p: int(latest[(t, p)]) for p in parts},
                    offsets_ends)
        except BaseException as err:  # noqa: BLE001 - every waiting cycle gets the batch's error
            for t in topics:
                batch.results.setdefault(t, err)
        finally:
            batch.done.set()


class _NoPartitions(Exception):
    """DescribeTopics answered a topic without partitions."""


class AdminHandle:
    """An AdminClient plus the last client-level error its error callback saw (for classification),
    and, made on first use: one shared "peek" consumer of the same cluster (`peek_oldest`) and one
    offsets reader per observed group (`committed`).

    Lifetime: `AdminPool.lease` counts the cycles using the handle; a handle dropped from the pool
    is closed by the last lease to end (in a helper thread), never under a running cycle.
    """

    GROUP_IDLE_S = 600.0  # an offsets reader unused this long is closed (its CR went away)

    def __init__(self, client: Any, bootstrap: str,
                 consumer_factory: Callable[[], Any] | None = None,
                 group_reader_factory: Callable[[str], Any] | None = None,
                 batch_window_s: float = 0.0,
                 snapshot_consumer_factory: Callable[[], Any] | None = None):
        self.client = client
        self.bootstrap = bootstrap
        self._lock = threading.Lock()  # all calls into `client` (requests, poll) and `_last_error`
        self._last_error: tuple[str, float] | None = None  # (error name, when)
        self._consumer_factory = consumer_factory
        self._consumer: Any = None
        self.peek_lock = threading.Lock()  # a Consumer is not safe for concurrent assign/consume
        self._group_reader_factory = group_reader_factory
        self._groups: dict[str, _GroupReader] = {}
        self._groups_lock = threading.Lock()
        self._leases = 0
        self._retired = False
        self._closed = False
        self._state_lock = threading.Lock()
        self.snapshot = OffsetsSnapshot(snapshot_consumer_factory) if snapshot_consumer_factory else None
        self.watermarks = WatermarkBatcher(
            self.call, batch_window_s,
            offsets_partitions=lambda: self.snapshot.partitions if self.snapshot and self.snapshot.healthy else None)
        self._partitions: dict[str, tuple[int, ...]] = {}  # topic -> partitions (from the batches)

    # --- lifetime ---------------------------------------------------------------------------------
    def _lease(self) -> None:
        with self._state_lock:
            self._leases += 1

    def _unlease(self) -> None:
        with self._state_lock:
            self._leases -= 1
            close = self._retired and self._leases <= 0 and not self._closed
        if close:
            self._close_soon()

    def retire(self) -> None:
        """No new leases will come (the pool dropped it): close now if unused, else at the last lease."""
        with self._state_lock:
            self._retired = True
            close = self._leases <= 0 and not self._closed
        if close:
            self._close_soon()

    def _close_soon(self) -> None:
        # closing a consumer can wait on the network: never in the caller (the event loop, a cycle)
        threading.Thread(target=self.close, name="lagpilot-kafka-close", daemon=True).start()

    def close(self) -> None:
        """Close the consumers and drop the admin client (librdkafka destroys it when collected)."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        if self.snapshot is not None:
            self.snapshot.stop()
        with self.peek_lock:
            consumer, self._consumer = self._consumer, None
            _close_quietly(consumer)
        with self._groups_lock:
            readers, self._groups = list(self._groups.values()), {}
        for r in readers:
            with r.lock:
                _close_quietly(r.consumer)
        with self._lock:
            self.client = None

    # --- the peek consumer ------------------------------------------------------------------------
    def peek_consumer(self) -> Any:
        """The shared peek consumer (call with `peek_lock` held); None when none can be made."""
        if self._consumer is None and self._consumer_factory is not None and not self._closed:
            self._consumer = self._consumer_factory()
        return self._consumer

    # --- committed offsets (OffsetFetch) ----------------------------------------------------------
    def committed(self, group_id: str, topic: str, partitions: list[int], timeout_s: float) -> list[Any]:
        """The group's committed offsets (with metadata) for `partitions`; raises KafkaException /
        TimeoutError. Through a per-group Consumer: see the module docstring for why not the admin API."""
        from confluent_kafka import TopicPartition

        return self.committed_tps(group_id, [TopicPartition(topic, p) for p in partitions], timeout_s)

    def committed_tps(self, group_id: str, tps: list[Any], timeout_s: float) -> list[Any]:
        """`committed` for any TopicPartitions (several topics allowed)."""
        deadline = time.monotonic() + timeout_s
        reader = self._group_reader(group_id)
        with _timed_lock(reader.lock, deadline - time.monotonic(), "offsets reader"):
            reader.last_used = time.monotonic()
            _count("offset_fetch")
            out = reader.consumer.committed(list(tps), timeout=max(0.1, deadline - time.monotonic()))
            try:
                reader.consumer.poll(0)  # serve its queued log lines (no assignment: returns None)
            except Exception:  # noqa: BLE001 - a fake or closed consumer: nothing to serve
                pass
        self._close_idle_readers()
        return list(out)

    def safe_admin(self, timeout_s: float = 10.0) -> "SafeAdmin":
        """The admin client for other modules (the drain): calls under the handle lock, and
        `list_consumer_group_offsets` through the per-group readers (it would crash librdkafka)."""
        return SafeAdmin(self, timeout_s)

    def _group_reader(self, group_id: str) -> _GroupReader:
        if self._group_reader_factory is None:
            raise RuntimeError("no offsets reader factory configured")
        with self._groups_lock:
            if self._closed:
                raise RuntimeError("kafka handle closed")
            reader = self._groups.get(group_id)
            if reader is None:
                reader = _GroupReader(self._group_reader_factory(group_id))
                self._groups[group_id] = reader
            reader.last_used = time.monotonic()
            return reader

    def _close_idle_readers(self) -> None:
        now = time.monotonic()
        idle: list[_GroupReader] = []
        with self._groups_lock:
            for gid, r in list(self._groups.items()):
                if now - r.last_used > self.GROUP_IDLE_S and r.lock.acquire(blocking=False):
                    del self._groups[gid]
                    idle.append(r)
        for r in idle:  # removed from the map and locked by us: nobody else can be using it
            try:
                _close_quietly(r.consumer)
            finally:
                r.lock.release()

    def offsets_snapshot(self) -> OffsetsSnapshot | None:
        """The cluster's `__consumer_offsets` snapshot, started on first use; None when disabled."""
        if self.snapshot is not None and not self._closed:
            self.snapshot.start()
        return self.snapshot

    def known_partitions(self, topic: str) -> list[int]:
        """The topic's partitions as last seen by a watermark batch ([] until then)."""
        return list(self._partitions.get(topic, ()))

    def remember_partitions(self, topic: str, ids: list[int]) -> None:
        if len(self._partitions) > 10_000:
            self._partitions.clear()
        self._partitions[topic] = tuple(ids)

    def group_readers(self) -> int:
        with self._groups_lock:
            return len(self._groups)

    # --- the admin client -------------------------------------------------------------------------
    def call(self, timeout_s: float, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(admin_client)` (issuing requests returns futures at once) under the handle lock."""
        with _timed_lock(self._lock, timeout_s, "kafka admin client"):
            if self.client is None:
                raise RuntimeError("kafka handle closed")
            return fn(self.client)

    def on_error(self, err: Any) -> None:
        """error_cb: librdkafka calls it from `poll()` only, i.e. from `serve()` with `_lock` held."""
        self._last_error = (_error_name(err), time.monotonic())

    def serve(self, timeout_s: float = 0.25) -> None:
        """Serve the admin client's queued callbacks (error_cb, log lines): the only poll() call."""
        if not self._lock.acquire(timeout=timeout_s):
            return
        try:
            if self.client is not None:
                self.client.poll(0)
        except Exception:  # noqa: BLE001 - a fake or closed client: nothing to serve
            pass
        finally:
            self._lock.release()

    def recent_error(self, within_s: float = 60.0) -> str | None:
        self.serve()
        last = self._last_error
        if last and time.monotonic() - last[1] <= within_s:
            return last[0]
        return None


class SafeAdmin:
    """Stands in for the shared AdminClient in other modules (same method names).

    Every call is made under the handle's lock (taken with a timeout); `list_consumer_group_offsets`
    is answered by the per-group offsets readers (blocking up to `request_timeout`, then returned as
    completed futures, as the admin API would): the admin API's own OffsetFetch can SIGSEGV the
    process (module docstring).
    """

    def __init__(self, handle: AdminHandle, timeout_s: float) -> None:
        self._handle = handle
        self._timeout_s = timeout_s

    def list_consumer_group_offsets(self, requests: list[Any], request_timeout: float | None = None,
                                    **_: Any) -> dict[str, concurrent.futures.Future]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        timeout = request_timeout or self._timeout_s
        out: dict[str, concurrent.futures.Future] = {}
        for req in requests:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            try:
                tps = self._handle.committed_tps(req.group_id, list(req.topic_partitions or []), timeout)
                fut.set_result(ConsumerGroupTopicPartitions(req.group_id, tps))
            except Exception as err:  # noqa: BLE001 - delivered through the future, like the admin API
                fut.set_exception(err)
            out[req.group_id] = fut
        return out

    def __getattr__(self, name: str) -> Any:
        if name == "list_consumer_group_offsets":  # pragma: no cover - defined above
            raise AttributeError(name)

        def locked(*args: Any, **kwargs: Any) -> Any:
            _count("admin_other")
            return self._handle.call(self._timeout_s, lambda client: getattr(client, name)(*args, **kwargs))
        return locked


def _close_quietly(consumer: Any) -> None:
    if consumer is None:
        return
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing a broken consumer: nothing to do
        pass


def _default_factory(conf: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient(conf)


_CONSUMER_ONLY_DROPPED = ("client.id", "error_cb")  # consumer errors surface in consume()/committed()


def _consumer_base(conf: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in conf.items() if k not in _CONSUMER_ONLY_DROPPED}


def _peek_consumer_factory(conf: Mapping[str, Any]) -> Callable[[], Any]:
    """A consumer that only reads one record per lagging partition: it never joins or commits to
    any group (manual assign; the group.id is required by librdkafka but never used on the broker
    side for assign + consume without commits)."""
    def make() -> Any:
        from confluent_kafka import Consumer
        return Consumer({
            **_consumer_base(conf),
            "client.id": "lagpilot-operator-peek",
            "group.id": "lagpilot-operator-peek",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
            # one record per partition is all we want: keep fetches small (librdkafka requires
            # fetch.max.bytes >= message.max.bytes; at least one record is always returned)
            "message.max.bytes": 65536,
            "fetch.max.bytes": 65536,
            "max.partition.fetch.bytes": 4096,
            "fetch.wait.max.ms": 100,
            "queued.max.messages.kbytes": 1024,
        })
    return make


def _group_reader_factory(conf: Mapping[str, Any]) -> Callable[[str], Any]:
    """A Consumer with the observed group's id, for `committed()` only: it never subscribes (so it
    never joins the group or triggers a rebalance) and never commits."""
    def make(group_id: str) -> Any:
        from confluent_kafka import Consumer
        return Consumer({
            **_consumer_base(conf),
            "client.id": "lagpilot-operator-offsets",
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        })
    return make


def _snapshot_enabled() -> bool:
    """LAGPILOT_OFFSETS_SNAPSHOT (default true): read committed offsets from one `__consumer_offsets`
    consumer per cluster (OffsetsSnapshot) instead of one OffsetFetch per CR cycle."""
    import os
    return os.environ.get("LAGPILOT_OFFSETS_SNAPSHOT", "true").lower() not in ("0", "false", "no")


def _snapshot_consumer_factory(conf: Mapping[str, Any]) -> Callable[[], Any]:
    def make() -> Any:
        from confluent_kafka import Consumer
        return Consumer({
            **_consumer_base(conf),
            "client.id": "lagpilot-operator-offsets-snapshot",
            "group.id": "lagpilot-operator-offsets-snapshot",  # never joined, never committed to
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",  # compaction/retention moved the start: never skip ahead
            "fetch.wait.max.ms": 500,
            # its Fetch requests are counted (lagpilot_kafka_requests_total{kind="offsets_topic_fetch"})
            # from librdkafka's statistics, served by consume() in the snapshot's own thread
            "statistics.interval.ms": 5000,
            "stats_cb": _FetchCounter(),
        })
    return make


class _FetchCounter:
    """stats_cb: counts the Fetch requests librdkafka sent to the brokers since the last report."""

    def __init__(self) -> None:
        self._last = 0

    def __call__(self, stats_json: str) -> None:
        try:
            brokers = json.loads(stats_json).get("brokers") or {}
            total = sum(int(((b.get("req") or {}).get("Fetch")) or 0) for b in brokers.values())
        except (ValueError, TypeError, AttributeError):
            return
        if total >= self._last:
            _count("offsets_topic_fetch", total - self._last)
        self._last = total


class AdminPool:
    """AdminClients shared across CRs, keyed by configuration hash, reference-counted by owner."""

    def __init__(self, factory: Callable[[dict[str, Any]], Any] = _default_factory,
                 socket_timeout_ms: int = 10_000,
                 consumer_factory: Callable[[Mapping[str, Any]], Callable[[], Any]] | None = _peek_consumer_factory,
                 group_reader_factory: Callable[[Mapping[str, Any]], Callable[[str], Any]] | None = _group_reader_factory,
                 batch_window_s: float | None = None,
                 snapshot_factory: Callable[[Mapping[str, Any]], Callable[[], Any]] | None = None):
        self._factory = factory
        self._snapshot_factory = snapshot_factory if snapshot_factory is not None else (
            _snapshot_consumer_factory if _snapshot_enabled() and factory is _default_factory else None)
        self._batch_window_s = default_batch_window_s() if batch_window_s is None else batch_window_s
        self._consumer_factory = consumer_factory
        self._group_reader_factory = group_reader_factory
        self._socket_timeout_ms = socket_timeout_ms
        self._lock = threading.Lock()
        self._handles: dict[str, AdminHandle] = {}
        self._owners: dict[str, str] = {}  # owner (namespace/name) -> key

    def acquire(self, owner: str, conf: Mapping[str, str]) -> AdminHandle:
        """The shared handle for `conf`; switching an owner to a new config releases the old one.
        Prefer `lease`, which also keeps the handle open while the caller uses it."""
        return self._acquire(owner, conf, lease=False)

    @contextlib.contextmanager
    def lease(self, owner: str, conf: Mapping[str, str]) -> Iterator[AdminHandle]:
        """`acquire` + a lease: the handle is not closed before the `with` block ends, even if the
        owner is released (or switches configuration) meanwhile from another thread."""
        handle = self._acquire(owner, conf, lease=True)
        try:
            yield handle
        finally:
            handle._unlease()

    def _acquire(self, owner: str, conf: Mapping[str, str], lease: bool) -> AdminHandle:
        key = config_key(conf)
        with self._lock:
            old = self._owners.get(owner)
            if old != key:
                self._owners[owner] = key
                if old is not None:
                    self._drop_if_unused(old)
            handle = self._handles.get(key)
            if handle is None:
                holder: list[AdminHandle] = []
                full = {
                    **conf,
                    "socket.timeout.ms": self._socket_timeout_ms,
                    # a dead broker is retried every 1-5 s: not hammered, not forgotten for minutes
                    "reconnect.backoff.ms": 1_000,
                    "reconnect.backoff.max.ms": 5_000,
                    # librdkafka's own log lines go to the JSON log; confluent-kafka sets
                    # log.queue=true with a logger: served by poll()/consume() in the caller's thread
                    "logger": _KAFKA_LOG,
                    # served by AdminClient.poll() only (AdminHandle.serve, under the handle lock)
                    "error_cb": lambda err: holder[0].on_error(err) if holder else None,
                    "client.id": "lagpilot-operator",
                }
                try:
                    client = self._factory(full)
                except Exception as err:  # noqa: BLE001 - e.g. a TLS key librdkafka cannot load
                    # the text of a client-creation error may quote configuration: only its code
                    raise ObserveError("KafkaConfigInvalid", f"cannot create a Kafka client for "
                                       f"{conf.get('bootstrap.servers', '')} from spec.kafka and its Secret "
                                       f"({_error_name(err)}); check the TLS/SASL material") from None
                handle = AdminHandle(client, conf.get("bootstrap.servers", ""),
                                     self._consumer_factory(full) if self._consumer_factory else None,
                                     self._group_reader_factory(full) if self._group_reader_factory else None,
                                     self._batch_window_s,
                                     self._snapshot_factory(full) if self._snapshot_factory else None)
                holder.append(handle)
                self._handles[key] = handle
                log.info("kafka admin client created", extra={"bootstrap": handle.bootstrap,
                                                              "clients": len(self._handles)})
            if lease:
                handle._lease()  # under the pool lock: a concurrent release cannot close it first
            return handle

    def release(self, owner: str) -> None:
        with self._lock:
            key = self._owners.pop(owner, None)
            if key is not None:
                self._drop_if_unused(key)

    def _drop_if_unused(self, key: str) -> None:
        if key not in self._owners.values():
            handle = self._handles.pop(key, None)
            if handle is not None:
                handle.retire()  # closed now if no lease, else when the last lease ends

    def size(self) -> int:
        with self._lock:
            return len(self._handles)


# --- error classification ------------------------------------------------------------------------

_UNREACHABLE = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_DESTROY", "NETWORK_EXCEPTION",
                "BROKER_NOT_AVAILABLE", "_SSL"}
_AUTHN = {"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE",
          "UNSUPPORTED_SASL_MECHANISM"}
_AUTHZ = {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
          "CLUSTER_AUTHORIZATION_FAILED"}
_MISSING = {"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"}
_TIMEOUT = {"_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"}


def _error_name(err: Any) -> str:
    """KafkaError / KafkaException → its code name (`_TRANSPORT`, `UNKNOWN_TOPIC_OR_PART`, ...)."""
    inner = err.args[0] if getattr(err, "args", None) and hasattr(err.args[0], "name") else err
    try:
        return str(inner.name())
    except Exception:  # noqa: BLE001 - not a KafkaError
        return type(err).__name__


def classify(err: BaseException, handle: AdminHandle | None, topic: str, bootstrap: str) -> ObserveError:
    """Map a failed call to a user-facing reason. A timeout is reported as the recent client error
    behind it (broker down, authentication) when the error callback saw one."""
    if isinstance(err, ObserveError):
        return err
    name = _error_name(err)
    if name in _TIMEOUT or isinstance(err, (TimeoutError, concurrent.futures.TimeoutError)):
        recent = handle.recent_error() if handle else None
        name = recent or "_TIMED_OUT"
        if name in _TIMEOUT:
            return ObserveError("KafkaTimeout", f"no answer from the Kafka cluster at {bootstrap} in time; "
                                                "is it reachable, and is spec.kafka.securityProtocol right?")
    if name in _MISSING:
        return ObserveError("TopicNotFound", f"topic {topic!r} does not exist on {bootstrap}")
    if name in _AUTHN:
        return ObserveError("AuthenticationFailed", f"the Kafka cluster at {bootstrap} rejected the "
                                                    "credentials from spec.kafka.secretRef")
    if name in _AUTHZ:
        return ObserveError("AuthorizationFailed", f"the Kafka principal may not describe topic "
                                                   f"{topic!r} or its group on {bootstrap} ({name})")
    if name in _UNREACHABLE:
        return ObserveError("BrokerUnreachable", f"cannot connect to the Kafka cluster at {bootstrap} ({name})")
    return ObserveError("KafkaError", f"Kafka request to {bootstrap} failed ({name})")


# --- the observation -----------------------------------------------------------------------------

def observe(handle: AdminHandle, topic: str, group_id: str, timeout_s: float = 10.0,
            clock: Callable[[], float] = time.time) -> Observation:
    """Partition count, earliest/latest/committed offsets and capacity reports for one group.

    Returns or raises ObserveError within about `timeout_s`: every lock and every wait is bounded.
    """
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    handle.serve()  # served callbacks of this shared client (error_cb, log lines)
    try:
        # the group's commits first, then the shared watermark batch: the end offsets are read
        # after the commits, so a commit never appears beyond the end (lag >= 0)
        snap = handle.offsets_snapshot()
        if snap is not None and snap.healthy:
            # one fetch stream per cluster instead of an OffsetFetch per group (OffsetsSnapshot)
            wm = handle.watermarks.get(topic, left())
            gp = snap.group_partition(group_id)
            end = wm.offsets_ends.get(gp) if gp is not None else None
            got = (snap.committed(group_id, topic, list(wm.partitions), end, min(2.0, left() / 2))
                   if end is not None else None)
            if got is not None:
                handle.remember_partitions(topic, list(wm.partitions))
                return _observation(topic, group_id, wm, [
                    (p, off if off is not None and off >= 0 else None, meta) for p, off, meta in got], clock())
            _count("snapshot_fallback")
        ids_hint = handle.known_partitions(topic)
        committed_tps = handle.committed(group_id, topic, ids_hint, left()) if ids_hint else None
        wm = handle.watermarks.get(topic, left())
        ids = list(wm.partitions)
        if committed_tps is None or sorted(tp.partition for tp in committed_tps) != ids:
            # first cycle for this topic, or its partition count changed: fetch for the real set
            # (re-read the watermarks so they still follow the commits)
            committed_tps = handle.committed(group_id, topic, ids, left())
            wm = handle.watermarks.get(topic, left())
            ids = list(wm.partitions)
        handle.remember_partitions(topic, ids)
        now = clock()
    except ObserveError:
        raise
    except _NoPartitions:
        raise ObserveError("TopicNotFound", f"topic {topic!r} has no partitions on {handle.bootstrap}") from None
    except Exception as err:  # noqa: BLE001 - every Kafka failure is classified for the user
        raise classify(err, handle, topic, handle.bootstrap) from None

    rows: list[tuple[int, int | None, str | None]] = []
    for tp in committed_tps:
        if tp.error is not None:
            raise classify(_as_exception(tp.error), handle, topic, handle.bootstrap)
        off = tp.offset if tp.offset is not None and tp.offset >= 0 else None
        rows.append((tp.partition, off, getattr(tp, "metadata", None)))
    return _observation(topic, group_id, wm, rows, now)


def _observation(topic: str, group_id: str, wm: TopicWatermarks,
                 rows: list[tuple[int, int | None, str | None]], now: float) -> Observation:
    committed = {p: (off, parse_capacity_metadata(meta)) for p, off, meta in rows}
    parts = tuple(
        PartitionOffsets(partition=i, earliest=int(wm.earliest[i]), latest=int(wm.latest[i]),
                         committed=committed.get(i, (None, None))[0],
                         capacity=committed.get(i, (None, None))[1])
        for i in wm.partitions if i in wm.earliest and i in wm.latest
    )
    return Observation(topic=topic, group_id=group_id, observed_at=now, partitions=parts)


def committed_offsets(handle: AdminHandle, group_id: str, topic: str, partitions: list[int],
                      timeout_s: float) -> dict[int, int | None]:
    """A group's committed offset per partition (None: none committed), for other modules (the
    drain's progress groups): use this, not `AdminClient.list_consumer_group_offsets` (see the
    module docstring: that call can crash the process). Raises ObserveError."""
    try:
        tps = handle.committed(group_id, topic, list(partitions), timeout_s)
    except Exception as err:  # noqa: BLE001 - classified for the caller
        raise classify(err, handle, topic, handle.bootstrap) from None
    out: dict[int, int | None] = {}
    for tp in tps:
        if tp.error is not None:
            raise classify(_as_exception(tp.error), handle, topic, handle.bootstrap)
        out[tp.partition] = tp.offset if tp.offset is not None and tp.offset >= 0 else None
    return out


def _as_exception(err: Any) -> Exception:
    from confluent_kafka import KafkaException
    return KafkaException(err)


def peek_oldest(handle: AdminHandle, topic: str, positions: Mapping[int, int],
                timeout_s: float = 2.0) -> dict[int, float]:
    """Timestamp (unix seconds) of the record at each given position: the oldest record the group
    has not processed yet, per partition. Best effort: partitions whose record does not arrive in
    time, or whose records carry no timestamp, are left out; failures return what was read.

    One shared consumer per cluster, manual assignment, no group membership, no commits.
    """
    if not positions:
        return {}
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, TopicPartition

    out: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    # another cycle peeking (at most its timeout_s): wait for it within our budget, else skip
    if not handle.peek_lock.acquire(timeout=timeout_s):
        return {}
    try:
        consumer = handle.peek_consumer()
        if consumer is None:
            return {}
        try:
            consumer.assign([TopicPartition(topic, p, off) for p, off in sorted(positions.items())])
            while len(out) < len(positions) and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=len(positions) * 4,
                                            timeout=max(0.05, deadline - time.monotonic())):
                    if msg.error() is not None or msg.topic() != topic:
                        continue
                    p = msg.partition()
                    if p in positions and p not in out and msg.offset() >= positions[p]:
                        ts_type, ts_ms = msg.timestamp()
                        if ts_type != TIMESTAMP_NOT_AVAILABLE and ts_ms > 0:
                            out[p] = ts_ms / 1000.0
                        else:
                            out[p] = float("nan")  # arrived, but without a timestamp
        finally:
            try:
                consumer.unassign()
            except Exception:  # noqa: BLE001
                pass
    except Exception as err:  # noqa: BLE001 - ages are an extra: never fail the cycle for them
        log.info("oldest-record peek failed", extra={"topic": topic, "error": _error_name(err)})
    finally:
        handle.peek_lock.release()
    return {p: ts for p, ts in out.items() if ts == ts}  # drop NaN (no timestamp)
