"""H3: a drain attempt's sign of life (docs/drain.md "Deadlines, stalls and retries").

Each drain task, on its first record and before its handler's first call, commits its sub-range's
progress group again with the attempt's number (``a=<attempt>`` in the commit metadata): the offset
already there (nothing committed: the sub-range's start), so nothing is committed before its batch
is processed. The operator's first sighting of it starts the no-progress window; the time before it
is start-up (``drain_watch.stall``). Tables for the wire format, the plan, the task and the
operator's read of it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lagpilot_runtime.drain import task as drain_task
from lagpilot_runtime.drain.plan import (
    DrainPlan,
    SubRange,
    parse_progress_attempt,
    parse_progress_lost,
    parse_progress_metadata,
    progress_metadata,
)
from lagpilot_runtime.handler import Record

# (id, records, lost, attempt, metadata)
METADATA = [
    ("no-attempt-as-before", 5, (), 0, "lpd1;n=5"),
    ("attempt", 5, (), 3, "lpd1;n=5;a=3"),
    ("attempt-with-losses", 0, ((10, 20),), 1, "lpd1;n=0;lost=10-20;a=1"),
]


@pytest.mark.parametrize("records,lost,attempt,text", [c[1:] for c in METADATA], ids=[c[0] for c in METADATA])
def test_progress_metadata_carries_the_attempt(records: int, lost: Any, attempt: int, text: str) -> None:
    assert progress_metadata(records, lost, attempt) == text
    assert parse_progress_metadata(text) == records and parse_progress_lost(text) == lost
    assert parse_progress_attempt(text) == attempt


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "lpd1;n=5",
        "lpd1;n=5;a=",
        "lpd1;n=5;a=x",
        "lpd1;n=5;a=-1",
        "lph2;a=3",
        "a=3",
        b"lpd1;n=1;a=2",
    ],
)
def test_an_absent_or_foreign_attempt_reads_as_none(text: Any) -> None:
    assert parse_progress_attempt(text) == (2 if text == b"lpd1;n=1;a=2" else 0)


def _plan(**kw: Any) -> DrainPlan:
    return DrainPlan("7", "orders", "g", (SubRange(0, 0, 0, 100),), **kw)


def test_the_plan_carries_the_attempt() -> None:
    assert DrainPlan.from_json(_plan(attempt=4).to_json()).attempt == 4
    assert '"attempt"' not in _plan().to_json()  # a plan without an operator: as before
    assert DrainPlan.from_json(_plan().to_json()).attempt == 0
    with pytest.raises(ValueError, match="attempt"):
        _plan(attempt=-1).validate()


def test_the_operators_plan_is_the_launched_attempts() -> None:
    import dataclasses

    from lagpilot.act.drain_manifests import drain_plan_for
    from tests.unit.test_handoff import RUNNING, spec

    assert drain_plan_for(spec(), RUNNING, "uid").attempt == RUNNING.attempt == 1
    assert drain_plan_for(spec(), dataclasses.replace(RUNNING, attempt=3), "uid").attempt == 3
    assert drain_plan_for(spec(), RUNNING, "uid", 2).attempt == 2


# ---- the task ------------------------------------------------------------------------------------

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "tests.unit.test_drain_sign_of_life:handler",
}
CALLS: list[tuple[int, Any]] = []  # (first offset of the batch, the progress group's commits before the call)
PROGRESS: list[Any] = []


def handler(records: list[Record], ctx: Any) -> None:
    CALLS.append((records[0].offset, list(PROGRESS[0].commits)))


class FakeProgress:
    """The sub-range's progress group (committed offset + metadata), as Kafka would keep it."""

    def __init__(self, offset: int = -1001, metadata: str | None = None, fail: bool = False) -> None:
        self.offset, self.metadata, self.fail = offset, metadata, fail
        self.commits: list[tuple[int, str]] = []

    def committed(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        return [SimpleNamespace(offset=self.offset, metadata=self.metadata)]

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> list[Any]:
        if self.fail:
            self.fail = False
            raise RuntimeError("KafkaError{code=COORDINATOR_NOT_AVAILABLE}")
        self.offset, self.metadata = offsets[0].offset, offsets[0].metadata
        self.commits.append((offsets[0].offset, offsets[0].metadata))
        return offsets

    def close(self) -> None:
        pass


SUB = SubRange(0, 0, 100, 400)


def run(monkeypatch: pytest.MonkeyPatch, fake: FakeProgress, attempt: int, first: int = 100) -> list[Any]:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    CALLS.clear()
    PROGRESS[:] = [fake]
    monkeypatch.setattr(drain_task, "progress_consumer", lambda cfg, group: fake)
    spec = drain_task.TaskSpec("orders", "g", "2", 100, (SUB,), attempt=attempt)
    return list(
        drain_task.run_task(spec, iter(Record("orders", 0, o, None, b"x") for o in range(first, 400)))
    )


# (id, committed offset, committed metadata, attempt, the sign of life expected (None: none))
SIGNS = [
    ("nothing-committed-the-start-nothing-done", -1001, None, 2, (100, "lpd1;n=0;a=2")),
    (
        "resumed-the-committed-offset-as-is",
        250,
        "lpd1;n=150;lost=100-120",
        2,
        (250, "lpd1;n=150;lost=100-120;a=2"),
    ),
    ("an-earlier-attempts-sign-replaced", 250, "lpd1;n=150;a=1", 2, (250, "lpd1;n=150;a=2")),
    ("already-written-by-this-attempt-spark-retried-the-task", 250, "lpd1;n=150;a=2", 2, None),
    ("no-attempt-no-operator-nothing-written", 250, "lpd1;n=150", 0, None),
]


@pytest.mark.parametrize("offset,meta,attempt,sign", [c[1:] for c in SIGNS], ids=[c[0] for c in SIGNS])
def test_the_sign_of_life_comes_before_the_first_batch_and_moves_nothing(
    monkeypatch: pytest.MonkeyPatch, offset: int, meta: str | None, attempt: int, sign: Any
) -> None:
    fake = FakeProgress(offset, meta)
    summaries = run(monkeypatch, fake, attempt, first=max(offset, 100))
    first_batch, before = CALLS[0]
    assert before == ([sign] if sign else []), (
        before
    )  # before the handler saw a record, at most the sign of life
    done = max(offset, 100)
    assert first_batch == done and summaries[0]["records"] == 400 - done
    # every later commit is a processed batch's, and carries the attempt too
    batches = fake.commits[1:] if sign else fake.commits
    assert [o for o, _ in batches] == [*range(done + 100, 400, 100), 400]
    assert all(parse_progress_attempt(m) == attempt for _, m in batches)


def test_a_failed_sign_of_life_does_not_fail_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeProgress(fail=True)
    summaries = run(monkeypatch, fake, attempt=1)
    assert summaries[0]["records"] == 300 and fake.offset == 400
    assert CALLS[0] == (100, [])  # not written: the operator keeps the attempt under the start-up bound


# ---- the operator's read --------------------------------------------------------------------------


class Tp(SimpleNamespace):
    pass


class Admin:
    """list_consumer_group_offsets of the progress groups: index -> [(partition, offset, metadata)]."""

    def __init__(self, groups: dict[int, list[tuple[int, int, str]]]) -> None:
        self.groups = groups

    def list_consumer_group_offsets(self, reqs: list[Any], request_timeout: float = 0) -> dict[str, Any]:
        g = reqs[0].group_id
        index = int(g.rsplit(".", 1)[1])
        tps = [Tp(partition=p, offset=o, metadata=m) for p, o, m in self.groups.get(index, [])]
        return {g: SimpleNamespace(result=lambda timeout=0: SimpleNamespace(topic_partitions=tps))}


def test_the_operator_reads_which_attempt_last_wrote_each_sub_range() -> None:
    from lagpilot.act.drain_calls import DrainCalls
    from tests.unit.test_handoff import RUNNING

    calls = DrainCalls.__new__(DrainCalls)
    calls.timeout_s = 1.0
    admin = Admin({0: [(0, 200, "lpd1;n=0;a=2")], 1: [(0, 700, "lpd1;n=100")]})
    attempts: dict[tuple[int, int], int] = {}
    got = calls.progress(
        admin, SimpleNamespace(group_id="g", topic="t"), RUNNING, owner="u", attempts_out=attempts
    )
    assert got == {(0, 0): (200, 0), (0, 1): (700, 100)}
    assert attempts == {(0, 0): 2}  # a commit without a= is nobody's sign of life
