"""Catching Kafka up with a progress-committing sink (exactly-once handlers, docs/consumer.md).

The sink may be ahead of the group's commit (a crash after its commit, before ours): on assignment
the loop reads the sink's progress and commits it to Kafka before any record of those partitions is
processed.
"""

from __future__ import annotations

from typing import cast

from . import commit_metadata
from .consumer_state import KAFKA_CALL_TIMEOUT_S, TP, FatalError, LoopState, log
from .handler import ProgressHandler, describe_error
from .jsonlog import fields as _fields


class SinkProgress(LoopState):
    """The sink-progress catch-up on assignment (part of BatchConsumer)."""

    def sync_sink_progress(self, parts: set[TP]) -> None:
        """For a progress-committing handler: read its progress for ``parts`` and, where it is ahead
        of the group's committed offset, commit it to Kafka (synchronous), skip records below it and
        seek there. Records below the sink's progress are in the sink: delivering them again would
        duplicate them. Fails the consumer (exit 1, restarted) if the sink cannot be read: processing
        without knowing its progress could deliver twice."""
        if not self.sink_progress or not parts:
            return
        ahead = self._sink_ahead(self._read_sink_progress(parts))
        if not ahead:
            return
        self._commit_sink_progress(ahead)
        log.info(
            "resuming from the sink's progress (ahead of the group's commit)",
            extra=_fields(
                event="sink_progress_ahead", partitions={f"{t}/{p}": o for (t, p), o in sorted(ahead.items())}
            ),
        )

    def _read_sink_progress(self, parts: set[TP]) -> dict[TP, int]:
        """The sink's next offset per partition, one call per topic, each tried 3 times (FatalError)."""
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(parts):
            by_topic.setdefault(t, []).append(p)
        # sink_progress is commits_progress(handler): the handler has progress()
        handler = cast(ProgressHandler, self.handler)
        got: dict[TP, int] = {}
        for topic, plist in by_topic.items():
            for attempt in range(3):
                try:
                    got.update(
                        {(topic, int(p)): int(o) for p, o in handler.progress(topic, plist, self.ctx).items()}
                    )
                    break
                except Exception as exc:  # retried, then fatal
                    log.warning(
                        "reading the sink's progress failed",
                        extra=_fields(
                            event="sink_progress_failed", error=describe_error(exc), attempt=attempt
                        ),
                    )
                    if attempt == 2:
                        raise FatalError(f"cannot read the sink's progress: {describe_error(exc)}") from exc
                    self._sleep(0.5 * (attempt + 1))
        return got

    def _sink_ahead(self, got: dict[TP, int]) -> dict[TP, int]:
        """The partitions where the sink is ahead of the group's commit (and within the log's end)."""
        from confluent_kafka import TopicPartition

        ahead: dict[TP, int] = {}
        for key, sink_next in got.items():
            if sink_next > self._own_committed(key):
                _low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(*key), timeout=KAFKA_CALL_TIMEOUT_S
                )
                if sink_next > high:  # e.g. the topic was recreated: the progress belongs to another log
                    log.warning(
                        "the sink's progress is beyond the partition's end; ignored",
                        extra=_fields(
                            event="sink_progress_ignored",
                            topic=key[0],
                            partition=key[1],
                            sink_next=sink_next,
                            end=high,
                        ),
                    )
                    continue
                ahead[key] = sink_next
        return ahead

    def _commit_sink_progress(self, ahead: dict[TP, int]) -> None:
        """Commit the sink's progress (synchronous), skip the records below it and seek there."""
        from confluent_kafka import KafkaException, TopicPartition

        metadata = commit_metadata.encode(self.capacity.capacity(), self.wall_ms())
        res = self.consumer.commit(
            offsets=[TopicPartition(t, p, o, metadata=metadata) for (t, p), o in sorted(ahead.items())],
            asynchronous=False,
        )
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
