"""tests/schedule.py: ./dev/test's xdist workers take the longest test files first."""

from __future__ import annotations

import json
from pathlib import Path

from tests.schedule import DURATIONS, NEW_REAL_S, durations_from_junit, load, longest_files_first


def test_files_go_longest_first_and_keep_their_tests_together_in_order() -> None:
    ids = [
        "tests/unit/test_a.py::t1",
        "tests/unit/test_a.py::t2",
        "tests/real/test_b.py::t1",
        "tests/unit/test_c.py::t1",
        "tests/real/test_b.py::t2",
        "tests/unit/test_a.py::t3",
    ]
    recorded = {"tests/unit/test_a.py": 2.0, "tests/real/test_b.py": 300.0, "tests/unit/test_c.py": 9.0}
    order = [ids[i] for i in longest_files_first(ids, recorded)]
    assert order == [
        "tests/real/test_b.py::t1",
        "tests/real/test_b.py::t2",
        "tests/unit/test_c.py::t1",
        "tests/unit/test_a.py::t1",
        "tests/unit/test_a.py::t2",
        "tests/unit/test_a.py::t3",
    ]


def test_an_unrecorded_real_file_counts_as_long_and_an_unrecorded_unit_file_as_short() -> None:
    ids = [
        "tests/unit/test_new.py::t",
        "tests/unit/test_old.py::t",
        "tests/real/test_new.py::t",
        "tests/real/test_old.py::t",
    ]
    known = {"tests/unit/test_old.py": 1.0, "tests/real/test_old.py": NEW_REAL_S - 1}
    order = [ids[i] for i in longest_files_first(ids, known)]
    assert order == [
        "tests/real/test_new.py::t",
        "tests/real/test_old.py::t",
        "tests/unit/test_old.py::t",
        "tests/unit/test_new.py::t",
    ]


def test_equal_durations_keep_the_collected_order() -> None:
    ids = ["tests/unit/test_z.py::t", "tests/unit/test_y.py::t", "tests/unit/test_x.py::t"]
    assert longest_files_first(ids, {}) == [0, 1, 2]


def test_durations_are_summed_per_file_from_a_junit_report(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.real.test_b" name="t1" time="100.5"/>'
        '<testcase classname="tests.real.test_b" name="t2" time="20"><skipped/></testcase>'
        '<testcase classname="tests.unit.test_a.TestK" name="t" time="0.3"/>'
        "</testsuite></testsuites>"
    )
    assert durations_from_junit(str(junit)) == {"tests/real/test_b.py": 120.5, "tests/unit/test_a.py": 0.3}


def test_the_committed_durations_cover_the_real_files_and_load_a_broken_file_as_empty(tmp_path: Path) -> None:
    recorded = load()
    root = DURATIONS.parent.parent
    real = sorted(str(p.relative_to(root)) for p in DURATIONS.parent.glob("real/test_*.py"))
    assert recorded and all(isinstance(v, float) for v in recorded.values())
    # a real file without a recorded duration still runs (counted as NEW_REAL_S); most must be known
    assert sum(f in recorded for f in real) >= 0.9 * len(real), [f for f in real if f not in recorded]
    bad = tmp_path / "d.json"
    bad.write_text("{not json")
    assert load(bad) == {}
    bad.write_text(json.dumps({"tests/unit/test_a.py": 3}))
    assert load(bad) == {"tests/unit/test_a.py": 3.0}


def test_estimated_wall_time_follows_xdists_loadfile_rule() -> None:
    from tests.schedule import estimate_wall

    # one worker: everything in a row
    assert estimate_wall([("a", 10.0, 1), ("b", 5.0, 2)], 1) == (15.0, [["a", "b"]])
    # two workers, longest first: the short files fill the gap beside the long one
    wall, ran = estimate_wall([("long", 100.0, 10), ("m", 40.0, 10), ("s1", 30.0, 10), ("s2", 30.0, 10)], 2)
    assert wall == 100.0 and ran == [["long"], ["m", "s1", "s2"]]
    # xdist hands a worker the next file while it still has <= 2 tests left: a one-test long file
    # holds the next file too, which then waits behind it although the other worker is free sooner
    wall, ran = estimate_wall([("long1", 100.0, 1), ("mid", 20.0, 1), ("x", 50.0, 1), ("y", 10.0, 1)], 2)
    assert ran[0][:2] == ["long1", "x"] and wall == 150.0, (wall, ran)
    # with more tests left than the limit the next file goes to the worker that runs out first
    wall, ran = estimate_wall([("long1", 100.0, 10), ("mid", 20.0, 10), ("x", 50.0, 10)], 2)
    assert ran == [["long1"], ["mid", "x"]] and wall == 100.0, (wall, ran)
    assert estimate_wall([], 3) == (0.0, [[], [], []])


def test_the_suite_estimate_counts_tests_from_a_collection_and_orders_files_longest_first() -> None:
    from tests.schedule import counts_from_collection, estimate_suite

    text = "tests/real/test_b.py::t1\ntests/real/test_b.py::t2[x]\ntests/unit/test_a.py::t\n\n3 tests collected\n"
    counts = counts_from_collection(text)
    assert counts == {"tests/real/test_b.py": 2, "tests/unit/test_a.py": 1}
    # one worker: the sum; an unrecorded real file counts NEW_REAL_S
    assert estimate_suite(counts, {"tests/unit/test_a.py": 5.0}, 1) == NEW_REAL_S + 5.0
    assert estimate_suite(counts, {"tests/real/test_b.py": 50.0, "tests/unit/test_a.py": 5.0}, 2) == 50.0
