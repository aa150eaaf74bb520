"""Rebalance callbacks (cooperative-sticky, so they only concern the partitions that move).

They run inside ``consume()``, i.e. between batches, never during a handler call, on the loop's
thread. On assign: the sink's progress and the drain hand-off are checked for the new partitions
before any record of them is processed. On revoke the records already taken from Kafka but not yet
handed to the handler are processed and committed before the partitions are given up (unless
shutting down: then they are abandoned, uncommitted). On lost (session expired; we may no longer
commit) the lost partitions' pending records are dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .consumer_state import TP, FatalError, LoopState, log
from .jsonlog import fields as _fields

if TYPE_CHECKING:
    from .handler import Record


class RebalanceCallbacks(LoopState):
    """on_assign / on_revoke / on_lost (part of BatchConsumer)."""

    if TYPE_CHECKING:  # the sibling parts of BatchConsumer that the callbacks call (types only)

        def sync_sink_progress(self, parts: set[TP]) -> None: ...  # SinkProgress
        def check_handoff(self, parts: set[TP] | None = None) -> None: ...  # HandoffOwner
        def process(self, batch: list[Record]) -> None: ...  # BatchCommit
        def _commit_offsets(self, positions: dict[TP, int]) -> bool: ...  # BatchCommit

    def _on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        new = {(tp.topic, tp.partition) for tp in partitions}
        self.owned |= new
        self.health.member = True
        self.health.connected = True
        self.health.assigned = len(self.owned)
        self.metrics.assigned.set(len(self.owned))
        self.metrics.rebalances.labels("assign").inc()
        log.info(
            "partitions assigned",
            extra=_fields(
                event="assigned", partitions=sorted(p for _, p in new), owned=sorted(p for _, p in self.owned)
            ),
        )
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
                log.info(
                    "revoke: finishing the in-flight batch before giving partitions up",
                    extra=_fields(
                        event="revoke_flush", records=len(batch), partitions=sorted(p for _, p in gone)
                    ),
                )
                self.process(batch)
            elif self.pending:
                self._abandon(
                    [r for r in self.pending if (r.topic, r.partition) in gone], "revoked during shutdown"
                )
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
            log.info(
                "partitions revoked",
                extra=_fields(
                    event="revoked",
                    partitions=sorted(p for _, p in gone),
                    owned=sorted(p for _, p in self.owned),
                ),
            )

    def _on_lost(self, _consumer: Any, partitions: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.metrics.rebalances.labels("lost").inc()
        dropped = [r for r in self.pending if (r.topic, r.partition) in gone]
        self.pending = [r for r in self.pending if (r.topic, r.partition) not in gone]
        self._abandon(dropped, "partitions lost")
        self._forget(gone)
        log.warning(
            "partitions lost (session expired); their uncommitted records go to the next owner",
            extra=_fields(
                event="lost", partitions=sorted(p for _, p in gone), owned=sorted(p for _, p in self.owned)
            ),
        )

    def _forget(self, gone: set[TP]) -> None:
        self.give_up(
            {tp: off for tp, off in self.uncommitted.items() if tp in gone}, "partition revoked or lost"
        )
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
