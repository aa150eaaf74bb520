"""The operator end to end on the real parts: kube-apiserver + controller-manager (GC, ReplicaSets),
the Kafka broker, the consumer runtime as containers of the consumer image on the real node (the `pods` fixture,
tests/fixtures/node.py: a namespace labelled for the node and enforcing Pod Security `restricted`,
the broker's PODS listener, the tests' handlers from the test image; docs/node.md).

The operator runs as a subprocess (`lagpilot operator --namespace NS --standalone`) authenticated as
a ServiceAccount whose Role is built from the tables of docs/rbac.md, so these tests also prove that
list sufficient (on the node too: the helm-installed operator pod is tests/real/test_node_operator.py's). Shown:
- apply a CR → the consumer Deployment is created, controller-owned, env per docs/CONTRACTS.md;
  a backlog → replicas rise, capped at the partition count → lag drains → replicas fall back after
  the (short) scale-down window; events for each scale; `kubectl get bcg` columns; operator metrics;
  delete the CR → the garbage collector deletes the Deployment;
- Degraded paths: missing topic, missing then malformed Secret, credentials a broker rejects, an
  unreachable broker → `Degraded=True` naming the cause, a Warning event, no secret anywhere, the
  operator keeps running and recovers when the cause is fixed.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot.act.memory import MEMORY_FIELD, memory_name
from lagpilot_dev.operator_process import DEV_SESSION_TIMEOUT_MS, OperatorProcess, operator_env
from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.real.test_crd import crd  # noqa: F401 - fixture (imported by the drain and finalizer tests from here)

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SA_NAME = "lagpilot-operator"


# --------------------------------------------------------------------------- helpers


def rbac_rules() -> list[dict[str, Any]]:
    """docs/rbac.md's tables as Role rules (one rule per group/resource)."""
    from tests.unit.test_chart_rbac import parse_rbac_tables

    triples = parse_rbac_tables((REPO / "docs" / "rbac.md").read_text())
    assert triples, "docs/rbac.md has no RBAC table"
    grouped: dict[tuple[str, str], set[str]] = {}
    for group, resource, verb in triples:
        if group in ("apiextensions.k8s.io",) or resource == "namespaces":
            continue  # cluster-scoped scans: not grantable in a Role, not needed with --namespace
        grouped.setdefault((group, resource), set()).add(verb)
    return [{"apiGroups": [g], "resources": [r], "verbs": sorted(v)} for (g, r), v in sorted(grouped.items())]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(per_partition):
        for part in range(partitions):
            while True:
                try:
                    p.produce(topic, value=json.dumps({"i": i}).encode(), partition=part)
                    break
                except BufferError:
                    p.poll(0.1)
    assert p.flush(60) == 0


class Operator(OperatorProcess):
    """`lagpilot operator` as a subprocess, logging to a file (its tail is shown on failure)."""

    def __init__(self, kubeconfig: Path, namespace: str, log_path: Path, metrics_port: int):
        super().__init__(namespace, log_path, operator_env(kubeconfig, REPO), metrics_port=metrics_port)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()


@pytest.fixture
def start_operator(crd: Any, kube_api: Any) -> Iterator[Callable[[str], Operator]]:
    """Factory: run the operator for a namespace as a ServiceAccount limited to docs/rbac.md."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    started: list[tuple[Operator, str]] = []

    def start(ns: str) -> Operator:
        if not any(n == ns for _, n in started):
            rbac.create_namespaced_role(ns, {"metadata": {"name": SA_NAME}, "rules": rbac_rules()})
            rbac.create_namespaced_role_binding(
                ns,
                {
                    "metadata": {"name": SA_NAME},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA_NAME},
                    "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": ns}],
                },
            )
        kubeconfig = crd.kubeconfig_for_service_account(ns, SA_NAME)
        # logs outside pytest's rotating basetemp (other sessions run pytest concurrently)
        log_dir = Path(tempfile.mkdtemp(prefix="lagpilot-operator-e2e-"))
        op = Operator(kubeconfig, ns, log_dir / f"operator-{ns}.log", free_port())
        print(f"operator log: {op.log_path}")
        started.append((op, ns))
        return op

    yield start
    for op, ns in started:
        # delete the CRs while the operator runs (kopf's daemon finalizer), then stop it
        try:
            custom.delete_collection_namespaced_custom_object(
                "lagpilot.io", "v1alpha1", ns, "batchconsumergroups"
            )
            wait_until(
                lambda ns=ns: (
                    not custom.list_namespaced_custom_object(
                        "lagpilot.io", "v1alpha1", ns, "batchconsumergroups"
                    )["items"]
                ),
                f"CRs in {ns} deleted",
                60,
            )
        except Exception as exc:  # noqa: BLE001 - teardown must reach op.stop()
            print(f"teardown of {ns}: {exc!r}")
        # pytest shows captured output only for a failing test
        print(f"--- operator log ({ns}) ---\n{op.tail(150)}")
        op.stop()


def cr(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def apply_cr(kube: Any, ns: str, obj: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", ns, "-f", "-", input_text=yaml.safe_dump(obj))


def get_cr(custom: Any, ns: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object("lagpilot.io", "v1alpha1", ns, "batchconsumergroups", name)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def events_for(core: Any, ns: str, name: str) -> list[Any]:
    return [
        e
        for e in core.list_namespaced_event(ns).items
        if e.involved_object.kind == "BatchConsumerGroup" and e.involved_object.name == name
    ]


# --------------------------------------------------------------------------- the scaling cycle


def test_scale_up_capped_drain_scale_down_and_gc(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
) -> None:
    from kubernetes import client

    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    ns = pods.namespace("op-e2e")
    partitions, per_partition = 3, 4000
    topic = new_topic(partitions=partitions, prefix="op-e2e")
    group = f"op-e2e-{uuid.uuid4().hex[:6]}"
    # the backlog is there before the operator first looks: 12,000 records; a consumer costs 5 ms
    # per record (~200 records/s), so one replica needs ~60 s > the 24 s target (0.8 x SLA 30 s)
    # and three replicas (one per partition) need ~20 s
    produce(kafka_bootstrap, topic, per_partition, partitions)
    op = start_operator(ns)
    name = "orders"
    apply_cr(
        crd,
        ns,
        cr(
            name,
            {
                "kafka": {
                    "bootstrapServers": pods.kafka_bootstrap,
                    "sessionTimeoutMs": DEV_SESSION_TIMEOUT_MS,
                },
                "topic": topic,
                "groupId": group,
                "batch": {"maxRecords": 100, "timeoutMs": 500},
                "processing": {
                    "handler": "tests.real.operator_handlers:slow",
                    "config": {"ms_per_record": "5"},
                },
                "scaling": {
                    "minReplicas": 1,
                    "maxReplicas": 5,
                    "pollIntervalSeconds": 2,
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": 0},
                        "scaleDown": {"stabilizationWindowSeconds": 10},
                    },
                },
                "catchUpSLASeconds": 30,
                "drain": {"enabled": False},
                "template": pods.template(),
            },
        ),
    )
    obj = get_cr(custom, ns, name)
    dname = f"{name}-consumer"

    # 1. the Deployment: created, controller-owned, env per the contract
    dep = wait_until(lambda: apps.read_namespaced_deployment(dname, ns), "the consumer Deployment", 90)
    (owner,) = dep.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "BatchConsumerGroup",
        name,
        obj["metadata"]["uid"],
        True,
    )
    env = {e.name: e for e in dep.spec.template.spec.containers[0].env}
    assert env["LAGPILOT_BOOTSTRAP_SERVERS"].value == pods.kafka_bootstrap
    assert env["LAGPILOT_TOPIC"].value == topic and env["LAGPILOT_GROUP_ID"].value == group
    assert env["LAGPILOT_HANDLER"].value == "tests.real.operator_handlers:slow"
    assert env["LAGPILOT_POD_NAME"].value_from.field_ref.field_path == "metadata.name"
    assert dep.metadata.labels["lagpilot.io/group"] == name
    assert "lagpilot" in [m.manager for m in dep.metadata.managed_fields]

    # 2. replicas rise to the partition count (maxReplicas 5 > 3 partitions), never above
    seen: list[int] = []

    def replicas() -> int:
        n = apps.read_namespaced_deployment(dname, ns).spec.replicas
        seen.append(n)
        return n

    wait_until(lambda: replicas() == partitions, f"scale-up to {partitions} replicas", 240, interval=1)
    # the consumers run where `pods` says (the real node's containers)
    running = wait_until(
        lambda: (lambda ps: ps if len(ps) >= 1 and all(p.status.phase == "Running" for p in ps) else None)(
            core.list_namespaced_pod(ns, label_selector=f"lagpilot.io/group={name}").items
        ),
        "the consumer pods running",
        240,
        interval=1,
    )
    assert {p.spec.node_name for p in running} == {pods.node_name}, [
        (p.metadata.name, p.spec.node_name) for p in running
    ]
    # the operator writes status after it applied the Deployment (same cycle): wait for that write
    status = wait_until(
        lambda: (lambda st: st if st.get("desiredReplicas") == partitions else None)(
            get_cr(custom, ns, name).get("status") or {}
        ),
        "the status to report the scale-up",
        60,
        interval=1,
    )
    print(
        "after scale-up:",
        (condition({"status": status}, "Scaling") or {}).get("message"),
        "capacity",
        status.get("capacityPerReplica"),
    )
    assert status["partitions"] == partitions and status["desiredReplicas"] == partitions
    # while records wait, the age of the oldest unprocessed one is reported per partition
    # (status.partitionStatuses; written with any other change, at least every 60 s)
    aged = wait_until(
        lambda: [
            p
            for p in get_cr(custom, ns, name)["status"].get("partitionStatuses") or []
            if p.get("oldestAgeSeconds", 0) > 0
        ],
        "oldestAgeSeconds",
        90,
        interval=1,
    )
    print("oldest unprocessed record ages:", {p["partition"]: p["oldestAgeSeconds"] for p in aged})
    assert condition(get_cr(custom, ns, name), "Degraded") is None  # False: absent (abnormal-true)

    # 3. the lag drains (the three consumers work), then 4. replicas fall after the 10 s window
    wait_until(
        lambda: get_cr(custom, ns, name)["status"].get("totalLag") == 0, "the lag to drain", 300, interval=1
    )
    wait_until(lambda: replicas() == 1, "scale-down to minReplicas 1", 240, interval=1)
    print(f"replicas seen {sorted(set(seen))}")
    assert max(seen) == partitions, seen

    final = get_cr(custom, ns, name)
    print("final status:", json.dumps(final["status"], indent=1))
    # the controller's memory is the ConfigMap the CR controls (garbage-collected with it), not status
    cm = core.read_namespaced_config_map(memory_name(name), ns)
    assert [(o.kind, o.name, o.controller) for o in cm.metadata.owner_references] == [
        ("BatchConsumerGroup", name, True)
    ]
    assert set(json.loads(cm.data[MEMORY_FIELD])) == {"estimator", "scalingHistory", "learned"}
    assert not {"estimator", "scalingHistory", "learned"} & set(final["status"])
    events = sorted(events_for(core, ns, name), key=lambda e: e.first_timestamp or e.event_time)
    for e in events:
        print(f"event {e.first_timestamp or e.event_time} {e.type} {e.reason}: {e.message}")
    reasons = [e.reason for e in events]
    assert "ScaledUp" in reasons and "ScaledDown" in reasons, reasons
    up = max(e.first_timestamp or e.event_time for e in events if e.reason == "ScaledUp")
    down = min(e.first_timestamp or e.event_time for e in events if e.reason == "ScaledDown")
    # the scale-down waited for the 10 s window after the last recommendation of 3 (event times
    # have second precision)
    assert (down - up).total_seconds() >= 9, (up, down)
    gen = final["metadata"]["generation"]
    assert final["status"]["observedGeneration"] == gen
    assert all(c["observedGeneration"] == gen for c in final["status"]["conditions"])
    assert final["status"]["capacityPerReplica"] > 0

    # 5. kubectl get bcg shows the columns, with values
    out = crd.kubectl("get", "bcg", name, "-n", ns, "-o", "wide").stdout
    print(out)
    header, row = out.splitlines()[:2]
    for col in ("TOPIC", "PARTITIONS", "REPLICAS", "DESIRED", "LAG", "CATCH-UP", "SLA", "READY", "DECISION"):
        assert col in header, header
    assert topic in row and " 30 " in row

    # 6. operator metrics
    text = op.metrics()
    assert f'lagpilot_partition_lag_records{{name="{name}",namespace="{ns}",partition="2"}}' in text, text[
        -2000:
    ]
    assert "lagpilot_scale_decisions_total" in text

    # 7. pause → replicas 0 and no decisions; resume → back to the minimum
    crd.kubectl("patch", "bcg", name, "-n", ns, "--type=merge", "-p", '{"spec":{"paused":true}}')
    wait_until(lambda: replicas() == 0, "paused: 0 replicas", 120, interval=1)
    wait_until(
        lambda: (condition(get_cr(custom, ns, name), "Ready") or {}).get("reason") == "Paused",
        "Ready=False/Paused",
        60,
        interval=1,
    )
    crd.kubectl("patch", "bcg", name, "-n", ns, "--type=merge", "-p", '{"spec":{"paused":false}}')
    wait_until(lambda: replicas() == 1, "resumed: back to minReplicas 1", 120, interval=1)

    # 8. a spec update reaches the Deployment at once (server-side apply), status follows the generation
    crd.kubectl("patch", "bcg", name, "-n", ns, "--type=merge", "-p", '{"spec":{"batch":{"maxRecords":50}}}')

    def env_value(key: str) -> str | None:
        c = apps.read_namespaced_deployment(dname, ns).spec.template.spec.containers[0]
        return next((e.value for e in c.env if e.name == key), None)

    wait_until(
        lambda: env_value("LAGPILOT_BATCH_MAX_RECORDS") == "50", "the updated env in the Deployment", 120
    )
    gen2 = get_cr(custom, ns, name)["metadata"]["generation"]
    wait_until(
        lambda: get_cr(custom, ns, name)["status"].get("observedGeneration") == gen2,
        "status.observedGeneration to follow the spec",
        60,
        interval=1,
    )

    # 9. delete the CR: the real garbage collector removes the Deployment (no operator code runs)
    crd.kubectl("delete", "bcg", name, "-n", ns, "--wait=true", "--timeout=120s", timeout=150)

    def gone() -> bool:
        try:
            apps.read_namespaced_deployment(dname, ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_until(gone, "the Deployment to be garbage-collected", 180, interval=1)
    assert op.alive(), op.tail()


# --------------------------------------------------------------------------- degraded paths


def test_degraded_paths_name_the_cause_and_recover(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_bootstrap: str,
    kafka_admin: Any,
    start_operator: Callable[[str], Operator],
) -> None:
    import base64

    from kubernetes import client

    from tests.fixtures.stack import create_topic

    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    ns = pods.namespace("op-degraded")
    op = start_operator(ns)
    suffix = uuid.uuid4().hex[:6]
    missing_topic = f"op-missing-{suffix}"
    secret_name = f"kafka-creds-{suffix}"
    password = f"pw-{uuid.uuid4().hex}"
    closed = free_port()  # nothing listens there
    base = {
        "groupId": f"g-{suffix}",
        "processing": {"sink": "log"},
        "drain": {"enabled": False},
        # no consumer pods: these tests are about the operator's own observation
        "scaling": {"minReplicas": 0, "maxReplicas": 2, "pollIntervalSeconds": 2},
    }
    apply_cr(
        crd,
        ns,
        cr("missing-topic", {**base, "kafka": {"bootstrapServers": kafka_bootstrap}, "topic": missing_topic}),
    )
    # each CR its own group id: two CRs with one groupId are DuplicateGroupId (M4), not these causes
    apply_cr(
        crd,
        ns,
        cr(
            "missing-secret",
            {
                **base,
                "groupId": f"g-{suffix}-secret",
                "topic": "t",
                "kafka": {
                    "bootstrapServers": kafka_bootstrap,
                    "securityProtocol": "SASL_PLAINTEXT",
                    "saslMechanism": "PLAIN",
                    "secretRef": {"name": secret_name},
                },
            },
        ),
    )
    apply_cr(
        crd,
        ns,
        cr(
            "unreachable",
            {
                **base,
                "groupId": f"g-{suffix}-unreachable",
                "topic": "t",
                "kafka": {"bootstrapServers": f"127.0.0.1:{closed}"},
            },
        ),
    )

    def degraded(name: str, reasons: tuple[str, ...]) -> dict[str, Any] | None:
        c = condition(get_cr(custom, ns, name), "Degraded")
        return c if c and c["status"] == "True" and c["reason"] in reasons else None

    def warned(name: str, reason: str) -> bool:
        return any(e.type == "Warning" and e.reason == reason for e in events_for(core, ns, name))

    cases = [
        ("missing-topic", ("TopicNotFound",), missing_topic),
        ("missing-secret", ("SecretNotFound",), secret_name),
        ("unreachable", ("BrokerUnreachable",), f"127.0.0.1:{closed}"),
    ]
    for name, reasons, needle in cases:
        c = wait_until(
            lambda name=name, reasons=reasons: degraded(name, reasons),
            f"{name}: Degraded {reasons}",
            120,
            interval=1,
        )
        print(f"{name}: {c['reason']}: {c['message']}")
        assert needle in c["message"]
        assert condition(get_cr(custom, ns, name), "Ready")["status"] == "False"
        wait_until(
            lambda name=name, c=c: warned(name, c["reason"]),
            f"{name}: a Warning event {c['reason']}",
            60,
            interval=1,
        )

    # a Secret without the password → SecretMalformed, naming the key, not the value
    core.create_namespaced_secret(
        ns,
        {
            "metadata": {"name": secret_name},
            "data": {"username": base64.b64encode(b"lagpilot-user").decode()},
        },
    )
    c = wait_until(
        lambda: degraded("missing-secret", ("SecretMalformed",)), "SecretMalformed", 120, interval=1
    )
    print(f"missing-secret: {c['reason']}: {c['message']}")
    assert "'password'" in c["message"]
    # complete credentials that this (PLAINTEXT) broker cannot accept over SASL: still Degraded,
    # and the password appears nowhere
    core.patch_namespaced_secret(
        secret_name, ns, {"data": {"password": base64.b64encode(password.encode()).decode()}}
    )
    c = wait_until(
        lambda: degraded("missing-secret", ("AuthenticationFailed", "BrokerUnreachable", "KafkaTimeout")),
        "Degraded after the credentials are complete",
        120,
        interval=1,
    )
    print(f"wrong credentials (SASL against a PLAINTEXT listener): {c['reason']}: {c['message']}")

    # fix the missing topic: the group recovers (Degraded False: no longer listed; a Recovered event)
    create_topic(kafka_admin, missing_topic, 2)
    wait_until(
        lambda: condition(get_cr(custom, ns, "missing-topic"), "Degraded") is None,
        "missing-topic: recovery once the topic exists",
        120,
        interval=1,
    )
    assert get_cr(custom, ns, "missing-topic")["status"]["partitions"] == 2
    wait_until(
        lambda: any(e.reason == "Recovered" for e in events_for(core, ns, "missing-topic")),
        "a Recovered event",
        60,
        interval=1,
    )
    # the partition count is followed: grow the topic to 4
    from confluent_kafka.admin import NewPartitions

    for fut in kafka_admin.create_partitions([NewPartitions(missing_topic, 4)]).values():
        fut.result(timeout=60)
    wait_until(
        lambda: get_cr(custom, ns, "missing-topic")["status"].get("partitions") == 4,
        "status.partitions to follow the topic to 4",
        120,
        interval=1,
    )

    # nothing anywhere carries the password or the username; the operator is still up
    blob = json.dumps([get_cr(custom, ns, n) for n, _, _ in cases], default=str)
    blob += json.dumps([(e.reason, e.message) for e in core.list_namespaced_event(ns).items])
    blob += op.tail(100000)
    assert password not in blob and "lagpilot-user" not in blob
    assert op.alive(), op.tail()
    for fut in kafka_admin.delete_topics([missing_topic], operation_timeout=30).values():
        fut.result(timeout=60)


# --------------------------------------------------------------------------- restart


def test_restart_resumes_estimate_and_history_from_status(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
) -> None:
    """SIGKILL the operator mid-backlog; its successor continues from the CR's memory ConfigMap
    (`<cr>-lagpilot-state`): the smoothed capacity and the stabilization window's recommendations
    recorded before the kill are still there after the successor's first cycle (nothing is
    re-learnt from scratch)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    ns = pods.namespace("op-restart")
    topic = new_topic(partitions=2, prefix="op-restart")
    produce(kafka_bootstrap, topic, 3000, 2)
    op = start_operator(ns)
    name = "restart"
    apply_cr(
        crd,
        ns,
        cr(
            name,
            {
                "kafka": {
                    "bootstrapServers": pods.kafka_bootstrap,
                    "sessionTimeoutMs": DEV_SESSION_TIMEOUT_MS,
                },
                "topic": topic,
                "groupId": f"g-{uuid.uuid4().hex[:6]}",
                "batch": {"maxRecords": 50, "timeoutMs": 500},
                # ~50 records/s per consumer: the backlog outlives the restart
                "processing": {
                    "handler": "tests.real.operator_handlers:slow",
                    "config": {"ms_per_record": "20"},
                },
                "scaling": {
                    "minReplicas": 1,
                    "maxReplicas": 2,
                    "pollIntervalSeconds": 2,
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
                },
                "catchUpSLASeconds": 600,
                "drain": {"enabled": False},
                "template": pods.template(),
            },
        ),
    )

    def status() -> dict[str, Any]:
        return get_cr(custom, ns, name).get("status") or {}

    def memory() -> dict[str, Any]:  # the memory ConfigMap's JSON (epoch seconds, as the step keeps it)
        try:
            cm = core.read_namespaced_config_map(memory_name(name), ns)
        except client.ApiException as err:
            if err.status == 404:
                return {}
            raise
        return dict(json.loads((cm.data or {}).get(MEMORY_FIELD) or "{}"))

    def recs(mem: dict[str, Any]) -> list[list[float]]:
        return (mem.get("scalingHistory") or {}).get("recommendations") or []

    def est(mem: dict[str, Any]) -> dict[str, Any]:
        return mem.get("estimator") or {"partitions": {}}

    wait_until(
        lambda: (
            status().get("capacityPerReplica")
            and len(recs(memory())) >= 3
            and all(p.get("samples", 0) >= 2 for p in (est(memory())["partitions"] or {"-": {}}).values())
        ),
        "a capacity estimate, a few recommendations and rate samples",
        180,
        interval=1,
    )
    op.kill()
    t_kill = time.time()
    before, mem_before = status(), memory()
    recs_before = [t for t, _ in recs(mem_before)]
    cap_before = before["capacityPerReplica"]
    print(
        f"before the kill: capacity {cap_before}, {len(recs_before)} recommendations, "
        f"totalLag {before['totalLag']}, replicas {before['desiredReplicas']}"
    )
    assert before["totalLag"] > 0, "the backlog must outlive the restart for this test to mean anything"

    start_operator(ns)
    mem_after = wait_until(
        lambda: (m := memory()) and est(m).get("atS", 0) > t_kill and m,
        "the successor's first cycle",
        120,
        interval=0.5,
    )
    after = status()
    recs_after = [t for t, _ in recs(mem_after)]
    decision_after = (condition({"status": after}, "Scaling") or {}).get("message") or ""  # the last decision
    print(
        f"after the restart: capacity {after['capacityPerReplica']}, "
        f"{len(recs_after)} recommendations ({sum(t < t_kill for t in recs_after)} from before the kill), "
        f"decision: {decision_after}"
    )
    assert any(t < t_kill for t in recs_after), "the stabilization history was forgotten"
    # only a restored estimator gives these (a first snapshot also yields some capacity, so
    # capacityPerReplica > 0 would prove nothing): every partition's rate-sample count continues
    # from the pre-kill memory (a fresh estimator starts at 0), and its sample window still holds
    # samples taken before the kill
    parts_before, parts_after = est(mem_before)["partitions"], est(mem_after)["partitions"]
    assert parts_before and set(parts_after) == set(parts_before)
    for p, est in parts_before.items():
        assert est["samples"] >= 2, (
            f"partition {p}: too few samples before the kill for the check to mean anything"
        )
        assert parts_after[p]["samples"] > est["samples"], (p, est["samples"], parts_after[p]["samples"])
        assert any(t < t_kill for t, _ in parts_after[p]["window"]), (
            f"partition {p}: pre-kill samples forgotten"
        )
    assert "capacity" not in decision_after.lower() or "unknown" not in decision_after.lower()
    assert condition(get_cr(custom, ns, name), "Degraded") is None  # False: absent (abnormal-true)
