"""The operator's librdkafka configuration for one CR's cluster, from spec.kafka and its Secret, and
the factories of the clients made from it (the admin client, the peek consumer, the offsets readers)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from lagpilot.observe.kafka_common import SecretError, consumer_base
from lagpilot.spec import KafkaSpec

# the Secret's keys for SASL OAUTHBEARER and the librdkafka settings they fill
OAUTH_SECRET_KEYS = (
    ("clientId", "sasl.oauthbearer.client.id"),
    ("clientSecret", "sasl.oauthbearer.client.secret"),
)


def _decode(data: Mapping[str, str], key: str, where: str) -> str | None:
    raw = data.get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise SecretError(
            "SecretMalformed", f"{where}: key {key!r} is not valid base64-encoded UTF-8"
        ) from None


def admin_config(
    kafka: KafkaSpec, secret_data: Mapping[str, str] | None, secret_name: str | None = None
) -> dict[str, str]:
    """librdkafka configuration for the operator's own admin connection.

    `secret_data` is the Secret's `data` (base64 values, as the API returns them). Raises
    SecretError naming the Secret and the missing key — never a value.
    """
    conf: dict[str, str] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "security.protocol": kafka.security_protocol,
    }
    if kafka.sasl_mechanism and kafka.uses_sasl:
        conf["sasl.mechanism"] = kafka.sasl_mechanism
    if not kafka.secret_name:
        return conf
    where = f"Secret {secret_name or kafka.secret_name!r}"
    if secret_data is None:
        raise SecretError("SecretNotFound", f"{where} (spec.kafka.secretRef) does not exist")
    if kafka.uses_oauthbearer:
        # OIDC client credentials: librdkafka fetches (and refreshes) the token itself
        conf["sasl.oauthbearer.method"] = "oidc"
        conf["sasl.oauthbearer.token.endpoint.url"] = kafka.oauth_token_endpoint_url or ""
        if kafka.oauth_scope:
            conf["sasl.oauthbearer.scope"] = kafka.oauth_scope
        for key, opt in OAUTH_SECRET_KEYS:
            value = _decode(secret_data, key, where)
            if not value:
                raise SecretError(
                    "SecretMalformed", f"{where} has no non-empty key {key!r} (needed for SASL OAUTHBEARER)"
                )
            conf[opt] = value
    elif kafka.uses_sasl:
        for key, opt in (("username", "sasl.username"), ("password", "sasl.password")):
            value = _decode(secret_data, key, where)
            if not value:
                raise SecretError(
                    "SecretMalformed",
                    f"{where} has no non-empty key {key!r} (needed for {kafka.security_protocol})",
                )
            conf[opt] = value
    if kafka.uses_ssl:
        for key, opt in (
            ("ca.crt", "ssl.ca.pem"),
            ("tls.crt", "ssl.certificate.pem"),
            ("tls.key", "ssl.key.pem"),
        ):
            value = _decode(secret_data, key, where)
            if value:
                conf[opt] = value
        if ("ssl.certificate.pem" in conf) != ("ssl.key.pem" in conf):
            raise SecretError("SecretMalformed", f"{where} must hold both tls.crt and tls.key, or neither")
    return conf


def config_key(conf: Mapping[str, str]) -> str:
    """A stable pool key for a configuration: a hash, so secrets never sit in a visible key."""
    return hashlib.sha256(json.dumps(sorted(conf.items())).encode()).hexdigest()[:16]


def _default_factory(conf: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf)


def _peek_consumer_factory(conf: Mapping[str, Any]) -> Callable[[], Any]:
    """A consumer that only reads one record per lagging partition: it never joins or commits to
    any group (manual assign; the group.id is required by librdkafka but never used on the broker
    side for assign + consume without commits)."""

    def make() -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            {
                **consumer_base(conf),
                "client.id": "lagpilot-operator-peek",
                "group.id": "lagpilot-operator-peek",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "isolation.level": "read_committed",
                # one record per partition is all we want: keep fetches small (librdkafka requires
                # fetch.max.bytes >= message.max.bytes; at least one record is always returned)
                "message.max.bytes": 65536,
                "fetch.max.bytes": 65536,
                "max.partition.fetch.bytes": 4096,
                "fetch.wait.max.ms": 100,
                "queued.max.messages.kbytes": 1024,
            }
        )

    return make


def _group_reader_factory(conf: Mapping[str, Any]) -> Callable[[str], Any]:
    """A Consumer with the observed group's id, for `committed()` only: it never subscribes (so it
    never joins the group or triggers a rebalance) and never commits."""

    def make(group_id: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            {
                **consumer_base(conf),
                "client.id": "lagpilot-operator-offsets",
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )

    return make
