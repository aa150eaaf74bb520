"""SASL OAUTHBEARER (OIDC client credentials, issue 28 item 3): the spec, the operator's admin
configuration, the consumer pods' env and runtime configuration, the drain's Spark options.
The real broker + Keycloak check is tests/real/test_oauthbearer.py."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from lagpilot.act.deployment import build_deployment
from lagpilot.observe.kafka_common import SecretError
from lagpilot.observe.kafka_config import admin_config
from lagpilot.spec import SpecError, parse_spec
from lagpilot_runtime.config import ConfigError, ConsumerConfig
from lagpilot_runtime.drain.spark import spark_kafka_options

URL = "https://idp.example.com/realms/kafka/protocol/openid-connect/token"
KAFKA = {
    "bootstrapServers": "k:9093",
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "OAUTHBEARER",
    "oauthbearer": {"tokenEndpointUrl": URL, "scope": "kafka profile"},
    "secretRef": {"name": "idp"},
}


def spec(kafka: dict[str, Any]) -> dict[str, Any]:
    return {"kafka": kafka, "topic": "orders", "groupId": "g1", "processing": {"sink": "log"}}


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def test_spec_carries_the_token_endpoint_and_scope() -> None:
    k = parse_spec(spec(KAFKA)).kafka
    assert k.uses_oauthbearer and k.oauth_token_endpoint_url == URL and k.oauth_scope == "kafka profile"


@pytest.mark.parametrize(
    "kafka,field",
    [
        ({**KAFKA, "oauthbearer": None}, "oauthbearer"),
        ({**KAFKA, "saslMechanism": "SCRAM-SHA-512"}, "oauthbearer"),
        ({**KAFKA, "oauthbearer": {"tokenEndpointUrl": "https://user:pw@idp/token"}}, "tokenEndpointUrl"),
        ({**KAFKA, "oauthbearer": {"tokenEndpointUrl": "ftp://idp/token"}}, "tokenEndpointUrl"),
        ({**KAFKA, "oauthbearer": {"tokenEndpointUrl": URL, "scope": "a  b"}}, "scope"),
    ],
    ids=["missing", "wrong-mechanism", "userinfo", "scheme", "scope"],
)
def test_bad_oauthbearer_settings_are_refused_naming_the_field(kafka: dict[str, Any], field: str) -> None:
    kafka = {k: v for k, v in kafka.items() if v is not None}
    with pytest.raises(SpecError) as info:
        parse_spec(spec(kafka))
    assert field in str(info.value)


def test_admin_config_reads_client_credentials_from_the_secret() -> None:
    k = parse_spec(spec(KAFKA)).kafka
    conf = admin_config(k, {"clientId": b64("lagpilot"), "clientSecret": b64("s3cret-value")})
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["sasl.oauthbearer.token.endpoint.url"] == URL
    assert conf["sasl.oauthbearer.client.id"] == "lagpilot"
    assert conf["sasl.oauthbearer.client.secret"] == "s3cret-value"
    assert conf["sasl.oauthbearer.scope"] == "kafka profile"
    assert "sasl.username" not in conf and "sasl.password" not in conf


def test_admin_config_names_the_missing_key_never_a_value() -> None:
    k = parse_spec(spec(KAFKA)).kafka
    with pytest.raises(SecretError) as info:
        admin_config(k, {"clientId": b64("lagpilot-id-value")})
    assert info.value.reason == "SecretMalformed" and "'clientSecret'" in info.value.message
    assert "lagpilot-id-value" not in info.value.message


def test_pods_get_the_client_credentials_only_by_reference() -> None:
    dep = build_deployment("orders", "ns1", "uid-1", parse_spec(spec(KAFKA)), 1)
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LAGPILOT_SASL_MECHANISM"]["value"] == "OAUTHBEARER"
    assert env["LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"]["value"] == URL
    assert env["LAGPILOT_SASL_OAUTHBEARER_SCOPE"]["value"] == "kafka profile"
    for name, key in (
        ("LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID", "clientId"),
        ("LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET", "clientSecret"),
    ):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "idp", "key": key}
    assert "LAGPILOT_SASL_USERNAME" not in env and "LAGPILOT_SASL_PASSWORD" not in env


ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "k:9093",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g1",
    "LAGPILOT_SINK": "log",
    "LAGPILOT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "LAGPILOT_SASL_MECHANISM": "OAUTHBEARER",
    "LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": URL,
    "LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID": "lagpilot",
    "LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET": "the-client-secret-value",
}


def test_runtime_config_builds_librdkafka_oidc_settings_and_hides_the_secret() -> None:
    cfg = ConsumerConfig.from_env(ENV)
    conf = cfg.kafka_security()
    assert conf == {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": URL,
        "sasl.oauthbearer.client.id": "lagpilot",
        "sasl.oauthbearer.client.secret": "the-client-secret-value",
    }
    assert "the-client-secret-value" not in repr(cfg)
    from lagpilot_runtime.redaction import redact

    assert "the-client-secret-value" not in redact("error: client_secret=the-client-secret-value")


@pytest.mark.parametrize(
    "missing", ["LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", "LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET"]
)
def test_runtime_config_names_the_missing_variable(missing: str) -> None:
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_env(env)
    assert missing in str(info.value) and "the-client-secret-value" not in str(info.value)


def test_spark_options_use_kafka_clients_oidc_login_handler() -> None:
    cfg = ConsumerConfig(
        bootstrap_servers="k:9093",
        topic="orders",
        group_id="g",
        sink="log",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        oauth_token_endpoint_url=URL,
        oauth_client_id="lagpilot",
        oauth_client_secret='s"x',
        oauth_scope="kafka",
    )
    opts = spark_kafka_options(cfg, read_committed=True)
    assert opts["kafka.sasl.mechanism"] == "OAUTHBEARER"
    assert opts["kafka.sasl.oauthbearer.token.endpoint.url"] == URL
    assert opts["kafka.sasl.login.callback.handler.class"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    )
    assert opts["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="lagpilot" clientSecret="s\\"x" scope="kafka";'
    )


def test_the_drain_gets_the_same_oidc_settings_and_its_executors_the_secret_only_by_reference() -> None:
    from lagpilot.act.drain_manifests import consumer_env

    env = {e["name"]: e for e in consumer_env(parse_spec(spec(KAFKA)))}
    assert env["LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"]["value"] == URL
    assert env["LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "idp",
        "key": "clientSecret",
    }
    # what the drain's driver parses from that env is what spark_kafka_options turns into the reader's
    cfg = ConsumerConfig.from_env({**ENV, "LAGPILOT_SECURITY_PROTOCOL": "SASL_SSL"})
    opts = spark_kafka_options(cfg, read_committed=True)
    assert opts["kafka.security.protocol"] == "SASL_SSL" and opts["kafka.sasl.mechanism"] == "OAUTHBEARER"
    assert "the-client-secret-value" in opts["kafka.sasl.jaas.config"]


@pytest.mark.parametrize("code", ["_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"])
def test_an_authentication_failure_over_oauthbearer_names_the_token_endpoint_and_no_secret(code: str) -> None:
    """Issue 28 item 3: with OIDC client credentials, authentication fails at the token endpoint (the
    client id/secret refused) or at the broker (the token refused: expired, wrong issuer, audience or
    signature); the Degraded message names both places, the endpoint by the field that sets it, and
    never the secret."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from lagpilot.observe.kafka_observe import AdminPool, classify

    k = parse_spec(spec(KAFKA)).kafka
    conf = admin_config(k, {"clientId": b64("lagpilot"), "clientSecret": b64("s3cret-value")})
    h = AdminPool(factory=lambda c: SimpleNamespace(poll=lambda t: 0)).acquire("ns/a", conf)
    err = classify(KafkaException(KafkaError(getattr(KafkaError, code))), h, "orders", h.bootstrap)
    assert err.reason == "AuthenticationFailed"
    assert URL in err.message and "spec.kafka.oauthbearer.tokenEndpointUrl" in err.message
    assert "k:9093" in err.message and "authenticat" in err.message.lower()
    assert "s3cret-value" not in str(err) and "s3cret-value" not in err.message
    # a timeout the error callback explains says the same
    h.on_error(KafkaError(getattr(KafkaError, code)))
    timed_out = classify(KafkaException(KafkaError(KafkaError._TIMED_OUT)), h, "orders", h.bootstrap)
    assert timed_out.reason == "AuthenticationFailed" and URL in timed_out.message
    # SCRAM: no token endpoint to name
    scram = parse_spec(
        spec(
            {
                "bootstrapServers": "k:9093",
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "SCRAM-SHA-512",
                "secretRef": {"name": "c"},
            }
        )
    ).kafka
    h2 = AdminPool(factory=lambda c: SimpleNamespace(poll=lambda t: 0)).acquire(
        "ns/b", admin_config(scram, {"username": b64("u"), "password": b64("p4ss-word")})
    )
    plain = classify(KafkaException(KafkaError(getattr(KafkaError, code))), h2, "orders", h2.bootstrap)
    assert "token" not in plain.message and "p4ss-word" not in plain.message
