"""Failure policy: retries with backoff, isolation of failing records, dead-lettering, commit positions.

The decision parts are pure (no Kafka, clock and sleep injected) so they are tested by tables:
:func:`backoff_ms`, :func:`run_batch`, :func:`commit_positions`, :func:`dlq_headers`.

How a failing batch is handled (:func:`run_batch`):

1. The whole batch is retried up to ``max_retries`` times with exponential backoff and jitter
   (transient sink errors are the common case and need no isolation).
2. Then the failing records are isolated: if the error names records (``RecordError`` /
   ``RecordsFailed``) those are split off and the rest is run again as one piece; otherwise the
   piece is bisected. A single record that still fails gets its own ``max_retries`` retries
   (unless its error is not retriable, e.g. a decode error) and is then reported as failed.
3. If no call succeeds during a bisection that has gone deep enough to find one good half, the
   failure is systemic (the sink is down, not a poison record): :class:`SystemicFailure` is raised
   and nothing of the batch is committed or dead-lettered.

Delivery stays at-least-once: records of pieces that succeeded may be handed to the handler again
(during isolation or after a restart); handlers are idempotent by contract.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .handler import Fenced, Record, RecordError, RecordsFailed, describe_error

log = logging.getLogger("lagpilot.consumer.failure")

BACKOFF_CAP_MS = 30000


def backoff_ms(
    attempt: int, base_ms: int, rng: random.Random | None = None, cap_ms: int = BACKOFF_CAP_MS
) -> float:
    """Delay before retry ``attempt`` (0-based): ``base * 2**attempt`` capped, with "equal jitter".

    The result lies in [d/2, d] for d = min(cap, base * 2**attempt): never zero (so retries do
    back off) yet spread, so replicas that failed together do not retry in lockstep.
    """
    if base_ms <= 0:
        return 0.0
    d = min(float(cap_ms), base_ms * math.pow(2, min(attempt, 32)))
    r = (rng or random).random()
    return d / 2 + r * d / 2


@dataclass(frozen=True)
class Failure:
    """A record that still failed after retries and isolation."""

    record: Record
    error: str
    retriable: bool = True


@dataclass
class BatchResult:
    """What happened to one batch: the failed records (empty on success) and the effort spent."""

    failures: list[Failure]
    calls: int
    retries: int

    @property
    def ok(self) -> bool:
        return not self.failures


class SystemicFailure(Exception):
    """Every piece of the batch fails: the sink or handler is broken, not the records."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"handler fails on every part of the batch: {describe_error(cause)}")


class Abandoned(Exception):
    """Shutdown was requested while the batch was still failing: stop trying, commit nothing."""


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff_ms: int = 200


def _named_errors(exc: BaseException, piece: Sequence[Record]) -> list[RecordError] | None:
    """The record errors ``exc`` names, if it names only records of ``piece``."""
    if isinstance(exc, RecordsFailed):
        errors = exc.errors
    elif isinstance(exc, RecordError):
        errors = [exc]
    else:
        return None
    keys = {(r.topic, r.partition, r.offset) for r in piece}
    if not errors or any((e.record.topic, e.record.partition, e.record.offset) not in keys for e in errors):
        return None
    return errors


def _all_permanent(exc: BaseException, piece: Sequence[Record]) -> bool:
    named = _named_errors(exc, piece)
    return named is not None and all(not e.retriable for e in named)


def run_batch(
    records: Sequence[Record],
    call: Callable[[list[Record]], None],
    policy: RetryPolicy,
    sleep: Callable[[float], None],
    should_stop: Callable[[], bool] = lambda: False,
    rng: random.Random | None = None,
    on_error: Callable[[Sequence[Record], BaseException, int], None] | None = None,
) -> BatchResult:
    """Run ``call`` on the batch with retries, then isolate failing records (module doc).

    ``sleep`` takes seconds. ``on_error(piece, exc, attempt)`` is told of every failed call (for
    logs and metrics). Raises :class:`SystemicFailure` or :class:`Abandoned`.
    """
    run = _Run(call, policy, sleep, should_stop, rng or random.Random(), on_error)
    batch = list(records)
    if not batch:
        return BatchResult([], 0, 0)
    first = run.with_retries(batch)
    if first is None:
        return run.result([])
    if len(batch) == 1:  # already retried alone: nothing to isolate
        return run.result([_failure(batch[0], first)])
    failures, suspects = run.isolate(batch, first)
    for record, exc in suspects:
        failure = run.retry_alone(record, exc)
        if failure is not None:
            failures.append(failure)
    failures.sort(key=lambda f: (f.record.topic, f.record.partition, f.record.offset))
    return run.result(failures)


@dataclass
class _Run:
    """One batch's run: the calls (counted, errors reported) and the retries with their backoff."""

    call: Callable[[list[Record]], None]
    policy: RetryPolicy
    sleep: Callable[[float], None]
    should_stop: Callable[[], bool]
    rng: random.Random
    on_error: Callable[[Sequence[Record], BaseException, int], None] | None
    calls: int = 0
    retries: int = 0

    def result(self, failures: list[Failure]) -> BatchResult:
        return BatchResult(failures, self.calls, self.retries)

    def once(self, piece: list[Record], attempt: int) -> BaseException | None:
        self.calls += 1
        try:
            self.call(piece)
            return None
        except Fenced:  # a later attempt owns the range: retrying or isolating cannot help
            raise
        except Exception as exc:  # noqa: BLE001 - any handler error is handled by the policy
            if self.on_error is not None:
                self.on_error(piece, exc, attempt)
            return exc

    def _stop_check(self) -> None:
        if self.should_stop():
            raise Abandoned()

    def with_retries(self, piece: list[Record]) -> BaseException | None:
        """The piece, retried with backoff while it fails (not for errors that are all permanent)."""
        exc = self.once(piece, 0)
        attempt = 0
        while exc is not None and attempt < self.policy.max_retries and not _all_permanent(exc, piece):
            self._stop_check()
            self.sleep(backoff_ms(attempt, self.policy.backoff_ms, self.rng) / 1000.0)
            self._stop_check()
            attempt += 1
            self.retries += 1
            exc = self.once(piece, attempt)
        return exc

    def isolate(
        self, batch: list[Record], first: BaseException
    ) -> tuple[list[Failure], list[tuple[Record, BaseException]]]:
        """The failing records of a batch that failed as a whole: (permanent failures, suspects to
        retry alone). Raises :class:`SystemicFailure` when nothing succeeds however small the piece."""
        failures: list[Failure] = []
        suspects: list[tuple[Record, BaseException]] = []
        successes = 0
        isolation_calls = 0
        budget = 2 * math.ceil(math.log2(len(batch))) + 2
        # Work list of (piece, known error for a single record or None), processed in offset order.
        # Every piece is tried once; single records that fail are suspects and get their retries at
        # the end, so a broken sink is recognised (no success within the budget) before retrying.
        work: list[tuple[list[Record], RecordError | None]] = list(reversed(_split(batch, first)))
        while work:
            self._stop_check()
            piece, known = work.pop()
            if known is not None and not known.retriable:
                failures.append(Failure(piece[0], describe_error(known), retriable=False))
                continue
            exc = self.once(piece, 0)
            isolation_calls += 1
            if exc is None:
                successes += 1
                continue
            if len(piece) > 1:
                work.extend(reversed(_split(piece, exc)))
            elif (named := _named_errors(exc, piece)) is not None and all(not e.retriable for e in named):
                # _all_permanent(exc, piece), keeping the errors it named for the failure
                failures.append(Failure(piece[0], describe_error(named[0]), retriable=False))
            else:
                suspects.append((piece[0], exc))
            if successes == 0 and isolation_calls >= budget and not failures:
                raise SystemicFailure(exc)  # nothing succeeds however small the piece: not the records' fault
        if suspects and successes == 0 and not failures and len(batch) > 1:
            raise SystemicFailure(first)
        return failures, suspects

    def retry_alone(self, record: Record, exc: BaseException) -> Failure | None:
        """A suspect's own retries; its failure if it still fails."""
        err: BaseException | None = exc
        for attempt in range(self.policy.max_retries):
            self._stop_check()
            self.sleep(backoff_ms(attempt, self.policy.backoff_ms, self.rng) / 1000.0)
            self.retries += 1
            err = self.once([record], attempt + 1)
            if err is None or _all_permanent(err, [record]):
                break
        return None if err is None else _failure(record, err)


def _failure(record: Record, exc: BaseException) -> Failure:
    """A record that still fails: retriable unless its error says otherwise."""
    named = _named_errors(exc, [record])
    retriable = not (named and not named[0].retriable)
    return Failure(record, describe_error(named[0] if named else exc), retriable=retriable)


def _split(piece: list[Record], exc: BaseException) -> list[tuple[list[Record], RecordError | None]]:
    """Pieces to try next, in offset order: named records alone, or two halves."""
    named = _named_errors(exc, piece)
    if named is None:
        mid = len(piece) // 2
        return [(half, None) for half in (piece[:mid], piece[mid:]) if half]
    by_key = {(e.record.topic, e.record.partition, e.record.offset): e for e in named}
    out: list[tuple[list[Record], RecordError | None]] = []
    rest = [r for r in piece if (r.topic, r.partition, r.offset) not in by_key]
    if rest:
        out.append((rest, None))
    out.extend(
        ([r], by_key[(r.topic, r.partition, r.offset)])
        for r in piece
        if (r.topic, r.partition, r.offset) in by_key
    )
    return out


def commit_positions(
    records: Iterable[Record], failures: Iterable[Failure], policy: str
) -> dict[tuple[str, int], int]:
    """The offset to commit per (topic, partition) after a batch: never past an unprocessed record.

    ``deadLetter``: failed records were dead-lettered (handled), so each partition commits its
    highest offset + 1. ``pause`` / ``exit``: a partition with failures commits its lowest failed
    offset (everything before it was processed), so the failed record is consumed again later.
    """
    # a batch holds each partition's records in offset order (Kafka delivers them so), so the last
    # one seen per partition is its highest; should that ever not hold, this commits less, never more
    positions: dict[tuple[str, int], int] = {(r.topic, r.partition): r.offset + 1 for r in records}
    if policy != "deadLetter":
        for f in failures:
            tp = (f.record.topic, f.record.partition)
            positions[tp] = min(positions.get(tp, f.record.offset), f.record.offset)
    return positions


DLQ_ERROR = "lagpilot.error"
DLQ_TOPIC = "lagpilot.source.topic"
DLQ_PARTITION = "lagpilot.source.partition"
DLQ_OFFSET = "lagpilot.source.offset"
DLQ_TIMESTAMP = "lagpilot.source.timestamp"


def dlq_headers(record: Record, error: str) -> list[tuple[str, bytes]]:
    """The record's own headers plus where it came from and why it failed."""
    headers = [h for h in record.headers if not h[0].startswith("lagpilot.")]
    headers += [
        (DLQ_ERROR, error.encode("utf-8", "replace")),
        (DLQ_TOPIC, record.topic.encode()),
        (DLQ_PARTITION, str(record.partition).encode()),
        (DLQ_OFFSET, str(record.offset).encode()),
    ]
    if record.timestamp_ms is not None:
        headers.append((DLQ_TIMESTAMP, str(record.timestamp_ms).encode()))
    return headers


class DeadLetterError(Exception):
    """Dead-lettering failed: the batch must not be committed."""


class DeadLetterProducer:
    """Produces failed records to the DLQ topic and waits until every one is acknowledged.

    Idempotent producer with acks=all: when :meth:`send` returns, the records are durable, so the
    source offsets may be committed. The topic is created (broker-default replication) if missing.
    """

    def __init__(self, producer_conf: dict[str, Any], topic: str, timeout_s: float = 30.0) -> None:
        from confluent_kafka import Producer

        self._conf = producer_conf
        self.topic = topic
        self.timeout_s = timeout_s
        self._producer = Producer(producer_conf, logger=logging.getLogger("lagpilot.consumer.librdkafka.dlq"))
        self._checked = False

    def _ensure_topic(self) -> None:
        if self._checked:
            return
        md = self._producer.list_topics(self.topic, timeout=self.timeout_s)
        tmd = md.topics.get(self.topic)
        if tmd is None or tmd.error is not None:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin_conf = {
                k: v for k, v in self._conf.items() if k not in ("enable.idempotence", "acks", "linger.ms")
            }
            admin = AdminClient(admin_conf)
            futures = admin.create_topics([NewTopic(self.topic, num_partitions=1, replication_factor=-1)])
            try:
                futures[self.topic].result(timeout=self.timeout_s)
                log.info(
                    "created dead-letter topic",
                    extra={"fields": {"event": "dlq_topic_created", "topic": self.topic}},
                )
            except Exception as exc:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS races are fine
                log.warning(
                    "could not create dead-letter topic (it may exist or be auto-created)",
                    extra={
                        "fields": {
                            "event": "dlq_topic_create_failed",
                            "topic": self.topic,
                            "error": describe_error(exc),
                        }
                    },
                )
        self._checked = True

    def send(self, failures: Sequence[Failure]) -> None:
        """Produce and flush; raises :class:`DeadLetterError` unless every record was acknowledged."""
        if not failures:
            return
        try:
            self._ensure_topic()
        except Exception as exc:  # e.g. metadata timeout: the batch must not be committed
            raise DeadLetterError(
                f"dead-letter topic {self.topic} unavailable: {describe_error(exc)}"
            ) from exc
        errors: list[str] = []
        done = threading.Event()
        pending = {"n": len(failures)}

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            pending["n"] -= 1
            if pending["n"] == 0:
                done.set()

        for f in failures:
            while True:
                try:
                    self._producer.produce(
                        self.topic,
                        value=f.record.value,
                        key=f.record.key,
                        # a fresh list: typed as produce's headers (a list is invariant)
                        headers=[*dlq_headers(f.record, f.error)],
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.1)
                except Exception as exc:  # KafkaException etc.
                    raise DeadLetterError(f"producing to {self.topic} failed: {describe_error(exc)}") from exc
        remaining = self._producer.flush(self.timeout_s)
        if remaining or errors or not done.is_set():
            raise DeadLetterError(
                f"dead-lettering {len(failures)} record(s) to {self.topic} failed: "
                f"{remaining} undelivered, errors: {errors[:3]}"
            )

    def close(self) -> None:
        self._producer.flush(self.timeout_s)
