"""Structured JSON logging: one JSON object per line on stderr. The one formatter of the project:
the consumer image's runtime and the dev tooling (lagpilot_dev) both use it.

Fields passed as ``extra={"fields": {...}}`` or as plain ``extra={...}`` keys are merged into the
object, so a log line about a record carries ``topic``, ``partition`` and ``offset`` as fields, not
only in the message text. Secrets should never reach a log call (the config's repr hides them); what
does reach one anyway (a client's error quoting its DSN, a handler's message) is masked here by
``redaction`` before the line is written.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from . import redaction

# attributes every LogRecord has; anything else was passed through `extra=` and is logged as a field
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    "fields",
}


def fields(**kw: Any) -> dict[str, Any]:
    """``extra=fields(event=..., partition=...)``: structured fields of one log call."""
    return {"fields": kw}


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., **fields}``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for k, v in fields.items():
                out.setdefault(k, v)
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        # the one place a log line becomes text: secret values and DSN/password patterns masked
        # (redaction.py), string by string before encoding (an escaped value would not match)
        out = {
            k: redaction.scrub(
                v if isinstance(v, (str, dict, list, tuple, int, float, bool, type(None))) else str(v)
            )
            for k, v in out.items()
        }
        return json.dumps(out, default=lambda v: redaction.redact(str(v)), ensure_ascii=False)


def setup(level: str | int = "INFO", stream: Any = None, logger: str | None = None) -> None:
    """Route stdlib logging through one JSON handler (idempotent): the root logger's, or with
    ``logger`` only that logger's (not propagated: the dev tooling's own lines)."""
    target = logging.getLogger(logger)
    for h in list(target.handlers):
        if getattr(h, "_lagpilot_json", False):
            target.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._lagpilot_json = True  # type: ignore[attr-defined]
    target.addHandler(handler)
    target.setLevel(level)
    if logger is not None:
        target.propagate = False
