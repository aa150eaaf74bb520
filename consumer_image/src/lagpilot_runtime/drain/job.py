"""`lagpilot drain`: the Spark drain job. Runs the SAME batch handler as the consumer over explicit
offset ranges of a backlog, with more tasks than the topic has partitions.

How it reads: one ``spark.read.format("kafka")`` batch relation per unfinished sub-range of the plan
(``assign`` one partition, numeric ``startingOffsets``/``endingOffsets``, never "latest";
``failOnDataLoss=true``; ``kafka.isolation.level=read_committed`` when the plan says so), unioned
into one DataFrame: one Spark task per sub-range. The plan fixes the sub-ranges (see
``drain_plan``) instead of letting ``minPartitions`` cut them, so a sub-range keeps its identity
across retries and a retry reads only what is left of each.

Each task feeds its records to the handler in batches of ``LAGPILOT_BATCH_MAX_RECORDS`` with the
consumer's failure policy (retries with backoff, isolation, dead-letter), and after every batch
commits its progress (next offset + records done) to the sub-range's progress group in Kafka. A
task (re)started by Spark, or a whole job retried by the operator, skips what is committed there.

Configuration: the consumer's environment (docs/CONTRACTS.md; secrets arrive only as env from
secretKeyRef and are passed to Spark as ``kafka.*`` options, never logged), plus
``LAGPILOT_DRAIN_PLAN`` (JSON, or ``--plan``), ``LAGPILOT_SPARK_MASTER`` (default
``local[<parallelism>,4]``: 4 attempts per task), ``LAGPILOT_SPARK_JARS`` (jar paths, comma
separated, or a directory holding them), ``LAGPILOT_SPARK_CONF`` (JSON object of extra Spark conf).

Exit codes: 0 every sub-range done (checked against Kafka at the end), 1 failed (retry may help),
2 bad configuration or plan. Records retention deleted before the drain read them are recorded in
the sub-range's progress metadata (``lost=a-b``) and the rest is drained (the operator reports the
loss: DataLoss condition, event, metric); 3 is no longer used.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import plan_auth, redaction
from ..config import ConfigError, ConsumerConfig
from ..jsonlog import fields as _fields
from .plan import DrainPlan, NextPart, parts_group
from .progress import (
    RetentionError,
    catch_up_to_sink,
    complete_unread,
    low_watermarks,
    progress_consumer,
    read_committed,
    read_progress,
    record_losses,
    remaining_work,
    retention_losses,
    unread_sub_ranges,
)
from .spark import (
    CDS_ARCHIVE_NAME,
    EXECUTOR_POD_TEMPLATE_ENV,
    _arrow_available,
    _SessionStarter,
    _switch,
    build_frame,
    build_frames,
    collect_in_parallel,
    executor_pod_template_conf,
    name_tasks,
    planned_partitions,
    resolve_jars,
    spark_kafka_options,
    train_cds,
    warm_workers,
)
from .task import SUMMARY_SCHEMA, TaskSpec, arrow_task, process_start_time, rdd_task

log = logging.getLogger("lagpilot.drain")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_DATA_LOSS = 0, 1, 2, 3
TERMINATION_LOG = "/dev/termination-log"
__all__ = [
    "EXIT_CONFIG",
    "EXIT_DATA_LOSS",
    "EXIT_FAILED",
    "EXIT_OK",
    "RetentionError",
    "job_group",
    "main",
    "process_start_time",
    "run",
    "startup_breakdown",
]


# ---- start-up timing ------------------------------------------------------------------------------

STARTUP_MARKS = (
    "process_start",
    "main_entered",
    "progress_read",
    "pyspark_imported",
    "jvm_up",
    "session_ready",
    "workers_warm",
    "relations_planned",
    "job_submitted",
    "daemon_started",
    "worker_forked",
    "task_started",
    "first_record",
    "first_batch_handled",
)


def startup_breakdown(marks: Mapping[str, float | None]) -> dict[str, float]:
    """Seconds since process start for each known milestone (pure; for the log and the bench).

    In the warm drain runtime the start is the request's arrival; milestones its warm session
    reached before (the worker daemon, a reused worker) are left out rather than shown negative.
    """
    t0 = marks.get("process_start") or marks.get("main_entered")
    if t0 is None:
        return {}
    return {
        k: round(float(v) - t0, 3)
        for k in STARTUP_MARKS
        if (v := marks.get(k)) is not None and float(v) >= t0
    }


# ---- the driver ---------------------------------------------------------------------------------


def _task_marks(results: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The earliest time any task reached each milestone."""

    def first(key: str) -> float | None:
        got = [float(r[key]) for r in results if r.get(key)]
        return min(got) if got else None

    return {
        "daemon_started": first("daemon_started_at"),
        "worker_forked": first("worker_forked_at"),
        "task_started": first("task_started_at"),
        "first_record": first("first_record_at"),
        "first_batch_handled": first("first_batch_at"),
    }


def job_group(plan: DrainPlan) -> str:
    """The Spark job group of a drain attempt: the warm runtime cancels it when its caller goes away."""
    return f"lagpilot-drain-{plan.drain_id}"


def run(
    plan: DrainPlan,
    cfg: ConsumerConfig,
    master: str | None,
    jars: Sequence[str],
    extra_conf: Mapping[str, str],
    marks: dict[str, float | None] | None = None,
    warm_session: Any = None,
    part_key: bytes = b"",
    part_wait_s: float | None = None,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
    stopped: Any = None,
) -> dict[str, Any]:
    """Drive one drain attempt; returns a summary. Raises RetentionError / RuntimeError.

    ``marks`` collects the start-up milestones (epoch seconds); the summary carries them and
    ``startup`` (seconds since process start per milestone), also logged as event ``drain_startup``.
    ``warm_session``: a running SparkSession with warm workers (the drain runtime, runtime.py):
    used as is and left running; else this attempt starts its own and stops it at the end.

    A busy plan (``plan.busy``; docs/drain.md "Busy drains: the runtime"): while its passes run the
    driver reads the operator's next part every ``PART_POLL_S`` (signed with ``part_key``) and starts
    the sub-ranges it adds at once, as one more Spark job on the same session beside the passes under
    way (``_Attempt``: a sub-range is in at most one pass; Spark's FIFO scheduler gives the new job's
    tasks the slots the running ones free). With no pass left it waits for a part
    (``wait_for_part``), and ends once a final part says no further split comes and every sub-range is
    done — or when no part came for ``part_wait_s`` (``LAGPILOT_DRAIN_PART_WAIT_SECONDS``, default
    PART_WAIT_S) after its last work: the wait is bounded; the operator then finds the Job succeeded
    and verifies (work it handed off meanwhile goes to a next attempt). ``stopped`` (the warm runtime:
    its caller went away) ends the attempt with an error.
    """
    marks = {} if marks is None else marks
    t0 = time.time()
    marks.setdefault("main_entered", t0)
    # the JVM and the SparkSession take seconds to start: start them while Kafka is asked for the
    # progress (a finished plan then costs a needless JVM start, but retries of finished plans are rare)
    starter = _SessionStarter(plan, master, jars, extra_conf, marks) if warm_session is None else None
    wait_s = part_wait_setting() if part_wait_s is None else part_wait_s
    att = _Attempt(plan, cfg, starter, warm_session, marks, part_key, stopped)
    try:
        progress = read_progress(cfg, plan)
        work = catch_up_to_sink(cfg, plan, remaining_work(plan, progress))
        marks["progress_read"] = time.time()
        att.use_arrow = (
            bool(work) and _arrow_available()
        )  # imports pandas (mapInArrow needs it) while the JVM starts
        done_before = sum(r for _, r in progress.values())
        log.info(
            "drain plan",
            extra=_fields(
                event="drain_plan",
                drain=plan.drain_id,
                topic=plan.topic,
                sub_ranges=len(plan.sub_ranges),
                unfinished=len(work),
                records_done_before=done_before,
                busy=plan.busy,
                round=plan.round,
                ranges={str(p): list(r) for p, r in plan.partition_ranges().items()},
            ),
        )
        att.summary.update(
            {
                "drain": plan.drain_id,
                "sub_ranges": len(plan.sub_ranges),
                "unfinished_at_start": len(work),
                "records_done_before": done_before,
                "records": 0,
                "skipped": 0,
                "started_at": marks.get("process_start") or t0,
            }
        )
        if plan.busy:
            att.summary.update(round_at_start=plan.round, parts=0, passes=0)
        att.start(work)
        att.drive(wait_s, sleep, clock)
    finally:
        att.stop_passes()
        _release_session(starter, att.spark)
    summary, plan = att.summary, att.plan
    after = read_progress(cfg, plan)
    unfinished = remaining_work(plan, after)
    summary["records_done"] = sum(r for _, r in after.values())
    summary["finished_at"] = time.time()
    if unfinished:
        raise RuntimeError(
            f"{len(unfinished)} sub-range(s) unfinished after the Spark job: "
            + ", ".join(f"p{s.partition}#{s.index}@{n}/{s.end}" for s, n in unfinished[:5])
        )
    return summary


Work = list[tuple[Any, int]]  # (sub-range, where its pass starts)


class _Passes:
    """The passes of one attempt in flight, each one Spark job over sub-ranges it alone owns, run from
    its own driver thread (pyspark pins each Python thread to a JVM thread: the job group is set per
    pass). Nothing here talks to Kafka: the attempt (``_Attempt``) decides what a pass runs and
    completes it; this keeps the rule that makes a pass exact — a sub-range is in at most one pass
    in flight — and hands back each pass as it ends."""

    def __init__(self) -> None:
        self._done: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()
        self.running: dict[int, Work] = {}
        self._threads: dict[int, threading.Thread] = {}
        self.started = 0

    def owned(self) -> set[tuple[int, int]]:
        return {(s.partition, s.index) for work in self.running.values() for s, _ in work}

    def unowned(self, work: Work) -> Work:
        """``work`` less the sub-ranges a pass in flight holds (their tasks commit their progress)."""
        held = self.owned()
        return [(s, a) for s, a in work if (s.partition, s.index) not in held]

    def start(self, work: Work, job: Any) -> int:
        """Run ``job()`` (the Spark job over ``work``) in a thread of its own; returns the pass number."""
        keys = {(s.partition, s.index) for s, _ in work}
        if len(keys) != len(work) or keys & self.owned():
            raise RuntimeError(f"a sub-range would be in two passes: {sorted(keys & self.owned())}")
        n = self.started
        self.started += 1
        self.running[n] = list(work)

        def go() -> None:
            try:
                self._done.put((n, job(), None))
            except BaseException as exc:  # noqa: BLE001 - raised in the driver's thread (finished)
                self._done.put((n, None, exc))

        self._threads[n] = threading.Thread(target=go, name=f"drain-pass-{n}", daemon=True)
        self._threads[n].start()
        return n

    def finished(self, timeout: float | None) -> list[tuple[int, Work, Any]]:
        """The passes that ended (waiting up to ``timeout`` for one; None: until one ends), each
        (number, its work, its tasks' summaries), and no longer in flight; the first failed pass's
        error is raised (the caller stops the others)."""
        out: list[tuple[int, Work, Any]] = []
        try:
            item = self._done.get(timeout=timeout)
            while True:
                n, results, exc = item
                self._threads.pop(n).join()
                work = self.running.pop(n)
                if exc is not None:
                    raise exc
                out.append((n, work, results))
                item = self._done.get_nowait()
        except queue.Empty:
            pass
        return out

    def join(self, timeout_s: float) -> list[int]:
        """Wait for every pass in flight to end (cancelled: see ``_Attempt.stop_passes``); the ones
        still running after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._threads.values()):
            t.join(max(0.0, deadline - time.monotonic()))
        return sorted(n for n, t in self._threads.items() if t.is_alive())


class _Attempt:
    """One drain attempt's driver: its plan (extended by the parts it takes), its session, its passes
    in flight and its summary. ``drive`` is the loop of ``run``."""

    def __init__(
        self,
        plan: DrainPlan,
        cfg: ConsumerConfig,
        starter: Any,
        spark: Any,
        marks: dict[str, float | None],
        part_key: bytes,
        stopped: Any,
    ) -> None:
        self.plan, self.cfg, self.starter, self.spark, self.marks = plan, cfg, starter, spark, marks
        self.part_key, self.stopped = part_key, stopped
        self.passes = _Passes()
        self.summary: dict[str, Any] = {}
        self.use_arrow = False
        self.final = False  # a final part was taken: no further part is read

    def start(self, work: Work) -> None:
        """A pass over ``work`` (sub-ranges no pass in flight holds), started now beside the passes
        under way; its tasks take the slots they free (Spark's FIFO scheduler: the earlier jobs'
        waiting tasks first). The first pass started is the attempt's start-up (its milestones)."""
        work = _drop_lost(self.plan, self.cfg, self.passes.unowned(work), self.summary)
        if not work:
            return
        if self.stopped is not None and self.stopped():
            raise RuntimeError("drain stopped: its caller went away")
        first = self.passes.started == 0
        self.spark = _session(self.plan, self.spark, self.starter, self.use_arrow, self.marks)
        if first:
            self.summary["session_ready_at"] = self.marks.get("session_ready")
        plan, spark, cfg, use_arrow = self.plan, self.spark, self.cfg, self.use_arrow
        marks = self.marks if first else {}  # a later pass does not rewrite the start-up's milestones
        running = len(self.passes.owned())
        n = self.passes.start(work, lambda: _spark_job(plan, cfg, work, spark, use_arrow, marks))
        if plan.busy:
            self.summary["passes"] += 1
            self.summary["max_concurrent_passes"] = max(
                self.summary.get("max_concurrent_passes", 0), len(self.passes.running)
            )
        log.info(
            "drain pass started",
            extra=_fields(
                event="drain_pass_started",
                drain=plan.drain_id,
                round=plan.round,
                pass_no=n,
                sub_ranges=len(work),
                running=running,
                passes_running=len(self.passes.running) - 1,
                work=[f"p{s.partition}#{s.index}[{a},{s.end})" for s, a in work[:16]],
            ),
        )

    def reap(self, timeout: float | None) -> None:
        """The passes that ended: every sub-range of theirs completed (``_complete_read``), their
        counts added; a failed pass's error raised."""
        for n, work, results in self.passes.finished(timeout):
            _complete_read(self.plan, self.cfg, work, results, self.summary)
            _add_results(self.plan, work, results, n == 0, self.marks, self.summary)
            log.info(
                "drain pass ended",
                extra=_fields(
                    event="drain_pass_ended",
                    drain=self.plan.drain_id,
                    pass_no=n,
                    sub_ranges=len(work),
                    records=sum(r["records"] or 0 for r in results),
                    passes_running=len(self.passes.running),
                ),
            )

    def drive(self, wait_s: float, sleep: Any, clock: Any) -> None:
        """Until the attempt is over: reap passes; a busy plan takes each newer part as it comes (also
        while passes run) and starts its new sub-ranges; with none in flight it waits for a part."""
        while True:
            part = None
            if self.passes.running:
                self.reap(PART_POLL_S if self.plan.busy else None)
                if self.stopped is not None and self.stopped():
                    raise RuntimeError("drain stopped: its caller went away")
                if self.plan.busy and not self.final and self.part_key:
                    part = self._poll_part()
            elif not self.plan.busy:
                return
            elif self.final:
                work = self.passes.unowned(remaining_work(self.plan, read_progress(self.cfg, self.plan)))
                if not work:
                    self.summary["ended"] = "handed_back"
                    return
                self.start(catch_up_to_sink(self.cfg, self.plan, work))
                continue
            else:
                part = wait_for_part(
                    self.cfg, self.plan, self.part_key, wait_s, sleep=sleep, clock=clock, stopped=self.stopped
                )
                if part is None:
                    self.summary["ended"] = "no_next_part"
                    log.info(
                        "no next part within the wait: ending the attempt",
                        extra=_fields(
                            event="drain_part_wait_over",
                            drain=self.plan.drain_id,
                            round=self.plan.round,
                            waited_s=wait_s,
                        ),
                    )
                    return
            if part is not None:
                self.take(part)

    def _poll_part(self) -> NextPart | None:
        """One read of the parts group while passes run: the part if it is newer than the plan."""
        try:
            part = read_part(self.cfg, self.plan, self.part_key)
        except Exception as exc:  # noqa: BLE001 - Kafka unavailable for a moment: read again next poll
            log.info(
                "reading the next part failed",
                extra=_fields(
                    event="drain_part_read_failed", drain=self.plan.drain_id, error=_short_error(exc)
                ),
            )
            return None
        return part if part is not None and newer_part(part, self.plan) else None

    def take(self, part: NextPart) -> None:
        """A newer part: the plan extended with its sub-ranges (refused when one clashes), and a pass
        started now over its unfinished sub-ranges that no pass in flight holds."""
        self.plan = self.plan.extended(part)
        self.final = self.final or part.final
        self.summary["parts"] += 1
        self.summary["round"] = self.plan.round
        self.summary["sub_ranges"] = len(self.plan.sub_ranges)
        running = self.passes.owned()
        work = self.passes.unowned(remaining_work(self.plan, read_progress(self.cfg, self.plan)))
        work = catch_up_to_sink(self.cfg, self.plan, work)
        log.info(
            "next part",
            extra=_fields(
                event="drain_next_part",
                drain=self.plan.drain_id,
                round=part.round,
                final=part.final,
                unfinished=len(work),
                running=len(running),
                passes_running=len(self.passes.running),
            ),
        )
        if work:
            self.use_arrow = _arrow_available()
            self.start(work)

    def stop_passes(self) -> None:
        """On the way out with passes still in flight (an error, a part refused as malformed, a stop):
        cancel the attempt's Spark jobs and wait for their threads, so no pass outlives the attempt
        (a task cancelled mid-batch has committed only whole batches: a retry resumes exactly)."""
        if not self.passes.running:
            return
        if self.spark is not None:
            try:
                self.spark.sparkContext.cancelJobGroup(job_group(self.plan))
            except Exception:  # noqa: BLE001 - the session is going away anyway
                pass
        left = self.passes.join(PASS_STOP_WAIT_S)
        if left:
            log.warning(
                "passes still running after their cancel",
                extra=_fields(event="drain_pass_stop_timeout", drain=self.plan.drain_id, passes=left),
            )


PASS_STOP_WAIT_S = 60.0  # an attempt that ends with passes in flight waits this long for their cancel


def _release_session(starter: Any, spark: Any) -> None:
    """The attempt's own session stopped (the one still starting waited for, then stopped); the warm
    runtime's session left running, its job group marked idle."""
    if starter is not None:
        if spark is None:
            try:
                spark = starter.get()
            except Exception:  # noqa: BLE001 - the session was not needed
                spark = None
        if spark is not None:
            spark.stop()
    elif spark is not None:
        spark.sparkContext.setJobGroup("lagpilot-drain-runtime-idle", "idle", interruptOnCancel=True)


def _drop_lost(
    plan: DrainPlan, cfg: ConsumerConfig, work: list[tuple[Any, int]], summary: dict[str, Any]
) -> list[tuple[Any, int]]:
    """Retention deleted part of the range before it was read: record exactly what is gone
    (progress metadata lost=a-b; the operator reports it); the rest is drained, still exact."""
    lost, work = retention_losses(work, low_watermarks(cfg, plan))
    if lost:
        record_losses(cfg, plan, lost)
        summary.setdefault("lost", []).extend(
            {"partition": s.partition, "index": s.index, "start": a, "end": b} for s, a, b in lost
        )
        log.warning(
            "records deleted by retention before the drain read them; draining the rest",
            extra=_fields(
                event="drain_data_loss",
                drain=plan.drain_id,
                topic=plan.topic,
                lost=[f"p{s.partition}[{a}, {b})" for s, a, b in lost],
                records=sum(b - a for _, a, b in lost),
            ),
        )
    return work


def _session(
    plan: DrainPlan, spark: Any, starter: Any, use_arrow: bool, marks: dict[str, float | None]
) -> Any:
    """The SparkSession: started now on a cold attempt's first pass (its workers warmed when
    asked); the runtime's session gets this plan's Arrow batch size."""
    if spark is None:
        spark = starter.get()
        if use_arrow and _switch(os.environ, "LAGPILOT_DRAIN_WARM_WORKERS"):
            warm_workers(spark, marks)
    elif starter is None:  # the runtime's session: this plan's Arrow batch size (one drain at a time)
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(max(plan.batch_max_records, 1000)))
    return spark


def _spark_job(
    plan: DrainPlan,
    cfg: ConsumerConfig,
    work: list[tuple[Any, int]],
    spark: Any,
    use_arrow: bool,
    marks: dict[str, float | None],
) -> list[Any]:
    """Run the tasks over ``work`` (Arrow, one job per relation when asked, or RDD); their summaries."""
    spark.sparkContext.setJobGroup(job_group(plan), f"drain {plan.drain_id}", interruptOnCancel=True)
    kafka_opts = spark_kafka_options(cfg, plan.read_committed)
    spec = TaskSpec(
        plan.topic,
        plan.group_id,
        plan.drain_id,
        plan.batch_max_records,
        plan.sub_ranges,
        plan.owner,
        plan.attempt,
    )
    # one job per relation: off by default (measured under load: no gain, a lower steady rate)
    if use_arrow and _switch(os.environ, "LAGPILOT_DRAIN_PARALLEL_JOBS", default=False):
        jobs = [
            f.drop("topic").mapInArrow(functools.partial(arrow_task, spec), SUMMARY_SCHEMA)
            for f in build_frames(spark, plan, work, kafka_opts)
        ]
        marks["job_submitted"] = time.time()
        results, planned = collect_in_parallel(spark, jobs, plan.drain_id)
        marks["relations_planned"] = max(planned) if planned else None
    elif use_arrow:
        frame = build_frame(spark, plan, work, kafka_opts)
        job = frame.drop("topic").mapInArrow(functools.partial(arrow_task, spec), SUMMARY_SCHEMA)
        job._jdf.queryExecution().executedPlan()  # Kafka offsets fetched, splits planned
        marks["relations_planned"] = time.time()
        name_tasks(
            spark, lambda: planned_partitions(job), plan.drain_id
        )  # each task's sub-range, for its sign of life
        marks["job_submitted"] = time.time()
        results = [r.asDict() for r in job.collect()]
    else:
        frame = build_frame(spark, plan, work, kafka_opts)
        marks["relations_planned"] = time.time()
        rdd = frame.rdd.mapPartitions(functools.partial(rdd_task, spec))
        name_tasks(spark, lambda: rdd._jrdd.rdd().partitions(), plan.drain_id)
        marks["job_submitted"] = time.time()
        results = rdd.collect()
    return results


def _complete_read(
    plan: DrainPlan,
    cfg: ConsumerConfig,
    work: list[tuple[Any, int]],
    results: list[Any],
    summary: dict[str, Any],
) -> None:
    """The job ended without an error, so every task's reader reached its sub-range's end offset:
    commit those ends (a task never commits its sub-range's end itself)."""
    # a task that got no visible record (all aborted, markers, compacted away) could
    # not name its sub-range: complete those on the reader's position (H5)
    unread = unread_sub_ranges(work, results)
    if unread:
        complete_unread(cfg, plan, unread)
        summary.setdefault("no_visible_records", []).extend(
            f"p{s.partition}#{s.index}[{a}, {s.end})" for s, a in unread
        )
    # the same for the sub-ranges whose tasks did hand records over: a task never commits its
    # sub-range's end itself (its records also stop short when the attempt is cancelled)
    named = [w for w in work if w not in unread]
    if named:
        complete_unread(cfg, plan, named, named=True)


def _add_results(
    plan: DrainPlan,
    work: list[tuple[Any, int]],
    results: list[Any],
    first: bool,
    marks: dict[str, float | None],
    summary: dict[str, Any],
) -> None:
    """The tasks' counts into ``summary``; on the first pass the start-up breakdown, logged."""
    summary["records"] += sum(r["records"] or 0 for r in results)
    summary["skipped"] += sum(r["skipped"] or 0 for r in results)
    last = max((r["last_batch_at"] for r in results if r.get("last_batch_at")), default=None)
    summary["last_batch_at"] = last if last is not None else summary.get("last_batch_at")
    if first:
        marks.update(_task_marks(results))
        summary["first_batch_at"] = marks.get("first_batch_handled")
        summary["startup"] = startup_breakdown(marks)
        summary["marks"] = {k: v for k, v in marks.items() if v is not None}
        log.info(
            "drain start-up",
            extra=_fields(event="drain_startup", drain=plan.drain_id, tasks=len(work), **summary["startup"]),
        )


# ---- a busy drain's next parts ---------------------------------------------------------------------

PART_WAIT_ENV = "LAGPILOT_DRAIN_PART_WAIT_SECONDS"
PART_WAIT_S = 300.0  # a busy drain's driver waits at most this long (without a part) before it ends
PART_POLL_S = 1.0


def part_wait_setting(env: Mapping[str, str] | None = None) -> float:
    e = os.environ if env is None else env
    try:
        return max(0.0, float(e.get(PART_WAIT_ENV) or PART_WAIT_S))
    except ValueError:
        return PART_WAIT_S


def read_part(
    cfg: ConsumerConfig, plan: DrainPlan, key: bytes, consumer: Any = None, timeout_s: float = 10.0
) -> NextPart | None:
    """The operator's latest next part of this drain (its commit in ``parts_group``), verified with
    the CR's part key; None when there is none, or it is not signed by the operator, not this
    drain's or malformed (logged; the driver keeps waiting)."""
    from confluent_kafka import TopicPartition

    c = (
        consumer
        if consumer is not None
        else progress_consumer(cfg, parts_group(plan.group_id, plan.drain_id, plan.owner))
    )
    try:
        got = read_committed(c, [TopicPartition(plan.topic, 0)], timeout_s)
    finally:
        if consumer is None:
            c.close()
    for tp in got:
        if tp.offset is None or tp.offset < 0:
            continue
        meta = getattr(tp, "metadata", None)
        try:
            part = NextPart.from_body(
                plan_auth.verify_part(
                    key, plan.owner, plan.topic, meta.decode() if isinstance(meta, bytes) else meta
                )
            )
        except ValueError as exc:  # plan_auth.Refused is one
            log.warning(
                "next part refused",
                extra=_fields(event="drain_part_refused", drain=plan.drain_id, reason=str(exc)[:200]),
            )
            return None
        return part if part.drain_id == plan.drain_id else None
    return None


def newer_part(part: NextPart, plan: DrainPlan) -> bool:
    """A part the plan has not taken: a later round, or the final part of its round or a later one."""
    return part.round > plan.round or (part.final and part.round >= plan.round)


def wait_for_part(
    cfg: ConsumerConfig,
    plan: DrainPlan,
    key: bytes,
    wait_s: float,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
    poll_s: float = PART_POLL_S,
    read: Any = None,
    stopped: Any = None,
) -> NextPart | None:
    """The first part newer than the plan (a later round, or the final part of its round or a
    later one), polled every ``poll_s``; None after ``wait_s`` without one (or without a key: no
    part can be trusted, so none is waited for)."""
    if not key:
        log.warning(
            "a busy drain without its part key: not waiting for next parts",
            extra=_fields(
                event="drain_part_refused", drain=plan.drain_id, reason=f"{plan_auth.PART_KEY_ENV} not set"
            ),
        )
        return None
    deadline = clock() + wait_s
    reader = read if read is not None else (lambda: read_part(cfg, plan, key))
    while True:
        try:
            part = reader()
        except Exception as exc:  # noqa: BLE001 - Kafka unavailable for a moment: keep waiting (bounded)
            log.info(
                "reading the next part failed",
                extra=_fields(event="drain_part_read_failed", drain=plan.drain_id, error=_short_error(exc)),
            )
            part = None
        if part is not None and newer_part(part, plan):
            return part
        if clock() >= deadline:
            return None
        if stopped is not None and stopped():
            raise RuntimeError("drain stopped while it waited for its next part")
        sleep(poll_s)


def _short_error(exc: BaseException) -> str:
    """One line for status/events: Spark wraps the Python error deep inside a Java trace."""
    lines = [ln.strip() for ln in redaction.redact(str(exc)).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error:" in ln or "Exception:" in ln) and not ln.startswith("at "):
            return ln[:500]
    return (lines[0] if lines else type(exc).__name__)[:500]


def _termination_message(text: str) -> None:
    """Kubernetes shows /dev/termination-log in the pod status: the operator reads the cause there."""
    try:
        # LAGPILOT_TERMINATION_LOG: the dev pod runner's stand-in for the kubelet's mount (docs/drain.md)
        with open(os.environ.get("LAGPILOT_TERMINATION_LOG") or TERMINATION_LOG, "w") as fh:
            fh.write(redaction.redact(text)[:4000])
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    marks: dict[str, float | None] = {"process_start": process_start_time(), "main_entered": time.time()}
    from .. import jsonlog
    from . import runtime as drain_runtime

    ap = argparse.ArgumentParser(
        prog="lagpilot drain",
        description="Drain explicit offset ranges with Spark, "
        "calling the consumer's batch handler. Configured by the consumer environment.",
    )
    ap.add_argument("--plan", help="plan JSON (default: $LAGPILOT_DRAIN_PLAN)")
    ap.add_argument(
        "--master", help="Spark master (default: $LAGPILOT_SPARK_MASTER or local[<parallelism>,4])"
    )
    ap.add_argument(
        "--jars", help="connector jars, comma separated or a directory (default: $LAGPILOT_SPARK_JARS)"
    )
    ap.add_argument("--summary-file", help="write the JSON summary here (benchmarks, tests)")
    ap.add_argument(
        "--serve",
        action="store_true",
        help="run the warm drain runtime: keep a Spark session and "
        f"warm workers, run plans sent to ${drain_runtime.PORT_ENV} (drain_runtime.py)",
    )
    ap.add_argument(
        "--train-cds",
        metavar="ARCHIVE",
        help="only write the JVM class-data-sharing archive "
        f"(image build / dev setup; the drain uses {CDS_ARCHIVE_NAME} next to the jars) and exit",
    )
    args = ap.parse_args(list(argv) if argv is not None else None)
    jsonlog.setup(os.environ.get("LAGPILOT_LOG_LEVEL", "INFO").upper())
    if args.train_cds:
        return _train_cds_only(args)
    plan: DrainPlan | None = None
    try:
        cfg = ConsumerConfig.from_env()
        plan_text = args.plan or os.environ.get("LAGPILOT_DRAIN_PLAN") or ""
        if not args.serve:
            plan = DrainPlan.from_json(plan_text)
            drain_runtime.check_plan(plan, cfg)
        extra = json.loads(os.environ.get("LAGPILOT_SPARK_CONF") or "{}")
        if not isinstance(extra, dict):
            raise ValueError("LAGPILOT_SPARK_CONF must be a JSON object")
    except (ConfigError, ValueError, KeyError, json.JSONDecodeError) as exc:
        msg = f"bad drain configuration: {exc}"
        log.error(msg, extra=_fields(event="drain_config_error"))
        _termination_message(msg)
        return EXIT_CONFIG
    # a busy drain's part key (plan_auth.PART_KEY_ENV): read here and kept out of Spark's environment
    # (the JVM and the Python workers that run the handler start after this)
    part_key = _part_key(args)
    master = args.master or os.environ.get("LAGPILOT_SPARK_MASTER") or None
    jars = resolve_jars(args.jars or os.environ.get("LAGPILOT_SPARK_JARS"))
    extra_conf = {str(k): str(v) for k, v in extra.items()}
    try:
        extra_conf.update(executor_pod_template_conf(os.environ))  # Spark on Kubernetes: restricted executors
    except (OSError, ValueError) as exc:
        msg = f"bad drain configuration: {EXECUTOR_POD_TEMPLATE_ENV}: {exc}"
        log.error(msg, extra=_fields(event="drain_config_error"))
        _termination_message(msg)
        return EXIT_CONFIG
    if args.serve:
        return drain_runtime.serve(cfg, master, jars, extra_conf)
    assert plan is not None
    outcome = _in_warm_runtime(plan, plan_text)
    if outcome is None:
        _exit_on_sigterm()
        outcome = drain_runtime.outcome_of(
            lambda: run(plan, cfg, master, jars, extra_conf, marks, part_key=part_key)
        )
    return _report(outcome, plan, args.summary_file)


def _exit_on_sigterm() -> None:
    """SIGTERM (the Job deleted: a cancel, the finalizer's stop of a deleted CR's drain) ends the
    local drain at once, as the signal's default action does for any other process: in a container
    the drain is PID 1, and the kernel ignores a signal with the default action for PID 1, so it ran
    on for the pod's whole grace period (seen on the real node). Its ranges' progress is what the
    committed batches recorded, as after a SIGKILL; the exit ends the container's every process."""

    def stop(signum: int, frame: Any) -> None:
        log.warning("drain stopped (SIGTERM)", extra=_fields(event="drain_terminated"))
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _train_cds_only(args: argparse.Namespace) -> int:
    """``--train-cds``: only write the JVM class-data-sharing archive."""
    t = time.time()
    ok = train_cds(args.train_cds, resolve_jars(args.jars or os.environ.get("LAGPILOT_SPARK_JARS")))
    log.info(
        "cds archive",
        extra=_fields(
            event="drain_cds_archive", path=args.train_cds, written=ok, seconds=round(time.time() - t, 1)
        ),
    )
    return EXIT_OK if ok else EXIT_FAILED


def _part_key(args: argparse.Namespace) -> bytes:
    """A busy drain's part key (plan_auth.PART_KEY_ENV), taken out of the environment (b"": serving,
    absent or malformed: wait_for_part then refuses every part and says so)."""
    try:
        return (
            plan_auth.parse_key(os.environ.pop(plan_auth.PART_KEY_ENV, "") or "") if not args.serve else b""
        )
    except ValueError:
        return b""  # absent or malformed: wait_for_part refuses every part and says so


def _in_warm_runtime(plan: DrainPlan, plan_text: str) -> Any:
    """The attempt run by the warm drain runtime (``drain_runtime.request``, the plan signed by the
    operator), or None: no runtime URL, no signature, or nothing listening (drained here then)."""
    from . import runtime as drain_runtime

    outcome: drain_runtime.Outcome | None = None
    url = os.environ.get(drain_runtime.RUNTIME_URL_ENV)
    auth = None
    if url:
        try:  # the operator's signature of this plan: the runtime runs nothing else
            auth = plan_auth.PlanAuth.from_dict(json.loads(os.environ.get(plan_auth.AUTH_ENV) or "null"))
        except (ValueError, plan_auth.Refused) as exc:
            log.info(
                "no signature for the warm drain runtime: draining here",
                extra=_fields(event="drain_runtime_unreachable", drain=plan.drain_id, reason=str(exc)),
            )
            url = None
    if url:
        # the Job deleted (cancel, finalizer): stop waiting, let the runtime cancel, wait for it
        signal.signal(signal.SIGTERM, drain_runtime.raise_terminated)
        try:
            outcome = drain_runtime.request(url, plan, auth=auth, plan_text=plan_text)
            log.info(
                "the drain ran in the warm runtime",
                extra=_fields(event="drain_runtime_used", drain=plan.drain_id, exit=outcome.exit),
            )
        except drain_runtime.Unreachable as exc:
            log.info(
                "no warm drain runtime: draining here",
                extra=_fields(event="drain_runtime_unreachable", drain=plan.drain_id, reason=str(exc)),
            )
    return outcome


def _report(outcome: Any, plan: DrainPlan, summary_file: str | None) -> int:
    """The attempt's end: logged (the summary written where asked), or the failure logged and left
    as the pod's termination message; the exit code."""
    if outcome.exit == EXIT_OK:
        summary = dict(outcome.summary or {})
        log.info("drain finished", extra=_fields(event="drain_finished", **summary))
        if summary_file:
            Path(summary_file).write_text(json.dumps(summary))
    else:
        event = "drain_data_loss" if outcome.exit == EXIT_DATA_LOSS else "drain_failed"
        log.error(outcome.message, extra=_fields(event=event, drain=plan.drain_id))
        _termination_message(outcome.message)
    return outcome.exit  # type: ignore[no-any-return]


if __name__ == "__main__":
    sys.exit(main())
