"""Every group's committed offsets on one Kafka cluster, read from `__consumer_offsets` by ONE consumer.

librdkafka lets a consumer fetch only its own group's commits, and its admin OffsetFetch takes one
group per call (and can crash the process: kafka_admin), so N CRs would mean N OffsetFetches per
poll interval. Instead one consumer per cluster reads `__consumer_offsets` (all partitions, from the
beginning, read_committed, manual assignment: it never joins a group or commits) in a thread of its
own and keeps every group's recent commits with the log offset of each commit record. A reader asks
"the group's commits as of end offset E of its `__consumer_offsets` partition" (E read by the
cluster observation BEFORE the topics' end offsets): the answer holds exactly the commits written
before that read, so never a commit beyond the topic's end, even when the snapshot already read
further. Once loaded, the snapshot's partitions are paused; the cluster observation resumes the
partitions of the registered groups up to the ends it read (`want`), once per observation, so the
snapshot's Fetch requests follow the observations, not the cluster's commit traffic.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from lagpilot.observe.kafka_common import _AUTHZ, _count, _error_name, close_quietly, consumer_base

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


def _java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def offsets_partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition holding a group's commits (Kafka's
    `Utils.abs(groupId.hashCode()) % partitions`; `Utils.abs(MIN_VALUE)` is 0)."""
    h = _java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


def parse_offset_commit(
    key: bytes | None, value: bytes | None
) -> tuple[str, str, int, tuple[int, str | None] | None] | None:
    """One `__consumer_offsets` record → (group, topic, partition, (offset, metadata) or None for a
    deleted offset); None for other record types (group metadata, new-protocol records) or bytes
    this parser does not understand. Key versions 0/1 = OffsetCommitKey; value versions 0-3 plain,
    4+ flexible (compact metadata string, tagged fields after it). Runs for every record of the
    snapshot's first load (hundreds of thousands on a busy cluster): struct, not slices."""
    try:
        k = _offset_commit_key(key)
        if k is None:
            return None
        if value is None:
            return (*k, None)
        commit = _offset_commit_value(value)
        return None if commit is None else (*k, commit)
    except (IndexError, UnicodeDecodeError, struct.error):
        return None


def _offset_commit_key(key: bytes | None) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an OffsetCommitKey (versions 0/1); None for other keys."""
    if not key or len(key) < 2 or _H.unpack_from(key, 0)[0] not in (0, 1):
        return None
    n = _H.unpack_from(key, 2)[0]
    if n < 0 or len(key) < 4 + n:
        return None
    group = key[4 : 4 + n].decode()
    pos = 4 + n
    n = _H.unpack_from(key, pos)[0]
    if n < 0 or len(key) < pos + 2 + n + 4:
        return None
    return group, key[pos + 2 : pos + 2 + n].decode(), _I.unpack_from(key, pos + 2 + n)[0]


def _offset_commit_value(value: bytes) -> tuple[int, str | None] | None:
    """(offset, metadata) of an OffsetCommitValue; None for bytes this parser does not understand."""
    if len(value) < 10:
        return None
    ver = _H.unpack_from(value, 0)[0]
    if ver < 0:
        return None
    offset = _Q.unpack_from(value, 2)[0]
    pos = 14 if ver >= 3 else 10  # + leader epoch from version 3
    ok, metadata = _compact_string(value, pos) if ver >= 4 else _string(value, pos)
    if not ok:
        return None
    if metadata is not None and "\x00" in metadata:
        # confluent-kafka's Python client stores the C string's terminating NUL with the metadata,
        # and reads it back as a C string: cut at the first NUL like it does
        metadata = metadata.split("\x00", 1)[0]
    return offset, metadata


def _compact_string(value: bytes, pos: int) -> tuple[bool, str | None]:
    """A compact nullable string at `pos` (unsigned varint length + 1); (False, None): truncated."""
    n, shift = 0, 0
    while True:
        b = value[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    if n > 0 and len(value) < pos + n - 1:
        return False, None
    return True, (None if n == 0 else value[pos : pos + n - 1].decode())


def _string(value: bytes, pos: int) -> tuple[bool, str | None]:
    """A nullable string at `pos` (int16 length, -1 for null); (False, None): truncated."""
    n = _H.unpack_from(value, pos)[0]
    if n >= 0 and len(value) < pos + 2 + n:
        return False, None
    return True, (None if n < 0 else value[pos + 2 : pos + 2 + n].decode())


Commit = tuple[int, str | None]  # (offset, metadata)


def _pause_resume(consumer: Any, every: set[int], want: set[int], active: set[int]) -> set[int]:
    """Fetch only the partitions wanted: pause the others, resume these; the new active set."""
    from confluent_kafka import TopicPartition

    if want != active:
        if every - want:
            consumer.pause([TopicPartition(OFFSETS_TOPIC, p) for p in sorted(every - want)])
        if want:
            consumer.resume([TopicPartition(OFFSETS_TOPIC, p) for p in sorted(want)])
        return want
    return active


class OffsetsSnapshot:
    """The `__consumer_offsets` reader of one cluster (module docstring). `committed(group, topic,
    partitions, end)` waits (bounded) until the group's partition was read up to `end`; None when it
    cannot (first load of a large topic, a stalled fetch, no permission on the internal topic): the
    caller then falls back to its group's own OffsetFetch."""

    HISTORY = 4  # commit records kept per (group, topic, partition): the answer "as of end" needs the
    # newest record below `end` while the snapshot may have read a few newer ones

    RESTART_S = 60.0  # a failed snapshot (broker down at start, no permission) is retried this often

    def __init__(self, consumer_factory: Callable[[], Any], poll_s: float = 0.2) -> None:
        self._factory = consumer_factory
        self._poll_s = poll_s
        self._cond = threading.Condition()
        # (group, topic) -> partition -> [(log offset of the commit record, commit or None: deleted)]
        self._offsets: dict[tuple[str, str], dict[int, list[tuple[int, Commit | None]]]] = {}
        self._pos: dict[int, int] = {}
        self._wanted: dict[int, int] = {}  # partition -> end offset a reader needs read
        self.partitions: int | None = None
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed_at = 0.0
        self.records = 0
        self.loaded = False  # every partition read to its end once (the first load is done)

    def start(self) -> None:
        """Start the reading thread; after a failure, start it again once RESTART_S have passed."""
        with self._cond:
            if self._stop.is_set():
                return
            if (
                self._thread is not None
                and self.failed is not None
                and not self._thread.is_alive()
                and time.monotonic() - self._failed_at >= self.RESTART_S
            ):
                self._thread, self.failed, self.partitions = None, None, None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lagpilot-offsets-snapshot", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def healthy(self) -> bool:
        return self.failed is None and self.partitions is not None

    def want(self, ends: Mapping[int, int]) -> None:
        """Read these `__consumer_offsets` partitions up to these end offsets (resumes them)."""
        with self._cond:
            changed = False
            for p, end in ends.items():
                if self._pos.get(p, -1) < end and self._wanted.get(p, -1) < end:
                    self._wanted[p] = end
                    changed = True
            if changed:
                self._cond.notify_all()

    def _run(self) -> None:
        """Load every `__consumer_offsets` partition, then fetch only while a reader waits for one
        (a caught-up snapshot is paused); on any error the cycles fall back to OffsetFetch."""
        consumer = None
        try:
            consumer = self._factory()
            every = self._assign(consumer)
            eof_seen: set[int] = set()
            active = set(every)
            while not self._stop.is_set():
                behind = self._behind()
                if not self.loaded and eof_seen == every:
                    self.loaded = True
                    log.info(
                        "offsets snapshot loaded", extra={"partitions": len(every), "records": self.records}
                    )
                active = _pause_resume(consumer, every, set(every) if eof_seen != every else behind, active)
                if not active:
                    self._idle(consumer)
                    continue
                self._read(consumer, active, eof_seen)
        except Exception as err:  # noqa: BLE001 - the cycles fall back to per-group OffsetFetch
            with self._cond:
                self.failed = str(err)[:200]
                self._failed_at = time.monotonic()
                self._cond.notify_all()
            log.warning(
                "offsets snapshot stopped; per-group OffsetFetch is used", extra={"error": self.failed}
            )
        finally:
            close_quietly(consumer)

    def _assign(self, consumer: Any) -> set[int]:
        """Assign every partition of `__consumer_offsets` from its beginning; their numbers."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        md = consumer.list_topics(OFFSETS_TOPIC, timeout=10)
        t = md.topics.get(OFFSETS_TOPIC)
        if t is None or t.error is not None or not t.partitions:
            raise RuntimeError(
                f"{OFFSETS_TOPIC} not readable ({_error_name(t.error) if t is not None and t.error else 'absent'})"
            )
        tps = [TopicPartition(OFFSETS_TOPIC, p, OFFSET_BEGINNING) for p in sorted(t.partitions)]
        consumer.assign(tps)
        with self._cond:
            self.partitions = len(tps)
        return {tp.partition for tp in tps}

    def _behind(self) -> set[int]:
        """The partitions a reader waits for and the snapshot has not reached (the others forgotten)."""
        with self._cond:
            behind = {p for p, e in self._wanted.items() if self._pos.get(p, -1) < e}
            for p in [p for p in self._wanted if p not in behind]:
                del self._wanted[p]
        return behind

    def _idle(self, consumer: Any) -> None:
        with self._cond:  # nothing to read: sleep until a reader wants something
            if not any(self._pos.get(p, -1) < e for p, e in self._wanted.items()):
                self._cond.wait(1.0)
        consumer.poll(0)  # serve queued log lines and statistics

    def _read(self, consumer: Any, active: set[int], eof_seen: set[int]) -> None:
        """One batch: its commit records applied, the positions (and the ends seen) moved."""
        from confluent_kafka import TopicPartition

        msgs = consumer.consume(num_messages=5000, timeout=self._poll_s)
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
                updates.append((m.offset(), rec))
        pos = consumer.position([TopicPartition(OFFSETS_TOPIC, p) for p in sorted(active)])
        with self._cond:
            self.records += len(msgs)
            self._apply(updates)
            moved = bool(updates)
            for tp in pos:
                if tp.offset is not None and tp.offset > self._pos.get(tp.partition, -1):
                    self._pos[tp.partition] = tp.offset
                    moved = True
            for part, off in eofs.items():
                eof_seen.add(part)
                if off is not None and off > self._pos.get(part, -1):
                    self._pos[part] = off
                    moved = True
            if moved:
                self._cond.notify_all()

    def _apply(self, updates: list[tuple[int, tuple[str, str, int, Commit | None]]]) -> None:
        """Record commit records (call with the lock held): the last HISTORY per partition."""
        for log_off, (group, topic, part, val) in updates:
            hist = self._offsets.setdefault((group, topic), {}).setdefault(part, [])
            hist.append((log_off, val))
            if len(hist) > self.HISTORY:
                del hist[0]

    def group_partition(self, group_id: str) -> int | None:
        n = self.partitions
        return offsets_partition_for(group_id, n) if n else None

    def committed(
        self, group_id: str, topic: str, partitions: list[int], end: int, timeout_s: float
    ) -> list[tuple[int, int | None, str | None]] | None:
        """[(partition, committed offset or None, metadata)] as of `end` of the group's
        `__consumer_offsets` partition, once the snapshot has read it up to `end`; None when it
        cannot within `timeout_s`."""
        gp = self.group_partition(group_id)
        if gp is None:
            return None
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._pos.get(gp, -1) < end and self._wanted.get(gp, -1) < end:
                self._wanted[gp] = end  # wakes the (paused) fetching
                self._cond.notify_all()
            while self._pos.get(gp, -1) < end:
                left = deadline - time.monotonic()
                if self.failed is not None or left <= 0:
                    return None
                self._cond.wait(left)
            d = self._offsets.get((group_id, topic), {})
            return [(p, *(_as_of(d.get(p), end) or (None, None))) for p in partitions]


def _as_of(hist: list[tuple[int, Commit | None]] | None, end: int) -> Commit | None:
    """The commit in force before log offset `end`: the newest record below it. When every kept
    record is at or past `end` (more than HISTORY commits of one partition since), the oldest kept
    one (the closest to `end`)."""
    if not hist:
        return None
    before = [val for off, val in hist if off < end]
    return before[-1] if before else hist[0][1]


def _snapshot_consumer_factory(conf: Mapping[str, Any]) -> Callable[[], Any]:
    def make() -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            {
                **consumer_base(conf),
                "client.id": "lagpilot-operator-offsets-snapshot",
                "group.id": "lagpilot-operator-offsets-snapshot",  # never joined, never committed to
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",  # compaction/retention moved the start: never skip ahead
                # a resumed partition is read in few Fetches even while the cluster commits all the time:
                # the broker answers after 100 ms (or 1 MB), not at every new commit record; the
                # snapshot pauses the partition once at the wanted end (before: ~12 Fetches per view
                # with 58 commits/s on one partition, measured)
                "fetch.wait.max.ms": 100,
                "fetch.min.bytes": 1_048_576,
                # its Fetch requests are counted (lagpilot_kafka_requests_total{kind="offsets_topic_fetch"})
                # from librdkafka's statistics, served by consume() in the snapshot's own thread
                "statistics.interval.ms": 5000,
                "stats_cb": _FetchCounter(),
            }
        )

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
