"""A drain task's progress when its records stop before the sub-range's end (the full chaos campaign,
2026-11-26, cr_delete_mid_drain under a warm runtime: the cancelled attempt's tasks committed each
sub-range's END as progress, the retry skipped the rest as done, the finalizer released the drain
as finished at 16,000 of 23,028 records: 7,028 records never processed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lagpilot_runtime.drain import task as drain_task
from lagpilot_runtime.drain.plan import SubRange, parse_progress_metadata
from lagpilot_runtime.handler import Record

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "tests.unit.test_drain_task_end:collect",
}
SEEN: list[int] = []


def collect(records: list[Record], ctx: Any) -> None:
    SEEN.extend(r.offset for r in records)


class FakeProgress:
    """The sub-range's progress group (committed offset + metadata), as Kafka would keep it."""

    def __init__(self) -> None:
        self.offset, self.metadata, self.commits = -1001, None, []

    def committed(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        return [SimpleNamespace(offset=self.offset, metadata=self.metadata)]

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> list[Any]:
        self.offset, self.metadata = offsets[0].offset, offsets[0].metadata
        self.commits.append(offsets[0].offset)
        return offsets

    def close(self) -> None:
        pass


@pytest.fixture
def progress(monkeypatch: pytest.MonkeyPatch) -> FakeProgress:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    SEEN.clear()
    fake = FakeProgress()
    monkeypatch.setattr(drain_task, "progress_consumer", lambda cfg, group: fake)
    return fake


SUB = SubRange(0, 0, 100, 1100)
SPEC = drain_task.TaskSpec("orders", "g", "2", 100, (SUB,))


def records(a: int, b: int) -> list[Record]:
    return [Record("orders", 0, o, None, b"x") for o in range(a, b)]


def test_records_that_stop_short_of_the_end_do_not_complete_the_sub_range(progress: FakeProgress) -> None:
    # the attempt is cancelled (its caller gone, the CR deleted): Spark's reader hands the task 400 of
    # the sub-range's 1,000 records and the iterator ends without an error
    summaries = list(drain_task.run_task(SPEC, iter(records(100, 500))))
    assert SEEN == list(range(100, 500)) and summaries[0]["records"] == 400
    # the progress says what was processed: the rest is the retry's (or the hand-back's) to do
    assert progress.offset == 500, (
        f"progress committed at {progress.offset} (the sub-range's end is {SUB.end})"
    )
    assert parse_progress_metadata(progress.metadata) == 400


def test_a_sub_range_read_to_its_last_record_is_complete(progress: FakeProgress) -> None:
    list(drain_task.run_task(SPEC, iter(records(100, 1100))))
    assert progress.offset == 1100 and parse_progress_metadata(progress.metadata) == 1000
