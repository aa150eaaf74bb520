"""The BatchConsumerGroup resource, declared once.

Every field of `spec` with its name (the CRD's camelCase as the alias), type, default, bounds,
pattern and description, and the CRD's CEL cross-field rules, attached to the object they check.
From these classes come:

- the CRD's OpenAPI schema (`lagpilot.model.crd`, written to crds/ and the chart by
  `python -m lagpilot.model.generate`),
- the field tables of docs/crd-reference.md (the `Doc` of each field: its bounds and what the
  operator does with it, in the reader's words),
- the operator's parsed spec (`lagpilot.model.validate.parse`: pydantic checks types, bounds and
  patterns, then the CEL rules are evaluated on the defaulted object, as the API server does).

The status part of the schema comes from the status's own model (`lagpilot.model.status`).
Field descriptions are what `kubectl explain` prints; keep them in the reader's words, not the code's.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema

from lagpilot.model.status import status_openapi_schema


@dataclasses.dataclass(frozen=True)
class Rule:
    """One `x-kubernetes-validations` entry: a CEL expression over `self` (`oldSelf` in transition
    rules), the message the API server returns, and the field it names (relative to the object)."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    @property
    def is_transition(self) -> bool:
        """A rule on `oldSelf` compares with the stored object: only the API server can check it."""
        return re.search(r"\boldSelf\b", self.rule) is not None

    def schema(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclasses.dataclass(frozen=True)
class Doc:
    """A field's row in docs/crd-reference.md: its bounds and what the operator does with it, in the
    reader's words; `type` and `default` override the cells derived from the schema."""

    bounds: str
    use: str
    type: str | None = None
    default: str | None = None


def _class_schema(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """A model's own schema: its CEL rules; no docstring as description (the field's describes it)."""
    schema.pop("description", None)
    rules: tuple[Rule, ...] = getattr(cls, "cel", ())
    if rules:
        schema["x-kubernetes-validations"] = [r.schema() for r in rules]
    description: str | None = getattr(cls, "crd_description", None)
    if description:
        schema["description"] = description


class CrdModel(BaseModel):
    """Base of the spec's objects: strict types (no "500" for 500, no true for 1), frozen, fields
    read by their CRD names; unknown fields ignored (the API server prunes or rejects them)."""

    model_config = ConfigDict(
        strict=True, frozen=True, populate_by_name=True, extra="ignore", json_schema_extra=_class_schema
    )
    cel: ClassVar[tuple[Rule, ...]] = ()


def spec_field(
    *,
    alias: str | None = None,
    description: str,
    rules: tuple[Rule, ...] = (),
    default_factory: Any = None,
    json_schema_extra: dict[str, Any] | None = None,
    **constraints: Any,
) -> Any:
    """`pydantic.Field` with the CRD's extensions: CEL rules on a scalar field, `default: {}` for a
    section the API server creates when absent."""
    extra = dict(json_schema_extra or {})
    if rules:
        extra["x-kubernetes-validations"] = [r.schema() for r in rules]
    if default_factory is not None:
        extra["default"] = {}
        constraints["default_factory"] = default_factory
    return Field(alias=alias, description=description, json_schema_extra=extra or None, **constraints)


# Patterns (RE2 in the API server; pydantic's Rust regex has the same `$`: end of text)
BOOTSTRAP_SERVERS = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])(,(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))*$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"
# an http(s) URL with a host and no userinfo (credentials belong in the Secret) or whitespace
TOKEN_ENDPOINT_URL = r"^https?://[A-Za-z0-9\[][^\s/@?#]*(/[^\s@#]*)?$"
# RFC 6749 §3.3: space-separated scope tokens of printable ASCII without '"' and '\\'
OAUTH_SCOPE = r"^[\x21\x23-\x5B\x5D-\x7E]+( [\x21\x23-\x5B\x5D-\x7E]+)*$"
GROUP_ID = r"^[A-Za-z0-9._:-]+$"
HANDLER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"
TABLE = r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$"
IMAGE = r"^((localhost(:[0-9]+)?|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)+(:[0-9]+)?|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?:[0-9]+|\[[0-9A-Fa-f:]+\](:[0-9]+)?)/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
QUANTITY = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
FIELD_PATH = r"^(metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs)|metadata\.(labels|annotations)\['(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?'\])$"
RESOURCE_FIELD = r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+)$"
QUANTITY_MAX_CHARS = 64


def _quantity(value: object) -> int | str:
    """A resource quantity as the CRD declares it: a non-negative integer, or a string of at most 64
    characters matching QUANTITY."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("must be an integer or a quantity string such as 250m, 1, 512Mi")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("should be greater than or equal to 0")
        return value
    if len(value) > QUANTITY_MAX_CHARS or re.fullmatch(QUANTITY, value) is None:
        raise ValueError("must be a non-negative quantity such as 250m, 1, 512Mi")
    return value


def _int_or_string(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("must be an integer or a string")
    return value


Quantity = Annotated[
    int | str,
    PlainValidator(_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY,
            "maxLength": QUANTITY_MAX_CHARS,
            "minimum": 0,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
IntOrString = Annotated[
    int | str,
    PlainValidator(_int_or_string),
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}),
]
INT32 = {"format": "int32"}
INT64 = {"format": "int64"}


class SecretRef(CrdModel):
    name: Annotated[
        str,
        spec_field(
            description="Name of the Secret (same namespace as the BatchConsumerGroup).",
            min_length=1,
            max_length=253,
            pattern=DNS_SUBDOMAIN,
        ),
        Doc(
            bounds="DNS subdomain, ≤ 253",
            use=(
                "Keys read: `username`, `password` (SASL PLAIN/SCRAM), `clientId`, `clientSecret` "
                "(SASL OAUTHBEARER), `ca.crt` (TLS trust), `tls.crt` + "
                "`tls.key` (mutual TLS). Each reaches a pod only as a `secretKeyRef` env entry "
                "(`LAGPILOT_SASL_USERNAME`, `LAGPILOT_SASL_PASSWORD`, "
                "`LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID`, `LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET`, "
                "`LAGPILOT_SSL_CA_PEM`, "
                "`LAGPILOT_SSL_CERT_PEM`, `LAGPILOT_SSL_KEY_PEM`); the operator reads the Secret "
                "itself only for its own admin client and never logs it. A missing Secret or key "
                "sets `Degraded`."
            ),
        ),
    ]


class OAuthBearer(CrdModel):
    token_endpoint_url: Annotated[
        str,
        spec_field(
            alias="tokenEndpointUrl",
            description=(
                "The OIDC provider's token endpoint (OAuth 2.0 client-credentials grant), e.g. "
                '"https://idp.example.com/realms/kafka/protocol/openid-connect/token". No '
                "credentials in the URL: the client id and secret come from the Secret (keys "
                "clientId, clientSecret)."
            ),
            min_length=10,
            max_length=2048,
            pattern=TOKEN_ENDPOINT_URL,
        ),
        Doc(
            bounds="`http(s)://host[:port][/path]`, no userinfo, ≤ 2048 chars",
            use=(
                "`sasl.oauthbearer.token.endpoint.url` of the admin client, the consumers "
                "(`LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL`) and the drain's Kafka client."
            ),
        ),
    ]
    scope: Annotated[
        str | None,
        spec_field(
            description="Space-separated OAuth scopes to request with the token (optional).",
            min_length=1,
            max_length=1024,
            pattern=OAUTH_SCOPE,
        ),
        Doc(
            bounds="RFC 6749 scope tokens separated by one space, ≤ 1024 chars",
            use="`sasl.oauthbearer.scope` (`LAGPILOT_SASL_OAUTHBEARER_SCOPE`).",
        ),
    ] = None


class Kafka(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="!has(self.saslMechanism) || self.saslMechanism != 'OAUTHBEARER' || has(self.oauthbearer)",
            message=(
                "kafka.oauthbearer (tokenEndpointUrl) is required when kafka.saslMechanism is OAUTHBEARER."
            ),
            field_path=".oauthbearer",
            reason="FieldValueRequired",
        ),
        Rule(
            rule="!has(self.oauthbearer) || (has(self.saslMechanism) && self.saslMechanism == 'OAUTHBEARER')",
            message="kafka.oauthbearer is only allowed when kafka.saslMechanism is OAUTHBEARER.",
            field_path=".oauthbearer",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule=(
                "!has(self.securityProtocol) || !self.securityProtocol.startsWith('SASL_') || "
                "has(self.saslMechanism)"
            ),
            message=(
                "kafka.saslMechanism is required when kafka.securityProtocol is SASL_PLAINTEXT or SASL_SSL."
            ),
            field_path=".saslMechanism",
            reason="FieldValueRequired",
        ),
        Rule(
            rule=(
                "!has(self.saslMechanism) || (has(self.securityProtocol) && "
                "self.securityProtocol.startsWith('SASL_'))"
            ),
            message=(
                "kafka.saslMechanism is only allowed when kafka.securityProtocol is SASL_PLAINTEXT or"
                " SASL_SSL."
            ),
            field_path=".saslMechanism",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule=(
                "!has(self.securityProtocol) || self.securityProtocol == 'PLAINTEXT' || has(self.secretRef)"
            ),
            message=(
                "kafka.secretRef is required when kafka.securityProtocol is SSL, SASL_PLAINTEXT or SASL_SSL."
            ),
            field_path=".secretRef",
            reason="FieldValueRequired",
        ),
        Rule(
            rule=(
                "!has(self.secretRef) || (has(self.securityProtocol) && self.securityProtocol != 'PLAINTEXT')"
            ),
            message=(
                "kafka.secretRef is only allowed when kafka.securityProtocol is SSL, SASL_PLAINTEXT "
                "or SASL_SSL: PLAINTEXT never uses credentials."
            ),
            field_path=".secretRef",
            reason="FieldValueForbidden",
        ),
    )

    bootstrap_servers: Annotated[
        str,
        spec_field(
            alias="bootstrapServers",
            description=(
                "Comma-separated host:port list of brokers to bootstrap from, without spaces, e.g. "
                '"kafka-0.kafka:9092,kafka-1.kafka:9092". IPv6 hosts in brackets.'
            ),
            min_length=3,
            max_length=2048,
            pattern=BOOTSTRAP_SERVERS,
        ),
        Doc(
            bounds="`host:port[,host:port…]`, ports 1–65535, no empty host labels, ≤ 2048 chars",
            use=(
                "Bootstrap list for its own AdminClient (lag observation; one admin connection "
                "per distinct cluster, shared by all CRs) and `LAGPILOT_BOOTSTRAP_SERVERS` of the"
                " consumer pods and the drain job."
            ),
        ),
    ]
    security_protocol: Annotated[
        Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        spec_field(
            alias="securityProtocol",
            description=(
                "Kafka security.protocol. SSL needs secretRef (keys ca.crt and optionally "
                "tls.crt/tls.key); SASL_PLAINTEXT and SASL_SSL need saslMechanism and secretRef (keys"
                " username, password, and ca.crt for SASL_SSL). Default PLAINTEXT."
            ),
        ),
        Doc(
            bounds="`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`",
            use=(
                "Kafka `security.protocol` for the admin client, the consumers "
                "(`LAGPILOT_SECURITY_PROTOCOL`) and the drain's `kafka.*` options."
            ),
        ),
    ] = "PLAINTEXT"
    sasl_mechanism: Annotated[
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None,
        spec_field(
            alias="saslMechanism",
            description=(
                "SASL mechanism; required with SASL_PLAINTEXT or SASL_SSL, forbidden otherwise. "
                "OAUTHBEARER (OIDC client credentials) also needs oauthbearer.tokenEndpointUrl and "
                "the Secret keys clientId and clientSecret instead of username and password."
            ),
        ),
        Doc(
            bounds=(
                "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`; required with `SASL_*`, "
                "forbidden otherwise"
            ),
            use=(
                "`sasl.mechanism` (`LAGPILOT_SASL_MECHANISM`). `OAUTHBEARER`: OIDC client "
                'credentials (`sasl.oauthbearer.method=oidc`), docs/operator.md "Kafka '
                'authentication".'
            ),
        ),
    ] = None
    oauthbearer: Annotated[
        OAuthBearer | None,
        spec_field(
            description=(
                "OIDC client-credentials settings; required with saslMechanism OAUTHBEARER, "
                "forbidden otherwise."
            ),
        ),
        Doc(
            bounds="required with `saslMechanism: OAUTHBEARER`, forbidden otherwise",
            use="Where and how the clients fetch their tokens.",
        ),
    ] = None
    session_timeout_ms: Annotated[
        int,
        spec_field(
            alias="sessionTimeoutMs",
            description=(
                "The consumers' session.timeout.ms: how long the broker waits for a consumer that "
                "stopped heartbeating (killed, node lost) before its partitions move to the rest of "
                "the group. Shorter recovers a crashed pod's partitions sooner; too short lets a long"
                " GC pause or network blip cost a rebalance. A pod that stops normally leaves at once"
                " and is not affected. Default 30000 (6000 to 300000; the broker's "
                "group.min/max.session.timeout.ms must allow it)."
            ),
            ge=6000,
            le=300000,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="6000–300000 (the broker's `group.min/max.session.timeout.ms` must allow it)",
            use=(
                "`session.timeout.ms` of the consumers (`LAGPILOT_SESSION_TIMEOUT_MS`): how long "
                "a killed pod (no heartbeat) keeps its partitions before the group rebalances "
                "them. A pod that stops normally leaves the group at once. Shorter recovers a "
                "crash sooner; too short turns a GC pause into a rebalance. Consumers use dynamic"
                ' membership (docs/consumer.md, "Why not static membership").'
            ),
        ),
    ] = 30000
    secret_ref: Annotated[
        SecretRef | None,
        spec_field(
            alias="secretRef",
            description=(
                "Secret in the same namespace holding the credentials. Keys read (each optional "
                "unless the protocol needs it): username, password (PLAIN, SCRAM), clientId, "
                "clientSecret (OAUTHBEARER), ca.crt, tls.crt, tls.key. "
                "Required with SSL, SASL_PLAINTEXT and SASL_SSL."
            ),
        ),
        Doc(
            bounds="required with `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`; forbidden with `PLAINTEXT`",
            use="The Secret (same namespace) with the credentials.",
        ),
    ] = None


class Batch(CrdModel):
    max_records: Annotated[
        int,
        spec_field(
            alias="maxRecords",
            description="Maximum records in one batch (one handler call). Default 500 (1 to 100000).",
            ge=1,
            le=100000,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 100000",
            use=(
                "`LAGPILOT_BATCH_MAX_RECORDS`: a batch closes at this many records. The drain "
                "calls the handler with batches of the same size."
            ),
        ),
    ] = 500
    timeout_ms: Annotated[
        int,
        spec_field(
            alias="timeoutMs",
            description=(
                "Longest time in milliseconds a batch waits to fill before it is processed anyway. "
                "Must be shorter than catchUpSLASeconds. Default 1000 (1 to 600000)."
            ),
            ge=1,
            le=600000,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 600000, and `< catchUpSLASeconds × 1000`",
            use=(
                "`LAGPILOT_BATCH_TIMEOUT_MS`: a batch closes after this long even if not full. "
                "Offsets are committed after the handler returns."
            ),
        ),
    ] = 1000


class DsnSecretRef(CrdModel):
    name: Annotated[
        str,
        spec_field(
            description="Name of the Secret (same namespace as the BatchConsumerGroup).",
            min_length=1,
            max_length=253,
            pattern=DNS_SUBDOMAIN,
        ),
        Doc(bounds="DNS subdomain", use="Secret (same namespace) holding the DSN."),
    ]
    key: Annotated[
        str,
        spec_field(
            description=(
                "Key in the Secret whose value is the DSN: letters, digits, '-', '_' and '.', not \".\""
                ' and not starting with "..". Default dsn.'
            ),
            min_length=1,
            max_length=253,
            pattern=CONFIG_KEY,
            rules=(
                Rule(
                    rule="self != '.' && !self.startsWith('..')",
                    message='a Secret key must not be "." or start with "..".',
                ),
            ),
        ),
        Doc(
            bounds="Secret key: `[-._a-zA-Z0-9]+`, ≤ 253, not `.`, not starting with `..`",
            use=("Key of the DSN in that Secret; passed as `LAGPILOT_POSTGRES_DSN` by `secretKeyRef`."),
        ),
    ] = "dsn"


class Postgres(CrdModel):
    dsn_secret_ref: Annotated[
        DsnSecretRef,
        spec_field(
            alias="dsnSecretRef",
            description=(
                "Secret key holding the libpq connection string (DSN or URI) of the database. Read by"
                " the pod through secretKeyRef only."
            ),
        ),
        Doc(bounds="—", use="Where the connection string is."),
    ]
    table: Annotated[
        str,
        spec_field(
            description=(
                'Target table, optionally schema-qualified ("schema.table"); created by the sink if '
                "missing. Default lagpilot_records."
            ),
            max_length=127,
            pattern=TABLE,
        ),
        Doc(
            bounds="identifier or `schema.identifier`, each ≤ 63",
            use="`LAGPILOT_POSTGRES_TABLE`; created by the sink if missing.",
        ),
    ] = "lagpilot_records"
    mode: Annotated[
        Literal["insert", "upsert"],
        spec_field(
            description=(
                "insert keeps one row per (topic, partition, offset); upsert keeps one row per key "
                "holding the highest offset seen, which makes the drain's out-of-order hand-off safe "
                "for keyed state. Default insert."
            ),
        ),
        Doc(
            bounds="`insert`, `upsert`",
            use=(
                "`LAGPILOT_POSTGRES_MODE`: `insert` = one row per (topic, partition, offset), "
                "primary key makes replays no-ops; `upsert` = one row per record key holding the "
                "newest record (offset order within a partition, else the record timestamp; "
                "docs/consumer.md), which keeps keyed state right across the drain's out-of-order"
                " hand-off and partitions added later. `insert`'s key includes the topic's "
                "incarnation (`topic_id`), so a re-created topic's records are kept."
            ),
        ),
    ] = "insert"


class Processing(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="has(self.sink) != has(self.handler)",
            message="exactly one of processing.sink or processing.handler must be set.",
        ),
        Rule(
            rule="!has(self.sink) || self.sink != 'postgres' || has(self.postgres)",
            message="processing.postgres is required when processing.sink is postgres.",
            field_path=".postgres",
            reason="FieldValueRequired",
        ),
        Rule(
            rule="!has(self.postgres) || (has(self.sink) && self.sink == 'postgres')",
            message="processing.postgres is only allowed when processing.sink is postgres.",
            field_path=".postgres",
            reason="FieldValueForbidden",
        ),
    )

    sink: Annotated[
        Literal["postgres", "log"] | None,
        spec_field(
            description=(
                "Built-in sink: postgres (writes every record to a PostgreSQL table, idempotently; "
                "configure processing.postgres) or log (logs a summary of each batch; for trials). "
                "Mutually exclusive with handler."
            ),
        ),
        Doc(
            bounds="`postgres`, `log`",
            use=(
                "`LAGPILOT_SINK`: `postgres` = `lagpilot_runtime.sinks.postgres:process` "
                "(idempotent writes), `log` = `lagpilot_runtime.sinks.log:process` (logs a batch "
                "summary; for trials)."
            ),
        ),
    ] = None
    handler: Annotated[
        str | None,
        spec_field(
            description=(
                'Custom batch handler as "package.module:function", importable in the consumer image,'
                " called as function(records, ctx) for each batch; it raises to fail the batch. "
                "Mutually exclusive with sink."
            ),
            min_length=3,
            max_length=256,
            pattern=HANDLER,
        ),
        Doc(
            bounds="`package.module:function`, ≤ 256",
            use=(
                "`LAGPILOT_HANDLER`: imported in the consumer image and called as "
                "`function(records, ctx)` per batch; raising fails the batch (see `failure`)."
            ),
        ),
    ] = None
    concurrency: Annotated[
        int,
        spec_field(
            description=(
                "Threads available to the handler for per-record work inside one batch. The batch "
                "still commits as a whole. Default 1 (1 to 64)."
            ),
            ge=1,
            le=64,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 64",
            use=(
                "`LAGPILOT_CONCURRENCY`: threads the handler may use for per-record work in one "
                "batch; the batch commits as a whole."
            ),
        ),
    ] = 1
    config: Annotated[
        dict[str, Annotated[str, Field(max_length=4096)]] | None,
        spec_field(
            description=(
                "String key/value settings handed to the handler (and built-in sink) as ctx.config. "
                "Not for secrets: use template.env with secretKeyRef. Keys and values total at most "
                "10000 characters (one environment variable of the pod, below the kernel's 128 KiB "
                "limit)."
            ),
            max_length=64,
            rules=(
                Rule(
                    rule="self.map(k, size(k) + size(self[k])).sum() <= 10000",
                    message=(
                        "keys and values must total at most 10000 characters (the handler's config is one"
                        " environment variable, below the kernel's 128 KiB limit)"
                    ),
                ),
            ),
        ),
        Doc(
            bounds="≤ 64 keys, values ≤ 4096 chars, keys + values ≤ 10000 chars in total",
            use=(
                "`LAGPILOT_HANDLER_CONFIG` (JSON), handed to the handler as `ctx.config`. Not for"
                " secrets: use `template.env` with `secretKeyRef`. The total keeps that one "
                "environment variable below the kernel's 128 KiB per-variable limit (`E2BIG`: the"
                " pod would not start) even if every character needs a 12-byte JSON escape."
            ),
            type="map string→string",
        ),
    ] = None
    postgres: Annotated[
        Postgres | None,
        spec_field(
            description="Settings of the built-in postgres sink; required when sink is postgres.",
        ),
        Doc(bounds="required iff `sink: postgres`", use="Settings of the built-in PostgreSQL sink."),
    ] = None


class Failure(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="!has(self.deadLetterTopic) || !has(self.policy) || self.policy == 'deadLetter'",
            message=(
                "failure.deadLetterTopic is only allowed when failure.policy is deadLetter: pause and"
                " exit never produce to it."
            ),
            field_path=".deadLetterTopic",
            reason="FieldValueForbidden",
        ),
    )

    max_retries: Annotated[
        int,
        spec_field(
            alias="maxRetries",
            description="Retries of a failed batch before the failure policy applies. Default 3 (0 to 100).",
            ge=0,
            le=100,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="0 – 100", use="`LAGPILOT_MAX_RETRIES`: retries of a failed batch before `policy` applies."
        ),
    ] = 3
    backoff_ms: Annotated[
        int,
        spec_field(
            alias="backoffMs",
            description="Delay in milliseconds before retrying a failed batch. Default 200 (0 to 600000).",
            ge=0,
            le=600000,
            json_schema_extra=INT32,
        ),
        Doc(bounds="0 – 600000", use="`LAGPILOT_RETRY_BACKOFF_MS`: delay before retrying a failed batch."),
    ] = 200
    policy: Annotated[
        Literal["deadLetter", "pause", "exit"],
        spec_field(
            description=(
                "After the last retry: deadLetter produces the failed records to deadLetterTopic and "
                "commits past them; pause stops consuming without committing the failed batch (the "
                "group reports Degraded); exit makes the consumer exit non-zero so the pod restarts "
                "from the last commit. Default deadLetter."
            ),
        ),
        Doc(
            bounds="`deadLetter`, `pause`, `exit`",
            use=(
                "`LAGPILOT_FAILURE_POLICY`: `deadLetter` produces the failed records to "
                "`deadLetterTopic` and commits past them; `pause` stops consuming without "
                "committing the failed batch (the group reports `Degraded`); `exit` exits "
                "non-zero so the pod restarts from the last commit."
            ),
        ),
    ] = "deadLetter"
    dead_letter_topic: Annotated[
        str | None,
        spec_field(
            alias="deadLetterTopic",
            description=(
                "Topic for dead-lettered records; only with policy deadLetter. Defaults to "
                '"<topic>.dlq" when unset. A Kafka topic name like topic, not "." or "..", not an '
                'internal topic (names starting with "__"), and different from topic even under '
                "Kafka's rule that '.' and '_' collide."
            ),
            min_length=1,
            max_length=249,
            pattern=TOPIC,
            rules=(
                Rule(
                    rule="self != '.' && self != '..'",
                    message='failure.deadLetterTopic must not be "." or "..".',
                ),
                Rule(
                    rule="!self.startsWith('__')",
                    message=(
                        'failure.deadLetterTopic must not start with "__": such names are Kafka\'s '
                        "internal topics (__consumer_offsets, __transaction_state)."
                    ),
                ),
            ),
        ),
        Doc(
            bounds=(
                "topic name, not `.`/`..`, not starting with `__`, `!= topic` even with `.`≡`_`; "
                "only with `policy: deadLetter`; the default needs `topic` ≤ 245 chars"
            ),
            use="`LAGPILOT_DLQ_TOPIC`.",
            default="`<topic>.dlq` (computed, not stored)",
        ),
    ] = None


class ScaleUp(CrdModel):
    stabilization_window_seconds: Annotated[
        int,
        spec_field(
            alias="stabilizationWindowSeconds",
            description=(
                "Seconds of recommendations considered before scaling up; the lowest one wins. 0 "
                "scales up at once. Default 0 (0 to 3600)."
            ),
            ge=0,
            le=3600,
            json_schema_extra=INT32,
        ),
        Doc(bounds="0 – 3600", use="Scale up to the lowest recommendation of this window (0 = at once)."),
    ] = 0


class ScaleDown(CrdModel):
    stabilization_window_seconds: Annotated[
        int,
        spec_field(
            alias="stabilizationWindowSeconds",
            description=(
                "Seconds of recommendations considered before scaling down; the highest one wins. "
                "Guards against flapping. Default 300 (0 to 3600)."
            ),
            ge=0,
            le=3600,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="0 – 3600",
            use=(
                "Scale down only to the highest recommendation of this window; guards against "
                "flapping. The operator never scales down while the projection exceeds the SLA."
            ),
        ),
    ] = 300


class Behavior(CrdModel):
    scale_up: Annotated[
        ScaleUp,
        spec_field(
            alias="scaleUp",
            description="Pacing of scale-ups.",
            default_factory=ScaleUp,
        ),
        Doc(bounds="—", use="Pacing of scale-ups."),
    ]
    scale_down: Annotated[
        ScaleDown,
        spec_field(
            alias="scaleDown",
            description="Pacing of scale-downs.",
            default_factory=ScaleDown,
        ),
        Doc(bounds="—", use="Pacing of scale-downs."),
    ]


class Scaling(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule=("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas"),
            message="scaling.minReplicas must be less than or equal to scaling.maxReplicas.",
            field_path=".minReplicas",
        ),
    )

    min_replicas: Annotated[
        int,
        spec_field(
            alias="minReplicas",
            description=(
                "Fewest consumer replicas. 0 allows scaling to zero when the topic is idle (no lag, "
                "no produce); the group wakes up when records arrive. Default 1 (0 to 1000)."
            ),
            ge=0,
            le=1000,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="0 – 1000",
            use=(
                "Lower bound of the Deployment's replicas. `0` allows scale to zero when the "
                "topic is idle (no lag, no produce); the operator's own observation wakes the "
                "group when records arrive."
            ),
        ),
    ] = 1
    max_replicas: Annotated[
        int,
        spec_field(
            alias="maxReplicas",
            description=(
                "Most consumer replicas. At run time also capped at the topic's partition count, "
                "since extra consumers would sit idle. Default 10 (1 to 1000)."
            ),
            ge=1,
            le=1000,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 1000",
            use=(
                "Upper bound; at run time also capped at the partition count (more consumers than"
                " partitions sit idle). When the cap still misses the SLA, the drain takes over."
            ),
        ),
    ] = 10
    tolerance: Annotated[
        float,
        spec_field(
            description=(
                "Dead band as a fraction: no scale when the desired replicas differ from the current "
                "ones by less than this ratio (as the HPA's tolerance). Default 0.1 (0 to 1)."
            ),
            ge=0,
            le=1,
        ),
        Doc(
            bounds="0 – 1", use="Dead band: no scale while `|desired/current − 1|` is below it (as the HPA)."
        ),
    ] = 0.1
    poll_interval_seconds: Annotated[
        int,
        spec_field(
            alias="pollIntervalSeconds",
            description=(
                "Seconds between two lag observations and decisions; at most catchUpSLASeconds. "
                "Default 15 (1 to 3600)."
            ),
            ge=1,
            le=3600,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 3600, and `≤ catchUpSLASeconds`",
            use="Interval of the observe → project → decide cycle for this CR.",
        ),
    ] = 15
    behavior: Annotated[
        Behavior,
        spec_field(
            description=(
                "Stabilization windows, as in the HPA's behavior: a scale is applied only if every "
                "recommendation within the window agrees with it."
            ),
            default_factory=Behavior,
        ),
        Doc(bounds="—", use="Stabilization windows, as in the HPA's `behavior`."),
    ]


class Resources(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule=(
                "!has(self.requests) || !has(self.limits) || self.requests.all(r, !(r in self.limits)"
                " || !isQuantity(string(self.requests[r])) || !isQuantity(string(self.limits[r])) || "
                "quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)"
            ),
            message=(
                "template.resources.requests must be less than or equal to template.resources.limits "
                "for every resource in both."
            ),
            field_path=".requests",
        ),
    )

    limits: Annotated[
        dict[str, Quantity] | None,
        spec_field(
            description='Maximum resources by name, e.g. cpu "1", memory 512Mi.',
            max_length=16,
        ),
        Doc(
            bounds="non-negative quantities, ≤ 16 names",
            use='Limits, e.g. `cpu: "1"`, `memory: 512Mi`.',
            type="map name→quantity",
        ),
    ] = None
    requests: Annotated[
        dict[str, Quantity] | None,
        spec_field(
            description="Resources the scheduler reserves by name, e.g. cpu 250m, memory 256Mi.",
            max_length=16,
        ),
        Doc(
            bounds="non-negative quantities, ≤ 16 names",
            use="Requests, e.g. `cpu: 250m`.",
            type="map name→quantity",
        ),
    ] = None


class DrainResources(Resources):
    """Resources whose cross-field rule names spec.drain.resources."""

    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule=Resources.cel[0].rule,
            message=(
                "drain.resources.requests must be less than or equal to drain.resources.limits for "
                "every resource in both."
            ),
            field_path=".requests",
        ),
    )


class Drain(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule=(
                "!has(self.warmRuntime) || !self.warmRuntime || !has(self.launcher) || self.launcher "
                "!= 'sparkApplication'"
            ),
            message=(
                "spec.drain.warmRuntime must be false when spec.drain.launcher is sparkApplication "
                "(the warm runtime serves drain Jobs only)."
            ),
            field_path=".warmRuntime",
        ),
        Rule(
            rule=("!has(self.warmRuntimeCooldownSeconds) || (has(self.warmRuntime) && self.warmRuntime)"),
            message=(
                "spec.drain.warmRuntimeCooldownSeconds is allowed only with spec.drain.warmRuntime "
                "true (it says when the warm drain runtime runs)."
            ),
            field_path=".warmRuntimeCooldownSeconds",
        ),
        Rule(
            rule="!has(self.resources) || !has(self.launcher) || self.launcher != 'sparkApplication'",
            message=(
                "spec.drain.resources applies with launcher job only (the drain Job's pod and the warm "
                "runtime's); a SparkApplication's driver and executors are sized by the operator's "
                "drain settings."
            ),
            field_path=".resources",
        ),
    )

    enabled: Annotated[
        bool,
        spec_field(
            description=(
                "Allow drains for this group. false keeps strict per-partition order (the group is "
                "then limited to one consumer per partition). Default true."
            ),
        ),
        Doc(
            bounds="—",
            use=(
                "`false` never drains: strict per-partition order is kept, at the price of the partition cap."
            ),
        ),
    ] = True
    split_factor: Annotated[
        int | None,
        spec_field(
            alias="splitFactor",
            description=(
                "Optional cap on a drain's Spark tasks: a drain of n partitions runs at most n x "
                "splitFactor tasks (1 to 256). Unset (the default): no cap but maxTasks; each drained"
                " partition gets the tasks its backlog and produce rate need to meet the SLA."
            ),
            ge=1,
            le=256,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 256",
            use=(
                "Optional cap: a drain of n partitions runs at most n × splitFactor Spark tasks "
                "(each takes a contiguous sub-range). Unset (the default since issue 25): no cap "
                "but `maxTasks`; the planner gives each drained partition the tasks its backlog "
                'and produce rate need to meet the SLA (docs/decision.md "How many tasks"); '
                "before, the default 4 capped a hot partition at 4 tasks whatever the budget."
            ),
            default="— (unset)",
        ),
    ] = None
    max_tasks: Annotated[
        int,
        spec_field(
            alias="maxTasks",
            description="Most Spark tasks one drain runs at once. Default 16 (1 to 1024).",
            ge=1,
            le=1024,
            json_schema_extra=INT32,
        ),
        Doc(bounds="1 – 1024", use="Most Spark tasks one drain runs at once."),
    ] = 16
    min_backlog_records: Annotated[
        int,
        spec_field(
            alias="minBacklogRecords",
            description=(
                "A drain starts only for a partition whose backlog is at least this many records; "
                "while the whole group is overloaded, other partitions that regrow join that drain "
                "with at least one batch. Default 10000 (at least 0)."
            ),
            ge=0,
            json_schema_extra=INT64,
        ),
        Doc(
            bounds="≥ 0",
            use=(
                "A drain starts only for a partition whose backlog is at least this large (a "
                "drain has a start-up cost); while the whole group is overloaded, other "
                "partitions that regrow join that drain with at least one batch "
                "(docs/decision.md)."
            ),
        ),
    ] = 10000
    cancel: Annotated[
        bool,
        spec_field(
            description=(
                "Set to true to cancel the running drain without losing records (what happens to the "
                "unfinished part of its ranges is described in docs/crd-reference.md); while true no "
                "new drain starts. Default false."
            ),
        ),
        Doc(
            bounds="—",
            use=(
                "`true` cancels the running drain without losing records and prevents new ones; "
                "the fate of the unfinished part of its ranges is described with the drain "
                "hand-off (see the drain docs)."
            ),
        ),
    ] = False
    launcher: Annotated[
        Literal["job", "sparkApplication"],
        spec_field(
            description=(
                "What runs a drain: job (default) creates a batch/v1 Job running the drain in the "
                "consumer image; sparkApplication creates a SparkApplication of the kubeflow "
                "spark-operator (its CRD must be installed and the operator allowed to manage "
                "sparkapplications). Applies from the next drain attempt. Default job."
            ),
        ),
        Doc(
            bounds="`job`, `sparkApplication`",
            use=(
                "What runs a drain attempt: a batch/v1 Job (default) or a kubeflow spark-operator"
                " `SparkApplication` (its CRD installed, the operator granted "
                "`sparkapplications`: chart `rbac.sparkApplications`). Applies from the next "
                'attempt (docs/drain.md "Launchers").'
            ),
        ),
    ] = "job"
    assist_replicas: Annotated[
        bool,
        spec_field(
            alias="assistReplicas",
            description=(
                "Opt-in cost saving: run fewer consumer replicas than the steady load needs when "
                "repeated drains carrying the excess are expected to save at least one replica "
                '(docs/decision.md "Drain-assisted replica count"). Drains then run in steady state, '
                "not only for bursts (more Spark jobs, records of a key out of order across each "
                "split). Default false."
            ),
        ),
        Doc(
            bounds="—",
            use=(
                "Opt-in cost saving: fewer consumer replicas than the steady load needs when "
                "repeated drains carrying the excess are expected to save at least one replica "
                '(docs/decision.md "Drain-assisted replica count"). Drains then run in steady '
                "state, not only for bursts: more Spark jobs, and records of one key out of order"
                " across each split."
            ),
        ),
    ] = False
    busy: Annotated[
        bool,
        spec_field(
            description=(
                "Drains that stay busy across a burst: while the capped group cannot hold a drained "
                "partition, the running drain takes its next split (the same mailbox hand-off) and "
                "its driver runs it with the Spark session it holds, without a new start-up; the "
                "partition is handed back when the group alone meets the target again. Needs "
                "consumers that acknowledge the hand-off (this operator's image): a next split never"
                ' takes the quiesce fallback. Default true (docs/drain.md "Busy drains").'
            ),
        ),
        Doc(
            bounds="—",
            use=(
                "Busy drains (default true): a running drain takes the next split of its hot "
                "partitions while the capped group cannot hold them, without a new start-up, and "
                "hands them back when the group meets the target again. false: every drain ends "
                "with its range (a regrowing partition gets a new drain, with its start-up). Set "
                "false for consumers of an older image that do not acknowledge the hand-off "
                '(docs/drain.md "Busy drains").'
            ),
        ),
    ] = True
    warm_runtime: Annotated[
        bool,
        spec_field(
            alias="warmRuntime",
            description=(
                "Opt-in, launcher job only: keep a warm drain runtime for this group, a Deployment "
                "<name>-drain-runtime running `lagpilot drain --serve` with the drain Job's image and"
                " environment. Gain: a drain Job hands its plan to it and skips the drain's own "
                "start-up (spark-submit and driver JVM, SparkSession, Kafka source planning, Python "
                "worker daemon); when the runtime is not Ready at launch the Job drains by itself "
                "(cold), as with false. Idle cost: one Spark driver JVM with its Python workers stays"
                " up per group even when no drain runs (its pod requests the drain Job's memory and "
                "the CPU of maxTasks tasks). Default false."
            ),
        ),
        Doc(
            bounds="`true` only with `launcher: job` (CEL)",
            use=(
                "Opt-in warm drain runtime: the operator keeps a Deployment "
                "`<name>-drain-runtime` (1 replica, owned by the CR) running `lagpilot drain "
                "--serve` with the drain Job's image and environment (Secret material as "
                "`secretKeyRef` only), which holds a warm SparkSession and Python workers. A "
                "drain Job launched while that pod is Ready gets `LAGPILOT_DRAIN_RUNTIME_URL` and"
                " hands its plan to it, skipping the drain's own start-up (driver JVM, "
                "SparkSession, Kafka source planning, Python worker daemon); otherwise, or when "
                "nothing answers there, the Job drains by itself (cold) as with `false`. The Job "
                "(label `lagpilot.io/drain-runtime`), the `DrainStarted` event and "
                "`status.drain.runtime` say `warm` or `cold`. Idle cost: one Spark driver JVM "
                "with its Python workers stays up per group even when no drain runs (its pod "
                "requests the drain Job's memory and the CPU of `maxTasks` tasks), unless "
                "`warmRuntimeCooldownSeconds` runs it on demand (below). Removed when set back to"
                " `false`, when `enabled` is `false`, or with the CR (never while a drain attempt"
                ' runs). docs/drain.md "Warm drain runtime".'
            ),
        ),
    ] = False
    warm_runtime_cooldown_seconds: Annotated[
        int | None,
        spec_field(
            alias="warmRuntimeCooldownSeconds",
            description=(
                "Optional, only with warmRuntime true: run the warm drain runtime on demand. Unset "
                "(default), it runs all the time. Set, its Deployment is scaled to 1 when a drain "
                "falls due (a burst the group at its cap cannot clear within the SLA; while the "
                "runtime is down the planner counts its warm-up, so that much earlier), kept while "
                "drains run and for this many seconds after the last drain ended, then scaled to 0 "
                "(the Deployment stays). A drain due while the runtime warms up waits for it: its "
                "split is taken once the runtime is Ready (at most twice the drain start-up, at least"
                " 120 s, after the scale-up, else the drain starts cold). 0 to 86400."
            ),
            ge=0,
            le=86400,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="0–86400; only with `warmRuntime: true` (CEL)",
            use=(
                "When the warm drain runtime runs. Unset: all the time (as above). Set: on "
                "demand. Its Deployment is scaled to 1 when a drain falls due (a burst the group "
                "at its cap cannot clear within the SLA; while the runtime is down the planner "
                "counts its warm-up in the drain's start-up, so a drain falls due that much "
                "earlier), kept at 1 while drains run and for this many seconds after the last "
                "drain ended, then scaled to 0 (the Deployment stays, with 0 replicas; the "
                "annotation `lagpilot.io/drain-runtime-scaled-up-at` records the last scale-up). "
                "A drain that falls due while the runtime warms up waits for it: its split is "
                "taken once the runtime pod is Ready, so the records that arrive during the "
                "warm-up go into that drain and the burst's later drains start warm. It waits at "
                "most twice the drain start-up (at least 120 s) after the scale-up; after that "
                "the drain is planned and its Job drains cold. Cost: the runtime pod only during "
                'bursts plus the cooldown. docs/drain.md "Warm drain runtime".'
            ),
            default="— (unset)",
        ),
    ] = None

    resources: Annotated[
        DrainResources | None,
        spec_field(
            description=(
                "Optional, launcher job only: compute resources of the drain's container, in the "
                "drain Job's pod and the warm drain runtime's (core/v1 ResourceRequirements), apart "
                "from the consumers' template.resources. Unset: template.resources, else requests "
                "cpu (the drain's tasks, at least 500m; 1000m with Spark on Kubernetes) and memory "
                "1536Mi, limit memory 3Gi. Quantities are non-negative and a request is at most the "
                "limit of the same resource."
            ),
        ),
        Doc(
            bounds=(
                "core/v1 `ResourceRequirements`; each request ≤ the limit of the same resource; "
                "only with `launcher: job` (CEL)"
            ),
            use=(
                "The drain's own container resources: the drain Job's pod and the warm drain "
                "runtime's (a Spark driver JVM with its Python workers), so the consumers can be "
                "limited to what they need without OOM-killing the drains. Changing it rolls the "
                "warm runtime (never during a drain attempt), not the consumers. Unset: "
                "`template.resources`, else requests `cpu` (the drain's tasks × the per-task CPU, "
                "at least 500m; 1000m with Spark on Kubernetes) and `memory: 1536Mi`, limit "
                "`memory: 3Gi`. A warm drain Job (its plan handed to the runtime) requests little "
                "CPU when this and `template.resources` are unset. The executors of Spark on "
                "Kubernetes are sized by the operator's drain settings (chart values)."
            ),
            default="— (unset)",
        ),
    ] = None


class SecretKeySelector(CrdModel):
    name: Annotated[
        str,
        spec_field(
            description="Name of the Secret (a DNS subdomain).",
            min_length=1,
            max_length=253,
            pattern=DNS_SUBDOMAIN,
        ),
    ]
    key: Annotated[
        str,
        spec_field(
            description=(
                "Key in the Secret: letters, digits, '-', '_' and '.', not \".\" and not starting with "
                '"..".'
            ),
            min_length=1,
            max_length=253,
            pattern=CONFIG_KEY,
            rules=(
                Rule(
                    rule="self != '.' && !self.startsWith('..')",
                    message='a Secret key must not be "." or start with "..".',
                ),
            ),
        ),
    ]
    optional: Annotated[
        bool | None,
        spec_field(
            description="Start even if the Secret or key is missing.",
        ),
    ] = None


class ConfigMapKeySelector(CrdModel):
    name: Annotated[
        str,
        spec_field(
            description="Name of the ConfigMap (a DNS subdomain).",
            min_length=1,
            max_length=253,
            pattern=DNS_SUBDOMAIN,
        ),
    ]
    key: Annotated[
        str,
        spec_field(
            description=(
                "Key in the ConfigMap: letters, digits, '-', '_' and '.', not \".\" and not starting "
                'with "..".'
            ),
            min_length=1,
            max_length=253,
            pattern=CONFIG_KEY,
            rules=(
                Rule(
                    rule="self != '.' && !self.startsWith('..')",
                    message='a ConfigMap key must not be "." or start with "..".',
                ),
            ),
        ),
    ]
    optional: Annotated[
        bool | None,
        spec_field(
            description="Start even if the ConfigMap or key is missing.",
        ),
    ] = None


class ObjectFieldSelector(CrdModel):
    api_version: Annotated[
        Literal["v1"] | None,
        spec_field(
            alias="apiVersion",
            description="Schema version of fieldPath; only v1 (the default).",
        ),
    ] = None
    field_path: Annotated[
        str,
        spec_field(
            alias="fieldPath",
            description=(
                "Path of the field to select, one of those Kubernetes supports for env: "
                "metadata.name, metadata.namespace, metadata.uid, metadata.labels['<key>'], "
                "metadata.annotations['<key>'], spec.nodeName, spec.serviceAccountName, "
                "status.hostIP, status.hostIPs, status.podIP, status.podIPs."
            ),
            max_length=320,
            pattern=FIELD_PATH,
        ),
    ]


class ResourceFieldSelector(CrdModel):
    container_name: Annotated[
        str | None,
        spec_field(
            alias="containerName",
            description="Container name; the consumer container if empty.",
            max_length=253,
        ),
    ] = None
    resource: Annotated[
        str,
        spec_field(
            description=(
                "Resource to select: limits or requests of cpu, memory, ephemeral-storage or "
                "hugepages-<size>, e.g. limits.cpu."
            ),
            max_length=64,
            pattern=RESOURCE_FIELD,
        ),
    ]
    divisor: Annotated[
        IntOrString | None,
        spec_field(
            description="Output unit of the exposed value, e.g. 1Mi; defaults to 1.",
        ),
    ] = None


class EnvVarSource(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule=(
                "[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef), "
                "has(self.resourceFieldRef)].filter(x, x).size() == 1"
            ),
            message=(
                "valueFrom takes exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef."
            ),
        ),
    )

    secret_key_ref: Annotated[
        SecretKeySelector | None,
        spec_field(
            alias="secretKeyRef",
            description="A key of a Secret in the same namespace.",
        ),
    ] = None
    config_map_key_ref: Annotated[
        ConfigMapKeySelector | None,
        spec_field(
            alias="configMapKeyRef",
            description="A key of a ConfigMap in the same namespace.",
        ),
    ] = None
    field_ref: Annotated[
        ObjectFieldSelector | None,
        spec_field(
            alias="fieldRef",
            description="A field of the pod, e.g. metadata.name or status.podIP.",
        ),
    ] = None
    resource_field_ref: Annotated[
        ResourceFieldSelector | None,
        spec_field(
            alias="resourceFieldRef",
            description="A resource limit or request of the container, e.g. limits.memory.",
        ),
    ] = None


class EnvVar(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="!self.name.startsWith('LAGPILOT_')",
            message="template.env names starting with LAGPILOT_ are reserved for the lagpilot runtime.",
            field_path=".name",
        ),
        Rule(
            rule="!self.name.startsWith('LP_TEST_')",
            message=(
                "template.env names starting with LP_TEST_ are reserved for the runtime's tests "
                "(fault hooks)."
            ),
            field_path=".name",
        ),
        Rule(
            rule="!(has(self.value) && has(self.valueFrom))",
            message="an env entry takes value or valueFrom, not both.",
        ),
    )

    name: Annotated[
        str,
        spec_field(
            description="Environment variable name.",
            min_length=1,
            max_length=256,
            pattern=ENV_NAME,
        ),
        Doc(bounds="env-var name", use="Variable name."),
    ]
    value: Annotated[
        str | None,
        spec_field(
            description="Literal value. Not for secrets; use valueFrom.secretKeyRef.",
            max_length=32768,
        ),
        Doc(bounds="not with `valueFrom`", use="Literal value (not for secrets)."),
    ] = None
    value_from: Annotated[
        EnvVarSource | None,
        spec_field(
            alias="valueFrom",
            description="Source of the value (exactly one of the fields below).",
        ),
        Doc(
            bounds=(
                "exactly one source; Secret/ConfigMap names DNS subdomains and keys valid Secret "
                "keys; `fieldPath` one of those Kubernetes supports for env"
            ),
            use=(
                "`secretKeyRef` / `configMapKeyRef` (`name`, `key`, `optional`), `fieldRef` "
                "(`apiVersion`, `fieldPath`), `resourceFieldRef` (`containerName`, `resource`, "
                "`divisor`), as in core/v1."
            ),
        ),
    ] = None


class Template(CrdModel):
    image: Annotated[
        str,
        spec_field(
            description=(
                "Consumer image; it must contain the handler's module. An image reference "
                "[registry[:port]/]name[:tag][@digest] (lower-case name components). Default "
                "lagpilot/consumer:0.1.0."
            ),
            min_length=1,
            max_length=1024,
            pattern=IMAGE,
        ),
        Doc(
            bounds="image reference `[registry[:port]/]name[:tag][@digest]`, ≤ 1024",
            use="Consumer image; must contain the handler's module.",
        ),
    ] = "lagpilot/consumer:0.1.0"
    image_pull_policy: Annotated[
        Literal["Always", "IfNotPresent", "Never"],
        spec_field(
            alias="imagePullPolicy",
            description="Pull policy of the consumer image. Default IfNotPresent.",
        ),
        Doc(bounds="`Always`, `IfNotPresent`, `Never`", use="Pull policy of that image."),
    ] = "IfNotPresent"
    resources: Annotated[
        Resources | None,
        spec_field(
            description=(
                "Compute resources of the consumer container (core/v1 ResourceRequirements); requests"
                " and limits by resource name. Quantities are non-negative and a request is at most "
                "the limit of the same resource."
            ),
        ),
        Doc(
            bounds="core/v1 `ResourceRequirements`; each request ≤ the limit of the same resource",
            use="Container resources.",
        ),
    ] = None
    env: Annotated[
        list[EnvVar] | None,
        spec_field(
            description=(
                "Extra environment of the consumer container, for the handler (core/v1 EnvVar). Names"
                " starting with LAGPILOT_ are reserved for the runtime, names starting with LP_TEST_ "
                "for its tests (fault hooks)."
            ),
            max_length=64,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
        Doc(
            bounds="≤ 64, unique names, no `LAGPILOT_` or `LP_TEST_` prefix",
            use=(
                "Extra environment for the handler, added to the consumer container next to the "
                "runtime's `LAGPILOT_*` variables. Names of `secretKeyRef` entries are listed in "
                "`LAGPILOT_SECRET_ENV` so the runtime masks their values (docs/CONTRACTS.md)."
            ),
            type="list of EnvVar",
        ),
    ] = None


class BatchConsumerGroupSpec(CrdModel):
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule=(
                "!has(self.failure) || !has(self.failure.deadLetterTopic) || "
                "self.failure.deadLetterTopic != self.topic"
            ),
            message=(
                "failure.deadLetterTopic must differ from topic: dead-lettered records would flow "
                "back into the same group."
            ),
            field_path=".failure.deadLetterTopic",
        ),
        Rule(
            rule=(
                "!has(self.failure) || !has(self.failure.deadLetterTopic) || "
                "self.failure.deadLetterTopic.replace('.', '_') != self.topic.replace('.', '_')"
            ),
            message=(
                "failure.deadLetterTopic must not collide with topic: Kafka treats '.' and '_' as the"
                " same character in topic names."
            ),
            field_path=".failure.deadLetterTopic",
        ),
        Rule(
            rule=(
                "!has(self.failure) || has(self.failure.deadLetterTopic) || (has(self.failure.policy)"
                " && self.failure.policy != 'deadLetter') || size(self.topic) <= 245"
            ),
            message=(
                "topic must be at most 245 characters while failure.policy is deadLetter without "
                'failure.deadLetterTopic: the default dead-letter topic "<topic>.dlq" must fit '
                "Kafka's 249 characters (or set failure.deadLetterTopic)."
            ),
            field_path=".topic",
        ),
        Rule(
            rule=(
                "!has(self.scaling) || !has(self.scaling.pollIntervalSeconds) || "
                "!has(self.catchUpSLASeconds) || self.scaling.pollIntervalSeconds <= "
                "self.catchUpSLASeconds"
            ),
            message=(
                "scaling.pollIntervalSeconds must be less than or equal to catchUpSLASeconds: a group"
                " observed less often than its SLA cannot be held to it."
            ),
            field_path=".scaling.pollIntervalSeconds",
        ),
        Rule(
            rule=(
                "!has(self.batch) || !has(self.batch.timeoutMs) || !has(self.catchUpSLASeconds) || "
                "self.catchUpSLASeconds < 1 || self.batch.timeoutMs < self.catchUpSLASeconds * 1000"
            ),
            message=(
                "batch.timeoutMs must be shorter than catchUpSLASeconds: a batch that waits longer "
                "than the SLA can never meet it."
            ),
            field_path=".batch.timeoutMs",
        ),
    )

    kafka: Annotated[
        Kafka,
        spec_field(
            description=(
                "Connection to the Kafka cluster. Credentials are never put in the spec: they are "
                "read from the Secret named by secretRef and reach the consumer pods only as "
                "secretKeyRef environment entries."
            ),
        ),
    ]
    topic: Annotated[
        str,
        spec_field(
            description=(
                "Kafka topic to consume. Immutable: committed offsets belong to one topic, so to "
                "consume another topic create another BatchConsumerGroup."
            ),
            min_length=1,
            max_length=249,
            pattern=TOPIC,
            rules=(
                Rule(rule="self != '.' && self != '..'", message='topic must not be "." or "..".'),
                Rule(
                    rule="self == oldSelf",
                    message="topic is immutable; create a new BatchConsumerGroup to consume another topic.",
                ),
            ),
        ),
        Doc(
            bounds="`^[a-zA-Z0-9._-]{1,249}$`, not `.`/`..`; immutable",
            use=(
                "The topic consumed (`LAGPILOT_TOPIC`); its partition count caps `replicas` and "
                "is followed at run time. A missing topic sets `Degraded`."
            ),
        ),
    ]
    group_id: Annotated[
        str,
        spec_field(
            alias="groupId",
            description=(
                "Kafka consumer group id (group.id) whose committed offsets the group and the drain "
                "share. Immutable: changing it would silently restart from another group's offsets."
            ),
            min_length=1,
            max_length=255,
            pattern=GROUP_ID,
            rules=(
                Rule(
                    rule="self == oldSelf",
                    message=(
                        "groupId is immutable; create a new BatchConsumerGroup to use another consumer group."
                    ),
                ),
            ),
        ),
        Doc(
            bounds="`^[A-Za-z0-9._:-]+$`, ≤ 255; immutable",
            use=(
                "`group.id` of the consumers (`LAGPILOT_GROUP_ID`); its committed offsets are the"
                " lag baseline and the drain's hand-off point."
            ),
        ),
    ]
    batch: Annotated[
        Batch,
        spec_field(
            description=(
                "How records are gathered into one handler call: a batch closes at maxRecords records"
                " or after timeoutMs, whichever comes first. Offsets are committed after the handler "
                "returns."
            ),
            default_factory=Batch,
        ),
        Doc(bounds="—", use="Batching of records into one handler call."),
    ]
    processing: Annotated[
        Processing,
        spec_field(
            description=(
                "What is done with each batch: exactly one of a built-in sink or a custom "
                "module:function handler. The drain job calls the same function."
            ),
        ),
        Doc(
            bounds="exactly one of `sink` / `handler`",
            use="What is done with each batch, by the consumers and by the drain job alike.",
        ),
    ]
    failure: Annotated[
        Failure,
        spec_field(
            description=(
                "What happens when the handler raises: retry the batch maxRetries times with backoff,"
                " then apply policy."
            ),
            default_factory=Failure,
        ),
        Doc(bounds="—", use="What the consumer does when the handler raises."),
    ]
    scaling: Annotated[
        Scaling,
        spec_field(
            description=(
                "Bounds and pacing of the autoscaler. The operator projects the catch-up time from "
                "lag, produce rate and measured capacity, and picks the replicas that meet "
                "catchUpSLASeconds within [minReplicas, maxReplicas], never above the partition "
                "count."
            ),
            default_factory=Scaling,
        ),
        Doc(bounds="`minReplicas ≤ maxReplicas`", use="Bounds and pacing of the autoscaler."),
    ]
    catch_up_sla_seconds: Annotated[
        int,
        spec_field(
            alias="catchUpSLASeconds",
            description=(
                "The SLA: the lag must be clearable within this many seconds. The operator scales "
                "when the projected catch-up time exceeds it and drains when scaling cannot meet it. "
                "Default 600 (1 to 604800, i.e. up to 7 days)."
            ),
            ge=1,
            le=604800,
            json_schema_extra=INT32,
        ),
        Doc(
            bounds="1 – 604800 (7 days)",
            use=(
                "The SLA. Each cycle the operator projects the time to clear the lag (lag, "
                "produce rate, measured capacity per replica, per partition) and picks the fewest"
                " replicas whose projection is within it; `CatchUpAtRisk` is set while even the "
                "capped group cannot meet it, which is when a drain is considered. The status "
                "does not repeat it (the CATCH-UP column sits beside this one, SLA)."
            ),
        ),
    ] = 600
    drain: Annotated[
        Drain,
        spec_field(
            description=(
                "The Spark drain: when the partition-capped group cannot meet the SLA, the operator "
                "hands the backlog [committed, split) of the late partitions to a Spark job that "
                "splits each range into many tasks and calls the same handler. Records of one key may"
                " then be processed out of order across the split point."
            ),
            default_factory=Drain,
        ),
        Doc(
            bounds="—",
            use=("The Spark drain of backlogs the partition-capped group cannot clear within the SLA."),
        ),
    ]
    paused: Annotated[
        bool,
        spec_field(
            description=(
                "true scales the consumers to 0 and stops decisions and new drains (committed offsets"
                " are kept); false resumes. Default false."
            ),
        ),
        Doc(
            bounds="—",
            use=(
                "`true` scales the Deployment to 0 and stops decisions and new drains; committed "
                "offsets stay. `false` resumes."
            ),
        ),
    ] = False
    mode: Annotated[
        Literal["Act", "Recommend"],
        spec_field(
            description=(
                "Act (default) observes, decides and acts: scales the consumer Deployment and drains "
                "backlogs. Recommend observes and decides the same way but only publishes "
                "(status.recommendation, Recommendation events, metrics): it creates and scales no "
                "Deployment, launches no drain and never touches the group's offsets; for a group run"
                " by something else too (docs/recommend.md). processing, template and batch are then "
                "unused. Default Act."
            ),
        ),
        Doc(
            bounds="`Act`, `Recommend`",
            use=(
                "`Act`: observe, decide and act (scale the Deployment, drain backlogs). "
                "`Recommend`: observe and decide the same way, publish the decision "
                "(`status.recommendation`, `Recommendation` events, `lagpilot_desired_replicas` "
                "with `lagpilot_recommend_only 1`) and touch nothing: no Deployment created or "
                "scaled, no drain, no offset, no adoption of a remainder. Works for a group "
                "lagpilot does not run (current replicas = the group's members; capacity measured"
                " from its commits while every partition lags). `processing`, `template`, `batch`"
                " are then unused (`processing` is still required by the schema: `{sink: log}` "
                "will do). docs/recommend.md."
            ),
        ),
    ] = "Act"
    template: Annotated[
        Template,
        spec_field(
            description="The consumer pods (also used for the drain Job's driver).",
            default_factory=Template,
        ),
        Doc(bounds="—", use="The consumer container (the drain Job runs the same image)."),
    ]


class BatchConsumerGroup(CrdModel):
    crd_description: ClassVar[str] = (
        "BatchConsumerGroup runs a Kafka consumer group that processes records in batches, and keeps "
        "its catch-up time inside an SLA: the lagpilot operator scales the consumer Deployment from "
        "the projected catch-up time, and past the partition cap drains the backlog with a Spark job."
    )
    cel: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="size(self.metadata.name) <= 52",
            message=(
                "metadata.name must be at most 52 characters: it names the consumer Deployment and the "
                "drain Jobs, whose names and labels carry a suffix and must stay within 63."
            ),
        ),
    )

    api_version: Annotated[
        str | None,
        spec_field(
            alias="apiVersion",
            description=(
                "APIVersion defines the versioned schema of this representation of an object. Servers should "
                "convert recognized schemas to the latest internal value, and may reject unrecognized values."
            ),
        ),
    ] = None
    kind: Annotated[
        str | None,
        spec_field(
            description=(
                "Kind is a string value representing the REST resource this object represents. In CamelCase."
            )
        ),
    ] = None
    # the API server forbids anything but `type` under metadata (no description)
    metadata: Annotated[dict[str, Any] | None, WithJsonSchema({"type": "object"})] = None
    spec: Annotated[
        BatchConsumerGroupSpec,
        spec_field(
            description=(
                "Desired state: where to read (kafka, topic, groupId), how to process (batch, processing, "
                "failure), and how fast the group must catch up (catchUpSLASeconds, scaling, drain)."
            )
        ),
    ]
    # the status is written by the operator; its schema is data until it has a model of its own
    status: Annotated[dict[str, Any] | None, WithJsonSchema(status_openapi_schema())] = None
