"""A consumer whose loop is stuck outside its handler is not live (chaos campaign 2026-11-26,
/tmp/chaos-s15: after `kafka_restart` round 2 the at-least-once consumer logged `partitions lost`
at 20:09:56, the broker was back by 20:10:41, and the pod then logged nothing — no assignment, no
batch — until the bench deleted it at 20:16:39; `postgres_restart` was judged NOT RECOVERED on it).
Its liveness only failed after ``max.poll.interval`` (600 s) + the probe's 60 s, because a batch's
handler may take that long. A Kafka or sink call outside the handler has no such reason: the
client's synchronous commit has no timeout (confluent-kafka-python#1801 reports such hangs), so the
loop's liveness must fail much sooner when it is stuck outside the handler."""

from __future__ import annotations

from lagpilot_runtime.metrics import Health


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_stuck_outside_the_handler_is_not_live_long_before_max_poll_interval() -> None:
    clock = Clock()
    h = Health(stale_after_s=600.0, clock=clock)
    h.progress()
    clock.t += 200.0  # no poll returned, no handler running: a Kafka call that never returned
    ok, detail = h.live()
    assert not ok, detail


def test_a_long_handler_stays_live_up_to_max_poll_interval() -> None:
    clock = Clock()
    h = Health(stale_after_s=600.0, clock=clock)
    h.progress()
    h.handler_started()
    clock.t += 500.0
    assert h.live()[0]
    clock.t += 101.0
    assert not h.live()[0]  # 601 s in one batch: max.poll.interval passed, as before


def test_the_handler_ending_is_progress() -> None:
    clock = Clock()
    h = Health(stale_after_s=600.0, clock=clock)
    h.handler_started()
    clock.t += 500.0
    h.handler_done()
    clock.t += 60.0  # its commit is under way
    assert h.live()[0]


def test_where_the_loop_is_stuck_is_logged_once_with_its_stack(caplog) -> None:  # type: ignore[no-untyped-def]
    """The stack of the consuming thread (file:line function, no locals) is logged the first time
    the probe finds it stuck, so the next hang names its call."""
    import threading

    release = threading.Event()

    def a_kafka_call_that_never_returns() -> None:
        release.wait(30)

    t = threading.Thread(target=a_kafka_call_that_never_returns, daemon=True)
    t.start()
    try:
        clock = Clock()
        h = Health(stale_after_s=600.0, clock=clock, loop_thread=t.ident)
        clock.t += 121.0
        with caplog.at_level("ERROR", logger="lagpilot.consumer"):
            assert not h.live()[0]
            assert not h.live()[0]  # the probe asks again: logged once
        stuck = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "loop_stuck"]
        assert len(stuck) == 1
        assert any("a_kafka_call_that_never_returns" in f for f in stuck[0].fields["stack"])
        h.progress()  # it came back: a later episode is logged again
        clock.t += 121.0
        with caplog.at_level("ERROR", logger="lagpilot.consumer"):
            h.live()
        assert len([r for r in caplog.records if getattr(r, "fields", {}).get("event") == "loop_stuck"]) == 2
    finally:
        release.set()
        t.join(5)


def test_sigusr1_dumps_every_threads_stack(capfd) -> None:  # type: ignore[no-untyped-def]
    """`kill -USR1` on a consumer prints its threads' stacks to stderr (the pod's log)."""
    import faulthandler
    import os
    import signal
    from types import SimpleNamespace

    from lagpilot_runtime import consumer

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        consumer._install_signals(SimpleNamespace(stop_event=None), 1.0)  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGUSR1)
        err = capfd.readouterr().err
        assert "Current thread" in err and "in test_sigusr1_dumps_every_threads_stack" in err, err[-2000:]
    finally:
        faulthandler.unregister(signal.SIGUSR1)
        for s, h in before.items():
            signal.signal(s, h)
