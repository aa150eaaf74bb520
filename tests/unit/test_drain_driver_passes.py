"""A busy drain's driver starts a next part's sub-ranges while a pass runs (issue 25 item 2;
docs/drain.md "Busy drains": the runtime): `drain_job.run` with Spark and Kafka replaced by a fake
world (progress groups, the parts group, Spark jobs that run until the test lets them end).

What is checked: a next part's new sub-ranges start as their own pass while an earlier pass still
runs (no waiting for the slowest task of the pass under way); a sub-range a running pass holds is
never started again (the operator's part lists every unfinished sub-range, running ones too); a
forged or stale part taken while a pass runs starts nothing; a failed pass cancels the others and
fails the attempt without completing anyone's progress; a final part that comes while a pass runs
ends the attempt once that pass has ended; the part wait (300 s by default) starts only when no pass
is left; the first pass is the attempt's start-up."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain import job as drain_job
from lagpilot_runtime.drain.plan import DrainPlan, NextPart, SubRange, owner_tag

KEY = bytes(range(32))
OWNER = owner_tag("uid-1")
A0, A1 = SubRange(0, 0, 100, 200), SubRange(0, 1, 200, 300)
B2, B3 = SubRange(0, 2, 300, 350), SubRange(0, 3, 350, 400)


def plan(*subs: SubRange, busy: bool = True) -> DrainPlan:
    return DrainPlan("7", "t", "g", subs or (A0, A1), parallelism=2, owner=OWNER, busy=busy)


class FakeConsumer:
    """The parts group as a consumer's committed() shows it (drain_job.read_part)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def committed(self, tps: Any, timeout: Any = None) -> list[Any]:
        from confluent_kafka import TopicPartition

        meta = self.world.part_meta
        if meta is None:
            return [TopicPartition("t", 0, -1001)]
        return [TopicPartition("t", 0, 1, metadata=meta)]

    def close(self) -> None:
        pass


class FakeSpark:
    def __init__(self, world: World) -> None:
        self.world = world
        self.sparkContext = self

    def cancelJobGroup(self, group: str) -> None:  # noqa: N802 - Spark's name
        self.world.cancelled.append(group)
        for gate in self.world.gates.values():
            gate.set()  # a cancelled job ends (its collect raises)
        self.world.cancel_all = True

    def setJobGroup(self, *a: Any, **kw: Any) -> None:  # noqa: N802 - Spark's name
        pass


class World:
    """Progress groups (sub-range -> next offset), the parts group, and Spark jobs that each run until
    the test sets the gate of their first sub-range (or finish at once when told)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.progress: dict[tuple[int, int], int] = {}
        self.part_meta: str | None = None
        self.jobs: list[list[tuple[int, int]]] = []  # each job's sub-ranges, in start order
        self.running: set[int] = set()  # job numbers whose Spark job runs now
        self.concurrent: list[tuple[int, set[int]]] = []  # (job started, jobs running then)
        self.gates: dict[tuple[int, int], threading.Event] = {}
        self.fail: set[tuple[int, int]] = set()
        self.completed: list[tuple[int, int]] = []
        self.cancelled: list[str] = []
        self.cancel_all = False
        self.started = threading.Condition()
        self.spark = FakeSpark(self)
        m = monkeypatch
        m.setattr(drain_job, "PART_POLL_S", 0.01)
        m.setattr(drain_job, "read_progress", self.read_progress)
        m.setattr(drain_job, "catch_up_to_sink", lambda cfg, p, work, **kw: list(work))
        m.setattr(drain_job, "low_watermarks", lambda cfg, p, **kw: {})
        m.setattr(drain_job, "_complete_read", self.complete_read)
        m.setattr(drain_job, "_session", lambda p, spark, starter, use_arrow, marks: spark)
        m.setattr(drain_job, "_spark_job", self.spark_job)
        m.setattr(drain_job, "progress_consumer", lambda cfg, group: FakeConsumer(self))
        m.setattr(drain_job, "_arrow_available", lambda: False)

    def gate(self, s: SubRange) -> threading.Event:
        return self.gates.setdefault((s.partition, s.index), threading.Event())

    def deliver(self, part: NextPart, key: bytes = KEY) -> None:
        self.part_meta = plan_auth.sign_part(key, OWNER, "t", part.body())

    def read_progress(self, cfg: Any, p: DrainPlan, **kw: Any) -> dict[tuple[int, int], tuple[int, int]]:
        return {
            (s.partition, s.index): (self.progress.get((s.partition, s.index), s.start), 0)
            for s in p.sub_ranges
        }

    def complete_read(self, p: DrainPlan, cfg: Any, work: Any, results: Any, summary: Any) -> None:
        for s, _ in work:
            self.progress[(s.partition, s.index)] = s.end
            self.completed.append((s.partition, s.index))

    def spark_job(
        self, p: DrainPlan, cfg: Any, work: Any, spark: Any, use_arrow: bool, marks: Any
    ) -> list[Any]:
        keys = [(s.partition, s.index) for s, _ in work]
        with self.started:
            n = len(self.jobs)
            self.jobs.append(keys)
            self.concurrent.append((n, set(self.running)))
            self.running.add(n)
            self.started.notify_all()
        try:
            gate = self.gates.get(keys[0])
            if gate is not None and not gate.wait(30):
                raise RuntimeError("the test never let the job end")
            if self.cancel_all:
                raise RuntimeError("job cancelled")
            if set(keys) & self.fail:
                raise RuntimeError("a task failed 4 times")
            # a task commits its progress after each batch: here, all of it at the end of the job
            return [
                {
                    "records": s.end - a,
                    "skipped": 0,
                    "partition": s.partition,
                    "index": s.index,
                    "last_batch_at": 1.0,
                }
                for s, a in work
            ]
        finally:
            with self.started:
                self.running.discard(n)

    def wait_jobs(self, n: int) -> None:
        with self.started:
            assert self.started.wait_for(lambda: len(self.jobs) >= n, timeout=20), self.jobs

    def run(self, p: DrainPlan, **kw: Any) -> dict[str, Any]:
        return drain_job.run(
            p,
            None,
            None,
            [],
            {},
            warm_session=self.spark,
            part_key=kw.pop("key", KEY),
            part_wait_s=kw.pop("wait_s", 0.0),
            **kw,
        )


def in_thread(world: World, p: DrainPlan, **kw: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["summary"] = world.run(p, **kw)
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def test_a_next_parts_sub_ranges_start_while_the_pass_under_way_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(monkeypatch)
    slow = w.gate(A0)  # the slowest task of the first pass
    w.gate(A1).set()
    w.gate(B2)
    t, out = in_thread(w, plan(), wait_s=30.0)
    w.wait_jobs(1)
    # round 1 while the first pass still runs: the operator's part names every unfinished sub-range
    # it saw (A0 runs, A1 may be done) and the new ones
    w.deliver(NextPart("7", 1, False, (A0, A1, B2, B3)))
    w.wait_jobs(2)
    assert w.jobs[1] == [(0, 2), (0, 3)]  # only the new sub-ranges: A0 is held by the running pass
    assert w.concurrent[1] == (1, {0}), w.concurrent  # it really started beside the first pass
    assert not slow.is_set() and 0 in w.running
    w.gate(B2).set()
    slow.set()
    w.deliver(NextPart("7", 1, True, ()))
    t.join(20)
    assert not t.is_alive() and "error" not in out, out
    s = out["summary"]
    assert s["ended"] == "handed_back" and s["passes"] == 2 and s["max_concurrent_passes"] == 2, s
    assert sorted(w.completed) == [(0, 0), (0, 1), (0, 2), (0, 3)]  # each completed once, by its own pass
    assert [k for job in w.jobs for k in job] == [(0, 0), (0, 1), (0, 2), (0, 3)]  # each in one pass only
    assert s["records"] == 300 and "startup" in s


def test_a_sub_range_held_by_a_running_pass_is_never_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts keep coming while A0's pass runs, each naming A0 as unfinished: none starts it again."""
    w = World(monkeypatch)
    slow = w.gate(A0)
    w.gate(A1).set()
    t, out = in_thread(w, plan(A0, A1), wait_s=30.0)
    w.wait_jobs(1)
    w.deliver(NextPart("7", 1, False, (A0, B2)))
    w.wait_jobs(2)
    w.deliver(NextPart("7", 2, False, (A0, B3)))
    w.wait_jobs(3)
    assert w.jobs == [[(0, 0), (0, 1)], [(0, 2)], [(0, 3)]], w.jobs
    slow.set()
    w.deliver(NextPart("7", 3, True, (A0,)))  # the operator has not seen A0 end yet
    t.join(20)
    assert "error" not in out and out["summary"]["ended"] == "handed_back", out
    assert sorted(w.completed) == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_forged_and_stale_parts_start_nothing_while_a_pass_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    w = World(monkeypatch)
    slow = w.gate(A0)
    w.gate(A1).set()
    t, out = in_thread(w, plan(), wait_s=0.0)
    w.wait_jobs(1)
    with caplog.at_level(logging.WARNING, logger="lagpilot.drain"):
        # forged: signed with another key, every offset again under a new index
        w.deliver(NextPart("7", 1, False, (SubRange(0, 9, 0, 400),)), key=bytes(32))

        def refused() -> bool:
            return any(getattr(r, "fields", {}).get("event") == "drain_part_refused" for r in caplog.records)

        for _ in range(2000):
            if refused():
                break
            threading.Event().wait(0.005)
        assert refused(), [r.getMessage() for r in caplog.records]
    # stale: genuinely signed, but the plan's own round (0): not new, not taken
    w.deliver(NextPart("7", 0, False, (SubRange(0, 9, 0, 400),)))
    threading.Event().wait(0.2)
    assert len(w.jobs) == 1, w.jobs
    slow.set()
    t.join(20)  # the pass ends; no part newer than the plan: the wait (0 s here) is over
    assert "error" not in out and out["summary"]["ended"] == "no_next_part", out
    assert out["summary"]["parts"] == 0 and w.jobs == [[(0, 0), (0, 1)]]


def test_a_failed_pass_cancels_the_others_and_fails_the_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(monkeypatch)
    w.gate(A0)  # runs until cancelled
    w.gate(A1).set()
    w.fail.add((0, 2))
    t, out = in_thread(w, plan(A0), wait_s=30.0)
    w.wait_jobs(1)
    w.deliver(NextPart("7", 1, False, (A0, B2)))
    t.join(20)
    assert not t.is_alive()
    assert isinstance(out.get("error"), RuntimeError) and "failed 4 times" in str(out["error"]), out
    assert w.cancelled == [drain_job.job_group(plan())]  # the running pass was cancelled ...
    assert w.completed == [] and w.running == set()  # ... and waited for; no end committed for anyone


def test_a_final_part_during_a_pass_ends_the_attempt_after_that_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(monkeypatch)
    slow = w.gate(A0)
    t, out = in_thread(w, plan(A0), wait_s=30.0)
    w.wait_jobs(1)
    w.deliver(NextPart("7", 0, True, ()))  # the final part of the plan's round
    threading.Event().wait(0.2)
    assert t.is_alive() and w.completed == []  # the pass under way still runs: not ended
    slow.set()
    t.join(20)
    s = out.get("summary") or {}
    assert "error" not in out and s["ended"] == "handed_back" and s["parts"] == 1, out
    assert w.completed == [(0, 0)]


def test_the_part_wait_starts_when_no_pass_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded wait (fake clock) is counted from the end of the last pass, not from its start."""
    w = World(monkeypatch)
    slow = w.gate(A0)
    clock = {"t": 0.0, "waits": []}

    def sleep(s: float) -> None:
        clock["t"] += s

    real_wait = drain_job.wait_for_part

    def wait_for_part(*a: Any, **kw: Any) -> Any:
        clock["waits"].append((clock["t"], sorted(w.running)))
        return real_wait(*a, **kw)

    monkeypatch.setattr(drain_job, "wait_for_part", wait_for_part)
    t, out = in_thread(w, plan(A0), wait_s=300.0, sleep=sleep, clock=lambda: clock["t"])
    w.wait_jobs(1)
    threading.Event().wait(0.2)
    assert clock["waits"] == []  # a pass runs: no wait has begun
    slow.set()
    t.join(20)
    assert "error" not in out and out["summary"]["ended"] == "no_next_part", out
    assert clock["waits"] == [(0.0, [])] and 300.0 <= clock["t"] <= 301.0, clock


def test_a_plan_that_is_not_busy_runs_one_pass_and_reads_no_part(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(monkeypatch)
    w.deliver(NextPart("7", 1, False, (B2,)))  # never read: the plan is not busy
    s = w.run(plan(busy=False))
    assert w.jobs == [[(0, 0), (0, 1)]] and sorted(w.completed) == [(0, 0), (0, 1)] and "parts" not in s
