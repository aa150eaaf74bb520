"""A deadline per handler call of a drain task: a hung handler (a sink that never answers, a lock
never released) must fail its task, not hang it — and with it the attempt — for ever.

``bounded(seconds, what)`` arms two timers around one call:

1. SIGALRM after ``seconds``: raises :class:`BatchTimeout` in the main thread, which interrupts
   Python code and blocking system calls (sleep, socket reads). It derives from BaseException, so
   the failure policy (``failure.run_batch``, which handles ``Exception``) never retries it, never
   isolates records over it and never dead-letters them: a hung sink is not a bad record. The task
   fails, Spark retries it (from its committed progress), and a task that keeps hanging fails the
   attempt, which the operator retries with its back-off.
2. faulthandler's watchdog after ``seconds + hard_grace_s``: for a call the alarm cannot interrupt
   (stuck in C code that holds the GIL, the signal blocked) it writes every thread's stack and
   ``Timeout (h:mm:ss)!`` to stderr and ends the process (exit 1): Spark sees the Python worker die and fails the
   task the same way.

Spark runs a task's Python code in its worker process's main thread; elsewhere (a thread) only the
watchdog applies. ``seconds`` None or <= 0: no deadline.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

HARD_GRACE_S = 30.0


class BatchTimeout(BaseException):
    """A handler call ran past its deadline (not a record failure: never retried or dead-lettered)."""


@contextmanager
def bounded(seconds: float | None, what: str, hard_grace_s: float = HARD_GRACE_S) -> Iterator[None]:
    if seconds is None or seconds <= 0:
        yield
        return
    main = threading.current_thread() is threading.main_thread()
    old, old_timer, armed_at = None, (0.0, 0.0), 0.0
    if main:

        def expired(signum: int, frame: object) -> None:
            raise BatchTimeout(f"{what} took longer than {seconds:g} s (handler deadline)")

        old = signal.signal(signal.SIGALRM, expired)
        old_timer = signal.setitimer(
            signal.ITIMER_REAL, seconds
        )  # another alarm's (e.g. a test runner's) is put back
        armed_at = time.monotonic()
    try:  # needs a real file descriptor: the worker's stderr (the executor's log)
        faulthandler.dump_traceback_later(seconds + hard_grace_s, exit=True, file=sys.stderr)
    except (ValueError, RuntimeError, AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        pass
    try:
        yield
    finally:
        try:
            faulthandler.cancel_dump_traceback_later()
        except (RuntimeError, AttributeError):
            pass
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old if old is not None else signal.SIG_DFL)
            if old_timer[0] > 0:
                signal.setitimer(
                    signal.ITIMER_REAL, max(1e-3, old_timer[0] - (time.monotonic() - armed_at)), old_timer[1]
                )
