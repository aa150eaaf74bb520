"""H3/H5: the drain task's sign of life when it starts reading, not only at its first visible record.

A sub-range made only of aborted transactions' records or of offsets compacted away gives its task no
record. Before, the task learnt its sub-range from its first record, so such a task never committed a
sign of life (``a=<attempt>``) and its attempt stayed under the start-up bound
(``LAGPILOT_DRAIN_STARTUP_SECONDS``) instead of the no-progress bound. The driver now names each
Spark task's sub-range in the job's local property ``lagpilot.drain.taskRanges`` (the Kafka offset
range of each task, by partition index, read from the planned job); the task reads it through
``pyspark.TaskContext`` and commits its sign of life before it reads a record.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lagpilot_runtime.drain import task as drain_task
from lagpilot_runtime.drain.plan import SubRange
from lagpilot_runtime.handler import Record
from tests.unit.test_drain_sign_of_life import CALLS, ENV, PROGRESS, FakeProgress

KEY = "lagpilot.drain.taskRanges"
SUBS = (SubRange(0, 0, 100, 400), SubRange(0, 1, 400, 700), SubRange(1, 0, 50, 90))


class FakeTaskContext:
    """pyspark.TaskContext of one task: its partition index and the job's local properties."""

    def __init__(self, partition_id: int, props: dict[str, str]) -> None:
        self._pid, self._props = partition_id, props

    def partitionId(self) -> int:  # noqa: N802
        return self._pid

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        return self._props.get(key)


def run(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeProgress,
    ctx: FakeTaskContext | None,
    records: list[Record],
    attempt: int = 3,
) -> tuple[list[Any], list[str]]:
    import pyspark

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    CALLS.clear()
    PROGRESS[:] = [fake]
    groups: list[str] = []

    def consumer(cfg: Any, group: str) -> FakeProgress:
        groups.append(group)
        return fake

    monkeypatch.setattr(drain_task, "progress_consumer", consumer)
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: ctx))
    spec = drain_task.TaskSpec("orders", "g", "2", 100, SUBS, attempt=attempt)
    return list(drain_task.run_task(spec, iter(records))), groups


# the pass's tasks by partition index: p0#0 from its start, p0#1 resumed at 550, p1#0
RANGES = json.dumps([[0, 100], [0, 550], [1, 50]])


def test_a_task_with_no_visible_record_commits_its_sign_of_life_when_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeProgress()
    summaries, groups = run(monkeypatch, fake, FakeTaskContext(2, {KEY: RANGES}), [])
    assert fake.commits == [(50, "lpd1;n=0;a=3")], "no sign of life from a task that got no record"
    assert groups == ["g.lagpilot-drain.2.0"] and summaries[0]["records"] == 0
    # its summary still names no sub-range: the driver completes it as read without a visible record
    assert "partition" not in summaries[0] and "index" not in summaries[0]


def test_a_resumed_task_named_by_the_driver_signs_at_the_committed_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeProgress(550, "lpd1;n=150;a=2")
    records = [Record("orders", 0, o, None, b"x") for o in range(550, 700)]
    summaries, groups = run(monkeypatch, fake, FakeTaskContext(1, {KEY: RANGES}), records)
    assert fake.commits[0] == (550, "lpd1;n=150;a=3")  # before any batch
    assert CALLS[0] == (550, [(550, "lpd1;n=150;a=3")])
    assert [o for o, _ in fake.commits[1:]] == [650, 700] and summaries[0]["records"] == 150
    assert groups == ["g.lagpilot-drain.2.1"]  # one progress group: named once, not again at the first record


def test_a_record_outside_the_named_sub_range_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeProgress()
    with pytest.raises(RuntimeError, match="outside the task's sub-range"):
        run(monkeypatch, fake, FakeTaskContext(0, {KEY: RANGES}), [Record("orders", 1, 60, None, b"x")])
    assert fake.commits == [(100, "lpd1;n=0;a=3")]  # its sign of life only: nothing of the stray record


@pytest.mark.parametrize(
    "ctx",
    [
        None,
        FakeTaskContext(0, {}),
        FakeTaskContext(7, {KEY: RANGES}),
        FakeTaskContext(0, {KEY: "not json"}),
        FakeTaskContext(0, {KEY: "[[5, 1]]"}),
    ],
    ids=["no-task-context", "no-property", "index-past-the-list", "garbage", "in-no-sub-range"],
)
def test_without_a_usable_name_the_first_record_names_the_sub_range_as_before(
    monkeypatch: pytest.MonkeyPatch, ctx: FakeTaskContext | None
) -> None:
    fake = FakeProgress()
    records = [Record("orders", 0, o, None, b"x") for o in range(100, 400)]
    summaries, _ = run(monkeypatch, fake, ctx, records)
    assert fake.commits[0] == (100, "lpd1;n=0;a=3") and summaries[0]["records"] == 300
    fake = FakeProgress()
    run(monkeypatch, fake, ctx, [])
    assert fake.commits == []  # no record, no name: no sign of life (the start-up bound covers it)


# ---- the driver: each task's range read from the planned job ----------------------------------------


class _J:
    """A JVM object through py4j: its class name and accessor methods."""

    def __init__(self, cls: str, **methods: Any) -> None:
        self._cls, self._m = cls, methods

    def getClass(self) -> Any:  # noqa: N802
        return type("C", (), {"getName": lambda _s: self._cls})()

    def __getattr__(self, name: str) -> Any:
        try:
            return lambda: self.__dict__["_m"][name]
        except KeyError:
            raise AttributeError(name) from None


def _kafka(index: int, partition: int, start: int, end: int) -> _J:
    tp = _J("org.apache.kafka.common.TopicPartition", partition=partition)
    rng = _J(
        "org.apache.spark.sql.kafka010.KafkaSourceRDDOffsetRange",
        topicPartition=tp,
        fromOffset=start,
        untilOffset=end,
    )
    return _J("org.apache.spark.sql.kafka010.KafkaSourceRDDPartition", index=index, offsetRange=rng)


def test_task_ranges_unwraps_the_union_to_the_kafka_ranges() -> None:
    from lagpilot_runtime.drain.spark import task_ranges

    # as printed on Spark 4.2 for 3 relations x 3 partitions: UnionPartition -> KafkaSourceRDDPartition
    kafka = [
        _kafka(i % 3, i % 3, 20 * (i // 3) + (5 if i // 3 == 1 else 0), 20 * (i // 3) + 20) for i in range(9)
    ]
    parts = [
        _J("org.apache.spark.rdd.UnionPartition", index=i, parentPartition=k) for i, k in enumerate(kafka)
    ]
    assert task_ranges(parts) == [
        [0, 0],
        [1, 0],
        [2, 0],
        [0, 25],
        [1, 25],
        [2, 25],
        [0, 40],
        [1, 40],
        [2, 40],
    ]
    assert task_ranges([_kafka(0, 4, 7, 9)]) == [[4, 7]]  # one relation: no union


def test_name_tasks_sets_the_property_or_clears_it_when_the_plan_is_of_another_shape() -> None:
    from lagpilot_runtime.drain.spark import name_tasks

    props: dict[str, Any] = {}
    spark = type(
        "S",
        (),
        {"sparkContext": type("SC", (), {"setLocalProperty": lambda _s, k, v: props.__setitem__(k, v)})()},
    )()
    assert name_tasks(spark, lambda: [_kafka(0, 1, 50, 90)], "2") is True
    assert json.loads(props[KEY]) == [[1, 50]]
    other = _J("org.apache.spark.rdd.CoalescedRDDPartition", index=0)
    assert name_tasks(spark, lambda: [other], "2") is False and props[KEY] is None
