"""One observation of a Kafka cluster, shared by every CR's cycle on it (`ClusterObserver`).

Per cluster, one observer thread reads the watermarks of ALL the topics its CRs observe in one go
(a `ClusterView`): ListOffsets A (the topics' log starts + the ends of `__consumer_offsets`), then,
once A answered, ListOffsets B (the topics' ends, read_committed: the LSO); DescribeTopics only for
topics whose partitions are unknown or were described more than `describe_every_s` (30 s) ago, or
whose offsets failed. Kafka requests per view: 2 (+1 DescribeTopics now and then), whatever the
number of CRs or topics (librdkafka sends one ListOffsets per partition-leader broker).

A cycle asks `view(topic, group, not_before, timeout_s)`: a view whose first request was sent at or
after `not_before` (monotonic seconds). A cycle passes `now - max_age` (its freshness bound, at most
half its poll interval), so every cycle of an interval reuses the view the first one triggered; a
reader that needs a read made after some event (the drain after an offset move) passes that
instant, and gets a new view. A view being read that is fresh enough is waited for, never
duplicated; a request arriving while an older one is in flight queues exactly one next fetch. A
topic's own error (deleted topic, no permission) fails only the cycles observing it; a failed
request fails every topic of that view; nothing is cached past its view.

Registered topics and groups (asked for within `forget_after_s`, 10 min) are read by every view;
the groups say which `__consumer_offsets` partitions the snapshot must catch up on (`on_ends`,
called with A's ends before B is sent). Waits are bounded by the caller's timeout; the observer's
own requests by `fetch_timeout_s`. Time (`clock`, `monotonic`) is injected for tests.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from lagpilot.observe.kafka_common import NoPartitions, _count

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


@dataclasses.dataclass(frozen=True)
class TopicWatermarks:
    """One topic's partitions with their log start and end (LSO) offsets, from one view."""

    partitions: tuple[int, ...]
    earliest: Mapping[int, int]
    latest: Mapping[int, int]
    # end offsets of `__consumer_offsets` partitions, read BEFORE `latest` (OffsetsSnapshot); {}: not read
    offsets_ends: Mapping[int, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ClusterView:
    """What one fetch read: per topic its watermarks or its error."""

    seq: int
    started: float  # monotonic: when its first request was sent (every offset in it is read after)
    read_at: float  # wall clock: when the end offsets answered (the observation's time)
    results: Mapping[str, TopicWatermarks | BaseException]

    def topic(self, topic: str) -> TopicWatermarks:
        r = self.results.get(topic)
        if r is None:
            raise TimeoutError("the cluster observation has no answer for the topic")
        if isinstance(r, BaseException):
            raise r
        return r


CallFn = Callable[[float, Callable[[Any], Any]], Any]


def _watermarks(
    ids: Mapping[str, tuple[int, ...]],
    earliest: Mapping[tuple[str, int], Any],
    latest: Mapping[tuple[str, int], Any],
    offsets_ends: Mapping[int, int],
    described: dict[str, tuple[tuple[int, ...], float]],
) -> dict[str, TopicWatermarks | BaseException]:
    """Each topic's watermarks, or the first error among its partitions' offsets (the topic is then
    described again next time: deleted or re-created?)."""
    out: dict[str, TopicWatermarks | BaseException] = {}
    for t, parts in ids.items():
        err = next(
            (
                v
                for m in (earliest, latest)
                for p in parts
                if isinstance(v := m.get((t, p)), BaseException) or v is None
            ),
            None,
        )
        if err is not None:
            described.pop(t, None)
            out[t] = err if isinstance(err, BaseException) else TimeoutError("no offsets")
            continue
        out[t] = TopicWatermarks(
            tuple(parts),
            {p: int(earliest[(t, p)]) for p in parts},
            {p: int(latest[(t, p)]) for p in parts},
            offsets_ends,
        )
    return out


class ClusterObserver:
    """The per-cluster observation (module docstring). `call(timeout_s, fn)` runs `fn(admin)` under
    the admin handle's lock; `offsets_partitions()` is the `__consumer_offsets` partition count
    while the snapshot runs (None: do not read its ends); `on_ends(ends, groups)` hands A's ends and
    the registered groups to the snapshot."""

    def __init__(
        self,
        call: CallFn,
        offsets_partitions: Callable[[], int | None] = lambda: None,
        on_ends: Callable[[Mapping[int, int], frozenset[str]], None] = lambda e, g: None,
        fetch_timeout_s: float = 10.0,
        describe_every_s: float = 30.0,
        forget_after_s: float = 600.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._call = call
        self._offsets_partitions = offsets_partitions
        self._on_ends = on_ends
        self.fetch_timeout_s = fetch_timeout_s
        self.describe_every_s = describe_every_s
        self.forget_after_s = forget_after_s
        self._clock = clock
        self._mono = monotonic
        self._cond = threading.Condition()
        self._topics: dict[str, float] = {}  # topic -> last asked (monotonic)
        self._groups: dict[str, float] = {}  # group -> last asked
        self._described: dict[str, tuple[tuple[int, ...], float]] = {}  # topic -> (partitions, when)
        self._view: ClusterView | None = None
        self._inflight: tuple[float, frozenset[str]] | None = None  # (started, topics) of the fetch running
        self._due = False  # a waiting reader needs a fetch after the running one
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.fetches = 0  # views fetched (tests, the bench)

    # --- readers ----------------------------------------------------------------------------------
    def view(self, topic: str, group: str | None, not_before: float, timeout_s: float) -> ClusterView:
        """A view holding `topic` whose reads started at or after `not_before`; TimeoutError when
        none arrives within `timeout_s`, RuntimeError once stopped."""
        deadline = self._mono() + timeout_s
        with self._cond:
            now = self._mono()
            self._topics[topic] = now
            if group is not None:
                self._groups[group] = now
            while True:
                if self._stopped:
                    raise RuntimeError("kafka handle closed")
                v = self._view
                if v is not None and v.started >= not_before and topic in v.results:
                    return v
                fl = self._inflight
                if not (fl is not None and fl[0] >= not_before and topic in fl[1]) and not self._due:
                    self._due = True
                    self._ensure_thread()
                    self._cond.notify_all()
                left = deadline - self._mono()
                if left <= 0:
                    raise TimeoutError("the shared cluster observation did not answer in time")
                self._cond.wait(left)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def latest(self) -> ClusterView | None:
        return self._view

    # --- the observer thread ----------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="lagpilot-cluster-observer", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._due and not self._stopped:
                    if not self._cond.wait(60.0):
                        self._forget(self._mono())
                if self._stopped:
                    return
                self._due = False
                now = self._mono()
                self._forget(now)
                topics = frozenset(self._topics)
                groups = frozenset(self._groups)
                self._inflight = (now, topics)
            try:
                results, read_at = self._fetch(sorted(topics), groups, now)
            except BaseException as err:  # a bug: every waiting cycle gets it, the thread lives
                log.exception("cluster observation failed")
                results, read_at = {t: err for t in topics}, self._clock()
            with self._cond:
                self.fetches += 1
                self._view = ClusterView(self.fetches, now, read_at, results)
                self._inflight = None
                self._cond.notify_all()

    def _forget(self, now: float) -> None:
        for d in (self._topics, self._groups):
            for k in [k for k, at in d.items() if now - at > self.forget_after_s]:
                del d[k]
        for t in [t for t in self._described if t not in self._topics]:
            del self._described[t]

    def _fetch(
        self, topics: list[str], groups: frozenset[str], started: float
    ) -> tuple[dict[str, TopicWatermarks | BaseException], float]:
        """One view: describe the topics not described lately, list their log starts (with the
        `__consumer_offsets` ends), then their ends, and build each topic's watermarks. A topic's
        own error is its result; a request's error is every remaining topic's."""
        deadline = started + self.fetch_timeout_s

        def left() -> float:
            return max(0.1, deadline - self._mono())

        results: dict[str, TopicWatermarks | BaseException] = {}
        try:
            self._describe_stale(topics, started, left, results)
            ids = self._partition_ids(topics, results)
            earliest, latest, offsets_ends = self._list_offsets(ids, groups, left)
            read_at = self._clock()
            results.update(_watermarks(ids, earliest, latest, offsets_ends, self._described))
            return results, read_at
        except BaseException as err:  # noqa: BLE001 - every topic of this view gets the request's error
            for t in topics:
                results.setdefault(t, err)
            return results, self._clock()

    def _describe_stale(
        self,
        topics: list[str],
        started: float,
        left: Callable[[], float],
        results: dict[str, TopicWatermarks | BaseException],
    ) -> None:
        """Describe the topics whose partitions were not read within `describe_every_s`."""
        from confluent_kafka import TopicCollection

        stale = [
            t
            for t in topics
            if t not in self._described or started - self._described[t][1] >= self.describe_every_s
        ]
        if not stale:
            return
        desc_f = self._call(
            left(), lambda admin: admin.describe_topics(TopicCollection(stale), request_timeout=left())
        )
        _count("describe_topics")
        for t in stale:
            try:
                desc = desc_f[t].result(timeout=left())
                self._described[t] = (tuple(sorted(p.id for p in desc.partitions)), started)
            except BaseException as err:  # noqa: BLE001 - this topic's own error
                self._described.pop(t, None)
                results[t] = err

    def _partition_ids(
        self, topics: list[str], results: dict[str, TopicWatermarks | BaseException]
    ) -> dict[str, tuple[int, ...]]:
        """The described partitions of each topic still without a result (none: NoPartitions)."""
        ids = {t: self._described[t][0] for t in topics if t not in results and t in self._described}
        for t in [t for t, parts in ids.items() if not parts]:
            results[t] = NoPartitions()
            del ids[t]
        return ids

    def _list_offsets(
        self, ids: Mapping[str, tuple[int, ...]], groups: frozenset[str], left: Callable[[], float]
    ) -> tuple[dict[tuple[str, int], Any], dict[tuple[str, int], Any], dict[int, int]]:
        """(log starts, log ends, `__consumer_offsets` ends); a partition's error is its value.

        Request A reads the topics' log starts AND the `__consumer_offsets` ends, awaited before
        request B asks for the topics' ends (so B follows every commit A's ends cover)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        tps = [TopicPartition(t, i) for t in sorted(ids) for i in ids[t]]
        earliest: dict[tuple[str, int], Any] = {}
        latest: dict[tuple[str, int], Any] = {}
        offsets_ends: dict[int, int] = {}
        if not tps:
            return earliest, latest, offsets_ends
        off_tps = [TopicPartition(OFFSETS_TOPIC, p) for p in range(self._offsets_partitions() or 0)]
        kw = {"request_timeout": left(), "isolation_level": IsolationLevel.READ_COMMITTED}
        first_f = self._call(
            left(),
            lambda admin: admin.list_offsets(
                {**{tp: OffsetSpec.latest() for tp in off_tps}, **{tp: OffsetSpec.earliest() for tp in tps}},
                **kw,
            ),
        )
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
        if offsets_ends:
            try:
                self._on_ends(dict(offsets_ends), groups)  # the snapshot catches up meanwhile
            except Exception:  # the readers wait (bounded) or fall back
                log.exception("offsets snapshot hand-over failed")
        latest_f = self._call(
            left(), lambda admin: admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, **kw)
        )
        _count("list_offsets")
        for tp, f in latest_f.items():
            try:
                latest[(tp.topic, tp.partition)] = f.result(timeout=left()).offset
            except BaseException as err:  # noqa: BLE001 - fails that partition's topic
                latest[(tp.topic, tp.partition)] = err
        return earliest, latest, offsets_ends
