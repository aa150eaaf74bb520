"""The dev broker's listeners for pods on the real node (docs/node.md, docs/dev-stack.md "Kafka's
listeners"): the SCRAM and OAUTHBEARER listeners have counterparts on the pod-bridge gateway
(SASL_PODS, OAUTH_PODS) beside PODS (PLAINTEXT), each advertising its own gateway address, so a
client bootstrapped there stays there; the loopback listeners are unchanged. Pure: no broker."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev.kafka import (
    KafkaPart,
    PodsListeners,
    advertised_addresses,
    listener_lines,
    server_properties,
)

GW = "10.244.0.1"
SETTINGS = {
    "jwks_url": "http://10.244.0.1:8080/realms/r/certs",
    "issuer": "http://10.244.0.1:8080/realms/r",
    "audience": "kafka",
    "token_endpoint_url": "http://10.244.0.1:8080/realms/r/token",
}


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_every_client_listener_has_its_counterpart_on_the_bridge_advertising_itself() -> None:
    lines = listener_lines(
        9092,
        9093,
        sasl_port=9094,
        pods=PodsListeners(GW, 9095, sasl=9096, oauth=9097),
        oauth=(9098, SETTINGS),
    )
    assert lines["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SASL_PLAINTEXT://127.0.0.1:9094,"
        "PODS://10.244.0.1:9095,SASL_PODS://10.244.0.1:9096,OAUTH://127.0.0.1:9098,"
        "OAUTH_PODS://10.244.0.1:9097"
    )
    assert lines["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,PODS://10.244.0.1:9095,"
        "SASL_PODS://10.244.0.1:9096,OAUTH://127.0.0.1:9098,OAUTH_PODS://10.244.0.1:9097"
    )
    assert lines["listener.security.protocol.map"] == (
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,PODS:PLAINTEXT,"
        "SASL_PODS:SASL_PLAINTEXT,OAUTH:SASL_PLAINTEXT,OAUTH_PODS:SASL_PLAINTEXT"
    )


def test_the_bridge_counterparts_authenticate_as_their_loopback_listeners() -> None:
    props = _props(
        server_properties(
            Path("/data/k"),
            9092,
            9093,
            9094,
            pods_listener=PodsListeners(GW, 9095, sasl=9096, oauth=9097),
            oauth=(9098, SETTINGS),
        )
    )
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    for name in ("sasl_plaintext", "sasl_pods"):
        assert props[f"listener.name.{name}.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
        assert props[f"listener.name.{name}.scram-sha-512.sasl.jaas.config"] == scram
    for name in ("oauth", "oauth_pods"):
        assert props[f"listener.name.{name}.sasl.enabled.mechanisms"] == "OAUTHBEARER"
        assert props[f"listener.name.{name}.oauthbearer.sasl.server.callback.handler.class"].endswith(
            "OAuthBearerValidatorCallbackHandler"
        )
    # one validator configuration (the provider's JWKS, issuer, audience) for both OAUTH listeners
    assert props["sasl.oauthbearer.expected.issuer"] == SETTINGS["issuer"]
    assert props["sasl.oauthbearer.jwks.endpoint.url"] == SETTINGS["jwks_url"]
    # the broker talks to itself in PLAINTEXT on loopback whatever the clients see
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["controller.listener.names"] == "CONTROLLER"


def test_no_bridge_counterpart_without_its_loopback_listener() -> None:
    """SASL_PODS needs the SCRAM listener, OAUTH_PODS the provider's settings: a port alone adds nothing."""
    lines = listener_lines(9092, 9093, sasl_port=None, pods=PodsListeners(GW, 9095, sasl=9096, oauth=9097))
    assert (
        lines["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,PODS://10.244.0.1:9095"
    )
    assert "SASL" not in server_properties(
        Path("/d"), 9092, 9093, pods_listener=PodsListeners(GW, 9095, 9096)
    )


def test_adding_the_bridge_counterparts_changes_no_other_key() -> None:
    base = _props(
        server_properties(Path("/data/k"), 9092, 9093, 9094, PodsListeners(GW, 9095), oauth=(9098, SETTINGS))
    )
    more = _props(
        server_properties(
            Path("/data/k"), 9092, 9093, 9094, PodsListeners(GW, 9095, 9096, 9097), oauth=(9098, SETTINGS)
        )
    )
    changed = {k for k in base if more.get(k) != base[k]}
    assert changed == {"listeners", "advertised.listeners", "listener.security.protocol.map"}
    added = set(more) - set(base)
    assert added == {
        "listener.name.sasl_pods.sasl.enabled.mechanisms",
        "listener.name.sasl_pods.scram-sha-512.sasl.jaas.config",
        "listener.name.oauth_pods.sasl.enabled.mechanisms",
        "listener.name.oauth_pods.oauthbearer.sasl.jaas.config",
        "listener.name.oauth_pods.oauthbearer.sasl.server.callback.handler.class",
    }


ports = st.integers(1024, 65535)


@given(
    broker=ports,
    controller=ports,
    sasl=st.none() | ports,
    pods=st.none() | st.builds(PodsListeners, st.just(GW), ports, st.none() | ports, st.none() | ports),
    oauth=st.none() | ports,
)
def test_each_listener_advertises_where_it_listens_and_has_one_protocol(
    broker: int, controller: int, sasl: int | None, pods: PodsListeners | None, oauth: int | None
) -> None:
    lines = listener_lines(broker, controller, sasl, pods, (oauth, SETTINGS) if oauth is not None else None)
    listening = dict(x.split("://", 1) for x in lines["listeners"].split(","))
    advertised = dict(x.split("://", 1) for x in lines["advertised.listeners"].split(","))
    protocols = dict(x.split(":", 1) for x in lines["listener.security.protocol.map"].split(","))
    assert len(listening) == len(lines["listeners"].split(","))  # names unique
    assert advertised == {k: v for k, v in listening.items() if k != "CONTROLLER"}
    assert set(protocols) == set(listening)
    for name, address in listening.items():
        # a pods' listener on the gateway, every other on loopback
        assert address.startswith(GW if name.endswith("PODS") else "127.0.0.1:"), (name, address)
        assert protocols[name] == ("SASL_PLAINTEXT" if name.startswith(("SASL", "OAUTH")) else "PLAINTEXT")


def test_advertised_addresses_tell_pods_from_sasl_pods() -> None:
    """The parser reads each listener by its whole name: PODS is not the tail of SASL_PODS (a
    search for `PODS://` found SASL_PODS's address when it came first)."""
    text = (
        "listeners=SASL_PODS://10.244.0.1:9096,PODS://10.244.0.1:9095\n"
        "advertised.listeners=PLAINTEXT://127.0.0.1:9092,SASL_PODS://10.244.0.1:9096,"
        "OAUTH_PODS://10.244.0.1:9097,PODS://10.244.0.1:9095\n"
    )
    assert advertised_addresses(text) == {
        "PLAINTEXT": "127.0.0.1:9092",
        "SASL_PODS": "10.244.0.1:9096",
        "OAUTH_PODS": "10.244.0.1:9097",
        "PODS": "10.244.0.1:9095",
    }
    assert advertised_addresses("num.partitions=1\n") == {}


def test_the_part_reads_the_bridge_listeners_of_the_running_config(tmp_path: Path) -> None:
    part = KafkaPart(tmp_path / "cache", tmp_path / "state")
    assert part.pods_bootstrap_servers() is None and part.sasl_pods_bootstrap_servers() is None
    part.dir.mkdir(parents=True)
    (part.dir / "server.properties").write_text(
        server_properties(Path("/d"), 9092, 9093, 9094, PodsListeners(GW, 9095, 9096, 9097), (9098, SETTINGS))
    )
    assert part.pods_bootstrap_servers() == "10.244.0.1:9095"
    assert part.sasl_pods_bootstrap_servers() == "10.244.0.1:9096"
    assert part.oauth_pods_bootstrap_servers() == "10.244.0.1:9097"
    info = part.info()
    assert (info["sasl_pods_bootstrap_servers"], info["oauth_pods_bootstrap_servers"]) == (
        "10.244.0.1:9096",
        "10.244.0.1:9097",
    )
    # a broker started before the counterparts existed: PODS only
    (part.dir / "server.properties").write_text(
        server_properties(Path("/d"), 9092, 9093, 9094, PodsListeners(GW, 9095))
    )
    assert part.pods_bootstrap_servers() == "10.244.0.1:9095"
    assert part.sasl_pods_bootstrap_servers() is None and part.oauth_pods_bootstrap_servers() is None
