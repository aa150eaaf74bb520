"""Secret redaction: the one place where error and log text is cleaned of secret values.

Clients echo what they were given: psycopg quotes a malformed DSN token, password included
(``invalid percent-encoded token: "p%zz<password>"``), a handler may print its connection string.
Call sites do not each scrub their text; every edge where an exception or a log line becomes text
that leaves the process goes through :func:`redact`:

- the JSON log formatter (every log line of the consumer, the drain driver, its tasks and the
  warm runtime, tracebacks included) and the process's uncaught-exception hooks;
- :func:`lagpilot_runtime.handler.describe_error` (handler/sink errors in logs, DLQ headers,
  fatal errors, the consumer's health endpoint);
- the drain task's failure (the text Spark carries from the executor to the driver and logs);
- the drain Job's termination message (what the operator puts in ``status.drain.lastError`` and
  Warning events);
- the operator, which redacts the termination message it reads, its events and status text
  with the Kafka Secret values it read itself plus the patterns below.

What is redacted (replaced by ``<redacted>``):

1. every secret value this process was given (:func:`install`; the consumer's and drain's
   SASL password, TLS key, PostgreSQL DSN) and, for a DSN, its password alone (raw and
   percent-decoded, URL or ``key=value`` form): the parts a client quotes back;
   values shorter than :data:`MIN_LEN` characters are only redacted through the patterns;
2. patterns that need no value: a URL's userinfo password (``scheme://user:<redacted>@``),
   ``password=...`` / ``sasl.password=...`` pairs, and libpq's quoted malformed token
   (``invalid percent-encoded token: "<redacted>"``) — so text from a process whose values this
   one does not know (the operator reading a drain pod's message) is still cleaned.
"""

from __future__ import annotations

import re
import sys
import threading
import traceback
import urllib.parse
from collections.abc import Iterable
from typing import Any

MASK = "<redacted>"
MIN_LEN = 4

_URL_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:\"']*:)[^\s@\"'/]*(?=@)")
_KV_PASSWORD = re.compile(
    r"(?P<head>\b(?:sasl\.)?pass(?:word|wd)\s*[=:]\s*)(?:'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s,;)}\]]+)",
    re.IGNORECASE,
)
_BAD_TOKEN = re.compile(r"(?P<head>invalid percent-encoded token:\s*\")[^\"]*(?=\")")


def _dsn_passwords(value: str) -> set[str]:
    """The password parts of a PostgreSQL connection string (URL or key=value form)."""
    out: set[str] = set()
    m = re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://([^/@]*)@", value.strip())
    if m and ":" in m.group(1):
        raw = m.group(1).split(":", 1)[1]
        out |= {raw, urllib.parse.unquote(raw)}
    for kv in re.finditer(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", value):
        v = kv.group(1)
        out |= {v, v.strip("'").replace("\\'", "'")}
    return out


def needles(values: Iterable[str | None]) -> tuple[str, ...]:
    """The strings to cut out for these secret values: each value, the lines of a multi-line one
    (a PEM key's body), the password parts of a DSN; longest first (a value containing another is
    cut whole)."""
    found: set[str] = set()
    for v in values:
        if not v:
            continue
        found.add(v)
        found.add(v.strip())
        found |= {ln.strip() for ln in v.splitlines() if not ln.strip().startswith("-----")}
        found |= _dsn_passwords(v)
    return tuple(sorted((n for n in found if len(n) >= MIN_LEN), key=len, reverse=True))


class Redactor:
    """Redacts a fixed set of secret values and the patterns of the module doc."""

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        self._needles = needles(values)

    def add(self, values: Iterable[str | None]) -> None:
        self._needles = tuple(sorted(set(self._needles) | set(needles(values)), key=len, reverse=True))

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for n in self._needles:
            if n in text:
                text = text.replace(n, MASK)
        text = _URL_USERINFO.sub(lambda m: m.group("head") + MASK, text)
        text = _KV_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
        return _BAD_TOKEN.sub(lambda m: m.group("head") + MASK, text)


_process = Redactor()
_lock = threading.Lock()


def install(values: Iterable[str | None]) -> None:
    """Tell this process's redactor the secret values it was given (idempotent, additive), and
    route uncaught exceptions (main thread and threads) through it."""
    with _lock:
        _process.add(values)
        if not getattr(sys.excepthook, "_lagpilot_redacting", False):
            sys.excepthook = _excepthook
            threading.excepthook = _thread_excepthook


def redact(text: Any) -> str:
    """``text`` (anything; str() of it) with this process's secrets and the patterns masked."""
    return _process(text if isinstance(text, str) else str(text))


def _excepthook(tp: type[BaseException], exc: BaseException, tb: Any) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(tp, exc, tb))))


_excepthook._lagpilot_redacting = True  # type: ignore[attr-defined]


def _thread_excepthook(args: Any) -> None:
    if args.exc_type is SystemExit:
        return
    sys.stderr.write(
        redact(
            f"Exception in thread {getattr(args.thread, 'name', '?')}:\n"
            + "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        )
    )


def scrub(value: Any) -> Any:
    """``value`` with every string in it (dicts, lists, tuples) redacted; other values as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v) for v in value)
    return value


class LogFilter:
    """A logging filter for handlers whose formatter is not ours (the operator's kopf JSON log):
    the message (arguments merged), the traceback and string extras, redacted in the record."""

    _STANDARD = frozenset(
        (
            "name",
            "msg",
            "args",
            "levelname",
            "levelno",
            "pathname",
            "filename",
            "module",
            "exc_info",
            "exc_text",
            "stack_info",
            "lineno",
            "funcName",
            "created",
            "msecs",
            "relativeCreated",
            "thread",
            "threadName",
            "processName",
            "process",
            "taskName",
            "message",
            "asctime",
        )
    )

    def filter(self, record: Any) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
            record.exc_info = None
        for key, value in list(vars(record).items()):
            if key not in self._STANDARD and not key.startswith("_"):
                setattr(record, key, scrub(value))
        return True


def filter_log_handlers(logger: Any = None) -> None:
    """Attach :class:`LogFilter` to every handler of ``logger`` (the root logger by default)."""
    import logging

    for h in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, LogFilter) for f in h.filters):
            h.addFilter(LogFilter())
