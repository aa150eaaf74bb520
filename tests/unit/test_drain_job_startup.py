"""The drain job's start-up parts, pure: relation layout (one relation per sub-range index, one task
per sub-range), the task's sub-range lookup, Spark/JVM settings, the CDS archive choice, the
start-up breakdown; and the bench's pure helpers (commit gaps, percentile, CPU buckets)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot_runtime.drain.job import startup_breakdown
from lagpilot_runtime.drain.plan import DrainPlan, SubRange, split_ranges
from lagpilot_runtime.drain.progress import remaining_work
from lagpilot_runtime.drain.spark import (
    CDS_ARCHIVE_NAME,
    DEFAULT_DRIVER_JAVA_OPTIONS,
    _switch,
    cds_archive,
    driver_java_options,
    relation_options,
    session_conf,
)
from lagpilot_runtime.drain.task import sub_range_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import itertools

from bench.drain.measure import classify, longest_gap, percentile
from bench.drain.variants import (
    executor_variants,
    median_diffs,
    median_of,
    median_ratios,
    parse_variants,
    round_order,
)

PLAN = DrainPlan("7", "orders", "g", split_ranges({0: (0, 1000), 1: (500, 900), 2: (0, 40)}, 4, 10), 100, 12)


def test_one_relation_per_sub_range_index_each_partition_once():
    work = remaining_work(PLAN, {(0, 0): (250, 250), (1, 1): (650, 50)})  # p0#0 finished, p1#1 half done
    rels = relation_options("orders", work)
    assert len(rels) == 4  # indexes 0..3, not 3 x 4 relations
    tasks = []
    for r in rels:
        parts = json.loads(r["assign"])["orders"]
        assert len(parts) == len(set(parts))  # a partition at most once per relation: one task per sub-range
        starts, ends = json.loads(r["startingOffsets"])["orders"], json.loads(r["endingOffsets"])["orders"]
        assert sorted(map(int, starts)) == sorted(parts) == sorted(map(int, ends))
        tasks += [(p, starts[str(p)], ends[str(p)]) for p in parts]
    assert sorted(tasks) == sorted((s.partition, start, s.end) for s, start in work)
    assert (1, 650, 700) in tasks and all(t[:2] != (0, 0) for t in tasks)
    assert "latest" not in json.dumps(rels) and "earliest" not in json.dumps(rels)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 500), st.integers(0, 500)), min_size=1),
    st.integers(1, 6),
    st.data(),
)
def test_relations_cover_exactly_the_unfinished_offsets(ranges, factor, data):
    ranges = {p: (min(a, b), max(a, b)) for p, (a, b) in ranges.items()}
    subs = split_ranges(ranges, factor)
    if not subs:
        return
    plan = DrainPlan("1", "t", "g", subs).validate()
    progress = {(s.partition, s.index): (data.draw(st.integers(s.start, s.end)), 0) for s in subs}
    work = remaining_work(plan, progress)
    covered = []
    for r in relation_options("t", work):
        starts, ends = json.loads(r["startingOffsets"])["t"], json.loads(r["endingOffsets"])["t"]
        for p in json.loads(r["assign"])["t"]:
            covered += [(p, o) for o in range(starts[str(p)], ends[str(p)])]
            # every offset of a task lies in one sub-range: the one its first offset names
            first = sub_range_of(plan.sub_ranges, p, starts[str(p)])
            assert first.start <= starts[str(p)] and ends[str(p)] == first.end
    want = [(s.partition, o) for s in subs for o in range(progress[(s.partition, s.index)][0], s.end)]
    assert sorted(covered) == sorted(want) and len(covered) == len(set(covered))


def test_sub_range_of_rejects_offsets_outside_the_plan():
    assert sub_range_of(PLAN.sub_ranges, 1, 600) == SubRange(1, 1, 600, 700)
    with pytest.raises(RuntimeError, match="no sub-range"):
        sub_range_of(PLAN.sub_ranges, 1, 900)


def test_session_conf_local_mode_cuts_start_up_and_keeps_overrides(tmp_path):
    jar = tmp_path / "kafka-clients.jar"
    jar.write_text("")
    conf = session_conf(PLAN, None, [str(jar)], {"spark.ui.enabled": "true"}, env={})
    assert conf["spark.master"] == "local[12,4]"
    assert conf["spark.ui.enabled"] == "true"  # LAGPILOT_SPARK_CONF wins
    assert conf["spark.eventLog.enabled"] == "false"
    assert conf["spark.driver.extraClassPath"] == str(jar)  # the connector on the JVM class path (CDS)
    assert conf["spark.driver.extraJavaOptions"] == DEFAULT_DRIVER_JAVA_OPTIONS  # no archive next to the jars
    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "1000"
    (tmp_path / CDS_ARCHIVE_NAME).write_text("x")
    conf = session_conf(PLAN, None, [str(jar)], {}, env={})
    assert (
        f"-XX:SharedArchiveFile={tmp_path / CDS_ARCHIVE_NAME} -Xshare:auto"
        in conf["spark.driver.extraJavaOptions"]
    )
    k8s = session_conf(
        PLAN, "k8s://https://kubernetes.default.svc", [str(jar)], {}, env={"LAGPILOT_POD_IP": "10.0.0.5"}
    )
    assert (
        "spark.driver.extraClassPath" not in k8s
        and "SharedArchiveFile" not in k8s["spark.driver.extraJavaOptions"]
    )
    assert k8s["spark.driver.host"] == "10.0.0.5"


def test_cds_archive_choice(tmp_path):
    jar = tmp_path / "a.jar"
    assert cds_archive([str(jar)], {}) is None
    (tmp_path / CDS_ARCHIVE_NAME).write_text("x")
    assert cds_archive([str(jar)], {}) == str(tmp_path / CDS_ARCHIVE_NAME)
    assert cds_archive([str(jar)], {"LAGPILOT_SPARK_CDS_ARCHIVE": "off"}) is None
    assert cds_archive([str(jar)], {"LAGPILOT_SPARK_CDS_ARCHIVE": str(tmp_path / "missing.jsa")}) is None
    assert (
        driver_java_options({"LAGPILOT_SPARK_DRIVER_JAVA_OPTIONS": "-Xss512k"}, "/a.jsa")
        == "-Xss512k -XX:SharedArchiveFile=/a.jsa -Xshare:auto"
    )


def test_startup_breakdown_is_relative_to_process_start_in_milestone_order():
    got = startup_breakdown(
        {
            "process_start": 100.0,
            "jvm_up": 104.5,
            "main_entered": 100.25,
            "first_batch_handled": 109.0,
            "task_started": None,
        }
    )
    assert list(got) == ["process_start", "main_entered", "jvm_up", "first_batch_handled"]
    assert got["jvm_up"] == 4.5 and got["first_batch_handled"] == 9.0
    assert startup_breakdown({}) == {}


@pytest.mark.parametrize(
    "ats,expect",
    [
        ([], 10.0),  # no commit at all in the window: the whole window
        ([9.0, 11.0, 12.0, 20.0], 8.0),  # the longest gap is inside
        ([5.0, 14.0, 15.0], 9.0),  # the gap from the last commit before the window counts
        ([10.0, 11.0], 9.0),  # silent until the end of the window
        (
            [9.5, 3.0, 11.0, 12.0, 13.0, 15.0, 17.0, 19.0],
            2.0,
        ),  # unordered (as SQL returns them): the LAST commit before counts
    ],
)
def test_longest_gap(ats, expect):
    assert longest_gap(ats, 10.0, 20.0) == pytest.approx(expect)


def test_percentile_nearest_rank():
    assert percentile([1.0, 2.0, 3.0], 95) == 3.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


@pytest.mark.parametrize(
    "cmd,drain,live,bucket",
    [
        ("/usr/lib/jvm/java-17/bin/java -cp x org.apache.spark.deploy.SparkSubmit", True, False, "spark_jvm"),
        ("/venv/bin/python -m lagpilot_runtime.spark_daemon", True, False, "python_workers"),
        ("/venv/bin/python -m lagpilot.cli drain --plan {}", True, False, "drain_driver"),
        ("/venv/bin/python -m lagpilot.cli consume", False, True, "live_group"),
        ("java -Xmx1g kafka.Kafka server.properties", False, False, "broker_shared"),
        ("postgres: lagpilot lagpilot 127.0.0.1 idle", False, False, "postgres_shared"),
        ("/usr/bin/vim", False, False, None),
    ],
)
def test_cpu_buckets(cmd, drain, live, bucket):
    assert classify(cmd, drain, live) == bucket


@pytest.mark.parametrize(
    "value,default,expect",
    [
        (None, True, True),
        ("", True, True),
        ("0", True, False),
        ("off", True, False),
        ("false", True, False),
        ("1", False, True),
        (None, False, False),
        ("yes", False, True),
    ],
)
def test_start_up_switches(value, default, expect):
    env = {} if value is None else {"LAGPILOT_DRAIN_WARM_WORKERS": value}
    assert _switch(env, "LAGPILOT_DRAIN_WARM_WORKERS", default) is expect


def test_startup_ab_variants_order_and_paired_differences():
    v = parse_variants(['old={"LAGPILOT_DRAIN_WARM_WORKERS": 0}', "new={}", "bare="])
    assert v == {"old": {"LAGPILOT_DRAIN_WARM_WORKERS": "0"}, "new": {}, "bare": {}}
    assert list(v) == ["old", "new", "bare"]  # the first is the base of the differences
    with pytest.raises(ValueError):
        parse_variants(["no-equals-sign"])
    with pytest.raises(ValueError):
        parse_variants(["x=[1]"])
    assert round_order(["a", "b", "c"], 0) == ["a", "b", "c"] and round_order(["a", "b", "c"], 1) == [
        "c",
        "b",
        "a",
    ]
    rows = {
        "old": [{"t": 10.0}, {"t": 30.0}, {"t": 12.0}],
        "new": [{"t": 8.0}, {"t": 31.0}, {"t": 9.0}],
        "gap": [{"t": None}, {"t": 1.0}, {}],
    }
    # paired per round: -2, +1, -3 -> median -2 (best-of or median-of-each would say something else)
    assert median_diffs(rows, "t", "old") == {"new": -2.0, "gap": -29.0}
    # one variant's median over its rounds, the rounds without the figure left out
    assert median_of(rows["new"], "t") == 9.0 and median_of(rows["gap"], "t") == 1.0
    assert median_of([{}, {"t": None}], "t") is None and median_of([], "t") is None


class _FakeRow(dict):
    def asDict(self):  # noqa: N802 - pyspark's Row API
        return dict(self)


class _FakeJob:
    """A DataFrame-shaped job: planning, then collect (or a failure); records what ran."""

    def __init__(self, rows, fail=False, block=None):
        self.rows, self.fail, self.block, self.planned, self.collected = rows, fail, block, False, False
        outer = self

        class _QE:
            def executedPlan(self):  # noqa: N802
                outer.planned = True

        class _JDF:
            def queryExecution(self):  # noqa: N802
                return _QE()

        self._jdf = _JDF()

    def collect(self):
        if self.block is not None:
            assert self.block.wait(5), "never cancelled"
        if self.fail:
            raise RuntimeError("task failed 4 times")
        self.collected = True
        return [_FakeRow(r) for r in self.rows]


class _FakeSpark:
    def __init__(self, on_cancel=None):
        self.cancelled = 0
        outer = self

        class _SC:
            def getLocalProperty(self, key):  # noqa: N802 - no job group set by these callers
                return None

            def setLocalProperty(self, key, value):  # noqa: N802 - the tasks' names (none: fakes)
                pass

            def cancelAllJobs(self):  # noqa: N802
                outer.cancelled += 1
                if on_cancel:
                    on_cancel()

        self.sparkContext = _SC()


def test_collect_in_parallel_returns_every_task_summary():
    from lagpilot_runtime.drain.spark import collect_in_parallel

    jobs = [_FakeJob([{"records": i, "index": i}, {"records": 10 + i, "index": i}]) for i in range(4)]
    spark = _FakeSpark()
    results, planned = collect_in_parallel(spark, jobs)
    assert sorted(r["records"] for r in results) == [0, 1, 2, 3, 10, 11, 12, 13]
    assert len(planned) == 4 and all(j.planned and j.collected for j in jobs) and spark.cancelled == 0


def test_collect_in_parallel_a_failure_cancels_the_other_jobs_and_is_raised():
    import threading

    from lagpilot_runtime.drain.spark import collect_in_parallel

    release = threading.Event()
    spark = _FakeSpark(on_cancel=release.set)  # a cancelled job returns (Spark: its collect raises)
    jobs = [_FakeJob([{"records": 1}], block=release), _FakeJob([], fail=True)]
    with pytest.raises(RuntimeError, match="4 times"):
        collect_in_parallel(spark, jobs)
    assert spark.cancelled == 1


def test_executor_variants_share_the_task_slots_and_ratios_are_paired():
    v = executor_variants([1, 2, 4], 12)
    assert v == {
        "1x12": {"LAGPILOT_SPARK_MASTER": "local-cluster[1,12,1024]"},
        "2x6": {"LAGPILOT_SPARK_MASTER": "local-cluster[2,6,1024]"},
        "4x3": {"LAGPILOT_SPARK_MASTER": "local-cluster[4,3,1024]"},
    }
    assert list(executor_variants([1, 5], 12)) == ["1x12", "5x3"]  # ceil: never fewer slots than tasks
    with pytest.raises(ValueError):
        executor_variants([0], 12)
    rows = {"1x12": [{"r": 100.0}, {"r": 50.0}, {"r": 80.0}], "2x6": [{"r": 150.0}, {"r": 60.0}, {"r": 80.0}]}
    assert median_ratios(rows, "r", "1x12") == {"2x6": 1.2}  # 1.5, 1.2, 1.0 per round
    conf = session_conf(PLAN, "local-cluster[2,6,1024]", [], {}, env={})
    assert conf["spark.executor.extraJavaOptions"] == DEFAULT_DRIVER_JAVA_OPTIONS
    assert "spark.executor.extraJavaOptions" not in session_conf(PLAN, None, [], {}, env={})


def test_per_partition_task_counts_that_differ_become_one_spark_task_per_sub_range():
    """Issue 25: the planner gives a hot partition most of the budget and its neighbours one task
    each; the hand-off cuts each range into its own count (handoff.sub_ranges_of, the operator's
    executor) and the Spark job runs exactly one task per sub-range (relation_options)."""
    from lagpilot.decide.handoff import PartitionRange, sub_ranges_of
    from lagpilot.spec import parse_spec

    spec = parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "orders",
            "groupId": "g",
            "batch": {"maxRecords": 100},
        }
    )
    assert spec.drain.split_factor is None  # the CRD's default since issue 25: no cap
    ranges = (
        PartitionRange(0, split=130_000, start=10_000, tasks=12),
        PartitionRange(3, split=9_000, start=8_000, tasks=1),
        PartitionRange(5, split=4_000, start=1_000, tasks=3),
    )
    subs = sub_ranges_of(ranges, spec)
    assert {p: sum(1 for s in subs if s.partition == p) for p in (0, 3, 5)} == {0: 12, 3: 1, 5: 3}
    plan = DrainPlan("9", "orders", "g", subs, 100, 16).validate()
    work = remaining_work(plan, {})
    tasks = []
    for r in relation_options("orders", work):
        starts, ends = json.loads(r["startingOffsets"])["orders"], json.loads(r["endingOffsets"])["orders"]
        tasks += [(int(p), starts[str(p)], ends[str(p)]) for p in json.loads(r["assign"])["orders"]]
    assert len(tasks) == 16 == len(subs)
    assert sorted(tasks) == sorted((s.partition, s.start, s.end) for s in subs)
    covered = sorted((p, a, b) for p, a, b in tasks)
    for p, (a, b) in {0: (10_000, 130_000), 3: (8_000, 9_000), 5: (1_000, 4_000)}.items():
        mine = [(x, y) for q, x, y in covered if q == p]
        assert (
            mine[0][0] == a
            and mine[-1][1] == b
            and all(y == x2 for (_, y), (x2, _) in itertools.pairwise(mine))
        )
