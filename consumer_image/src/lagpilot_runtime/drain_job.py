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
import signal
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, ConsumerConfig
from .drain_plan import (DrainPlan, SubRange, parse_progress_lost, parse_progress_metadata, progress_group,
                         progress_metadata)

log = logging.getLogger("lagpilot.drain")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_DATA_LOSS = 0, 1, 2, 3
TERMINATION_LOG = "/dev/termination-log"


class RetentionError(Exception):
    """Records of the range were deleted by retention before the drain read them."""


def _fields(**kw: Any) -> dict[str, Any]:
    return {"fields": kw}


# ---- start-up timing ------------------------------------------------------------------------------

def process_start_time(pid: int | str = "self") -> float | None:
    """Wall-clock start of a process (Linux /proc; 10 ms resolution), None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime, clock ticks since boot
        with open("/proc/stat") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# the driver's and the tasks' milestones, in the order they happen (seconds since process start)
STARTUP_MARKS = ("process_start", "main_entered", "progress_read", "pyspark_imported", "jvm_up", "session_ready",
                 "workers_warm", "relations_planned", "job_submitted", "daemon_started", "worker_forked", "task_started",
                 "first_record", "first_batch_handled")


def startup_breakdown(marks: Mapping[str, float | None]) -> dict[str, float]:
    """Seconds since process start for each known milestone (pure; for the log and the bench).

    In the warm drain runtime the start is the request's arrival; milestones its warm session
    reached before (the worker daemon, a reused worker) are left out rather than shown negative.
    """
    t0 = marks.get("process_start") or marks.get("main_entered")
    if t0 is None:
        return {}
    return {k: round(float(marks[k]) - t0, 3) for k in STARTUP_MARKS
            if marks.get(k) is not None and float(marks[k]) >= t0}


# ---- Kafka options for Spark (pure) -------------------------------------------------------------

def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(cfg: ConsumerConfig, read_committed: bool) -> dict[str, str]:
    """The ``kafka.*`` reader options for the connection (contains secrets: never log the result)."""
    opts = {
        "kafka.bootstrap.servers": cfg.bootstrap_servers,
        "kafka.security.protocol": cfg.security_protocol,
        "failOnDataLoss": "true",
        "includeHeaders": "true",
    }
    if read_committed:
        opts["kafka.isolation.level"] = "read_committed"
    if cfg.security_protocol.startswith("SASL_"):
        mech = cfg.sasl_mechanism or "PLAIN"
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mech == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        opts["kafka.sasl.mechanism"] = mech
        opts["kafka.sasl.jaas.config"] = (f"{module} required username={_jaas_quote(cfg.sasl_username or '')} "
                                          f"password={_jaas_quote(cfg.sasl_password or '')};")
    if cfg.security_protocol in ("SSL", "SASL_SSL"):
        if cfg.ssl_ca_pem:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.certificates"] = cfg.ssl_ca_pem
        if cfg.ssl_cert_pem and cfg.ssl_key_pem:
            opts["kafka.ssl.keystore.type"] = "PEM"
            opts["kafka.ssl.keystore.certificate.chain"] = cfg.ssl_cert_pem
            opts["kafka.ssl.keystore.key"] = cfg.ssl_key_pem
    return opts


def read_options(topic: str, sub: SubRange, start: int) -> dict[str, str]:
    """Exactly one partition, numeric offsets: ``[start, sub.end)``."""
    return {
        "assign": json.dumps({topic: [sub.partition]}),
        "startingOffsets": json.dumps({topic: {str(sub.partition): start}}),
        "endingOffsets": json.dumps({topic: {str(sub.partition): sub.end}}),
    }


def resolve_jars(value: str | None) -> list[str]:
    """Jar paths from ``LAGPILOT_SPARK_JARS``: a comma/colon separated list, or a directory."""
    if not value:
        return []
    out: list[str] = []
    for item in value.replace(":", ",").split(","):
        item = item.strip()
        if not item:
            continue
        p = Path(item)
        out.extend(sorted(str(j) for j in p.glob("*.jar")) if p.is_dir() else [item])
    return out


# ---- progress in Kafka ------------------------------------------------------------------------

def _progress_consumer(cfg: ConsumerConfig, group: str) -> Any:
    """A consumer that never subscribes: it only commits/reads the progress group's offsets."""
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {"bootstrap.servers": cfg.bootstrap_servers, "group.id": group,
                            "enable.auto.commit": False, "client.id": "lagpilot-drain-progress"}
    conf.update(cfg.kafka_security())
    return Consumer(conf, logger=logging.getLogger("lagpilot.drain.librdkafka"))


def read_progress(cfg: ConsumerConfig, plan: DrainPlan, timeout_s: float = 30.0) -> dict[tuple[int, int], tuple[int, int]]:
    """(partition, index) -> (next offset, records done) for every sub-range; start/0 if none committed."""
    from confluent_kafka import TopicPartition

    out: dict[tuple[int, int], tuple[int, int]] = {}
    by_index: dict[int, list[SubRange]] = {}
    for s in plan.sub_ranges:
        by_index.setdefault(s.index, []).append(s)
    for index, subs in sorted(by_index.items()):
        c = _progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, index))
        try:
            got = c.committed([TopicPartition(plan.topic, s.partition) for s in subs], timeout=timeout_s)
        finally:
            c.close()
        by_p = {tp.partition: tp for tp in got}
        for s in subs:
            tp = by_p.get(s.partition)
            if tp is None or tp.offset < 0:
                out[(s.partition, s.index)] = (s.start, 0)
            else:
                out[(s.partition, s.index)] = (min(max(tp.offset, s.start), s.end), parse_progress_metadata(getattr(tp, "metadata", None)))
    return out


def remaining_work(plan: DrainPlan, progress: Mapping[tuple[int, int], tuple[int, int]]) -> list[tuple[SubRange, int]]:
    """(sub-range, where to start) for every sub-range not finished yet."""
    out = []
    for s in plan.sub_ranges:
        nxt = progress.get((s.partition, s.index), (s.start, 0))[0]
        if nxt < s.end:
            out.append((s, max(nxt, s.start)))
    return out


def check_retention(plan: DrainPlan, work: Sequence[tuple[SubRange, int]], low: Mapping[int, int]) -> None:
    """Raise RetentionError naming partitions and offsets when a range's start is already deleted."""
    lost = []
    for s, start in work:
        lw = low.get(s.partition)
        if lw is not None and lw > start:
            lost.append(f"partition {s.partition}: offsets {start}..{min(lw, s.end) - 1} deleted by retention "
                        f"(low watermark {lw}, drain sub-range [{s.start}, {s.end}))")
    if lost:
        raise RetentionError(f"topic {plan.topic}: the drain range starts before the earliest retained record; "
                             + "; ".join(lost) + ". Those records cannot be processed; the rest was not started.")


def catch_up_to_sink(cfg: ConsumerConfig, plan: DrainPlan, work: Sequence[tuple[SubRange, int]],
                     timeout_s: float = 30.0) -> list[tuple[SubRange, int]]:
    """For a progress-committing handler (docs/consumer.md): where the sink's progress of a sub-range
    is ahead of its progress group (a crash between the two commits, or the group's offsets expired
    after offsets.retention.minutes), commit the sink's value to the progress group and start
    there. The sink's progress never expires: it is authoritative. Best effort: on an error the work
    is unchanged (each task checks the sink again before its first batch)."""
    if not work:
        return list(work)
    try:
        from confluent_kafka import TopicPartition

        from .handler import BatchContext, commits_progress, load_handler

        handler = load_handler(cfg.handler_spec)
        if not commits_progress(handler):
            return list(work)
        out: list[tuple[SubRange, int]] = []
        for s, start in work:
            ctx = BatchContext(config=dict(cfg.handler_config), logger=logging.getLogger("lagpilot.handler"),
                               source="drain", group_id=plan.group_id, drain_id=plan.drain_id,
                               sub_range=(s.partition, s.index, s.start, s.end))
            nxt = handler.progress(plan.topic, [s.partition], ctx).get(s.partition)  # type: ignore[attr-defined]
            if nxt is None or nxt <= start:
                out.append((s, start))
                continue
            nxt = min(int(nxt), s.end)
            c = _progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, s.index))
            try:
                got = c.committed([TopicPartition(plan.topic, s.partition)], timeout=timeout_s)[0]
                meta = getattr(got, "metadata", None) if got.offset is not None and got.offset >= 0 else None
                res = c.commit(offsets=[TopicPartition(plan.topic, s.partition, nxt, metadata=progress_metadata(
                    parse_progress_metadata(meta), parse_progress_lost(meta)))], asynchronous=False)
                errs = [t.error for t in (res or []) if getattr(t, "error", None)]
                if errs:
                    raise RuntimeError(str(errs[0]))
            finally:
                c.close()
            log.info("sub-range resumes from the sink's progress", extra=_fields(
                event="drain_sink_progress_ahead", partition=s.partition, index=s.index, kafka_next=start, sink_next=nxt))
            if nxt < s.end:
                out.append((s, nxt))
        return out
    except Exception as exc:  # noqa: BLE001 - the tasks check again
        log.warning("reading the sink's progress in the driver failed", extra=_fields(
            event="drain_sink_progress_failed", error=str(exc)[:300]))
        return list(work)


def retention_losses(work: Sequence[tuple[SubRange, int]], low: Mapping[int, int]
                     ) -> tuple[list[tuple[SubRange, int, int]], list[tuple[SubRange, int]]]:
    """Split the unfinished work at the partitions' low watermarks (pure).

    Returns ``(lost, work)``: ``(sub-range, a, b)`` for every sub-range whose next offset ``a`` is
    below the low watermark (``b = min(low, end)``: retention deleted ``[a, b)`` before the drain
    read it), and the work that is left (starting at ``b``; a sub-range lost entirely drops out).
    """
    lost: list[tuple[SubRange, int, int]] = []
    left: list[tuple[SubRange, int]] = []
    for s, start in work:
        lw = low.get(s.partition)
        if lw is not None and lw > start:
            b = min(lw, s.end)
            lost.append((s, start, b))
            if b < s.end:
                left.append((s, b))
        else:
            left.append((s, start))
    return lost, left


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, overlapping/adjacent ranges joined (pure)."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def record_losses(cfg: ConsumerConfig, plan: DrainPlan, lost: Sequence[tuple[SubRange, int, int]],
                  timeout_s: float = 30.0) -> None:
    """Commit each lost sub-range's progress past the deleted offsets, with ``lost=a-b`` in its
    metadata (merged with earlier losses): the operator reads it (DataLoss condition, event,
    metric) and the rest of the sub-range, still exact, is drained from there."""
    from confluent_kafka import TopicPartition

    for s, a, b in lost:
        c = _progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, s.index))
        try:
            got = c.committed([TopicPartition(plan.topic, s.partition)], timeout=timeout_s)[0]
            meta = getattr(got, "metadata", None)
            if got.offset is not None and got.offset >= b:
                continue  # already past (a concurrent or earlier record)
            ranges = merge_ranges(parse_progress_lost(meta) + ((a, b),))
            res = c.commit(offsets=[TopicPartition(plan.topic, s.partition, b,
                                                   metadata=progress_metadata(parse_progress_metadata(meta), ranges))],
                           asynchronous=False)
            errs = [t.error for t in (res or []) if getattr(t, "error", None)]
            if errs:
                raise RuntimeError(f"recording the retention loss failed: {errs[0]}")
        finally:
            c.close()


def low_watermarks(cfg: ConsumerConfig, plan: DrainPlan, timeout_s: float = 30.0) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    c = _progress_consumer(cfg, progress_group(plan.group_id, plan.drain_id, 0))
    try:
        return {p: int(c.get_watermark_offsets(TopicPartition(plan.topic, p), timeout=timeout_s)[0])
                for p in sorted({s.partition for s in plan.sub_ranges})}
    finally:
        c.close()


# ---- the Spark task (runs in the Python workers) ---------------------------------------------------

@dataclass(frozen=True)
class TaskSpec:
    """What a task needs besides the environment: its plan, no secrets."""

    topic: str
    group_id: str
    drain_id: str
    batch_max_records: int
    sub_ranges: tuple[SubRange, ...]


def _row_record(row: Any) -> Any:
    from .handler import Record

    headers = [(h[0], bytes(h[1]) if h[1] is not None else b"") for h in (row.headers or [])]
    return Record(
        topic=row.topic, partition=int(row.partition), offset=int(row.offset),
        key=bytes(row.key) if row.key is not None else None,
        value=bytes(row.value) if row.value is not None else None,
        headers=headers, timestamp_ms=int(row.ts_ms) if row.ts_ms is not None else None,
    )


def rdd_task(spec: TaskSpec, rows: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """The Row path (no pyarrow/pandas): pickled Rows from the JVM."""
    return run_task(spec, (_row_record(r) for r in rows))


SUMMARY_FIELDS = (("records", "long"), ("batches", "long"), ("skipped", "long"), ("first_batch_at", "double"),
                  ("last_batch_at", "double"), ("partition", "long"), ("index", "long"),
                  ("daemon_started_at", "double"), ("worker_forked_at", "double"), ("task_started_at", "double"),
                  ("first_record_at", "double"))
SUMMARY_SCHEMA = ", ".join(f"{n} {t}" for n, t in SUMMARY_FIELDS)


def arrow_task(spec: TaskSpec, batches: Iterable[Any]) -> Iterator[Any]:
    """The Arrow path (`mapInArrow`): columnar batches from the JVM, about twice as fast as Rows."""
    import pyarrow as pa

    from .handler import Record

    def items() -> Iterator[Any]:
        for rb in batches:
            d = rb.to_pydict()
            topic = spec.topic  # one topic per plan: no need to ship the column
            for p, o, k, v, hs, ts in zip(d["partition"], d["offset"], d["key"], d["value"], d["headers"], d["ts_ms"]):
                headers = [(h["key"], h["value"] if h["value"] is not None else b"") for h in hs] if hs else []
                yield Record(topic, p, o, k, v, headers, ts)

    schema = pa.schema([(n, pa.int64() if t == "long" else pa.float64()) for n, t in SUMMARY_FIELDS])
    for summary in run_task(spec, items()):
        yield pa.RecordBatch.from_pylist([{f.name: summary.get(f.name) for f in schema}], schema=schema)


def sub_range_of(sub_ranges: Sequence[SubRange], partition: int, offset: int) -> SubRange:
    """The plan's sub-range holding this offset (sub-ranges of a partition never overlap)."""
    for s in sub_ranges:
        if s.partition == partition and s.start <= offset < s.end:
            return s
    raise RuntimeError(f"offset {offset} of partition {partition} is in no sub-range of the plan")


def run_task(spec: TaskSpec, items: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Process one sub-range's records: batches through the handler, progress commit after each.

    ``items`` are the Records of one Spark task, in offset order: one Kafka partition's
    ``[start, end)`` that lies inside exactly one sub-range of the plan (the first record names it;
    a record outside it fails the task rather than commit progress for the wrong sub-range).

    Yields one summary dict (records, batches, first/last batch wall time) for the driver's log.
    """
    task_started_at = time.time()
    from confluent_kafka import TopicPartition

    from . import jsonlog
    from .failure import DeadLetterProducer, RetryPolicy, SystemicFailure, run_batch
    from .handler import BatchContext, commits_progress, load_handler

    cfg = ConsumerConfig.from_env()
    jsonlog.setup(cfg.log_level)
    handler = load_handler(cfg.handler_spec)
    ctx = BatchContext(config=dict(cfg.handler_config), logger=logging.getLogger("lagpilot.handler"),
                       source="drain", concurrency=cfg.concurrency, group_id=spec.group_id, drain_id=spec.drain_id)
    sink_progress = commits_progress(handler)
    policy = RetryPolicy(max_retries=cfg.max_retries, backoff_ms=cfg.retry_backoff_ms)
    summary: dict[str, Any] = {"records": 0, "batches": 0, "skipped": 0, "first_batch_at": None, "last_batch_at": None,
                               "task_started_at": task_started_at, "worker_forked_at": process_start_time(),
                               "daemon_started_at": process_start_time(os.getppid()), "first_record_at": None}
    sub: SubRange | None = None
    committer = None
    done_next = 0
    done_records = 0
    dlq: DeadLetterProducer | None = None
    lost_before: tuple[tuple[int, int], ...] = ()  # retention losses recorded in the progress: kept
    kafka_next = [0]  # the progress group's committed offset (the sink's progress may be ahead of it)

    def commit(next_offset: int, records: int) -> None:
        tp = TopicPartition(spec.topic, sub.partition, next_offset, metadata=progress_metadata(records, lost_before))  # type: ignore[union-attr]
        for attempt in range(5):
            try:
                res = committer.commit(offsets=[tp], asynchronous=False)
                errs = [t.error for t in (res or []) if getattr(t, "error", None)]
                if errs:
                    raise RuntimeError(str(errs[0]))
                kafka_next[0] = max(kafka_next[0], next_offset)
                return
            except Exception as exc:  # noqa: BLE001 - retried, then fails the task (Spark retries it)
                if attempt == 4:
                    raise RuntimeError(f"progress commit failed: {exc}") from exc
                time.sleep(0.2 * (attempt + 1))

    def flush(batch: list[Any]) -> None:
        nonlocal done_next, done_records, dlq
        offsets = {(spec.topic, sub.partition): batch[-1].offset + 1} if sink_progress else None  # type: ignore[union-attr]

        def call(piece: list[Any]) -> None:
            # progress with the whole batch only (a piece of a failure isolation does not cover all below it)
            ctx.offsets = offsets if len(piece) == len(batch) else None
            handler(piece, ctx)

        result = run_batch(batch, call, policy, sleep=time.sleep)
        if result.failures:
            if cfg.failure_policy != "deadLetter":
                where = ", ".join(f.record.where for f in result.failures[:5])
                raise RuntimeError(f"{len(result.failures)} record(s) failed in the drain ({where}); "
                                   f"failure policy {cfg.failure_policy} stops the drain task")
            if dlq is None:
                dlq = DeadLetterProducer(cfg.producer_conf(), cfg.dlq_topic)
            dlq.send(result.failures)
        done_records += len(batch)
        done_next = batch[-1].offset + 1
        commit(done_next, done_records)
        now = time.time()
        summary["batches"] += 1
        summary["records"] += len(batch)
        summary["first_batch_at"] = summary["first_batch_at"] or now
        summary["last_batch_at"] = now

    batch: list[Any] = []
    try:
        for record in items:
            if sub is None:
                summary["first_record_at"] = time.time()
                sub = sub_range_of(spec.sub_ranges, record.partition, record.offset)
                summary.update(partition=sub.partition, index=sub.index)
                committer = _progress_consumer(cfg, progress_group(spec.group_id, spec.drain_id, sub.index))
                got = committer.committed([TopicPartition(spec.topic, sub.partition)], timeout=30)[0]
                done_next = got.offset if got.offset is not None and got.offset >= 0 else sub.start
                kafka_next[0] = done_next
                done_records = parse_progress_metadata(getattr(got, "metadata", None)) if got.offset >= 0 else 0
                lost_before = parse_progress_lost(getattr(got, "metadata", None)) if got.offset >= 0 else ()
                ctx.sub_range = (sub.partition, sub.index, sub.start, sub.end)
                if sink_progress:
                    # the sink's progress for this sub-range (same transaction as its rows) may be
                    # ahead of the progress group (a crash after the sink's commit, before Kafka's),
                    # and it never expires (a progress group does: offsets.retention.minutes)
                    sink_next = handler.progress(spec.topic, [sub.partition], ctx).get(sub.partition)  # type: ignore[attr-defined]
                    if sink_next is not None and sink_next > done_next:
                        log.info("resuming from the sink's progress", extra=_fields(
                            event="drain_sink_progress_ahead", partition=sub.partition, index=sub.index,
                            kafka_next=done_next, sink_next=sink_next))
                        done_next = min(sink_next, sub.end)
            if record.partition != sub.partition or not sub.start <= record.offset < sub.end:
                raise RuntimeError(f"record p{record.partition}@{record.offset} outside the task's sub-range "
                                   f"p{sub.partition}[{sub.start}, {sub.end})")
            if record.offset < done_next:  # done by an earlier attempt of this task (Spark retry)
                summary["skipped"] += 1
                continue
            batch.append(record)
            if len(batch) >= spec.batch_max_records:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
        if sub is not None and kafka_next[0] < sub.end:
            # the range is read to its end (gaps: markers, compaction), or the sink's progress already
            # reached it (a crash after the sink's commit of the last batch, before the progress commit)
            commit(sub.end, done_records)
        yield summary
    except SystemicFailure as exc:
        raise RuntimeError(f"drain task p{sub.partition if sub else '?'} failed: {exc}") from exc
    finally:
        if committer is not None:
            committer.close()
        if dlq is not None:
            dlq.close()
        ctx.close()


# ---- the driver ---------------------------------------------------------------------------------

def _arrow_available() -> bool:
    """mapInArrow needs pyarrow and pandas (the `spark` extra installs both); else the Row path."""
    if os.environ.get("LAGPILOT_DRAIN_ARROW", "1") == "0":
        return False
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def session_conf(plan: DrainPlan, master: str | None, jars: Sequence[str],
                 extra_conf: Mapping[str, str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The drain's Spark settings (pure). ``extra_conf`` (LAGPILOT_SPARK_CONF) wins over everything."""
    e = os.environ if env is None else env
    master = master or f"local[{plan.parallelism},4]"
    conf = {
        "spark.app.name": f"lagpilot-drain-{plan.group_id}-{plan.drain_id}",
        "spark.master": master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.python.worker.reuse": "true",
        "spark.task.maxFailures": "4",
        "spark.driver.memory": e.get("LAGPILOT_SPARK_DRIVER_MEMORY", "1g"),
        "spark.sql.execution.arrow.pyspark.enabled": "false",
        # the JVM hands records to Python in Arrow batches of this many rows: the default 10,000
        # delays a task's first handler batch until the cold JVM has read 10,000 records
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(max(plan.batch_max_records, 1000)),
        # start-up: C1 only (the JVM's work is a Kafka fetch + Arrow copy; the sink is the bottleneck),
        # serial GC (cheaper to start than G1 on a small pod); LAGPILOT_SPARK_DRIVER_JAVA_OPTIONS
        # replaces them; a class-data-sharing archive (LAGPILOT_SPARK_CDS_ARCHIVE) is added when present
        "spark.driver.extraJavaOptions": driver_java_options(e, cds_archive(jars, e) if master.startswith("local") else None),
        # workers fork from a daemon that already imported pyarrow, the handler...
        "spark.python.daemon.module": "lagpilot_runtime.spark_daemon",
    }
    if master.startswith("k8s://"):
        # client mode: executors connect back to this pod by IP; they are owned by this pod
        if e.get("LAGPILOT_POD_IP"):
            conf["spark.driver.host"] = e["LAGPILOT_POD_IP"]
        if e.get("LAGPILOT_POD_NAME"):
            conf["spark.kubernetes.driver.pod.name"] = e["LAGPILOT_POD_NAME"]
    if master.startswith("local-cluster"):
        # separate executor JVMs on this host (bench/drain.py --executors): the driver's start-up options
        conf["spark.executor.extraJavaOptions"] = e.get("LAGPILOT_SPARK_DRIVER_JAVA_OPTIONS", DEFAULT_DRIVER_JAVA_OPTIONS)
    if master.startswith("local"):
        # everything is in this pod/process: no need to resolve (or expose) the host name
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if jars:
        conf["spark.jars"] = ",".join(jars)
        if master.startswith("local"):
            # the connector on the JVM's own class path (not only Spark's jar loader): its classes
            # can then come from the class-data-sharing archive too (same class path at dump and use)
            conf["spark.driver.extraClassPath"] = ":".join(jars)
    conf.update(extra_conf)
    return conf


DEFAULT_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


CDS_ARCHIVE_NAME = "lagpilot-drain.jsa"


def cds_archive(jars: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The class-data-sharing archive to start the driver JVM with, if one exists.

    ``LAGPILOT_SPARK_CDS_ARCHIVE`` (a path; "" or "off" disables), else ``lagpilot-drain.jsa`` next
    to the connector jars (where `lagpilot drain --train-cds` puts it at image build / dev setup).
    """
    value = env.get("LAGPILOT_SPARK_CDS_ARCHIVE")
    if value is not None:
        return value if value not in ("", "off") and Path(value).is_file() else None
    if not jars:
        return None
    candidate = Path(jars[0]).parent / CDS_ARCHIVE_NAME
    return str(candidate) if candidate.is_file() else None


def driver_java_options(env: Mapping[str, str], archive: str | None = None) -> str:
    """The driver JVM's options (local mode: the executors are in it too).

    With an archive the JVM maps Spark's pre-parsed, pre-verified classes instead of loading ~15k
    classes from jars (measured: JVM CPU to the first task 27.6 s → 7.1 s with C1 + the archive).
    ``-Xshare:auto``: an archive from another JDK or class path is ignored, never fatal.
    """
    opts = env.get("LAGPILOT_SPARK_DRIVER_JAVA_OPTIONS", DEFAULT_DRIVER_JAVA_OPTIONS).strip()
    if archive:
        opts = f"{opts} -XX:SharedArchiveFile={archive} -Xshare:auto".strip()
    return opts


def build_session(plan: DrainPlan, master: str | None, jars: Sequence[str], extra_conf: Mapping[str, str],
                  marks: dict[str, float | None] | None = None) -> Any:
    """Start the JVM and the SparkSession; records ``pyspark_imported``/``jvm_up``/``session_ready`` in marks."""
    marks = {} if marks is None else marks
    # the Python workers must be this interpreter (the image's / the venv's), not whatever
    # `python3` is first on PATH: they import lagpilot_runtime and the user's handler
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # spark-submit first runs a small launcher JVM to compute the driver's command line
    os.environ.setdefault("SPARK_LAUNCHER_OPTS", DEFAULT_DRIVER_JAVA_OPTIONS)
    if "SPARK_HOME" not in os.environ:  # else spark-submit and spark-class each start a Python to find it
        from pyspark.find_spark_home import _find_spark_home

        os.environ["SPARK_HOME"] = _find_spark_home()
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    marks["pyspark_imported"] = time.time()
    conf = SparkConf(loadDefaults=False).setAll(list(session_conf(plan, master, jars, extra_conf).items()))
    SparkContext._ensure_initialized(conf=conf)  # spark-submit → the driver JVM (py4j gateway)
    marks["jvm_up"] = time.time()
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    marks["session_ready"] = time.time()
    return spark


class _SessionStarter:
    """Starts the SparkSession in a thread while the driver reads the progress from Kafka."""

    def __init__(self, *args: Any) -> None:
        import threading

        self._args = args
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="spark-session", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = build_session(*self._args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = exc

    def get(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result


def relation_options(topic: str, work: Sequence[tuple[SubRange, int]]) -> list[dict[str, str]]:
    """Reader options of the Kafka relations for the unfinished work (pure).

    One relation per sub-range *index* k, assigning every partition that still has work in its
    k-th sub-range, with that partition's ``[start, end)``: Spark's Kafka source makes one task per
    partition of a relation, so each task is exactly one sub-range, and a plan of P partitions x
    F pieces needs F relations instead of P x F (each relation costs the driver an offset lookup
    and planning work before the first task can start).
    """
    by_index: dict[int, list[tuple[SubRange, int]]] = {}
    for sub, start in work:
        by_index.setdefault(sub.index, []).append((sub, start))
    out = []
    for _, items in sorted(by_index.items()):
        items.sort(key=lambda it: it[0].partition)
        out.append({
            "assign": json.dumps({topic: [s.partition for s, _ in items]}),
            "startingOffsets": json.dumps({topic: {str(s.partition): start for s, start in items}}),
            "endingOffsets": json.dumps({topic: {str(s.partition): s.end for s, _ in items}}),
        })
    return out


def build_frames(spark: Any, plan: DrainPlan, work: Sequence[tuple[SubRange, int]],
                 kafka_opts: Mapping[str, str]) -> list[Any]:
    """One Kafka relation per sub-range index for the unfinished work: one Spark task per sub-range."""
    from pyspark.sql import functions as F

    frames = []
    for opts in relation_options(plan.topic, work):
        reader = spark.read.format("kafka")
        for k, v in {**kafka_opts, **opts}.items():
            reader = reader.option(k, v)
        frames.append(reader.load().select("topic", "partition", "offset", "key", "value", "headers",
                                           F.unix_millis(F.col("timestamp")).alias("ts_ms")))
    return frames


def build_frame(spark: Any, plan: DrainPlan, work: Sequence[tuple[SubRange, int]], kafka_opts: Mapping[str, str]) -> Any:
    """The Kafka relations for the unfinished work, unioned: one Spark task per sub-range."""
    return functools.reduce(lambda a, b: a.unionByName(b), build_frames(spark, plan, work, kafka_opts))


def _switch(env: Mapping[str, str], name: str, default: bool = True) -> bool:
    value = env.get(name)
    return default if value is None or value == "" else value not in ("0", "false", "off", "no")


def collect_in_parallel(spark: Any, jobs: Sequence[Any]) -> tuple[list[dict[str, Any]], list[float]]:
    """Plan and run one Spark job per relation, each from its own thread (pinned to its own JVM thread).

    Spark's Kafka source plans a relation by creating an admin client and asking the broker for the
    partitions and offsets, then validating them: mostly waiting on the network. In one unioned
    plan the relations are planned one after the other; as separate jobs they are planned at once,
    and each relation's tasks start as soon as that relation is planned. The tasks are the same
    (one per sub-range, the same ``[start, end)``). Returns the tasks' summaries and when each job
    was planned. The first failure cancels the other jobs and is raised.
    """
    import threading

    results: list[list[dict[str, Any]]] = [[] for _ in jobs]
    planned: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(i: int, job: Any) -> None:
        try:
            job._jdf.queryExecution().executedPlan()  # Kafka offsets fetched, splits planned
            with lock:
                planned.append(time.time())
            results[i] = [r.asDict() for r in job.collect()]
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            with lock:
                first = not errors
                errors.append(exc)
            if first:
                try:
                    spark.sparkContext.cancelAllJobs()
                except Exception:  # noqa: BLE001
                    pass

    threads = [threading.Thread(target=one, args=(i, j), name=f"drain-job-{i}", daemon=True) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for rs in results for r in rs], planned


def warm_workers(spark: Any, marks: dict[str, float | None]) -> Any:
    """Start the Python worker daemon (its preloads) and one worker with a one-row Arrow job, in a
    thread, while the Kafka relations are planned: the drain's first task then finds the daemon
    ready (and reuses the warm worker) instead of waiting for it. Same eval type (mapInArrow) and
    environment as the drain's tasks, so the same daemon. Best effort: a failure only costs the
    warm-up. Returns the thread."""
    import threading

    def go() -> None:
        try:
            spark.range(0, 1, numPartitions=1).mapInArrow(_train_map, "n long").collect()
            marks["workers_warm"] = time.time()
        except Exception as exc:  # noqa: BLE001
            log.info("warming the Python workers failed", extra=_fields(event="drain_warm_failed", error=str(exc)[:200]))

    t = threading.Thread(target=go, name="drain-warm-workers", daemon=True)
    t.start()
    return t


def _task_marks(results: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The earliest time any task reached each milestone."""
    def first(key: str) -> float | None:
        got = [float(r[key]) for r in results if r.get(key)]
        return min(got) if got else None

    return {"daemon_started": first("daemon_started_at"), "worker_forked": first("worker_forked_at"),
            "task_started": first("task_started_at"), "first_record": first("first_record_at"),
            "first_batch_handled": first("first_batch_at")}


def job_group(plan: DrainPlan) -> str:
    """The Spark job group of a drain attempt: the warm runtime cancels it when its caller goes away."""
    return f"lagpilot-drain-{plan.drain_id}"


def run(plan: DrainPlan, cfg: ConsumerConfig, master: str | None, jars: Sequence[str],
        extra_conf: Mapping[str, str], marks: dict[str, float | None] | None = None,
        warm_session: Any = None) -> dict[str, Any]:
    """Drive one drain attempt; returns a summary. Raises RetentionError / RuntimeError.

    ``marks`` collects the start-up milestones (epoch seconds); the summary carries them and
    ``startup`` (seconds since process start per milestone), also logged as event ``drain_startup``.
    ``warm_session``: a running SparkSession with warm workers (the drain runtime, drain_runtime.py):
    used as is and left running; else this attempt starts its own and stops it at the end.
    """
    marks = {} if marks is None else marks
    t0 = time.time()
    marks.setdefault("main_entered", t0)
    # the JVM and the SparkSession take seconds to start: start them while Kafka is asked for the
    # progress (a finished plan then costs a needless JVM start, but retries of finished plans are rare)
    starter = _SessionStarter(plan, master, jars, extra_conf, marks) if warm_session is None else None
    spark = warm_session
    try:
        progress = read_progress(cfg, plan)
        work = catch_up_to_sink(cfg, plan, remaining_work(plan, progress))
        marks["progress_read"] = time.time()
        use_arrow = bool(work) and _arrow_available()  # imports pandas (mapInArrow needs it) while the JVM starts
        done_before = sum(r for _, r in progress.values())
        log.info("drain plan", extra=_fields(event="drain_plan", drain=plan.drain_id, topic=plan.topic,
                                             sub_ranges=len(plan.sub_ranges), unfinished=len(work),
                                             records_done_before=done_before,
                                             ranges={str(p): list(r) for p, r in plan.partition_ranges().items()}))
        summary: dict[str, Any] = {"drain": plan.drain_id, "sub_ranges": len(plan.sub_ranges),
                                   "unfinished_at_start": len(work), "records_done_before": done_before,
                                   "records": 0, "started_at": marks.get("process_start") or t0}
        if work:
            # retention deleted part of the range before it was read: record exactly what is gone
            # (progress metadata lost=a-b; the operator reports it) and drain the rest, still exact
            lost, work = retention_losses(work, low_watermarks(cfg, plan))
            if lost:
                record_losses(cfg, plan, lost)
                summary["lost"] = [{"partition": s.partition, "index": s.index, "start": a, "end": b} for s, a, b in lost]
                log.warning("records deleted by retention before the drain read them; draining the rest", extra=_fields(
                    event="drain_data_loss", drain=plan.drain_id, topic=plan.topic,
                    lost=[f"p{s.partition}[{a}, {b})" for s, a, b in lost], records=sum(b - a for _, a, b in lost)))
        if work:
            if starter is not None:
                spark = starter.get()
                if use_arrow and _switch(os.environ, "LAGPILOT_DRAIN_WARM_WORKERS"):
                    warm_workers(spark, marks)
            else:  # the runtime's session: this plan's Arrow batch size (one drain at a time)
                spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(max(plan.batch_max_records, 1000)))
            summary["session_ready_at"] = marks.get("session_ready")
            spark.sparkContext.setJobGroup(job_group(plan), f"drain {plan.drain_id}", interruptOnCancel=True)
            kafka_opts = spark_kafka_options(cfg, plan.read_committed)
            spec = TaskSpec(plan.topic, plan.group_id, plan.drain_id, plan.batch_max_records, plan.sub_ranges)
            # one job per relation: off by default (measured under load: no gain, a lower steady rate)
            if use_arrow and _switch(os.environ, "LAGPILOT_DRAIN_PARALLEL_JOBS", default=False):
                jobs = [f.drop("topic").mapInArrow(functools.partial(arrow_task, spec), SUMMARY_SCHEMA)
                        for f in build_frames(spark, plan, work, kafka_opts)]
                marks["job_submitted"] = time.time()
                results, planned = collect_in_parallel(spark, jobs)
                marks["relations_planned"] = max(planned) if planned else None
            elif use_arrow:
                frame = build_frame(spark, plan, work, kafka_opts)
                job = frame.drop("topic").mapInArrow(functools.partial(arrow_task, spec), SUMMARY_SCHEMA)
                job._jdf.queryExecution().executedPlan()  # Kafka offsets fetched, splits planned
                marks["relations_planned"] = time.time()
                marks["job_submitted"] = time.time()
                results = [r.asDict() for r in job.collect()]
            else:
                frame = build_frame(spark, plan, work, kafka_opts)
                marks["relations_planned"] = time.time()
                marks["job_submitted"] = time.time()
                results = frame.rdd.mapPartitions(functools.partial(rdd_task, spec)).collect()
            marks.update(_task_marks(results))
            summary["records"] = sum(r["records"] or 0 for r in results)
            summary["skipped"] = sum(r["skipped"] or 0 for r in results)
            summary["first_batch_at"] = marks.get("first_batch_handled")
            summary["last_batch_at"] = max((r["last_batch_at"] for r in results if r.get("last_batch_at")), default=None)
            summary["startup"] = startup_breakdown(marks)
            summary["marks"] = {k: v for k, v in marks.items() if v is not None}
            log.info("drain start-up", extra=_fields(event="drain_startup", drain=plan.drain_id, tasks=len(work),
                                                     **summary["startup"]))
    finally:
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
    after = read_progress(cfg, plan)
    unfinished = remaining_work(plan, after)
    summary["records_done"] = sum(r for _, r in after.values())
    summary["finished_at"] = time.time()
    if unfinished:
        raise RuntimeError(f"{len(unfinished)} sub-range(s) unfinished after the Spark job: "
                           + ", ".join(f"p{s.partition}#{s.index}@{n}/{s.end}" for s, n in unfinished[:5]))
    return summary


# ---- the class-data-sharing archive ------------------------------------------------------------

def _train_map(batches: Iterable[Any]) -> Iterator[Any]:
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pylist([{"n": n}], schema=pa.schema([("n", pa.int64())]))


def train_cds(archive: str, jars: Sequence[str], bootstrap: str = "127.0.0.1:9", timeout_s: float = 600.0) -> bool:
    """Write a class-data-sharing archive of the classes a drain loads (run once per image / dev cache).

    Starts the drain's JVM with ``-XX:ArchiveClassesAtExit``, plans a Kafka relation (against
    ``bootstrap``; an unreachable one fails fast after the planning classes are loaded), runs an
    Arrow map over a small frame shaped like Kafka rows through the drain's worker daemon, stops,
    and waits for the JVM to write the archive on exit. Atomic: written to a temp name, renamed.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    target = Path(archive)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    plan = DrainPlan("cds", "lagpilot-cds-training", "lagpilot-cds", (SubRange(0, 0, 0, 1000),), 100, 2)
    env = dict(os.environ, LAGPILOT_SPARK_CDS_ARCHIVE="off")
    conf = session_conf(plan, "local[2]", jars, {}, env)
    conf["spark.driver.extraJavaOptions"] = f"{driver_java_options(env)} -XX:ArchiveClassesAtExit={tmp}"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LAUNCHER_OPTS", DEFAULT_DRIVER_JAVA_OPTIONS)
    sconf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    SparkContext._ensure_initialized(conf=sconf)
    gateway_proc = SparkContext._gateway.proc
    spark = SparkSession.builder.config(conf=sconf).getOrCreate()
    try:
        reader = spark.read.format("kafka")
        opts = {"kafka.bootstrap.servers": bootstrap, "kafka.default.api.timeout.ms": "3000",
                "kafka.request.timeout.ms": "2000", "fetchOffset.numRetries": "1", "failOnDataLoss": "true",
                "includeHeaders": "true", **read_options(plan.topic, plan.sub_ranges[0], 0)}
        for k, v in opts.items():
            reader = reader.option(k, v)
        kafka_df = reader.load().select("topic", "partition", "offset", "key", "value", "headers",
                                        F.unix_millis(F.col("timestamp")).alias("ts_ms"))
        try:
            kafka_df.drop("topic").mapInArrow(_train_map, "n long")._jdf.queryExecution().executedPlan()
        except Exception:  # noqa: BLE001 - no broker: the planning classes are loaded all the same
            pass
        rows = spark.range(0, 5000, numPartitions=2).select(
            F.lit("t").alias("topic"), F.col("id").cast("int").alias("partition"), F.col("id").alias("offset"),
            F.col("id").cast("string").cast("binary").alias("key"), F.col("id").cast("string").cast("binary").alias("value"),
            F.array(F.struct(F.lit("h").alias("key"), F.lit(b"v").alias("value"))).alias("headers"),
            F.unix_millis(F.current_timestamp()).alias("ts_ms"))
        rows.drop("topic").mapInArrow(_train_map, "n long").collect()
    finally:
        spark.stop()
    gateway_proc.stdin.close()  # the gateway JVM exits on EOF and writes the archive
    gateway_proc.wait(timeout=timeout_s)
    if not tmp.is_file():
        return False
    tmp.replace(target)
    return True


def _short_error(exc: BaseException) -> str:
    """One line for status/events: Spark wraps the Python error deep inside a Java trace."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error:" in ln or "Exception:" in ln) and not ln.startswith("at "):
            return ln[:500]
    return (lines[0] if lines else type(exc).__name__)[:500]


def _termination_message(text: str) -> None:
    """Kubernetes shows /dev/termination-log in the pod status: the operator reads the cause there."""
    try:
        with open(TERMINATION_LOG, "w") as fh:
            fh.write(text[:4000])
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    marks: dict[str, float | None] = {"process_start": process_start_time(), "main_entered": time.time()}
    from . import drain_runtime, jsonlog

    ap = argparse.ArgumentParser(prog="lagpilot drain", description="Drain explicit offset ranges with Spark, "
                                 "calling the consumer's batch handler. Configured by the consumer environment.")
    ap.add_argument("--plan", help="plan JSON (default: $LAGPILOT_DRAIN_PLAN)")
    ap.add_argument("--master", help="Spark master (default: $LAGPILOT_SPARK_MASTER or local[<parallelism>,4])")
    ap.add_argument("--jars", help="connector jars, comma separated or a directory (default: $LAGPILOT_SPARK_JARS)")
    ap.add_argument("--summary-file", help="write the JSON summary here (benchmarks, tests)")
    ap.add_argument("--serve", action="store_true", help="run the warm drain runtime: keep a Spark session and "
                    f"warm workers, run plans sent to ${drain_runtime.PORT_ENV} (drain_runtime.py)")
    ap.add_argument("--train-cds", metavar="ARCHIVE", help="only write the JVM class-data-sharing archive "
                    f"(image build / dev setup; the drain uses {CDS_ARCHIVE_NAME} next to the jars) and exit")
    args = ap.parse_args(list(argv) if argv is not None else None)
    jsonlog.setup(os.environ.get("LAGPILOT_LOG_LEVEL", "INFO").upper())
    if args.train_cds:
        t = time.time()
        ok = train_cds(args.train_cds, resolve_jars(args.jars or os.environ.get("LAGPILOT_SPARK_JARS")))
        log.info("cds archive", extra=_fields(event="drain_cds_archive", path=args.train_cds, written=ok,
                                               seconds=round(time.time() - t, 1)))
        return EXIT_OK if ok else EXIT_FAILED
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
    master = args.master or os.environ.get("LAGPILOT_SPARK_MASTER") or None
    jars = resolve_jars(args.jars or os.environ.get("LAGPILOT_SPARK_JARS"))
    extra_conf = {str(k): str(v) for k, v in extra.items()}
    if args.serve:
        return drain_runtime.serve(cfg, master, jars, extra_conf)
    assert plan is not None
    outcome: drain_runtime.Outcome | None = None
    url = os.environ.get(drain_runtime.RUNTIME_URL_ENV)
    if url:
        def terminated(signum: int, frame: Any) -> None:
            raise drain_runtime.Terminated()

        # the Job deleted (cancel, finalizer): stop waiting, let the runtime cancel, wait for it
        signal.signal(signal.SIGTERM, terminated)
        try:
            outcome = drain_runtime.request(url, plan)
            log.info("the drain ran in the warm runtime", extra=_fields(event="drain_runtime_used", drain=plan.drain_id,
                                                                          exit=outcome.exit))
        except drain_runtime.Unreachable as exc:
            log.info("no warm drain runtime: draining here", extra=_fields(event="drain_runtime_unreachable",
                                                                          drain=plan.drain_id, reason=str(exc)))
    if outcome is None:
        outcome = drain_runtime.outcome_of(lambda: run(plan, cfg, master, jars, extra_conf, marks))
    if outcome.exit == EXIT_OK:
        summary = dict(outcome.summary or {})
        log.info("drain finished", extra=_fields(event="drain_finished", **summary))
        if args.summary_file:
            Path(args.summary_file).write_text(json.dumps(summary))
    else:
        event = "drain_data_loss" if outcome.exit == EXIT_DATA_LOSS else "drain_failed"
        log.error(outcome.message, extra=_fields(event=event, drain=plan.drain_id))
        _termination_message(outcome.message)
    return outcome.exit


if __name__ == "__main__":
    sys.exit(main())
