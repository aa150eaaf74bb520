"""Pure helpers of lagpilot_dev.kafka: no broker, no Java."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev.kafka import (
    PodsListeners,
    new_cluster_id,
    parse_consumer_groups_describe,
    server_properties,
)

DESCRIBE_ACTIVE = """
GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID                                           HOST            CLIENT-ID
g1              orders          0          3334            3334            0               rdkafka-7c1e1a5c-0b44-4c4e-9a53-2b9a6e9cb8a0         /127.0.0.1      rdkafka
g1              orders          1          3310            3356            46              rdkafka-7c1e1a5c-0b44-4c4e-9a53-2b9a6e9cb8a0         /127.0.0.1      rdkafka
"""

DESCRIBE_INACTIVE = """
Consumer group 'g2' has no active members.

GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
g2              orders          2          -               3310            -               -               -               -
g2              orders          0          100             3334            3234            -               -               -
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DESCRIBE_ACTIVE, [("orders", "0", "3334", "3334", "0"), ("orders", "1", "3310", "3356", "46")]),
        (DESCRIBE_INACTIVE, [("orders", "2", "-", "3310", "-"), ("orders", "0", "100", "3334", "3234")]),
        ("", []),
        ("Error: Consumer group 'x' does not exist.\n", []),
    ],
    ids=["active-members", "no-active-members", "empty", "error-text"],
)
def test_parse_consumer_groups_describe(text: str, expected: list[tuple[str, ...]]) -> None:
    rows = parse_consumer_groups_describe(text)
    got = [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows]
    assert got == expected


def test_parse_keeps_client_id_with_spaces() -> None:
    text = (
        "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
        "g t 0 1 2 1 c-1 /127.0.0.1 my client id\n"
    )
    (row,) = parse_consumer_groups_describe(text)
    assert row["CLIENT-ID"] == "my client id"
    assert row["LAG"] == "1"


@given(st.integers(min_value=0, max_value=200))
def test_new_cluster_id_is_kafka_shaped(_: int) -> None:
    cid = new_cluster_id()
    assert len(cid) == 22
    assert not cid.startswith("-")
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_server_properties_loopback_single_node() -> None:
    text = server_properties(Path("/data/k"), 9092, 9093)
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["log.dirs"] == "/data/k"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["offsets.topic.replication.factor"] == "1"


def test_server_properties_sasl_listener_keeps_inter_broker_plaintext() -> None:
    text = server_properties(Path("/data/k"), 9092, 9093, sasl_port=9094)
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SASL_PLAINTEXT://127.0.0.1:9094"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094"
    assert props["listener.security.protocol.map"] == (
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    )
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )
    # without a SASL port the config is the PLAINTEXT-only one
    assert "SASL" not in server_properties(Path("/data/k"), 9092, 9093)


def test_sasl_credentials_are_random_persisted_and_private(tmp_path: Path) -> None:
    from lagpilot_dev.kafka import KafkaPart

    part = KafkaPart(tmp_path / "cache", tmp_path / "state")
    first = part.sasl_credentials()
    assert first["username"] == "lagpilot" and first["mechanism"] == "SCRAM-SHA-512"
    assert len(first["password"]) >= 20
    assert part.sasl_credentials() == first  # stable across calls (and restarts)
    path = part.dir / "sasl-credentials.json"
    assert path.stat().st_mode & 0o077 == 0
    other = KafkaPart(tmp_path / "cache", tmp_path / "state2").sasl_credentials()
    assert other["password"] != first["password"]
    assert first["password"] not in json.dumps(part.info())


def test_server_properties_pods_listener_adds_and_changes_nothing_else() -> None:
    base = dict(
        line.split("=", 1) for line in server_properties(Path("/data/k"), 9092, 9093, 9094).splitlines()
    )
    props = dict(
        line.split("=", 1)
        for line in server_properties(
            Path("/data/k"), 9092, 9093, 9094, pods_listener=PodsListeners("10.244.0.1", 9095)
        ).splitlines()
    )
    assert props["listeners"] == base["listeners"] + ",PODS://10.244.0.1:9095"
    assert props["advertised.listeners"] == base["advertised.listeners"] + ",PODS://10.244.0.1:9095"
    assert (
        props["listener.security.protocol.map"] == base["listener.security.protocol.map"] + ",PODS:PLAINTEXT"
    )
    assert {
        k: v for k, v in props.items() if not k.startswith(("listeners", "advertised", "listener.security"))
    } == {k: v for k, v in base.items() if not k.startswith(("listeners", "advertised", "listener.security"))}


def test_server_properties_oauth_listener_validates_tokens_and_changes_nothing_else() -> None:
    """The OAUTH listener (one writer for every SASL listener: `Listener`): OAUTHBEARER only, Kafka's
    validator with the provider's JWKS, issuer and audience; the other listeners' keys unchanged."""
    settings = {
        "jwks_url": "http://idp/jwks",
        "issuer": "http://idp/realms/r",
        "audience": "kafka",
        "token_endpoint_url": "http://idp/token",
    }
    base = dict(
        line.split("=", 1) for line in server_properties(Path("/data/k"), 9092, 9093, 9094).splitlines()
    )
    props = dict(
        line.split("=", 1)
        for line in server_properties(Path("/data/k"), 9092, 9093, 9094, oauth=(9095, settings)).splitlines()
    )
    assert props["listeners"] == base["listeners"] + ",OAUTH://127.0.0.1:9095"
    assert props["advertised.listeners"] == base["advertised.listeners"] + ",OAUTH://127.0.0.1:9095"
    assert (
        props["listener.security.protocol.map"]
        == base["listener.security.protocol.map"] + ",OAUTH:SASL_PLAINTEXT"
    )
    assert props["listener.name.oauth.sasl.enabled.mechanisms"] == "OAUTHBEARER"
    assert props["listener.name.oauth.oauthbearer.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    )
    assert props["listener.name.oauth.oauthbearer.sasl.server.callback.handler.class"].endswith(
        "OAuthBearerValidatorCallbackHandler"
    )
    assert (
        props["sasl.oauthbearer.jwks.endpoint.url"],
        props["sasl.oauthbearer.expected.issuer"],
        props["sasl.oauthbearer.expected.audience"],
    ) == ("http://idp/jwks", "http://idp/realms/r", "kafka")
    # the SCRAM listener is written by the same code and unchanged
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )
    changed = {k for k in base if props.get(k) != base[k]}
    assert changed == {"listeners", "advertised.listeners", "listener.security.protocol.map"}
