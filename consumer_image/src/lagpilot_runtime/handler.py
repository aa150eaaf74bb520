"""The handler contract, shared by the consumer loop and the Spark drain job (docs/CONTRACTS.md).

A handler is ``process(records: list[Record], ctx: BatchContext) -> None``: raise to fail the batch,
return when every record is durably processed. Delivery is at-least-once: after a crash, a failed
commit or failure isolation the same record can reach the handler again, so handlers must be
idempotent (every record carries ``topic``/``partition``/``offset`` for that) — unless the handler
**commits progress** (below).

Exactly once (optional capability, docs/consumer.md): a handler that sets ``commits_progress =
True`` and has a ``progress(topic, partitions, ctx) -> {partition: next_offset}`` attribute stores,
in the same transaction as a batch's output, ``ctx.offsets`` (the next offset per partition after
the batch, under the scope ``ctx.progress_scope``). The runtime then resumes from
max(Kafka committed, the handler's progress) and skips records below the handler's progress, so a
crash between the sink's commit and Kafka's causes no second delivery. The built-in postgres sink
does this (table ``<table>_lagpilot_progress``).

Fencing (optional, on top of that; issue 23): a progress-committing handler with a ``claim(topic,
partitions, ctx) -> {partition: epoch}`` attribute lets a drain task claim its sub-range before it
reads the sink's progress: the sink records a new epoch for (``ctx.progress_scope``, topic,
partition), higher than every earlier claim. The runtime then sets ``ctx.epoch`` for every call of
that task, and the handler must refuse (raise :class:`Fenced`, nothing of the call stored) a call
whose epoch is not the newest claim's, checked in the same transaction as its output. An attempt that
was given up (cancelled, its runtime stopped and resumed) and still writes after another attempt
claimed the range is refused instead of writing records twice. A drain sub-range's scope is stable
(its group, partition and end: ``drain:<groupId>:<partition>:<end>``): a retry of the drain and a
remainder handed back to a re-created CR claim and read the same progress.

A handler may say *which* records failed by raising :class:`RecordError` (one record) or
:class:`RecordsFailed` (several); the runtime then skips blind bisection. ``retriable=False``
(e.g. :class:`RecordDecodeError`) means retrying cannot help: the record goes straight to the
failure policy.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from . import redaction


@dataclass(frozen=True)
class Record:
    """One Kafka record as handed to handlers; values are raw bytes (decoding is the handler's job).

    Not ``slots=True``: the consumer hands out a subclass whose fields are read from the Kafka
    message on first access (``lagpilot_runtime.kafka_record.KafkaRecord``), which needs ``__dict__``.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp_ms: int | None = None

    @property
    def where(self) -> str:
        """``topic/partition/offset``, for error messages."""
        return f"{self.topic}/{self.partition}/{self.offset}"


class Handler(Protocol):
    def __call__(self, records: list[Record], ctx: BatchContext) -> None: ...


class ProgressHandler(Handler, Protocol):
    """A progress-committing handler (the exactly-once capability, :func:`commits_progress`): its
    ``progress(topic, partitions, ctx)`` gives the next offset the sink holds per partition."""

    commits_progress: bool

    def progress(self, topic: str, partitions: list[int], ctx: BatchContext) -> Mapping[int, int]: ...


@dataclass
class BatchContext:
    """What a handler gets besides its records.

    ``config`` is processing.config from the CR (strings only). ``concurrency`` threads are
    available through :meth:`map` for per-record work; commits always happen on the consuming
    thread after the handler returned, never from these threads.
    """

    config: Mapping[str, str]
    logger: logging.Logger
    source: str = "consumer"  # "consumer" | "drain"
    drain_id: str | None = None  # the drain's plan id when source == "drain" (the ledger records it)
    concurrency: int = 1
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)
    # exactly-once capability (progress-committing handlers): who writes, and where this call ends
    group_id: str | None = None
    sub_range: tuple[int, int, int, int] | None = None  # drain: (partition, index, start, end)
    # (topic, partition) -> next offset after this call's records, set by the runtime for each call
    # that completes everything below it; None for pieces of a failure isolation (store no progress)
    offsets: dict[tuple[str, int], int] | None = None
    # the task's claim on its range (a fencing handler's ``claim``): a call under an older epoch than
    # the range's newest claim must be refused (:class:`Fenced`); None: no claim, nothing to check
    epoch: int | None = None

    @property
    def progress_scope(self) -> str:
        """The key a progress-committing sink stores ``offsets`` under: the consumer group, or the
        drain's range. A drain range's identity is its group, partition and END offset, not the drain
        id, sub-range index, start or CR: every attempt that can write these offsets shares it — the
        drain's retries (same sub-range) and a remainder ``[next, end)`` handed back by a deleted CR
        and adopted by a re-created one (a new drain id and owner, the same end). The ranges of one
        group never overlap (every offset has one owner), so no two ranges of a partition share an end."""
        if self.source == "drain" and self.sub_range is not None:
            p, _k, _a, b = self.sub_range
            return f"drain:{self.group_id or ''}:{p}:{b}"
        return f"group:{self.group_id or ''}"

    def map(self, fn: Callable[[Record], Any], records: list[Record]) -> list[Any]:
        """Run ``fn`` on every record (in up to ``concurrency`` threads) and wait for all.

        Raises :class:`RecordsFailed` naming every record whose call raised, after all calls
        finished (so no record is left half-processed in the background).
        """
        if self.concurrency <= 1 or len(records) <= 1:
            results, errors = [], []
            for r in records:
                try:
                    results.append(fn(r))
                except Exception as exc:  # noqa: BLE001 - collected and re-raised below
                    errors.append(_as_record_error(r, exc))
                    results.append(None)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix="lagpilot-handler"
                )
            futures = [self._pool.submit(fn, r) for r in records]
            results, errors = [], []
            for r, fut in zip(records, futures, strict=True):
                failed = fut.exception()
                if failed is None:
                    results.append(fut.result())
                else:
                    errors.append(_as_record_error(r, failed))
                    results.append(None)
        if errors:
            raise RecordsFailed(errors)
        return results

    def close(self) -> None:
        """Stop the worker threads (after the last batch)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class Fenced(Exception):
    """A fencing handler refused a call: a later attempt claimed the range (``ctx.epoch`` is not the
    newest claim). Not a record failure: never retried, isolated or dead-lettered; the call's task ends."""


class RecordError(Exception):
    """One record failed. ``retriable=False`` sends it to the failure policy without retries."""

    retriable = True

    def __init__(self, record: Record, cause: BaseException | str, retriable: bool | None = None) -> None:
        self.record = record
        self.cause = cause
        if retriable is not None:
            self.retriable = retriable
        super().__init__(f"{record.where}: {describe_error(cause)}")


class RecordDecodeError(RecordError):
    """A record's bytes cannot be decoded: permanent, never retried."""

    retriable = False


class RecordsFailed(Exception):
    """Several records failed; the others in the batch may be retried without them."""

    def __init__(self, errors: Iterable[RecordError]) -> None:
        self.errors = list(errors)
        where = ", ".join(e.record.where for e in self.errors[:5])
        more = f" (+{len(self.errors) - 5} more)" if len(self.errors) > 5 else ""
        super().__init__(f"{len(self.errors)} record(s) failed: {where}{more}")


def _as_record_error(record: Record, exc: BaseException) -> RecordError:
    if isinstance(exc, RecordError):
        return exc
    retriable = not isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError))
    return RecordError(record, exc, retriable=retriable)


def describe_error(exc: BaseException | str) -> str:
    """``Type: message``, bounded in length (it ends up in a Kafka header and a log line)."""
    if isinstance(exc, str):
        text = exc
    elif isinstance(exc, RecordError):
        return describe_error(exc.cause)
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = redaction.redact(text)  # clients echo what they were given (psycopg: a bad DSN token)
    return text if len(text) <= 1000 else text[:997] + "..."


def decode_json(record: Record) -> Any:
    """The record's value as JSON, or :class:`RecordDecodeError` naming the record."""
    if record.value is None:
        raise RecordDecodeError(record, "value is null (tombstone)")
    try:
        return json.loads(record.value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordDecodeError(record, exc) from exc


def decode_text(record: Record) -> str | None:
    """The record's value as UTF-8 text, or :class:`RecordDecodeError` naming the record."""
    if record.value is None:
        return None
    try:
        return record.value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(record, exc) from exc


def per_record(fn: Callable[[Record, BatchContext], Any]) -> Handler:
    """Turn a per-record function into a batch handler that runs it on ``ctx.concurrency`` threads.

    This is the seeds' thread-pool pattern: the consuming thread hands one batch to the pool, waits
    for all of it, and only then commits.
    """

    def process(records: list[Record], ctx: BatchContext) -> None:
        ctx.map(lambda r: fn(r, ctx), records)

    process.__name__ = getattr(fn, "__name__", "process")
    process.__doc__ = fn.__doc__
    process.__wrapped__ = fn  # type: ignore[attr-defined]
    return process


BUILTIN_SINKS = {
    "postgres": "lagpilot_runtime.sinks.postgres:process",
    "log": "lagpilot_runtime.sinks.log:process",
    # one row per delivery, no unique key: duplicates counted (tests, benches, the demo's proof)
    "ledger": "lagpilot_runtime.sinks.ledger:process",
}


def commits_progress(handler: Any) -> bool:
    """Does the handler store its progress with its output (the exactly-once capability)?"""
    return bool(getattr(handler, "commits_progress", False)) and callable(getattr(handler, "progress", None))


def claims(handler: Any) -> bool:
    """Does the progress-committing handler also fence (``claim``, docs/consumer.md)?"""
    return commits_progress(handler) and callable(getattr(handler, "claim", None))


def batch_offsets(records: Iterable[Record]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> highest offset + 1 among the records (pure)."""
    out: dict[tuple[str, int], int] = {}
    for r in records:
        k = (r.topic, r.partition)
        if r.offset + 1 > out.get(k, -1):
            out[k] = r.offset + 1
    return out


class HandlerLoadError(ImportError):
    """The handler named in the config cannot be loaded."""


def load_handler(spec: str) -> Handler:
    """A built-in sink name (``postgres``, ``log``, ``ledger``) or ``module:function`` → the callable."""
    target = BUILTIN_SINKS.get(spec, spec)
    module_name, sep, func_name = target.partition(":")
    if not sep or not module_name or not func_name:
        raise HandlerLoadError(
            f"handler must be 'module:function' or one of {sorted(BUILTIN_SINKS)}, got {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HandlerLoadError(f"cannot import handler module {module_name!r}: {exc}") from exc
    obj: Any = module
    for part in func_name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise HandlerLoadError(f"module {module_name!r} has no attribute {func_name!r}")
    if not callable(obj):
        raise HandlerLoadError(f"{target!r} is not callable")
    return cast(Handler, obj)  # a callable named by the spec: called as a Handler
