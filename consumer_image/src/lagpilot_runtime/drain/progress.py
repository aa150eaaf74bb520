"""Drain progress in Kafka and in the sink, and retention (the drain driver's side; pure helpers
plus the Kafka reads/writes). Progress of sub-range k of a partition is the committed offset of the
memberless group ``<groupId>.lagpilot-drain.<drainId>.<k>`` (lagpilot_runtime.drain.plan), and for a
progress-committing handler also the sink's own record; a retry skips what either recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..config import ConsumerConfig
from ..jsonlog import fields as _fields
from .plan import (
    DrainPlan,
    SubRange,
    parse_progress_lost,
    parse_progress_metadata,
    progress_group,
    progress_metadata,
)

log = logging.getLogger("lagpilot.drain")


class RetentionError(Exception):
    """Records of the range were deleted by retention before the drain read them."""


# The group coordinator's transient answers: it moved, it is loading its ``__consumer_offsets``
# partition, or none is elected yet. librdkafka raises them from ``committed()``/``commit()`` with
# ``retriable()`` False; Kafka's Java client retries them (``RetriableCommitFailedException``), and so
# does the drain, within the call's bound (``transient``, ``coordinated``).
COORDINATOR_MOVING = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
PROGRESS_CALL_TIMEOUT_S = 30.0
_BACKOFF_S = (0.1, 2.0)  # first wait, longest wait (doubling)


def transient(err: Any) -> bool:
    """A Kafka error (a ``KafkaError``) worth retrying on a progress group: its coordinator moving,
    or one the client calls retriable."""
    code = err.code() if hasattr(err, "code") else None
    return code in COORDINATOR_MOVING or bool(hasattr(err, "retriable") and err.retriable())


def coordinated(
    call: Callable[[float], Any], timeout_s: float = PROGRESS_CALL_TIMEOUT_S, what: str = ""
) -> Any:
    """``call(seconds left)`` — one read or commit of a progress group — retried with back-off while
    it raises a ``transient`` KafkaException, until ``timeout_s`` is spent (then the last error is
    raised); any other error at once. The one retry layer of a drain's progress reads and commits. A
    retried commit writes the same offset and metadata again: nothing moves further."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    wait = _BACKOFF_S[0]
    while True:
        try:
            return call(max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            if not transient(exc.args[0] if exc.args else None) or time.monotonic() + wait > deadline:
                raise
            log.info(
                "group coordinator moving; retrying",
                extra=_fields(
                    event="drain_coordinator_retry", call=what, error=str(exc.args[0])[:200], wait_s=wait
                ),
            )
            time.sleep(wait)
            wait = min(_BACKOFF_S[1], wait * 2)


def read_committed(c: Any, tps: list[Any], timeout_s: float = PROGRESS_CALL_TIMEOUT_S) -> list[Any]:
    """``c.committed(tps)`` retried while the group's coordinator moves (``coordinated``)."""
    return coordinated(lambda left: c.committed(tps, timeout=left), timeout_s, "committed")  # type: ignore[no-any-return]


def commit_progress(c: Any, tp: Any, failed: str = "progress commit failed") -> None:
    """One synchronous commit of a progress offset (`tp`: a TopicPartition with its metadata),
    retried within one deadline while the error is ``transient`` (``coordinated``), whether the
    commit raises it or the broker answers it for the partition; any other error, or the deadline
    spent: RuntimeError ``<failed>: <the error>``."""
    from confluent_kafka import KafkaException

    def once(_left: float) -> None:
        res = c.commit(offsets=[tp], asynchronous=False)
        errs = [t.error for t in (res or []) if getattr(t, "error", None)]
        if errs:
            raise KafkaException(errs[0])  # per partition: retried as a raised one would be

    try:
        coordinated(once, what="commit")
    except KafkaException as exc:
        raise RuntimeError(f"{failed}: {exc}") from exc


def progress_consumer(cfg: ConsumerConfig, group: str) -> Any:
    """A consumer that never subscribes: it only commits/reads the progress group's offsets."""
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {
        "bootstrap.servers": cfg.bootstrap_servers,
        "group.id": group,
        "enable.auto.commit": False,
        "client.id": "lagpilot-drain-progress",
    }
    conf.update(cfg.kafka_security())
    return Consumer(conf, logger=logging.getLogger("lagpilot.drain.librdkafka"))


def read_progress(
    cfg: ConsumerConfig, plan: DrainPlan, timeout_s: float = 30.0
) -> dict[tuple[int, int], tuple[int, int]]:
    """(partition, index) -> (next offset, records done) for every sub-range; start/0 if none committed."""
    from confluent_kafka import TopicPartition

    out: dict[tuple[int, int], tuple[int, int]] = {}
    by_index: dict[int, list[SubRange]] = {}
    for s in plan.sub_ranges:
        by_index.setdefault(s.index, []).append(s)
    for index, subs in sorted(by_index.items()):
        c = progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, index, plan.owner))
        try:
            got = read_committed(c, [TopicPartition(plan.topic, s.partition) for s in subs], timeout_s)
        finally:
            c.close()
        by_p = {tp.partition: tp for tp in got}
        for s in subs:
            tp = by_p.get(s.partition)
            if tp is None or tp.offset < 0:
                out[(s.partition, s.index)] = (s.start, 0)
            else:
                out[(s.partition, s.index)] = (
                    min(max(tp.offset, s.start), s.end),
                    parse_progress_metadata(getattr(tp, "metadata", None)),
                )
    return out


def remaining_work(
    plan: DrainPlan, progress: Mapping[tuple[int, int], tuple[int, int]]
) -> list[tuple[SubRange, int]]:
    """(sub-range, where to start) for every sub-range not finished yet."""
    out = []
    for s in plan.sub_ranges:
        nxt = progress.get((s.partition, s.index), (s.start, 0))[0]
        if nxt < s.end:
            out.append((s, max(nxt, s.start)))
    return out


def check_retention(plan: DrainPlan, work: Sequence[tuple[SubRange, int]], low: Mapping[int, int]) -> None:
    """Raise RetentionError naming partitions and offsets when a range's start is already deleted."""
    lost = []
    for s, start in work:
        lw = low.get(s.partition)
        if lw is not None and lw > start:
            lost.append(
                f"partition {s.partition}: offsets {start}..{min(lw, s.end) - 1} deleted by retention "
                f"(low watermark {lw}, drain sub-range [{s.start}, {s.end}))"
            )
    if lost:
        raise RetentionError(
            f"topic {plan.topic}: the drain range starts before the earliest retained record; "
            + "; ".join(lost)
            + ". Those records cannot be processed; the rest was not started."
        )


def sink_next(handler: Any, topic: str, s: SubRange, ctx: Any) -> int | None:
    """A progress-committing sink's next offset for sub-range ``s`` (read under ``ctx``: the range's
    identity, ``BatchContext.progress_scope``, which a retry and a handed-back remainder share),
    clamped into ``[s.start, s.end]``; None if it recorded nothing."""
    got = handler.progress(topic, [s.partition], ctx).get(s.partition)
    return None if got is None else max(s.start, min(int(got), s.end))


def range_context(cfg: ConsumerConfig, plan: DrainPlan, s: SubRange) -> Any:
    """The handler context of sub-range ``s`` of ``plan`` (its progress scope), for reads outside a task."""
    from ..handler import BatchContext

    return BatchContext(
        config=dict(cfg.handler_config),
        logger=logging.getLogger("lagpilot.handler"),
        source="drain",
        group_id=plan.group_id,
        drain_id=plan.drain_id,
        sub_range=(s.partition, s.index, s.start, s.end),
    )


def catch_up_to_sink(
    cfg: ConsumerConfig, plan: DrainPlan, work: Sequence[tuple[SubRange, int]], timeout_s: float = 30.0
) -> list[tuple[SubRange, int]]:
    """For a progress-committing handler (docs/consumer.md): where the sink's progress of a sub-range
    is ahead of its progress group (a crash between the two commits, or the group's offsets expired
    after offsets.retention.minutes), commit the sink's value to the progress group and start
    there. The sink's progress never expires: it is authoritative. Best effort: on an error the work
    is unchanged (each task checks the sink again before its first batch)."""
    if not work:
        return list(work)
    try:
        from confluent_kafka import TopicPartition

        from ..handler import commits_progress, load_handler

        handler = load_handler(cfg.handler_spec)
        if not commits_progress(handler):
            return list(work)
        out: list[tuple[SubRange, int]] = []
        for s, start in work:
            nxt = sink_next(handler, plan.topic, s, range_context(cfg, plan, s))
            if nxt is None or nxt <= start:
                out.append((s, start))
                continue
            nxt = min(int(nxt), s.end)
            c = progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, s.index, plan.owner))
            try:
                got = read_committed(c, [TopicPartition(plan.topic, s.partition)], timeout_s)[0]
                meta = getattr(got, "metadata", None) if got.offset is not None and got.offset >= 0 else None
                commit_progress(
                    c,
                    TopicPartition(
                        plan.topic,
                        s.partition,
                        nxt,
                        metadata=progress_metadata(parse_progress_metadata(meta), parse_progress_lost(meta)),
                    ),
                )
            finally:
                c.close()
            log.info(
                "sub-range resumes from the sink's progress",
                extra=_fields(
                    event="drain_sink_progress_ahead",
                    partition=s.partition,
                    index=s.index,
                    kafka_next=start,
                    sink_next=nxt,
                ),
            )
            if nxt < s.end:
                out.append((s, nxt))
        return out
    except Exception as exc:  # noqa: BLE001 - the tasks check again
        log.warning(
            "reading the sink's progress in the driver failed",
            extra=_fields(event="drain_sink_progress_failed", error=str(exc)[:300]),
        )
        return list(work)


def retention_losses(
    work: Sequence[tuple[SubRange, int]], low: Mapping[int, int]
) -> tuple[list[tuple[SubRange, int, int]], list[tuple[SubRange, int]]]:
    """Split the unfinished work at the partitions' low watermarks (pure).

    Returns ``(lost, work)``: ``(sub-range, a, b)`` for every sub-range whose next offset ``a`` is
    below the low watermark (``b = min(low, end)``: retention deleted ``[a, b)`` before the drain
    read it), and the work that is left (starting at ``b``; a sub-range lost entirely drops out).
    """
    lost: list[tuple[SubRange, int, int]] = []
    left: list[tuple[SubRange, int]] = []
    for s, start in work:
        lw = low.get(s.partition)
        if lw is not None and lw > start:
            b = min(lw, s.end)
            lost.append((s, start, b))
            if b < s.end:
                left.append((s, b))
        else:
            left.append((s, start))
    return lost, left


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, overlapping/adjacent ranges joined (pure)."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def record_losses(
    cfg: ConsumerConfig, plan: DrainPlan, lost: Sequence[tuple[SubRange, int, int]], timeout_s: float = 30.0
) -> None:
    """Commit each lost sub-range's progress past the deleted offsets, with ``lost=a-b`` in its
    metadata (merged with earlier losses): the operator reads it (DataLoss condition, event,
    metric) and the rest of the sub-range, still exact, is drained from there."""
    from confluent_kafka import TopicPartition

    for s, a, b in lost:
        c = progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, s.index, plan.owner))
        try:
            got = read_committed(c, [TopicPartition(plan.topic, s.partition)], timeout_s)[0]
            meta = getattr(got, "metadata", None)
            if got.offset is not None and got.offset >= b:
                continue  # already past (a concurrent or earlier record)
            ranges = merge_ranges((*parse_progress_lost(meta), (a, b)))
            commit_progress(
                c,
                TopicPartition(
                    plan.topic,
                    s.partition,
                    b,
                    metadata=progress_metadata(parse_progress_metadata(meta), ranges),
                ),
                "recording the retention loss failed",
            )
        finally:
            c.close()


def low_watermarks(cfg: ConsumerConfig, plan: DrainPlan, timeout_s: float = 30.0) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    c = progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, 0, plan.owner))
    try:
        return {
            p: int(c.get_watermark_offsets(TopicPartition(plan.topic, p), timeout=timeout_s)[0])
            for p in sorted({s.partition for s in plan.sub_ranges})
        }
    finally:
        c.close()


def unread_sub_ranges(
    work: Sequence[tuple[SubRange, int]], results: Iterable[Mapping[str, Any]]
) -> list[tuple[SubRange, int]]:
    """The work items whose Spark task handed no record to the handler (pure): no task summary
    names their (partition, index). A task names its sub-range from its first record, so these are
    the sub-ranges in which Spark's reader found no visible record between the next offset and the
    end: every offset there is an aborted transaction's record, a transaction marker (under
    ``read_committed``) or was removed by compaction."""
    seen = {
        (int(r["partition"]), int(r["index"]))
        for r in results
        if r.get("partition") is not None and r.get("index") is not None
    }
    return [(s, start) for s, start in work if (s.partition, s.index) not in seen]


def complete_unread(
    cfg: ConsumerConfig,
    plan: DrainPlan,
    unread: Sequence[tuple[SubRange, int]],
    timeout_s: float = 30.0,
    named: bool = False,
) -> None:
    """Commit ``end`` as the progress of sub-ranges whose reader reached their end without a visible
    record. Called by the driver only after the Spark job ended without an error: Spark's Kafka reader
    then read every task's range to its ``endingOffset`` (``failOnDataLoss=true``: a position that
    cannot reach it fails the task), so the consumer's position — not a last record's offset — is at
    the end. Records done and recorded losses are kept; the progress never moves backwards."""
    from confluent_kafka import TopicPartition

    for s, _ in unread:
        c = progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, s.index, plan.owner))
        try:
            got = read_committed(c, [TopicPartition(plan.topic, s.partition)], timeout_s)[0]
            has = got.offset is not None and got.offset >= 0
            if has and got.offset >= s.end:
                continue
            meta = getattr(got, "metadata", None) if has else None
            commit_progress(
                c,
                TopicPartition(
                    plan.topic,
                    s.partition,
                    s.end,
                    metadata=progress_metadata(
                        parse_progress_metadata(meta) if has else 0, parse_progress_lost(meta) if has else ()
                    ),
                ),
                f"committing the progress of p{s.partition}#{s.index} failed",
            )
        finally:
            c.close()
        if named:  # its task handed records to the handler; the tail had none visible (markers, compaction)
            log.info(
                "sub-range read to its end",
                extra=_fields(
                    event="drain_sub_range_read_to_end",
                    partition=s.partition,
                    index=s.index,
                    start=s.start,
                    end=s.end,
                ),
            )
            continue
        log.info(
            "sub-range read to its end without a visible record",
            extra=_fields(
                event="drain_sub_range_no_visible_records",
                partition=s.partition,
                index=s.index,
                start=s.start,
                end=s.end,
            ),
        )
