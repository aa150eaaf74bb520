"""The state the batch consumer's parts share, declared in one place.

:class:`~lagpilot_runtime.batch_consumer.BatchConsumer` is assembled from parts, one module each
(batch processing and commit, drain hand-off, sink progress, rebalance callbacks, Kafka client
events); they all run on the loop's one thread and read and write the fields declared here
(``BatchConsumer.__init__`` sets them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .config import ConsumerConfig
from .failure import Failure, RetryPolicy
from .handler import BatchContext, Handler, Record
from .jsonlog import fields as _fields
from .metrics import CapacityEstimator, ConsumerMetrics, Health

log = logging.getLogger("lagpilot.consumer")

TP = tuple[str, int]
KAFKA_CALL_TIMEOUT_S = 10.0  # one OffsetFetch / watermark / mailbox read


class FatalError(Exception):
    """Stop the consumer with exit code 1."""


class LoopState:
    """Fields of the loop (one thread: the only one that touches the Kafka consumer and commits)."""

    cfg: ConsumerConfig
    consumer: Any  # a confluent_kafka.Consumer (a fake in unit tests)
    handler: Handler
    dead_letter: Callable[[Sequence[Failure]], None] | None
    metrics: ConsumerMetrics
    health: Health
    clock: Callable[[], float]
    wall_ms: Callable[[], int]
    stop_event: threading.Event
    ctx: BatchContext
    sink_progress: bool  # exactly-once capability: the handler stores its progress with its output
    policy: RetryPolicy
    capacity: CapacityEstimator
    pending: list[Record]  # taken from Kafka, not yet handed to the handler
    owned: set[TP]
    paused: set[TP]  # paused by the failure policy
    committed: dict[
        TP, int
    ]  # our last successful commit per partition (batch, hand-off split, sink catch-up)
    high_watermarks: dict[TP, int]
    exit_code: int
    fatal: BaseException | None  # set inside a callback; the loop stops with it
    processed_records: int  # records of successful batches (dead-lettered included)
    uncommitted: dict[TP, int]  # processed, commit failed non-fatally: retried later
    mailbox: Any  # drain hand-off: a Consumer of the mailbox group that never subscribes (None: disabled)
    floor: dict[TP, int]  # handed-off partitions: never commit below their split
    skip_below: dict[TP, int]  # drop records below the split (a seek that could not run yet)

    def _abandon(self, records: list[Record], why: str) -> None:
        if records:
            log.info(
                "abandoning records not yet handed to the handler (not committed)",
                extra=_fields(event="batch_abandoned", records=len(records), reason=why),
            )

    def give_up(self, positions: dict[TP, int], why: str) -> None:
        """Processed positions this member can no longer commit (its partitions moved or were lost
        while the broker refused the commit, e.g. ILLEGAL_GENERATION in a rebalance): the next owner
        re-consumes from the group's last commit up to these positions (at-least-once; a sink that
        records its progress makes that harmless). Said once, exactly: the partition, the last
        commit this member made and the position it could not commit, so a replay can be accounted for."""
        if not positions:
            return
        self.metrics.commits.labels("given_up").inc(len(positions))
        log.warning(
            "processed positions not committed; the next owner re-consumes them",
            extra=_fields(
                event="commit_given_up",
                reason=why,
                positions={
                    f"{t}/{p}": {"committed": self.committed.get((t, p)), "position": off}
                    for (t, p), off in sorted(positions.items())
                },
            ),
        )

    def _sleep(self, seconds: float) -> None:
        """Backoff sleep that a shutdown request cuts short."""
        self.stop_event.wait(seconds)

    def _own_committed(self, key: TP) -> int:
        """This group's committed offset of the partition (everything below it is processed)."""
        from confluent_kafka import TopicPartition

        c = self.committed.get(key)
        if c is not None:
            return c
        got = self.consumer.committed([TopicPartition(*key)], timeout=KAFKA_CALL_TIMEOUT_S)[0]
        if got.offset is not None and got.offset >= 0:
            return int(got.offset)
        low, _high = self.consumer.get_watermark_offsets(TopicPartition(*key), timeout=KAFKA_CALL_TIMEOUT_S)
        return int(low)  # never committed: auto.offset.reset=earliest starts at the low watermark
