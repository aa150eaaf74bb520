"""`lagpilot consume`: the batch consumer loop (confluent-kafka), configured by the pod environment.

The loop, on one thread (the only one that touches the Kafka consumer and commits):

1. fill a batch: ``consume(num_messages=N - have, timeout)`` until N records, or T ms after the
   first record of the batch arrived, or shutdown was requested;
2. call the handler once with the batch (retries, failure isolation and the failure policy in
   :mod:`lagpilot_runtime.failure`);
3. commit, synchronously, each partition's highest processed offset + 1 (never past a record that
   was not processed or dead-lettered) with the capacity metadata string ``lp1;cap=..;ts=..``.

Rebalances (cooperative-sticky, so callbacks only concern the partitions that move) run inside
``consume()``, i.e. between batches, never during a handler call. On revoke the records already
taken from Kafka but not yet handed to the handler are processed and committed before the
partitions are given up (unless shutting down: then they are abandoned, uncommitted). On lost
(session expired; we may no longer commit) the lost partitions' pending records are dropped.

Drain hand-off (docs/drain.md, :mod:`lagpilot_runtime.handoff_mailbox`): at every batch boundary
(after the batch commit, never mid-handler; at most one mailbox read per 0.5 s) and synchronously
in on_assign for newly assigned partitions, the loop reads the hand-off mailbox of its partitions
through a second Consumer that never subscribes. For a drain request on a partition it owns it
writes the ack (start = its committed offset), THEN commits its own offset ``split``, THEN seeks
there: the drained partition pauses for that one step, the other partitions not at all.

SIGTERM/SIGINT: stop consuming; a handler call in progress finishes and its batch is committed;
records not yet handed to the handler are abandoned (not processed, not committed); the consumer
closes. A watchdog ends the process if this takes longer than LAGPILOT_SHUTDOWN_GRACE_MS.

Exit codes: 0 clean shutdown, 1 fatal (exit policy, systemic handler failure, dead-lettering
failed, fenced or fatal Kafka error), 2 invalid configuration or handler.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Sequence

from . import jsonlog
from .jsonlog import fields as _fields
from .config import ConfigError, ConsumerConfig
from . import handoff_mailbox as mbx
from .failure import (Abandoned, DeadLetterError, DeadLetterProducer, Failure, RetryPolicy, SystemicFailure,
                      commit_positions, run_batch)
from .handler import (BatchContext, Handler, HandlerLoadError, Record, batch_offsets, commits_progress, describe_error,
                      load_handler)
from . import commit_metadata
from .metrics import CapacityEstimator, ConsumerMetrics, Health, MetricsServer

log = logging.getLogger("lagpilot.consumer")

POLL_SLICE_S = 0.5  # longest single consume() wait: bounds how late a SIGTERM is noticed while idle
COMMIT_ATTEMPTS = 3
CLOSE_COMMIT_ATTEMPTS = 5   # a refused commit (rebalance in progress) retried at close, ~2 s in all
CLOSE_COMMIT_BACKOFF_S = 0.4
HANDOFF_CHECK_INTERVAL_S = 0.5  # at most two mailbox reads (OffsetFetch) a second at batch boundaries: the ack delays a drain's start
HANDOFF_TIMEOUT_S = 10.0

TP = tuple[str, int]


_FIELDS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp_ms")


class KafkaRecord(Record):
    """A :class:`Record` read from its confluent_kafka Message on first field access.

    Building seven-field objects for every record costs ~1 µs each, as much as the rest of the
    loop's per-record work; a handler that forwards a batch or only looks at some records should
    not pay it. The first access to any field materialises all of them (then the message is
    dropped); equality, hashing, ``repr``, ``dataclasses.replace``/``asdict`` and pickling behave
    as for a plain Record.
    """

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        msg = d.pop("_msg", None)
        if msg is None:
            raise AttributeError(name)
        ts_type, ts = msg.timestamp()
        headers = msg.headers()
        d.update(topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), key=msg.key(), value=msg.value(),
                 headers=[(k, v if v is not None else b"") for k, v in headers] if headers else [],
                 timestamp_ms=ts if ts_type != 0 else None)
        if name not in d:
            raise AttributeError(name)
        return d[name]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    __hash__ = Record.__hash__

    def __reduce__(self) -> tuple:
        return (Record, tuple(getattr(self, f) for f in _FIELDS))


_new = object.__new__


def to_record(msg: Any) -> Record:
    """A confluent_kafka.Message → Record (lazy; bytes untouched, no decoding, so it cannot fail)."""
    r = _new(KafkaRecord)
    r.__dict__["_msg"] = msg
    return r


class FatalError(Exception):
    """Stop the consumer with exit code 1."""


def _test_crash_point(point: str) -> None:
    """Die like ``kill -9`` at a named hand-off step, once (marker file holding the pid): the real
    tests' way to kill a consumer between its ack, its split commit and its seek.

    LP_TEST_HANDOFF_CRASH_AT="after_ack|after_commit" and LP_TEST_HANDOFF_CRASH_DIR; unset in
    production (a no-op). Not LAGPILOT_*: those names are reserved in the CR's template env."""
    at = os.environ.get("LP_TEST_HANDOFF_CRASH_AT")
    marker_dir = os.environ.get("LP_TEST_HANDOFF_CRASH_DIR")
    if not at or not marker_dir or point not in at.split(","):
        return
    marker = os.path.join(marker_dir, f"handoff-{point}")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # once across all consumer processes
    except FileExistsError:
        return
    os.write(fd, f"{os.getpid()} {time.time()} {os.environ.get('HOSTNAME', '')}".encode())  # pid, when, pod
    os.close(fd)
    log.warning("fault injection: exiting", extra=_fields(event="test_crash", point=point))
    os._exit(137)


_HANDOFF_METRICS: dict[int, tuple[Any, Any]] = {}


def _handoff_metrics(registry: Any) -> tuple[Any, Any]:
    got = _HANDOFF_METRICS.get(id(registry))
    if got is None:
        from prometheus_client import Counter, Gauge
        got = (Counter("lagpilot_consumer_handoffs_total", "Drain hand-off steps taken by this consumer, by outcome",
                       ["outcome"], registry=registry),
               Gauge("lagpilot_consumer_handoff_pause_seconds",
                     "How long the last hand-off held this consumer's loop (mailbox read to seek)", registry=registry))
        _HANDOFF_METRICS[id(registry)] = got
    return got


class BatchConsumer:
    """The loop around an injected confluent_kafka.Consumer-like object (a fake in unit tests)."""

    def __init__(
        self,
        cfg: ConsumerConfig,
        consumer: Any,
        handler: Handler,
        dead_letter: Callable[[Sequence[Failure]], None] | None = None,
        metrics: ConsumerMetrics | None = None,
        health: Health | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        mailbox: Any = None,
    ) -> None:
        self.cfg = cfg
        self.consumer = consumer
        self.handler = handler
        self.dead_letter = dead_letter
        self.metrics = metrics or ConsumerMetrics()
        self.health = health or Health(stale_after_s=cfg.max_poll_interval_ms / 1000.0)
        self.clock = clock
        self.wall_ms = wall_ms
        self.stop_event = threading.Event()
        self.ctx = BatchContext(config=dict(cfg.handler_config), logger=logging.getLogger("lagpilot.handler"),
                                source="consumer", concurrency=cfg.concurrency, group_id=cfg.group_id)
        # exactly-once capability: the handler stores its progress with its output (docs/consumer.md)
        self.sink_progress = commits_progress(handler)
        self.policy = RetryPolicy(cfg.max_retries, cfg.retry_backoff_ms)
        self.capacity = CapacityEstimator(cfg.batch_max_records)
        self.pending: list[Record] = []
        self.owned: set[TP] = set()
        self.paused: set[TP] = set()
        self.committed: dict[TP, int] = {}
        self.high_watermarks: dict[TP, int] = {}
        self.exit_code = 0
        self.fatal: BaseException | None = None
        self.processed_records = 0  # records of successful batches (dead-lettered included)
        self._last_commit_s = 0.0
        self.uncommitted: dict[TP, int] = {}  # processed, commit failed non-fatally: retried later
        # drain hand-off: a Consumer of the mailbox group that never subscribes (None: disabled)
        self.mailbox = mailbox
        self.floor: dict[TP, int] = {}       # handed-off partitions: never commit below their split
        self.skip_below: dict[TP, int] = {}  # drop records below the split (a seek that could not run yet)
        self._last_handoff_check = float("-inf")
        self.handoffs, self.handoff_pause = _handoff_metrics(self.metrics.registry)

    # -- lifecycle -------------------------------------------------------------------------------
    def subscribe(self) -> None:
        self.consumer.subscribe([self.cfg.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def request_stop(self, reason: str = "signal") -> None:
        if not self.stop_event.is_set():
            log.info("shutdown requested", extra=_fields(event="shutdown_requested", reason=reason))
        self.stop_event.set()
        self.health.stopping = True

    def run(self) -> int:
        """Consume until stopped; returns the exit code."""
        self.subscribe()
        try:
            while not self.stop_event.is_set():
                batch = self.fill_batch()
                if self.fatal is not None:
                    raise FatalError(describe_error(self.fatal))
                if self.stop_event.is_set():
                    self._abandon(batch, "shutdown")
                    break
                if batch:
                    self.process(batch)
                self.check_handoff()  # a batch boundary: everything handed out is processed and committed
        except FatalError as exc:
            self.exit_code = 1
            self.health.fatal = str(exc)
            log.error("consumer stopping on a fatal error", extra=_fields(event="fatal", error=str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug or an unexpected client error: stop, commit nothing more
            self.exit_code = 1
            log.exception("consumer stopping on an unexpected error",
                          extra=_fields(event="fatal", error=describe_error(exc)))
        finally:
            self._abandon(self.pending, "shutdown")
            self.pending = []
            self.health.stopping = True
        return self.exit_code

    def close(self) -> None:
        """Leave cleanly: close the Kafka consumer. Everything processed is committed, except positions
        whose commit the broker refused (a rebalance in progress while we were stopping): those get a
        few more attempts here, while the partitions are still ours, before close() gives them up."""
        self.stop_event.set()
        for attempt in range(CLOSE_COMMIT_ATTEMPTS):
            if not self.uncommitted:
                break
            log.info("committing processed positions before closing", extra=_fields(
                event="close_commit", attempt=attempt, partitions=sorted(p for _, p in self.uncommitted)))
            try:
                if self._commit_offsets({}):
                    break
            except Exception as exc:  # noqa: BLE001 - closing on the way out: the next owner replays
                log.warning("commit before close failed", extra=_fields(event="close_commit_failed", error=describe_error(exc)))
                break
            time.sleep(CLOSE_COMMIT_BACKOFF_S)
        try:
            self.consumer.close()
        except Exception as exc:  # noqa: BLE001 - closing on the way out
            log.warning("consumer close failed", extra=_fields(event="close_failed", error=describe_error(exc)))
        self.ctx.close()

    # -- batching -------------------------------------------------------------------------------
    def fill_batch(self) -> list[Record]:
        """Up to N records, or what arrived within T ms of the batch's first record."""
        n = self.cfg.batch_max_records
        timeout_s = self.cfg.batch_timeout_ms / 1000.0
        deadline: float | None = self.clock() + timeout_s if self.pending else None
        while len(self.pending) < n and not self.stop_event.is_set() and self.fatal is None:
            wait = POLL_SLICE_S if deadline is None else min(POLL_SLICE_S, deadline - self.clock())
            if wait <= 0:
                break
            msgs = self.consumer.consume(num_messages=n - len(self.pending), timeout=wait)
            self.health.progress()
            self.metrics.last_progress.set(time.time())
            append, paused = self.pending.append, self.paused
            for m in msgs:  # the hot path: keep it to a few calls per record
                err = m.error()
                if err is not None:
                    self._on_message_error(m, err)
                    continue
                if paused and (m.topic(), m.partition()) in paused:
                    continue  # fetched before the pause took effect; consumed again after a restart
                if self.skip_below and self._below_split(m):
                    continue  # prefetched below a hand-off's split: the drain owns it
                append(to_record(m))
            if self.pending and deadline is None:
                deadline = self.clock() + timeout_s
        batch, self.pending = self.pending, []
        return batch

    def _below_split(self, m: Any) -> bool:
        key = (m.topic(), m.partition())
        floor = self.skip_below.get(key)
        if floor is None:
            return False
        if m.offset() < floor:
            return True
        del self.skip_below[key]  # the fetch is past the split: nothing below it can follow
        return False

    # -- drain hand-off ---------------------------------------------------------------------------
    def check_handoff(self, parts: set[TP] | None = None) -> None:
        """Apply the owner's mailbox rule (handoff_mailbox.owner_step) to owned partitions.

        Called at batch boundaries (rate-limited) and from on_assign for the new partitions
        (``parts``, always). A failure here is logged and retried at the next check: the ack and
        the split commit are each idempotent under the rule."""
        if self.mailbox is None:
            return
        explicit = parts
        if parts is None:
            if self.clock() - self._last_handoff_check < HANDOFF_CHECK_INTERVAL_S:
                return
            self._last_handoff_check = self.clock()
            parts = set(self.owned)
        # a partition with a failed commit outstanding has processed records above its commit:
        # acking that commit would hand them to the drain too; wait for the commit to succeed
        todo = sorted(tp for tp in parts - self.paused if tp in self.owned and tp not in self.uncommitted)
        if not todo:
            return
        from confluent_kafka import TopicPartition

        t0 = self.clock()
        # in on_assign a few tries: a new owner that skipped the check could process records an
        # earlier owner's ack already gave the drain (duplicates, never a gap: the next check fixes it)
        tries = 1 if explicit is None else 3
        for attempt in range(tries):
            try:
                got = self.mailbox.committed([TopicPartition(t, p) for t, p in todo], timeout=HANDOFF_TIMEOUT_S)
                break
            except Exception as exc:  # noqa: BLE001 - retried at the next boundary
                log.warning("reading the hand-off mailbox failed", extra=_fields(
                    event="handoff_read_failed", error=describe_error(exc), attempt=attempt))
        else:
            return
        for tp in got:
            entry = mbx.decode(getattr(tp, "metadata", None), tp.offset)
            if entry is None or entry.done:
                continue
            key = (tp.topic, tp.partition)
            if entry.acked and self.committed.get(key, -1) >= entry.split:
                continue  # frozen: nothing to do (no OffsetFetch needed)
            try:
                own = self._own_committed(key)
                self._apply_handoff(key, entry, mbx.owner_step(entry, own), own, t0)
            except FatalError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried at the next boundary / by the next owner
                log.warning("hand-off step failed; retried at the next check", extra=_fields(
                    event="handoff_failed", partition=tp.partition, drain_id=entry.drain_id, error=describe_error(exc)))

    def sync_sink_progress(self, parts: set[TP]) -> None:
        """For a progress-committing handler: read its progress for ``parts`` and, where it is ahead
        of the group's committed offset, commit it to Kafka (synchronous), skip records below it and
        seek there. Records below the sink's progress are in the sink: delivering them again would
        duplicate them. Fails the consumer (exit 1, restarted) if the sink cannot be read: processing
        without knowing its progress could deliver twice."""
        if not self.sink_progress or not parts:
            return
        from confluent_kafka import KafkaException, TopicPartition

        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(parts):
            by_topic.setdefault(t, []).append(p)
        got: dict[TP, int] = {}
        for topic, plist in by_topic.items():
            for attempt in range(3):
                try:
                    got.update({(topic, int(p)): int(o) for p, o in
                                self.handler.progress(topic, plist, self.ctx).items()})  # type: ignore[attr-defined]
                    break
                except Exception as exc:  # noqa: BLE001 - retried, then fatal
                    log.warning("reading the sink's progress failed", extra=_fields(
                        event="sink_progress_failed", error=describe_error(exc), attempt=attempt))
                    if attempt == 2:
                        raise FatalError(f"cannot read the sink's progress: {describe_error(exc)}") from exc
                    self._sleep(0.5 * (attempt + 1))
        ahead: dict[TP, int] = {}
        for key, sink_next in got.items():
            if sink_next > self._own_committed(key):
                _low, high = self.consumer.get_watermark_offsets(TopicPartition(*key), timeout=HANDOFF_TIMEOUT_S)
                if sink_next > high:  # e.g. the topic was recreated: the progress belongs to another log
                    log.warning("the sink's progress is beyond the partition's end; ignored", extra=_fields(
                        event="sink_progress_ignored", topic=key[0], partition=key[1], sink_next=sink_next, end=high))
                    continue
                ahead[key] = sink_next
        if not ahead:
            return
        metadata = commit_metadata.encode(self.capacity.capacity(), self.wall_ms())
        res = self.consumer.commit(offsets=[TopicPartition(t, p, o, metadata=metadata) for (t, p), o in sorted(ahead.items())],
                                   asynchronous=False)
        errors = [x for x in (res or []) if getattr(x, "error", None)]
        if errors:
            raise KafkaException(errors[0].error)
        for (t, p), o in ahead.items():
            self.committed[(t, p)] = o
            self.skip_below[(t, p)] = max(o, self.skip_below.get((t, p), -1))
            self.pending = [r for r in self.pending if (r.topic, r.partition) != (t, p) or r.offset >= o]
            self.metrics.committed_offset.labels(t, str(p)).set(o)
            try:
                self.consumer.seek(TopicPartition(t, p, o))
            except Exception:  # noqa: BLE001 - not assigned yet in on_assign: fetch starts at the commit
                pass
        log.info("resuming from the sink's progress (ahead of the group's commit)", extra=_fields(
            event="sink_progress_ahead", partitions={f"{t}/{p}": o for (t, p), o in sorted(ahead.items())}))

    def _own_committed(self, key: TP) -> int:
        """This group's committed offset of the partition (everything below it is processed)."""
        from confluent_kafka import TopicPartition

        c = self.committed.get(key)
        if c is not None:
            return c
        got = self.consumer.committed([TopicPartition(*key)], timeout=HANDOFF_TIMEOUT_S)[0]
        if got.offset is not None and got.offset >= 0:
            return int(got.offset)
        low, _high = self.consumer.get_watermark_offsets(TopicPartition(*key), timeout=HANDOFF_TIMEOUT_S)
        return int(low)  # never committed: auto.offset.reset=earliest starts at the low watermark

    def _apply_handoff(self, key: TP, entry: mbx.Entry, step: mbx.OwnerStep, own: int, t0: float) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        t, p = key
        if step.noop:
            return
        if step.ack is not None:  # 1. the ack (start = own committed): before the split commit
            res = self.mailbox.commit(offsets=[TopicPartition(t, p, entry.split, metadata=step.ack.encode())], asynchronous=False)
            errors = [x for x in (res or []) if getattr(x, "error", None)]
            if errors:
                raise KafkaException(errors[0].error)
            _test_crash_point("after_ack")
        moved = step.move_to is not None
        if moved:
            split = int(step.move_to)  # type: ignore[arg-type]
            # 2. our own offset to split (synchronous); records below it now belong to the drain
            metadata = commit_metadata.encode(self.capacity.capacity(), self.wall_ms())
            res = self.consumer.commit(offsets=[TopicPartition(t, p, split, metadata=metadata)], asynchronous=False)
            errors = [x for x in (res or []) if getattr(x, "error", None)]
            if errors:
                raise KafkaException(errors[0].error)
            self.committed[key] = split
            self.floor[key] = split
            self.metrics.committed_offset.labels(t, str(p)).set(split)
            _test_crash_point("after_commit")
            # 3. seek: drop what was prefetched below split
            self.skip_below[key] = split
            self.pending = [r for r in self.pending if (r.topic, r.partition) != key or r.offset >= split]
            try:
                self.consumer.seek(TopicPartition(t, p, split))
            except Exception as exc:  # noqa: BLE001 - in on_assign the partition is not assigned yet:
                # its fetch then starts from the committed offset (split); skip_below guards either way
                log.debug("seek after hand-off deferred", extra=_fields(event="handoff_seek_deferred", partition=p,
                                                                        error=describe_error(exc)))
        pause = max(0.0, self.clock() - t0)
        outcome = "moved" if moved else "acked_empty"
        self.handoffs.labels(outcome).inc()
        if moved:
            self.handoff_pause.set(pause)
        start = step.ack.ack if step.ack is not None else entry.ack
        log.info("drain hand-off", extra=_fields(
            event="handoff_ack", topic=t, partition=p, drain_id=entry.drain_id, start=start, split=entry.split,
            own_committed=own, moved=moved, reack=entry.acked and step.ack is not None, pause_s=round(pause, 3)))

    def _on_message_error(self, msg: Any, err: Any) -> None:
        """Errors delivered as messages never crash the loop, except librdkafka's fatal ones."""
        name = err.name() if hasattr(err, "name") else str(err)
        fields = dict(event="kafka_error", error=str(err), code=name)
        try:
            if msg.topic() is not None:
                fields.update(topic=msg.topic(), partition=msg.partition(), offset=msg.offset())
        except Exception:  # noqa: BLE001 - some error events carry no topic
            pass
        if hasattr(err, "fatal") and err.fatal():
            self.fatal = FatalError(f"fatal Kafka error: {err}")
            self.health.fatal = str(self.fatal)
            log.error("fatal Kafka error", extra=_fields(**fields))
            return
        if name in ("_TRANSPORT", "_ALL_BROKERS_DOWN"):
            self.health.connected = False
        log.warning("Kafka error", extra=_fields(**fields))

    # -- processing -------------------------------------------------------------------------------
    def process(self, batch: list[Record]) -> None:
        """Handler (with the failure policy), then commit. Raises FatalError to stop the loop."""
        t0 = self.clock()
        offsets = batch_offsets(batch) if self.sink_progress else None

        def call(piece: list[Record]) -> None:
            # progress only with the whole batch: a piece of a failure isolation does not cover
            # everything below its last offset (its rows are at-least-once, docs/consumer.md)
            self.ctx.offsets = offsets if len(piece) == len(batch) else None
            self.handler(piece, self.ctx)

        def on_error(piece: Sequence[Record], exc: BaseException, attempt: int) -> None:
            self.metrics.handler_errors.inc()
            if attempt > 0:
                self.metrics.retries.inc()
            first, last = piece[0], piece[-1]
            log.warning("handler failed", extra=_fields(
                event="handler_error", records=len(piece), attempt=attempt, error=describe_error(exc),
                first=first.where, last=last.where))

        try:
            result = run_batch(batch, call, self.policy, sleep=self._sleep, should_stop=self.stop_event.is_set,
                               on_error=on_error)
        except Abandoned:
            self.metrics.batches.labels("abandoned").inc()
            self._abandon(batch, "shutdown during retries")
            return
        except SystemicFailure as exc:
            self.metrics.batches.labels("failed").inc()
            raise FatalError(f"{exc}; nothing of this batch is committed, it is consumed again after restart") from exc
        failures = result.failures
        policy = self.cfg.failure_policy
        for f in failures:
            self.metrics.failed_records.labels(policy).inc()
            log.error("record failed", extra=_fields(
                event="record_failed", topic=f.record.topic, partition=f.record.partition, offset=f.record.offset,
                error=f.error, retriable=f.retriable, policy=policy))
        if failures and policy == "deadLetter":
            try:
                if self.dead_letter is None:
                    raise DeadLetterError("no dead-letter producer configured")
                self.dead_letter(failures)
            except DeadLetterError as exc:
                self.metrics.batches.labels("failed").inc()
                raise FatalError(f"{exc}; the batch is not committed") from exc
            self.metrics.dlq_records.inc(len(failures))
        if failures and policy == "pause":
            self._pause({(f.record.topic, f.record.partition) for f in failures})
        if failures and policy != "deadLetter":
            positions = commit_positions(batch, failures, policy)  # up to the first failure: per record
        else:
            positions = self._consumed_positions()
        self.commit(positions, t0=t0, n=len(batch))
        ok_records = len(batch) - len(failures)
        self.metrics.records.inc(ok_records)
        self.processed_records += len(batch) if policy == "deadLetter" else ok_records
        self.metrics.batches.labels("ok" if not failures else "partial").inc()
        self.metrics.batch_size.observe(len(batch))
        self.health.progress()
        if failures and policy == "exit":
            where = ", ".join(f.record.where for f in failures[:5])
            raise FatalError(f"failure policy exit: {len(failures)} record(s) failed ({where}); committed up to the first failure")

    def commit(self, positions: dict[TP, int], t0: float, n: int) -> None:
        """Commit ``positions`` (owned partitions only) with the capacity metadata, then update metrics.

        Positions whose commit failed without being fatal (e.g. ILLEGAL_GENERATION while a
        rebalance is under way) are kept and committed with the next batch or, at the latest,
        in on_revoke before the partition is given up, so a failed commit alone causes no replay.
        """
        # busy = handler (+ retries, DLQ) + commit; this commit's own cost is not known before it
        # happens, so the previous commit's duration stands in for it
        self.capacity.observe(n, self.clock() - t0 + self._last_commit_s)
        commit_start = self.clock()
        ok = self._commit_offsets(positions)
        busy = self.clock() - t0
        if ok:
            self._last_commit_s = max(0.0, self.clock() - commit_start)
        self.metrics.batch_duration.observe(busy)
        cap = self.capacity.capacity()
        if cap is not None:
            self.metrics.capacity.set(cap)

    def _commit_offsets(self, positions: dict[TP, int]) -> bool:
        """Synchronous commit of these and any outstanding positions; True when it succeeded."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        merged = dict(self.uncommitted)
        for tp, off in positions.items():
            merged[tp] = max(off, merged.get(tp, -1))
        todo = {tp: off for tp, off in merged.items() if tp in self.owned and off >= self.floor.get(tp, -1)}
        dropped = set(merged) - set(todo)
        if dropped:
            log.warning("not committing partitions no longer assigned", extra=_fields(
                event="commit_skipped", partitions=sorted(p for _, p in dropped)))
        self.uncommitted = {}
        if not todo:
            return True
        metadata = commit_metadata.encode(self.capacity.capacity(), self.wall_ms())
        offsets = [TopicPartition(t, p, off, metadata=metadata) for (t, p), off in sorted(todo.items())]
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                result = self.consumer.commit(offsets=offsets, asynchronous=False)
                errors = [tp for tp in (result or []) if getattr(tp, "error", None)]
                if errors:
                    raise KafkaException(errors[0].error)
                break
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                code = err.code() if hasattr(err, "code") else None
                self.metrics.commits.labels("failed").inc()
                fields = dict(event="commit_failed", error=str(err), attempt=attempt, partitions=sorted(p for _, p in todo))
                if code == KafkaError.FENCED_INSTANCE_ID or (hasattr(err, "fatal") and err.fatal()):
                    log.error("commit failed fatally", extra=_fields(**fields))
                    raise FatalError(f"commit failed: {err}") from exc
                retriable = hasattr(err, "retriable") and err.retriable()
                if not retriable or attempt == COMMIT_ATTEMPTS - 1:
                    # typically a rebalance in progress: keep the positions for the next commit or
                    # on_revoke; if the partitions are lost meanwhile, their next owner re-consumes
                    # from the last commit (at-least-once; the postgres sink makes that harmless)
                    self.uncommitted = todo
                    log.warning("commit failed; will commit again with the next batch or on revoke", extra=_fields(**fields))
                    return False
                log.warning("commit failed, retrying", extra=_fields(**fields))
                self._sleep(0.1 * (attempt + 1))
        self.metrics.commits.labels("ok").inc()
        for (t, p), off in todo.items():
            self.committed[(t, p)] = off
            self.metrics.committed_offset.labels(t, str(p)).set(off)
            hw = self.high_watermarks.get((t, p))
            if hw is not None and hw >= 0:
                self.metrics.lag.labels(t, str(p)).set(max(0, hw - off))
        return True

    def _consumed_positions(self) -> dict[TP, int]:
        """Each owned, unpaused partition's position: its last record handed out + 1.

        Every record handed out since the previous commit is in the batch just processed (records
        of paused or lost partitions are dropped, and those partitions are not committed here), so
        this is the batch's highest offset + 1 per partition, from one call instead of a pass over
        every record (which would also materialise every lazy KafkaRecord).
        """
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(t, p) for t, p in sorted(self.owned - self.paused)]
        if not tps:
            return {}
        out: dict[TP, int] = {}
        for tp in self.consumer.position(tps):
            key = (tp.topic, tp.partition)
            if tp.offset >= 0 and tp.offset != self.committed.get(key):
                out[key] = tp.offset
        return out

    def _pause(self, tps: set[TP]) -> None:
        from confluent_kafka import TopicPartition

        new = tps - self.paused
        if not new:
            return
        self.consumer.pause([TopicPartition(t, p) for t, p in sorted(new)])
        self.paused |= new
        self.metrics.paused.set(len(self.paused))
        self.health.paused = sorted(f"{t}/{p}" for t, p in self.paused)
        self.pending = [r for r in self.pending if (r.topic, r.partition) not in self.paused]
        log.error("partitions paused by the failure policy; they resume after a restart or a rebalance",
                  extra=_fields(event="partitions_paused", partitions=sorted(f"{t}/{p}" for t, p in new)))

    def _abandon(self, records: list[Record], why: str) -> None:
        if records:
            log.info("abandoning records not yet handed to the handler (not committed)",
                     extra=_fields(event="batch_abandoned", records=len(records), reason=why))

    def _sleep(self, seconds: float) -> None:
        """Backoff sleep that a shutdown request cuts short."""
        self.stop_event.wait(seconds)

    # -- rebalance callbacks (run inside consume(), on this thread) ---------------------------------
    def _on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        new = {(tp.topic, tp.partition) for tp in partitions}
        self.owned |= new
        self.health.member = True
        self.health.connected = True
        self.health.assigned = len(self.owned)
        self.metrics.assigned.set(len(self.owned))
        self.metrics.rebalances.labels("assign").inc()
        log.info("partitions assigned", extra=_fields(event="assigned", partitions=sorted(p for _, p in new),
                                                       owned=sorted(p for _, p in self.owned)))
        try:
            # the sink may be ahead of Kafka (crash after its commit, before ours): catch Kafka up
            # first, so the hand-off's ack below and every later commit start from max(both)
            self.sync_sink_progress(new)
            # a drain hand-off of a partition we just got: before any record of it is processed
            self.check_handoff(new)
        except Exception as exc:  # noqa: BLE001 - never let an exception escape into librdkafka
            self.fatal = exc
            self.stop_event.set()

    def _on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.metrics.rebalances.labels("revoke").inc()
        try:
            if self.pending and not self.stop_event.is_set() and self.fatal is None:
                # finish the in-flight batch: the records were taken from Kafka, process and commit
                # them while we still own their partitions
                batch, self.pending = self.pending, []
                log.info("revoke: finishing the in-flight batch before giving partitions up",
                         extra=_fields(event="revoke_flush", records=len(batch), partitions=sorted(p for _, p in gone)))
                self.process(batch)
            elif self.pending:
                self._abandon([r for r in self.pending if (r.topic, r.partition) in gone], "revoked during shutdown")
                self.pending = [r for r in self.pending if (r.topic, r.partition) not in gone]
            if any(tp in gone for tp in self.uncommitted):
                self._commit_offsets({})  # last chance for positions whose commit failed earlier
        except FatalError as exc:
            self.fatal = exc
            self.stop_event.set()
        except Exception as exc:  # noqa: BLE001 - never let an exception escape into librdkafka
            self.fatal = exc
            self.stop_event.set()
        finally:
            self._forget(gone)
            log.info("partitions revoked", extra=_fields(event="revoked", partitions=sorted(p for _, p in gone),
                                                          owned=sorted(p for _, p in self.owned)))

    def _on_lost(self, _consumer: Any, partitions: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.metrics.rebalances.labels("lost").inc()
        dropped = [r for r in self.pending if (r.topic, r.partition) in gone]
        self.pending = [r for r in self.pending if (r.topic, r.partition) not in gone]
        self._abandon(dropped, "partitions lost")
        self._forget(gone)
        log.warning("partitions lost (session expired); their uncommitted records go to the next owner",
                    extra=_fields(event="lost", partitions=sorted(p for _, p in gone),
                                  owned=sorted(p for _, p in self.owned)))

    def _forget(self, gone: set[TP]) -> None:
        self.owned -= gone
        if self.paused & gone:
            self.paused -= gone
            self.metrics.paused.set(len(self.paused))
            self.health.paused = sorted(f"{t}/{p}" for t, p in self.paused)
        for t, p in gone:
            self.committed.pop((t, p), None)
            self.floor.pop((t, p), None)
            self.skip_below.pop((t, p), None)
            self.uncommitted.pop((t, p), None)
            self.high_watermarks.pop((t, p), None)
            self.metrics.forget_partition(t, p)
        self.health.assigned = len(self.owned)
        self.metrics.assigned.set(len(self.owned))

    # -- librdkafka callbacks ------------------------------------------------------------------------
    def on_stats(self, stats_json: str) -> None:
        """Every statistics.interval.ms: broker reachability (readiness) and high watermarks (lag)."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        brokers = [b for b in stats.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        if brokers:
            self.health.connected = any(b.get("state") == "UP" for b in brokers)
        for pid, pst in stats.get("topics", {}).get(self.cfg.topic, {}).get("partitions", {}).items():
            p = int(pid)
            if p < 0 or (self.cfg.topic, p) not in self.owned:
                continue
            hi = pst.get("hi_offset", -1)
            if hi is not None and hi >= 0:
                self.high_watermarks[(self.cfg.topic, p)] = hi
                c = self.committed.get((self.cfg.topic, p))
                if c is not None:
                    self.metrics.lag.labels(self.cfg.topic, str(p)).set(max(0, hi - c))

    def on_error(self, err: Any) -> None:
        """Client-level errors (not tied to a record)."""
        name = err.name() if hasattr(err, "name") else str(err)
        if name in ("_ALL_BROKERS_DOWN", "_TRANSPORT"):
            self.health.connected = False
        if hasattr(err, "fatal") and err.fatal():
            self.fatal = FatalError(f"fatal Kafka error: {err}")
            self.health.fatal = str(self.fatal)  # /healthz fails even if the client then blocks
            self.stop_event.set()
        log.warning("Kafka client error", extra=_fields(event="kafka_error", code=name, error=str(err)))


def _exit_after(grace_s: float, code: int) -> threading.Timer:
    """A watchdog: exit the process with ``code`` after ``grace_s`` unless it ended by itself (a client
    that blocks in close() after a fatal error, e.g. a fenced static member, must not hang the pod)."""
    def expire() -> None:
        log.error("shutdown grace period expired; exiting without finishing",
                  extra=_fields(event="grace_expired", grace_s=grace_s))
        logging.shutdown()
        os._exit(code)

    timer = threading.Timer(grace_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def _install_signals(loop: BatchConsumer, grace_s: float) -> None:
    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if loop.stop_event.is_set():
            return
        loop.request_stop(name)
        _exit_after(grace_s, 1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def build(cfg: ConsumerConfig, handler: Handler) -> tuple[BatchConsumer, MetricsServer, DeadLetterProducer | None]:
    """The real loop: confluent-kafka consumer, DLQ producer, metrics server (also used by bench/)."""
    from confluent_kafka import Consumer

    metrics = ConsumerMetrics()
    health = Health(stale_after_s=cfg.max_poll_interval_ms / 1000.0)
    server = MetricsServer(metrics, health, cfg.metrics_port).start()
    log.info("metrics endpoint up", extra=_fields(event="metrics_listening", port=server.port))
    dlq: DeadLetterProducer | None = None
    if cfg.failure_policy == "deadLetter":
        dlq = DeadLetterProducer(cfg.producer_conf(), cfg.dlq_topic)
    holder: dict[str, BatchConsumer] = {}
    conf = cfg.consumer_conf()
    conf["statistics.interval.ms"] = 5000  # readiness (broker state) and high watermarks (lag)
    conf["stats_cb"] = lambda s: holder["loop"].on_stats(s)
    conf["error_cb"] = lambda e: holder["loop"].on_error(e)
    consumer = Consumer(conf, logger=logging.getLogger("lagpilot.consumer.librdkafka"))
    loop = BatchConsumer(cfg, consumer, handler, dead_letter=dlq.send if dlq else None, metrics=metrics, health=health,
                         # LP_TEST_NO_HANDOFF (tests only): behave like an older image without the mailbox
                         mailbox=None if os.environ.get("LP_TEST_NO_HANDOFF") else mailbox_consumer(cfg))
    holder["loop"] = loop
    return loop, server, dlq


def mailbox_consumer(cfg: ConsumerConfig) -> Any:
    """The drain hand-off mailbox reader/writer: a Consumer of the memberless mailbox group that
    never subscribes (only OffsetFetch and "simple" commits; never joins, never fetches records)."""
    from confluent_kafka import Consumer

    conf = {k: v for k, v in cfg.consumer_conf().items()
            if k not in ("group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
                         "max.poll.interval.ms", "queued.min.messages")}
    conf.update({"group.id": mbx.mailbox_group(cfg.group_id), "client.id": f"lagpilot-handoff-{cfg.pod_name or 'consumer'}",
                 "enable.auto.commit": False, "enable.auto.offset.store": False})
    return Consumer(conf, logger=logging.getLogger("lagpilot.consumer.librdkafka"))


def shutdown(loop: BatchConsumer, server: MetricsServer, dlq: DeadLetterProducer | None) -> None:
    """Close the consumer, the DLQ producer, sink connections and the metrics server."""
    loop.close()
    if loop.mailbox is not None:
        try:
            loop.mailbox.close()
        except Exception:  # noqa: BLE001 - closing on the way out
            pass
    if dlq is not None:
        dlq.close()
    try:
        from .sinks import postgres as _pg

        _pg.close()
    except Exception:  # noqa: BLE001 - psycopg may be absent in a custom image
        pass
    server.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `lagpilot consume` (the consumer image's command). Configured by the environment."""
    parser = argparse.ArgumentParser(prog="lagpilot consume", description=(
        "Run the lagpilot batch consumer. Configuration comes from LAGPILOT_* environment variables; "
        "see docs/consumer.md."))
    parser.parse_args(argv or [])
    jsonlog.setup(os.environ.get("LAGPILOT_LOG_LEVEL", "INFO").strip().upper() or "INFO")
    try:
        cfg = ConsumerConfig.from_env()
        handler = load_handler(cfg.handler_spec)
    except (ConfigError, HandlerLoadError) as exc:
        log.error("invalid configuration", extra=_fields(event="config_error", error=str(exc)))
        return 2
    logging.getLogger().setLevel(cfg.log_level)
    log.info("starting", extra=_fields(event="starting", config=repr(cfg)))

    loop, server, dlq = build(cfg, handler)
    _install_signals(loop, cfg.shutdown_grace_ms / 1000.0)
    code = loop.run()
    if code != 0:  # a fatal error: close cleanly if the client lets us, within the grace period
        _exit_after(cfg.shutdown_grace_ms / 1000.0, code)
    shutdown(loop, server, dlq)
    log.info("stopped", extra=_fields(event="stopped", exit_code=code, processed_records=loop.processed_records))
    return code
