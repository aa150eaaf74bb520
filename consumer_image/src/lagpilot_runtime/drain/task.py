"""The drain's Spark task: runs in the Python workers (forked from lagpilot_runtime.spark_daemon).
One task = one sub-range of the plan: its records in batches through the SAME handler and failure
policy as the consumer, progress committed after every batch (drain_progress), finished work skipped.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import ConsumerConfig
from ..jsonlog import fields as _fields
from .plan import (
    SubRange,
    parse_progress_attempt,
    parse_progress_lost,
    parse_progress_metadata,
    progress_group,
    progress_metadata,
)
from .progress import commit_progress, progress_consumer, read_committed
from .progress import sink_next as sink_next_of

if TYPE_CHECKING:
    from ..failure import DeadLetterProducer

log = logging.getLogger("lagpilot.drain")


def process_start_time(pid: int | str = "self") -> float | None:
    """Wall-clock start of a process (Linux /proc; 10 ms resolution), None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime, clock ticks since boot
        with open("/proc/stat") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# the driver's and the tasks' milestones, in the order they happen (seconds since process start)


@dataclass(frozen=True)
class TaskSpec:
    """What a task needs besides the environment: its plan, no secrets."""

    topic: str
    group_id: str
    drain_id: str
    batch_max_records: int
    sub_ranges: tuple[SubRange, ...]
    owner: str = ""  # the plan's owner tag: names the progress groups (drain_plan.progress_group)
    attempt: int = 0  # the operator's attempt (the plan's): in every progress commit, first at the start


def _row_record(row: Any) -> Any:
    from ..handler import Record

    headers = [(h[0], bytes(h[1]) if h[1] is not None else b"") for h in (row.headers or [])]
    return Record(
        topic=row.topic,
        partition=int(row.partition),
        offset=int(row.offset),
        key=bytes(row.key) if row.key is not None else None,
        value=bytes(row.value) if row.value is not None else None,
        headers=headers,
        timestamp_ms=int(row.ts_ms) if row.ts_ms is not None else None,
    )


def rdd_task(spec: TaskSpec, rows: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """The Row path (no pyarrow/pandas): pickled Rows from the JVM."""
    return run_task(spec, (_row_record(r) for r in rows))


SUMMARY_FIELDS = (
    ("records", "long"),
    ("batches", "long"),
    ("skipped", "long"),
    ("first_batch_at", "double"),
    ("last_batch_at", "double"),
    ("partition", "long"),
    ("index", "long"),
    ("daemon_started_at", "double"),
    ("worker_forked_at", "double"),
    ("task_started_at", "double"),
    ("first_record_at", "double"),
)
SUMMARY_SCHEMA = ", ".join(f"{n} {t}" for n, t in SUMMARY_FIELDS)


def arrow_task(spec: TaskSpec, batches: Iterable[Any]) -> Iterator[Any]:
    """The Arrow path (`mapInArrow`): columnar batches from the JVM, about twice as fast as Rows."""
    import pyarrow as pa

    from ..handler import Record

    def items() -> Iterator[Any]:
        for rb in batches:
            d = rb.to_pydict()
            topic = spec.topic  # one topic per plan: no need to ship the column
            for p, o, k, v, hs, ts in zip(
                d["partition"], d["offset"], d["key"], d["value"], d["headers"], d["ts_ms"], strict=True
            ):
                headers = (
                    [(h["key"], h["value"] if h["value"] is not None else b"") for h in hs] if hs else []
                )
                yield Record(topic, p, o, k, v, headers, ts)

    schema = pa.schema([(n, pa.int64() if t == "long" else pa.float64()) for n, t in SUMMARY_FIELDS])
    for summary in run_task(spec, items()):
        yield pa.RecordBatch.from_pylist([{f.name: summary.get(f.name) for f in schema}], schema=schema)


def sub_range_of(sub_ranges: Sequence[SubRange], partition: int, offset: int) -> SubRange:
    """The plan's sub-range holding this offset (sub-ranges of a partition never overlap)."""
    for s in sub_ranges:
        if s.partition == partition and s.start <= offset < s.end:
            return s
    raise RuntimeError(f"offset {offset} of partition {partition} is in no sub-range of the plan")


def _progress_of(
    committer: Any, spec: TaskSpec, sub: SubRange
) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """The sub-range's progress group as committed: (next offset, records done, retention losses
    recorded); a group that never committed starts at the sub-range's start. Then the attempt's
    sign of life (``_sign_of_life``), before anything else of the task reaches the sink."""
    from confluent_kafka import TopicPartition

    got = read_committed(committer, [TopicPartition(spec.topic, sub.partition)])[0]
    done_next = got.offset if got.offset is not None and got.offset >= 0 else sub.start
    done_records = parse_progress_metadata(getattr(got, "metadata", None)) if got.offset >= 0 else 0
    lost_before = parse_progress_lost(getattr(got, "metadata", None)) if got.offset >= 0 else ()
    _sign_of_life(committer, spec, sub, got, done_records, lost_before)
    return done_next, done_records, lost_before


def _sign_of_life(
    committer: Any,
    spec: TaskSpec,
    sub: SubRange,
    committed: Any,
    records: int,
    lost: tuple[tuple[int, int], ...],
) -> None:
    """The attempt's sign of life (docs/drain.md "Deadlines, stalls and retries"): the sub-range's
    progress as committed (``committed``: its TopicPartition as read; nothing committed: the
    sub-range's start, no record done; ``records``/``lost``: its metadata as ``_progress_of`` read
    it) committed again with this attempt's number. It carries no
    offset beyond what is processed — the offset is the one already there — so nothing is committed
    before its batch is processed. The operator's no-progress window counts from its first sighting;
    the time before it is start-up, with its own bound. Once per attempt and sub-range (a task Spark
    retries finds it written), and only for a plan of the operator's (``attempt`` > 0). Best effort:
    a failed commit leaves the attempt under the start-up bound, it does not fail the task."""
    from confluent_kafka import TopicPartition

    has = committed.offset is not None and committed.offset >= 0
    meta = getattr(committed, "metadata", None) if has else None
    if spec.attempt <= 0 or parse_progress_attempt(meta) == spec.attempt:
        return
    same = progress_metadata(records, lost, spec.attempt)
    tp = TopicPartition(spec.topic, sub.partition, committed.offset if has else sub.start, metadata=same)
    try:
        commit_progress(committer, tp)
    except Exception as exc:  # noqa: BLE001 - best effort: unseen, the attempt stays under the start-up bound
        log.warning(
            "the drain task's sign of life was not committed",
            extra=_fields(
                event="drain_task_sign_of_life_failed",
                partition=sub.partition,
                index=sub.index,
                error=str(exc)[:300],
            ),
        )
        return
    log.info(
        "drain task started",
        extra=_fields(
            event="drain_task_started",
            drain=spec.drain_id,
            attempt=spec.attempt,
            partition=sub.partition,
            index=sub.index,
            next=tp.offset,
        ),
    )


def _claim_and_resume(
    spec: TaskSpec, handler: Any, ctx: Any, sub: SubRange, fences: bool, sink_progress: bool, done_next: int
) -> int:
    """Claim the range in a fencing sink, then resume from the sink's progress when it is ahead of
    the progress group's ``done_next``; returns where the task resumes."""
    if fences:
        # claim the range BEFORE reading the sink's progress: from here on a write of any
        # earlier attempt of these offsets (cancelled, stopped and resumed, an adopted
        # remainder's origin) is refused by the sink, so the progress read below is final
        ctx.epoch = int(handler.claim(spec.topic, [sub.partition], ctx)[sub.partition])
        log.info(
            "sub-range claimed in the sink",
            extra=_fields(
                event="drain_sub_range_claimed",
                drain=spec.drain_id,
                partition=sub.partition,
                index=sub.index,
                end=sub.end,
                epoch=ctx.epoch,
            ),
        )
    if sink_progress:
        # the sink's progress for this range (same transaction as its rows) may be ahead
        # of the progress group (a crash after the sink's commit, before Kafka's; a
        # deleted CR's attempt for a handed-back remainder: the same range identity),
        # and it never expires (a progress group does: offsets.retention.minutes)
        sink_next = sink_next_of(handler, spec.topic, sub, ctx)
        if sink_next is not None and sink_next > done_next:
            log.info(
                "resuming from the sink's progress",
                extra=_fields(
                    event="drain_sink_progress_ahead",
                    partition=sub.partition,
                    index=sub.index,
                    kafka_next=done_next,
                    sink_next=sink_next,
                ),
            )
            done_next = min(sink_next, sub.end)
    return done_next


TASK_RANGES_PROPERTY = "lagpilot.drain.taskRanges"


def _named_by_driver(spec: TaskSpec) -> SubRange | None:
    """This Spark task's sub-range as the driver named it before the job ran (``drain_spark.task_ranges``:
    the job's local property TASK_RANGES_PROPERTY lists, by task partition index, the partition and
    start offset of the Kafka range each task reads), so the task shows its sign of life when it starts
    reading, also when its sub-range holds no visible record (aborted transactions, compacted away).
    None (not named: no task context, no property, a name that fits no sub-range): the first record
    names it, as before."""
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:
            return None
        raw = tc.getLocalProperty(TASK_RANGES_PROPERTY)
        if not raw:
            return None
        ranges = json.loads(raw)
        pid = int(tc.partitionId())
        if not 0 <= pid < len(ranges):
            return None
        partition, start = (int(v) for v in ranges[pid])
        return sub_range_of(spec.sub_ranges, partition, start)
    except Exception:  # noqa: BLE001 - best effort: the first record names the sub-range
        return None


def _attr(sub: SubRange | None, name: str) -> Any:
    return getattr(sub, name) if sub else None


def _named(sub: SubRange | None) -> Any:
    """The partition for a message: its number, ``?`` before the first record named the sub-range."""
    return sub.partition if sub else "?"


class _Task:
    """One running drain task (run_task's steps): its handler and context, its sub-range once known,
    the progress committer, what is done, the dead-letter producer (made on the first failure)."""

    def __init__(self, spec: TaskSpec, task_started_at: float) -> None:
        from .. import jsonlog
        from ..failure import RetryPolicy
        from ..handler import BatchContext, claims, commits_progress, load_handler

        self.spec = spec
        self.cfg = cfg = ConsumerConfig.from_env()
        jsonlog.setup(cfg.log_level)
        self.handler = load_handler(cfg.handler_spec)
        self.ctx = BatchContext(
            config=dict(cfg.handler_config),
            logger=logging.getLogger("lagpilot.handler"),
            source="drain",
            concurrency=cfg.concurrency,
            group_id=spec.group_id,
            drain_id=spec.drain_id,
        )
        self.sink_progress = commits_progress(self.handler)
        self.fences = claims(self.handler)
        self.policy = RetryPolicy(max_retries=cfg.max_retries, backoff_ms=cfg.retry_backoff_ms)
        self.handler_timeout_s = cfg.max_poll_interval_ms / 1000.0
        self.summary: dict[str, Any] = {
            "records": 0,
            "batches": 0,
            "skipped": 0,
            "first_batch_at": None,
            "last_batch_at": None,
            "task_started_at": task_started_at,
            "worker_forked_at": process_start_time(),
            "daemon_started_at": process_start_time(os.getppid()),
            "first_record_at": None,
        }
        self.sub: SubRange | None = None
        self.committer: Any = None
        self.done_next = 0
        self.done_records = 0
        self.dlq: DeadLetterProducer | None = None
        self.lost_before: tuple[tuple[int, int], ...] = ()  # retention losses recorded in the progress: kept
        self.kafka_next = 0  # the progress group's committed offset (the sink's progress may be ahead of it)

    def run(self, items: Iterable[Any]) -> None:
        """Every record of ``items`` through the handler in batches, then the progress group caught up."""
        named = _named_by_driver(self.spec)
        if named is not None:  # before reading: a sub-range with no visible record shows life too
            self.begin(named)
        batch: list[Any] = []
        for record in items:
            if not self.admit(record):
                continue
            batch.append(record)
            if len(batch) >= self.spec.batch_max_records:
                self.flush(batch)
                batch = []
        if batch:
            self.flush(batch)
        if self.sub is not None and self.kafka_next < self.done_next:
            # the sink's progress is ahead of the progress group (a crash after the sink's commit, before
            # Kafka's) and no record above it came: the group catches up to what the sink holds
            self.commit(self.done_next, self.done_records)
        # NOT the sub-range's end when the records stop short of it: an iterator also ends early when
        # the attempt is cancelled (its caller gone, the CR deleted), and the end committed then made
        # the retry skip the rest as done. The driver completes a range read to its end (markers,
        # compaction at its tail) only once the whole Spark job ended without an error (drain_job.run).

    def begin(self, named: SubRange) -> None:
        """The task's sub-range known: its progress read, its sign of life, its claim in the sink."""
        spec = self.spec
        self.sub = sub = named
        self.committer = progress_consumer(
            self.cfg, progress_group(spec.group_id, spec.drain_id, sub.index, spec.owner)
        )
        self.done_next, self.done_records, self.lost_before = _progress_of(self.committer, spec, sub)
        self.kafka_next = self.done_next
        self.ctx.sub_range = (sub.partition, sub.index, sub.start, sub.end)
        self.done_next = _claim_and_resume(
            spec, self.handler, self.ctx, sub, self.fences, self.sink_progress, self.done_next
        )

    def admit(self, record: Any) -> bool:
        """The record checked against the task's sub-range (the first record names it when the driver
        did not): False when an earlier attempt of this task processed it (a Spark retry)."""
        first = self.summary["first_record_at"] is None
        if first:
            self.summary["first_record_at"] = time.time()
        if self.sub is None:
            self.begin(sub_range_of(self.spec.sub_ranges, record.partition, record.offset))
        sub = self.sub
        assert sub is not None
        if (
            first
        ):  # the summary names the sub-range only once a record came (drain_progress.unread_sub_ranges)
            self.summary.update(partition=sub.partition, index=sub.index)
        if record.partition != sub.partition or not sub.start <= record.offset < sub.end:
            raise RuntimeError(
                f"record p{record.partition}@{record.offset} outside the task's sub-range "
                f"p{sub.partition}[{sub.start}, {sub.end})"
            )
        if record.offset < self.done_next:  # done by an earlier attempt of this task (Spark retry)
            self.summary["skipped"] += 1
            return False
        return True

    def commit(self, next_offset: int, records: int) -> None:
        from confluent_kafka import TopicPartition

        meta = progress_metadata(records, self.lost_before, self.spec.attempt)
        # retried within one deadline while the coordinator moves; any other error fails the task
        # (Spark retries it from the progress committed)
        commit_progress(
            self.committer,
            TopicPartition(self.spec.topic, self.sub.partition, next_offset, metadata=meta),  # type: ignore[union-attr]
        )
        self.kafka_next = max(self.kafka_next, next_offset)

    def flush(self, batch: list[Any]) -> None:
        """One batch through the handler (retried, failures dead-lettered or fatal), then its progress."""
        self.handle(batch)
        self.done_records += len(batch)
        self.done_next = batch[-1].offset + 1
        self.commit(self.done_next, self.done_records)
        now = time.time()
        summary = self.summary
        summary["batches"] += 1
        summary["records"] += len(batch)
        summary["first_batch_at"] = summary["first_batch_at"] or now
        summary["last_batch_at"] = now

    def handle(self, batch: list[Any]) -> None:
        from ..batch_deadline import bounded
        from ..failure import DeadLetterProducer, run_batch

        cfg, ctx = self.cfg, self.ctx
        offsets = None
        if self.sink_progress:
            offsets = {(self.spec.topic, self.sub.partition): batch[-1].offset + 1}  # type: ignore[union-attr]

        def call(piece: list[Any]) -> None:
            # progress with the whole batch only (a piece of a failure isolation does not cover all below it)
            ctx.offsets = offsets if len(piece) == len(batch) else None
            # a hung handler fails the task (BatchTimeout: never retried or dead-lettered), it does not
            # hang it: the consumer's bound on one batch, max.poll.interval.ms, bounds a drain batch too
            with bounded(self.handler_timeout_s, f"drain batch p{piece[0].partition}@{piece[0].offset}"):
                self.handler(piece, ctx)

        result = run_batch(batch, call, self.policy, sleep=time.sleep)
        if result.failures:
            if cfg.failure_policy != "deadLetter":
                where = ", ".join(f.record.where for f in result.failures[:5])
                raise RuntimeError(
                    f"{len(result.failures)} record(s) failed in the drain ({where}); "
                    f"failure policy {cfg.failure_policy} stops the drain task"
                )
            if self.dlq is None:
                self.dlq = DeadLetterProducer(cfg.producer_conf(), cfg.dlq_topic)
            self.dlq.send(result.failures)

    def close(self) -> None:
        if self.committer is not None:
            self.committer.close()
        if self.dlq is not None:
            self.dlq.close()
        self.ctx.close()


def run_task(spec: TaskSpec, items: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Process one sub-range's records: batches through the handler, progress commit after each.

    ``items`` are the Records of one Spark task, in offset order: one Kafka partition's
    ``[start, end)`` that lies inside exactly one sub-range of the plan (the first record names it;
    a record outside it fails the task rather than commit progress for the wrong sub-range).

    Yields one summary dict (records, batches, first/last batch wall time) for the driver's log.
    """
    task_started_at = time.time()
    from .. import redaction
    from ..batch_deadline import BatchTimeout
    from ..failure import SystemicFailure
    from ..handler import Fenced, describe_error

    task = _Task(spec, task_started_at)
    try:
        task.run(items)
        yield task.summary
    except Fenced as exc:  # a later attempt claimed the range: this one must stop writing (it is over)
        sub = task.sub
        log.warning(
            "drain attempt fenced: a later attempt claimed its range",
            extra=_fields(
                event="drain_attempt_fenced",
                drain=spec.drain_id,
                partition=_attr(sub, "partition"),
                index=_attr(sub, "index"),
                epoch=task.ctx.epoch,
            ),
        )
        raise RuntimeError(
            redaction.redact(f"drain task p{_named(sub)} fenced: {describe_error(exc)}")
        ) from None
    except BatchTimeout as exc:  # an Exception for Spark: the task fails (and is retried) with the message
        raise RuntimeError(redaction.redact(f"drain task p{_named(task.sub)} failed: {exc}")) from None
    except Exception as exc:  # noqa: BLE001 - the text Spark carries to the driver and logs: redacted, unchained
        # (a chained cause would be printed whole by the worker's traceback, secrets and all)
        raise RuntimeError(
            redaction.redact(
                f"drain task p{_named(task.sub)} failed: "
                f"{exc if isinstance(exc, SystemicFailure) else describe_error(exc)}"
            )
        ) from None
    finally:
        task.close()
