"""A deleted CR's remainder and an exactly-once sink's own progress (the chaos campaign, 2026-11-26,
``bench/chaos.py --rounds 1 --kinds drain_driver_kill,cr_delete_mid_drain``: ``duplicated`` 500,
p1 ``[4652, 5152)`` twice). A cancelled drain attempt wrote batches to the exactly-once postgres
sink (rows and progress in one transaction, under the drain's sub-range scope) whose progress never
reached the Kafka progress group; the finalizer handed back ``[progress group, end)``, and the
re-created CR's adopted drain (a new drain id: a new sink scope) wrote those records again.

The whole protocol, without Kafka or Spark: the old drain's task (its progress commit killed right
after the sink's commit, the fault that leaves the sink ahead of the group), the finalizer's
remainder from the progress the operator read, its encoding into the remainder group and back, the
adoption by the new CR, the new drain's driver (``catch_up_to_sink``) and task, against one sink.
Invariant: every offset of the old sub-range is in the sink exactly once.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from lagpilot.act.drain_manifests import drain_plan_for
from lagpilot.decide import deletion
from lagpilot.decide.handoff import DrainStatus, Phase, SubProgress
from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import progress as drain_progress
from lagpilot_runtime.drain import task as drain_task
from lagpilot_runtime.drain.plan import SubRange
from lagpilot_runtime.handler import Record

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "tests.unit.test_remainder_sink_progress:sink",
}

ROWS: list[int] = []  # the sink's data table (no key: a duplicate is a second row)
SINK_PROGRESS: dict[tuple[str, int], int] = {}  # (scope, partition) -> next offset (only grows)


def sink(records: list[Record], ctx: Any) -> None:
    """An exactly-once sink like the built-in postgres one: rows and progress in one 'transaction'."""
    ROWS.extend(r.offset for r in records)
    for (_t, p), o in (ctx.offsets or {}).items():
        key = (ctx.progress_scope, p)
        SINK_PROGRESS[key] = max(SINK_PROGRESS.get(key, o), o)


def _sink_progress(topic: str, partitions: list[int], ctx: Any) -> dict[int, int]:
    scope = ctx.progress_scope
    return {p: SINK_PROGRESS[(scope, p)] for p in partitions if (scope, p) in SINK_PROGRESS}


sink.commits_progress = True  # type: ignore[attr-defined]
sink.progress = _sink_progress  # type: ignore[attr-defined]


class Killed(BaseException):
    """The attempt's task killed (executor SIGKILL, the Spark job cancelled): nothing catches it."""


class FakeProgress:
    """One progress group (committed offset + metadata), as Kafka keeps it; ``kill_at``: the commit of
    that offset never happens, the task dies instead (after the sink's commit of the same batch)."""

    def __init__(self, kill_at: int | None = None) -> None:
        self.offset, self.metadata, self.kill_at, self.killed = -1001, None, kill_at, False

    def committed(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        return [SimpleNamespace(offset=self.offset, metadata=self.metadata)]

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> list[Any]:
        if self.kill_at is not None and offsets[0].offset >= self.kill_at:
            self.killed = True
            raise Killed()
        self.offset, self.metadata = offsets[0].offset, offsets[0].metadata
        return offsets

    def close(self) -> None:
        pass


def records(a: int, b: int) -> list[Record]:
    return [Record("orders", 1, o, None, b"x") for o in range(a, b)]


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeProgress]:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    ROWS.clear()
    SINK_PROGRESS.clear()
    by_name: dict[str, FakeProgress] = {}

    def consumer(cfg: Any, group: str) -> FakeProgress:
        return by_name.setdefault(group, FakeProgress())

    monkeypatch.setattr(drain_task, "progress_consumer", consumer)
    monkeypatch.setattr(drain_progress, "progress_consumer", consumer)
    return by_name


def test_an_adopted_remainder_does_not_rewrite_what_the_sink_already_holds(
    groups: dict[str, FakeProgress],
) -> None:
    from lagpilot_runtime.drain.plan import owner_tag, progress_group

    old_uid, new_uid = "uid-of-the-deleted-cr", "uid-of-the-re-created-cr"
    old_sub = SubRange(1, 1, 4052, 9064)
    old = drain_task.TaskSpec("orders", "g", "2", 100, (old_sub,), owner_tag(old_uid))
    old_group = progress_group("g", "2", 1, owner_tag(old_uid))
    groups[old_group] = FakeProgress(kill_at=4752)
    # drain 2's attempt: six batches done (sink and progress group), the seventh's sink commit done,
    # its progress commit killed
    with pytest.raises(Killed):
        list(drain_task.run_task(old, iter(records(4052, 9064))))
    # the fault fired: the sink holds [4052, 4752), its progress is ahead of the progress group
    assert groups[old_group].killed and groups[old_group].offset == 4652
    assert sorted(ROWS) == list(range(4052, 4752))
    # under the range's identity (group, partition, end), which the adopted remainder shares
    assert SINK_PROGRESS == {("drain:g:1:9064", 1): 4752}

    # the CR deleted: the operator's status holds the progress it read (the group's 4652); the
    # finalizer hands [next, end) back through the remainder group
    d = DrainStatus(
        id=2, phase=Phase.FAILED, sub_ranges=(SubProgress(1, 1, 4052, 9064, groups[old_group].offset, 600),)
    )
    rem = deletion.remainder_of(d)
    encoded = deletion.encode_remainder(rem)
    assert encoded == {1: (4652, "lpr1;d=2;r=4652-9064")}  # the range keeps its end: nothing else travels
    rem = deletion.decode_remainder({p: (o, meta) for p, (o, meta) in encoded.items()})
    assert rem is not None and rem.ranges == ((1, 4652, 9064),)
    # the re-created CR (same groupId, a new uid) adopts it as its next drain and launches it
    kind, new = deletion.adoption(rem, None, 1, 0.0)
    assert kind is deletion.AdoptKind.ADOPT and new is not None
    spec = SimpleNamespace(
        topic="orders",
        group_id="g",
        batch=SimpleNamespace(max_records=100),
        drain=SimpleNamespace(max_tasks=4),
    )
    plan = drain_plan_for(spec, new, new_uid)  # type: ignore[arg-type]
    cfg = ConsumerConfig.from_env()
    work = drain_progress.catch_up_to_sink(cfg, plan, [(s, s.start) for s in plan.sub_ranges])
    for s, start in work:
        spec_t = drain_task.TaskSpec(
            plan.topic, plan.group_id, plan.drain_id, plan.batch_max_records, plan.sub_ranges, plan.owner
        )
        list(drain_task.run_task(spec_t, iter(records(start, s.end))))

    twice = sorted(o for o, n in Counter(ROWS).items() if n > 1)
    assert not twice, (
        f"{len(twice)} records written to the exactly-once sink twice: "
        f"p1 [{twice[0]}, {twice[-1] + 1}) (the adopted drain {new.id} started at "
        f"{[start for _, start in work]})"
    )
    assert sorted(ROWS) == list(range(4052, 9064))
