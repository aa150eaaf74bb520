"""The drain executor: performs what the pure hand-off state machine (`handoff.next_action`) asks.

Called once per control-loop cycle by reconcile.py, after the scaler acted and before the status
write (`DrainExecutor.reconcile`). Within one call it loops observe → next_action → act → write
`status.drain` until the machine has to wait (owners to acknowledge, the Job running, a retry
back-off), so the hand-off itself (publish → acks observed → seal → create the Job) runs back to
back. The hand-off mailbox (`lagpilot_runtime.handoff_mailbox`) is read with the per-group offsets
readers (never the admin OffsetFetch, which crashes librdkafka) and written with
`alter_consumer_group_offsets` (the mailbox group never has members). While phase Planned, every
observation reads the group's committed offsets BEFORE the mailbox (the ordering the exactness
argument needs, docs/drain.md).

Every effect comes first and its status write right after (`Action.status`), and the state machine
is built so that a lost write is recognised from Kafka and the API server on the next call. Job
names are deterministic (`<cr>-drain-<id>-<attempt>`): a Job created before a lost status write is
adopted (409), never duplicated.

Also here, pure and unit-tested: `build_drain_job` (the Job manifest, owned by the CR, running
`lagpilot drain` in the consumer image; Secret material only through secretKeyRef) and
`drain_plan_for` (status → the plan handed to the job).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime.drain_plan import (DrainPlan, SubRange, parallelism_for, parse_progress_lost, parse_progress_metadata,
                                        progress_group)

from .deployment import build_env, label_value, owner_reference
from .handoff import (ACK_TIMEOUT_S, Action, DrainStatus, JobObservation, JobState, Kind, Observed, Offsets, Phase,
                      condition, data_loss_condition, job_name, next_action)
from .spec import GroupSpec

log = logging.getLogger(__name__)

MAX_STEPS = 8  # actions per call; the machine waits (Kind.NONE) long before that
DRAIN_LABEL = "lagpilot.io/drain"
JOB_LABEL = "lagpilot.io/drain-job"


@dataclasses.dataclass(frozen=True)
class DrainSettings:
    """Operator-wide drain settings (operator environment; all optional).

    - LAGPILOT_DRAIN_SPARK_JARS: where the Kafka connector jars are inside the consumer image
      (default /opt/lagpilot/spark-jars; the test stack points it at its cache). A JVM
      class-data-sharing archive `lagpilot-drain.jsa` in that directory (written by
      `lagpilot drain --train-cds` at image build / by the dev stack) halves the drain's start-up.
    - LAGPILOT_DRAIN_SPARK_MASTER: empty (default) runs Spark in local mode inside the Job's pod
      (`local[<parallelism>]`); `k8s://https://kubernetes.default.svc` runs it in client mode with
      executors as pods (needs LAGPILOT_DRAIN_SERVICE_ACCOUNT with rights on pods; docs/drain.md).
    - LAGPILOT_DRAIN_SERVICE_ACCOUNT: the Job pod's ServiceAccount (k8s master only): the chart's
      drain ServiceAccount, whose Role allows pods/services/configmaps in the drain namespace.
    - LAGPILOT_DRAIN_EXECUTOR_CORES (default 2) / LAGPILOT_DRAIN_EXECUTOR_MEMORY (default 1g): each
      executor pod's task slots and JVM heap (k8s master only); the executor count is
      ceil(parallelism / cores).
    - LAGPILOT_DRAIN_JOB_TTL_SECONDS: finished Jobs are deleted after this long (default 3600).
    - LAGPILOT_DRAIN_CPU_PER_TASK: CPU request per running task in local mode (default 250m):
      the sink is usually latency-bound, so tasks need little CPU.
    """

    spark_jars: str = "/opt/lagpilot/spark-jars"
    spark_master: str = ""
    service_account: str = ""
    job_ttl_seconds: int = 3600
    cpu_per_task_m: int = 250
    executor_cores: int = 2
    executor_memory: str = "1g"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "DrainSettings":
        e = os.environ if env is None else env
        return cls(
            spark_jars=e.get("LAGPILOT_DRAIN_SPARK_JARS") or cls.spark_jars,
            spark_master=e.get("LAGPILOT_DRAIN_SPARK_MASTER") or "",
            service_account=e.get("LAGPILOT_DRAIN_SERVICE_ACCOUNT") or "",
            job_ttl_seconds=int(e.get("LAGPILOT_DRAIN_JOB_TTL_SECONDS") or cls.job_ttl_seconds),
            cpu_per_task_m=int(e.get("LAGPILOT_DRAIN_CPU_PER_TASK_M") or cls.cpu_per_task_m),
            executor_cores=max(1, int(e.get("LAGPILOT_DRAIN_EXECUTOR_CORES") or cls.executor_cores)),
            executor_memory=e.get("LAGPILOT_DRAIN_EXECUTOR_MEMORY") or cls.executor_memory,
        )


# ---- pure builders ----------------------------------------------------------------------------

def drain_plan_for(spec: GroupSpec, drain: DrainStatus) -> DrainPlan:
    """The plan the job runs: the recorded sub-ranges (whole; the job skips finished work itself)."""
    subs = tuple(SubRange(s.partition, s.index, s.start, s.end) for s in drain.sub_ranges)
    return DrainPlan(
        drain_id=str(drain.id), topic=spec.topic, group_id=spec.group_id, sub_ranges=subs,
        batch_max_records=spec.batch.max_records,
        parallelism=parallelism_for(subs, spec.drain.max_tasks),
        # the split is the read_committed end offset (LSO): reading committed data only keeps
        # aborted transactions out of the drain exactly as the consumer's default would
        read_committed=True,
    ).validate()


def _secret_refs(env: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    out = {}
    for e in env:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            out[str(e["name"])] = (str(ref["name"]), str(ref["key"]))
    return out


def spark_k8s_conf(cr_name: str, namespace: str, spec: GroupSpec, plan: DrainPlan, settings: DrainSettings,
                   env: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Spark conf for client mode on Kubernetes: executors as pods owned by the driver pod.

    Executors get the same environment: plain values through spark.executorEnv, Secret material
    through spark.kubernetes.executor.secretKeyRef (never as literal values). The executor pods run
    the same image with `args: ["executor"]` (its entrypoint starts Spark's executor backend).
    PersistentVolumeClaims are neither owned nor reused: the drain Role has no rights on them.
    """
    executors = max(1, math.ceil(plan.parallelism / settings.executor_cores))
    conf = {
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.container.image": spec.template.image,
        "spark.kubernetes.container.image.pullPolicy": spec.template.image_pull_policy,
        "spark.kubernetes.executor.podNamePrefix": f"{cr_name[:30]}-drain-{plan.drain_id}".lower(),
        "spark.executor.instances": str(executors),
        "spark.executor.cores": str(settings.executor_cores),
        "spark.executor.memory": settings.executor_memory,
        "spark.kubernetes.executor.deleteOnTermination": "true",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        # executors' scratch space: an emptyDir Spark mounts there (the root filesystem is read-only)
        "spark.local.dir": "/tmp/spark-local",
        "spark.kubernetes.executor.label.app.kubernetes.io/part-of": "lagpilot",
        f"spark.kubernetes.executor.label.{DRAIN_LABEL}": label_value(cr_name),
    }
    if settings.service_account:
        conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = settings.service_account
    for name, (secret, key) in _secret_refs(env).items():
        conf[f"spark.kubernetes.executor.secretKeyRef.{name}"] = f"{secret}:{key}"
    for e in env:
        if "value" in e and str(e["name"]) != "LAGPILOT_DRAIN_PLAN":
            conf[f"spark.executorEnv.{e['name']}"] = str(e["value"])
    return conf


def build_drain_job(cr_name: str, namespace: str, cr_uid: str, spec: GroupSpec, drain: DrainStatus,
                    attempt: int, settings: DrainSettings | None = None, version: str = "0.1.0") -> dict[str, Any]:
    """The drain Job for one attempt: the consumer image running `lagpilot drain` on the plan.

    backoffLimit 0: retries are the operator's (same recorded ranges, backoff, attempt count in
    status), so status always names the one Job that may be running.
    """
    settings = settings or DrainSettings()
    plan = drain_plan_for(spec, drain)
    name = job_name(cr_name, drain.id, attempt)
    labels = {
        "app.kubernetes.io/name": "lagpilot-drain",
        "app.kubernetes.io/instance": label_value(cr_name),
        "app.kubernetes.io/component": "drain",
        "app.kubernetes.io/part-of": "lagpilot",
        "app.kubernetes.io/managed-by": "lagpilot",
        "app.kubernetes.io/version": label_value(version),
        DRAIN_LABEL: label_value(cr_name),
        JOB_LABEL: name,
    }
    env = [e for e in build_env(spec) if e["name"] != "LAGPILOT_METRICS_PORT"]
    env += [
        {"name": "LAGPILOT_DRAIN_PLAN", "value": plan.to_json()},
        {"name": "LAGPILOT_SPARK_JARS", "value": settings.spark_jars},
        {"name": "LAGPILOT_DRAIN_ATTEMPT", "value": str(attempt)},
    ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
    }
    if settings.spark_master:
        env.append({"name": "LAGPILOT_SPARK_MASTER", "value": settings.spark_master})
        env.append({"name": "LAGPILOT_SPARK_CONF",
                    "value": json.dumps(spark_k8s_conf(cr_name, namespace, spec, plan, settings, env), sort_keys=True)})
        env.append({"name": "LAGPILOT_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        # the driver looks its pod up by name: executor pods are owned by it (deleted with it)
        env.append({"name": "LAGPILOT_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        if settings.service_account:
            pod_spec["serviceAccountName"] = settings.service_account
        cpu_m = 1000
    else:
        pod_spec["automountServiceAccountToken"] = False  # local mode never calls the API
        cpu_m = max(500, settings.cpu_per_task_m * plan.parallelism)
    resources = dict(spec.template.resources) or {
        "requests": {"cpu": f"{cpu_m}m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}}
    pod_spec["containers"] = [{
        "name": "drain",
        "image": spec.template.image,
        "imagePullPolicy": spec.template.image_pull_policy,
        "command": ["lagpilot", "drain"],
        "env": env,
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "annotations": {"lagpilot.io/drain-ranges": ",".join(
                f"p{p}[{a}..{b})" for p, (a, b) in sorted(plan.partition_ranges().items()))},
            "ownerReferences": [owner_reference(cr_name, cr_uid)],
        },
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": settings.job_ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def job_observation(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> JobObservation:
    """A Job object (+ its pods) → the state machine's view (pure)."""
    # a pod being deleted still counts while its process may run (phase not yet final)
    alive = sum(1 for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running", None))
    if job is None:
        return JobObservation(JobState.ABSENT, alive)
    st = job.get("status") or {}
    conds = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
    message = ""
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("exitCode") not in (None, 0):
                message = (term.get("message") or f"exit code {term.get('exitCode')}").strip().splitlines()[-1][:300]
    if "Complete" in conds:
        return JobObservation(JobState.SUCCEEDED, alive)
    if "Failed" in conds or "FailureTarget" in conds or int(st.get("failed") or 0) > 0:
        c = conds.get("Failed") or conds.get("FailureTarget") or {}
        return JobObservation(JobState.FAILED, alive, message or str(c.get("message") or c.get("reason") or "Job failed"))
    if "SuccessCriteriaMet" in conds or int(st.get("succeeded") or 0) > 0:
        return JobObservation(JobState.SUCCEEDED, alive)
    return JobObservation(JobState.ACTIVE, alive)


# ---- fault injection (tests only) ----------------------------------------------------------------

def _fault_point(kind: str, when: str) -> None:
    """Die like `kill -9` at a named point, once per point: the fault tests' way of killing the
    operator between an effect and its status write (or right after the write).

    LAGPILOT_TEST_CRASH_AT="Quiesce:effect,AlterOffsets:effect,..." and LAGPILOT_TEST_CRASH_DIR
    (marker files: each point fires once across restarts). Unset in production: a no-op.
    """
    points = os.environ.get("LAGPILOT_TEST_CRASH_AT")
    marker_dir = os.environ.get("LAGPILOT_TEST_CRASH_DIR")
    if not points or not marker_dir or f"{kind}:{when}" not in points.split(","):
        return
    marker = os.path.join(marker_dir, f"{kind}-{when}")
    if os.path.exists(marker):
        return
    with open(marker, "w") as fh:
        fh.write(str(time.time()))
    log.warning("fault injection: exiting", extra={"point": f"{kind}:{when}"})
    os._exit(137)


# ---- metrics -----------------------------------------------------------------------------------

_METRICS: dict[str, Any] = {}


def _metrics() -> dict[str, Any]:
    if not _METRICS:
        from prometheus_client import Gauge
        _METRICS["total"] = Gauge("lagpilot_drain_records_total", "Records in the current drain's ranges",
                                  ["namespace", "name"])
        _METRICS["done"] = Gauge("lagpilot_drain_records_done", "Records the current drain has processed",
                                 ["namespace", "name"])
        _METRICS["active"] = Gauge("lagpilot_drain_active", "1 while a drain holds a range (Planned..Succeeded)",
                                   ["namespace", "name"])
        _METRICS["pause"] = Gauge("lagpilot_drain_pause_seconds", "How long the last hand-off paused the live group",
                                  ["namespace", "name"])
    return _METRICS


def _count_lost(namespace: str, name: str, n: int) -> None:
    """lagpilot_drain_records_lost_total: records of handed-off ranges retention deleted before the
    drain read them (counted once, when the status first records them)."""
    try:
        m = _metrics()
        if "lost" not in m:
            from prometheus_client import Counter
            m["lost"] = Counter("lagpilot_drain_records_lost_total",
                                "Records of drained ranges deleted by retention before the drain read them",
                                ["namespace", "name"])
        m["lost"].labels(namespace, name).inc(n)
    except Exception:  # noqa: BLE001 - metrics are best effort
        pass


def _publish(namespace: str, name: str, d: DrainStatus | None) -> None:
    try:
        m = _metrics()
    except Exception:  # noqa: BLE001 - metrics are best effort (e.g. registered twice in tests)
        return
    if d is None:
        return
    m["total"].labels(namespace, name).set(d.records_total)
    m["done"].labels(namespace, name).set(d.records_done)
    m["active"].labels(namespace, name).set(1 if d.phase in (Phase.PLANNED, Phase.HANDED_OFF, Phase.RUNNING, Phase.SUCCEEDED) else 0)
    if d.pause_seconds is not None:
        m["pause"].labels(namespace, name).set(d.pause_seconds)


# ---- the executor ---------------------------------------------------------------------------------

@dataclasses.dataclass
class DrainContext:
    """One CR's inputs for a call, gathered by reconcile.py (no policy in here)."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: GroupSpec
    raw_drain: Mapping[str, Any] | None
    offsets: Mapping[int, Offsets]
    replicas: int
    wanted: Sequence[int]
    admin: Any                               # confluent_kafka AdminClient (shared, from the pool)
    scale: Callable[[int], None]             # apply the consumer Deployment with n replicas
    patch_status: Callable[[dict[str, Any]], None]
    emit: Callable[[str, str, str], None]
    reobserve: Callable[[], Mapping[int, Offsets]]  # fresh offsets (after an alter / quiesce)
    version: str = "0.1.0"
    tasks: Mapping[int, int] = dataclasses.field(default_factory=dict)  # planner's Spark tasks per wanted partition


@dataclasses.dataclass(frozen=True)
class DrainResult:
    status: dict[str, Any] | None
    condition: tuple[str, str, str]
    actions: tuple[str, ...] = ()
    data_loss: tuple[str, str, str] | None = None  # the DataLoss condition (None: no drain recorded)


class DrainExecutor:
    """Kubernetes Jobs + Kafka admin effects for the hand-off. One instance per operator."""

    def __init__(self, api_client: Any, settings: DrainSettings | None = None,
                 clock: Callable[[], float] = time.time, timeout_s: float = 15.0) -> None:
        from kubernetes import client

        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self._sanitize = api_client.sanitize_for_serialization
        self.settings = settings or DrainSettings.from_env()
        self.clock = clock
        self.timeout_s = timeout_s
        # how long the owners get to acknowledge before the quiesce fallback (tests shorten it)
        self.ack_timeout_s = float(os.environ.get("LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS") or ACK_TIMEOUT_S)
        self.ack_wait_s = 3.0  # within one call, right after a publish: poll for the acks this long

    # -- observation ---------------------------------------------------------------------------
    def group_empty(self, admin: Any, group_id: str) -> bool | None:
        """True when the group has no members (the admin API then accepts an offset change)."""
        from confluent_kafka import ConsumerGroupState

        try:
            desc = admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)[group_id].result(timeout=self.timeout_s)
        except Exception as err:  # noqa: BLE001 - unknown: the machine waits
            log.warning("describe group failed", extra={"group": group_id, "error": str(err)})
            return None
        return not desc.members and desc.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)

    def progress(self, admin: Any, spec: GroupSpec, d: DrainStatus,
                 lost_out: dict[tuple[int, int], tuple[tuple[int, int], ...]] | None = None
                 ) -> dict[tuple[int, int], tuple[int, int]] | None:
        """(partition, index) → (next, records) from the progress groups; None if any read failed.
        ``lost_out`` receives the retention losses the drain recorded (``lost=a-b`` metadata)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        by_index: dict[int, list[int]] = {}
        for s in d.sub_ranges:
            by_index.setdefault(s.index, []).append(s.partition)
        out: dict[tuple[int, int], tuple[int, int]] = {}
        try:
            futs = {}
            for index, parts in by_index.items():
                g = progress_group(spec.group_id, str(d.id), index)
                futs[index] = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, p) for p in parts])],
                    request_timeout=self.timeout_s)[g]
            for index, fut in futs.items():
                for tp in fut.result(timeout=self.timeout_s).topic_partitions:
                    if tp.offset is not None and tp.offset >= 0:
                        meta = getattr(tp, "metadata", None)
                        out[(tp.partition, index)] = (int(tp.offset), parse_progress_metadata(meta))
                        lost = parse_progress_lost(meta)
                        if lost and lost_out is not None:
                            lost_out[(tp.partition, index)] = lost
        except Exception as err:  # noqa: BLE001
            log.warning("reading drain progress failed", extra={"group": spec.group_id, "error": str(err)})
            return None
        return out

    def mailbox(self, admin: Any, spec: GroupSpec, partitions: Sequence[int]) -> dict[int, mbx.Entry | None] | None:
        """The hand-off mailbox entries of `partitions`; None if the read failed (the machine waits)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        g = mbx.mailbox_group(spec.group_id)
        try:
            fut = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, p) for p in partitions])],
                request_timeout=self.timeout_s)[g]
            out: dict[int, mbx.Entry | None] = {p: None for p in partitions}
            for tp in fut.result(timeout=self.timeout_s).topic_partitions:
                if getattr(tp, "error", None) is not None:
                    raise RuntimeError(str(tp.error))
                out[tp.partition] = mbx.decode(getattr(tp, "metadata", None), tp.offset)
            return out
        except Exception as err:  # noqa: BLE001
            log.warning("reading the hand-off mailbox failed", extra={"group": spec.group_id, "error": str(err)})
            return None

    def write_mailbox(self, admin: Any, spec: GroupSpec, entries: Mapping[int, mbx.Entry]) -> None:
        """A "simple" commit to the memberless mailbox group: offset = split, metadata = the entry."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not entries:
            return
        g = mbx.mailbox_group(spec.group_id)
        req = ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, p, e.split, metadata=e.encode())
                                               for p, e in sorted(entries.items())])
        res = admin.alter_consumer_group_offsets([req], request_timeout=self.timeout_s)[g].result(timeout=self.timeout_s)
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"writing the hand-off mailbox {g} failed: {bad[0].error}")

    def job(self, namespace: str, name: str) -> JobObservation:
        try:
            job = self._sanitize(self.batch.read_namespaced_job(name, namespace))
        except Exception as err:  # noqa: BLE001
            if getattr(err, "status", None) != 404:
                raise
            job = None
        pods = self._sanitize(self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}")).get("items") or []
        return job_observation(job, pods)

    # -- effects ----------------------------------------------------------------------------------
    def alter_offsets(self, admin: Any, spec: GroupSpec, offsets: Mapping[int, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        req = ConsumerGroupTopicPartitions(spec.group_id, [TopicPartition(spec.topic, p, o) for p, o in sorted(offsets.items())])
        res = admin.alter_consumer_group_offsets([req], request_timeout=self.timeout_s)[spec.group_id].result(timeout=self.timeout_s)
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"altering offsets of group {spec.group_id} failed: {bad[0].error}")

    def create_job(self, ctx: DrainContext, d: DrainStatus, attempt: int) -> None:
        manifest = build_drain_job(ctx.name, ctx.namespace, ctx.uid, ctx.spec, d, attempt, self.settings, ctx.version)
        try:
            self.batch.create_namespaced_job(ctx.namespace, manifest)
        except Exception as err:  # noqa: BLE001
            if getattr(err, "status", None) != 409:  # 409: created before a lost status write → adopt
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        """Foreground deletion: the Job object stays until the garbage collector removed its pods,
        so "Job absent" (what Cancelled waits for) means no drain process is left."""
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground")
        except Exception as err:  # noqa: BLE001
            if getattr(err, "status", None) != 404:
                raise

    # -- the loop -----------------------------------------------------------------------------------
    def observe(self, ctx: DrainContext, d: DrainStatus | None, offsets: Mapping[int, Offsets], replicas: int) -> Observed:
        group_empty = None
        progress = None
        job = None
        mailbox = None
        if d is not None and d.phase is Phase.PLANNED:
            # order matters: membership, then the group's committed offsets, then the mailbox
            group_empty = self.group_empty(ctx.admin, ctx.spec.group_id)
            offsets = ctx.reobserve()
            mailbox = self.mailbox(ctx.admin, ctx.spec, d.partitions)
        lost = None
        if d is not None and d.sub_ranges and d.phase is not Phase.VERIFIED:
            found: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
            progress = self.progress(ctx.admin, ctx.spec, d, found)
            lost = None if progress is None else found
        if d is not None and d.attempt > 0 and d.phase in (Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED):
            job = self.job(ctx.namespace, job_name(ctx.name, d.id, d.attempt))
        return Observed(generation=ctx.generation, offsets=offsets, group_empty=group_empty, replicas=replicas,
                        wanted=tuple(ctx.wanted), tasks=dict(ctx.tasks), job=job, progress=progress, mailbox=mailbox,
                        ack_timeout_s=self.ack_timeout_s, lost=lost)

    def perform(self, ctx: DrainContext, action: Action, d: DrainStatus | None) -> bool:
        """Do the action's effect; False when the broker refused an offset move because a member
        joined meanwhile (nothing to record: that member finds the ack and completes it)."""
        k = action.kind
        if k in (Kind.QUIESCE, Kind.RESTORE) and action.replicas is not None:
            ctx.scale(action.replicas)
        elif k is Kind.PUBLISH:
            self.write_mailbox(ctx.admin, ctx.spec, action.entries)
        elif k is Kind.ALTER_OFFSETS:
            self.write_mailbox(ctx.admin, ctx.spec, action.entries)  # the acks first: the owner's order
            _fault_point(k.value, "ack")
            try:
                self.alter_offsets(ctx.admin, ctx.spec, action.offsets)
            except Exception as err:  # noqa: BLE001 - typically UNKNOWN_MEMBER_ID / non-empty group
                log.warning("moving the empty group's offsets refused; retrying next cycle",
                            extra={"group": ctx.spec.group_id, "error": str(err)})
                return False
        elif k is Kind.SEAL:
            self.write_mailbox(ctx.admin, ctx.spec, action.entries)
            if action.replicas is not None:
                ctx.scale(action.replicas)
        elif k is Kind.LAUNCH:
            assert action.status is not None
            if action.replicas is not None:
                ctx.scale(action.replicas)  # the live group first: it resumes at split
            self.create_job(ctx, action.status, action.attempt)
        elif k is Kind.DELETE_JOB:
            assert d is not None
            self.delete_job(ctx.namespace, job_name(ctx.name, d.id, action.attempt or d.attempt))
        return True

    def reconcile(self, ctx: DrainContext) -> DrainResult:
        """Run the machine until it waits; write status.drain after every effect."""
        d = DrainStatus.from_dict(ctx.raw_drain)
        offsets, replicas = ctx.offsets, ctx.replicas
        done: list[str] = []
        waited = 0.0
        step = 0
        while step < MAX_STEPS:
            if step > 0 and (d is None or d.phase is not Phase.PLANNED):  # Planned re-reads in observe()
                offsets = ctx.reobserve()
            step += 1
            observed = self.observe(ctx, d, offsets, replicas)
            action = next_action(ctx.spec, d, observed, self.clock())
            if action.kind is not Kind.NONE:
                log.info("drain action", extra={"group": f"{ctx.namespace}/{ctx.name}", "action": action.kind.value,
                                                "reason": action.reason, "drain_message": action.message})
            if not self.perform(ctx, action, d):
                done.append(action.kind.value + ":refused")
                break
            if action.replicas is not None and action.kind in (Kind.QUIESCE, Kind.RESTORE, Kind.LAUNCH, Kind.SEAL):
                replicas = action.replicas
            _fault_point(action.kind.value, "effect")
            if action.status is not None and action.status != d:
                ctx.patch_status({"drain": {**action.status.to_dict(), "lastEndS": action.status.finished_at}})
                d = action.status
                _fault_point(action.kind.value, "status")
            if action.event is not None:
                ctx.emit(*action.event)
            if action.lost_records:
                _count_lost(ctx.namespace, ctx.name, action.lost_records)
            done.append(action.kind.value)
            if action.kind is Kind.NONE:
                # right after the publish the owners ack within about a second (their mailbox
                # check runs at every batch boundary, at most once a second): wait briefly here
                # instead of a whole control-loop interval
                if (action.reason == "WaitingForAcks" and d is not None and d.published_at is not None
                        and waited < self.ack_wait_s and self.clock() - d.published_at < self.ack_wait_s + 1):
                    time.sleep(0.5)
                    waited += 0.5
                    step -= 1
                    continue
                break
        _publish(ctx.namespace, ctx.name, d)
        status = None if d is None else {**d.to_dict(), "lastEndS": d.finished_at}
        return DrainResult(status, condition(d), tuple(done), data_loss_condition(d))


def run_in_cycle(executor: DrainExecutor, ref: Any, spec: GroupSpec, raw_spec: Mapping[str, Any],
                 status: Mapping[str, Any], obs: Any, decision: Any, replicas: int, handle: Any, deps: Any,
                 apply_deployment: Callable[..., int]) -> DrainResult:
    """The adapter reconcile.py calls: converts its observation and decision, wires the effects."""

    def offsets_of(observation: Any) -> dict[int, Offsets]:
        return {p.partition: Offsets(p.committed, p.earliest, p.latest) for p in observation.partitions}

    ctx = DrainContext(
        namespace=ref.namespace, name=ref.name, uid=ref.uid, generation=int(ref.generation or 0), spec=spec,
        raw_drain=status.get("drain"), offsets=offsets_of(obs), replicas=replicas,
        wanted=tuple(decision.drain.partitions) if getattr(decision, "drain", None) else (),
        tasks=dict(decision.drain.tasks_by_partition) if getattr(decision, "drain", None) else {},
        admin=handle.safe_admin(executor.timeout_s),  # admin OffsetFetch would SIGSEGV (kafka_observe)
        scale=lambda n: apply_deployment(ref, raw_spec, status, deps, replicas=n),
        patch_status=lambda patch: deps.kube.patch_status(ref.namespace, ref.name, patch),
        emit=deps.emit,
        reobserve=lambda: offsets_of(deps.observe(handle, spec.topic, spec.group_id, deps.kafka_timeout_seconds)),
        version=getattr(deps, "version", "0.1.0"),
    )
    return executor.reconcile(ctx)
