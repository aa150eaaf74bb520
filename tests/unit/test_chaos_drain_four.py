"""bench/chaos/review.py's drain 4 (--warm-runtime: forged_plan, then runtime_sigstop) without a stack.

The drain's statuses are scripted (what `drain_polls` yields) and the bench's I/O edges replaced: the
pods, the forgery, the SIGSTOP and SIGCONT of the runtime, the Job's process end (`dead`), the health
wait. drain_four's own loop and verdicts run as they are: which kind fires when, the Job's end seen
while the runtime is stopped, the runtime resumed, and whether each kind recovered."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import bench.chaos.review as review_mod
from bench.chaos.faults import Fault
from bench.chaos.review import ReviewFaults

TREE = [4242, 4243]  # the runtime's processes (stop_runtime's answer)


def running(attempt: int, done: int) -> dict[str, Any]:
    return {
        "id": 7,
        "attempt": attempt,
        "phase": "Running",
        "runtime": "rt-a",
        "recordsDone": done,
        "recordsTotal": 1000,
    }


class Four(ReviewFaults):
    """ReviewFaults with drain 4's I/O edges replaced; `polls` the statuses drain_polls yields."""

    def __init__(self, polls: list[dict[str, Any]], job_ends_after: int = 1) -> None:
        self.polls, self.kinds, self.timeout = polls, frozenset({"forged_plan", "runtime_sigstop"}), 300.0
        self.resumed: list[list[int]] = []
        self.recorded: list[Fault] = []
        self.checks: list[Any] = []
        self.job_ends_after = job_ends_after  # polls after the stop before the Job's process is gone
        self.stopped_at_poll: int | None = None
        self.poll = 0

    def drain_polls(self, before: str, *a: Any, **kw: Any) -> Iterator[tuple[dict[str, Any], bool]]:
        for i, d in enumerate(self.polls):
            self.poll = i
            yield d, True

    def drain_pod(self) -> tuple[str, int, str]:
        return ("eos-drain-7", 999, "warm")

    def runtime_pod(self) -> tuple[str, int | None, bool]:
        return ("eos-runtime", TREE[0], True)

    def forge(self, f: Fault, d: dict[str, Any]) -> None:
        f.fired, f.at = True, time.time() - 10  # the stop waits 3 s after the forgery
        f.evidence = {"replay_body": "signed plan", "drain": d["id"]}

    def stop_runtime(self, f: Fault, d: dict[str, Any], job: Any, rt: Any) -> list[int]:
        f.evidence = {"job_pid": job[1], "job_pod_at_stop": job[0], "attempt_at_stop": d["attempt"]}
        f.fired, f.at = True, time.time()
        self.stopped_at_poll = self.poll
        return list(TREE)

    def resume(self, tree: list[int]) -> None:
        self.resumed.append(list(tree))

    def pod_log_tail(self, pod: str, n: int = 3) -> list[str]:
        return [f"{pod}: heartbeat lost"]

    def forged_ok(self, f: Fault, drain_id: Any) -> str | None:
        return None

    def recover_wait(
        self, since: float, what: str, timeout: float, base: Any = None, extra: Any = None
    ) -> float:
        self.checks.append((what, None if extra is None else extra()))
        return 12.5

    def record(self, f: Fault) -> Fault:
        self.recorded.append(f)
        return f


@pytest.fixture
def four(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Four]]:
    holder: dict[str, Four] = {}

    def dead(pid: int) -> bool:
        c = holder["c"]
        return c.stopped_at_poll is not None and c.poll - c.stopped_at_poll >= c.job_ends_after

    monkeypatch.setattr(review_mod, "dead", dead)
    monkeypatch.setattr(review_mod, "proc_state", lambda pid: "T")  # the runtime is still stopped

    class Bound(Four):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            holder["c"] = self

    yield Bound


def test_both_kinds_fire_in_order_and_a_retry_verifies_the_drain(four: type[Four]) -> None:
    c = four([running(1, 100), running(1, 200), running(1, 300), {**running(2, 1000), "phase": "Verified"}])
    fp, ss = c.drain_four(1)
    assert (fp.kind, ss.kind) == ("forged_plan", "runtime_sigstop")
    assert fp.fired and fp.recovered and fp.recover_s == 12.5 and not fp.detail
    assert "replay_body" not in fp.evidence  # a signed plan is not written to the result
    assert c.stopped_at_poll == 1  # the forgery at the first poll, the stop at the next
    assert ss.fired and ss.recovered and ss.recover_s == 12.5 and not ss.detail
    assert ss.evidence["job_ended_s"] is not None and ss.evidence["runtime_still_stopped"] is True
    assert ss.evidence["job_log_tail"] == ["eos-drain-7: heartbeat lost"]
    assert c.resumed and c.resumed[0] == TREE  # SIGCONT once the Job's process ended
    for f in (fp, ss):
        assert f.evidence["attempts"] == {"1": "rt-a", "2": "rt-a"} and f.evidence["verified_attempt"] == 2
        assert f.evidence["final_phase"] == "Verified"
    assert c.checks == [
        ("forged_plan", None),
        ("runtime_sigstop", None),
    ]  # forged_ok's check, none for the stop
    assert c.recorded == [fp, ss]


def test_a_drain_verified_by_the_stopped_attempt_is_not_a_recovery_of_the_stop(four: type[Four]) -> None:
    c = four([running(1, 100), running(1, 200), running(1, 300), {**running(1, 1000), "phase": "Verified"}])
    fp, ss = c.drain_four(1)
    assert fp.recovered
    assert ss.fired and not ss.recovered
    assert ss.detail.startswith("the attempt did not fail by its heartbeat while the runtime was stopped")


def test_a_failed_drain_recovers_neither_kind(four: type[Four]) -> None:
    c = four(
        [
            running(1, 100),
            running(1, 200),
            running(1, 300),
            {**running(1, 300), "phase": "Failed", "message": "boom"},
        ]
    )
    fp, ss = c.drain_four(1)
    for f in (fp, ss):
        assert f.fired and not f.recovered and f.detail == "drain ended Failed: boom"
    assert c.checks == []


def test_a_job_that_outlives_the_timeout_has_no_end_and_the_runtime_is_resumed(
    four: type[Four], monkeypatch: pytest.MonkeyPatch
) -> None:
    c = four(
        [running(1, 100), running(1, 200), running(1, 300), {**running(2, 1000), "phase": "Verified"}],
        job_ends_after=99,
    )
    c.timeout = -1.0  # every poll after the stop is past the timeout
    _fp, ss = c.drain_four(1)
    assert ss.evidence["job_ended_s"] is None and "runtime_still_stopped" not in ss.evidence
    assert c.resumed[0] == TREE
    assert not ss.recovered and ss.detail.startswith("the attempt did not fail by its heartbeat")
