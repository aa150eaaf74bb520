"""A batch through the handler, then its commit: the one place where the loop commits what it processed.

The rule "no offset committed before its batch is processed" lives here: :meth:`BatchCommit.process`
calls the handler (retries, failure isolation, the failure policy: :mod:`lagpilot_runtime.failure`)
and only then computes the positions to commit: each partition's highest processed (or
dead-lettered) offset + 1, never past a record that was not processed; :meth:`BatchCommit.commit`
commits them synchronously with the capacity metadata ``lp1;cap=..;ts=..``
(:mod:`lagpilot_runtime.commit_metadata`). The two other commits of the loop commit records that
are not the loop's to process: a drain hand-off's split (:mod:`lagpilot_runtime.handoff_owner`:
the records below it belong to the drain) and the sink's progress
(:mod:`lagpilot_runtime.sink_progress`: the records below it are in the sink already).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import commit_metadata
from .consumer_state import TP, FatalError, LoopState, log
from .failure import Abandoned, DeadLetterError, SystemicFailure, commit_positions, run_batch
from .handler import Record, batch_offsets, describe_error
from .jsonlog import fields as _fields

COMMIT_ATTEMPTS = 3
# an idle loop (no record to batch) holding positions whose commit was refused tries them again this
# often: no next batch may come to carry them, and the group's lag would stay for ever
IDLE_COMMIT_RETRY_S = 1.0


class BatchCommit(LoopState):
    """Processing a batch and committing its positions (part of BatchConsumer)."""

    _last_commit_s: float  # the previous commit's duration (stands in for this one's in the capacity)
    _next_idle_commit: float  # the clock's time before which commit_outstanding does not try again

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
            log.warning(
                "handler failed",
                extra=_fields(
                    event="handler_error",
                    records=len(piece),
                    attempt=attempt,
                    error=describe_error(exc),
                    first=first.where,
                    last=last.where,
                ),
            )

        self.health.handler_started()  # the handler (and its retries) may run up to max.poll.interval
        try:
            result = run_batch(
                batch,
                call,
                self.policy,
                sleep=self._sleep,
                should_stop=self.stop_event.is_set,
                on_error=on_error,
            )
        except Abandoned:
            self.metrics.batches.labels("abandoned").inc()
            self._abandon(batch, "shutdown during retries")
            return
        except SystemicFailure as exc:
            self.metrics.batches.labels("failed").inc()
            raise FatalError(
                f"{exc}; nothing of this batch is committed, it is consumed again after restart"
            ) from exc
        finally:
            self.health.handler_done()
        failures = result.failures
        policy = self.cfg.failure_policy
        for f in failures:
            self.metrics.failed_records.labels(policy).inc()
            log.error(
                "record failed",
                extra=_fields(
                    event="record_failed",
                    topic=f.record.topic,
                    partition=f.record.partition,
                    offset=f.record.offset,
                    error=f.error,
                    retriable=f.retriable,
                    policy=policy,
                ),
            )
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
            raise FatalError(
                f"failure policy exit: {len(failures)} record(s) failed ({where}); committed up to the first failure"
            )

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

    def commit_outstanding(self) -> None:
        """Between batches: commit the positions a refused commit left (``uncommitted``) when no batch
        is coming to carry them; at most every IDLE_COMMIT_RETRY_S. Raises FatalError when fenced."""
        now = self.clock()
        if not self.uncommitted or now < self._next_idle_commit:
            return
        self._next_idle_commit = now + IDLE_COMMIT_RETRY_S
        held = sorted(p for _, p in self.uncommitted)
        if self._commit_offsets({}):
            log.info(
                "committed positions held since a refused commit",
                extra=_fields(event="commit_retried_idle", partitions=held),
            )

    def _commit_offsets(self, positions: dict[TP, int]) -> bool:
        """Synchronous commit of these and any outstanding positions; True when it succeeded."""
        todo = self._positions_to_commit(positions)
        if not todo:
            return True
        if not self._commit_sync(todo):
            return False
        self._committed(todo)
        return True

    def _positions_to_commit(self, positions: dict[TP, int]) -> dict[TP, int]:
        """These and the outstanding positions, the highest per partition, of partitions still owned
        and not below a hand-off's split; those of partitions no longer owned are given up."""
        merged = dict(self.uncommitted)
        for tp, off in positions.items():
            merged[tp] = max(off, merged.get(tp, -1))
        todo = {tp: off for tp, off in merged.items() if tp in self.owned and off >= self.floor.get(tp, -1)}
        # not ours any more: announced; ours but below a hand-off's split: superseded by the split's
        # commit (the records below it are the drain's), nothing to announce
        dropped = {tp: off for tp, off in merged.items() if tp not in self.owned}
        self.uncommitted = {}
        if dropped:
            self.give_up(dropped, "partition no longer assigned")
        return todo

    def _commit_sync(self, todo: dict[TP, int]) -> bool:
        """Commit ``todo`` (with the capacity metadata), retrying a retriable error; False (the
        positions kept for the next commit) when it still fails. Raises FatalError when fenced."""
        from confluent_kafka import KafkaException, TopicPartition

        metadata = commit_metadata.encode(self.capacity.capacity(), self.wall_ms())
        offsets = [TopicPartition(t, p, off, metadata=metadata) for (t, p), off in sorted(todo.items())]
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                result = self.consumer.commit(offsets=offsets, asynchronous=False)
                errors = [tp for tp in (result or []) if getattr(tp, "error", None)]
                if errors:
                    raise KafkaException(errors[0].error)
                return True
            except KafkaException as exc:
                if not self._commit_failed(exc, attempt, todo):
                    return False
                self._sleep(0.1 * (attempt + 1))
        return True

    def _commit_failed(self, exc: Exception, attempt: int, todo: dict[TP, int]) -> bool:
        """One failed commit: True to retry it; False when it is given up for now. Raises FatalError."""
        from confluent_kafka import KafkaError

        err: Any = exc.args[0] if exc.args else None  # a KafkaError (or None); hasattr guards each call
        code = err.code() if hasattr(err, "code") else None
        self.metrics.commits.labels("failed").inc()
        fields = dict(
            event="commit_failed", error=str(err), attempt=attempt, partitions=sorted(p for _, p in todo)
        )
        if code == KafkaError.FENCED_INSTANCE_ID or (hasattr(err, "fatal") and err.fatal()):
            log.error("commit failed fatally", extra=_fields(**fields))
            raise FatalError(f"commit failed: {err}") from exc
        retriable = hasattr(err, "retriable") and err.retriable()
        if not retriable or attempt == COMMIT_ATTEMPTS - 1:
            # typically a rebalance in progress: keep the positions for the next commit or
            # on_revoke; if the partitions are lost meanwhile, their next owner re-consumes
            # from the last commit (at-least-once; the postgres sink makes that harmless)
            self.uncommitted = todo
            log.warning(
                "commit failed; will commit again with the next batch or on revoke", extra=_fields(**fields)
            )
            return False
        log.warning("commit failed, retrying", extra=_fields(**fields))
        return True

    def _committed(self, todo: dict[TP, int]) -> None:
        """The committed positions and their metrics (committed offset, lag against the high watermark)."""
        self.metrics.commits.labels("ok").inc()
        for (t, p), off in todo.items():
            self.committed[(t, p)] = off
            self.metrics.committed_offset.labels(t, str(p)).set(off)
            hw = self.high_watermarks.get((t, p))
            if hw is not None and hw >= 0:
                self.metrics.lag.labels(t, str(p)).set(max(0, hw - off))

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
        log.error(
            "partitions paused by the failure policy; they resume after a restart or a rebalance",
            extra=_fields(event="partitions_paused", partitions=sorted(f"{t}/{p}" for t, p in new)),
        )
