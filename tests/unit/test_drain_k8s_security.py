"""H4 (issue 23): Spark on Kubernetes mode, hardened — on the manifests (pure) and the chart.

- Spark RPC between the driver and its executors carries the tasks (and with them the Kafka
  credentials): `spark.authenticate` (the CR's Secret `<cr>-drain-rpc-key`, a file in the driver's
  and the executors' pods: never the env _SPARK_AUTH_SECRET Spark would generate) and
  `spark.network.crypto.enabled` (AES-based encryption) on.
- The executor pods Spark creates get a pod template with the Pod Security `restricted` context
  (the drain Job's own pod, the driver, already has it), so a namespace enforcing `restricted`
  admits them (the real API server does that in tests/real/test_drain_k8s.py).
- The drain ServiceAccount's Role is what the client-mode driver needs, no more: pods
  get/list/watch/create/patch (patch: Spark labels a finished executor inactive). No `deletecollection` (Spark's label-selector cleanups are turned off:
  executors are owned by the driver pod and garbage-collected with it), no services (client mode
  makes none), no configmaps (`spark.kubernetes.executor.disableConfigMap`).
- Pod create cannot be narrowed by RBAC: a ValidatingAdmissionPolicy lets the drain
  ServiceAccount create only executor-shaped pods (owned by a pod, the namespace's default
  ServiceAccount without a token, emptyDir volumes only, no host namespaces).
"""

from __future__ import annotations

import json

from lagpilot.act.drain_manifests import DrainSettings, build_drain_job, build_spark_application
from lagpilot.decide.handoff import DrainStatus, PartitionRange, Phase, SubProgress
from lagpilot.spec import parse_spec
from lagpilot_dev import helm as h

RAW = {
    "kafka": {"bootstrapServers": "k:9092"},
    "topic": "orders",
    "groupId": "g",
    "processing": {"sink": "log"},
    "drain": {"splitFactor": 2, "maxTasks": 4},
}
DRAIN = DrainStatus(
    id=1,
    phase=Phase.HANDED_OFF,
    ranges=(PartitionRange(0, 1000, 0),),
    sub_ranges=(SubProgress(0, 0, 0, 500, 0), SubProgress(0, 1, 500, 1000, 500)),
)
K8S = DrainSettings(spark_master="k8s://https://kubernetes.default.svc", service_account="lp-drain")
ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod_spec: dict) -> list[str]:
    """The Pod Security `restricted` rules (v1.35) that a pod spec breaks (empty: admitted)."""
    out = []
    psc = pod_spec.get("securityContext") or {}
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(k):
            out.append(k)
    for v in pod_spec.get("volumes") or []:
        if not set(v) - {"name"} <= ALLOWED_VOLUMES:
            out.append(f"volume {v['name']}")
    for c in pod_spec.get("containers") or []:
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: capabilities")
        if not (sc.get("runAsNonRoot") or (psc.get("runAsNonRoot") and sc.get("runAsNonRoot") is not False)):
            out.append(f"{c['name']}: runAsNonRoot")
        if sc.get("runAsUser") == 0 or psc.get("runAsUser") == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile")
    return out


def k8s_job() -> dict:
    return build_drain_job("orders", "ns1", "uid", parse_spec(RAW), DRAIN, 1, K8S)


def env_of(job: dict) -> dict:
    return {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def spark_conf(job: dict) -> dict:
    return json.loads(env_of(job)["LAGPILOT_SPARK_CONF"]["value"])


def test_spark_rpc_is_authenticated_and_encrypted():
    conf = spark_conf(k8s_job())
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.network.crypto.enabled"] == "true"
    # the secret: the CR's Secret as a file on both sides, never generated into the executors' env
    assert {k for k in conf if k.startswith("spark.authenticate.secret")} == {
        "spark.authenticate.secret.file"
    }


def test_executor_pods_get_a_restricted_pod_template():
    env = env_of(k8s_job())
    template = json.loads(env["LAGPILOT_SPARK_EXECUTOR_POD_TEMPLATE"]["value"])
    assert template["kind"] == "Pod"
    spec = template["spec"]
    assert restricted_violations(spec) == []
    assert spec["automountServiceAccountToken"] is False  # executors never call the API
    # not the driver's (drain) ServiceAccount, Spark's fallback when the template names none
    assert spec["serviceAccountName"] == "default"
    # the JVM's and the Python workers' scratch space: the root filesystem is read-only
    assert {"name": "tmp", "mountPath": "/tmp"} in spec["containers"][0]["volumeMounts"]
    # ... and the working directory, where the executor fetches spark.jars (real node, issue 24)
    assert spec["containers"][0]["workingDir"] == "/tmp"
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_drivers_pod_is_restricted_too():
    assert restricted_violations(k8s_job()["spec"]["template"]["spec"]) == []
    app = build_spark_application("orders", "ns1", "uid", parse_spec(RAW), DRAIN, 1, K8S)["spec"]
    for role in ("driver", "executor"):
        pod = {
            "securityContext": app[role]["podSecurityContext"],
            "containers": [{"name": role, "securityContext": app[role]["securityContext"]}],
            "volumes": app["volumes"],
        }
        assert restricted_violations(pod) == [], role


def test_spark_cleans_up_through_owner_references_not_deletecollection():
    conf = spark_conf(k8s_job())
    # stop() and the allocator delete executor pods by label (deletecollection) only when this is true
    assert conf["spark.kubernetes.executor.deleteOnTermination"] == "false"
    # stop() deletes services by label (deletecollection) unless this is false; client mode creates none
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    # no executor ConfigMap (nothing in SPARK_CONF_DIR to ship): nothing to create or delete
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"
    # executors as the namespace's default ServiceAccount (Spark's fallback is the driver's)
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "default"


def test_the_runtime_writes_the_executor_pod_template(tmp_path):
    from lagpilot_runtime.drain.spark import executor_pod_template_conf

    template = env_of(k8s_job())["LAGPILOT_SPARK_EXECUTOR_POD_TEMPLATE"]["value"]
    conf = executor_pod_template_conf({"LAGPILOT_SPARK_EXECUTOR_POD_TEMPLATE": template}, tmp_path)
    path = conf["spark.kubernetes.executor.podTemplateFile"]
    assert path.startswith(str(tmp_path)) and json.loads(open(path).read()) == json.loads(template)
    assert executor_pod_template_conf({}, tmp_path) == {}  # local mode: nothing


def _drain_objects(values: dict | None = None) -> list[dict]:
    rendered = h.template(
        {"drain": {"namespaces": ["d1"], **(values or {})}}, release="lp", namespace="lagpilot-system"
    )
    return rendered.objects


def test_the_drain_role_is_what_the_client_mode_driver_needs():
    roles = [
        o
        for o in _drain_objects()
        if o["kind"] == "Role" and o["metadata"]["labels"].get("app.kubernetes.io/component") == "drain"
    ]
    assert len(roles) == 1
    granted = {
        (g, r, v)
        for rule in roles[0]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    # patch: Spark labels a finished executor pod spark-exec-inactive (deleteOnTermination false)
    assert granted == {("", "pods", v) for v in ("get", "list", "watch", "create", "patch")}, granted


def test_an_admission_policy_limits_what_pods_the_drain_account_creates():
    objs = _drain_objects()
    policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    sel = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
    assert (sel["key"], sel["operator"], sel["values"]) == ("kubernetes.io/metadata.name", "In", ["d1"])
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
    ]
    cond = " ".join(c["expression"] for c in policy["spec"]["matchConditions"])
    assert ":lp-lagpilot-drain'" in cond and "request.userInfo.username" in cond
    text = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for needle in (
        "serviceAccountName",
        "automountServiceAccountToken",
        "ownerReferences",
        "volumes",
        "hostNetwork",
        "oldObject.metadata.labels['spark-role'] == 'executor'",
    ):
        assert needle in text, needle
    assert not [
        o
        for o in _drain_objects({"rbac": {"create": True, "admissionPolicy": False}})
        if o["kind"].startswith("ValidatingAdmissionPolicy")
    ]


def test_executor_pods_request_cpu_per_task_not_a_cpu_per_core():
    """Spark's default request is one CPU per executor core: on a 2-CPU node the driver and two
    executors did not fit. Executors request their cores at the local-mode per-task request."""
    conf = spark_conf(
        build_drain_job(
            "orders",
            "ns1",
            "uid",
            parse_spec(RAW),
            DRAIN,
            1,
            DrainSettings(spark_master=K8S.spark_master, executor_cores=2, cpu_per_task_m=250),
        )
    )
    assert conf["spark.kubernetes.executor.request.cores"] == "500m"
    assert conf["spark.executor.cores"] == "2"  # the task slots are unchanged


def test_the_rpc_secret_is_a_mounted_secret_file_not_a_literal_env():
    """H4 (issue 23): Spark generates the RPC secret and puts it into every executor pod as the literal
    env _SPARK_AUTH_SECRET (readable by whoever may `get` pods) unless the secret comes from a file
    (spark.authenticate.secret.file). The operator's per-CR Secret is mounted
    in the driver's pod (the Job's and the warm runtime's) and, through
    spark.kubernetes.executor.secrets, in every executor pod."""
    from lagpilot.act.drain_runtime import build_runtime_deployment

    job = k8s_job()
    conf = spark_conf(job)
    secret = "orders-drain-rpc-key"
    mount_dir = conf[f"spark.kubernetes.executor.secrets.{secret}"]
    # one file for both sides: the executor's first connection reads only spark.authenticate.secret.file
    assert conf["spark.authenticate.secret.file"] == f"{mount_dir}/key"
    assert conf["spark.authenticate"] == "true"
    # ... and only with a k8s master in its startup conf: the image's entrypoint adds it from this
    assert conf["spark.executorEnv.LAGPILOT_SPARK_MASTER"] == K8S.spark_master
    runtime = build_runtime_deployment(
        "orders", "ns1", "uid", parse_spec({**RAW, "drain": {"warmRuntime": True}}), K8S
    )
    for pod in (job["spec"]["template"]["spec"], runtime["spec"]["template"]["spec"]):
        volumes = {v["name"]: v for v in pod["volumes"]}
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == mount_dir]
        assert volumes[mount["name"]]["secret"]["secretName"] == secret and mount["readOnly"] is True
    # local mode runs no executors: no RPC, no key
    local = build_drain_job("orders", "ns1", "uid", parse_spec(RAW), DRAIN, 1, DrainSettings())
    assert all("secret" not in v for v in local["spec"]["template"]["spec"]["volumes"])


def test_the_rpc_key_secret_name_leaves_room_for_sparks_volume_name():
    """Spark names the executor's volume `<secret>-volume`, a DNS label (<= 63): a CR name of 52
    characters (the CRD's maximum) still fits."""
    from lagpilot.act.drain_manifests import spark_rpc_key_secret_name

    long = "a" * 52
    assert len(spark_rpc_key_secret_name(long) + "-volume") <= 63
    assert spark_rpc_key_secret_name(long) != spark_rpc_key_secret_name("a" * 51)
    assert spark_rpc_key_secret_name("orders") == "orders-drain-rpc-key"


def test_the_operator_makes_the_rpc_key_secret_before_the_job_and_refuses_a_foreign_one():
    """H4: with a k8s master, create_job makes the CR's `<cr>-drain-rpc-key` (owned by the CR) before
    the Job whose pods mount it; a Secret of that name the CR does not own stops the launch."""
    from types import SimpleNamespace

    import pytest

    from lagpilot.act.drain_calls import DrainCalls
    from lagpilot.act.spark_rpc_key import SparkRpcKeys

    calls: list[tuple[str, str]] = []

    class Core:
        def __init__(self, existing=None):
            self.existing = existing

        def read_namespaced_secret(self, name, namespace):
            if self.existing is None:
                raise type("NotFound", (Exception,), {"status": 404})()
            return self.existing

        def create_namespaced_secret(self, namespace, body):
            calls.append(("secret", body["metadata"]["name"]))
            assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"

    class Batch:
        def create_namespaced_job(self, namespace, body):
            calls.append(("job", body["metadata"]["name"]))

    def drain_calls(core):
        dc = DrainCalls()
        dc.batch, dc.settings, dc.clock = Batch(), K8S, lambda: 0.0
        dc.runtime = SimpleNamespace(rpc_keys=SparkRpcKeys(core, lambda o: o))
        return dc

    ctx = SimpleNamespace(
        name="orders",
        namespace="ns1",
        uid="uid-1",
        spec=parse_spec(RAW),
        version="0.1.0",
        launched_runtime=None,
    )
    drain_calls(Core()).create_job(ctx, DRAIN, 1)
    assert calls == [("secret", "orders-drain-rpc-key"), ("job", "orders-drain-1-1")]
    calls.clear()
    foreign = {"metadata": {"name": "orders-drain-rpc-key", "ownerReferences": []}, "data": {}}
    with pytest.raises(RuntimeError, match="not owned by this BatchConsumerGroup"):
        drain_calls(Core(foreign)).create_job(ctx, DRAIN, 1)
    assert calls == []  # no Job mounting a key someone else chose


SPARK_APP_RAW = {**RAW, "drain": {**RAW["drain"], "launcher": "sparkApplication"}}


def test_a_spark_application_authenticates_its_rpc_with_the_crs_key_file():
    """H4 for launcher sparkApplication (cluster mode, kubeflow's spark-operator): the same RPC hardening
    as the Job's k8s mode: spark.authenticate and spark.network.crypto on, the secret from the CR's
    `<cr>-drain-rpc-key` as a file mounted in the driver's and every executor's pod (spark-operator's
    `secrets`, type Generic). Without the file Spark generates the secret and hands it to each executor
    pod as the literal env _SPARK_AUTH_SECRET; without spark.authenticate anyone who reaches the driver's
    port talks to it (and the tasks carry the Kafka credentials)."""
    from lagpilot.act.drain_manifests import SPARK_RPC_KEY_DIR

    a = build_spark_application("orders", "ns1", "uid", parse_spec(SPARK_APP_RAW), DRAIN, 1, K8S)
    conf = a["spec"]["sparkConf"]
    assert conf.get("spark.authenticate") == "true"
    assert conf.get("spark.network.crypto.enabled") == "true"
    assert conf.get("spark.authenticate.secret.file") == f"{SPARK_RPC_KEY_DIR}/key"
    for role in ("driver", "executor"):
        assert {"name": "orders-drain-rpc-key", "path": SPARK_RPC_KEY_DIR, "secretType": "Generic"} in (
            a["spec"][role].get("secrets") or []
        ), role
        assert not any("AUTH_SECRET" in str(e.get("name")) for e in a["spec"][role]["env"])
    # the same with the default settings (a SparkApplication always runs on Kubernetes)
    default = build_spark_application("orders", "ns1", "uid", parse_spec(SPARK_APP_RAW), DRAIN, 1)
    assert default["spec"]["sparkConf"].get("spark.authenticate") == "true"


def test_the_operator_makes_the_rpc_key_secret_before_a_spark_application():
    """create_job with launcher sparkApplication makes the CR's `<cr>-drain-rpc-key` first (its pods mount
    it), whatever LAGPILOT_DRAIN_SPARK_MASTER says (a SparkApplication always has executors)."""
    from types import SimpleNamespace

    from lagpilot.act.drain_calls import DrainCalls
    from lagpilot.act.drain_manifests import DrainSettings
    from lagpilot.act.spark_rpc_key import SparkRpcKeys

    calls: list[tuple[str, str]] = []

    class Core:
        def read_namespaced_secret(self, name, namespace):
            raise type("NotFound", (Exception,), {"status": 404})()

        def create_namespaced_secret(self, namespace, body):
            calls.append(("secret", body["metadata"]["name"]))

    class Custom:
        def create_namespaced_custom_object(self, group, version, namespace, plural, body):
            calls.append((body["kind"], body["metadata"]["name"]))

    dc = DrainCalls()
    dc.custom, dc.settings, dc.clock = Custom(), DrainSettings(), lambda: 0.0
    dc.runtime = SimpleNamespace(rpc_keys=SparkRpcKeys(Core(), lambda o: o))
    ctx = SimpleNamespace(
        name="orders",
        namespace="ns1",
        uid="uid-1",
        spec=parse_spec(SPARK_APP_RAW),
        version="0.1.0",
        launched_runtime=None,
    )
    dc.create_job(ctx, DRAIN, 1)
    assert calls == [("secret", "orders-drain-rpc-key"), ("SparkApplication", "orders-drain-1-1")]
