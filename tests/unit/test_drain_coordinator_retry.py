"""A drain's reads and commits of its progress groups go through a group coordinator, which moves
(CI, 2026-11-26: ``tests/real/test_drain_k8s.py::test_drain_on_k8s_in_a_namespace_enforcing_restricted``
failed with ``drain failed: KafkaError{code=NOT_COORDINATOR,val=16,str="Failed to get committed
offsets: Broker: Not coordinator"}``). librdkafka raises the coordinator's transient errors from
``committed()``/``commit()`` with ``retriable()`` False; a Kafka client retries them (the Java
client's ``RetriableCommitFailedException`` family). The drain must retry them within its timeout,
not fail the whole drain; any other error still fails at once."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import progress as drain_progress
from lagpilot_runtime.drain.plan import DrainPlan, SubRange

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_SINK": "log",
}


class Moving:
    """A progress group whose coordinator answers ``errors`` (KafkaError codes) before it answers."""

    def __init__(self, errors: list[int], offset: int = 150) -> None:
        self.errors, self.offset, self.calls, self.commits = list(errors), offset, 0, []

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))

    def committed(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        self._maybe_fail()
        return [SimpleNamespace(partition=tp.partition, offset=self.offset, metadata=None) for tp in tps]

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> list[Any]:
        self._maybe_fail()
        self.commits.append(offsets[0].offset)
        return offsets

    def close(self) -> None:
        pass


def _plan() -> DrainPlan:
    return DrainPlan(
        drain_id="1",
        topic="orders",
        group_id="g",
        sub_ranges=(SubRange(partition=0, start=100, end=200, index=0),),
    )


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda s: None)


def test_read_progress_retries_a_moving_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    group = Moving([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    monkeypatch.setattr(drain_progress, "progress_consumer", lambda cfg, g: group)
    got = drain_progress.read_progress(ConsumerConfig.from_env(ENV), _plan())
    assert group.calls == 3  # the fault fired twice, then the read answered
    assert got == {(0, 0): (150, 0)}


def test_commit_progress_retries_a_moving_coordinator() -> None:
    from confluent_kafka import TopicPartition

    group = Moving([KafkaError.COORDINATOR_NOT_AVAILABLE])
    drain_progress.commit_progress(group, TopicPartition("orders", 0, 160))
    assert group.calls == 2 and group.commits == [160]


def test_another_error_still_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    group = Moving([KafkaError.GROUP_AUTHORIZATION_FAILED])
    monkeypatch.setattr(drain_progress, "progress_consumer", lambda cfg, g: group)
    with pytest.raises(KafkaException):
        drain_progress.read_progress(ConsumerConfig.from_env(ENV), _plan())
    assert group.calls == 1


def test_a_coordinator_that_never_comes_back_fails_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    group = Moving([KafkaError.NOT_COORDINATOR] * 10_000)
    monkeypatch.setattr(drain_progress, "progress_consumer", lambda cfg, g: group)
    with pytest.raises(KafkaException):
        drain_progress.read_progress(ConsumerConfig.from_env(ENV), _plan(), timeout_s=30.0)
    assert 1 < group.calls < 10_000 and clock[0] <= 30.0 + 2.0


# ---- the drain task's progress commit after a batch: one retry layer, one deadline ----------------

TASK_ENV = {
    **{k: v for k, v in ENV.items() if k != "LAGPILOT_SINK"},
    "LAGPILOT_HANDLER": "tests.unit.test_drain_coordinator_retry:collect",
}
TASK_SEEN: list[int] = []


def collect(records: list[Any], ctx: Any) -> None:
    TASK_SEEN.extend(r.offset for r in records)


class MovingAtBatch(Moving):
    """A progress group that answers its first read, then ``errors`` on the batches' commits."""

    def __init__(self, errors: list[int]) -> None:
        super().__init__(errors, offset=-1001)

    def committed(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        self.calls += 1
        return [SimpleNamespace(partition=tp.partition, offset=self.offset, metadata=None) for tp in tps]


def _run_task(monkeypatch: pytest.MonkeyPatch, group: Moving) -> list[Any]:
    from lagpilot_runtime.drain import task as drain_task
    from lagpilot_runtime.handler import Record

    monkeypatch.delenv("LAGPILOT_SINK", raising=False)
    for k, v in TASK_ENV.items():
        monkeypatch.setenv(k, v)
    TASK_SEEN.clear()
    monkeypatch.setattr(drain_task, "progress_consumer", lambda cfg, g: group)
    spec = drain_task.TaskSpec("orders", "g", "1", 100, (SubRange(partition=0, start=100, end=200, index=0),))
    records = [Record("orders", 0, o, None, b"x") for o in range(100, 200)]
    return list(drain_task.run_task(spec, iter(records)))


def test_the_tasks_progress_commit_retries_a_moving_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    group = MovingAtBatch([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    summaries = _run_task(monkeypatch, group)
    assert group.errors == []  # both faults fired
    assert TASK_SEEN == list(range(100, 200)) and summaries[0]["records"] == 100
    assert group.commits == [200]


def test_the_tasks_progress_commit_fails_at_once_on_another_error(monkeypatch: pytest.MonkeyPatch) -> None:
    group = MovingAtBatch([KafkaError.GROUP_AUTHORIZATION_FAILED] * 10)
    with pytest.raises(RuntimeError, match=r"progress commit failed: .*GROUP_AUTHORIZATION_FAILED"):
        _run_task(monkeypatch, group)
    assert group.calls == 2  # the read, then one commit: not retried
    assert group.commits == []


def test_the_tasks_progress_commit_gives_up_within_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    group = MovingAtBatch([KafkaError.NOT_COORDINATOR] * 10_000)
    with pytest.raises(RuntimeError, match=r"progress commit failed: .*NOT_COORDINATOR"):
        _run_task(monkeypatch, group)
    assert group.calls > 2  # retried ...
    # ... within the one deadline, not a layer of retries around another
    assert clock[0] <= drain_progress.PROGRESS_CALL_TIMEOUT_S + 2.0, clock[0]


class AnswersPerPartition:
    """A commit the broker answers per partition: ``errors`` (KafkaError codes) on the partition's
    result before it takes the offset."""

    def __init__(self, errors: list[int]) -> None:
        self.errors, self.calls, self.commits = list(errors), 0, []

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> list[Any]:
        self.calls += 1
        if self.errors:
            return [SimpleNamespace(partition=offsets[0].partition, error=KafkaError(self.errors.pop(0)))]
        self.commits.append(offsets[0].offset)
        return [SimpleNamespace(partition=offsets[0].partition, error=None)]


def test_a_per_partition_coordinator_answer_is_retried_like_a_raised_one() -> None:
    from confluent_kafka import TopicPartition

    group = AnswersPerPartition([KafkaError.NOT_COORDINATOR])
    drain_progress.commit_progress(group, TopicPartition("orders", 0, 160))
    assert group.calls == 2 and group.commits == [160]


def test_another_per_partition_error_fails_at_once_naming_what_failed() -> None:
    from confluent_kafka import TopicPartition

    group = AnswersPerPartition([KafkaError.OFFSET_METADATA_TOO_LARGE] * 3)
    failed = "recording the retention loss failed"
    with pytest.raises(RuntimeError, match=rf"^{failed}: .*OFFSET_METADATA_TOO_LARGE"):
        drain_progress.commit_progress(group, TopicPartition("orders", 0, 160), failed)
    assert group.calls == 1 and group.commits == []
