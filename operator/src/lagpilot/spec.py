"""The BatchConsumerGroup spec as frozen, typed dataclasses.

Parsed once per handler call from the raw CR dict (no I/O, no files), with the defaults of
docs/CONTRACTS.md filled in. The CRD's OpenAPI schema already rejects wrong types and out-of-range
numbers at admission; `validate()` adds the cross-field rules a structural schema cannot express
(exactly one of sink/handler, min <= max, SASL needs a mechanism and a Secret, ...) and re-checks
the bounds so that the operator never acts on a spec that slipped past an older CRD. Every error
names the field path (`spec.scaling.maxReplicas`) so the user knows what to fix.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SINKS = ("postgres", "log")
POSTGRES_MODES = ("insert", "upsert")
FAILURE_POLICIES = ("deadLetter", "pause", "exit")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DEFAULT_IMAGE = "lagpilot/consumer:0.1.0"
_HANDLER_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Kafka topic names: legal characters and length (Kafka's Topic.validate).
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class SpecError(ValueError):
    """The spec is unusable as written; `problems` lists (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in self.problems))


@dataclasses.dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    secret_name: str | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    max_records: int = 500
    timeout_ms: int = 1000


@dataclasses.dataclass(frozen=True)
class PostgresSpec:
    dsn_secret_name: str | None = None
    dsn_secret_key: str = "dsn"
    table: str = "lagpilot_records"
    mode: str = "insert"


@dataclasses.dataclass(frozen=True)
class ProcessingSpec:
    sink: str | None = None
    handler: str | None = None
    concurrency: int = 1
    # sorted (key, value) pairs: hashable and deterministic when rendered as JSON
    config: tuple[tuple[str, str], ...] = ()
    postgres: PostgresSpec = PostgresSpec()

    @property
    def config_dict(self) -> dict[str, str]:
        return dict(self.config)


@dataclasses.dataclass(frozen=True)
class FailureSpec:
    max_retries: int = 3
    backoff_ms: int = 200
    policy: str = "deadLetter"
    dead_letter_topic: str | None = None  # None: "<topic>.dlq"


@dataclasses.dataclass(frozen=True)
class ScalingSpec:
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = 0.1
    poll_interval_seconds: float = 15.0
    scale_up_window_seconds: float = 0.0
    scale_down_window_seconds: float = 300.0


@dataclasses.dataclass(frozen=True)
class DrainSpec:
    enabled: bool = True
    split_factor: int = 4
    max_tasks: int = 16
    min_backlog_records: int = 10000
    cancel: bool = False


@dataclasses.dataclass(frozen=True)
class TemplateSpec:
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    # core/v1 ResourceRequirements and EnvVar list, passed through verbatim (schema-checked by the
    # API server when the Deployment is applied); tuples/frozen mappings would buy nothing here.
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    kafka: KafkaSpec
    topic: str
    group_id: str
    batch: BatchSpec = BatchSpec()
    processing: ProcessingSpec = ProcessingSpec(sink="log")
    failure: FailureSpec = FailureSpec()
    scaling: ScalingSpec = ScalingSpec()
    catch_up_sla_seconds: float = 600.0
    drain: DrainSpec = DrainSpec()
    paused: bool = False
    template: TemplateSpec = TemplateSpec()

    @property
    def dead_letter_topic(self) -> str:
        return self.failure.dead_letter_topic or f"{self.topic}.dlq"

    def validate(self) -> "GroupSpec":
        """Check cross-field rules and bounds; raise SpecError naming every bad field."""
        problems: list[tuple[str, str]] = []

        def need(ok: bool, path: str, msg: str) -> None:
            if not ok:
                problems.append((path, msg))

        k = self.kafka
        need(bool(k.bootstrap_servers.strip()), "spec.kafka.bootstrapServers", "must not be empty")
        need(all(_hostport_ok(s) for s in k.bootstrap_servers.split(",")),
             "spec.kafka.bootstrapServers", "must be a comma-separated list of host:port")
        need(k.security_protocol in SECURITY_PROTOCOLS, "spec.kafka.securityProtocol",
             f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if k.uses_sasl:
            need(k.sasl_mechanism in SASL_MECHANISMS, "spec.kafka.saslMechanism",
                 f"is required with {k.security_protocol} and must be one of {', '.join(SASL_MECHANISMS)}")
        elif k.sasl_mechanism is not None:
            need(k.sasl_mechanism in SASL_MECHANISMS, "spec.kafka.saslMechanism",
                 f"must be one of {', '.join(SASL_MECHANISMS)}")
        need(k.security_protocol == "PLAINTEXT" or bool(k.secret_name),
             "spec.kafka.secretRef.name", f"is required with {k.security_protocol}")
        need(bool(_TOPIC_RE.match(self.topic)), "spec.topic",
             "must be 1-249 characters of letters, digits, '.', '_' or '-'")
        need(bool(self.group_id.strip()), "spec.groupId", "must not be empty")

        need(1 <= self.batch.max_records <= 100_000, "spec.batch.maxRecords", "must be in 1..100000")
        need(1 <= self.batch.timeout_ms <= 600_000, "spec.batch.timeoutMs", "must be in 1..600000")

        p = self.processing
        need((p.sink is None) != (p.handler is None), "spec.processing",
             "exactly one of sink or handler must be set")
        if p.sink is not None:
            need(p.sink in SINKS, "spec.processing.sink", f"must be one of {', '.join(SINKS)}")
        if p.handler is not None:
            need(bool(_HANDLER_RE.match(p.handler)), "spec.processing.handler",
                 "must look like 'package.module:function'")
        need(1 <= p.concurrency <= 64, "spec.processing.concurrency", "must be in 1..64")
        if p.sink == "postgres":
            need(bool(p.postgres.dsn_secret_name), "spec.processing.postgres.dsnSecretRef.name",
                 "is required when sink is postgres")
            need(bool(p.postgres.dsn_secret_key), "spec.processing.postgres.dsnSecretRef.key",
                 "must not be empty")
        need(p.postgres.mode in POSTGRES_MODES, "spec.processing.postgres.mode",
             f"must be one of {', '.join(POSTGRES_MODES)}")
        need(bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$", p.postgres.table)),
             "spec.processing.postgres.table", "must be a plain SQL identifier")

        f = self.failure
        need(f.max_retries >= 0, "spec.failure.maxRetries", "must be >= 0")
        need(f.backoff_ms >= 0, "spec.failure.backoffMs", "must be >= 0")
        need(f.policy in FAILURE_POLICIES, "spec.failure.policy",
             f"must be one of {', '.join(FAILURE_POLICIES)}")
        if f.dead_letter_topic is not None:
            need(bool(_TOPIC_RE.match(f.dead_letter_topic)) and f.dead_letter_topic != self.topic,
                 "spec.failure.deadLetterTopic", "must be a valid topic name other than spec.topic")

        s = self.scaling
        need(s.min_replicas >= 0, "spec.scaling.minReplicas", "must be >= 0")
        need(s.max_replicas >= 1, "spec.scaling.maxReplicas", "must be >= 1")
        need(s.max_replicas >= s.min_replicas, "spec.scaling.maxReplicas",
             f"({s.max_replicas}) must be >= spec.scaling.minReplicas ({s.min_replicas})")
        need(0 <= s.tolerance < 1, "spec.scaling.tolerance", "must be in [0, 1)")
        need(1 <= s.poll_interval_seconds <= 3600, "spec.scaling.pollIntervalSeconds",
             "must be in 1..3600")
        need(s.scale_up_window_seconds >= 0,
             "spec.scaling.behavior.scaleUp.stabilizationWindowSeconds", "must be >= 0")
        need(s.scale_down_window_seconds >= 0,
             "spec.scaling.behavior.scaleDown.stabilizationWindowSeconds", "must be >= 0")
        need(self.catch_up_sla_seconds > 0, "spec.catchUpSLASeconds", "must be > 0")

        d = self.drain
        need(d.split_factor >= 1, "spec.drain.splitFactor", "must be >= 1")
        need(d.max_tasks >= 1, "spec.drain.maxTasks", "must be >= 1")
        need(d.min_backlog_records >= 0, "spec.drain.minBacklogRecords", "must be >= 0")

        t = self.template
        need(bool(t.image.strip()), "spec.template.image", "must not be empty")
        need(t.image_pull_policy in PULL_POLICIES, "spec.template.imagePullPolicy",
             f"must be one of {', '.join(PULL_POLICIES)}")
        for i, e in enumerate(t.env):
            name = e.get("name") if isinstance(e, Mapping) else None
            need(isinstance(name, str) and bool(name), f"spec.template.env[{i}].name", "is required")
            if isinstance(name, str):
                need(not name.startswith("LAGPILOT_"), f"spec.template.env[{i}].name",
                     "must not start with LAGPILOT_ (reserved for the operator)")
        if problems:
            raise SpecError(problems)
        return self


def _hostport_ok(s: str) -> bool:
    host, sep, port = s.strip().rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


class _Reader:
    """Typed access to a nested mapping; collects type problems with their field path."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def section(self, d: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        v = d.get(key)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            self.problems.append((f"{path}.{key}", "must be an object"))
            return {}
        return v

    def get(self, d: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...],
            default: Any = None, required: bool = False) -> Any:
        v = d.get(key)
        if v is None:
            if required:
                self.problems.append((f"{path}.{key}", "is required"))
            return default
        # bool is an int subclass: reject it where a number is meant
        if isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            self.problems.append((f"{path}.{key}", f"must be {_kind_name(kind)}"))
            return default
        if not isinstance(v, kind):
            self.problems.append((f"{path}.{key}", f"must be {_kind_name(kind)}"))
            return default
        if kind == (int, float):
            return float(v)
        return v


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
             list: "a list", dict: "an object"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


_NUM = (int, float)


def parse_spec(raw: Mapping[str, Any]) -> GroupSpec:
    """Build a validated GroupSpec from the CR's `spec` dict; raise SpecError naming the fields."""
    r = _Reader()
    if not isinstance(raw, Mapping):
        raise SpecError([("spec", "must be an object")])
    P = "spec"
    kafka = r.section(raw, "kafka", P)
    if "kafka" not in raw:
        r.problems.append(("spec.kafka", "is required"))
    secret_ref = r.section(kafka, "secretRef", "spec.kafka")
    kafka_spec = KafkaSpec(
        bootstrap_servers=r.get(kafka, "bootstrapServers", "spec.kafka", str, "", required=True),
        security_protocol=r.get(kafka, "securityProtocol", "spec.kafka", str, "PLAINTEXT"),
        sasl_mechanism=r.get(kafka, "saslMechanism", "spec.kafka", str, None),
        secret_name=r.get(secret_ref, "name", "spec.kafka.secretRef", str, None) or None,
    )
    batch = r.section(raw, "batch", P)
    proc = r.section(raw, "processing", P)
    pg = r.section(proc, "postgres", "spec.processing")
    dsn_ref = r.section(pg, "dsnSecretRef", "spec.processing.postgres")
    config_raw = r.section(proc, "config", "spec.processing")
    config: list[tuple[str, str]] = []
    for key, value in sorted(config_raw.items()):
        if not isinstance(value, str):
            r.problems.append((f"spec.processing.config.{key}", "must be a string"))
        else:
            config.append((str(key), value))
    sink = r.get(proc, "sink", "spec.processing", str, None)
    handler = r.get(proc, "handler", "spec.processing", str, None)
    if not proc:
        sink = "log"  # a CR without a processing section logs its records (useful for a first try)
    failure = r.section(raw, "failure", P)
    scaling = r.section(raw, "scaling", P)
    behavior = r.section(scaling, "behavior", "spec.scaling")
    up = r.section(behavior, "scaleUp", "spec.scaling.behavior")
    down = r.section(behavior, "scaleDown", "spec.scaling.behavior")
    drain = r.section(raw, "drain", P)
    template = r.section(raw, "template", P)
    env_raw = r.get(template, "env", "spec.template", list, [])
    resources = r.section(template, "resources", "spec.template")

    spec = GroupSpec(
        kafka=kafka_spec,
        topic=r.get(raw, "topic", P, str, "", required=True),
        group_id=r.get(raw, "groupId", P, str, "", required=True),
        batch=BatchSpec(
            max_records=r.get(batch, "maxRecords", "spec.batch", int, 500),
            timeout_ms=r.get(batch, "timeoutMs", "spec.batch", int, 1000),
        ),
        processing=ProcessingSpec(
            sink=sink,
            handler=handler,
            concurrency=r.get(proc, "concurrency", "spec.processing", int, 1),
            config=tuple(config),
            postgres=PostgresSpec(
                dsn_secret_name=r.get(dsn_ref, "name", "spec.processing.postgres.dsnSecretRef", str, None),
                dsn_secret_key=r.get(dsn_ref, "key", "spec.processing.postgres.dsnSecretRef", str, "dsn"),
                table=r.get(pg, "table", "spec.processing.postgres", str, "lagpilot_records"),
                mode=r.get(pg, "mode", "spec.processing.postgres", str, "insert"),
            ),
        ),
        failure=FailureSpec(
            max_retries=r.get(failure, "maxRetries", "spec.failure", int, 3),
            backoff_ms=r.get(failure, "backoffMs", "spec.failure", int, 200),
            policy=r.get(failure, "policy", "spec.failure", str, "deadLetter"),
            dead_letter_topic=r.get(failure, "deadLetterTopic", "spec.failure", str, None),
        ),
        scaling=ScalingSpec(
            min_replicas=r.get(scaling, "minReplicas", "spec.scaling", int, 1),
            max_replicas=r.get(scaling, "maxReplicas", "spec.scaling", int, 10),
            tolerance=r.get(scaling, "tolerance", "spec.scaling", _NUM, 0.1),
            poll_interval_seconds=r.get(scaling, "pollIntervalSeconds", "spec.scaling", _NUM, 15.0),
            scale_up_window_seconds=r.get(up, "stabilizationWindowSeconds",
                                          "spec.scaling.behavior.scaleUp", _NUM, 0.0),
            scale_down_window_seconds=r.get(down, "stabilizationWindowSeconds",
                                            "spec.scaling.behavior.scaleDown", _NUM, 300.0),
        ),
        catch_up_sla_seconds=r.get(raw, "catchUpSLASeconds", P, _NUM, 600.0),
        drain=DrainSpec(
            enabled=r.get(drain, "enabled", "spec.drain", bool, True),
            split_factor=r.get(drain, "splitFactor", "spec.drain", int, 4),
            max_tasks=r.get(drain, "maxTasks", "spec.drain", int, 16),
            min_backlog_records=r.get(drain, "minBacklogRecords", "spec.drain", int, 10000),
            cancel=r.get(drain, "cancel", "spec.drain", bool, False),
        ),
        paused=r.get(raw, "paused", P, bool, False),
        template=TemplateSpec(
            image=r.get(template, "image", "spec.template", str, DEFAULT_IMAGE),
            image_pull_policy=r.get(template, "imagePullPolicy", "spec.template", str, "IfNotPresent"),
            resources=dict(resources),
            env=tuple(e if isinstance(e, Mapping) else {} for e in env_raw),
        ),
    )
    if r.problems:
        raise SpecError(r.problems)
    return spec.validate()
