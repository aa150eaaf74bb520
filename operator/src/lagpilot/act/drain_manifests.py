"""Pure builders of what runs a drain attempt, and pure readers of its state.

- `build_drain_job` / `job_observation`: a batch/v1 Job running `lagpilot drain` in the consumer
  image (spec.drain.launcher job, the default), local mode or Spark's Kubernetes backend in
  client mode (`DrainSettings.spark_master`).
- `build_spark_application` / `spark_application_observation`: a `SparkApplication` of the kubeflow
  spark-operator (spec.drain.launcher sparkApplication): the same image, plan, environment, labels
  and owner; the spark-operator submits it in cluster mode and reports its state in
  `status.applicationState.state`, which maps onto the same `JobObservation` the state machine reads.

Both are named `<cr>-drain-<id>-<attempt>` (a lost status write finds the object again) and owned by
the CR; Secret material only through secretKeyRef, or a Secret volume (the Spark RPC key, k8s master).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from lagpilot import __version__
from lagpilot.config import Env
from lagpilot.decide.drain_watch import DEADLINE_FLOOR_S, attempt_deadline_s, measured_rate
from lagpilot.decide.handoff import DrainStatus, JobObservation, JobState, job_name, job_slots
from lagpilot.decide.pod_health import memory_limits, termination_text
from lagpilot.model.status import DrainRuntime
from lagpilot.spec import GroupSpec
from lagpilot_runtime.drain.plan import DrainPlan, SubRange, owner_tag
from lagpilot_runtime.plan_auth import AUTH_ENV as RUNTIME_AUTH_ENV
from lagpilot_runtime.redaction import redact

from .deployment import _shorten, build_env, label_value, owner_reference
from .drain_part_key import part_key_ref
from .key_secret import KEY_FIELD

DRAIN_LABEL = "lagpilot.io/drain"
JOB_LABEL = "lagpilot.io/drain-job"
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}
# the kubeflow spark-operator's API (docs/drain.md "Launchers")
SPARK_APP_GROUP, SPARK_APP_VERSION, SPARK_APP_PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"
SPARK_VERSION = "4.2.0"  # the pyspark the consumer image carries
# the driver's main file in the consumer image (Dockerfile): calls `lagpilot drain` under spark-submit
DRIVER_MAIN = "local:///opt/lagpilot/drain_main.py"
# the warm drain runtime (drain_runtime.py): a Job's label saying which path its attempt took, the
# env that sends its plan to the runtime, and the CPU request of a Job that only waits on it
RUNTIME_PATH_LABEL = "lagpilot.io/drain-runtime"
RUNTIME_URL_ENV = "LAGPILOT_DRAIN_RUNTIME_URL"
WARM_JOB_CPU_M = 100
SPARK_APP_DONE = {
    "COMPLETED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "SUBMISSION_FAILED": JobState.FAILED,
}


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
    - LAGPILOT_DRAIN_CPU_PER_TASK_M: CPU request per running task in local mode (default 250m):
      the sink is usually latency-bound, so tasks need little CPU. With the k8s master, each
      executor pod requests its cores times this (spark.kubernetes.executor.request.cores).
    - LAGPILOT_DRAIN_DEADLINE_FLOOR_SECONDS: the least activeDeadlineSeconds of a drain Job (default
      3600); above it the deadline grows with the attempt's records at the measured throughput
      (lagpilot.decide.drain_watch.attempt_deadline_s).
    """

    spark_jars: str = "/opt/lagpilot/spark-jars"
    spark_master: str = ""
    service_account: str = ""
    job_ttl_seconds: int = 3600
    cpu_per_task_m: int = 250
    executor_cores: int = 2
    executor_memory: str = "1g"
    deadline_floor_s: int = DEADLINE_FLOOR_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DrainSettings:
        e = Env(env)
        return cls(
            spark_jars=e.text("LAGPILOT_DRAIN_SPARK_JARS", cls.spark_jars),
            spark_master=e.text("LAGPILOT_DRAIN_SPARK_MASTER"),
            service_account=e.text("LAGPILOT_DRAIN_SERVICE_ACCOUNT"),
            job_ttl_seconds=e.integer("LAGPILOT_DRAIN_JOB_TTL_SECONDS", cls.job_ttl_seconds),
            cpu_per_task_m=e.integer("LAGPILOT_DRAIN_CPU_PER_TASK_M", cls.cpu_per_task_m),
            executor_cores=max(1, e.integer("LAGPILOT_DRAIN_EXECUTOR_CORES", cls.executor_cores)),
            executor_memory=e.text("LAGPILOT_DRAIN_EXECUTOR_MEMORY", cls.executor_memory),
            deadline_floor_s=max(1, e.integer("LAGPILOT_DRAIN_DEADLINE_FLOOR_SECONDS", cls.deadline_floor_s)),
        )


# ---- pure builders ----------------------------------------------------------------------------


def drain_plan_for(spec: GroupSpec, drain: DrainStatus, cr_uid: str, attempt: int | None = None) -> DrainPlan:
    """The plan the job runs: the recorded sub-ranges (whole; the job skips finished work itself);
    its progress groups carry the CR (``owner_tag(cr_uid)``: a re-created CR never reads a deleted
    one's progress); ``attempt``: the attempt being launched (default the status's)."""
    subs = tuple(SubRange(s.partition, s.index, s.start, s.end) for s in drain.sub_ranges)
    # the figure a busy drain's launch records as status.drain.slots (one function for both)
    parallelism = job_slots(drain, spec.drain.max_tasks)
    return DrainPlan(
        drain_id=str(drain.id),
        topic=spec.topic,
        group_id=spec.group_id,
        sub_ranges=subs,
        batch_max_records=spec.batch.max_records,
        parallelism=parallelism,
        busy=drain.busy,
        round=drain.round,
        # the split is the read_committed end offset (LSO): reading committed data only keeps
        # aborted transactions out of the drain exactly as the consumer's default would
        read_committed=True,
        owner=owner_tag(cr_uid),
        # the tasks' sign of life names it (the no-progress window counts from the attempt's first)
        attempt=drain.attempt if attempt is None else attempt,
    ).validate()


def _secret_refs(env: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    out = {}
    for e in env:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            out[str(e["name"])] = (str(ref["name"]), str(ref["key"]))
    return out


def spark_k8s_conf(
    cr_name: str,
    namespace: str,
    spec: GroupSpec,
    plan: DrainPlan,
    settings: DrainSettings,
    env: Sequence[Mapping[str, Any]],
) -> dict[str, str]:
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
        # each executor pod's CPU request: its task slots at the per-task request of local mode (the
        # sink is usually latency-bound); Spark's default (one whole CPU per slot) leaves executors
        # Pending on a small node. No CPU limit (none is set by Spark unless asked)
        "spark.kubernetes.executor.request.cores": f"{settings.executor_cores * settings.cpu_per_task_m}m",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        # executors' scratch space: an emptyDir Spark mounts there (the root filesystem is read-only)
        "spark.local.dir": "/tmp/spark-local",
        "spark.kubernetes.executor.label.app.kubernetes.io/part-of": "lagpilot",
        f"spark.kubernetes.executor.label.{DRAIN_LABEL}": label_value(cr_name),
    }
    conf.update(spark_k8s_security_conf())
    conf.update(spark_rpc_key_conf(cr_name))
    if settings.service_account:
        conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = settings.service_account
    for name, (secret, key) in _secret_refs(env).items():
        conf[f"spark.kubernetes.executor.secretKeyRef.{name}"] = f"{secret}:{key}"
    for e in env:
        if "value" in e and str(e["name"]) != "LAGPILOT_DRAIN_PLAN":
            conf[f"spark.executorEnv.{e['name']}"] = str(e["value"])
    return conf


# ---- Spark on Kubernetes: security (issue 23 H4; docs/rbac.md "The drain ServiceAccount") ----------

EXECUTOR_POD_TEMPLATE_ENV = "LAGPILOT_SPARK_EXECUTOR_POD_TEMPLATE"


def spark_k8s_security_conf() -> dict[str, str]:
    """Spark conf that keeps a client-mode drain's RPC private and its Role small (pure).

    - `spark.authenticate`: executors prove the application's secret to the driver (the CR's
      Secret, read from a file on both sides: `spark_rpc_key_conf`);
      `spark.network.crypto.enabled`: AES encryption of the RPC, which carries the tasks and with
      them the Kafka credentials.
    - no label-selector deletes, which RBAC can only grant as `deletecollection` on every pod,
      service and ConfigMap of the namespace: executor pods are not deleted by the driver
      (`deleteOnTermination false`: they end with their driver and, owned by the driver pod, are
      garbage-collected with it), no driver service cleanup (client mode creates none), no
      executor ConfigMap (nothing in SPARK_CONF_DIR to ship; the conf travels over the RPC).
    """
    return {
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        "spark.kubernetes.executor.deleteOnTermination": "false",
        "spark.kubernetes.driver.service.deleteOnTermination": "false",
        "spark.kubernetes.executor.disableConfigMap": "true",
        # executors never call the API: the namespace's default ServiceAccount (no token mounted, the
        # pod template); without this Spark gives them the driver's (the drain ServiceAccount) even
        # over the template's serviceAccountName (it looks at the deprecated serviceAccount field)
        "spark.kubernetes.authenticate.executor.serviceAccountName": "default",
    }


# The RPC's shared secret (H4): the CR's Secret `spark_rpc_key_secret_name(cr)`, made by the operator
# (act/spark_rpc_key.py), mounted here in the driver's pod and in every executor pod
SPARK_RPC_KEY_DIR = "/var/run/secrets/lagpilot/spark-rpc"
SPARK_RPC_KEY_VOLUME = "spark-rpc-key"


def spark_rpc_key_secret_name(cr_name: str) -> str:
    """`<cr>-drain-rpc-key`; a long CR name is cut (with a hash) so that Spark's executor volume
    name `<secret>-volume` stays a DNS label (<= 63 characters)."""
    return f"{_shorten(cr_name, 42)}-drain-rpc-key"


def spark_rpc_key_conf(cr_name: str) -> dict[str, str]:
    """Spark conf that takes the RPC secret from the CR's Secret, as a file (pure).

    Without it Spark generates a secret per application and hands it to each executor pod as the
    literal env value _SPARK_AUTH_SECRET (Spark 4; SPARK_AUTH_SECRET before), readable by anyone
    who may `get` pods. With `spark.authenticate.secret.file` Spark sets no env: the driver reads it
    (its pod mounts the Secret: `drain_pod_spec`), and so do the executors (a startup conf: it
    reaches their JVM's options) from the same Secret that `spark.kubernetes.executor.secrets.<name>`
    mounts in their pods (as volume `<name>-volume`, which the chart's admission policy allows, and
    nothing else of that kind). Not the `.driver.file` / `.executor.file` variants: an executor's
    first connection (its driverPropsFetcher) reads only `spark.authenticate.secret.file`, and
    only with a k8s `spark.master` in its startup conf, which the image's entrypoint adds
    (lagpilot_runtime.image_entrypoint.master_opt, from LAGPILOT_SPARK_MASTER)."""
    return {
        f"spark.kubernetes.executor.secrets.{spark_rpc_key_secret_name(cr_name)}": SPARK_RPC_KEY_DIR,
        "spark.authenticate.secret.file": f"{SPARK_RPC_KEY_DIR}/{KEY_FIELD}",
    }


def executor_pod_template() -> dict[str, Any]:
    """The pod template Spark starts every executor pod from (pure): the Pod Security `restricted`
    profile (as the driver's pod), no ServiceAccount token (executors never call the API), an
    emptyDir at /tmp under a read-only root filesystem, also the working directory. Spark adds its
    container settings (image, args, env, resources, spark.local.dir's emptyDir) to the first container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            # explicit: without it Spark gives executors the driver's (drain) ServiceAccount
            "serviceAccountName": "default",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": dict(POD_SECURITY),
            # workingDir: the executor fetches the application's jars (spark.jars) into its working
            # directory, the image's WORKDIR on a read-only root filesystem otherwise ("Unable to
            # create executor due to ./kafka-clients-3.9.2.jar: Read-only file system", real node)
            "containers": [
                {
                    "name": "spark-kubernetes-executor",
                    "securityContext": dict(CONTAINER_SECURITY),
                    "workingDir": "/tmp",
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
        },
    }


def _labels(cr_name: str, name: str, version: str) -> dict[str, str]:
    """Labels of everything one drain attempt creates (Job or SparkApplication, and their pods)."""
    return {
        "app.kubernetes.io/name": "lagpilot-drain",
        "app.kubernetes.io/instance": label_value(cr_name),
        "app.kubernetes.io/component": "drain",
        "app.kubernetes.io/part-of": "lagpilot",
        "app.kubernetes.io/managed-by": "lagpilot",
        "app.kubernetes.io/version": label_value(version),
        DRAIN_LABEL: label_value(cr_name),
        JOB_LABEL: name,
    }


def _metadata(
    cr_name: str, cr_uid: str, name: str, namespace: str, labels: Mapping[str, str], plan: DrainPlan
) -> dict[str, Any]:
    """Metadata of an attempt's object: owned by the CR, its ranges readable in an annotation."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels),
        "annotations": {
            "lagpilot.io/drain-ranges": ",".join(
                f"p{p}[{a}..{b})" for p, (a, b) in sorted(plan.partition_ranges().items())
            )
        },
        "ownerReferences": [owner_reference(cr_name, cr_uid)],
    }


def consumer_env(spec: GroupSpec) -> list[dict[str, Any]]:
    """The consumer's environment (handler, sink, Kafka, Secret refs) without its metrics port: the
    base of the drain Job's and of the warm drain runtime's (drain_runtime.py) environment."""
    return [e for e in build_env(spec) if e["name"] != "LAGPILOT_METRICS_PORT"]


def _drain_env(
    spec: GroupSpec, plan: DrainPlan, settings: DrainSettings, attempt: int
) -> list[dict[str, Any]]:
    """The drain process's environment: the consumer's (handler, sink, Kafka, Secret refs) + the plan."""
    return [
        *consumer_env(spec),
        {"name": "LAGPILOT_DRAIN_PLAN", "value": plan.to_json()},
        {"name": "LAGPILOT_SPARK_JARS", "value": settings.spark_jars},
        {"name": "LAGPILOT_DRAIN_ATTEMPT", "value": str(attempt)},
    ]


def drain_pod_spec(
    cr_name: str,
    namespace: str,
    spec: GroupSpec,
    plan: DrainPlan,
    settings: DrainSettings,
    env: list[dict[str, Any]],
    command: list[str],
    cpu_m: int | None = None,
) -> dict[str, Any]:
    """The pod spec of a drain process (the Job's `lagpilot drain`, the warm runtime's `lagpilot
    drain --serve`): Spark master/conf and ServiceAccount for the k8s backend, security contexts,
    /tmp emptyDir, resources (spec.drain.resources, else the template's, else a CPU request per task:
    `cpu_m` overrides it, and memory).
    `env` is extended in place with the Spark settings. restartPolicy Never (a Deployment sets Always)."""
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": dict(POD_SECURITY),
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
    }
    if settings.spark_master:
        env.append({"name": "LAGPILOT_SPARK_MASTER", "value": settings.spark_master})
        env.append(
            {
                "name": "LAGPILOT_SPARK_CONF",
                "value": json.dumps(
                    spark_k8s_conf(cr_name, namespace, spec, plan, settings, env), sort_keys=True
                ),
            }
        )
        env.append({"name": "LAGPILOT_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        # the driver looks its pod up by name: executor pods are owned by it (deleted with it)
        env.append({"name": "LAGPILOT_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        # the driver writes it to a file and names it in spark.kubernetes.executor.podTemplateFile
        env.append(
            {"name": EXECUTOR_POD_TEMPLATE_ENV, "value": json.dumps(executor_pod_template(), sort_keys=True)}
        )
        if settings.service_account:
            pod_spec["serviceAccountName"] = settings.service_account
        # the RPC's secret (spark_rpc_key_conf), never in the environment
        pod_spec["volumes"].append(
            {"name": SPARK_RPC_KEY_VOLUME, "secret": {"secretName": spark_rpc_key_secret_name(cr_name)}}
        )
        mounts.append({"name": SPARK_RPC_KEY_VOLUME, "mountPath": SPARK_RPC_KEY_DIR, "readOnly": True})
        default_cpu_m = 1000
    else:
        pod_spec["automountServiceAccountToken"] = False  # local mode never calls the API
        default_cpu_m = max(500, settings.cpu_per_task_m * plan.parallelism)
    resources = (
        dict(spec.drain.resources)
        or dict(spec.template.resources)
        or {
            "requests": {"cpu": f"{cpu_m if cpu_m is not None else default_cpu_m}m", "memory": "1536Mi"},
            "limits": {"memory": "3Gi"},
        }
    )
    pod_spec["containers"] = [
        {
            "name": "drain",
            "image": spec.template.image,
            "imagePullPolicy": spec.template.image_pull_policy,
            "command": list(command),
            "env": env,
            "resources": resources,
            "securityContext": dict(CONTAINER_SECURITY),
            "volumeMounts": mounts,
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
    ]
    return pod_spec


def build_drain_job(
    cr_name: str,
    namespace: str,
    cr_uid: str,
    spec: GroupSpec,
    drain: DrainStatus,
    attempt: int,
    settings: DrainSettings | None = None,
    version: str = __version__,
    runtime_url: str | None = None,
    runtime_auth: Any = None,
) -> dict[str, Any]:
    """The drain Job for one attempt: the consumer image running `lagpilot drain` on the plan.

    backoffLimit 0: retries are the operator's (same recorded ranges, backoff, attempt count in
    status), so status always names the one Job that may be running.

    `runtime_url` (spec.drain.warmRuntime, the CR's runtime pod Ready at launch: drain_runtime.py):
    `LAGPILOT_DRAIN_RUNTIME_URL` tells the process to hand its plan to that warm runtime and wait
    (it drains by itself when nothing listens there). Label `lagpilot.io/drain-runtime` says warm
    or cold. A warm Job's pod requests little CPU (it waits; the runtime's pod holds the tasks'
    request); memory stays, for the cold fallback. `runtime_auth` (a plan_auth.PlanAuth: the
    operator's signature of this attempt's plan text, which the runtime requires) goes to
    `LAGPILOT_DRAIN_PLAN_AUTH`; the Job never gets the key itself.
    """
    settings = settings or DrainSettings()
    plan = drain_plan_for(spec, drain, cr_uid, attempt)
    name = job_name(cr_name, drain.id, attempt)
    labels = {
        **_labels(cr_name, name, version),
        RUNTIME_PATH_LABEL: (DrainRuntime.WARM if runtime_url else DrainRuntime.COLD).value,
    }
    env = _drain_env(spec, plan, settings, attempt)
    if runtime_url:
        env.append({"name": RUNTIME_URL_ENV, "value": runtime_url})
        if runtime_auth is not None:
            env.append({"name": RUNTIME_AUTH_ENV, "value": runtime_auth.to_json()})
    pod_spec = drain_pod_spec(
        cr_name,
        namespace,
        spec,
        plan,
        settings,
        env,
        ["lagpilot", "drain"],
        cpu_m=WARM_JOB_CPU_M if runtime_url else None,
    )
    if drain.busy:  # its driver verifies the operator's next parts with the CR's part key; added
        # after the Spark conf was built from the env, so Spark-on-Kubernetes executors never get it
        pod_spec["containers"][0]["env"].append(part_key_ref(cr_name))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(cr_name, cr_uid, name, namespace, labels, plan),
        "spec": {
            "backoffLimit": 0,
            # the backstop against an attempt that hangs whatever its pod does (docs/drain.md
            # "Deadlines and stalls"): the Job controller fails it past this, the operator retries
            "activeDeadlineSeconds": attempt_deadline_s(
                drain.remaining,
                plan.parallelism,
                measured_rate(drain.history),
                floor_s=settings.deadline_floor_s,
            ),
            "ttlSecondsAfterFinished": settings.job_ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def job_observation(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> JobObservation:
    """A Job object (+ its pods) → the state machine's view (pure)."""
    alive, running = _pod_counts(pods)
    if job is None:
        return JobObservation(JobState.ABSENT, alive, running=running)
    st = job.get("status") or {}
    conds = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in conds:
        return JobObservation(JobState.SUCCEEDED, alive)
    if "Failed" in conds or "FailureTarget" in conds or int(st.get("failed") or 0) > 0:
        c = conds.get("Failed") or conds.get("FailureTarget") or {}
        message = _pod_failure(pods)
        return JobObservation(
            JobState.FAILED, alive, message or str(c.get("message") or c.get("reason") or "Job failed")
        )
    if "SuccessCriteriaMet" in conds or int(st.get("succeeded") or 0) > 0:
        return JobObservation(JobState.SUCCEEDED, alive)
    return JobObservation(JobState.ACTIVE, alive, running=running)


def _pod_counts(pods: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(alive, running) pods: a pod being deleted still counts while its process may run (phase not
    yet final)."""
    phases = [(p.get("status") or {}).get("phase") for p in pods]
    return (
        sum(1 for ph in phases if ph in ("Pending", "Running", None)),
        sum(1 for ph in phases if ph == "Running"),
    )


def _pod_failure(pods: Sequence[Mapping[str, Any]]) -> str:
    """The last line of the last failed container's termination message (its exit code when the
    message is blank), redacted, at most 300 characters; "" when no container failed. A container
    the memory cgroup killed says so with its limit (`drain: OOMKilled (exit 137, memory limit
    160Mi)`), not the log's last line (FallbackToLogsOnError: whatever it printed before the kill)."""
    message = ""
    for p in pods:
        limits = memory_limits(p)
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("reason") == "OOMKilled":
                memory = limits.get(cs.get("name"))
                message = f"{cs.get('name')}: {termination_text('OOMKilled', term.get('exitCode'), memory)}"
            elif term.get("exitCode") not in (None, 0):
                # a pod's own words (an older or custom image may not redact): redacted where they enter
                words = redact(str(term.get("message") or "").strip())
                message = (words.splitlines()[-1] if words else f"exit code {term.get('exitCode')}")[:300]
    return message


def build_spark_application(
    cr_name: str,
    namespace: str,
    cr_uid: str,
    spec: GroupSpec,
    drain: DrainStatus,
    attempt: int,
    settings: DrainSettings | None = None,
    version: str = __version__,
) -> dict[str, Any]:
    """The SparkApplication for one attempt: cluster mode, the consumer image's driver main, the same
    plan/environment as the Job (Secret refs stay refs), executors sized like the k8s backend's.
    restartPolicy Never: retries are the operator's, as with the Job's backoffLimit 0."""
    settings = settings or DrainSettings()
    plan = drain_plan_for(spec, drain, cr_uid, attempt)
    name = job_name(cr_name, drain.id, attempt)
    labels = _labels(cr_name, name, version)
    env = _drain_env(spec, plan, settings, attempt)
    pod = {
        "labels": labels,
        "env": env,
        "securityContext": dict(CONTAINER_SECURITY),
        "podSecurityContext": dict(POD_SECURITY),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    driver: dict[str, Any] = {
        **pod,
        "cores": 1,
        "memory": "1g",
        "secrets": spark_application_rpc_key_secrets(cr_name),
    }
    if drain.busy:  # the driver verifies the next parts; the executors never get the key
        driver["env"] = [*env, part_key_ref(cr_name)]
    if settings.service_account:
        driver["serviceAccount"] = settings.service_account
    executor = {
        **pod,
        "instances": max(1, math.ceil(plan.parallelism / settings.executor_cores)),
        "cores": settings.executor_cores,
        "memory": settings.executor_memory,
        "deleteOnTermination": True,
        "secrets": spark_application_rpc_key_secrets(cr_name),
    }
    return {
        "apiVersion": f"{SPARK_APP_GROUP}/{SPARK_APP_VERSION}",
        "kind": "SparkApplication",
        "metadata": _metadata(cr_name, cr_uid, name, namespace, labels, plan),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "sparkVersion": SPARK_VERSION,
            "image": spec.template.image,
            "imagePullPolicy": spec.template.image_pull_policy,
            "mainApplicationFile": DRIVER_MAIN,
            # the RPC between the driver and its executors authenticated with the CR's key (a file in
            # both pods: `secrets` above; never the env secret Spark would generate) and encrypted (H4)
            "sparkConf": {
                "spark.local.dir": "/tmp/spark-local",
                "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
                **spark_application_rpc_conf(),
            },
            "restartPolicy": {"type": "Never"},
            "timeToLiveSeconds": settings.job_ttl_seconds,
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
            "driver": driver,
            "executor": executor,
        },
    }


def spark_application_rpc_conf() -> dict[str, str]:
    """A SparkApplication's RPC settings (pure): authenticated with the CR's Spark RPC key, read from
    the file its `secrets` mount in the driver's and every executor's pod (the Job's k8s mode does the
    same with `spark_rpc_key_conf`), and encrypted. Spark then puts no _SPARK_AUTH_SECRET in the
    executors' env (it only does so for a secret it generated)."""
    return {
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        "spark.authenticate.secret.file": f"{SPARK_RPC_KEY_DIR}/{KEY_FIELD}",
    }


def spark_application_rpc_key_secrets(cr_name: str) -> list[dict[str, str]]:
    """spark-operator's `secrets` of a driver or executor: the CR's RPC key Secret at SPARK_RPC_KEY_DIR."""
    return [{"name": spark_rpc_key_secret_name(cr_name), "path": SPARK_RPC_KEY_DIR, "secretType": "Generic"}]


def spark_application_observation(
    app: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> JobObservation:
    """A SparkApplication (+ the pods carrying its drain-job label) → the state machine's view (pure).
    COMPLETED → Succeeded; FAILED / SUBMISSION_FAILED → Failed with the operator's error message;
    every other state (new, SUBMITTED, RUNNING, PENDING_RERUN, SUCCEEDING, FAILING, UNKNOWN…) → Active."""
    alive, running = _pod_counts(pods)
    if app is None:
        return JobObservation(JobState.ABSENT, alive, running=running)
    state = (app.get("status") or {}).get("applicationState") or {}
    done = SPARK_APP_DONE.get(str(state.get("state") or ""))
    if done is JobState.FAILED:
        msg = redact(str(state.get("errorMessage") or f"SparkApplication {state.get('state')}")).strip()
        return JobObservation(
            JobState.FAILED, alive, msg.splitlines()[-1][:300] if msg else "SparkApplication failed"
        )
    return JobObservation(done or JobState.ACTIVE, alive, running=running)
