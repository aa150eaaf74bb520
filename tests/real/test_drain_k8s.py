"""A drain on Spark's Kubernetes backend, for real: the kube-apiserver, Spark's own scheduler backend
(spark-kubernetes, bundled with pyspark), Kafka and PostgreSQL.

The drain Job comes from `build_drain_job` with a `k8s://` master and the chart's drain
ServiceAccount (its ServiceAccount, Role and RoleBinding rendered by `helm template` and applied).
The pods run where the fixture `pods` runs them: containers of the test image on the real node, in
a namespace enforcing Pod Security `restricted`, the driver reaching the API server as
`https://kubernetes.default.svc`. The Job's pod (`lagpilot drain`: the Spark driver, client mode) runs
with a token of that ServiceAccount only; the driver asks the API server for executor pods, which
run the image's entrypoint (`executor` → KubernetesExecutorBackend). Logs and SIGKILLs go through
`pod_io` (the API and the node's runtime). Checked: 2 executor pods created through the
API server (`kubectl get pods -l spark-role=executor`), owned by the driver pod; the Job succeeds;
every planned offset is in the delivery ledger (built-in `ledger` sink: one row per delivery, no
unique key) exactly once; the executor pods are deleted at
the end; the driver's log holds no 403/Forbidden. Then the same with one executor process SIGKILLed
mid-drain (Spark reruns its tasks: ledger exact), and with the driver SIGKILLed (the Job fails; the
executor pods, owned by the driver pod, are garbage-collected once the Job is deleted).

H4 (issue 23): the same drain in a namespace enforcing Pod Security `restricted` (driver and
executor pods admitted by kube-apiserver's PodSecurity admission), RPC authenticated and encrypted,
executors ended with their driver and garbage-collected with its pod (the drain Role has no
deletecollection); and the chart's ValidatingAdmissionPolicy refusing the drain ServiceAccount any
pod that is not executor-shaped (server-side dry runs).

The first three create the Job directly (no CR, no owner): quicker, and the fault is the point. The
last runs the whole hand-off through the operator with `LAGPILOT_DRAIN_SPARK_MASTER=k8s://...`
(test_drain_operator's scenario and exact-once check) and requires Verified.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.operator_process import DEV_SESSION_TIMEOUT_MS
from lagpilot_runtime.drain.plan import split_ranges
from tests.fixtures.kube import KubeEnv, wait_until
from tests.fixtures.node import PodIO, Pods
from tests.real.test_drain_job import produce
from tests.real.test_drain_operator import NODE_DRAIN_CPU_PER_TASK_M, crd, scenario  # noqa: F401 - fixtures of the operator variant

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PARTS = 2
PER_PARTITION = 1500
DENIED = ("Forbidden", " 403", "code=403")
# the driver inside a pod on the real node reaches the API server through its Service (kube-proxy)
IN_CLUSTER_MASTER = "k8s://https://kubernetes.default.svc"
# on the real node (2 CPUs for every pod of the machine's sessions): the driver only schedules, as in
# test_node_spark_k8s; its default request in k8s mode is a whole CPU
NODE_DRIVER_RESOURCES = {"requests": {"cpu": "250m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}}
NODE_OPERATOR_POD_RESOURCES = {"requests": {"cpu": "100m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}}


def _executors(kube: KubeEnv, ns: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", ns, "-l", "spark-role=executor", "-o", "json").stdout
    return json.loads(out)["items"]


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _exit_code(kube: KubeEnv, ns: str, pod: str) -> int | None:
    """The exit code of the pod's (first) container once terminated, None before (or the pod gone)."""
    out = kube.kubectl("get", "pod", "-n", ns, pod, "-o", "json", check=False).stdout
    statuses = (json.loads(out).get("status") or {}).get("containerStatuses") if out else None
    term = ((statuses or [{}])[0].get("state") or {}).get("terminated")
    return int(term["exitCode"]) if term else None


def _ledger(dsn: str, table: str, ranges: dict[int, tuple[int, int]]) -> dict[str, Any]:
    from lagpilot_runtime.sinks.ledger import stats

    return stats(dsn, table, ranges)


def _ledger_rows(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        try:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        except psycopg.errors.UndefinedTable:
            return 0


def _job_done(kube: KubeEnv, ns: str, name: str) -> str | None:
    job = json.loads(kube.kubectl("get", "job", "-n", ns, name, "-o", "json").stdout)
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def _run_drain(
    kube: KubeEnv,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    new_topic: Callable[..., str],
    kafka_bootstrap: str,
    postgres_dsn: str,
    pods_dsn: str,
    cost_ms: int,
    during: Callable[[str, str], Any] | None = None,
    restricted: bool = False,
) -> dict[str, Any]:
    from kubernetes import client

    from lagpilot.act.drain_manifests import DrainSettings, build_drain_job
    from lagpilot.act.spark_rpc_key import SPARK_RPC_KEY, new_key
    from lagpilot.decide.handoff import DrainStatus, PartitionRange, Phase, SubProgress
    from lagpilot.spec import parse_spec
    from lagpilot_dev.spark_k8s import apply_drain_rbac

    ns = pods.namespace("drk8s")  # it enforces Pod Security `restricted` (`pods`)
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    # PodSecurity admission (in kube-apiserver) rejects every pod not meeting `restricted`
    if restricted:
        labels = core.read_namespace(ns).metadata.labels or {}
        assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels
    # the pods' DSN (on the node PostgreSQL's listener on the bridge); the test reads through postgres_dsn
    core.create_namespaced_secret(ns, {"metadata": {"name": "pg"}, "stringData": {"dsn": pods_dsn}})
    # the chart's drain ServiceAccount + Role + RoleBinding for this namespace, as helm renders them
    # (lagpilot_dev.spark_k8s: shared with bench/drain.py --executors --k8s)
    sa = apply_drain_rbac(kube.part, ns, f"lpk-{uuid.uuid4().hex[:5]}")

    topic = new_topic(partitions=PARTS, prefix="drk8s")
    produce(kafka_bootstrap, topic, PER_PARTITION, PARTS)
    ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
    subs = split_ranges(ranges, 2, min_records_per_task=200)  # 4 sub-ranges: 4 tasks
    table = "drk8s_" + uuid.uuid4().hex[:8]
    spec = parse_spec(
        {
            "kafka": {"bootstrapServers": pods.kafka_bootstrap, "sessionTimeoutMs": DEV_SESSION_TIMEOUT_MS},
            "topic": topic,
            "groupId": "g-" + uuid.uuid4().hex[:6],
            "batch": {"maxRecords": 100},
            "processing": {
                "handler": "lagpilot_runtime.sinks.ledger:process",
                "config": {"ledger.table": table, "ledger.cost_ms": str(cost_ms)},
            },
            "drain": {"splitFactor": 2, "maxTasks": 4},
            # this checkout's runtime in the driver and (spark.executorEnv) the executors: the test image
            "template": pods.template(
                env=[{"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}],
                resources=NODE_DRIVER_RESOURCES,
            ),
        }
    )
    drain = DrainStatus(
        id=1,
        phase=Phase.HANDED_OFF,
        ranges=tuple(PartitionRange(p, b, a) for p, (a, b) in ranges.items()),
        sub_ranges=tuple(SubProgress(s.partition, s.index, s.start, s.end, s.start) for s in subs),
    )
    # the image's connector jars (DrainSettings' default), and a small CPU request per task slot
    # (the executor pods' request: 2 slots x 50m)
    settings = DrainSettings(
        spark_master=IN_CLUSTER_MASTER,
        service_account=sa,
        executor_cores=2,
        executor_memory="512m",
        cpu_per_task_m=int(NODE_DRAIN_CPU_PER_TASK_M),
    )
    job = build_drain_job("orders", ns, "unused", spec, drain, 1, settings)
    job["metadata"].pop("ownerReferences")  # no BatchConsumerGroup here: the test owns the Job
    # ... and makes the CR's Spark RPC key as the operator would (act/spark_rpc_key.py; H4)
    key = SPARK_RPC_KEY.secret("orders", ns, "unused", new_key())
    key["metadata"].pop("ownerReferences")
    core.create_namespaced_secret(ns, key)
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == sa and "automountServiceAccountToken" not in pod_spec
    conf = json.loads(
        next(e["value"] for e in pod_spec["containers"][0]["env"] if e["name"] == "LAGPILOT_SPARK_CONF")
    )
    assert conf["spark.executor.instances"] == "2"
    name = job["metadata"]["name"]
    batch.create_namespaced_job(ns, job)

    # two executor pods, created by the driver through the API server, owned by the driver pod
    execs = wait_until(
        lambda: (lambda r: r if len(r) >= 2 else None)(_running(_executors(kube, ns))),
        "2 running executor pods",
        240,
        1.0,
    )
    driver = json.loads(kube.kubectl("get", "pods", "-n", ns, "-l", f"job-name={name}", "-o", "json").stdout)[
        "items"
    ][0]
    assert driver["spec"]["serviceAccountName"] == sa
    for p in execs:
        owners = p["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"]) for o in owners] == [("Pod", driver["metadata"]["name"])], owners
        assert p["spec"]["containers"][0].get("args") == ["executor"] and not p["spec"]["containers"][0].get(
            "command"
        )
    listing = kube.kubectl("get", "pods", "-n", ns, "-l", "spark-role=executor").stdout
    print(listing)
    extra = during(ns, table) if during else None
    if extra and extra.get("stop"):  # the test ends the drain its own way
        return {"extra": extra, "ns": ns, "job": name, "driver": driver["metadata"]["name"]}

    outcome = wait_until(lambda: _job_done(kube, ns, name), "the drain Job to finish", 480, 1.0)
    driver_log = pod_io.logs(ns, driver["metadata"]["name"])
    assert outcome == "Complete", driver_log[-6000:]
    rep = _ledger(postgres_dsn, table, ranges)
    # the executors end with their driver (no deletecollection: the drain Role has none); their pods,
    # owned by the driver pod, are garbage-collected with it when the Job goes (TTL, the operator)
    wait_until(lambda: not _running(_executors(kube, ns)), "executor pods ended", 120, 1.0)
    # their logs read while their pods exist (the API keeps none of a deleted pod)
    executor_logs = pod_io.namespace_logs(ns, "-exec-")
    denied = [ln for ln in driver_log.splitlines() if any(d in ln for d in DENIED)]
    assert denied == [], denied[:5]
    # RPC authenticated and encrypted (spark.authenticate, spark.network.crypto.enabled)
    conf_env = next(
        e["value"] for e in pod_spec["containers"][0]["env"] if e["name"] == "LAGPILOT_SPARK_CONF"
    )
    assert json.loads(conf_env)["spark.network.crypto.enabled"] == "true"
    kube.kubectl("delete", "job", "-n", ns, name, "--cascade=background", "--wait=false")
    wait_until(
        lambda: _executors(kube, ns) == [], "executor pods garbage-collected with the driver pod", 180, 1.0
    )
    return {
        "report": rep,
        "total": PER_PARTITION * PARTS,
        "subs": len(subs),
        "extra": extra,
        "driver_log": driver_log,
        "executor_logs": executor_logs,  # pod name -> log
    }


def test_drain_on_k8s_in_a_namespace_enforcing_restricted(
    kube: KubeEnv,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    new_topic: Callable[..., str],
    kafka_bootstrap: str,
    postgres_dsn: str,
    pods_dsn: str,
) -> None:
    """H4 (issue 23): a namespace labelled pod-security.kubernetes.io/enforce=restricted admits the
    drain's driver (the Job's pod) and the executor pods Spark creates (their pod template), and the
    drain is exact."""
    out = _run_drain(
        kube,
        kube_api,
        pods,
        pod_io,
        new_topic,
        kafka_bootstrap,
        postgres_dsn,
        pods_dsn,
        cost_ms=0,
        restricted=True,
    )
    rep = out["report"]
    print("restricted namespace: executors", sorted(out["executor_logs"]), "ledger:", rep)
    assert len(out["executor_logs"]) >= 2
    assert rep["lost"] == 0 and rep["outside"] == 0 and rep["distinct"] == out["total"], rep


def test_the_drain_account_may_create_only_executor_shaped_pods(
    kube: KubeEnv, kube_api: Any, namespace: Callable[..., str]
) -> None:
    """H4 (issue 23): RBAC cannot narrow pod create; the chart's ValidatingAdmissionPolicy (evaluated
    by kube-apiserver) lets the drain ServiceAccount create only executor-shaped pods. Server-side
    dry runs: admission runs, nothing is stored."""
    from lagpilot_dev.spark_k8s import apply_drain_rbac

    ns = namespace("drk8s-vap")
    sa = apply_drain_rbac(kube.part, ns, f"lpv-{uuid.uuid4().hex[:5]}")
    kube.kubectl("create", "serviceaccount", "-n", ns, "powerful")
    as_drain = kube.kubeconfig_for_service_account(ns, sa)
    sec = {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
    csec = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

    def pod(**over: Any) -> dict[str, Any]:
        spec = {
            "automountServiceAccountToken": False,
            "securityContext": sec,
            "containers": [
                {
                    "name": "spark-kubernetes-executor",
                    "image": "lagpilot/consumer:dev",
                    "args": ["executor"],
                    "securityContext": csec,
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }
        meta = {
            "generateName": "exec-",
            "labels": {"spark-role": "executor"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": str(uuid.uuid4())}
            ],
        }
        for k, v in over.items():
            (meta if k in ("labels", "ownerReferences") else spec)[k] = v
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def create(manifest: dict[str, Any], kubeconfig: Path | None = as_drain) -> Any:
        return kube.kubectl(
            "create",
            "--dry-run=server",
            "-n",
            ns,
            "-f",
            "-",
            check=False,
            input_text=json.dumps(manifest),
            kubeconfig=kubeconfig,
        )

    ok = create(pod())
    assert ok.returncode == 0, ok.stderr  # what Spark creates is admitted
    # a new ValidatingAdmissionPolicy and its binding take effect once kube-apiserver's policy informer
    # has them (eventually consistent; seen missing under parallel sessions): wait until one bad pod is refused
    wait_until(
        lambda: "ValidatingAdmissionPolicy" in create(pod(hostNetwork=True)).stderr,
        "the drain admission policy in force",
        60,
        interval=1,
    )
    rpc_key = [
        {"name": "tmp", "emptyDir": {}},
        {"name": "orders-drain-rpc-key-volume", "secret": {"secretName": "orders-drain-rpc-key"}},
    ]
    ok = create(pod(volumes=rpc_key))
    assert ok.returncode == 0, ok.stderr  # with the CR's Spark RPC key, as Spark mounts it (H4)
    denied = {
        "another ServiceAccount": pod(serviceAccountName="powerful"),
        "a token mounted": pod(automountServiceAccountToken=True),
        "not owned by a pod": pod(ownerReferences=[]),
        "a Secret volume": pod(
            volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x"}}]
        ),
        "a second Secret volume": pod(
            volumes=[
                *rpc_key,
                {"name": "a-drain-rpc-key-volume", "secret": {"secretName": "a-drain-rpc-key"}},
            ]
        ),
        "the host network": pod(hostNetwork=True),
    }
    for what, manifest in denied.items():
        r = create(manifest)
        print(f"{what}: rc {r.returncode}: {r.stderr.strip()[:300]}")
        assert r.returncode != 0 and "ValidatingAdmissionPolicy" in r.stderr, (what, r.stdout, r.stderr)
    # the policy binds the drain account only: the same pod from an admin is the admin's business
    admin = create(pod(serviceAccountName="powerful"), kubeconfig=None)
    assert admin.returncode == 0, admin.stderr


def test_drain_on_k8s_survives_an_executor_sigkill(
    kube: KubeEnv,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    new_topic: Callable[..., str],
    kafka_bootstrap: str,
    postgres_dsn: str,
    pods_dsn: str,
) -> None:
    def kill_one(ns: str, table: str) -> dict[str, Any]:
        wait_until(
            lambda: _ledger_rows(postgres_dsn, table) >= 200, "some deliveries before the kill", 240, 0.5
        )
        victim = _running(_executors(kube, ns))[0]
        pod, exec_id = victim["metadata"]["name"], victim["metadata"]["labels"]["spark-exec-id"]
        before = _ledger_rows(postgres_dsn, table)
        # its processes (the node's container, through its init process)
        assert pod_io.kill(ns, pod), f"{pod} had no running process to kill"
        # the fault fired: its container ended by SIGKILL (128 + 9) and the pod is Failed (no restart)
        code = wait_until(lambda: _exit_code(kube, ns, pod), f"{pod}'s container terminated", 60, 0.5)
        assert code == 137, code
        wait_until(
            lambda: (
                json.loads(kube.kubectl("get", "pod", "-n", ns, pod, "-o", "json").stdout)["status"].get(
                    "phase"
                )
                == "Failed"
            ),
            f"{pod} Failed",
            60,
            0.5,
        )
        return {"pod": pod, "exec_id": exec_id, "rows_at_kill": before, "at": time.time()}

    out = _run_drain(
        kube,
        kube_api,
        pods,
        pod_io,
        new_topic,
        kafka_bootstrap,
        postgres_dsn,
        pods_dsn,
        cost_ms=1500,
        during=kill_one,
    )
    rep, killed = out["report"], out["extra"]
    print(
        "killed:",
        killed,
        "ledger:",
        {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")},
    )
    assert killed["rows_at_kill"] < out["total"], "the drain finished before the kill: slow the sink down"
    # Spark saw it: the executor's running tasks failed with ExecutorLostFailure and were run again;
    # (Spark also asks the API server for a replacement pod; whether it starts before the end varies)
    assert f"ExecutorLostFailure (executor {killed['exec_id']} exited" in out["driver_log"], out[
        "driver_log"
    ][-4000:]
    print("executor pods that ran:", out["executor_logs"])
    assert rep["lost"] == 0 and rep["outside"] == 0 and rep["distinct"] == out["total"], rep
    # at-least-once across the kill: only the batches the killed executor's tasks had delivered but
    # not yet committed as progress come again: at most one batch (100) per task it was running,
    # and it ran at most 2 at a time (spark.executor.cores); never more
    assert rep["duplicated"] <= 2 * 100, rep


def test_drain_on_k8s_driver_lost_executors_garbage_collected(
    kube: KubeEnv,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    new_topic: Callable[..., str],
    kafka_bootstrap: str,
    postgres_dsn: str,
    pods_dsn: str,
) -> None:
    """Failure cleanup through owner references: the driver is SIGKILLed (no shutdown hook, so Spark
    cannot delete its executors itself), the Job fails; deleting the Job (what the operator does on
    cancel/failure, or its TTL) removes the driver pod, and the garbage collector the executor pods."""

    def kill_driver(ns: str, table: str) -> dict[str, Any]:
        wait_until(lambda: _ledger_rows(postgres_dsn, table) >= 100, "some deliveries", 240, 0.5)
        driver = json.loads(kube.kubectl("get", "pods", "-n", ns, "-l", "job-name", "-o", "json").stdout)[
            "items"
        ][0]
        pod = driver["metadata"]["name"]
        # the driver and its JVM at once, like a lost node (the node's container, through its
        # init process)
        assert pod_io.kill(ns, pod), f"{pod} had no running process to kill"
        # the fault fired: its container ended by SIGKILL (128 + 9)
        code = wait_until(lambda: _exit_code(kube, ns, pod), f"{pod}'s container terminated", 60, 0.5)
        assert code == 137, code
        return {"stop": True, "pod": pod}

    out = _run_drain(
        kube,
        kube_api,
        pods,
        pod_io,
        new_topic,
        kafka_bootstrap,
        postgres_dsn,
        pods_dsn,
        cost_ms=1500,
        during=kill_driver,
    )
    ns, job = out["ns"], out["job"]
    assert wait_until(lambda: _job_done(kube, ns, job), "the Job to fail", 120, 1.0) == "Failed"
    left = _executors(kube, ns)
    assert left, "the executor pods should outlive their killed driver until its pod is deleted"
    assert all(not p["metadata"].get("deletionTimestamp") for p in left)
    kube.kubectl("delete", "job", "-n", ns, job, "--cascade=background", "--wait=false")
    wait_until(lambda: _executors(kube, ns) == [], "executor pods garbage-collected", 180, 1.0)
    print("executors left after the driver died:", [p["metadata"]["name"] for p in left], "-> all collected")


def test_operator_drain_on_k8s_reaches_verified(
    scenario: Callable[..., Any],
    kube: KubeEnv,
    pods: Pods,
    pod_io: PodIO,
    kafka_admin: Any,
    postgres_dsn: str,
) -> None:
    """The same path chosen by the operator (LAGPILOT_DRAIN_SPARK_MASTER): the hand-off, a drain Job
    whose driver gets its executors from the API server, Verified, exact-once over both paths
    (the checks of test_drain_operator.finish_and_check)."""
    import threading

    from lagpilot_dev.spark_k8s import apply_drain_rbac
    from tests.real.test_drain_operator import PARTS as OP_PARTS
    from tests.real.test_drain_operator import finish_and_check

    ops = {
        "LAGPILOT_DRAIN_SPARK_MASTER": IN_CLUSTER_MASTER,
        "LAGPILOT_DRAIN_SERVICE_ACCOUNT": "lagpilot-drain",
        "LAGPILOT_DRAIN_EXECUTOR_CORES": "6",
        "LAGPILOT_DRAIN_EXECUTOR_MEMORY": "512m",
    }
    # on the node the driver's request is the template's (consumers and drain pods: the consumers'
    # default CPU, the drain Job's default memory) instead of the k8s mode's whole CPU for a driver
    # that only schedules: 2 CPUs serve every pod of the machine's sessions
    s = scenario(
        {p: 15000 for p in range(OP_PARTS)},
        operator_env=ops,
        template={"resources": NODE_OPERATOR_POD_RESOURCES},
    )
    # the chart's drain ServiceAccount/Role in the CR's namespace (release "lagpilot": lagpilot-drain);
    # applied before the drain is planned (a pod of a missing ServiceAccount is refused, then retried)
    assert apply_drain_rbac(kube.part, s.ns, "lagpilot") == "lagpilot-drain"
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(2.0):
            try:
                seen.update(p["metadata"]["name"] for p in _running(_executors(kube, s.ns)))
            except Exception:  # noqa: BLE001 - a poll that failed: try again
                pass

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        finish_and_check(s, kafka_admin, postgres_dsn)
    finally:
        stop.set()
        t.join(10)
    print("executor pods seen running:", sorted(seen))
    assert len(seen) >= 2, seen
    # H4: the executors end with their driver and are not deleted by it (the drain Role has no delete);
    # owned by the driver pod, they go with it when the drain Job goes (its TTL, or deleted here)
    wait_until(lambda: not _running(_executors(kube, s.ns)), "executor pods ended", 120, 1.0)
    owners = {
        (r.get("kind"), bool(r.get("controller")))
        for p in _executors(kube, s.ns)
        for r in p["metadata"].get("ownerReferences") or []
    }
    assert owners <= {("Pod", True)}, owners
    # the driver's log, read while its pod exists (the API keeps none of a deleted pod)
    driver_logs = {
        name: text for name, text in pod_io.namespace_logs(s.ns, "-drain-").items() if "-exec-" not in name
    }
    assert driver_logs
    kube.kubectl(
        "delete",
        "jobs",
        "-n",
        s.ns,
        "-l",
        "app.kubernetes.io/name=lagpilot-drain",
        "--cascade=background",
        "--wait=false",
    )
    wait_until(
        lambda: _executors(kube, s.ns) == [], "executor pods garbage-collected with the driver pod", 180, 1.0
    )
    denied = [ln for text in driver_logs.values() for ln in text.splitlines() if any(d in ln for d in DENIED)]
    assert denied == [], denied[:5]


def _intruder(pod: dict[str, Any], exec_id: str, secret: str) -> dict[str, Any]:
    """A copy of a running executor pod's spec (same image, args, env: the driver's URL, the app id)
    as another executor id that mounts `secret` where the real one mounts the CR's RPC key; without
    Spark's labels and owner, so Spark's pod watch does not take it for one of its executors."""
    spec = json.loads(json.dumps(pod["spec"]))
    spec.pop("nodeName", None)
    spec["restartPolicy"] = "Never"
    c = spec["containers"][0]
    c["env"] = [
        ({**e, "value": exec_id} if e["name"] == "SPARK_EXECUTOR_ID" else e)
        for e in c.get("env") or []
        if e["name"] != "SPARK_EXECUTOR_POD_NAME"
    ]
    swapped = 0
    for v in spec.get("volumes") or []:
        if (v.get("secret") or {}).get("secretName", "").endswith("-drain-rpc-key"):
            v["secret"]["secretName"] = secret
            swapped += 1
    assert swapped == 1, spec.get("volumes")  # the copy differs from a real executor in its secret only
    return {"metadata": {"name": f"intruder-{exec_id}", "labels": {"test": "wrong-rpc-secret"}}, "spec": spec}


def test_an_executor_with_another_rpc_secret_is_refused_by_the_driver(
    kube: KubeEnv,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    new_topic: Callable[..., str],
    kafka_bootstrap: str,
    postgres_dsn: str,
    pods_dsn: str,
) -> None:
    """H4 (issue 23), the negative: spark.authenticate with the CR's key file means a client that
    presents another secret gets nothing from the driver. Mid-drain, a copy of a running executor's
    pod (same image, args, driver URL, app id: only its executor id and the Secret mounted at the RPC
    key's path differ, a Secret with another 32-byte key) is started: it must fail to connect
    (authentication), register with the driver as no executor, and the drain (whose real executors
    present the right key: the control) stays exact."""
    from kubernetes import client

    from lagpilot.act.spark_rpc_key import SPARK_RPC_KEY, new_key

    def intrude(ns: str, table: str) -> dict[str, Any]:
        # the driver is up (it created its executors' pods, running): no need to wait for deliveries
        core = client.CoreV1Api(kube_api)
        wrong = SPARK_RPC_KEY.secret("intruder", ns, "unused", new_key())
        wrong["metadata"].pop("ownerReferences")
        core.create_namespaced_secret(ns, wrong)
        victim = _running(_executors(kube, ns))[0]
        pod = _intruder(victim, "99", wrong["metadata"]["name"])
        core.create_namespaced_pod(ns, pod)
        name = pod["metadata"]["name"]

        # the fault fired: the intruder's process ran (a pid) and ended, Failed (no restart)
        def ended() -> dict[str, Any] | None:
            p = core.read_namespaced_pod(name, ns).to_dict()
            return p if p["status"]["phase"] in ("Failed", "Succeeded") else None

        got = wait_until(ended, "the intruder pod to end", 600, 1.0)
        log = pod_io.logs(ns, name)
        return {"phase": got["status"]["phase"], "log": log, "rows_then": _ledger_rows(postgres_dsn, table)}

    out = _run_drain(
        kube,
        kube_api,
        pods,
        pod_io,
        new_topic,
        kafka_bootstrap,
        postgres_dsn,
        pods_dsn,
        cost_ms=1000,
        during=intrude,
    )
    rep, intruder = out["report"], out["extra"]
    ilog = intruder["log"]
    assert len(out["executor_logs"]) >= 2, out["executor_logs"]
    print("intruder:", intruder["phase"], "log tail:", ilog[-3000:])
    print("ledger:", {k: rep[k] for k in ("delivered", "distinct", "lost", "duplicated", "outside")})
    assert intruder["rows_then"] < out["total"], (
        "the drain ended before the intruder tried: slow the sink down"
    )
    # it ran and reached the driver: the executor backend started with authentication on, and its
    # handshake (Spark's AuthEngine, keyed by the secret file) with the driver failed; the driver then
    # closed the connection (no SASL fallback either): it never registered
    assert intruder["phase"] == "Failed", ilog[-3000:]
    assert "KubernetesExecutorBackend: Started daemon" in ilog and "authentication enabled" in ilog, ilog[
        -3000:
    ]
    assert "New auth protocol failed" in ilog, ilog[-3000:]
    assert "Successfully registered with driver" not in ilog, ilog[-3000:]
    # the control: the real executors, the same pod spec with the CR's key, registered and never failed
    for elog in out["executor_logs"].values():
        assert "Successfully registered with driver" in elog and "New auth protocol failed" not in elog, elog[
            -3000:
        ]
    assert rep["lost"] == 0 and rep["outside"] == 0 and rep["distinct"] == out["total"], rep
