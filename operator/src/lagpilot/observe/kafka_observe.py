"""Observe a consumer group's offsets on Kafka: what one CR's cycle reads, from shared per-cluster reads.

The Kafka modules of the operator:
- `kafka_config`: the librdkafka configuration from spec.kafka and its Secret;
- `kafka_admin`: the shared clients, one `AdminHandle` per cluster and configuration (`AdminPool`);
- `cluster_view`: ONE watermark read of all observed topics per view, shared by every CR's cycle;
- `offsets_snapshot`: every group's commits, read from `__consumer_offsets` by one consumer;
- `kafka_common`: request counting, errors and their classification.

One observation (`observe`) of a group: the cluster's view (`ClusterObserver.view`) not older
than the caller's freshness bound — ListOffsets A (log starts + the `__consumer_offsets` ends),
then ListOffsets B (the ends, read_committed: the LSO), shared by all CRs of the cluster —, and the
group's commits as of A's end of its `__consumer_offsets` partition from the snapshot: commits
read before the ends, so a commit never appears beyond the end (lag >= 0). The commits also carry
each commit's metadata string — the runtime's capacity report `lp1;cap=<records/s>;ts=<ms>`
(docs/CONTRACTS.md), so capacity costs nothing. When the snapshot cannot answer (not loaded, no
permission on the internal topic), the group's own OffsetFetch is sent first and a view started
after it answered is read (`snapshot_fallback`, `offset_fetch`).

Freshness: a control-loop cycle passes `max_age_s` = `observe_max_age_s(poll)` (half the poll
interval, at most LAGPILOT_OBSERVE_MAX_AGE_SECONDS, default 5): the cycles of one interval share
one view. Any other caller (the drain's re-read after an offset move) gets the default 0: a view
whose reads started after the call, so the commits it sees were read after everything the caller
did before. Every request is counted (`set_request_counter` → `lagpilot_kafka_requests_total{kind}`).

Errors become `ObserveError(reason, message)` with a CamelCase reason the handlers put in the
`Degraded` condition: TopicNotFound, AuthenticationFailed, AuthorizationFailed, BrokerUnreachable,
KafkaTimeout, KafkaError. Messages name the bootstrap servers and the topic, never credentials.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Mapping

from lagpilot.observe.cluster_view import ClusterObserver, ClusterView, TopicWatermarks
from lagpilot.observe.kafka_admin import AdminHandle, AdminPool, SafeAdmin
from lagpilot.observe.kafka_common import (
    _KAFKA_LOG,
    NoPartitions,
    ObserveError,
    SecretError,
    _count,
    _error_name,
    _RepeatFilter,
    as_exception,
    classify,
    set_request_counter,
)
from lagpilot.observe.kafka_config import admin_config, config_key
from lagpilot.observe.offsets_snapshot import (
    OFFSETS_TOPIC,
    OffsetsSnapshot,
    _snapshot_consumer_factory,
    offsets_partition_for,
    parse_offset_commit,
)
from lagpilot_runtime import commit_metadata
from lagpilot_runtime.commit_metadata import CapacityReport

__all__ = [
    "OFFSETS_TOPIC",
    "_KAFKA_LOG",
    "AdminHandle",
    "AdminPool",
    "ClusterObserver",
    "ClusterView",
    "Observation",
    "ObserveError",
    "OffsetsSnapshot",
    "PartitionOffsets",
    "SafeAdmin",
    "SecretError",
    "TopicWatermarks",
    "_RepeatFilter",
    "_snapshot_consumer_factory",
    "admin_config",
    "classify",
    "committed_offsets",
    "config_key",
    "cycle_phase_s",
    "has_commits",
    "observe",
    "observe_max_age_s",
    "offsets_partition_for",
    "parse_offset_commit",
    "peek_oldest",
    "set_request_counter",
]

log = logging.getLogger(__name__)


def cycle_phase_s(key: str, poll_interval_s: float, max_age_cap_s: float = 5.0) -> float:
    """Where in its poll interval a CR's cycle starts (`reconcile.aligned_delay`): spread over the
    first 60 % of the freshness bound by a hash of the CR's key, so the cycles of many CRs do not
    reach the API server (and the GIL) in one burst, yet all fall within one cluster view's
    freshness and share it. Stable across operator restarts."""
    frac = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") / 2**32
    return frac * 0.6 * observe_max_age_s(poll_interval_s, max_age_cap_s)


def observe_max_age_s(poll_interval_s: float, cap_s: float = 5.0) -> float:
    """How old a shared view a control-loop cycle accepts: half its poll interval, at most `cap_s`
    (LAGPILOT_OBSERVE_MAX_AGE_SECONDS, config.OperatorConfig.observe_max_age_seconds)."""
    return max(0.0, min(cap_s, poll_interval_s / 2))


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


# --- the observation -----------------------------------------------------------------------------


def observe(
    handle: AdminHandle,
    topic: str,
    group_id: str,
    timeout_s: float = 10.0,
    clock: Callable[[], float] = time.time,
    max_age_s: float = 0.0,
    not_before: float | None = None,
) -> Observation:
    """Partition count, earliest/latest/committed offsets and capacity reports for one group, from
    a view of the cluster read at most `max_age_s` before the call (0: read after the call), or,
    given `not_before` (monotonic seconds), a view whose reads started at or after that instant.

    Returns or raises ObserveError within about `timeout_s`: every lock and every wait is bounded.
    `clock` is unused (the observation's time is the view's); kept for callers that pass it.
    """
    started = time.monotonic()
    deadline = started + timeout_s

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    handle.serve()  # served callbacks of this shared client (error_cb, log lines)
    try:
        snap = handle.offsets_snapshot()
        bound = started - max_age_s if not_before is None else not_before
        view = handle.observer.view(topic, group_id, bound, left())
        wm = view.topic(topic)
        if snap is not None and snap.healthy:
            # the commits as of the view's __consumer_offsets end (read before the topic's ends)
            gp = snap.group_partition(group_id)
            end = wm.offsets_ends.get(gp) if gp is not None else None
            got = (
                snap.committed(group_id, topic, list(wm.partitions), end, min(2.0, left() / 2))
                if end is not None
                else None
            )
            if got is not None:
                return _observation(
                    topic,
                    group_id,
                    wm,
                    [(p, off if off is not None and off >= 0 else None, meta) for p, off, meta in got],
                    view.read_at,
                )
            _count("snapshot_fallback")
        # the group's own OffsetFetch first, then a view read after it answered (ends after commits)
        ids = list(wm.partitions)
        for _ in range(2):
            committed_tps = handle.committed(group_id, topic, ids, left())
            view = handle.observer.view(topic, group_id, time.monotonic(), left())
            wm = view.topic(topic)
            if sorted(tp.partition for tp in committed_tps) == list(wm.partitions):
                break
            ids = list(wm.partitions)  # the partition count changed meanwhile: once more
    except ObserveError:
        raise
    except NoPartitions:
        raise ObserveError(
            "TopicNotFound", f"topic {topic!r} has no partitions on {handle.bootstrap}"
        ) from None
    except Exception as err:  # noqa: BLE001 - every Kafka failure is classified for the user
        raise classify(err, handle, topic, handle.bootstrap) from None

    rows: list[tuple[int, int | None, str | None]] = []
    for tp in committed_tps:
        if tp.error is not None:
            raise classify(as_exception(tp.error), handle, topic, handle.bootstrap)
        off = tp.offset if tp.offset is not None and tp.offset >= 0 else None
        rows.append((tp.partition, off, getattr(tp, "metadata", None)))
    return _observation(topic, group_id, wm, rows, view.read_at)


def _observation(
    topic: str, group_id: str, wm: TopicWatermarks, rows: list[tuple[int, int | None, str | None]], now: float
) -> Observation:
    committed = {p: (off, commit_metadata.decode(meta)) for p, off, meta in rows}
    parts = tuple(
        PartitionOffsets(
            partition=i,
            earliest=int(wm.earliest[i]),
            latest=int(wm.latest[i]),
            committed=committed.get(i, (None, None))[0],
            capacity=committed.get(i, (None, None))[1],
        )
        for i in wm.partitions
        if i in wm.earliest and i in wm.latest
    )
    return Observation(topic=topic, group_id=group_id, observed_at=now, partitions=parts)


def has_commits(
    handle: AdminHandle, topic: str, group_id: str, timeout_s: float, snapshot_wait_s: float = 5.0
) -> bool | None:
    """Whether `group_id` has a commit on `topic`, from the `__consumer_offsets` snapshot as of a
    view whose reads started after this call (every commit made before the call is seen); no
    OffsetFetch, no per-group consumer. None when the snapshot cannot say (disabled, not loaded
    within `snapshot_wait_s`, failed) or anything failed: the caller then asks the group itself.
    The group is not registered with the observer (it is asked once, e.g. the remainder group at a
    CR's start)."""
    try:
        started = time.monotonic()
        snap = handle.offsets_snapshot()
        if snap is None:
            return None
        wm = handle.observer.view(topic, None, started, timeout_s).topic(topic)
        gp = snap.group_partition(group_id) if snap.healthy else None
        end = wm.offsets_ends.get(gp) if gp is not None else None
        if end is None:
            return None
        got = snap.committed(
            group_id,
            topic,
            list(wm.partitions),
            end,
            max(0.0, min(snapshot_wait_s, timeout_s - (time.monotonic() - started))),
        )
    except Exception:  # noqa: BLE001 - the caller's exact path reports (and classifies) errors
        return None
    if got is None:
        return None
    return any(off is not None and off >= 0 for _p, off, _meta in got)


def committed_offsets(
    handle: AdminHandle, group_id: str, topic: str, partitions: list[int], timeout_s: float
) -> dict[int, int | None]:
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
            raise classify(as_exception(tp.error), handle, topic, handle.bootstrap)
        out[tp.partition] = tp.offset if tp.offset is not None and tp.offset >= 0 else None
    return out


def peek_oldest(
    handle: AdminHandle, topic: str, positions: Mapping[int, int], timeout_s: float = 2.0
) -> dict[int, float]:
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
                for msg in consumer.consume(
                    num_messages=len(positions) * 4, timeout=max(0.05, deadline - time.monotonic())
                ):
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
