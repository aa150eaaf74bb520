"""What the Kafka client reports besides records: statistics (readiness, high watermarks for the lag
metric) and errors (as callbacks or as error messages; only librdkafka's fatal ones stop the loop)."""

from __future__ import annotations

import json
from typing import Any

from .consumer_state import FatalError, LoopState, log
from .jsonlog import fields as _fields


class KafkaClientEvents(LoopState):
    """librdkafka's stats and error reports (part of BatchConsumer)."""

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
