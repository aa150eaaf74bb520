"""deployment.py: the consumer Deployment manifest, built without a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lagpilot.act.deployment import build_deployment, deployment_name, label_value
from lagpilot.spec import parse_spec

SASL_PG = {
    "kafka": {
        "bootstrapServers": "k:9093",
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "SCRAM-SHA-256",
        "secretRef": {"name": "kafka-creds"},
        "sessionTimeoutMs": 12000,
    },
    "topic": "orders",
    "groupId": "g1",
    "batch": {"maxRecords": 200, "timeoutMs": 45000},
    "processing": {
        "sink": "postgres",
        "config": {"x": "1"},
        "postgres": {"dsnSecretRef": {"name": "pg", "key": "dsn"}, "table": "t1"},
    },
    "template": {
        "image": "reg/consumer:1.2",
        "env": [{"name": "EXTRA", "value": "1"}],
        "resources": {"limits": {"cpu": "2"}},
    },
}


def render(raw: dict[str, Any], replicas: int = 3) -> dict[str, Any]:
    return build_deployment("orders", "ns1", "uid-123", parse_spec(raw), replicas)


def env_of(dep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_identity_owner_labels() -> None:
    dep = render(SASL_PG)
    meta = dep["metadata"]
    assert (dep["apiVersion"], dep["kind"]) == ("apps/v1", "Deployment")
    assert meta["name"] == "orders-consumer" and meta["namespace"] == "ns1"
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "name": "orders",
        "uid": "uid-123",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    sel = dep["spec"]["selector"]["matchLabels"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert sel.items() <= pod_labels.items()
    assert pod_labels["lagpilot.io/group"] == "orders"
    assert pod_labels["app.kubernetes.io/managed-by"] == "lagpilot"
    assert dep["spec"]["replicas"] == 3


def test_env_follows_contract_and_secrets_only_by_reference() -> None:
    env = env_of(render(SASL_PG))
    assert env["LAGPILOT_BOOTSTRAP_SERVERS"]["value"] == "k:9093"
    assert env["LAGPILOT_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["LAGPILOT_SASL_MECHANISM"]["value"] == "SCRAM-SHA-256"
    for name, key in [
        ("LAGPILOT_SASL_USERNAME", "username"),
        ("LAGPILOT_SASL_PASSWORD", "password"),
        ("LAGPILOT_SSL_CA_PEM", "ca.crt"),
        ("LAGPILOT_SSL_CERT_PEM", "tls.crt"),
        ("LAGPILOT_SSL_KEY_PEM", "tls.key"),
    ]:
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "kafka-creds"
        assert env[name]["valueFrom"]["secretKeyRef"]["key"] == key
    assert env["LAGPILOT_POSTGRES_DSN"]["valueFrom"]["secretKeyRef"] == {"name": "pg", "key": "dsn"}
    assert "value" not in env["LAGPILOT_POSTGRES_DSN"]
    assert env["LAGPILOT_POSTGRES_TABLE"]["value"] == "t1"
    assert env["LAGPILOT_TOPIC"]["value"] == "orders" and env["LAGPILOT_GROUP_ID"]["value"] == "g1"
    assert env["LAGPILOT_BATCH_MAX_RECORDS"]["value"] == "200"
    assert env["LAGPILOT_SESSION_TIMEOUT_MS"]["value"] == "12000"
    assert json.loads(env["LAGPILOT_HANDLER_CONFIG"]["value"]) == {"x": "1"}
    assert env["LAGPILOT_DLQ_TOPIC"]["value"] == "orders.dlq"
    assert env["LAGPILOT_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["LAGPILOT_METRICS_PORT"]["value"] == "8080"
    assert env["EXTRA"]["value"] == "1"
    assert "LAGPILOT_HANDLER" not in env
    # every value is a string (the API server rejects numbers in env values)
    assert all(isinstance(e["value"], str) for e in env.values() if "value" in e)


def test_plaintext_log_sink_has_no_secret_refs() -> None:
    env = env_of(
        render(
            {
                "kafka": {"bootstrapServers": "k:9092"},
                "topic": "t",
                "groupId": "g",
                "processing": {"handler": "pkg.mod:fn"},
            }
        )
    )
    assert not any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in env.values())
    assert env["LAGPILOT_HANDLER"]["value"] == "pkg.mod:fn" and "LAGPILOT_SINK" not in env
    assert env["LAGPILOT_SESSION_TIMEOUT_MS"]["value"] == "30000"  # the CRD's and the runtime's default


def test_pod_is_restricted_and_probed() -> None:
    dep = render(SASL_PG)
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "reg/consumer:1.2"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8080}
    assert c["resources"] == {"limits": {"cpu": "2"}}
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    # batch timeout 45 s + 30 s to finish and commit
    assert pod["terminationGracePeriodSeconds"] == 75
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


def test_default_resources_when_unset() -> None:
    c = render({"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g"})["spec"]["template"][
        "spec"
    ]["containers"][0]
    assert c["resources"]["requests"]["memory"] == "256Mi"


@pytest.mark.parametrize("replicas", [0, 1, 7])
def test_replicas_passed_through(replicas: int) -> None:
    assert render(SASL_PG, replicas)["spec"]["replicas"] == replicas


def test_negative_replicas_rejected() -> None:
    with pytest.raises(ValueError):
        render(SASL_PG, -1)


def test_long_names_are_shortened_stably() -> None:
    long = "a" * 80
    v = label_value(long)
    assert len(v) <= 63 and v == label_value(long) and v != label_value("a" * 81)
    assert len(deployment_name("b" * 300)) <= 253


def test_consumers_get_their_crs_uid_for_the_hand_off_mailbox() -> None:
    # H2/M4: the consumers act only on mailbox entries that carry this uid (lagpilot_runtime.handoff_mailbox)
    env = {
        e["name"]: e.get("value") for e in render(SASL_PG)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["LAGPILOT_OWNER_UID"] == "uid-123"


def test_an_operator_upgrade_does_not_change_the_pod_template() -> None:
    """M10 (issue 23): the operator's version labels the Deployment, not its pod template: a new
    operator version re-applies the same template, so no consumer Deployment rolls (the pods
    restart only when what they run changes, e.g. spec.template.image)."""
    spec = parse_spec(SASL_PG)
    old = build_deployment("orders", "ns1", "uid-123", spec, 3, version="0.1.0")
    new = build_deployment("orders", "ns1", "uid-123", spec, 3, version="0.2.0")
    assert old["spec"]["template"] == new["spec"]["template"]
    assert new["metadata"]["labels"]["app.kubernetes.io/version"] == "0.2.0"
    assert "app.kubernetes.io/version" not in new["spec"]["template"]["metadata"]["labels"]
    moved = build_deployment(
        "orders",
        "ns1",
        "uid-123",
        parse_spec({**SASL_PG, "template": {**SASL_PG["template"], "image": "reg/consumer:1.3"}}),
        3,
        version="0.2.0",
    )
    assert moved["spec"]["template"] != new["spec"]["template"]  # an image change still rolls
