"""Structured JSON logging for the consumer image: one JSON object per line on stderr.

Fields passed as ``extra={"fields": {...}}`` are merged into the object, so a log line about a
record carries ``topic``, ``partition`` and ``offset`` as fields, not only in the message text.
Secrets never reach a log call (the config's repr hides them), and nothing here adds them.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., **fields}``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for k, v in fields.items():
                out.setdefault(k, v)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def setup(level: str = "INFO", stream: Any = None) -> None:
    """Route all stdlib logging through one JSON handler (idempotent)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_lagpilot_json", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._lagpilot_json = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
