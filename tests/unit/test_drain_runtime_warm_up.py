"""The warm drain runtime's warm-up has the shape of a real drain (issue 24: the first drain on the
node was 3x slower than the next; docs/drain.md "Warm drain runtime")."""

from __future__ import annotations

import json
import threading
import time

import pytest

from lagpilot_runtime import plan_auth
from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import runtime as drain_runtime
from lagpilot_runtime.drain import spark as drain_spark
from lagpilot_runtime.drain.plan import DrainPlan, SubRange, split_ranges
from lagpilot_runtime.drain.runtime import DrainRuntime, warm_up_work

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "lagpilot_runtime.sinks.stdout:handle",
}


def _shape(options: list[dict[str, str]]) -> list[list[int]]:
    return [json.loads(o["assign"])["orders"] for o in options]


def test_the_warm_up_plans_the_relations_of_a_drain_of_parallelism_tasks():
    marks = {0: (100, 5000), 1: (0, 4000), 2: (7, 9000)}
    work = warm_up_work(marks, 12)
    # a real plan of 12 tasks over these partitions (the operator's split factor: 12 / 3)
    real = split_ranges({p: (lo, hi) for p, (lo, hi) in marks.items()}, 4)
    assert (
        _shape(drain_spark.relation_options("orders", work))
        == _shape(drain_spark.relation_options("orders", [(s, s.start) for s in real]))
        == [[0, 1, 2]] * 4
    )
    assert len(work) == 12
    # each sub-range one record, from the low watermark up: nothing is read twice, nothing far
    assert all(s.end - s.start == 1 and start == s.start for s, start in work)
    assert sorted(s.start for s, _ in work if s.partition == 0) == [100, 101, 102, 103]


def test_the_warm_up_skips_empty_partitions_and_short_ones_get_fewer_pieces():
    assert warm_up_work({0: (5, 5), 1: (0, 0)}, 12) == []
    work = warm_up_work({0: (5, 5), 1: (0, 2)}, 4)  # one partition with records: factor 4, two there
    assert [(s.partition, s.index, s.start, s.end) for s, _ in work] == [(1, 0, 0, 1), (1, 1, 1, 2)]


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> DrainRuntime:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    rt = DrainRuntime(ConsumerConfig.from_env(), None, [], {}, 4)
    rt.ready.set()
    return rt


def test_rewarm_runs_until_the_kafka_readers_read_a_record_never_beside_a_plan(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    calls: list[bool] = []
    topic_has_records = [False]

    def fake_warm() -> None:
        calls.append(runtime._plan_lock.locked())  # a plan arriving meanwhile gets 409
        runtime.kafka_warm = topic_has_records[0]

    monkeypatch.setattr(runtime, "_warm_kafka_source", fake_warm)
    # an empty topic at start: tried again; nothing read, so the round's keep-warm still runs (False)
    assert not runtime.rewarm() and calls == [True]
    assert not runtime._plan_lock.locked()
    runtime._plan_lock.acquire()  # a plan runs: no warm-up beside it
    try:
        assert not runtime.rewarm() and calls == [True]
    finally:
        runtime._plan_lock.release()
    topic_has_records[0] = True
    assert runtime.rewarm() and calls == [True, True]  # read records: it stands for this round's keep-warm
    assert not runtime.rewarm() and calls == [True, True]  # warm: never again


def test_rewarm_waits_for_the_first_warm_up(runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch):
    runtime.ready.clear()
    monkeypatch.setattr(runtime, "_warm_kafka_source", lambda: pytest.fail("warm-up before ready"))
    assert not runtime.rewarm()


def test_a_plan_sent_during_a_rewarm_gets_409_and_its_caller_retries(
    runtime: DrainRuntime, monkeypatch: pytest.MonkeyPatch
):
    key, uid = bytes.fromhex("11" * 32), "uid-1"
    runtime.key, runtime.cr_uid = key, uid
    plan = DrainPlan("41", "orders", "g", (SubRange(0, 0, 0, 10),), 100, 2, read_committed=True)
    auth = plan_auth.sign(key, plan.to_json(), uid, plan.drain_id, 1, time.time() + 600)
    body = json.dumps({"plan": plan.to_json(), "auth": auth.to_dict()})
    started, release = threading.Event(), threading.Event()

    def slow_warm() -> None:
        started.set()
        release.wait(5)

    monkeypatch.setattr(runtime, "_warm_kafka_source", slow_warm)
    t = threading.Thread(target=runtime.rewarm)
    t.start()
    try:
        assert started.wait(5)
        status, outcome = runtime.serve_plan(body, lambda: False)
        assert status == 409, outcome  # the Job's client retries a 409 (drain_runtime.BUSY_WAIT_S)
    finally:
        release.set()
        t.join(5)
    assert runtime.taken is None  # the busy answer took nothing: the same signed plan is taken next


def test_the_serve_loop_skips_keep_warm_in_the_round_the_rewarm_read_records(monkeypatch: pytest.MonkeyPatch):
    for k, v in {**ENV, "LAGPILOT_DRAIN_RUNTIME_KEY": "11" * 32, "LAGPILOT_CR_UID": "uid-1"}.items():
        monkeypatch.setenv(k, v)
    rounds: list[str] = []
    rewarm_results = iter([False, True, False])

    def fake_warm_up(self: DrainRuntime) -> dict[str, float]:
        self.ready.set()
        return {}

    def fake_rewarm(self: DrainRuntime) -> bool:
        rounds.append("rewarm")
        return next(rewarm_results)

    def fake_keep(self: DrainRuntime) -> bool:
        rounds.append("keep")
        if len(rounds) >= 5:
            raise KeyboardInterrupt  # ends serve()'s loop
        return True

    monkeypatch.setattr(DrainRuntime, "warm_up", fake_warm_up)
    monkeypatch.setattr(DrainRuntime, "rewarm", fake_rewarm)
    monkeypatch.setattr(DrainRuntime, "keep_workers", fake_keep)
    monkeypatch.setattr(drain_runtime, "KEEP_WARM_EVERY_S", 0.01)
    monkeypatch.setattr(drain_runtime, "make_server", lambda *a: _NoServer())
    assert drain_runtime.serve(ConsumerConfig.from_env(), None, [], {}) == 0
    assert rounds == ["rewarm", "keep", "rewarm", "rewarm", "keep"]


class _NoServer:
    def serve_forever(self) -> None:
        pass

    def shutdown(self) -> None:
        pass
