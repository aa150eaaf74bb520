"""The batch consumer loop (confluent-kafka), on one thread: the only one that touches the Kafka
consumer and commits.

1. fill a batch: ``consume(num_messages=N - have, timeout)`` until N records, or T ms after the
   first record of the batch arrived, or shutdown was requested;
2. call the handler once with the batch, then commit, synchronously, each partition's highest
   processed offset + 1 with the capacity metadata (:mod:`lagpilot_runtime.batch_commit`);
3. at the batch boundary, the drain hand-off of owned partitions (:mod:`lagpilot_runtime.handoff_owner`).

Rebalances run inside ``consume()``, between batches (:mod:`lagpilot_runtime.rebalance`); the
client's stats and errors in :mod:`lagpilot_runtime.kafka_events`; a progress-committing sink's
catch-up on assignment in :mod:`lagpilot_runtime.sink_progress`. The state all these parts share is
declared in :mod:`lagpilot_runtime.consumer_state`; the process around the loop (configuration,
signals, metrics server, exit codes) in :mod:`lagpilot_runtime.consumer`.

Stopping (:meth:`BatchConsumer.request_stop`, on SIGTERM/SIGINT): stop consuming; a handler call in
progress finishes and its batch is committed; records not yet handed to the handler are abandoned
(not processed, not committed); :meth:`BatchConsumer.close` commits positions whose commit was
refused, then closes the consumer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .batch_commit import BatchCommit
from .config import ConsumerConfig
from .consumer_state import TP, FatalError, log
from .failure import Failure, RetryPolicy
from .handler import BatchContext, Handler, Record, commits_progress, describe_error
from .handoff_owner import HandoffOwner, handoff_metrics
from .jsonlog import fields as _fields
from .kafka_events import KafkaClientEvents
from .kafka_record import to_record
from .metrics import CapacityEstimator, ConsumerMetrics, Health
from .rebalance import RebalanceCallbacks
from .sink_progress import SinkProgress

POLL_SLICE_S = 0.5  # longest single consume() wait: bounds how late a SIGTERM is noticed while idle
CLOSE_COMMIT_ATTEMPTS = 5  # a refused commit (rebalance in progress) retried at close, ~2 s in all
CLOSE_COMMIT_BACKOFF_S = 0.4


class BatchConsumer(BatchCommit, HandoffOwner, SinkProgress, RebalanceCallbacks, KafkaClientEvents):
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
        self.stop_event = threading.Event()  # the fields: consumer_state.LoopState
        self.ctx = BatchContext(
            config=dict(cfg.handler_config),
            logger=logging.getLogger("lagpilot.handler"),
            source="consumer",
            concurrency=cfg.concurrency,
            group_id=cfg.group_id,
        )
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
        self.processed_records = 0
        self._last_commit_s = 0.0
        self.uncommitted: dict[TP, int] = {}
        self.mailbox = mailbox
        self.floor: dict[TP, int] = {}
        self.skip_below: dict[TP, int] = {}
        self._last_handoff_check = float("-inf")
        self._next_idle_commit = float("-inf")
        self.handoffs, self.handoff_pause = handoff_metrics(self.metrics.registry)

    # -- lifecycle -------------------------------------------------------------------------------
    def subscribe(self) -> None:
        self.consumer.subscribe(
            [self.cfg.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def request_stop(self, reason: str = "signal") -> None:
        if not self.stop_event.is_set():
            log.info("shutdown requested", extra=_fields(event="shutdown_requested", reason=reason))
        self.stop_event.set()
        self.health.stopping = True

    def run(self) -> int:
        """Consume until stopped; returns the exit code."""
        self.health.loop_thread = threading.get_ident()
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
                else:
                    self.commit_outstanding()  # idle: no next batch carries a refused commit's positions
                self.check_handoff()  # a batch boundary: everything handed out is processed and committed
        except FatalError as exc:
            self.exit_code = 1
            self.health.fatal = str(exc)
            log.error("consumer stopping on a fatal error", extra=_fields(event="fatal", error=str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug or an unexpected client error: stop, commit nothing more
            self.exit_code = 1
            log.exception(
                "consumer stopping on an unexpected error",
                extra=_fields(event="fatal", error=describe_error(exc)),
            )
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
            log.info(
                "committing processed positions before closing",
                extra=_fields(
                    event="close_commit", attempt=attempt, partitions=sorted(p for _, p in self.uncommitted)
                ),
            )
            try:
                if self._commit_offsets({}):
                    break
            except Exception as exc:  # noqa: BLE001 - closing on the way out: the next owner replays
                log.warning(
                    "commit before close failed",
                    extra=_fields(event="close_commit_failed", error=describe_error(exc)),
                )
                break
            time.sleep(CLOSE_COMMIT_BACKOFF_S)
        self.give_up(self.uncommitted, "closing")
        self.uncommitted = {}
        try:
            self.consumer.close()
        except Exception as exc:  # noqa: BLE001 - closing on the way out
            log.warning(
                "consumer close failed", extra=_fields(event="close_failed", error=describe_error(exc))
            )
        self.ctx.close()

    # -- batching -------------------------------------------------------------------------------
    def fill_batch(self) -> list[Record]:
        """Up to N records, or what arrived within T ms of the batch's first record; empty when idle
        with a refused commit's positions to try again (``commit_outstanding``)."""
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
            if not self.pending and self.uncommitted and self.clock() >= self._next_idle_commit:
                break  # idle with a refused commit's positions: back to run() to commit them
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
