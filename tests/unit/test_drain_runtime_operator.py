"""The warm drain runtime, operator side (lagpilot.act.drain_runtime): spec.drain.warmRuntime in the CRD
and the parser, the runtime Deployment, the URL a launch hands to its Job, the Deployment's sync
decision, and the Job's warm/cold record. Pure: no cluster."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from lagpilot.act import drain_runtime as rt
from lagpilot.act.drain import with_runtime
from lagpilot.act.drain_manifests import (
    RUNTIME_PATH_LABEL,
    RUNTIME_URL_ENV,
    WARM_JOB_CPU_M,
    DrainSettings,
    build_drain_job,
)
from lagpilot.decide.handoff import Action, DrainStatus, Kind, PartitionRange, Phase, SubProgress
from lagpilot.spec import DrainSpec, SpecError, parse_spec
from tests.unit.runtime_fakes import FakeApps, executor_at_launch, runtime_manager
from tests.unit.test_crd_schema import SCHEMA, schema_at, validate

RAW: dict[str, Any] = {
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
    "drain": {"splitFactor": 4, "maxTasks": 6, "warmRuntime": True},
}
DRAIN = DrainStatus(
    id=3,
    phase=Phase.HANDED_OFF,
    ranges=(PartitionRange(1, 900, 100),),
    sub_ranges=(SubProgress(1, 0, 100, 500, 100), SubProgress(1, 1, 500, 900, 700, 200)),
)


def spec_with(**drain: Any) -> Any:
    raw = copy.deepcopy(RAW)
    raw["drain"].update(drain)
    return parse_spec(raw)


def deployment(settings: DrainSettings | None = None, **drain: Any) -> dict[str, Any]:
    return rt.build_runtime_deployment("orders", "ns1", "uid-1", spec_with(**drain), settings)


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]["containers"][0]


def env_of(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(manifest)["env"]}


# ---- spec.drain.warmRuntime: CRD and parser agree ---------------------------------------------------


def test_crd_default_is_the_parser_default() -> None:
    s = schema_at("spec.drain.warmRuntime")
    assert s["type"] == "boolean" and s["default"] is DrainSpec.warm_runtime is False
    assert parse_spec({k: v for k, v in RAW.items() if k != "drain"}).drain.warm_runtime is False
    assert "idle cost" in s["description"].lower() and "Default false" in s["description"]


def test_crd_cel_rule_names_the_field() -> None:
    rules = schema_at("spec.drain")["x-kubernetes-validations"]
    rule = next(r for r in rules if "warmRuntime" in r["rule"])
    assert rule["fieldPath"] == ".warmRuntime" and "spec.drain.warmRuntime" in rule["message"]
    assert "sparkApplication" in rule["rule"]


CASES = [  # (drain section, parser accepts, path named when not)
    ({"warmRuntime": True}, True, None),
    ({"warmRuntime": True, "launcher": "job"}, True, None),
    ({"warmRuntime": False, "launcher": "sparkApplication"}, True, None),
    ({"launcher": "sparkApplication"}, True, None),
    ({"warmRuntime": True, "launcher": "sparkApplication"}, False, "spec.drain.warmRuntime"),
    ({"warmRuntime": "true"}, False, "spec.drain.warmRuntime"),
    ({"warmRuntime": 1}, False, "spec.drain.warmRuntime"),
]


@pytest.mark.parametrize("drain,ok,path", CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_parser_verdicts(drain: dict[str, Any], ok: bool, path: str | None) -> None:
    raw = {**RAW, "drain": drain}
    if ok:
        assert parse_spec(raw).drain.warm_runtime is bool(drain.get("warmRuntime"))
        assert validate(SCHEMA, {"spec": raw}) == []  # the OpenAPI part admits it as well
        return
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert path in [p for p, _ in info.value.problems]
    if not isinstance(drain.get("warmRuntime"), bool):  # a type error: the OpenAPI schema agrees
        assert validate(SCHEMA, {"spec": raw})


COOLDOWN = [  # (drain section, parsed cooldown or the error, the OpenAPI part rejects it too)
    ({"warmRuntime": True}, None, False),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 0}, 0, False),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 600}, 600, False),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 86400}, 86400, False),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 86401}, "must be in 0..86400", True),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": -1}, "must be in 0..86400", True),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 1.5}, "must be an integer", True),
    ({"warmRuntime": True, "warmRuntimeCooldownSeconds": "60"}, "must be an integer", True),
    # the CEL rule (no OpenAPI error): a cooldown says when the warm runtime runs, so only with one
    ({"warmRuntimeCooldownSeconds": 60}, "allowed only with spec.drain.warmRuntime true", False),
    (
        {"warmRuntime": False, "warmRuntimeCooldownSeconds": 60},
        "allowed only with spec.drain.warmRuntime true",
        False,
    ),
]


@pytest.mark.parametrize("drain,want,openapi", COOLDOWN, ids=[json.dumps(c[0]) for c in COOLDOWN])
def test_parser_cooldown_verdicts(drain: dict[str, Any], want: Any, openapi: bool) -> None:
    raw = {**RAW, "drain": drain}
    assert bool(validate(SCHEMA, {"spec": raw})) is openapi
    if not isinstance(want, str):
        assert parse_spec(raw).drain.warm_runtime_cooldown_s == want
        return
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    msgs = [m for p, m in info.value.problems if p == "spec.drain.warmRuntimeCooldownSeconds"]
    assert msgs and want in msgs[0], info.value.problems


def test_crd_cooldown_field_and_cel_rule() -> None:
    s = schema_at("spec.drain.warmRuntimeCooldownSeconds")
    assert (s["type"], s["minimum"], s["maximum"]) == ("integer", 0, 86400) and "default" not in s
    rules = schema_at("spec.drain")["x-kubernetes-validations"]
    rule = next(r for r in rules if "warmRuntimeCooldownSeconds" in r["rule"])
    assert rule["fieldPath"] == ".warmRuntimeCooldownSeconds"
    assert (
        "spec.drain.warmRuntimeCooldownSeconds is allowed only with spec.drain.warmRuntime true"
        in rule["message"]
    )


@pytest.mark.parametrize(
    "drain,wanted",
    [
        ({"warmRuntime": True}, True),
        ({"warmRuntime": False}, False),
        ({"warmRuntime": True, "enabled": False}, False),
        ({"warmRuntime": True, "cancel": True}, True),  # cancel stops drains, not the runtime: resume is warm
    ],
)
def test_runtime_wanted(drain: dict[str, Any], wanted: bool) -> None:
    assert rt.runtime_wanted(spec_with(**drain)) is wanted


# ---- the Deployment ----------------------------------------------------------------------------------


def test_port_is_deterministic_per_cr_and_in_range() -> None:
    ports = {rt.runtime_port(ns, n) for ns in ("a", "b", "drain-1") for n in ("orders", "payments", "x")}
    assert all(30000 <= p < 50000 for p in ports)
    assert len(ports) == 9  # distinct CRs, distinct ports (these names)
    assert rt.runtime_port("a", "orders") == rt.runtime_port("a", "orders")
    assert rt.runtime_port("a", "orders") != rt.runtime_port("b", "orders")


def test_deployment_shape() -> None:
    m = deployment()
    assert m["metadata"]["name"] == "orders-drain-runtime" and m["metadata"]["namespace"] == "ns1"
    owner = m["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "BatchConsumerGroup",
        "orders",
        "uid-1",
        True,
    )
    assert m["spec"]["replicas"] == 1 and m["spec"]["strategy"] == {"type": "Recreate"}
    labels = m["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "drain-runtime"
    assert m["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod = m["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    c = container(m)
    assert c["command"] == ["lagpilot", "drain", "--serve"]
    port = rt.runtime_port("ns1", "orders")
    assert c["ports"] == [{"name": "drain-api", "containerPort": port, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "drain-api"}
    assert c["readinessProbe"]["periodSeconds"] == 2
    live = c["livenessProbe"]
    assert (
        live["httpGet"]["path"] == "/healthz"
        and live["initialDelaySeconds"] + live["periodSeconds"] * live["failureThreshold"] >= 180
    )
    assert c["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]


def test_env_is_the_jobs_without_the_plan_plus_port_and_parallelism() -> None:
    spec = spec_with()
    job_env = env_of(build_drain_job("orders", "ns1", "uid-1", spec, DRAIN, 2))
    env = env_of(deployment())
    assert (
        "LAGPILOT_DRAIN_PLAN" not in env
        and "LAGPILOT_DRAIN_ATTEMPT" not in env
        and "LAGPILOT_METRICS_PORT" not in env
    )
    assert env[rt.PORT_ENV]["value"] == str(rt.runtime_port("ns1", "orders"))
    assert env[rt.PARALLELISM_ENV]["value"] == "6"  # spec.drain.maxTasks
    shared = set(job_env) - {"LAGPILOT_DRAIN_PLAN", "LAGPILOT_DRAIN_ATTEMPT"}
    assert shared <= set(env) and all(env[k] == job_env[k] for k in shared)
    for name, key in [("LAGPILOT_SASL_PASSWORD", "password"), ("LAGPILOT_POSTGRES_DSN", "dsn")]:
        assert "value" not in env[name] and env[name]["valueFrom"]["secretKeyRef"]["key"] == key


def test_k8s_master_runtime_gets_the_jobs_spark_pieces() -> None:
    settings = DrainSettings(
        spark_master="k8s://https://kubernetes.default.svc", service_account="lagpilot-drain"
    )
    m = deployment(settings)
    env = env_of(m)
    conf = json.loads(env["LAGPILOT_SPARK_CONF"]["value"])
    assert conf["spark.kubernetes.executor.secretKeyRef.LAGPILOT_SASL_PASSWORD"] == "kafka-creds:password"
    assert conf["spark.executor.instances"] == "3"  # maxTasks 6 / 2 cores
    assert not any(k.startswith("spark.executorEnv.LAGPILOT_DRAIN_PLAN") for k in conf)
    assert m["spec"]["template"]["spec"]["serviceAccountName"] == "lagpilot-drain"


def test_config_annotation_follows_the_pod_template() -> None:
    a, b = deployment(), deployment(maxTasks=8)
    assert rt.manifest_hash(a) == a["spec"]["template"]["metadata"]["annotations"][rt.CONFIG_ANNOTATION]
    assert rt.manifest_hash(a) == rt.manifest_hash(deployment())  # stable
    assert rt.manifest_hash(a) != rt.manifest_hash(b)
    other_handler = copy.deepcopy(RAW)
    other_handler["processing"] = {"handler": "pkg.mod:fn"}
    c = rt.build_runtime_deployment("orders", "ns1", "uid-1", parse_spec(other_handler))
    assert rt.manifest_hash(c) != rt.manifest_hash(a)


# ---- which pod serves a launch -----------------------------------------------------------------------


def pod(
    name: str,
    ip: str | None = "10.0.0.5",
    ready: bool = True,
    phase: str = "Running",
    config: str | None = "h1",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {rt.CONFIG_ANNOTATION: config} if config else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    st: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        st["podIP"] = ip
    return {"metadata": meta, "status": st}


URLS = [
    ("no-pods", [], "h1", None),
    ("ready", [pod("a")], "h1", "http://10.0.0.5:31000"),
    ("not-ready", [pod("a", ready=False)], "h1", None),
    ("no-ip", [pod("a", ip=None)], "h1", None),
    ("pending", [pod("a", phase="Pending")], "h1", None),
    ("deleting", [pod("a", deleting=True)], "h1", None),
    ("stale-config", [pod("a", config="old")], "h1", None),
    (
        "stale-and-current",
        [pod("a", ip="10.0.0.1", config="old"), pod("b", ip="10.0.0.2")],
        "h1",
        "http://10.0.0.2:31000",
    ),
    (
        "first-ready-by-name",
        [pod("b", ip="10.0.0.2"), pod("a", ip="10.0.0.1")],
        "h1",
        "http://10.0.0.1:31000",
    ),
    ("any-config", [pod("a", config="old")], None, "http://10.0.0.5:31000"),
    ("ipv6", [pod("a", ip="fd00::5")], "h1", "http://[fd00::5]:31000"),
    ("dev-loopback", [pod("a", ip="127.0.0.1")], "h1", "http://127.0.0.1:31000"),
]


@pytest.mark.parametrize("pods,config,url", [c[1:] for c in URLS], ids=[c[0] for c in URLS])
def test_runtime_url(pods: list[dict[str, Any]], config: str | None, url: str | None) -> None:
    assert rt.runtime_url(pods, 31000, config) == url


# ---- the Deployment's sync decision ------------------------------------------------------------------


def existing(m: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(m)
    if "hash" in changes:
        out["metadata"]["annotations"][rt.CONFIG_ANNOTATION] = changes["hash"]
    if "replicas" in changes:
        out["spec"]["replicas"] = changes["replicas"]
    if changes.get("deleting"):
        out["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    if "uid" in changes:
        out["metadata"]["ownerReferences"][0]["uid"] = changes["uid"]
    return out


D = deployment()
SYNC = [
    ("absent-wanted", D, None, False, rt.Sync.APPLY),
    ("absent-wanted-running", D, None, True, rt.Sync.APPLY),  # creating cannot hurt a running attempt
    ("up-to-date", D, existing(D), False, rt.Sync.NONE),
    ("spec-changed", D, existing(D, hash="old"), False, rt.Sync.APPLY),
    ("spec-changed-running", D, existing(D, hash="old"), True, rt.Sync.DEFER),
    ("scaled-to-zero-by-hand", D, existing(D, replicas=0), False, rt.Sync.APPLY),
    ("other-owner-uid", D, existing(D, uid="uid-0"), False, rt.Sync.APPLY),
    ("unwanted-present", None, existing(D), False, rt.Sync.DELETE),
    ("unwanted-present-running", None, existing(D), True, rt.Sync.DEFER),
    ("unwanted-absent", None, None, False, rt.Sync.NONE),
    ("being-deleted-wanted", D, existing(D, deleting=True), False, rt.Sync.NONE),
    ("being-deleted-unwanted", None, existing(D, deleting=True), False, rt.Sync.NONE),
]


@pytest.mark.parametrize("desired,current,running,want", [c[1:] for c in SYNC], ids=[c[0] for c in SYNC])
def test_sync_action(desired: Any, current: Any, running: bool, want: rt.Sync) -> None:
    assert rt.sync_action(desired, current, running) is want


# ---- the drain Job: warm or cold ---------------------------------------------------------------------


def test_job_with_a_runtime_url_is_warm() -> None:
    spec = spec_with()
    warm = build_drain_job("orders", "ns1", "uid-1", spec, DRAIN, 2, runtime_url="http://127.0.0.1:31000")
    cold = build_drain_job("orders", "ns1", "uid-1", spec, DRAIN, 2)
    assert env_of(warm)[RUNTIME_URL_ENV]["value"] == "http://127.0.0.1:31000"
    assert RUNTIME_URL_ENV not in env_of(cold)
    for m, word in ((warm, "warm"), (cold, "cold")):
        assert m["metadata"]["labels"][RUNTIME_PATH_LABEL] == word
        assert m["spec"]["template"]["metadata"]["labels"][RUNTIME_PATH_LABEL] == word
    # the warm Job only waits: a small CPU request; memory kept for the cold fallback
    assert container(warm)["resources"]["requests"]["cpu"] == f"{WARM_JOB_CPU_M}m"
    assert (
        container(warm)["resources"]["requests"]["memory"]
        == container(cold)["resources"]["requests"]["memory"]
    )
    assert container(warm)["command"] == container(cold)["command"] == ["lagpilot", "drain"]
    # apart from the URL, the label and the CPU request, the same Job
    strip = json.loads(json.dumps(warm))
    container(strip)["env"] = [e for e in container(strip)["env"] if e["name"] != RUNTIME_URL_ENV]
    container(strip)["resources"] = container(cold)["resources"]
    for where in (strip["metadata"]["labels"], strip["spec"]["template"]["metadata"]["labels"]):
        where[RUNTIME_PATH_LABEL] = "cold"
    assert strip == cold


@pytest.mark.parametrize("word", ["warm", "cold"])
def test_launch_records_the_path_in_status_and_event(word: str) -> None:
    running = dataclasses.replace(
        DRAIN, phase=Phase.RUNNING, attempt=1, message="drain 3 attempt 1: 0/800 records"
    )
    action = Action(
        Kind.LAUNCH,
        running,
        "Launched",
        running.message,
        attempt=1,
        event=("Normal", "DrainStarted", running.message),
    )
    out = with_runtime(action, word)
    assert out.status is not None and out.status.runtime == word
    assert out.event == ("Normal", "DrainStarted", f"drain 3 attempt 1: 0/800 records; runtime {word}")
    assert DrainStatus.from_dict(out.status.to_dict()).runtime == word  # survives the status round trip
    assert with_runtime(action, "") is action  # unknown (an adopted SparkApplication): nothing claimed


# ---- the executor: a launch asks the runtime, the Job and the status say which path ----------------


@pytest.mark.parametrize(
    "url,adopted,word",
    [
        ("http://127.0.0.1:31000", None, "warm"),
        (None, None, "cold"),
        # a Job created before a lost status write (409): recorded as its own label says, not as asked now
        (
            "http://127.0.0.1:31000",
            {
                "metadata": {
                    "labels": {RUNTIME_PATH_LABEL: "cold"},
                    "ownerReferences": [{"uid": "u", "controller": True}],
                }
            },
            "cold",
        ),
    ],
)
def test_executor_launch_records_the_jobs_path(
    url: str | None, adopted: dict[str, Any] | None, word: str
) -> None:
    ex, launch = executor_at_launch(adopted, url)
    r = ex.reconcile(launch)
    log = ex.log
    assert ex.runtime.asked == 1  # asked at the launch only
    assert r.status is not None and r.status["phase"] == "Running" and r.status["runtime"] == word
    started = [e for e in log if e[0] == "event" and e[1] == "DrainStarted"]
    assert started, log
    if adopted is None:
        job = ex.batch.created[0]
        assert job["metadata"]["labels"][RUNTIME_PATH_LABEL] == word
        assert (RUNTIME_URL_ENV in env_of(job)) == (word == "warm")
        assert ("LAGPILOT_DRAIN_PLAN_AUTH" in env_of(job)) == (word == "warm")  # the operator's signature


# ---- properties and the I/O edge ---------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_pods = st.lists(
    st.builds(
        pod,
        name=st.sampled_from(["a", "b", "c", "d"]),
        ip=st.sampled_from([None, "", "10.0.0.1", "10.0.0.2", "fd00::1"]),
        ready=st.booleans(),
        phase=st.sampled_from(["Running", "Pending", "Succeeded"]),
        config=st.sampled_from([None, "h1", "h2"]),
        deleting=st.booleans(),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(_pods, st.sampled_from([None, "h1"]))
def test_runtime_url_property(pods: list[dict[str, Any]], config: str | None) -> None:
    """A URL iff some pod is Running, Ready, has an IP, is not being deleted and (when asked) runs
    the config; and then it is the first such pod's (by name)."""
    ok = [
        p
        for p in pods
        if p["status"].get("podIP")
        and p["status"]["phase"] == "Running"
        and p["status"]["conditions"][0]["status"] == "True"
        and "deletionTimestamp" not in p["metadata"]
        and (config is None or p["metadata"]["annotations"].get(rt.CONFIG_ANNOTATION) == config)
    ]
    url = rt.runtime_url(pods, 31000, config)
    if not ok:
        assert url is None
    else:
        ip = min(ok, key=lambda p: p["metadata"]["name"])["status"]["podIP"]
        assert url == (f"http://[{ip}]:31000" if ":" in ip else f"http://{ip}:31000")


def _manager(current: dict[str, Any] | None) -> tuple[rt.RuntimeManager, FakeApps]:
    m = runtime_manager(current)
    return m, m.apps


def test_sync_io_create_keep_defer_delete_and_no_reads_for_unwanted() -> None:
    events: list[tuple[str, str, str]] = []
    m, apps = _manager(None)
    warm = spec_with()
    assert (
        m.sync("ns1", "orders", "uid-1", warm, False, emit=lambda *e: events.append(e)).action
        is rt.Sync.APPLY
    )
    assert m.sync("ns1", "orders", "uid-1", warm, False).action is rt.Sync.NONE  # up to date: a GET, no apply
    assert apps.calls == ["get", "apply", "get"] and events[0][1] == "DrainRuntimeApplied"
    off = spec_with(warmRuntime=False)
    assert m.sync("ns1", "orders", "uid-1", off, True).action is rt.Sync.DEFER  # an attempt runs
    assert m.sync("ns1", "orders", "uid-1", off, False).action is rt.Sync.DELETE
    assert m.sync("ns1", "orders", "uid-1", off, False).action is rt.Sync.NONE  # gone: remembered
    calls = len(apps.calls)
    for _ in range(5):
        m.sync("ns1", "orders", "uid-1", off, False)
    assert len(apps.calls) == calls  # a CR without a runtime costs no API call per cycle


def test_sync_io_failure_is_reported_not_raised() -> None:
    m, apps = _manager(None)

    def forbidden(*a: Any, **k: Any) -> None:
        err = RuntimeError("Forbidden")
        err.status, err.reason = 403, "Forbidden"  # type: ignore[attr-defined]
        raise err

    apps.patch_namespaced_deployment = forbidden  # type: ignore[method-assign]
    res = m.sync("ns1", "orders", "uid-1", spec_with(), False)
    assert res.action is rt.Sync.NONE and "403" in res.error
