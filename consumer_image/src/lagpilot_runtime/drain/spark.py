"""The drain's Spark side, run in its driver: the Kafka source's options, the SparkSession and its
settings (JVM options, the class-data-sharing archive), the Kafka relations of a plan's unfinished
work (one Spark task per sub-range), and warming the Python workers. Pure where it can be
(``session_conf``, ``relation_options``, ``spark_kafka_options``); the rest needs pyspark.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import ConsumerConfig
from ..jsonlog import fields as _fields
from .plan import DrainPlan, SubRange

log = logging.getLogger("lagpilot.drain")


OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_LOGIN_CALLBACK_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


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
    if cfg.security_protocol.startswith("SASL_") and cfg.sasl_mechanism == "OAUTHBEARER":
        # OIDC client credentials with kafka-clients' own login handler: it fetches the token at
        # the token endpoint and refreshes it before expiry (KIP-768)
        jaas = (
            f"{OAUTH_LOGIN_MODULE} required clientId={_jaas_quote(cfg.oauth_client_id or '')} "
            f"clientSecret={_jaas_quote(cfg.oauth_client_secret or '')}"
        )
        if cfg.oauth_scope:
            jaas += f" scope={_jaas_quote(cfg.oauth_scope)}"
        opts["kafka.sasl.mechanism"] = "OAUTHBEARER"
        opts["kafka.sasl.jaas.config"] = jaas + ";"
        opts["kafka.sasl.login.callback.handler.class"] = OAUTH_LOGIN_CALLBACK_HANDLER
        opts["kafka.sasl.oauthbearer.token.endpoint.url"] = cfg.oauth_token_endpoint_url or ""
    elif cfg.security_protocol.startswith("SASL_"):
        mech = cfg.sasl_mechanism or "PLAIN"
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mech == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        opts["kafka.sasl.mechanism"] = mech
        opts["kafka.sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(cfg.sasl_username or '')} "
            f"password={_jaas_quote(cfg.sasl_password or '')};"
        )
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


def session_conf(
    plan: DrainPlan,
    master: str | None,
    jars: Sequence[str],
    extra_conf: Mapping[str, str],
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
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
        # a busy drain runs a next part's sub-ranges as another job beside the passes under way
        # (drain_job._Attempt): FIFO gives a free slot to the earliest job's waiting task, so older
        # ranges go first and a later job's tasks start on the slots the running ones free
        "spark.scheduler.mode": "FIFO",
        "spark.driver.memory": e.get("LAGPILOT_SPARK_DRIVER_MEMORY", "1g"),
        "spark.sql.execution.arrow.pyspark.enabled": "false",
        # the JVM hands records to Python in Arrow batches of this many rows: the default 10,000
        # delays a task's first handler batch until the cold JVM has read 10,000 records
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(max(plan.batch_max_records, 1000)),
        # start-up: C1 only (the JVM's work is a Kafka fetch + Arrow copy; the sink is the bottleneck),
        # serial GC (cheaper to start than G1 on a small pod); LAGPILOT_SPARK_DRIVER_JAVA_OPTIONS
        # replaces them; a class-data-sharing archive (LAGPILOT_SPARK_CDS_ARCHIVE) is added when present
        "spark.driver.extraJavaOptions": driver_java_options(
            e, cds_archive(jars, e) if master.startswith("local") else None
        ),
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
        conf["spark.executor.extraJavaOptions"] = e.get(
            "LAGPILOT_SPARK_DRIVER_JAVA_OPTIONS", DEFAULT_DRIVER_JAVA_OPTIONS
        )
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


def build_session(
    plan: DrainPlan,
    master: str | None,
    jars: Sequence[str],
    extra_conf: Mapping[str, str],
    marks: dict[str, float | None] | None = None,
) -> Any:
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
        out.append(
            {
                "assign": json.dumps({topic: [s.partition for s, _ in items]}),
                "startingOffsets": json.dumps({topic: {str(s.partition): start for s, start in items}}),
                "endingOffsets": json.dumps({topic: {str(s.partition): s.end for s, _ in items}}),
            }
        )
    return out


def build_frames(
    spark: Any, plan: DrainPlan, work: Sequence[tuple[SubRange, int]], kafka_opts: Mapping[str, str]
) -> list[Any]:
    """One Kafka relation per sub-range index for the unfinished work: one Spark task per sub-range."""
    from pyspark.sql import functions as F

    frames = []
    for opts in relation_options(plan.topic, work):
        reader = spark.read.format("kafka")
        for k, v in {**kafka_opts, **opts}.items():
            reader = reader.option(k, v)
        frames.append(
            reader.load().select(
                "topic",
                "partition",
                "offset",
                "key",
                "value",
                "headers",
                F.unix_millis(F.col("timestamp")).alias("ts_ms"),
            )
        )
    return frames


def build_frame(
    spark: Any, plan: DrainPlan, work: Sequence[tuple[SubRange, int]], kafka_opts: Mapping[str, str]
) -> Any:
    """The Kafka relations for the unfinished work, unioned: one Spark task per sub-range."""
    return functools.reduce(lambda a, b: a.unionByName(b), build_frames(spark, plan, work, kafka_opts))


def _switch(env: Mapping[str, str], name: str, default: bool = True) -> bool:
    value = env.get(name)
    return default if value is None or value == "" else value not in ("0", "false", "off", "no")


def task_ranges(partitions: Iterable[Any]) -> list[list[int]]:
    """``[[kafka partition, start offset], ...]`` by task partition index, read from a planned drain job's
    RDD partitions (JVM objects through py4j): a union's ``UnionPartition`` unwrapped to its parent's,
    then the Kafka source's ``offsetRange()`` (measured on Spark 4.2: MapInArrow or the Row path's RDD
    over a Union of Kafka scans). Raises when a partition is of another shape."""
    out: list[list[int]] = []
    for i, part in enumerate(partitions):
        if int(part.index()) != i:
            raise RuntimeError(f"partition {i} has index {part.index()}")
        p = part
        for _ in range(16):
            if not str(p.getClass().getName()).endswith(".UnionPartition"):
                break
            p = p.parentPartition()
        r = p.offsetRange()
        out.append([int(r.topicPartition().partition()), int(r.fromOffset())])
    return out


def name_tasks(spark: Any, partitions_of: Any, drain_id: str) -> bool:
    """Before a drain job is submitted (in its submitting thread): the job's local property
    ``lagpilot.drain.taskRanges`` names each task's Kafka range, so a task knows its sub-range before
    it reads a record and shows its sign of life at once (``drain_task._named_by_driver``). Best
    effort: when the partitions cannot be read the property is cleared, and the tasks are named by
    their first record as before (logged)."""
    from .task import TASK_RANGES_PROPERTY

    sc = spark.sparkContext
    try:
        ranges = task_ranges(partitions_of())
    except Exception as exc:  # noqa: BLE001 - the tasks fall back to their first record
        sc.setLocalProperty(TASK_RANGES_PROPERTY, None)
        log.info(
            "drain tasks not named before the job (their first record names them)",
            extra=_fields(event="drain_tasks_not_named", drain=drain_id, error=str(exc)[:300]),
        )
        return False
    sc.setLocalProperty(TASK_RANGES_PROPERTY, json.dumps(ranges))
    return True


def planned_partitions(job: Any) -> Any:
    """A mapInArrow job's RDD partitions, from its planned physical plan (no Spark job runs)."""
    return job._jdf.queryExecution().executedPlan().execute().partitions()


def collect_in_parallel(
    spark: Any, jobs: Sequence[Any], drain_id: str = ""
) -> tuple[list[dict[str, Any]], list[float]]:
    """Plan and run one Spark job per relation, each from its own thread (pinned to its own JVM thread).

    Spark's Kafka source plans a relation by creating an admin client and asking the broker for the
    partitions and offsets, then validating them: mostly waiting on the network. In one unioned
    plan the relations are planned one after the other; as separate jobs they are planned at once,
    and each relation's tasks start as soon as that relation is planned. The tasks are the same
    (one per sub-range, the same ``[start, end)``). Returns the tasks' summaries and when each job
    was planned. The first failure cancels the other jobs and is raised.

    Each thread runs its job in the caller's Spark job group (``drain_job._spark_job`` sets the
    attempt's): PySpark pins every Python thread to a JVM thread of its own, whose local properties
    a plain thread does not inherit, so without this a cancel by job group (the warm runtime when its
    caller goes away, ``_Attempt.stop_passes``) would miss these jobs.
    """
    import threading

    results: list[list[dict[str, Any]]] = [[] for _ in jobs]
    planned: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    sc = spark.sparkContext
    group = sc.getLocalProperty("spark.jobGroup.id")
    description = sc.getLocalProperty("spark.job.description") or ""
    interrupt = sc.getLocalProperty("spark.job.interruptOnCancel") == "true"

    def one(i: int, job: Any) -> None:
        try:
            if group:
                sc.setJobGroup(group, description, interruptOnCancel=interrupt)
            job._jdf.queryExecution().executedPlan()  # Kafka offsets fetched, splits planned
            with lock:
                planned.append(time.time())
            name_tasks(spark, lambda: planned_partitions(job), drain_id)
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

    threads = [
        threading.Thread(target=one, args=(i, j), name=f"drain-job-{i}", daemon=True)
        for i, j in enumerate(jobs)
    ]
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
            log.info(
                "warming the Python workers failed",
                extra=_fields(event="drain_warm_failed", error=str(exc)[:200]),
            )

    t = threading.Thread(target=go, name="drain-warm-workers", daemon=True)
    t.start()
    return t


def _train_map(batches: Iterable[Any]) -> Iterator[Any]:
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pylist([{"n": n}], schema=pa.schema([("n", pa.int64())]))


def train_cds(
    archive: str, jars: Sequence[str], bootstrap: str = "127.0.0.1:9", timeout_s: float = 600.0
) -> bool:
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
    gateway: Any = SparkContext._gateway  # set by _ensure_initialized (None only before it)
    gateway_proc = gateway.proc
    spark = SparkSession.builder.config(conf=sconf).getOrCreate()
    try:
        reader = spark.read.format("kafka")
        opts = {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.default.api.timeout.ms": "3000",
            "kafka.request.timeout.ms": "2000",
            "fetchOffset.numRetries": "1",
            "failOnDataLoss": "true",
            "includeHeaders": "true",
            **read_options(plan.topic, plan.sub_ranges[0], 0),
        }
        for k, v in opts.items():
            reader = reader.option(k, v)
        kafka_df = reader.load().select(
            "topic",
            "partition",
            "offset",
            "key",
            "value",
            "headers",
            F.unix_millis(F.col("timestamp")).alias("ts_ms"),
        )
        try:
            kafka_df.drop("topic").mapInArrow(_train_map, "n long")._jdf.queryExecution().executedPlan()
        except Exception:  # noqa: BLE001 - no broker: the planning classes are loaded all the same
            pass
        rows = spark.range(0, 5000, numPartitions=2).select(
            F.lit("t").alias("topic"),
            F.col("id").cast("int").alias("partition"),
            F.col("id").alias("offset"),
            F.col("id").cast("string").cast("binary").alias("key"),
            F.col("id").cast("string").cast("binary").alias("value"),
            F.array(F.struct(F.lit("h").alias("key"), F.lit(b"v").alias("value"))).alias("headers"),
            F.unix_millis(F.current_timestamp()).alias("ts_ms"),
        )
        rows.drop("topic").mapInArrow(_train_map, "n long").collect()
    finally:
        spark.stop()
    gateway_proc.stdin.close()  # the gateway JVM exits on EOF and writes the archive
    gateway_proc.wait(timeout=timeout_s)
    if not tmp.is_file():
        return False
    tmp.replace(target)
    return True


EXECUTOR_POD_TEMPLATE_ENV = "LAGPILOT_SPARK_EXECUTOR_POD_TEMPLATE"


def executor_pod_template_conf(
    env: Mapping[str, str], directory: str | os.PathLike[str] = "/tmp/lagpilot-spark"
) -> dict[str, str]:
    """Spark on Kubernetes: the executor pod template the operator rendered (env
    LAGPILOT_SPARK_EXECUTOR_POD_TEMPLATE, JSON: restricted securityContext, no token) written to a
    file under ``directory`` (/tmp: the root filesystem is read-only) and named in
    ``spark.kubernetes.executor.podTemplateFile``; {} without it (local mode)."""
    text = env.get(EXECUTOR_POD_TEMPLATE_ENV) or ""
    if not text.strip():
        return {}
    json.loads(text)  # a malformed template is a configuration error, not a Spark one
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(os.fspath(directory), "executor-pod-template.json")
    with open(path, "w") as fh:
        fh.write(text)
    return {"spark.kubernetes.executor.podTemplateFile": path}
