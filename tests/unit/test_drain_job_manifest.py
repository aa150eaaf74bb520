"""The drain Job manifest and the Job → state view: pure builders, one table each."""

from __future__ import annotations

import json

import pytest

from lagpilot.act.drain_manifests import DrainSettings, build_drain_job, drain_plan_for, job_observation
from lagpilot.decide.handoff import DrainStatus, JobState, PartitionRange, Phase, SubProgress
from lagpilot.spec import parse_spec
from lagpilot_runtime.drain.plan import DrainPlan

RAW = {
    "kafka": {
        "bootstrapServers": "k:9092",
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "SCRAM-SHA-512",
        "secretRef": {"name": "kafka-creds"},
    },
    "topic": "orders",
    "groupId": "orders-batch",
    "batch": {"maxRecords": 300},
    "processing": {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "pg", "key": "dsn"}}},
    "drain": {"splitFactor": 4, "maxTasks": 6},
}
DRAIN = DrainStatus(
    id=3,
    phase=Phase.HANDED_OFF,
    ranges=(PartitionRange(1, 900, 100),),
    sub_ranges=(SubProgress(1, 0, 100, 500, 100), SubProgress(1, 1, 500, 900, 700, 200)),
)


def job(settings: DrainSettings | None = None, **spec_over) -> dict:
    return build_drain_job("orders", "ns1", "uid-1", parse_spec({**RAW, **spec_over}), DRAIN, 2, settings)


def env_of(manifest: dict) -> dict:
    return {e["name"]: e for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_job_is_owned_named_and_never_retried_by_kubernetes():
    m = job()
    assert m["metadata"]["name"] == "orders-drain-3-2"
    owner = m["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "BatchConsumerGroup",
        "orders",
        "uid-1",
        True,
    )
    assert m["spec"]["backoffLimit"] == 0 and m["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    c = m["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["lagpilot", "drain"]
    assert c["securityContext"]["runAsNonRoot"] and not c["securityContext"]["allowPrivilegeEscalation"]


def test_plan_in_env_is_the_recorded_sub_ranges():
    plan = DrainPlan.from_json(env_of(job())["LAGPILOT_DRAIN_PLAN"]["value"])
    assert (plan.topic, plan.group_id, plan.drain_id, plan.batch_max_records) == (
        "orders",
        "orders-batch",
        "3",
        300,
    )
    assert [(s.partition, s.index, s.start, s.end) for s in plan.sub_ranges] == [
        (1, 0, 100, 500),
        (1, 1, 500, 900),
    ]
    assert plan.parallelism == 2  # min(maxTasks, sub-ranges)
    assert plan.attempt == 2  # the launched attempt: its tasks' sign of life names it
    assert plan == drain_plan_for(parse_spec(RAW), DRAIN, "uid-1", 2)


def test_secrets_only_by_reference():
    m = job()
    env = env_of(m)
    for name, key in [
        ("LAGPILOT_SASL_USERNAME", "username"),
        ("LAGPILOT_SASL_PASSWORD", "password"),
        ("LAGPILOT_POSTGRES_DSN", "dsn"),
    ]:
        assert "value" not in env[name] and env[name]["valueFrom"]["secretKeyRef"]["key"] == key
    text = json.dumps(m)
    assert 'password":' not in text.replace('"key": "password"', "")


@pytest.mark.parametrize(
    "master,sa,expect_master,expect_token",
    [
        ("", "", False, False),
        ("k8s://https://kubernetes.default.svc", "lagpilot-drain", True, True),
    ],
    ids=["local-mode", "k8s-client-mode"],
)
def test_spark_mode(master, sa, expect_master, expect_token):
    m = job(DrainSettings(spark_master=master, service_account=sa, spark_jars="/jars"))
    env = env_of(m)
    pod = m["spec"]["template"]["spec"]
    assert env["LAGPILOT_SPARK_JARS"]["value"] == "/jars"
    assert ("LAGPILOT_SPARK_MASTER" in env) == expect_master
    assert pod.get("automountServiceAccountToken", True) == expect_token
    if expect_master:
        conf = json.loads(env["LAGPILOT_SPARK_CONF"]["value"])
        assert conf["spark.kubernetes.executor.secretKeyRef.LAGPILOT_SASL_PASSWORD"] == "kafka-creds:password"
        assert conf["spark.kubernetes.namespace"] == "ns1" and pod["serviceAccountName"] == "lagpilot-drain"
        assert not any("PASSWORD" in k and "secretKeyRef" not in k for k in conf)


@pytest.mark.parametrize("cores,parallelism_subs,executors", [(2, 2, 1), (1, 2, 2), (3, 2, 1)])
def test_k8s_executors_sized_from_parallelism(cores, parallelism_subs, executors):
    m = job(
        DrainSettings(
            spark_master="k8s://https://kubernetes.default.svc",
            service_account="sa",
            executor_cores=cores,
            executor_memory="768m",
        )
    )
    env = env_of(m)
    conf = json.loads(env["LAGPILOT_SPARK_CONF"]["value"])
    assert (conf["spark.executor.instances"], conf["spark.executor.cores"]) == (str(executors), str(cores))
    assert conf["spark.executor.memory"] == "768m"
    # no PVC rights in the drain Role: Spark must not list/own/reuse claims
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.local.dir"].startswith("/tmp/")  # the emptyDir; the root filesystem is read-only
    # the driver finds its own pod (owner of the executors) and is reachable on the pod IP
    assert env["LAGPILOT_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["LAGPILOT_POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_drain_settings_from_env():
    s = DrainSettings.from_env(
        {
            "LAGPILOT_DRAIN_SPARK_MASTER": "k8s://https://a:6443",
            "LAGPILOT_DRAIN_EXECUTOR_CORES": "1",
            "LAGPILOT_DRAIN_EXECUTOR_MEMORY": "512m",
        }
    )
    assert (s.spark_master, s.executor_cores, s.executor_memory) == ("k8s://https://a:6443", 1, "512m")
    d = DrainSettings.from_env({})
    assert (d.spark_master, d.executor_cores, d.executor_memory) == ("", 2, "1g")


def pod(phase, exit_code=None, message=None):
    st = {"phase": phase}
    if exit_code is not None:
        st["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code, "message": message}}}]
    return {"metadata": {}, "status": st}


JOBS = [
    ("absent", None, [], JobState.ABSENT, 0),
    ("absent-pod-still-running", None, [pod("Running")], JobState.ABSENT, 1),
    ("active", {"status": {"active": 1}}, [pod("Running")], JobState.ACTIVE, 1),
    (
        "complete",
        {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
        [pod("Succeeded", 0)],
        JobState.SUCCEEDED,
        0,
    ),
    (
        "failed",
        {
            "status": {
                "failed": 1,
                "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
            }
        },
        [pod("Failed", 3, "topic t: partition 1: offsets 0..9 deleted by retention")],
        JobState.FAILED,
        0,
    ),
    (
        "failure-target",
        {"status": {"conditions": [{"type": "FailureTarget", "status": "True", "reason": "x"}]}},
        [pod("Failed", 1)],
        JobState.FAILED,
        0,
    ),
]


@pytest.mark.parametrize("job_obj,pods,state,alive", [r[1:] for r in JOBS], ids=[r[0] for r in JOBS])
def test_job_observation(job_obj, pods, state, alive):
    o = job_observation(job_obj, pods)
    assert o.state is state and o.pods_alive == alive
    if job_obj and pods and pods[0]["status"].get("containerStatuses") and state is JobState.FAILED:
        assert o.message  # the termination message (or exit code) reaches status


# ---- launcher sparkApplication ------------------------------------------------------------------


def app(settings: DrainSettings | None = None) -> dict:
    from lagpilot.act.drain_manifests import build_spark_application

    return build_spark_application(
        "orders",
        "ns1",
        "uid-1",
        parse_spec({**RAW, "drain": {**RAW["drain"], "launcher": "sparkApplication"}}),
        DRAIN,
        2,
        settings,
    )


def test_spark_application_runs_the_jobs_plan_with_the_jobs_env_labels_and_owner():
    a, j = app(DrainSettings(service_account="lagpilot-drain", executor_cores=2)), job()
    assert (a["apiVersion"], a["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    assert (
        a["metadata"]["name"] == j["metadata"]["name"] == "orders-drain-3-2"
    )  # found again after a lost write
    assert a["metadata"]["ownerReferences"] == j["metadata"]["ownerReferences"]
    s = a["spec"]
    assert (s["type"], s["mode"], s["restartPolicy"]) == (
        "Python",
        "cluster",
        {"type": "Never"},
    )  # retries are ours
    job_env = env_of(j)
    for role in ("driver", "executor"):
        env = {e["name"]: e for e in s[role]["env"]}
        assert env == job_env  # the same plan, handler, sink and Secret refs as the Job's container
        assert s[role]["labels"]["lagpilot.io/drain-job"] == "orders-drain-3-2"  # pods_alive sees its pods
        assert (
            s[role]["securityContext"]["runAsNonRoot"] and s[role]["podSecurityContext"]["runAsUser"] == 10001
        )
    assert s["driver"]["serviceAccount"] == "lagpilot-drain"
    assert s["executor"]["instances"] == 1 and s["executor"]["cores"] == 2  # ceil(parallelism 2 / 2 cores)
    assert 'password":' not in json.dumps(a).replace('"key": "password"', "")


APPS = [
    ("absent", None, [], JobState.ABSENT),
    ("new", {"metadata": {}}, [], JobState.ACTIVE),
    (
        "submitted",
        {"status": {"applicationState": {"state": "SUBMITTED"}}},
        [pod("Pending")],
        JobState.ACTIVE,
    ),
    ("running", {"status": {"applicationState": {"state": "RUNNING"}}}, [pod("Running")], JobState.ACTIVE),
    (
        "succeeding",
        {"status": {"applicationState": {"state": "SUCCEEDING"}}},
        [pod("Running")],
        JobState.ACTIVE,
    ),
    (
        "completed",
        {"status": {"applicationState": {"state": "COMPLETED"}}},
        [pod("Succeeded", 0)],
        JobState.SUCCEEDED,
    ),
    (
        "failed",
        {
            "status": {
                "applicationState": {"state": "FAILED", "errorMessage": "driver pod failed\nexit code 3"}
            }
        },
        [pod("Failed", 3)],
        JobState.FAILED,
    ),
    (
        "submission-failed",
        {"status": {"applicationState": {"state": "SUBMISSION_FAILED"}}},
        [],
        JobState.FAILED,
    ),
]


@pytest.mark.parametrize("app_obj,pods,state", [r[1:] for r in APPS], ids=[r[0] for r in APPS])
def test_spark_application_observation(app_obj, pods, state):
    from lagpilot.act.drain_manifests import spark_application_observation

    o = spark_application_observation(app_obj, pods)
    assert o.state is state and o.pods_alive == sum(
        1 for p in pods if p["status"]["phase"] in ("Pending", "Running")
    )
    if state is JobState.FAILED:
        assert o.message in ("exit code 3", "SparkApplication SUBMISSION_FAILED")


@pytest.mark.parametrize("blank", ["", "\n", "  \n\t"])
def test_job_observation_blank_termination_message(blank):
    # a container that exits non-zero with a blank termination message (FallbackToLogsOnError on a
    # log of empty lines, or a handler that wrote only a newline): its exit code stands for it
    failed = {
        "status": {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
        }
    }
    o = job_observation(failed, [pod("Failed", 3, blank)])
    assert o.state is JobState.FAILED and o.message == "exit code 3"
    complete = {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    assert (
        job_observation(complete, [pod("Succeeded", 0), pod("Failed", 3, blank)]).state is JobState.SUCCEEDED
    )
