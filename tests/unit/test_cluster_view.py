"""cluster_view.ClusterObserver: one shared read of a Kafka cluster per poll interval, whatever the
number of CRs on it. Admin round trips are counted on a fake AdminClient (and through the request
counter hook the operator's metric uses); no broker."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from lagpilot.observe import kafka_observe as ko
from lagpilot.observe.cluster_view import ClusterObserver
from lagpilot.observe.kafka_observe import AdminHandle, ObserveError, observe, offsets_partition_for
from tests.fixtures.futures import done

OFFSETS_PARTS = 8


class Cluster:
    """A fake AdminClient of a one-broker cluster: topics of 3 partitions, each request recorded."""

    def __init__(self, topics: dict[str, tuple[int, int]], missing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.topics = topics  # topic -> (earliest, latest) of every partition
        self.missing = set(missing)
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.offsets_end = 100  # end offset of every __consumer_offsets partition
        self.fail_next: BaseException | None = None

    def poll(self, t: float) -> int:
        return 0

    def _record(self, what: str) -> None:
        with self.lock:
            self.calls.append(what)
            err, self.fail_next = self.fail_next, None
        if err is not None:
            raise err

    def describe_topics(self, coll: Any, **kw: Any) -> dict[str, concurrent.futures.Future]:
        self._record("describe_topics")
        return {
            t: done(exc=KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            if t in self.missing or t not in self.topics
            else done(SimpleNamespace(partitions=[SimpleNamespace(id=i) for i in range(3)]))
            for t in coll.topic_names
        }

    def list_offsets(self, req: dict[Any, Any], **kw: Any) -> dict[Any, concurrent.futures.Future]:
        self._record("list_offsets")
        out = {}
        for tp, spec in req.items():
            if tp.topic == ko.OFFSETS_TOPIC:
                out[tp] = done(SimpleNamespace(offset=self.offsets_end))
            elif tp.topic in self.missing:
                out[tp] = done(exc=KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            else:
                earliest, latest = self.topics[tp.topic]
                out[tp] = done(SimpleNamespace(offset=earliest if spec._value == -2 else latest))
        return out

    def count(self, what: str) -> int:
        return self.calls.count(what)


class Snapshot:
    """Stands in for OffsetsSnapshot: healthy, caught up to the observer's ends, commits from a table."""

    def __init__(self, commits: dict[str, int]) -> None:
        self.commits = commits
        self.partitions = OFFSETS_PARTS
        self.healthy = True
        self.wanted: list[dict[int, int]] = []
        self.asked_ends: list[int] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def group_partition(self, group_id: str) -> int:
        return offsets_partition_for(group_id, OFFSETS_PARTS)

    def want(self, ends: dict[int, int]) -> None:
        self.wanted.append(dict(ends))

    def committed(self, group_id: str, topic: str, partitions: list[int], end: int, timeout_s: float) -> Any:
        self.asked_ends.append(end)
        return [(p, self.commits.get(group_id), None) for p in partitions]


def handle(cluster: Cluster, snapshot: Snapshot | None) -> AdminHandle:
    readers: dict[str, Any] = {}

    def reader(group_id: str) -> Any:
        def committed(tps: list[Any], timeout: float) -> list[Any]:
            cluster._record(f"offset_fetch:{group_id}")
            return [
                SimpleNamespace(partition=tp.partition, offset=7, error=None, metadata=None) for tp in tps
            ]

        readers[group_id] = SimpleNamespace(committed=committed, poll=lambda t: None, close=lambda: None)
        return readers[group_id]

    h = AdminHandle(cluster, "k:9092", group_reader_factory=reader)
    if snapshot is not None:
        h.snapshot = snapshot  # type: ignore[assignment]
    return h


def run_interval(
    h: AdminHandle,
    crs: int,
    topics: int,
    interval_start: float,
    timeout_s: float = 10.0,
    late: frozenset[int] = frozenset(),
) -> dict[int, Any]:
    """Every CR's cycle of one poll interval, each in its own thread (as the operator's cycle pool
    runs them), each accepting a view no older than the interval's start: `not_before`, the same
    instant for every cycle (a `max_age_s` taken from the clock before observe() reads its own moved
    with the thread's scheduling: test_a_cycle_held_after_...). The cycles in `late` are
    held between taking that bound and their read (a thread preempted there: what 200 threads on a
    loaded machine do now and then) until every other cycle has its observation and they have been
    held longer than the interval's view had been running when they took the bound."""
    out: dict[int, Any] = {}
    others = threading.Semaphore(0)

    def cycle(i: int) -> None:
        taken = time.monotonic()
        bound = {"not_before": interval_start}
        if i in late:
            for _ in range(crs - len(late)):
                others.acquire(timeout=30)
            view = h.observer.latest()
            while view is not None and time.monotonic() - taken <= view.started - interval_start:
                time.sleep(0.001)  # a condition on the threads' order, not a timed assertion
        try:
            out[i] = observe(h, f"t{i % topics}", f"g{i}", timeout_s=timeout_s, **bound)
        except BaseException as err:  # noqa: BLE001 - the test looks at it
            out[i] = err
        finally:
            if i not in late:
                others.release()

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(crs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    return out


@pytest.fixture
def counted() -> Any:
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def count(kind: str, n: int) -> None:
        with lock:
            seen[kind] = seen.get(kind, 0) + n

    ko.set_request_counter(count)
    yield seen
    ko.set_request_counter(None)


def requests_per_interval(crs: int, intervals: int = 3) -> list[int]:
    cluster = Cluster({f"t{t}": (5, 100) for t in range(20)})
    h = handle(cluster, Snapshot({f"g{i}": 40 + i % 7 for i in range(crs)}))
    per: list[int] = []
    for _ in range(intervals):
        before = len(cluster.calls)
        results = run_interval(h, crs, min(crs, 20), time.monotonic())
        assert len(results) == crs and not [r for r in results.values() if isinstance(r, BaseException)]
        for i, obs in results.items():  # each CR got its own topic and group's answer
            assert obs.topic == f"t{i % min(crs, 20)}" and obs.group_id == f"g{i}"
            assert [(p.earliest, p.latest, p.committed) for p in obs.partitions] == [(5, 100, 40 + i % 7)] * 3
        per.append(len(cluster.calls) - before)
    return per


@pytest.mark.parametrize("crs", [1, 20, 200])
def test_admin_round_trips_per_interval_do_not_grow_with_the_crs_on_one_cluster(
    crs: int, counted: Any
) -> None:
    """1, 20 or 200 CRs on one cluster: two ListOffsets per poll interval once the topics are known
    (DescribeTopics in the first only), no OffsetFetch. Fails if a request is sent per CR or topic."""
    per = requests_per_interval(crs)
    # the first interval: a topic first asked for while a view is being read waits for the next
    # view (at most one more per new topic, never one per CR); then 2 ListOffsets per interval
    assert per[1:] == [2, 2], per
    assert per[0] <= 3 * (1 + min(crs, 20)), per
    assert set(counted) == {"describe_topics", "list_offsets"}, counted  # no OffsetFetch


def test_a_cycle_held_after_taking_its_freshness_bound_shares_the_intervals_view(counted: Any) -> None:
    """Why [200] failed once under load (session 16) and passed 8 re-runs: a cycle's bound, taken as
    `max_age_s = now - interval start` before observe() reads its own clock, moves later by however
    long the thread waits in between; preempted while another cycle started the interval's view, it
    rejected that view and sent a second one (4 ListOffsets). Held there on purpose here."""
    cluster = Cluster({f"t{t}": (5, 100) for t in range(2)})
    h = handle(cluster, Snapshot({f"g{i}": 40 for i in range(4)}))
    run_interval(h, 4, 2, time.monotonic())  # the topics are known from here on
    before = len(cluster.calls)
    results = run_interval(h, 4, 2, time.monotonic(), late=frozenset({3}))
    assert not [r for r in results.values() if isinstance(r, BaseException)], results
    assert cluster.calls[before:] == ["list_offsets", "list_offsets"]  # one view for the 4 cycles


def test_the_same_requests_for_200_crs_as_for_one_once_their_topics_are_known(counted: Any) -> None:
    assert requests_per_interval(200)[1:] == requests_per_interval(1)[1:] == [2, 2]


def test_without_the_snapshot_each_group_sends_its_own_offset_fetch_first() -> None:
    """The fallback (no readable __consumer_offsets): one OffsetFetch per CR, and the watermarks of
    a view started after it (two views per interval in all, still shared)."""
    cluster = Cluster({f"t{t}": (5, 100) for t in range(4)})
    h = handle(cluster, None)
    results = run_interval(h, 12, 4, time.monotonic())
    assert all(r.partitions[0].committed == 7 for r in results.values())
    fetches = [i for i, c in enumerate(cluster.calls) if c.startswith("offset_fetch")]
    assert len(fetches) == 12
    # every group's commits were read before some view's end offsets that its cycle used. Views
    # (2 ListOffsets each): at most one started after each group's fetch, one more per topic first
    # asked while a view was being read, and the first (thread scheduling decides how many of these
    # happen: 28 were seen once under load 10, above the earlier bound without the per-topic term)
    assert cluster.calls[-1] == "list_offsets" and cluster.count("list_offsets") <= 2 * (1 + 12 + 4)


def test_a_view_older_than_the_freshness_bound_is_not_reused(counted: Any) -> None:
    cluster = Cluster({"t0": (0, 10)})
    h = handle(cluster, Snapshot({"g": 3}))
    observe(h, "t0", "g", max_age_s=60)
    n = len(cluster.calls)
    observe(h, "t0", "g", max_age_s=60)  # fresh enough: no request
    assert len(cluster.calls) == n
    t = time.monotonic()
    observe(h, "t0", "g")  # default max_age 0: a view read after the call (the drain's re-read)
    assert len(cluster.calls) == n + 2 and h.observer.latest().started >= t


def test_a_fresh_read_sees_the_end_offsets_and_commits_after_the_call() -> None:
    """The drain re-reads after moving offsets: the view it gets started after the call, and the
    snapshot is asked for the commits as of that view's __consumer_offsets end."""
    cluster = Cluster({"t0": (0, 10)})
    snap = Snapshot({"g": 3})
    h = handle(cluster, snap)
    observe(h, "t0", "g", max_age_s=60)
    cluster.topics["t0"] = (0, 20)
    cluster.offsets_end = 150  # a commit written meanwhile
    snap.commits["g"] = 12
    obs = observe(h, "t0", "g")
    assert [(p.latest, p.committed) for p in obs.partitions] == [(20, 12)] * 3
    assert snap.asked_ends[-1] == 150
    assert snap.wanted[-1] == {offsets_partition_for("g", OFFSETS_PARTS): 150}  # only registered groups


def test_a_missing_topic_fails_only_its_own_cycles() -> None:
    cluster = Cluster({"ok": (0, 10), "gone": (0, 0)}, missing={"gone"})
    h = handle(cluster, Snapshot({}))
    out: dict[str, Any] = {}

    def run(topic: str) -> None:
        try:
            out[topic] = observe(h, topic, "g-" + topic, timeout_s=5, max_age_s=5)
        except ObserveError as err:
            out[topic] = err

    threads = [threading.Thread(target=run, args=(t,)) for t in ("ok", "gone")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert isinstance(out["gone"], ObserveError) and out["gone"].reason == "TopicNotFound"
    assert not isinstance(out["ok"], ObserveError) and out["ok"].partitions[0].latest == 10


def test_a_failed_request_reaches_every_waiting_cycle_and_the_next_view_is_fresh() -> None:
    cluster = Cluster({"t0": (1, 2)})
    h = handle(cluster, Snapshot({"g": 1}))
    cluster.fail_next = KafkaException(KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(ObserveError) as info:
        observe(h, "t0", "g", timeout_s=2, max_age_s=5)
    assert info.value.reason == "BrokerUnreachable"
    obs = observe(h, "t0", "g", timeout_s=2)  # a new view, not the failed one's answer
    assert obs.partitions[0].latest == 2


def test_topics_are_described_again_only_after_describe_every_s() -> None:
    now = [1000.0]
    cluster = Cluster({"t0": (0, 5)})

    def call(timeout_s: float, fn: Any) -> Any:
        return fn(cluster)

    obs = ClusterObserver(call, monotonic=lambda: now[0], describe_every_s=30.0)
    try:
        for _ in range(4):  # views at 1000, 1010, 1020, 1030 (monotonic)
            v = obs.view("t0", "g", now[0], timeout_s=5)
            assert v.topic("t0").latest == {0: 5, 1: 5, 2: 5}
            now[0] += 10.0
        assert cluster.count("describe_topics") == 2 and cluster.count("list_offsets") == 8
    finally:
        obs.stop()


def test_a_cycle_waits_for_a_view_no_longer_than_its_own_timeout() -> None:
    """The view's ListOffsets do not answer: the cycle gives up at its own timeout (KafkaTimeout)
    while the observer's read is still in flight; once the broker answers, the next cycle is served."""
    pending: list[concurrent.futures.Future] = []

    class Hanging(Cluster):
        def list_offsets(self, req: dict[Any, Any], **kw: Any) -> dict[Any, concurrent.futures.Future]:
            if not self.topics.get("answer"):
                self._record("list_offsets")
                futs = {tp: concurrent.futures.Future() for tp in req}
                pending.extend(futs.values())
                return futs
            return super().list_offsets(req, **kw)

    cluster = Hanging({"t": (0, 1)})
    h = handle(cluster, Snapshot({}))
    h.observer.fetch_timeout_s = 60.0
    with pytest.raises(ObserveError) as info:
        observe(h, "t", "g", timeout_s=0.3)
    assert info.value.reason == "KafkaTimeout"
    assert h.observer._inflight is not None and pending  # the read still waits for the broker
    cluster.topics["answer"] = (0, 0)
    for f in pending:
        f.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert observe(h, "t", "g", timeout_s=10).partitions[0].latest == 1


def test_a_stopped_observer_answers_no_one() -> None:
    cluster = Cluster({"t": (0, 1)})
    h = handle(cluster, Snapshot({}))
    h.close()
    with pytest.raises(ObserveError):
        observe(h, "t", "g", timeout_s=1)


def test_cycles_of_many_crs_start_within_one_views_freshness_but_not_at_once() -> None:
    """200 CRs with a 10 s interval: every cycle starts within the first 60 % of the 5 s freshness
    bound after a multiple of the interval (so one view serves them all), spread over it (not one
    burst at the API server), each wait between poll/2 and 3·poll/2."""
    from lagpilot.observe.kafka_observe import cycle_phase_s, observe_max_age_s
    from lagpilot.reconcile.cycle import aligned_delay

    poll, now = 10.0, 1_700_000_003.7
    starts = []
    for i in range(200):
        key = f"ns/g{i:03d}"
        d = aligned_delay(poll, now, cycle_phase_s(key, poll))
        assert poll / 2 <= d <= 1.5 * poll
        starts.append((now + d) % poll)
        assert cycle_phase_s(key, poll) == cycle_phase_s(key, poll)  # stable
    assert max(starts) < 0.6 * observe_max_age_s(poll) + 1e-6
    assert max(starts) - min(starts) > 2.0  # spread, not one instant
    assert len({round(s, 1) for s in starts}) > 20
