"""H5: which sub-ranges a successful Spark job read to their end without a visible record (pure):
no task summary names them, because a task names its sub-range from its first record."""

from __future__ import annotations

from lagpilot_runtime.drain.plan import SubRange
from lagpilot_runtime.drain.progress import unread_sub_ranges

A, B, C = SubRange(0, 0, 0, 300), SubRange(0, 1, 300, 700), SubRange(1, 0, 0, 50)


def test_a_task_without_a_record_leaves_its_sub_range_unnamed():
    work = [(A, 0), (B, 420), (C, 0)]
    results = [
        {"partition": 0, "index": 0, "records": 299},
        {"partition": None, "index": None, "records": 0},
    ]  # a task called with no record
    assert unread_sub_ranges(work, results) == [(B, 420), (C, 0)]


def test_every_task_named_its_sub_range():
    assert (
        unread_sub_ranges([(A, 0), (C, 10)], [{"partition": 1, "index": 0}, {"partition": 0, "index": 0}])
        == []
    )


def test_no_task_summary_at_all():
    assert unread_sub_ranges([(A, 0)], []) == [(A, 0)]
