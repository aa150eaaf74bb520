"""What the demo tells the person running it: the numbered stages, what each waits for, the
timings, and the JSON log file (<out>/demo.log)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("lagpilot_dev.demo")


class DemoError(Exception):
    """A stage could not complete; the message says which and why (the demo exits 2)."""


class WaitPrinter(logging.Handler):
    """Shows the stack's own "waiting for ..." log records as stage progress lines."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        what = getattr(record, "for", None)
        msg = record.getMessage()
        if msg == "waiting" and what:
            self.say(f"waiting for: {what}")
        elif msg == "still waiting" and what:
            self.say(f"still waiting for: {what} ({getattr(record, 'elapsed_s', '?')} s)")
        elif msg in ("bringing up part", "part is up"):
            part = getattr(record, "part", "?")
            secs = getattr(record, "seconds", None)
            self.say(f"{part}: starting" if msg == "bringing up part" else f"{part}: up in {secs} s")
        elif "building kubernetes" in msg or msg == "build progress":
            self.say(getattr(record, "line", None) or msg)
        elif record.levelno >= logging.WARNING:
            self.say(f"{record.levelname.lower()}: {msg}")


@dataclass
class Console:
    """The stage the run is in, what it waits for, and how long each stage took."""

    live: bool  # redraw the view in place (a terminal, no --plain)
    t_start: float = field(default_factory=time.monotonic)
    timings: dict[str, float] = field(default_factory=dict)
    stage: str = "starting"
    waiting: str = ""

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start

    def say(self, text: str, indent: bool = False) -> None:
        print(("      " if indent else "") + text, flush=True)

    def begin(self, n: int, title: str, waiting: str) -> float:
        self.stage = title
        self.waiting = waiting
        self.say(f"\n[{n}/7] {title}")
        self.say(f"waiting for: {waiting}", indent=True)
        log.info("stage", extra={"stage": title, "waiting_for": waiting})
        return time.monotonic()

    def done(self, key: str, t0: float, detail: str = "") -> None:
        secs = time.monotonic() - t0
        self.timings[key] = secs
        self.say(f"✓ {detail or 'done'} ({secs:.1f} s)", indent=True)

    def wait(
        self,
        check: Callable[[], Any],
        what: str,
        timeout: float,
        interval: float = 1.0,
        alive: Callable[[], str | None] | None = None,
    ) -> Any:
        """Poll ``check`` until truthy; print what we wait for every 15 s; DemoError on timeout or
        when ``alive`` names a dead process."""
        t0 = time.monotonic()
        last = t0
        err: str | None = None
        while True:
            try:
                result = check()
                if result:
                    return result
                err = None
            except Exception as exc:  # noqa: BLE001 - a failing probe means "not yet"
                err = repr(exc)[:300]
            if alive is not None and (dead := alive()):
                raise DemoError(f"gave up waiting for {what}: {dead}")
            now = time.monotonic()
            if now - t0 > timeout:
                raise DemoError(
                    f"timed out after {timeout:.0f} s waiting for {what}"
                    + (f" (last error: {err})" if err else "")
                )
            if now - last >= 15:
                self.say(f"still waiting for: {what} ({now - t0:.0f} s)", indent=True)
                last = now
            time.sleep(interval)


def setup_logging(out: Path, console: Console) -> None:
    """The JSON log file <out>/demo.log; the dev stack's waits shown as stage progress lines."""
    from lagpilot_runtime.jsonlog import JsonFormatter

    fh = logging.FileHandler(out / "demo.log")
    fh.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(fh)
    root.setLevel(logging.INFO)
    dev = logging.getLogger("lagpilot_dev")
    dev.setLevel(logging.INFO)
    dev.addHandler(fh)  # directly: jsonlog.setup(logger="lagpilot_dev") may have turned its propagation off
    dev.propagate = False
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    wait_printer = WaitPrinter(lambda m: console.say(m, indent=True))
    logging.getLogger("lagpilot_dev").addHandler(wait_printer)
    wait_printer.addFilter(lambda r: not r.name.startswith("lagpilot_dev.demo"))
