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
2 bad configuration or plan, 3 the range is gone (retention deleted records before they were drained).
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, ConsumerConfig
from .drain_plan import DrainPlan, SubRange, parse_progress_metadata, progress_group, progress_metadata

log = logging.getLogger("lagpilot.drain")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_DATA_LOSS = 0, 1, 2, 3
TERMINATION_LOG = "/dev/termination-log"


class RetentionError(Exception):
    """Records of the range were deleted by retention before the drain read them."""


def _fields(**kw: Any) -> dict[str, Any]:
    return {"fields": kw}


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
    return run_task(spec, ((int(r.lp_sub), _row_record(r)) for r in rows))


SUMMARY_SCHEMA = ("records long, batches long, skipped long, first_batch_at double, last_batch_at double, "
                  "partition long, index long")


def arrow_task(spec: TaskSpec, batches: Iterable[Any]) -> Iterator[Any]:
    """The Arrow path (`mapInArrow`): columnar batches from the JVM, about twice as fast as Rows."""
    import pyarrow as pa

    from .handler import Record

    def items() -> Iterator[tuple[int, Any]]:
        for rb in batches:
            d = rb.to_pydict()
            topic = spec.topic  # one topic per plan: no need to ship the column
            for p, o, k, v, hs, ts, sub in zip(d["partition"], d["offset"], d["key"], d["value"],
                                               d["headers"], d["ts_ms"], d["lp_sub"]):
                headers = [(h["key"], h["value"] if h["value"] is not None else b"") for h in hs] if hs else []
                yield sub, Record(topic, p, o, k, v, headers, ts)

    schema = pa.schema([("records", pa.int64()), ("batches", pa.int64()), ("skipped", pa.int64()),
                        ("first_batch_at", pa.float64()), ("last_batch_at", pa.float64()),
                        ("partition", pa.int64()), ("index", pa.int64())])
    for summary in run_task(spec, items()):
        yield pa.RecordBatch.from_pylist([{f.name: summary.get(f.name) for f in schema}], schema=schema)


def run_task(spec: TaskSpec, items: Iterable[tuple[int, Any]]) -> Iterator[dict[str, Any]]:
    """Process one sub-range's records: batches through the handler, progress commit after each.

    ``items`` are (sub-range index in the plan, Record), in offset order.

    Yields one summary dict (records, batches, first/last batch wall time) for the driver's log.
    """
    from confluent_kafka import TopicPartition

    from . import jsonlog
    from .failure import DeadLetterProducer, RetryPolicy, SystemicFailure, run_batch
    from .handler import BatchContext, load_handler

    cfg = ConsumerConfig.from_env()
    jsonlog.setup(cfg.log_level)
    handler = load_handler(cfg.handler_spec)
    ctx = BatchContext(config=dict(cfg.handler_config), logger=logging.getLogger("lagpilot.handler"),
                       source="drain", concurrency=cfg.concurrency)
    policy = RetryPolicy(max_retries=cfg.max_retries, backoff_ms=cfg.retry_backoff_ms)
    summary: dict[str, Any] = {"records": 0, "batches": 0, "skipped": 0, "first_batch_at": None, "last_batch_at": None}
    sub: SubRange | None = None
    committer = None
    done_next = 0
    done_records = 0
    dlq: DeadLetterProducer | None = None

    def commit(next_offset: int, records: int) -> None:
        tp = TopicPartition(spec.topic, sub.partition, next_offset, metadata=progress_metadata(records))  # type: ignore[union-attr]
        for attempt in range(5):
            try:
                res = committer.commit(offsets=[tp], asynchronous=False)
                errs = [t.error for t in (res or []) if getattr(t, "error", None)]
                if errs:
                    raise RuntimeError(str(errs[0]))
                return
            except Exception as exc:  # noqa: BLE001 - retried, then fails the task (Spark retries it)
                if attempt == 4:
                    raise RuntimeError(f"progress commit failed: {exc}") from exc
                time.sleep(0.2 * (attempt + 1))

    def flush(batch: list[Any]) -> None:
        nonlocal done_next, done_records, dlq
        result = run_batch(batch, lambda piece: handler(piece, ctx), policy, sleep=time.sleep)
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
        for sub_index, record in items:
            if sub is None:
                sub = spec.sub_ranges[sub_index]
                summary.update(partition=sub.partition, index=sub.index)
                committer = _progress_consumer(cfg, progress_group(spec.group_id, spec.drain_id, sub.index))
                got = committer.committed([TopicPartition(spec.topic, sub.partition)], timeout=30)[0]
                done_next = got.offset if got.offset is not None and got.offset >= 0 else sub.start
                done_records = parse_progress_metadata(getattr(got, "metadata", None)) if got.offset >= 0 else 0
            if record.offset < done_next:  # done by an earlier attempt of this task (Spark retry)
                summary["skipped"] += 1
                continue
            batch.append(record)
            if len(batch) >= spec.batch_max_records:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
        if sub is not None and done_next < sub.end:
            commit(sub.end, done_records)  # the range is read to its end (gaps: markers, compaction)
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


def build_session(plan: DrainPlan, master: str | None, jars: Sequence[str], extra_conf: Mapping[str, str]) -> Any:
    from pyspark.sql import SparkSession

    # the Python workers must be this interpreter (the image's / the venv's), not whatever
    # `python3` is first on PATH: they import lagpilot_runtime and the user's handler
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or f"local[{plan.parallelism},4]"
    builder = (SparkSession.builder.appName(f"lagpilot-drain-{plan.group_id}-{plan.drain_id}")
               .master(master)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.python.worker.reuse", "true")
               .config("spark.task.maxFailures", "4")
               .config("spark.driver.memory", os.environ.get("LAGPILOT_SPARK_DRIVER_MEMORY", "1g"))
               .config("spark.sql.execution.arrow.pyspark.enabled", "false")
               # workers fork from a daemon that already imported pyarrow, pandas, the handler...
               .config("spark.python.daemon.module", "lagpilot_runtime.spark_daemon"))
    if master.startswith("k8s://"):
        # client mode: executors connect back to this pod by IP; they are owned by this pod
        if os.environ.get("LAGPILOT_POD_IP"):
            builder = builder.config("spark.driver.host", os.environ["LAGPILOT_POD_IP"])
        if os.environ.get("LAGPILOT_POD_NAME"):
            builder = builder.config("spark.kubernetes.driver.pod.name", os.environ["LAGPILOT_POD_NAME"])
    if master.startswith("local"):
        # everything is in this pod/process: no need to resolve (or expose) the host name
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for k, v in extra_conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def build_frame(spark: Any, plan: DrainPlan, work: Sequence[tuple[SubRange, int]], kafka_opts: Mapping[str, str]) -> Any:
    """One Kafka relation per unfinished sub-range, unioned: one Spark task per sub-range."""
    from pyspark.sql import functions as F

    index_of = {(s.partition, s.index): i for i, s in enumerate(plan.sub_ranges)}
    frames = []
    for sub, start in work:
        reader = spark.read.format("kafka")
        for k, v in {**kafka_opts, **read_options(plan.topic, sub, start)}.items():
            reader = reader.option(k, v)
        df = reader.load().select(
            "topic", "partition", "offset", "key", "value", "headers",
            F.unix_millis(F.col("timestamp")).alias("ts_ms"),
            F.lit(index_of[(sub.partition, sub.index)]).alias("lp_sub"),
        )
        frames.append(df)
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def run(plan: DrainPlan, cfg: ConsumerConfig, master: str | None, jars: Sequence[str],
        extra_conf: Mapping[str, str]) -> dict[str, Any]:
    """Drive one drain attempt; returns a summary. Raises RetentionError / RuntimeError."""
    t0 = time.time()
    progress = read_progress(cfg, plan)
    work = remaining_work(plan, progress)
    done_before = sum(r for _, r in progress.values())
    log.info("drain plan", extra=_fields(event="drain_plan", drain=plan.drain_id, topic=plan.topic,
                                         sub_ranges=len(plan.sub_ranges), unfinished=len(work),
                                         records_done_before=done_before,
                                         ranges={str(p): list(r) for p, r in plan.partition_ranges().items()}))
    summary: dict[str, Any] = {"drain": plan.drain_id, "sub_ranges": len(plan.sub_ranges), "unfinished_at_start": len(work),
                               "records_done_before": done_before, "records": 0, "started_at": t0}
    if work:
        check_retention(plan, work, low_watermarks(cfg, plan))
        spark = build_session(plan, master, jars, extra_conf)
        summary["session_ready_at"] = time.time()
        try:
            frame = build_frame(spark, plan, work, spark_kafka_options(cfg, plan.read_committed))
            spec = TaskSpec(plan.topic, plan.group_id, plan.drain_id, plan.batch_max_records, plan.sub_ranges)
            if _arrow_available():
                results = [r.asDict() for r in frame.drop("topic").mapInArrow(functools.partial(arrow_task, spec), SUMMARY_SCHEMA).collect()]
            else:
                results = frame.rdd.mapPartitions(functools.partial(rdd_task, spec)).collect()
        finally:
            spark.stop()
        summary["records"] = sum(r["records"] or 0 for r in results)
        summary["skipped"] = sum(r["skipped"] or 0 for r in results)
        firsts = [r["first_batch_at"] for r in results if r.get("first_batch_at")]
        summary["first_batch_at"] = min(firsts) if firsts else None
        summary["last_batch_at"] = max((r["last_batch_at"] for r in results if r.get("last_batch_at")), default=None)
    after = read_progress(cfg, plan)
    unfinished = remaining_work(plan, after)
    summary["records_done"] = sum(r for _, r in after.values())
    summary["finished_at"] = time.time()
    if unfinished:
        raise RuntimeError(f"{len(unfinished)} sub-range(s) unfinished after the Spark job: "
                           + ", ".join(f"p{s.partition}#{s.index}@{n}/{s.end}" for s, n in unfinished[:5]))
    return summary


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
    from . import jsonlog

    ap = argparse.ArgumentParser(prog="lagpilot drain", description="Drain explicit offset ranges with Spark, "
                                 "calling the consumer's batch handler. Configured by the consumer environment.")
    ap.add_argument("--plan", help="plan JSON (default: $LAGPILOT_DRAIN_PLAN)")
    ap.add_argument("--master", help="Spark master (default: $LAGPILOT_SPARK_MASTER or local[<parallelism>,4])")
    ap.add_argument("--jars", help="connector jars, comma separated or a directory (default: $LAGPILOT_SPARK_JARS)")
    ap.add_argument("--summary-file", help="write the JSON summary here (benchmarks, tests)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    jsonlog.setup(os.environ.get("LAGPILOT_LOG_LEVEL", "INFO").upper())
    try:
        cfg = ConsumerConfig.from_env()
        plan = DrainPlan.from_json(args.plan or os.environ.get("LAGPILOT_DRAIN_PLAN") or "")
        if plan.topic != cfg.topic or plan.group_id != cfg.group_id:
            raise ValueError("the plan's topic/groupId differ from LAGPILOT_TOPIC/LAGPILOT_GROUP_ID")
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
    try:
        summary = run(plan, cfg, master, jars, {str(k): str(v) for k, v in extra.items()})
    except RetentionError as exc:
        log.error(str(exc), extra=_fields(event="drain_data_loss", drain=plan.drain_id))
        _termination_message(str(exc))
        return EXIT_DATA_LOSS
    except Exception as exc:  # noqa: BLE001 - any failure ends the attempt; the operator retries
        text = _short_error(exc)
        log.error("drain attempt failed", extra=_fields(event="drain_failed", drain=plan.drain_id, error=text))
        _termination_message(f"drain failed: {text}")
        return EXIT_FAILED
    log.info("drain finished", extra=_fields(event="drain_finished", **{k: v for k, v in summary.items()}))
    if args.summary_file:
        Path(args.summary_file).write_text(json.dumps(summary))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
