"""C1, operator side: the runtime URL only from a pod the operator's own runtime Deployment owns
(pod -> ReplicaSet -> Deployment -> CR uid), never a look-alike whose labels match; the runtime
Deployment deleted only when it is the CR's; the per-CR key Secret (created by the operator, owned
by the CR, referenced only by the runtime's pod); the NetworkPolicy letting only the CR's drain pods
reach the runtime port; the warm Job carries the operator's signature of its exact plan."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from lagpilot.act import drain_runtime as rt
from lagpilot.act.deployment import build_deployment
from lagpilot.act.drain_manifests import DrainSettings, build_drain_job
from lagpilot.decide.handoff import DrainStatus, PartitionRange, Phase, SubProgress
from lagpilot.spec import parse_spec
from tests.unit.runtime_fakes import executor_at_launch, runtime_manager

RAW: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "topic": "orders",
    "groupId": "orders-batch",
    "processing": {"handler": "pkg.mod:fn"},
    "drain": {"splitFactor": 4, "maxTasks": 6, "warmRuntime": True},
}
SPEC = parse_spec(RAW)
DRAIN = DrainStatus(
    id=3,
    phase=Phase.HANDED_OFF,
    ranges=(PartitionRange(1, 900, 100),),
    sub_ranges=(SubProgress(1, 0, 100, 500, 100), SubProgress(1, 1, 500, 900, 700, 200)),
)
CR_UID, DEP_UID, RS_UID = "uid-1", "dep-uid", "rs-uid"
KEY_HEX = "ab" * 32


def owner(kind: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": controller}


def runtime_deployment(uid: str = DEP_UID, owner_uid: str = CR_UID) -> dict[str, Any]:
    m = copy.deepcopy(rt.build_runtime_deployment("orders", "ns1", owner_uid, SPEC, DrainSettings()))
    m["metadata"]["uid"] = uid
    return m


def replica_set(uid: str = RS_UID, dep_uid: str = DEP_UID) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"orders-drain-runtime-{uid}",
            "uid": uid,
            "ownerReferences": [owner("Deployment", "orders-drain-runtime", dep_uid)],
        }
    }


def runtime_pod(name: str, ip: str, rs: dict[str, Any] | None, config: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": rt.selector_labels("orders"),
        "annotations": {rt.CONFIG_ANNOTATION: config} if config else {},
    }
    if rs is not None:
        meta["ownerReferences"] = [owner("ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"])]
    return {
        "metadata": meta,
        "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def manager(pods: list[dict[str, Any]], dep: dict[str, Any] | None, rss: list[dict[str, Any]]) -> Any:
    return runtime_manager(dep, pods, rss, key_made=False)


def current_config(m: Any) -> str | None:
    return rt.manifest_hash(m.desired("ns1", "orders", CR_UID, SPEC, "0.1.0"))


# ---- the URL: only the operator's own runtime pod -------------------------------------------------------


def test_a_look_alike_pod_is_never_the_runtime_url() -> None:
    rs, dep = replica_set(), runtime_deployment()
    m = manager([], dep, [rs])
    cfg = current_config(m)
    fakes = [
        runtime_pod("a-no-owner", "10.0.0.66", None, cfg),  # labels copied, no owner
        runtime_pod(
            "b-foreign-rs", "10.0.0.67", replica_set("rs-evil", "dep-evil"), cfg
        ),  # its own ReplicaSet
    ]
    m.core.pods = fakes
    m.apps.rss = [rs, replica_set("rs-evil", "dep-evil")]
    assert m.url("ns1", "orders", CR_UID, SPEC, "0.1.0") is None
    # the real one (owned through our ReplicaSet by our Deployment by the CR) is taken, the fakes still not
    m.core.pods = [*fakes, runtime_pod("z-real", "10.0.0.5", rs, cfg)]
    assert (
        m.url("ns1", "orders", CR_UID, SPEC, "0.1.0") == f"http://10.0.0.5:{rt.runtime_port('ns1', 'orders')}"
    )


def test_no_url_when_the_deployment_is_not_the_crs() -> None:
    rs, dep = replica_set(), runtime_deployment(owner_uid="uid-of-another-cr")
    m = manager([], dep, [rs])
    m.core.pods = [runtime_pod("z-real", "10.0.0.5", rs, current_config(m))]
    assert m.url("ns1", "orders", CR_UID, SPEC, "0.1.0") is None


def test_a_runtime_deployment_not_owned_by_the_cr_is_not_deleted() -> None:
    foreign = runtime_deployment(owner_uid="uid-of-another-cr")
    m = manager([], foreign, [])
    off = parse_spec({**RAW, "drain": {**RAW["drain"], "warmRuntime": False}})
    res = m.sync("ns1", "orders", CR_UID, off, False)
    assert "delete" not in m.apps.calls and res.action is not rt.Sync.DELETE


# ---- the key Secret, the runtime's env, the warm Job's signature ---------------------------------------


def test_the_key_secret_is_created_once_owned_by_the_cr_and_only_the_runtime_references_it() -> None:
    from lagpilot_runtime import plan_auth

    m = manager([], None, [])
    desired = m.desired("ns1", "orders", CR_UID, SPEC, "0.1.0")
    secret = m.core.secrets[rt.key_secret_name("orders")]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == CR_UID
    assert secret.get("immutable") is True
    assert m.desired("ns1", "orders", CR_UID, SPEC, "0.1.0") == desired  # read once, not re-created
    assert [c for c, _ in m.core.calls].count("create secret") == 1
    # the busy drains' part key (act/drain_part_key.py) is made when the runtime is applied, owned by the CR
    from lagpilot.act.drain_part_key import part_key_secret_name

    m.sync("ns1", "orders", CR_UID, SPEC, False)
    assert m.core.secrets[part_key_secret_name("orders")]["metadata"]["ownerReferences"][0]["uid"] == CR_UID
    assert [c for c, _ in m.core.calls].count("create secret") == 2
    env = {e["name"]: e for e in desired["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env[plan_auth.KEY_ENV]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == rt.key_secret_name("orders") and "value" not in env[plan_auth.KEY_ENV]
    assert env[plan_auth.CR_UID_ENV]["value"] == CR_UID
    # the consumer pods (user code, live group) and the Job pods never get the key
    consumer = build_deployment("orders", "ns1", CR_UID, SPEC, 1)
    job = build_drain_job("orders", "ns1", CR_UID, SPEC, DRAIN, 2)
    for manifest in (consumer, job):
        names = [e["name"] for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]]
        assert plan_auth.KEY_ENV not in names


def test_a_key_secret_not_owned_by_the_cr_is_not_used() -> None:
    m = manager([], None, [])
    m.core.secrets[rt.key_secret_name("orders")] = {
        "metadata": {"name": rt.key_secret_name("orders"), "ownerReferences": [owner("X", "x", "someone")]},
        "data": {"key": "YWJj"},
    }
    with pytest.raises(RuntimeError, match="is not owned by this BatchConsumerGroup"):
        m.key("ns1", "orders", CR_UID)
    assert m.url("ns1", "orders", CR_UID, SPEC, "0.1.0") is None  # a launch goes cold


def test_the_warm_job_carries_the_operators_signature_of_its_plan() -> None:
    from lagpilot.act.drain_manifests import drain_plan_for
    from lagpilot_runtime import plan_auth

    key = bytes.fromhex(KEY_HEX)
    plan_text = drain_plan_for(SPEC, DRAIN, CR_UID, 2).to_json()  # the plan of attempt 2
    auth = plan_auth.sign(key, plan_text, CR_UID, "3", 2, time.time() + 600)
    job = build_drain_job(
        "orders", "ns1", CR_UID, SPEC, DRAIN, 2, runtime_url="http://10.0.0.5:31000", runtime_auth=auth
    )
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    got = plan_auth.PlanAuth.from_dict(__import__("json").loads(env[plan_auth.AUTH_ENV]))
    plan_auth.verify(
        key, env["LAGPILOT_DRAIN_PLAN"], got, CR_UID, time.time()
    )  # verifies against the env's plan
    assert (got.drain_id, got.attempt) == ("3", 2)
    cold = build_drain_job("orders", "ns1", CR_UID, SPEC, DRAIN, 2)
    assert plan_auth.AUTH_ENV not in [
        e["name"] for e in cold["spec"]["template"]["spec"]["containers"][0]["env"]
    ]


# ---- the NetworkPolicy -------------------------------------------------------------------------------


def test_the_network_policy_lets_only_the_crs_drain_pods_reach_the_runtime_port() -> None:
    from lagpilot.act.drain_manifests import DRAIN_LABEL

    pol = rt.build_network_policy("orders", "ns1", CR_UID, DrainSettings())
    assert pol["kind"] == "NetworkPolicy" and pol["metadata"]["ownerReferences"][0]["uid"] == CR_UID
    assert pol["spec"]["podSelector"] == {"matchLabels": rt.selector_labels("orders")}
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    [rule] = pol["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": rt.runtime_port("ns1", "orders")}]
    [peer] = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace only: no namespaceSelector, no ipBlock
    assert peer["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "lagpilot-drain",
        DRAIN_LABEL: "orders",
    }
    # Spark's k8s backend: the runtime is a driver; its executors (spark-role executor, this CR) reach it
    k8s = rt.build_network_policy("orders", "ns1", CR_UID, DrainSettings(spark_master="k8s://https://x"))
    assert len(k8s["spec"]["ingress"]) == 2
    ex = k8s["spec"]["ingress"][1]
    assert "ports" not in ex and ex["from"][0]["podSelector"]["matchLabels"] == {
        DRAIN_LABEL: "orders",
        "spark-role": "executor",
    }


def test_sync_creates_the_policy_and_the_secret_before_the_deployment() -> None:
    m = manager([], None, [])
    res = m.sync("ns1", "orders", CR_UID, SPEC, False)
    assert res.action is rt.Sync.APPLY and not res.error
    assert [p["metadata"]["name"] for p in m.net.created] == [rt.runtime_name("orders")]
    assert rt.key_secret_name("orders") in m.core.secrets


def test_a_job_of_the_attempts_name_not_owned_by_the_cr_is_not_adopted() -> None:
    squatter = {
        "metadata": {"labels": {}, "ownerReferences": [owner("BatchConsumerGroup", "orders", "someone")]}
    }
    ex, launch = executor_at_launch(squatter, None)
    with pytest.raises(RuntimeError, match="not owned"):
        ex.reconcile(launch)
