"""LAGPILOT_DRAIN_PARALLEL_JOBS: the jobs `collect_in_parallel` runs from threads of its own are in the
attempt's Spark job group, so a cancel by job group (the warm runtime when its caller goes away,
`_Attempt.stop_passes`) reaches them.

The fake SparkContext keeps local properties per thread, as PySpark's pinned-thread mode does (each
Python thread its own JVM thread; a plain `threading.Thread` does not inherit the job group its
starter set: pyspark.InheritableThread exists for that), and a cancel by job group cancels only the
jobs submitted under that group."""

from __future__ import annotations

import threading
from typing import Any

from lagpilot_runtime.drain.spark import collect_in_parallel

GROUP = "lagpilot-drain-7"
HANG_GUARD_S = 60  # only so that a broken test does not hang the suite; nothing is timed


class _Cancelled(RuntimeError):
    pass


class _SC:
    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.running: list[tuple[str | None, threading.Event]] = []
        self.cancelled_groups: list[str] = []
        self.all_cancelled = 0

    def setJobGroup(self, group_id: str, description: str, interruptOnCancel: bool = False) -> None:  # noqa: N802, N803
        self.local.props = {
            "spark.jobGroup.id": group_id,
            "spark.job.description": description,
            "spark.job.interruptOnCancel": str(interruptOnCancel).lower(),
        }

    def setLocalProperty(self, key: str, value: str | None) -> None:  # noqa: N802
        props = dict(getattr(self.local, "props", {}))
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
        self.local.props = props

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        return getattr(self.local, "props", {}).get(key)

    def submit(self) -> tuple[str | None, threading.Event]:
        job = (self.getLocalProperty("spark.jobGroup.id"), threading.Event())
        with self.lock:
            self.running.append(job)
        return job

    def cancelJobGroup(self, group_id: str) -> None:  # noqa: N802
        with self.lock:
            self.cancelled_groups.append(group_id)
            for g, ev in self.running:
                if g == group_id:
                    ev.set()

    def cancelAllJobs(self) -> None:  # noqa: N802
        with self.lock:
            self.all_cancelled += 1
            for _, ev in self.running:
                ev.set()


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = _SC()


class _Job:
    """A relation's mapInArrow job: planned, then collected in the submitting thread's job group;
    it runs until a cancel reaches it (then its collect raises, as Spark's does)."""

    def __init__(self, sc: _SC, started: threading.Semaphore) -> None:
        self.sc, self.started, self.group_seen = sc, started, "unset"

        class _QE:
            def executedPlan(self) -> None:  # noqa: N802
                pass

        class _JDF:
            def queryExecution(self) -> Any:  # noqa: N802
                return _QE()

        self._jdf = _JDF()

    def collect(self) -> list[Any]:
        group, cancel = self.sc.submit()
        self.group_seen = group
        self.started.release()
        assert cancel.wait(HANG_GUARD_S), "the job was never cancelled"
        raise _Cancelled(f"Job cancelled (job group {group})")


def test_parallel_jobs_run_in_the_callers_job_group_and_a_cancel_by_group_stops_them() -> None:
    spark = _Spark()
    sc = spark.sparkContext
    started = threading.Semaphore(0)
    jobs = [_Job(sc, started) for _ in range(3)]
    out: dict[str, Any] = {}

    def attempt_pass() -> None:  # as drain_job._spark_job: the job group, then the parallel jobs
        sc.setJobGroup(GROUP, "drain 7", interruptOnCancel=True)
        try:
            out["results"] = collect_in_parallel(spark, jobs)
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    t = threading.Thread(target=attempt_pass, name="drain-pass-0", daemon=True)
    t.start()
    for _ in jobs:
        assert started.acquire(timeout=HANG_GUARD_S)
    assert [j.group_seen for j in jobs] == [GROUP] * 3  # each job submitted under the attempt's group
    sc.cancelJobGroup(GROUP)  # the warm runtime's cancel / _Attempt.stop_passes
    t.join(HANG_GUARD_S)
    assert not t.is_alive()
    assert isinstance(out.get("error"), _Cancelled)


def test_parallel_jobs_keep_their_threads_job_group_per_thread() -> None:
    """The group is set in each job's own thread (not only in the caller's): a job thread that set
    nothing would see none."""
    spark = _Spark()
    sc = spark.sparkContext
    sc.setJobGroup(GROUP, "drain 7", interruptOnCancel=True)
    seen: list[str | None] = []

    class _Quick(_Job):
        def collect(self) -> list[Any]:
            seen.append(self.sc.getLocalProperty("spark.jobGroup.id"))
            return []

    jobs = [_Quick(sc, threading.Semaphore(0)) for _ in range(2)]
    results, planned = collect_in_parallel(spark, jobs)
    assert results == [] and len(planned) == 2
    assert seen == [GROUP, GROUP]
    assert sc.getLocalProperty("spark.jobGroup.id") == GROUP  # the caller's own group unchanged
