"""SASL/SCRAM-SHA-512 for real (issue 14, item 4): the local broker's SASL_PLAINTEXT listener.

Wrong credentials in the Secret → the operator's own observation is refused by the broker →
`Degraded=True` with reason `AuthenticationFailed`; the password is in no status, event or operator
log line. Right credentials → the consumer pods (env from the Secret by secretKeyRef only) consume
the topic over SASL: the group's committed offsets reach the end of the topic, and the bootstrap
list given to everyone is the SASL listener alone (its metadata advertises only itself).

The pods run on the real node (`pods`): the CRs name SASL_PODS, the SCRAM listener's counterpart
on the pod-bridge gateway (the operator on the host reaches it there too). With LAGPILOT_NODE=0
only the loopback listener's test runs.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import PodIO, Pods, node_gate
from tests.fixtures.sasl_crs import (
    apply_auth_cr,
    committed_total,
    credentials_secret,
    pod_logs,
    wait_authentication_failed,
)
from tests.real.test_operator_e2e import (  # noqa: F401 - fixtures
    Operator,
    condition,
    crd,
    get_cr,
    produce,
    start_operator,
)

pytestmark = [pytest.mark.real, pytest.mark.slow]


@pytest.fixture(scope="module")
def sasl(kafka_part: Any) -> dict[str, str]:
    """The SASL listeners' addresses and the dev SCRAM user (created by `lagpilot dev up`):
    "bootstrap" on loopback (the host's clients), "pods_bootstrap" where the pods reach SCRAM (SASL_PODS
    on the node's bridge gateway)."""
    restart = "restart the kafka part once (lagpilot dev down --parts kafka && lagpilot dev up --parts kafka)"
    assert kafka_part.sasl_listener_configured(), (
        f"the running dev Kafka has no SASL listener: it was started before the listener existed; {restart}"
    )
    pods_bootstrap = kafka_part.sasl_pods_bootstrap_servers() or ""
    assert pods_bootstrap or node_gate(os.environ)[0] != "on", (
        "the running dev Kafka has no SASL_PODS listener on the pod bridge (started before the "
        f"node's bridge or before that listener existed); {restart}"
    )
    kafka_part.ensure_scram_user()
    return {
        "bootstrap": kafka_part.sasl_bootstrap_servers(),
        "pods_bootstrap": pods_bootstrap,
        **kafka_part.sasl_credentials(),
    }


def _secret(name: str, username: str, password: str) -> dict[str, Any]:
    return credentials_secret(name, {"username": username, "password": password})


@pytest.mark.parametrize("listener", ["bootstrap", "pods_bootstrap"])
def test_sasl_listener_accepts_the_scram_user_and_refuses_a_wrong_password(
    sasl: dict[str, str], listener: str
) -> None:
    """The fault is real: the broker itself checks SCRAM (positive and negative control), on the
    loopback listener and on the one the pods use (SASL_PODS on the node: the same users)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not sasl[listener]:  # no pod bridge: the node is off (LAGPILOT_NODE=0)
        pytest.skip(node_gate(os.environ)[1])
    conf = {
        "bootstrap.servers": sasl[listener],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": sasl["username"],
        "log_level": 0,
    }
    md = AdminClient({**conf, "sasl.password": sasl["password"]}).list_topics(timeout=30)
    # the listener advertises itself: clients bootstrapped here stay on SASL (and on the bridge)
    assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [sasl[listener]]
    errors: list[str] = []
    bad = AdminClient(
        {**conf, "sasl.password": "not-" + sasl["password"], "error_cb": lambda e: errors.append(e.name())}
    )
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=8)
    bad.poll(1)
    assert "_AUTHENTICATION" in errors, errors


def test_wrong_scram_credentials_degrade_and_right_ones_consume_over_sasl(
    sasl: dict[str, str],
    crd: Any,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    kafka_bootstrap: str,
    kafka_admin: Any,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
) -> None:
    from kubernetes import client

    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    ns = pods.namespace("sasl")
    stop_logs = pod_io.follow(ns)
    op = start_operator(ns)
    topic = new_topic(partitions=2, prefix="sasl")
    records = 300
    produce(kafka_bootstrap, topic, records // 2, 2)
    wrong_password = f"wrong-{uuid.uuid4().hex}"
    core.create_namespaced_secret(ns, _secret("kafka-wrong", sasl["username"], wrong_password))
    core.create_namespaced_secret(ns, _secret("kafka-right", sasl["username"], sasl["password"]))
    kafka = {
        "bootstrapServers": sasl["pods_bootstrap"],
        "securityProtocol": "SASL_PLAINTEXT",
        "saslMechanism": "SCRAM-SHA-512",
    }
    group_wrong, group_right = f"sasl-wrong-{uuid.uuid4().hex[:6]}", f"sasl-right-{uuid.uuid4().hex[:6]}"
    template = pods.template()
    apply_auth_cr(
        crd, ns, "wrong", kafka, "kafka-wrong", topic, group_wrong, consume=False, template=template
    )
    apply_auth_cr(crd, ns, "right", kafka, "kafka-right", topic, group_right, consume=True, template=template)

    # 1. wrong credentials: Degraded, reason naming authentication, a Warning event
    c = wait_authentication_failed(custom, core, ns, "wrong", 180)
    assert "credentials" in c["message"] and sasl["pods_bootstrap"] in c["message"]

    # 2. right credentials: the consumer pod consumes every record over SASL
    dep = wait_until(
        lambda: apps.read_namespaced_deployment("right-consumer", ns), "the consumer Deployment", 90
    )
    env = {e.name: e for e in dep.spec.template.spec.containers[0].env}
    assert env["LAGPILOT_BOOTSTRAP_SERVERS"].value == sasl["pods_bootstrap"]
    assert env["LAGPILOT_SECURITY_PROTOCOL"].value == "SASL_PLAINTEXT"
    assert env["LAGPILOT_SASL_MECHANISM"].value == "SCRAM-SHA-512"
    for key, secret_key in (("LAGPILOT_SASL_USERNAME", "username"), ("LAGPILOT_SASL_PASSWORD", "password")):
        assert env[key].value is None, key  # never a literal
        ref = env[key].value_from.secret_key_ref
        assert (ref.name, ref.key) == ("kafka-right", secret_key)

    wait_until(
        lambda: committed_total(kafka_admin, group_right, topic, [0, 1]) == records,
        f"group {group_right} to commit all {records} records",
        240,
        interval=2,
    )
    wait_until(
        lambda: get_cr(custom, ns, "right")["status"].get("totalLag") == 0,
        "right: totalLag 0",
        120,
        interval=1,
    )
    right = get_cr(custom, ns, "right")
    assert condition(right, "Degraded") is None, right["status"]["conditions"]  # False: absent
    print("right credentials:", json.dumps({k: right["status"].get(k) for k in ("replicas", "totalLag")}))

    # 3. fixing the wrong Secret heals the first group (Degraded False: no longer listed)
    core.patch_namespaced_secret(
        "kafka-wrong", ns, _secret("kafka-wrong", sasl["username"], sasl["password"])
    )
    wait_until(
        lambda: condition(get_cr(custom, ns, "wrong"), "Degraded") is None,
        "wrong: recovery once the Secret holds the right password",
        180,
        interval=1,
    )

    # 4. no password anywhere: CR status, events, the operator's log, Deployment specs, pod logs
    blob = json.dumps([get_cr(custom, ns, n) for n in ("wrong", "right")], default=str)
    blob += json.dumps([(e.reason, e.message) for e in core.list_namespaced_event(ns).items])
    blob += json.dumps([d.to_dict() for d in apps.list_namespaced_deployment(ns).items], default=str)
    blob += op.tail(100000)
    assert core.list_namespaced_pod(ns).items, "no consumer pod ran"
    logs = pod_logs(pod_io, ns)
    stop_logs.set()
    assert logs, "no consumer pod log read"
    blob += logs
    assert wrong_password not in blob
    assert sasl["password"] not in blob
    assert op.alive(), op.tail()
