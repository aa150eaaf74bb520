"""C1: the warm drain runtime takes plans only from the operator.

The runtime runs a plan only when it carries the operator's HMAC-SHA256 signature (per-CR key) over
the exact plan text, the CR uid, the drain id, the attempt and an expiry; a plan for an attempt it
already took (or an older one) is a replay. A refused plan never reaches `drain_job.run`, so it
never touches progress. Bodies, counts and connections are bounded; healthz and a 409 do not name
the running drain; a signed plan runs read_committed. No Spark: `drain_job.run` is replaced."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import job as drain_job
from lagpilot_runtime.drain import runtime as drain_runtime
from lagpilot_runtime.drain.plan import DrainPlan, SubRange
from lagpilot_runtime.drain.runtime import DrainRuntime

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "lagpilot_runtime.sinks.stdout:handle",
}
PLAN = DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 10),), 100, 2, read_committed=True)
KEY = bytes.fromhex("11" * 32)
CR_UID = "uid-1"


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[DrainPlan]:
    """Every plan the runtime really ran (drain_job.run replaced: no Spark, no Kafka)."""
    ran: list[DrainPlan] = []

    def fake_run(plan, cfg, master, jars, extra, marks, warm_session=None):
        ran.append(plan)
        return {"records": 10}

    monkeypatch.setattr(drain_job, "run", fake_run)
    return ran


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> DrainRuntime:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    rt = DrainRuntime(ConsumerConfig.from_env(), None, [], {}, 4)
    rt.key, rt.cr_uid = KEY, CR_UID  # what serve() reads from its environment (the CR's key Secret)
    rt.spark = object()
    rt.ready.set()
    return rt


def signed(
    plan: DrainPlan = PLAN,
    attempt: int = 1,
    key: bytes = KEY,
    cr_uid: str = CR_UID,
    expires_in: float = 600,
    plan_text: str | None = None,
    drain_id: str | None = None,
) -> str:
    """The body a drain Job sends: the plan text and the operator's signature of it."""
    from lagpilot_runtime import plan_auth

    text = plan.to_json()
    auth = plan_auth.sign(key, text, cr_uid, drain_id or plan.drain_id, attempt, time.time() + expires_in)
    return json.dumps({"plan": plan_text if plan_text is not None else text, "auth": auth.to_dict()})


WIDER = DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 5000),), 100, 2, read_committed=True)


# ---- who may run a plan ----------------------------------------------------------------------------


def test_an_unsigned_plan_is_refused_and_never_runs(runtime: DrainRuntime, runs: list[DrainPlan]) -> None:
    for body in (
        PLAN.to_json(),
        json.dumps({"plan": PLAN.to_json()}),
        json.dumps({"plan": PLAN.to_json(), "auth": {"signature": "00" * 32}}),
    ):
        status, outcome = runtime.serve_plan(body, lambda: False)
        assert status == 401, (status, outcome)
    assert runs == []  # a refused plan never reaches the drain: it cannot touch progress


def test_a_plan_signed_with_another_key_is_refused(runtime: DrainRuntime, runs: list[DrainPlan]) -> None:
    status, _ = runtime.serve_plan(signed(key=bytes.fromhex("22" * 32)), lambda: False)
    assert status == 401 and runs == []


def test_a_widened_range_is_refused(runtime: DrainRuntime, runs: list[DrainPlan]) -> None:
    """The attack: the live drain id, a sub-range ending past the real one (its progress would make
    the real attempt skip records). The signature covers the exact plan text."""
    status, outcome = runtime.serve_plan(signed(plan_text=WIDER.to_json()), lambda: False)
    assert status == 401 and "signature" in outcome.message
    assert runs == []


def test_a_plan_for_another_cr_or_expired_is_refused(runtime: DrainRuntime, runs: list[DrainPlan]) -> None:
    assert runtime.serve_plan(signed(cr_uid="uid-other"), lambda: False)[0] == 401
    status, outcome = runtime.serve_plan(signed(expires_in=-1), lambda: False)
    assert status == 401 and "expired" in outcome.message
    # the signed drain id must be the plan's
    assert runtime.serve_plan(signed(drain_id="42"), lambda: False)[0] == 401
    assert runs == []


def test_replays_for_a_taken_or_older_attempt_are_refused(
    runtime: DrainRuntime, runs: list[DrainPlan]
) -> None:
    first = signed(attempt=2)
    assert runtime.serve_plan(first, lambda: False)[0] == 200
    status, outcome = runtime.serve_plan(first, lambda: False)  # the same signed plan again
    assert status == 401 and "replay" in outcome.message
    assert runtime.serve_plan(signed(attempt=1), lambda: False)[0] == 401  # an older attempt
    older = DrainPlan("40", "orders", "g", (SubRange(0, 0, 0, 10),), 100, 2, read_committed=True)
    assert runtime.serve_plan(signed(older, attempt=7), lambda: False)[0] == 401  # an older drain
    assert runtime.serve_plan(signed(attempt=3), lambda: False)[0] == 200  # the operator's retry
    newer = DrainPlan("42", "orders", "g", (SubRange(0, 0, 10, 20),), 100, 2, read_committed=True)
    assert runtime.serve_plan(signed(newer, attempt=1), lambda: False)[0] == 200  # the next drain
    assert [(p.drain_id, p.sub_ranges) for p in runs] == [("41", PLAN.sub_ranges)] * 2 + [
        ("42", newer.sub_ranges)
    ]


def test_a_signed_plan_runs_read_committed(runtime: DrainRuntime, runs: list[DrainPlan]) -> None:
    dirty = DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 10),), 100, 2, read_committed=False)
    assert runtime.serve_plan(signed(dirty), lambda: False)[0] == 200
    assert runs[0].read_committed is True


# ---- bounds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan",
    [
        DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 10),), batch_max_records=10**9),
        DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 10),), parallelism=10**6),
        DrainPlan("41", "orders", "g", tuple(SubRange(p, 0, 0, 10) for p in range(50_000))),
    ],
    ids=["batchMaxRecords", "parallelism", "subRanges"],
)
def test_plan_counts_are_bounded(plan: DrainPlan) -> None:
    with pytest.raises(ValueError):
        plan.validate()


def _serve(runtime: DrainRuntime) -> tuple[Any, int]:
    server = drain_runtime.make_server(runtime, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def test_an_oversized_body_is_refused_without_being_read(
    runtime: DrainRuntime, runs: list[DrainPlan]
) -> None:
    server, port = _serve(runtime)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(
                b"POST /drains HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000000\r\n\r\n{"
            )
            head = s.recv(200).decode(errors="replace")
        assert head.startswith("HTTP/1.1 413"), head
        assert runs == []
    finally:
        server.shutdown()
        server.server_close()


def test_connections_over_the_cap_get_503_at_once(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the held connections must outlive the third one's accept whatever the machine's load (with a
    # 0.5 s timeout they were sometimes dropped first under a parallel suite, freeing their slots)
    monkeypatch.setattr(drain_runtime, "REQUEST_TIMEOUT_S", 60.0, raising=False)
    monkeypatch.setattr(drain_runtime, "MAX_CONNECTIONS", 2, raising=False)
    server, port = _serve(runtime)
    try:
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        # accepted in order: the third is accepted after both held ones have their slots
        with socket.create_connection(("127.0.0.1", port), timeout=5) as third:  # over the cap: 503 at once
            got = third.recv(200)
            assert got.startswith(b"HTTP/1.1 503"), got
        for s in held:
            s.close()
    finally:
        server.shutdown()
        server.server_close()


def test_idle_connections_time_out_and_free_their_slot(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain_runtime, "REQUEST_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(drain_runtime, "MAX_CONNECTIONS", 2, raising=False)
    server, port = _serve(runtime)
    try:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        for s in idle:  # a caller that sends nothing is dropped after the request timeout
            assert s.recv(1) == b""
            s.close()
        # the slots are free again: the client sees the close a moment before the server's handler
        # thread releases its slot, so a probe in between may still get 503; wait (bounded) for 200
        status = 0
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    status = r.status
                break
            except urllib.error.HTTPError as err:
                status = err.code
                time.sleep(0.05)
        assert status == 200
    finally:
        server.shutdown()
        server.server_close()


# ---- what an unauthenticated caller learns --------------------------------------------------------


def test_healthz_and_busy_do_not_name_the_running_drain(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    monkeypatch.setattr(drain_job, "run", lambda *a, **k: release.wait(10) and {"records": 0})
    first = threading.Thread(target=runtime.serve_plan, args=(signed(), lambda: False))
    first.start()
    server, port = _serve(runtime)
    try:
        deadline = time.time() + 5
        while runtime.current is None and time.time() < deadline:
            time.sleep(0.01)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            body = r.read().decode()
        shown = json.loads(body)
        # `running` is a digest of the plan's signature (random hex, which may contain "41" by chance);
        # it must not be the drain id, and nothing else in the answer may name it
        assert (
            r.status == 200 and shown["running"] not in ("41", 41) and shown["running"] == runtime.running
        ), body
        assert "41" not in json.dumps({k: v for k, v in shown.items() if k != "running"}), body
        status, outcome = runtime.serve_plan(signed(attempt=2), lambda: False)
        assert status == 409 and "41" not in outcome.message
        # an unsigned caller learns nothing either: refused before the busy check
        assert runtime.serve_plan(PLAN.to_json(), lambda: False)[0] == 401
    finally:
        release.set()
        first.join(5)
        server.shutdown()
        server.server_close()


# ---- the Job's side --------------------------------------------------------------------------------


def test_the_job_sends_its_signed_plan_and_a_refusal_fails_the_attempt(
    runtime: DrainRuntime, runs: list[DrainPlan]
) -> None:
    from lagpilot_runtime import plan_auth

    server, port = _serve(runtime)
    url = f"http://127.0.0.1:{port}"
    try:
        text = PLAN.to_json()
        auth = plan_auth.sign(KEY, text, CR_UID, PLAN.drain_id, 1, time.time() + 600)
        assert drain_runtime.request(url, PLAN, auth=auth, plan_text=text).summary == {"records": 10}
        again = drain_runtime.request(url, PLAN, auth=auth, plan_text=text)  # replayed: refused, not cold
        assert again.exit == drain_job.EXIT_FAILED and "refused" in again.message
        assert len(runs) == 1
    finally:
        server.shutdown()
        server.server_close()


# ---- the runtime's own identity ----------------------------------------------------------------------


def test_the_runtime_starts_only_with_a_valid_key_matching_its_fingerprint_and_a_cr_uid() -> None:
    from lagpilot_runtime import plan_auth

    key_hex = plan_auth.new_key()
    key = plan_auth.parse_key(key_hex)
    good = {
        plan_auth.KEY_ENV: key_hex,
        plan_auth.KEY_ID_ENV: plan_auth.key_id(key),
        plan_auth.CR_UID_ENV: CR_UID,
    }
    assert drain_runtime.runtime_identity(good) == (key, CR_UID)
    for broken, field in (
        ({**good, plan_auth.KEY_ENV: ""}, plan_auth.KEY_ENV),
        ({**good, plan_auth.KEY_ENV: "abcd"}, plan_auth.KEY_ENV),
        ({**good, plan_auth.KEY_ID_ENV: "0" * 16}, plan_auth.KEY_ID_ENV),
        ({**good, plan_auth.CR_UID_ENV: ""}, plan_auth.CR_UID_ENV),
    ):
        with pytest.raises(ValueError, match=field):
            drain_runtime.runtime_identity(broken)
    assert key_hex not in plan_auth.key_id(key)  # the fingerprint in the pod spec is not the key


@pytest.mark.parametrize(
    "auth",
    [
        None,
        [],
        "x",
        {"crUid": CR_UID},
        {"crUid": CR_UID, "drainId": "41", "attempt": "1", "expiresAt": 2**40, "signature": "00"},
    ],
)
def test_malformed_signatures_are_refused(runtime: DrainRuntime, runs: list[DrainPlan], auth: Any) -> None:
    status, _ = runtime.serve_plan(json.dumps({"plan": PLAN.to_json(), "auth": auth}), lambda: False)
    assert status == 401 and runs == []
