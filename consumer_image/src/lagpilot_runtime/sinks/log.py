"""The built-in ``log`` sink: one structured log line per record (for trying a pipeline out).

Values are shown as UTF-8 text with undecodable bytes escaped, truncated to ``log.max_value_bytes``
(ctx.config, default 256): a record that is not text never fails this sink.
"""

from __future__ import annotations

from ..handler import BatchContext, Record


def _preview(data: bytes | None, limit: int) -> str | None:
    if data is None:
        return None
    text = data[:limit].decode("utf-8", "backslashreplace")
    return text + ("..." if len(data) > limit else "")


def process(records: list[Record], ctx: BatchContext) -> None:
    """Log every record (topic/partition/offset, key, value preview, size)."""
    limit = int(ctx.config.get("log.max_value_bytes", "256"))
    for r in records:
        ctx.logger.info(
            "record",
            extra={
                "fields": {
                    "event": "record",
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "key": _preview(r.key, limit),
                    "value": _preview(r.value, limit),
                    "value_bytes": len(r.value) if r.value is not None else None,
                    "headers": [k for k, _ in r.headers],
                    "timestamp_ms": r.timestamp_ms,
                }
            },
        )
