"""The consumer's configuration: the pod environment (docs/CONTRACTS.md) parsed once into a frozen object.

Parsing does no I/O. Every error names the variable at fault and never echoes a secret's value.
Secret fields are excluded from ``repr`` so that logging the config (or an exception carrying it)
cannot leak them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import redaction
from .handoff_mailbox import parse_key as parse_handoff_key

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
FAILURE_POLICIES = ("deadLetter", "pause", "exit")
SINKS = ("postgres", "log", "ledger")
POSTGRES_MODES = ("insert", "upsert")
# the names of the pod's env entries that come from a Secret (rendered by the operator: docs/CONTRACTS.md)
SECRET_ENV = "LAGPILOT_SECRET_ENV"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(ValueError):
    """The environment is invalid; the message names the variable (never its secret value)."""


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise naming ``name`` when ``value`` is not one of ``allowed`` (not for secret values)."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass(frozen=True)
class ConsumerConfig:
    """Everything `lagpilot consume` needs, typed; see docs/consumer.md for each variable."""

    bootstrap_servers: str
    topic: str
    group_id: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    # SASL OAUTHBEARER: OIDC client credentials (the client fetches and refreshes its own token)
    oauth_token_endpoint_url: str | None = None
    oauth_scope: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = field(default=None, repr=False)
    ssl_ca_pem: str | None = field(default=None, repr=False)
    ssl_cert_pem: str | None = field(default=None, repr=False)
    ssl_key_pem: str | None = field(default=None, repr=False)
    batch_max_records: int = 500
    batch_timeout_ms: int = 1000
    sink: str | None = None
    handler: str | None = None
    handler_config: Mapping[str, str] = field(default_factory=dict)
    concurrency: int = 1
    postgres_dsn: str | None = field(default=None, repr=False)
    postgres_table: str = "lagpilot_records"
    postgres_mode: str = "insert"
    failure_policy: str = "deadLetter"
    max_retries: int = 3
    retry_backoff_ms: int = 200
    dlq_topic: str = ""
    metrics_port: int = 8080
    pod_name: str | None = None
    log_level: str = "INFO"
    # the uid of the BatchConsumerGroup this pod belongs to: the drain hand-off acts only on mailbox
    # entries that carry it (handoff_mailbox); "" (not run by the operator): only uid-less entries
    owner_uid: str = ""
    # the CR's hand-off key (LAGPILOT_HANDOFF_KEY, from the operator's Secret): with an owner uid the
    # hand-off acts only on entries that carry its MAC, and signs its acks with it (M8); never in a repr
    handoff_key: bytes = field(default=b"", repr=False)
    # Not rendered by the operator (runtime tuning with safe defaults; documented in docs/consumer.md)
    session_timeout_ms: int = 30000
    max_poll_interval_ms: int = 600000
    shutdown_grace_ms: int = 25000

    @property
    def handler_spec(self) -> str:
        """What to load: a built-in sink name or ``module:function``."""
        return self.sink or self.handler or ""

    def validate(self) -> None:
        """Cross-field rules; raises ConfigError naming the variable (the first rule broken, in the
        order: required, security, handler, Postgres sink, failure policy, runtime tuning)."""
        self._validate_required()
        self._validate_security()
        self._validate_handler()
        self._validate_postgres()
        self._validate_failure_policy()
        _one_of("LAGPILOT_LOG_LEVEL", self.log_level, LOG_LEVELS)
        if self.session_timeout_ms > self.max_poll_interval_ms:
            raise ConfigError("LAGPILOT_SESSION_TIMEOUT_MS must not exceed LAGPILOT_MAX_POLL_INTERVAL_MS")

    def _validate_required(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("LAGPILOT_BOOTSTRAP_SERVERS is required")
        if not self.topic.strip():
            raise ConfigError("LAGPILOT_TOPIC is required")
        if not self.group_id.strip():
            raise ConfigError("LAGPILOT_GROUP_ID is required")

    def _validate_security(self) -> None:
        _one_of("LAGPILOT_SECURITY_PROTOCOL", self.security_protocol, SECURITY_PROTOCOLS)
        if self.security_protocol.startswith("SASL_"):
            self._validate_sasl_credentials()
        if self.sasl_mechanism is not None:
            _one_of("LAGPILOT_SASL_MECHANISM", self.sasl_mechanism, SASL_MECHANISMS)
        if bool(self.ssl_cert_pem) != bool(self.ssl_key_pem):
            raise ConfigError("LAGPILOT_SSL_CERT_PEM and LAGPILOT_SSL_KEY_PEM must be set together")

    def _validate_sasl_credentials(self) -> None:
        """A SASL protocol needs a mechanism and its credentials (OIDC client ones for OAUTHBEARER)."""
        if self.sasl_mechanism is None:
            raise ConfigError(
                f"LAGPILOT_SASL_MECHANISM is required with LAGPILOT_SECURITY_PROTOCOL={self.security_protocol}"
            )
        if self.sasl_mechanism == "OAUTHBEARER":
            if not self.oauth_token_endpoint_url:
                raise ConfigError(
                    "LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL is required with LAGPILOT_SASL_MECHANISM=OAUTHBEARER"
                )
            if not self.oauth_client_id or not self.oauth_client_secret:
                raise ConfigError(
                    "LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID and LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET "
                    "are required with LAGPILOT_SASL_MECHANISM=OAUTHBEARER"
                )
        elif not self.sasl_username or self.sasl_password is None:
            raise ConfigError("LAGPILOT_SASL_USERNAME and LAGPILOT_SASL_PASSWORD are required with SASL")

    def _validate_handler(self) -> None:
        if (self.sink is None) == (self.handler is None):
            raise ConfigError("exactly one of LAGPILOT_SINK and LAGPILOT_HANDLER must be set")
        if self.sink is not None:
            _one_of("LAGPILOT_SINK", self.sink, SINKS)
        if self.handler is not None:
            module, sep, func = self.handler.partition(":")
            if not sep or not module.strip() or not func.strip():
                raise ConfigError(f"LAGPILOT_HANDLER must be 'module:function', got {self.handler!r}")

    def _validate_postgres(self) -> None:
        if self.sink == "postgres" and not self.postgres_dsn:
            raise ConfigError("LAGPILOT_POSTGRES_DSN is required with LAGPILOT_SINK=postgres")
        _one_of("LAGPILOT_POSTGRES_MODE", self.postgres_mode, POSTGRES_MODES)
        if not _is_identifier(self.postgres_table):
            raise ConfigError(
                f"LAGPILOT_POSTGRES_TABLE must be a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, optionally schema.table), got {self.postgres_table!r}"
            )

    def _validate_failure_policy(self) -> None:
        _one_of("LAGPILOT_FAILURE_POLICY", self.failure_policy, FAILURE_POLICIES)
        if self.failure_policy == "deadLetter" and self.dlq_topic == self.topic:
            raise ConfigError("LAGPILOT_DLQ_TOPIC must differ from LAGPILOT_TOPIC")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsumerConfig:
        """Parse the pod environment (os.environ by default); raises ConfigError."""
        e = os.environ if env is None else env

        def opt(name: str) -> str | None:
            v = e.get(name)
            return v if v not in (None, "") else None

        # the secret values this process was given, for every text it emits (redaction.py): the
        # runtime's own and those the operator lists in LAGPILOT_SECRET_ENV (template.env secretKeyRef)
        listed = [n.strip() for n in (e.get(SECRET_ENV) or "").split(",") if n.strip()]
        redaction.install(
            [
                opt("LAGPILOT_SASL_PASSWORD"),
                opt("LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET"),
                opt("LAGPILOT_SSL_KEY_PEM"),
                opt("LAGPILOT_POSTGRES_DSN"),
                opt("LAGPILOT_HANDOFF_KEY"),
                *(opt(n) for n in listed),
            ]
        )
        handoff_key = b""
        if opt("LAGPILOT_HANDOFF_KEY"):
            try:
                handoff_key = parse_handoff_key(opt("LAGPILOT_HANDOFF_KEY"))
            except ValueError:
                raise ConfigError(
                    "LAGPILOT_HANDOFF_KEY must be 64 hex digits (the operator's <cr>-handoff-key Secret)"
                ) from None
        topic = (opt("LAGPILOT_TOPIC") or "").strip()
        cfg = cls(
            bootstrap_servers=(opt("LAGPILOT_BOOTSTRAP_SERVERS") or "").strip(),
            topic=topic,
            group_id=(opt("LAGPILOT_GROUP_ID") or "").strip(),
            security_protocol=(opt("LAGPILOT_SECURITY_PROTOCOL") or "PLAINTEXT").strip().upper(),
            sasl_mechanism=_upper(opt("LAGPILOT_SASL_MECHANISM")),
            sasl_username=opt("LAGPILOT_SASL_USERNAME"),
            sasl_password=opt("LAGPILOT_SASL_PASSWORD"),
            oauth_token_endpoint_url=_strip(opt("LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL")),
            oauth_scope=_strip(opt("LAGPILOT_SASL_OAUTHBEARER_SCOPE")),
            oauth_client_id=_strip(opt("LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID")),
            oauth_client_secret=opt("LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET"),
            ssl_ca_pem=opt("LAGPILOT_SSL_CA_PEM"),
            ssl_cert_pem=opt("LAGPILOT_SSL_CERT_PEM"),
            ssl_key_pem=opt("LAGPILOT_SSL_KEY_PEM"),
            batch_max_records=_int(e, "LAGPILOT_BATCH_MAX_RECORDS", 500, 1, 100000),
            batch_timeout_ms=_int(e, "LAGPILOT_BATCH_TIMEOUT_MS", 1000, 1, 600000),
            sink=_strip(opt("LAGPILOT_SINK")),
            handler=_strip(opt("LAGPILOT_HANDLER")),
            handler_config=_handler_config(opt("LAGPILOT_HANDLER_CONFIG")),
            concurrency=_int(e, "LAGPILOT_CONCURRENCY", 1, 1, 64),
            postgres_dsn=opt("LAGPILOT_POSTGRES_DSN"),
            postgres_table=(opt("LAGPILOT_POSTGRES_TABLE") or "lagpilot_records").strip(),
            postgres_mode=(opt("LAGPILOT_POSTGRES_MODE") or "insert").strip(),
            failure_policy=(opt("LAGPILOT_FAILURE_POLICY") or "deadLetter").strip(),
            max_retries=_int(e, "LAGPILOT_MAX_RETRIES", 3, 0, 100),
            retry_backoff_ms=_int(e, "LAGPILOT_RETRY_BACKOFF_MS", 200, 0, 600000),
            dlq_topic=(opt("LAGPILOT_DLQ_TOPIC") or f"{topic}.dlq").strip(),
            metrics_port=_int(e, "LAGPILOT_METRICS_PORT", 8080, 0, 65535),
            pod_name=_strip(opt("LAGPILOT_POD_NAME")),
            owner_uid=(opt("LAGPILOT_OWNER_UID") or "").strip(),
            handoff_key=handoff_key,
            log_level=(opt("LAGPILOT_LOG_LEVEL") or "INFO").strip().upper(),
            session_timeout_ms=_int(e, "LAGPILOT_SESSION_TIMEOUT_MS", 30000, 1000, 3600000),
            max_poll_interval_ms=_int(e, "LAGPILOT_MAX_POLL_INTERVAL_MS", 600000, 1000, 86400000),
            shutdown_grace_ms=_int(e, "LAGPILOT_SHUTDOWN_GRACE_MS", 25000, 0, 3600000),
        )
        cfg.validate()
        return cfg

    def kafka_security(self) -> dict[str, Any]:
        """librdkafka settings for security, shared by the consumer, the DLQ producer and admin calls."""
        conf: dict[str, Any] = {"security.protocol": self.security_protocol.lower()}
        if self.security_protocol.startswith("SASL_") and self.sasl_mechanism == "OAUTHBEARER":
            conf["sasl.mechanism"] = "OAUTHBEARER"
            conf["sasl.oauthbearer.method"] = "oidc"
            conf["sasl.oauthbearer.token.endpoint.url"] = self.oauth_token_endpoint_url
            conf["sasl.oauthbearer.client.id"] = self.oauth_client_id
            conf["sasl.oauthbearer.client.secret"] = self.oauth_client_secret
            if self.oauth_scope:
                conf["sasl.oauthbearer.scope"] = self.oauth_scope
        elif self.security_protocol.startswith("SASL_"):
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.sasl_password
        if self.security_protocol in ("SSL", "SASL_SSL"):
            if self.ssl_ca_pem:
                conf["ssl.ca.pem"] = self.ssl_ca_pem
            if self.ssl_cert_pem:
                conf["ssl.certificate.pem"] = self.ssl_cert_pem
                conf["ssl.key.pem"] = self.ssl_key_pem
        return conf

    def consumer_conf(self) -> dict[str, Any]:
        """The librdkafka consumer configuration (contains secrets: never log it).

        Why these values:
        - enable.auto.commit / enable.auto.offset.store false: offsets move only through our
          synchronous commit after the handler succeeded.
        - cooperative-sticky: a rebalance revokes only the partitions that move, so the others keep
          flowing and on_revoke only has to settle the moving ones.
        - no group.instance.id (dynamic membership, though the pod name is known): a static
          member that closes does not leave the group, so every scale-down, and every new pod
          stopped before it got partitions, held the group's next rebalance until its
          session.timeout.ms expired, and a member committing meanwhile blocked in its
          synchronous commit for that long and then got ILLEGAL_GENERATION (measured on the
          real broker: 28.6 s static vs 0.1 s dynamic; tests/real/test_membership.py fails with it). An
          autoscaled group scales down routinely; with cooperative-sticky a restarted pod's
          rebalance is incremental and cheap.
        - max.poll.interval.ms: the loop calls consume() only between batches, so this bounds one
          batch's wall time including retries and failure isolation. 10 minutes by default: a
          batch of up to 100000 records through a slow sink with retries stays well inside it,
          while a truly hung handler is caught earlier by the liveness probe, which fails once
          the loop has made no progress for the same interval (see metrics.Health).
        """
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": self.session_timeout_ms,
            "max.poll.interval.ms": self.max_poll_interval_ms,
            "enable.partition.eof": False,
            # batches of up to batch_max_records small records should arrive in few fetches
            "fetch.min.bytes": 1,
            "queued.min.messages": max(100000, 2 * self.batch_max_records),
            "client.id": f"lagpilot-{self.pod_name or 'consumer'}",
        }
        conf.update(self.kafka_security())
        return conf

    def producer_conf(self) -> dict[str, Any]:
        """The DLQ producer: idempotent, acks=all, so a dead-lettered record is durable before we commit."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "client.id": f"lagpilot-dlq-{self.pod_name or 'consumer'}",
        }
        conf.update(self.kafka_security())
        return conf


def _strip(v: str | None) -> str | None:
    return v.strip() if v is not None else None


def _upper(v: str | None) -> str | None:
    return v.strip().upper() if v is not None else None


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _handler_config(raw: str | None) -> dict[str, str]:
    if raw is None:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"LAGPILOT_HANDLER_CONFIG must be a JSON object: {exc.msg} at position {exc.pos}"
        ) from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
    ):
        raise ConfigError("LAGPILOT_HANDLER_CONFIG must be a JSON object of string to string")
    return parsed


def _is_identifier(name: str) -> bool:
    parts = name.split(".")
    return 1 <= len(parts) <= 2 and all(
        p and (p[0].isalpha() or p[0] == "_") and all(c.isalnum() or c == "_" for c in p) and p.isascii()
        for p in parts
    )
