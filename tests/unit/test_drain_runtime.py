"""The warm drain runtime's protocol without Spark: one plan at a time (409), not warm (503), a plan
for another group (400), the caller going away cancels the plan's Spark jobs, the Job side's
fall-back when nothing listens, and the exit-code mapping shared with the cold path."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from lagpilot_runtime import plan_auth
from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import job as drain_job
from lagpilot_runtime.drain import runtime as drain_runtime
from lagpilot_runtime.drain.plan import DrainPlan, SubRange
from lagpilot_runtime.drain.runtime import DrainRuntime, Outcome, Unreachable

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "lagpilot_runtime.sinks.stdout:handle",
}
PLAN = DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 10),), 100, 2, read_committed=True)
KEY, CR_UID = bytes.fromhex("11" * 32), "uid-1"
_ATTEMPTS = itertools.count(
    1
)  # every call a fresh attempt: the runtime refuses replays (test_drain_runtime_auth)


def auth_for(plan: DrainPlan = PLAN) -> plan_auth.PlanAuth:
    return plan_auth.sign(KEY, plan.to_json(), CR_UID, plan.drain_id, next(_ATTEMPTS), time.time() + 600)


def signed(plan: DrainPlan = PLAN) -> str:
    """The body a drain Job sends: its plan and the operator's signature."""
    return json.dumps({"plan": plan.to_json(), "auth": auth_for(plan).to_dict()})


class FakeContext:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancelJobGroup(self, group: str) -> None:  # noqa: N802 - Spark's name
        self.cancelled.append(group)


class FakeSpark:
    def __init__(self) -> None:
        self.sparkContext = FakeContext()


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> DrainRuntime:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    rt = DrainRuntime(ConsumerConfig.from_env(), None, [], {}, 4, key=KEY, cr_uid=CR_UID)
    rt.spark = FakeSpark()
    rt.ready.set()
    return rt


def test_outcome_round_trips_and_maps_the_exit_codes():
    o = Outcome(drain_job.EXIT_OK, "", {"records": 5})
    assert Outcome.from_json(o.to_json()) == o
    assert drain_runtime.outcome_of(lambda: {"records": 1}).exit == drain_job.EXIT_OK
    lost = drain_runtime.outcome_of(lambda: (_ for _ in ()).throw(drain_job.RetentionError("gone")))
    assert (lost.exit, lost.message) == (drain_job.EXIT_DATA_LOSS, "gone")
    failed = drain_runtime.outcome_of(lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert failed.exit == drain_job.EXIT_FAILED and "boom" in failed.message


def test_serves_a_plan_with_the_warm_session(runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch):
    seen: dict[str, Any] = {}

    def fake_run(plan, cfg, master, jars, extra, marks, warm_session=None):
        seen.update(plan=plan, session=warm_session, marks=dict(marks))
        return {"records": 10}

    monkeypatch.setattr(drain_job, "run", fake_run)
    status, outcome = runtime.serve_plan(signed(), lambda: False)
    assert (status, outcome.exit, outcome.summary) == (200, 0, {"records": 10})
    assert seen["plan"] == PLAN and seen["session"] is runtime.spark
    assert (
        seen["marks"]["process_start"] == seen["marks"]["main_entered"]
    )  # start-up counted from the request
    assert runtime.served == 1 and runtime.current is None


def test_not_warm_busy_and_foreign_plans_are_refused(runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch):
    first, release = _run_until_released(runtime, monkeypatch)
    status, outcome = runtime.serve_plan(signed(), lambda: False)
    assert status == 409 and "busy" in outcome.message and "41" not in outcome.message
    release.set()
    first.join(5)
    other = DrainPlan("42", "payments", "g", (SubRange(0, 0, 0, 10),), 100, 2)
    status, outcome = runtime.serve_plan(signed(other), lambda: False)
    assert (status, outcome.exit) == (400, drain_job.EXIT_CONFIG)
    runtime.ready.clear()
    assert runtime.serve_plan(signed(), lambda: False)[0] == 503


def test_a_caller_that_goes_away_cancels_the_plans_spark_jobs(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    def slow_run(*a, **k):
        deadline = time.time() + 10
        while not runtime.spark.sparkContext.cancelled and time.time() < deadline:
            time.sleep(0.05)
        raise RuntimeError("Job cancelled")

    monkeypatch.setattr(drain_job, "run", slow_run)
    calls = iter([False, True])
    status, outcome = runtime.serve_plan(signed(), lambda: next(calls, True))
    assert runtime.spark.sparkContext.cancelled == [drain_job.job_group(PLAN)]
    assert (status, outcome.exit) == (200, drain_job.EXIT_FAILED)
    assert runtime.current is None  # free for the retry


def test_peer_closed_sees_eof_but_not_a_quiet_open_peer():
    a, b = socket.socketpair()
    try:
        assert not drain_runtime.peer_closed(a)
        b.close()
        assert drain_runtime.peer_closed(a)
    finally:
        a.close()


def _serve(runtime: DrainRuntime) -> tuple[ThreadingHTTPServer, str]:
    server = drain_runtime.make_server(runtime, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_the_job_side_gets_the_outcome_and_waits_while_busy(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(drain_job, "run", lambda *a, **k: {"records": 3})
    server, url = _serve(runtime)
    try:
        assert drain_runtime.request(url, PLAN, auth=auth_for()).summary == {"records": 3}
        runtime._plan_lock.acquire()  # another plan runs: the caller retries, then gives up with a failure
        runtime.current = "40"
        slept: list[float] = []
        clock = iter(range(100))
        outcome = drain_runtime.request(
            url, PLAN, auth=auth_for(), busy_wait_s=3, sleep=slept.append, now=lambda: float(next(clock))
        )
        assert outcome.exit == drain_job.EXIT_FAILED and "busy" in outcome.message and len(slept) >= 2
        runtime.current = None
        runtime._plan_lock.release()
        runtime.ready.clear()
        with pytest.raises(Unreachable):  # not warm: the Job drains by itself
            drain_runtime.request(url, PLAN, auth=auth_for())
    finally:
        server.shutdown()
        server.server_close()


def test_nothing_listening_is_unreachable():
    from lagpilot_dev.paths import free_port

    with pytest.raises(Unreachable):
        drain_runtime.request(f"http://127.0.0.1:{free_port()}", PLAN, connect_wait_s=0)


def test_healthz_reports_warm_and_busy(runtime: DrainRuntime):
    import urllib.request

    server, url = _serve(runtime)
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
            assert r.status == 200 and json.loads(r.read()) == {"warm": True, "busy": False, "running": None}
    finally:
        server.shutdown()
        server.server_close()


class _Frame:
    """spark.range(...).mapInArrow(...): collect() records its task count and may block (a keep-warm job in flight)."""

    def __init__(
        self,
        n: int,
        ran: list[int],
        hold: threading.Event | None = None,
        started: threading.Event | None = None,
    ) -> None:
        self.n, self.ran, self.hold, self.started = n, ran, hold, started

    def mapInArrow(self, fn, schema):  # noqa: N802 - Spark's name
        return self

    def collect(self):
        if self.started is not None:
            self.started.set()
        if self.hold is not None:
            self.hold.wait(10)
        self.ran.append(self.n)
        return []


def _fake_keep_warm(
    runtime: DrainRuntime,
    ran: list[int],
    hold: threading.Event | None = None,
    started: threading.Event | None = None,
) -> None:
    runtime.spark.sparkContext.setJobGroup = lambda *a, **k: None
    runtime.spark.range = lambda start, end, numPartitions: _Frame(  # noqa: N803 - Spark's keyword
        numPartitions, ran, hold, started
    )


def _run_until_released(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Thread, threading.Event]:
    """A plan running in the runtime (on its own thread) until the returned event is set."""
    release = threading.Event()
    monkeypatch.setattr(drain_job, "run", lambda *a, **k: release.wait(10) and {"records": 0})
    first = threading.Thread(target=runtime.serve_plan, args=(signed(), lambda: False))
    first.start()
    deadline = time.time() + 5
    while runtime.current is None and time.time() < deadline:
        time.sleep(0.01)
    assert runtime.current == PLAN.drain_id
    return first, release


def test_keep_workers_runs_one_task_per_slot_but_not_during_a_plan(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    ran: list[int] = []
    _fake_keep_warm(runtime, ran)
    assert runtime.keep_workers() and ran == [4]  # parallelism 4: four concurrent tasks, four workers
    first, release = _run_until_released(runtime, monkeypatch)
    try:
        assert not runtime.keep_workers() and ran == [4]  # a plan's tasks keep the workers alive
    finally:
        release.set()
        first.join(5)
    assert runtime.keep_workers() and ran == [4, 4]


def test_a_plan_arriving_during_keep_warm_is_taken_at_once_a_second_plan_gets_409(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    """The keep-warm job (a no-op Spark job: reads nothing, writes nothing) does not hold the plan
    lock: a plan runs beside it; plans exclude each other (409), keep-warm or not."""
    ran: list[int] = []
    hold, started = threading.Event(), threading.Event()
    _fake_keep_warm(runtime, ran, hold, started)
    keep_warm = threading.Thread(target=runtime.keep_workers)
    keep_warm.start()
    try:
        assert started.wait(5)  # the keep-warm job is in flight (its collect() blocks on `hold`)
        beside: list[bool] = []
        second: list[tuple[int, Outcome]] = []

        def fake_run(*a, **k):
            beside.append(keep_warm.is_alive() and not ran)  # the keep-warm job has not finished
            second.append(
                runtime.serve_plan(
                    signed(DrainPlan("43", "orders", "g", (SubRange(0, 0, 0, 10),), 100, 2)), lambda: False
                )
            )
            return {"records": 10}

        monkeypatch.setattr(drain_job, "run", fake_run)
        status, outcome = runtime.serve_plan(signed(), lambda: False)
        assert (status, outcome.summary) == (200, {"records": 10})
        assert beside == [True]  # taken while the keep-warm job still ran, not after it
        assert [s for s, _ in second] == [409] and "busy" in second[0][1].message
    finally:
        hold.set()
        keep_warm.join(5)
    assert ran == [4] and runtime.current is None


def test_a_runtime_that_dies_mid_plan_fails_the_attempt_with_a_message():
    import http.server

    class Dies(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.connection.close()  # the runtime's process gone mid-plan

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dies)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        outcome = drain_runtime.request(f"http://127.0.0.1:{server.server_address[1]}", PLAN)
        assert outcome.exit == drain_job.EXIT_FAILED and "connection was lost" in outcome.message
    finally:
        server.shutdown()
        server.server_close()


def test_sigterm_cancels_the_plan_and_waits_until_the_runtime_ended_it(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    import os
    import signal

    ended: list[float] = []

    def slow_run(*a, **k):
        deadline = time.time() + 10
        while not runtime.spark.sparkContext.cancelled and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the cancelled tasks' last moments
        ended.append(time.time())
        raise RuntimeError("Job cancelled")

    monkeypatch.setattr(drain_job, "run", slow_run)
    server, url = _serve(runtime)

    def terminated(signum, frame):
        raise drain_runtime.Terminated()

    old = signal.signal(signal.SIGTERM, terminated)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        outcome = drain_runtime.request(url, PLAN, auth=auth_for())
        returned = time.time()
    finally:
        signal.signal(signal.SIGTERM, old)
        server.shutdown()
        server.server_close()
    assert outcome.exit == drain_job.EXIT_FAILED and "SIGTERM" in outcome.message
    assert "not confirmed" not in outcome.message
    assert runtime.spark.sparkContext.cancelled == [drain_job.job_group(PLAN)]
    assert ended and returned >= ended[0]  # the Job's process ends only after the plan did


def _hung_runtime() -> tuple[socket.socket, str]:
    """A runtime whose process stopped (SIGSTOP, node lost): the kernel still accepts connections
    into the listen backlog, nothing ever answers the plan or /healthz."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s, f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_runtime_that_stops_answering_fails_the_attempt():
    sock, url = _hung_runtime()
    got: list[Outcome] = []
    t = threading.Thread(
        target=lambda: got.append(
            drain_runtime.request(url, PLAN, heartbeat_s=0.2, probe_timeout_s=0.2, max_misses=2)
        ),
        daemon=True,
    )
    try:
        t.start()
        t.join(60)  # generous: without a heartbeat the wait never ends
        assert got, "the Job's process still waits on a runtime that stopped answering"
        assert got[0].exit == drain_job.EXIT_FAILED and "stopped answering" in got[0].message, got[0]
    finally:
        sock.close()


def test_a_slow_plan_of_a_live_runtime_is_waited_for(runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch):
    def slow_run(*a, **k):
        time.sleep(1.5)  # several heartbeats: /healthz keeps saying the plan runs
        return {"records": 10}

    monkeypatch.setattr(drain_job, "run", slow_run)
    server, url = _serve(runtime)
    try:
        outcome = drain_runtime.request(
            url, PLAN, auth=auth_for(), heartbeat_s=0.2, probe_timeout_s=1.0, max_misses=2
        )
    finally:
        server.shutdown()
        server.server_close()
    assert outcome.exit == drain_job.EXIT_OK and outcome.summary == {"records": 10}, outcome


def test_a_runtime_that_admits_the_job_a_moment_late_is_used_not_skipped(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    """On the real node the drain Job's first connect was refused: kube-router had not yet put the new
    pod's IP into the runtime's NetworkPolicy (its sync came 1.3 s later) and the Job drained cold.
    A connection refused before the plan was sent leaves nothing running anywhere: the Job keeps
    trying within its connect window before it drains by itself."""
    from lagpilot_dev.paths import free_port

    monkeypatch.setattr(drain_job, "run", lambda *a, **k: {"records": 3})
    port = free_port()
    servers: list[ThreadingHTTPServer] = []

    def admit_later() -> None:
        time.sleep(1.5)
        servers.append(drain_runtime.make_server(runtime, "127.0.0.1", port))
        servers[0].serve_forever()

    threading.Thread(target=admit_later, daemon=True).start()
    try:
        outcome = drain_runtime.request(f"http://127.0.0.1:{port}", PLAN, auth=auth_for())
        assert outcome.summary == {"records": 3}
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def test_nothing_listening_within_the_connect_window_is_unreachable():
    from lagpilot_dev.paths import free_port

    clock = iter(float(t) for t in range(100))
    slept: list[float] = []
    with pytest.raises(Unreachable):
        drain_runtime.request(
            f"http://127.0.0.1:{free_port()}",
            PLAN,
            connect_wait_s=5,
            sleep=slept.append,
            now=lambda: next(clock),
        )
    assert 1 <= len(slept) <= 6  # it tried again within the window, then gave up
