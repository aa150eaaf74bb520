"""H3: a hung handler must not hang its drain task for ever. Each handler call of a drain task runs
under a deadline (``lagpilot_runtime.batch_deadline.bounded``): past it the call is interrupted with
``BatchTimeout`` (SIGALRM), which the failure policy never treats as a record failure (no retry, no
dead letter: the task fails and the attempt with it); a call stuck where no Python code runs (the
alarm blocked, C code) ends the worker process after a grace period (faulthandler's watchdog)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from lagpilot_runtime.batch_deadline import BatchTimeout, bounded
from lagpilot_runtime.failure import RetryPolicy, run_batch
from lagpilot_runtime.handler import Record


def _alarm() -> tuple[object, bool]:
    """SIGALRM's handler and whether an alarm is armed (a test runner's own timeout may use one)."""
    return signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)[0] > 0


def test_a_call_past_its_deadline_is_interrupted():
    before = _alarm()
    with pytest.raises(BatchTimeout) as err:
        with bounded(0.2, "drain batch p0#1"):
            time.sleep(30)
    assert "drain batch p0#1" in str(err.value) and "0.2" in str(err.value)
    assert _alarm() == before  # the previous handler and alarm are back


def test_a_call_within_its_deadline_is_untouched():
    before = _alarm()
    with bounded(5, "quick"):
        x = sum(range(1000))
    assert x == 499500
    assert _alarm() == before


def test_no_deadline_means_none():
    before = _alarm()
    with bounded(None, "unbounded"):
        assert _alarm() == before


def test_the_failure_policy_does_not_retry_or_dead_letter_a_timeout():
    calls = []

    def call(piece):
        calls.append(len(piece))
        raise BatchTimeout("drain batch p0#0 took longer than 1 s")

    recs = [Record("t", 0, o, None, b"v", [], None) for o in range(4)]
    with pytest.raises(BatchTimeout):
        run_batch(recs, call, RetryPolicy(max_retries=3, backoff_ms=1), sleep=lambda s: None)
    assert calls == [4]  # one call: no retries, no isolation


def test_a_call_the_alarm_cannot_interrupt_ends_the_process():
    code = textwrap.dedent("""
        import signal, time
        from lagpilot_runtime.batch_deadline import bounded
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])  # as if stuck in C code
        with bounded(0.2, "stuck batch", hard_grace_s=0.5):
            time.sleep(60)
        print("not reached")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "not reached" not in proc.stdout
    # faulthandler's watchdog (C: runs even when no Python code can) dumped the stacks and exited
    assert "Timeout (" in proc.stderr, proc.stderr[-2000:]
