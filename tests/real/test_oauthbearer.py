"""SASL OAUTHBEARER with OIDC client credentials for real (issue 28, item 3).

A private stack (tests/fixtures/oidc.py): Keycloak (`lagpilot dev up --parts oidc`) issues tokens
for one confidential client; a broker with an OAUTHBEARER listener validates them with Kafka's
built-in `OAuthBearerValidatorCallbackHandler` against Keycloak's JWKS (signature, issuer,
audience, expiry). Kafka's own CLI and librdkafka are the clients that check the listener.

The CR's pods run on the real node (`pods`): they fetch tokens at Keycloak on the pod-bridge gateway
and consume through the broker's OAUTH_PODS listener there.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.kafka import OAUTH_ALLOWED_URLS_PROPERTY, TOPICS_CLASS, oauth_client_properties
from lagpilot_dev.oidc import AUDIENCE, OTHER_AUDIENCE_CLIENT_ID
from tests.fixtures.kube import wait_until
from tests.fixtures.node import PodIO, Pods
from tests.fixtures.oidc import OidcKafka, oidc_kafka  # noqa: F401 - fixture
from tests.fixtures.sasl_crs import (
    apply_auth_cr,
    committed_total,
    credentials_secret,
    pod_logs,
    wait_authentication_failed,
)
from tests.fixtures.stack import create_topic
from tests.real.test_operator_e2e import (  # noqa: F401 - fixtures
    Operator,
    apply_cr,
    condition,
    cr,
    crd,
    events_for,
    get_cr,
    produce,
    start_operator,
)
from tests.real.test_secrets import hits

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _claims(jwt: str) -> dict[str, Any]:
    payload = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def _topics_cli(ok: OidcKafka, props: Path, *args: str) -> Any:
    return ok.kafka.run_cli_tool(
        TOPICS_CLASS,
        ["--bootstrap-server", ok.oauth_bootstrap, "--command-config", str(props), *args],
        jvm_props={OAUTH_ALLOWED_URLS_PROPERTY: ok.token_endpoint_url},
        timeout=240,
    )


def _props(tmp_path: Path, name: str, ok: OidcKafka, secret: str) -> Path:
    p = tmp_path / name
    p.write_text(oauth_client_properties(ok.token_endpoint_url, ok.client_id, secret))
    p.chmod(0o600)
    return p


def test_keycloak_issues_tokens_for_the_client_and_refuses_a_wrong_secret(oidc_kafka: OidcKafka) -> None:
    ok = oidc_kafka
    token = ok.oidc.fetch_token()["access_token"]
    claims = _claims(token)
    print("token claims:", {k: claims.get(k) for k in ("iss", "aud", "azp", "exp", "iat", "sub")})
    assert claims["iss"] == ok.oidc.issuer()
    assert "kafka" in ([claims["aud"]] if isinstance(claims["aud"], str) else claims["aud"])
    assert claims["azp"] == ok.client_id and claims.get("sub")
    with pytest.raises(urllib.error.HTTPError) as info:
        ok.oidc.fetch_token(client_secret="wrong-" + uuid.uuid4().hex)
    assert info.value.code == 401


def test_kafka_cli_creates_and_lists_topics_with_oidc_and_fails_with_a_wrong_secret(
    oidc_kafka: OidcKafka, tmp_path: Path
) -> None:
    ok = oidc_kafka
    topic = f"oauth-cli-{uuid.uuid4().hex[:8]}"
    good = _props(tmp_path, "good.properties", ok, ok.client_secret)
    res = _topics_cli(
        ok, good, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1"
    )
    print("kafka-topics --create:", res.returncode, res.stdout.strip(), res.stderr.strip()[-500:])
    assert res.returncode == 0, res.stderr
    res = _topics_cli(ok, good, "--list")
    assert res.returncode == 0 and topic in res.stdout.split(), (res.stdout, res.stderr)

    wrong = "wrong-" + uuid.uuid4().hex
    bad = _props(tmp_path, "bad.properties", ok, wrong)
    res = _topics_cli(ok, bad, "--list")
    print("kafka-topics --list with a wrong client secret:", res.returncode, res.stderr.strip()[-800:])
    assert res.returncode != 0
    assert topic not in res.stdout
    assert "401" in res.stderr or "authenticat" in res.stderr.lower(), res.stderr[-2000:]


@pytest.mark.parametrize("listener", ["oauth_bootstrap", "oauth_pods_bootstrap"])
def test_librdkafka_oidc_client_is_accepted_and_an_unsigned_token_is_refused(
    oidc_kafka: OidcKafka, listener: str
) -> None:
    """On the loopback OAUTH listener and on the one pods use (OAUTH_PODS on the node's bridge)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    ok = oidc_kafka
    bootstrap = getattr(ok, listener)
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
    }
    oidc = {
        **conf,
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": ok.token_endpoint_url,
        "sasl.oauthbearer.client.id": ok.client_id,
        "sasl.oauthbearer.client.secret": ok.client_secret,
    }
    md = AdminClient(oidc).list_topics(timeout=60)
    # the listener advertises itself: clients bootstrapped here stay on OAUTHBEARER (and on the bridge)
    assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [bootstrap]

    # librdkafka's default OAUTHBEARER token is an unsecured JWT (alg none): the broker must
    # check signatures against the JWKS and refuse it
    errors: list[str] = []
    forged = AdminClient(
        {
            **conf,
            "sasl.oauthbearer.config": "principal=admin scope=kafka",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "log_level": 0,
            "error_cb": lambda e: errors.append(e.name()),
        }
    )
    with pytest.raises(KafkaException):
        forged.list_topics(timeout=10)
    forged.poll(1)
    assert "_AUTHENTICATION" in errors, errors


def test_a_cr_with_oidc_credentials_consumes_and_commits_a_wrong_secret_degrades_and_nothing_leaks(
    oidc_kafka: OidcKafka,
    crd: Any,
    kube_api: Any,
    pods: Pods,
    pod_io: PodIO,
    start_operator: Callable[[str], Operator],
) -> None:
    """(2) the operator's admin client and the consumer pods authenticate with OIDC client
    credentials from the CR's Secret: the group commits every record; (3) a wrong client secret
    (refused at the token endpoint) and a token the endpoint issues for another audience (refused
    by the broker): each CR goes Degraded with a reason naming authentication and a message naming
    the token endpoint and the cluster; neither client secret nor any token
    Keycloak issued is in the operator's log, the pods' logs, events, CRs (status), metrics or the
    workload specs (the scan of tests/real/test_secrets.py, extended to the OIDC secret)."""
    from kubernetes import client

    ok = oidc_kafka
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    ns = pods.namespace("oauth")
    stop_logs = pod_io.follow(ns)
    op = start_operator(ns)
    admin = ok.admin()
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic, partitions=2)
    records = 300
    produce(ok.bootstrap, topic, records // 2, 2)
    wrong_secret = f"wrongoidc{uuid.uuid4().hex}"
    for name, client_id, secret in (
        ("idp-right", ok.client_id, ok.client_secret),
        ("idp-wrong", ok.client_id, wrong_secret),
        ("idp-audience", OTHER_AUDIENCE_CLIENT_ID, ok.client_secret),
    ):
        core.create_namespaced_secret(
            ns, credentials_secret(name, {"clientId": client_id, "clientSecret": secret})
        )
    # the pods' way to the broker (OAUTH_PODS on the node's bridge); the operator on the host
    # reaches the same address
    bootstrap = ok.oauth_pods_bootstrap
    kafka = {
        "bootstrapServers": bootstrap,
        "securityProtocol": "SASL_PLAINTEXT",
        "saslMechanism": "OAUTHBEARER",
        "oauthbearer": {"tokenEndpointUrl": ok.token_endpoint_url},
    }
    u = uuid.uuid4().hex[:6]
    group_right, group_wrong = f"oauth-right-{u}", f"oauth-wrong-{u}"
    # the consumer pods run this checkout's runtime (the test image)
    template = pods.template()
    apply_auth_cr(crd, ns, "right", kafka, "idp-right", topic, group_right, consume=True, template=template)
    for name in ("wrong", "audience"):
        apply_auth_cr(
            crd,
            ns,
            name,
            kafka,
            f"idp-{name}",
            topic,
            f"{group_wrong}-{name}",
            consume=False,
            template=template,
        )

    # (3) the fault really fires at Keycloak (the wrong secret is refused there, 401) ...
    with pytest.raises(urllib.error.HTTPError) as refused:
        ok.oidc.fetch_token(client_secret=wrong_secret)
    assert refused.value.code == 401

    # (3b) an invalid token: the endpoint issues it (the fault is not at Keycloak) but for another
    # audience, which the broker's validator refuses
    other_token = ok.oidc.fetch_token(client_id=OTHER_AUDIENCE_CLIENT_ID)["access_token"]
    aud = _claims(other_token).get("aud")
    assert AUDIENCE not in (aud if isinstance(aud, list) else [aud]), _claims(other_token)

    # ... and each CR goes Degraded naming authentication, the token endpoint and the cluster
    for name in ("wrong", "audience"):
        c = wait_authentication_failed(custom, core, ns, name, 240)
        assert "authenticat" in (c["reason"] + c["message"]).lower()
        assert ok.token_endpoint_url in c["message"] and bootstrap in c["message"], c

    # (2) the right CR: the pod consumes every record over OAUTHBEARER and commits
    wait_until(
        lambda: committed_total(admin, group_right, topic, [0, 1]) == records,
        f"group {group_right} to commit all {records} records",
        300,
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
    # the group's members came through the OAUTHBEARER listener: its only bootstrap and advertised address
    dep = client.AppsV1Api(kube_api).read_namespaced_deployment("right-consumer", ns)
    env = {e.name: e for e in dep.spec.template.spec.containers[0].env}
    assert env["LAGPILOT_BOOTSTRAP_SERVERS"].value == bootstrap
    assert env["LAGPILOT_SASL_MECHANISM"].value == "OAUTHBEARER"
    for key, secret_key in (
        ("LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID", "clientId"),
        ("LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET", "clientSecret"),
    ):
        assert env[key].value is None, key  # never a literal
        ref = env[key].value_from.secret_key_ref
        assert (ref.name, ref.key) == ("idp-right", secret_key)

    # (3) no secret anywhere: a token Keycloak issues for this client now, the right and the wrong
    # client secret
    token = ok.oidc.fetch_token()["access_token"]
    values = {
        "client_secret": ok.client_secret,
        "wrong_client_secret": wrong_secret,
        "token_signature": token.rsplit(".", 1)[1],
        "other_audience_token_signature": other_token.rsplit(".", 1)[1],
    }

    def kubectl_json(*what: str) -> str:
        return crd.kubectl("get", *what, "-n", ns, "-o", "json").stdout

    places = {
        "operator log": op.log_path.read_text(errors="replace"),
        "pod logs": pod_logs(pod_io, ns),
        "events": kubectl_json("events"),
        "CRs (spec+status)": kubectl_json("batchconsumergroups"),
        "metrics": op.metrics(),
        "deployments, replicasets, pods, jobs": kubectl_json("deployments,replicasets,pods,jobs"),
    }
    stop_logs.set()
    found = {place: {k: n for k, n in hits(text, values).items() if n} for place, text in places.items()}
    print("scanned:", {place: len(text) for place, text in places.items()}, "hits:", found)
    assert all(len(text) > 0 for text in places.values()), {p: len(t) for p, t in places.items()}
    assert found == {place: {} for place in places}, found
    # positive control: the scanner finds the secrets where they are (the Secrets, decoded)
    secret_text = "\n".join(
        json.dumps({k: base64.b64decode(v).decode() for k, v in (s.data or {}).items()})
        for s in core.list_namespaced_secret(ns).items
    )
    assert (
        hits(secret_text, values)["client_secret"] > 0
        and hits(secret_text, values)["wrong_client_secret"] > 0
    )
    assert op.alive(), op.tail()


def test_the_drains_spark_reader_authenticates_with_oidc_client_credentials(
    oidc_kafka: OidcKafka, spark_jars: list[str]
) -> None:
    """(4) the drain's Kafka options (`spark_kafka_options`, from the env the drain Job gets) make
    Spark's kafka-clients fetch a token at Keycloak and read a range over the OAUTHBEARER listener;
    with a wrong client secret the same read fails (the fault fires at the token endpoint)."""
    from lagpilot_dev.spark import local_session
    from lagpilot_runtime.config import ConsumerConfig
    from lagpilot_runtime.drain.spark import spark_kafka_options

    ok = oidc_kafka
    topic = f"oauth-spark-{uuid.uuid4().hex[:8]}"
    create_topic(ok.admin(), topic, partitions=1)
    produce(ok.bootstrap, topic, 120, 1)

    def cfg(secret: str) -> ConsumerConfig:
        return ConsumerConfig.from_env(
            {
                "LAGPILOT_BOOTSTRAP_SERVERS": ok.oauth_bootstrap,
                "LAGPILOT_TOPIC": topic,
                "LAGPILOT_GROUP_ID": "drain",
                "LAGPILOT_SINK": "log",
                "LAGPILOT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "LAGPILOT_SASL_MECHANISM": "OAUTHBEARER",
                "LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": ok.token_endpoint_url,
                "LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID": ok.client_id,
                "LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET": secret,
            }
        )

    rng = {
        "assign": json.dumps({topic: [0]}),
        "startingOffsets": json.dumps({topic: {"0": 10}}),
        "endingOffsets": json.dumps({topic: {"0": 110}}),
    }
    spark = local_session("lagpilot-oauth-test", spark_jars, master="local[1]")
    try:
        n = (
            spark.read.format("kafka")
            .options(**spark_kafka_options(cfg(ok.client_secret), True), **rng)
            .load()
            .count()
        )
        print("spark read over OAUTHBEARER:", n)
        assert n == 100
        wrong_secret = "wrong-" + uuid.uuid4().hex
        wrong = spark_kafka_options(cfg(wrong_secret), True)
        with pytest.raises(Exception) as info:  # Py4J wraps the JVM's error
            spark.read.format("kafka").options(
                **wrong, **{"kafka.default.api.timeout.ms": "30000"}, **rng
            ).load().count()
        text = str(info.value)
        cause = [
            ln.strip()
            for ln in text.splitlines()
            if "401" in ln or "uthenticat" in ln or "LoginException" in ln
        ]
        print("spark read with a wrong client secret:", cause[:3])
        assert cause, text[-3000:]
        assert wrong_secret not in text
    finally:
        spark.stop()
