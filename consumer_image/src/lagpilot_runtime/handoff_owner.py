"""The drain hand-off, the owner's side (docs/drain.md, :mod:`lagpilot_runtime.handoff_mailbox`).

At every batch boundary (after the batch commit, never mid-handler; at most one mailbox read per
0.5 s) and synchronously in on_assign for newly assigned partitions, the loop reads the hand-off
mailbox of its partitions through a second Consumer that never subscribes. For a drain request on a
partition it owns it writes the ack (start = its committed offset), THEN commits its own offset
``split``, THEN seeks there: the drained partition pauses for that one step, the other partitions
not at all.
"""

from __future__ import annotations

import os
from typing import Any

from . import commit_metadata
from . import handoff_mailbox as mbx
from .consumer_state import KAFKA_CALL_TIMEOUT_S, TP, FatalError, LoopState, log
from .handler import describe_error
from .jsonlog import fields as _fields

HANDOFF_CHECK_INTERVAL_S = 0.5  # at most two mailbox reads (OffsetFetch) a second at batch boundaries: the ack delays a drain's start


def _test_crash_point(point: str) -> None:
    """Die like ``kill -9`` at a named hand-off step, once across every consumer process (the marker
    ``handoff-<point>``, claimed through :mod:`lagpilot_runtime.fault_once`): the real tests' way to
    kill a consumer between its ack, its split commit and its seek.

    LP_TEST_HANDOFF_CRASH_AT="after_ack|after_commit", and a store for the marker: LP_TEST_ONCE_TABLE
    + LP_TEST_ONCE_DSN_FROM (pods on a real node) or LP_TEST_HANDOFF_CRASH_DIR (one host); unset in
    production (a no-op). Not LAGPILOT_*: those names are reserved in the CR's template env."""
    from . import fault_once

    at = os.environ.get("LP_TEST_HANDOFF_CRASH_AT")
    marker_dir = os.environ.get("LP_TEST_HANDOFF_CRASH_DIR")
    if not at or point not in at.split(",") or not fault_once.configured(os.environ, marker_dir):
        return
    if not fault_once.claim(f"handoff-{point}", marker_dir, fault_once.detail()):
        return
    log.warning("fault injection: exiting", extra=_fields(event="test_crash", point=point))
    os._exit(137)


_HANDOFF_METRICS: dict[int, tuple[Any, Any]] = {}


def handoff_metrics(registry: Any) -> tuple[Any, Any]:
    got = _HANDOFF_METRICS.get(id(registry))
    if got is None:
        from prometheus_client import Counter, Gauge

        got = (
            Counter(
                "lagpilot_consumer_handoffs_total",
                "Drain hand-off steps taken by this consumer, by outcome",
                ["outcome"],
                registry=registry,
            ),
            Gauge(
                "lagpilot_consumer_handoff_pause_seconds",
                "How long the last hand-off held this consumer's loop (mailbox read to seek)",
                registry=registry,
            ),
        )
        _HANDOFF_METRICS[id(registry)] = got
    return got


class HandoffOwner(LoopState):
    """The hand-off steps of the partitions this consumer owns (part of BatchConsumer)."""

    handoffs: Any  # Counter by outcome
    handoff_pause: Any  # Gauge: the last hand-off's pause
    _last_handoff_check: float

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
        t0 = self.clock()
        # in on_assign a few tries: a new owner that skipped the check could process records an
        # earlier owner's ack already gave the drain (duplicates, never a gap: the next check fixes it)
        ok, got = self._read_mailbox(todo, tries=1 if explicit is None else 3)
        if not ok:
            return
        for tp in got:
            entry = self._entry_to_act_on(tp)
            if entry is None:
                continue
            key = (tp.topic, tp.partition)
            try:
                own = self._own_committed(key)
                self._apply_handoff(key, entry, mbx.owner_step(entry, own, owner=self.cfg.owner_uid), own, t0)
            except FatalError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried at the next boundary / by the next owner
                log.warning(
                    "hand-off step failed; retried at the next check",
                    extra=_fields(
                        event="handoff_failed",
                        partition=tp.partition,
                        drain_id=entry.drain_id,
                        error=describe_error(exc),
                    ),
                )

    def _read_mailbox(self, todo: list[TP], tries: int) -> tuple[bool, Any]:
        """(read, the mailbox's committed entries of ``todo``) in at most ``tries`` reads."""
        from confluent_kafka import TopicPartition

        for attempt in range(tries):
            try:
                return True, self.mailbox.committed(
                    [TopicPartition(t, p) for t, p in todo], timeout=KAFKA_CALL_TIMEOUT_S
                )
            except Exception as exc:  # noqa: BLE001 - retried at the next boundary
                log.warning(
                    "reading the hand-off mailbox failed",
                    extra=_fields(event="handoff_read_failed", error=describe_error(exc), attempt=attempt),
                )
        return False, None

    def _entry_to_act_on(self, tp: Any) -> mbx.Entry | None:
        """The partition's open entry of this consumer's CR, signed with its key and not yet applied."""
        entry = mbx.decode(getattr(tp, "metadata", None), tp.offset)
        if entry is None or entry.done or entry.owner != self.cfg.owner_uid:
            return (
                None  # nothing, sealed, or not an entry of this consumer's CR (another CR's, a deleted CR's)
            )
        if self.cfg.owner_uid and not mbx.verify(entry, self.cfg.handoff_key, tp.topic, tp.partition):
            # not signed with the CR's hand-off key (M8): anyone with Read on the mailbox group can
            # commit there; acting on it would hand [own, split) to no drain
            self._forged(tp, entry)
            return None
        if entry.acked and self.committed.get((tp.topic, tp.partition), -1) >= entry.split:
            return None  # frozen: nothing to do (no OffsetFetch needed)
        return entry

    def _forged(self, tp: Any, entry: mbx.Entry) -> None:
        """An entry of this CR without a valid MAC: ignored; counted, logged once per (partition, entry)."""
        seen = self.__dict__.setdefault("_forged_seen", set())
        mark = (tp.topic, tp.partition, entry.encode())
        if mark in seen:
            return
        seen.add(mark)
        self.handoffs.labels("refused_unsigned").inc()
        log.warning(
            "hand-off mailbox entry without a valid signature ignored",
            extra=_fields(
                event="handoff_refused",
                topic=tp.topic,
                partition=tp.partition,
                drain_id=entry.drain_id,
                split=entry.split,
                signed=bool(entry.mac),
                key_present=bool(self.cfg.handoff_key),
            ),
        )

    def _apply_handoff(self, key: TP, entry: mbx.Entry, step: mbx.OwnerStep, own: int, t0: float) -> None:
        t, p = key
        if step.noop:
            return
        if step.ack is not None:  # 1. the ack (start = own committed): before the split commit
            self._ack(key, entry, step.ack)
        moved = step.move_to is not None
        if moved:
            self._move_to_split(key, int(step.move_to))  # type: ignore[arg-type]
        pause = max(0.0, self.clock() - t0)
        outcome = "moved" if moved else "acked_empty"
        self.handoffs.labels(outcome).inc()
        if moved:
            self.handoff_pause.set(pause)
        start = step.ack.ack if step.ack is not None else entry.ack
        log.info(
            "drain hand-off",
            extra=_fields(
                event="handoff_ack",
                topic=t,
                partition=p,
                drain_id=entry.drain_id,
                start=start,
                split=entry.split,
                own_committed=own,
                moved=moved,
                reack=entry.acked and step.ack is not None,
                pause_s=round(pause, 3),
            ),
        )

    def _ack(self, key: TP, entry: mbx.Entry, ack: mbx.Entry) -> None:
        """The ack in the mailbox (signed with the CR's key when the consumer has an owner uid)."""
        from confluent_kafka import KafkaException, TopicPartition

        t, p = key
        ack = mbx.sign(ack, self.cfg.handoff_key, t, p) if self.cfg.owner_uid else ack
        res = self.mailbox.commit(
            offsets=[TopicPartition(t, p, entry.split, metadata=ack.encode())], asynchronous=False
        )
        errors = [x for x in (res or []) if getattr(x, "error", None)]
        if errors:
            raise KafkaException(errors[0].error)
        _test_crash_point("after_ack")

    def _move_to_split(self, key: TP, split: int) -> None:
        """The group's own offset to ``split`` (synchronous): records below it now belong to the drain;
        then the records prefetched below it dropped and the partition sought there."""
        from confluent_kafka import KafkaException, TopicPartition

        t, p = key
        metadata = commit_metadata.encode(self.capacity.capacity(), self.wall_ms())
        res = self.consumer.commit(
            offsets=[TopicPartition(t, p, split, metadata=metadata)], asynchronous=False
        )
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
            log.debug(
                "seek after hand-off deferred",
                extra=_fields(event="handoff_seek_deferred", partition=p, error=describe_error(exc)),
            )
