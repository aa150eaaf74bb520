"""The shared Kafka clients of the operator: one `AdminHandle` per cluster and security
configuration (`AdminPool`), shared by every CR that uses it — not one per CR per cycle.

A handle holds the AdminClient (every call under its lock, taken with a timeout), the cluster's
`ClusterObserver` (cluster_view: one watermark read of all topics per view), its `OffsetsSnapshot`
(offsets_snapshot: every group's commits from `__consumer_offsets`), one shared "peek" consumer
(`peek_oldest`) and, for the fallback, one offsets reader per observed group.

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
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lagpilot.observe.cluster_view import ClusterObserver
from lagpilot.observe.kafka_common import (
    _KAFKA_LOG,
    ObserveError,
    _count,
    _error_name,
    _timed_lock,
    close_quietly,
)
from lagpilot.observe.kafka_config import (
    _default_factory,
    _group_reader_factory,
    _peek_consumer_factory,
    config_key,
)
from lagpilot.observe.offsets_snapshot import OffsetsSnapshot, _snapshot_consumer_factory

log = logging.getLogger(__name__)


class _GroupReader:
    """A Consumer whose group.id is one observed group, used only for `committed()` (OffsetFetch).
    It never subscribes (no JoinGroup), never commits, never fetches records."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.lock = threading.Lock()
        self.last_used = time.monotonic()


class AdminHandle:
    """An AdminClient plus the last client-level error its error callback saw (for classification),
    and, made on first use: one shared "peek" consumer of the same cluster (`peek_oldest`) and one
    offsets reader per observed group (`committed`).

    Lifetime: `AdminPool.lease` counts the cycles using the handle; a handle dropped from the pool
    is closed by the last lease to end (in a helper thread), never under a running cycle.
    """

    GROUP_IDLE_S = 600.0  # an offsets reader unused this long is closed (its CR went away)

    def __init__(
        self,
        client: Any,
        bootstrap: str,
        consumer_factory: Callable[[], Any] | None = None,
        group_reader_factory: Callable[[str], Any] | None = None,
        snapshot_consumer_factory: Callable[[], Any] | None = None,
        fetch_timeout_s: float = 10.0,
        token_endpoint: str | None = None,
    ):
        self.client = client
        self.bootstrap = bootstrap
        self.token_endpoint = token_endpoint  # OAUTHBEARER: named in an authentication failure
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
        self.observer = ClusterObserver(
            self.call,
            offsets_partitions=lambda: (
                self.snapshot.partitions if self.snapshot and self.snapshot.healthy else None
            ),
            on_ends=self._snapshot_ends,
            fetch_timeout_s=fetch_timeout_s,
        )

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
        self.observer.stop()
        if self.snapshot is not None:
            self.snapshot.stop()
        with self.peek_lock:
            consumer, self._consumer = self._consumer, None
            close_quietly(consumer)
        with self._groups_lock:
            readers, self._groups = list(self._groups.values()), {}
        for r in readers:
            with r.lock:
                close_quietly(r.consumer)
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

    def safe_admin(self, timeout_s: float = 10.0) -> SafeAdmin:
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
                close_quietly(r.consumer)
            finally:
                r.lock.release()

    def offsets_snapshot(self) -> OffsetsSnapshot | None:
        """The cluster's `__consumer_offsets` snapshot, started on first use; None when disabled."""
        if self.snapshot is not None and not self._closed:
            self.snapshot.start()
        return self.snapshot

    def _snapshot_ends(self, ends: Mapping[int, int], groups: frozenset[str]) -> None:
        """The observer read these `__consumer_offsets` ends: the snapshot catches up on the
        registered groups' partitions while the topics' ends are read."""
        snap = self.snapshot
        if snap is None or not snap.healthy:
            return
        gps = {snap.group_partition(g) for g in groups}
        snap.want({p: e for p, e in ends.items() if p in gps})

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

    def list_consumer_group_offsets(
        self, requests: list[Any], request_timeout: float | None = None, **_: Any
    ) -> dict[str, concurrent.futures.Future[Any]]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        timeout = request_timeout or self._timeout_s
        out: dict[str, concurrent.futures.Future[Any]] = {}
        for req in requests:
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
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


class AdminPool:
    """AdminClients shared across CRs, keyed by configuration hash, reference-counted by owner."""

    def __init__(
        self,
        factory: Callable[[dict[str, Any]], Any] = _default_factory,
        socket_timeout_ms: int = 10_000,
        consumer_factory: Callable[[Mapping[str, Any]], Callable[[], Any]] | None = _peek_consumer_factory,
        group_reader_factory: Callable[[Mapping[str, Any]], Callable[[str], Any]]
        | None = _group_reader_factory,
        fetch_timeout_s: float = 10.0,
        snapshot_factory: Callable[[Mapping[str, Any]], Callable[[], Any]] | None = None,
        offsets_snapshot: bool = True,
    ):
        self._factory = factory
        self._snapshot_factory = (
            snapshot_factory
            if snapshot_factory is not None
            else (_snapshot_consumer_factory if offsets_snapshot and factory is _default_factory else None)
        )
        self._fetch_timeout_s = fetch_timeout_s
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
                    raise ObserveError(
                        "KafkaConfigInvalid",
                        f"cannot create a Kafka client for "
                        f"{conf.get('bootstrap.servers', '')} from spec.kafka and its Secret "
                        f"({_error_name(err)}); check the TLS/SASL material",
                    ) from None
                handle = AdminHandle(
                    client,
                    conf.get("bootstrap.servers", ""),
                    self._consumer_factory(full) if self._consumer_factory else None,
                    self._group_reader_factory(full) if self._group_reader_factory else None,
                    self._snapshot_factory(full) if self._snapshot_factory else None,
                    self._fetch_timeout_s,
                    token_endpoint=(
                        conf.get("sasl.oauthbearer.token.endpoint.url")
                        if conf.get("sasl.mechanism") == "OAUTHBEARER"
                        else None
                    ),
                )
                holder.append(handle)
                self._handles[key] = handle
                log.info(
                    "kafka admin client created",
                    extra={"bootstrap": handle.bootstrap, "clients": len(self._handles)},
                )
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
