"""ConsumerConfig.from_env: defaults, parsing, errors naming the variable, secrets kept out of repr."""

from __future__ import annotations

import pytest

from lagpilot_runtime.config import ConfigError, ConsumerConfig

BASE = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "k:9092",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_SINK": "log",
}


def test_defaults_follow_the_contract():
    cfg = ConsumerConfig.from_env(BASE)
    assert (cfg.batch_max_records, cfg.batch_timeout_ms, cfg.concurrency) == (500, 1000, 1)
    assert (cfg.failure_policy, cfg.max_retries, cfg.retry_backoff_ms) == ("deadLetter", 3, 200)
    assert cfg.dlq_topic == "orders.dlq"
    assert (cfg.postgres_table, cfg.postgres_mode, cfg.metrics_port, cfg.log_level) == (
        "lagpilot_records",
        "insert",
        8080,
        "INFO",
    )
    assert cfg.handler_config == {}
    assert cfg.handler_spec == "log"


@pytest.mark.parametrize(
    "env, variable",
    [
        ({"LAGPILOT_BOOTSTRAP_SERVERS": ""}, "LAGPILOT_BOOTSTRAP_SERVERS"),
        ({"LAGPILOT_TOPIC": ""}, "LAGPILOT_TOPIC"),
        ({"LAGPILOT_GROUP_ID": ""}, "LAGPILOT_GROUP_ID"),
        ({"LAGPILOT_BATCH_MAX_RECORDS": "0"}, "LAGPILOT_BATCH_MAX_RECORDS"),
        ({"LAGPILOT_BATCH_MAX_RECORDS": "many"}, "LAGPILOT_BATCH_MAX_RECORDS"),
        ({"LAGPILOT_BATCH_TIMEOUT_MS": "600001"}, "LAGPILOT_BATCH_TIMEOUT_MS"),
        ({"LAGPILOT_CONCURRENCY": "65"}, "LAGPILOT_CONCURRENCY"),
        ({"LAGPILOT_HANDLER": "x:y"}, "LAGPILOT_SINK and LAGPILOT_HANDLER"),
        ({"LAGPILOT_SINK": ""}, "LAGPILOT_SINK and LAGPILOT_HANDLER"),
        ({"LAGPILOT_SINK": "kafka"}, "LAGPILOT_SINK"),
        ({"LAGPILOT_SINK": "", "LAGPILOT_HANDLER": "nocolon"}, "LAGPILOT_HANDLER"),
        ({"LAGPILOT_SINK": "postgres"}, "LAGPILOT_POSTGRES_DSN"),
        ({"LAGPILOT_POSTGRES_MODE": "merge"}, "LAGPILOT_POSTGRES_MODE"),
        ({"LAGPILOT_POSTGRES_TABLE": "x; drop table y"}, "LAGPILOT_POSTGRES_TABLE"),
        ({"LAGPILOT_FAILURE_POLICY": "ignore"}, "LAGPILOT_FAILURE_POLICY"),
        ({"LAGPILOT_DLQ_TOPIC": "orders"}, "LAGPILOT_DLQ_TOPIC"),
        ({"LAGPILOT_HANDLER_CONFIG": "{"}, "LAGPILOT_HANDLER_CONFIG"),
        ({"LAGPILOT_HANDLER_CONFIG": '{"a": 1}'}, "LAGPILOT_HANDLER_CONFIG"),
        ({"LAGPILOT_SECURITY_PROTOCOL": "TLS"}, "LAGPILOT_SECURITY_PROTOCOL"),
        ({"LAGPILOT_SECURITY_PROTOCOL": "SASL_SSL"}, "LAGPILOT_SASL_MECHANISM"),
        (
            {"LAGPILOT_SECURITY_PROTOCOL": "SASL_SSL", "LAGPILOT_SASL_MECHANISM": "PLAIN"},
            "LAGPILOT_SASL_USERNAME",
        ),
        ({"LAGPILOT_SASL_MECHANISM": "GSSAPI"}, "LAGPILOT_SASL_MECHANISM"),
        ({"LAGPILOT_SSL_CERT_PEM": "cert"}, "LAGPILOT_SSL_KEY_PEM"),
        ({"LAGPILOT_LOG_LEVEL": "LOUD"}, "LAGPILOT_LOG_LEVEL"),
        ({"LAGPILOT_METRICS_PORT": "70000"}, "LAGPILOT_METRICS_PORT"),
        ({"LAGPILOT_MAX_RETRIES": "-1"}, "LAGPILOT_MAX_RETRIES"),
    ],
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()),
)
def test_invalid_env_names_the_variable(env, variable):
    with pytest.raises(ConfigError, match=variable):
        ConsumerConfig.from_env({**BASE, **env})


def test_full_environment_parsed():
    cfg = ConsumerConfig.from_env(
        {
            **BASE,
            "LAGPILOT_SINK": "",
            "LAGPILOT_HANDLER": "pkg.mod:fn",
            "LAGPILOT_BATCH_MAX_RECORDS": "25",
            "LAGPILOT_BATCH_TIMEOUT_MS": "50",
            "LAGPILOT_HANDLER_CONFIG": '{"a": "b"}',
            "LAGPILOT_CONCURRENCY": "8",
            "LAGPILOT_FAILURE_POLICY": "pause",
            "LAGPILOT_DLQ_TOPIC": "dead",
            "LAGPILOT_POD_NAME": "pod-0",
            "LAGPILOT_LOG_LEVEL": "debug",
            "LAGPILOT_SECURITY_PROTOCOL": "sasl_ssl",
            "LAGPILOT_SASL_MECHANISM": "scram-sha-512",
            "LAGPILOT_SASL_USERNAME": "u",
            "LAGPILOT_SASL_PASSWORD": "s3cret",
        }
    )
    assert cfg.handler_spec == "pkg.mod:fn"
    assert (cfg.batch_max_records, cfg.batch_timeout_ms, cfg.concurrency) == (25, 50, 8)
    assert cfg.handler_config == {"a": "b"}
    assert (cfg.failure_policy, cfg.dlq_topic, cfg.log_level) == ("pause", "dead", "DEBUG")
    conf = cfg.consumer_conf()
    assert "group.instance.id" not in conf and conf["client.id"] == "lagpilot-pod-0"  # dynamic membership
    assert conf["enable.auto.commit"] is False and conf["enable.auto.offset.store"] is False
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512" and conf["security.protocol"] == "sasl_ssl"
    assert cfg.producer_conf()["acks"] == "all"


def test_no_static_membership_without_pod_name_either():
    assert "group.instance.id" not in ConsumerConfig.from_env(BASE).consumer_conf()


def test_secrets_never_in_repr():
    cfg = ConsumerConfig.from_env(
        {
            **BASE,
            "LAGPILOT_SINK": "postgres",
            "LAGPILOT_POSTGRES_DSN": "postgresql://u:pgsecret@h/db",
            "LAGPILOT_SECURITY_PROTOCOL": "SASL_SSL",
            "LAGPILOT_SASL_MECHANISM": "PLAIN",
            "LAGPILOT_SASL_USERNAME": "u",
            "LAGPILOT_SASL_PASSWORD": "kafkasecret",
            "LAGPILOT_SSL_KEY_PEM": "keysecret",
            "LAGPILOT_SSL_CERT_PEM": "cert",
        }
    )
    text = repr(cfg) + str(cfg)
    for secret in ("pgsecret", "kafkasecret", "keysecret"):
        assert secret not in text


def test_errors_do_not_echo_secret_values():
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_env(
            {
                **BASE,
                "LAGPILOT_SECURITY_PROTOCOL": "SASL_SSL",
                "LAGPILOT_SASL_MECHANISM": "PLAIN",
                "LAGPILOT_SASL_PASSWORD": "kafkasecret",
            }
        )
    assert "kafkasecret" not in str(info.value)
