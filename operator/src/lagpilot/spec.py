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
from decimal import Decimal
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SINKS = ("postgres", "log")
POSTGRES_MODES = ("insert", "upsert")
FAILURE_POLICIES = ("deadLetter", "pause", "exit")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DRAIN_LAUNCHERS = ("job", "sparkApplication")  # docs/drain.md "Launchers"
MODES = ("Act", "Recommend")
DEFAULT_IMAGE = "lagpilot/consumer:0.1.0"
# the runtime's test fault hooks (LP_TEST_*): never from a CR; the dev pod runner sets them
TEST_HOOK_PREFIX = "LP_TEST_"
CONFIG_MAX_CHARS = 10000  # spec.processing.config: keys + values (one env variable < 128 KiB)
# Patterns of crds/batchconsumergroup.yaml, character for character (a unit test compares them):
# the parser accepts exactly what the API server's OpenAPI validation accepts.
BOOTSTRAP_RE = re.compile(r'''^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])(,(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))*$''')
TOPIC_RE = re.compile(r'''^[a-zA-Z0-9._-]{1,249}$''')
GROUP_ID_RE = re.compile(r'''^[A-Za-z0-9._:-]+$''')
HANDLER_RE = re.compile(r'''^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$''')
TABLE_RE = re.compile(r'''^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$''')
DNS_SUBDOMAIN_RE = re.compile(r'''^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$''')
CONFIG_KEY_RE = re.compile(r'''^[-._a-zA-Z0-9]+$''')
IMAGE_RE = re.compile(r'''^((localhost(:[0-9]+)?|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)+(:[0-9]+)?|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?:[0-9]+|\[[0-9A-Fa-f:]+\](:[0-9]+)?)/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$''')
QUANTITY_RE = re.compile(r'''^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$''')
ENV_NAME_RE = re.compile(r'''^[-._a-zA-Z][-._a-zA-Z0-9]*$''')
FIELD_PATH_RE = re.compile(r'''^(metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs)|metadata\.(labels|annotations)\['(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?'\])$''')
RESOURCE_FIELD_RE = re.compile(r'''^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+)$''')


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
    session_timeout_ms: int = 30000

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
    split_factor: int | None = None  # optional cap (issue 25): None, the planner sizes each partition
    max_tasks: int = 16
    min_backlog_records: int = 10000
    cancel: bool = False
    launcher: str = "job"  # job: a batch/v1 Job; sparkApplication: the kubeflow spark-operator's CR
    assist_replicas: bool = False  # opt-in: fewer replicas than the load needs, drains carry the excess
    warm_runtime: bool = False  # opt-in: a long-lived drain runtime per CR (lagpilot.act.drain_runtime)
    # spec.drain.warmRuntimeCooldownSeconds, with warm_runtime only: None = always running; a number = on
    # demand (decide.runtime: scaled 0 -> 1 for a burst or a due drain, kept this long after the last drain)
    warm_runtime_cooldown_s: int | None = None

    @property
    def fallback_tasks(self) -> int:
        """Tasks a partition's range is cut into when its plan carries no per-partition count (a
        status written before plans did): splitFactor, else 4 (the CRD's default before issue 25)."""
        return self.split_factor if self.split_factor is not None else 4


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
    # Act: observe, decide and act (scale, drain). Recommend: observe, decide and publish the
    # decisions (status.recommendation, events, metrics) without touching the Deployment, drains or
    # offsets; for groups run by something else too (docs/recommend.md)
    mode: str = "Act"

    @property
    def recommend_only(self) -> bool:
        return self.mode == "Recommend"

    @property
    def dead_letter_topic(self) -> str:
        return self.failure.dead_letter_topic or f"{self.topic}.dlq"

    def validate(self) -> "GroupSpec":
        """Check every rule of the CRD (OpenAPI bounds and patterns, CEL cross-field rules) on the
        typed spec; raise SpecError naming every bad field with the path the API server names.

        Kept identical to crds/batchconsumergroup.yaml (tests/unit/test_spec_crd_agreement.py
        compares the patterns and bounds; tests/real/test_crd_parser_agreement.py compares verdicts
        on the real API server). Presence rules that the typed spec cannot see (a section absent
        vs. empty) are checked on the raw dict by `_raw_problems`.
        """
        problems: list[tuple[str, str]] = []

        def need(ok: bool, path: str, msg: str) -> None:
            if not ok:
                problems.append((path, msg))

        def bounds(value: float, lo: float | None, hi: float | None, path: str) -> None:
            if lo is not None and hi is not None:
                need(lo <= value <= hi, path, f"must be in {lo}..{hi}")
            elif lo is not None:
                need(value >= lo, path, f"must be >= {lo}")

        def text(value: str, path: str, pattern: re.Pattern[str] | None, max_len: int,
                 min_len: int = 1, what: str = "") -> bool:
            ok = min_len <= len(value) <= max_len and (pattern is None or bool(pattern.fullmatch(value)))
            need(ok, path, what or f"must be {min_len}-{max_len} characters matching {pattern.pattern if pattern else '.*'}")
            return ok

        k = self.kafka
        text(k.bootstrap_servers, "spec.kafka.bootstrapServers", BOOTSTRAP_RE, 2048, 3,
             "must be a comma-separated list of host:port (no spaces, ports 1-65535, no empty "
             "host labels; IPv6 in brackets)")
        need(k.security_protocol in SECURITY_PROTOCOLS, "spec.kafka.securityProtocol",
             f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if k.sasl_mechanism is not None:
            need(k.sasl_mechanism in SASL_MECHANISMS, "spec.kafka.saslMechanism",
                 f"must be one of {', '.join(SASL_MECHANISMS)}")
        if k.uses_sasl:
            need(k.sasl_mechanism is not None, "spec.kafka.saslMechanism",
                 f"is required when spec.kafka.securityProtocol is {k.security_protocol}")
        else:
            need(k.sasl_mechanism is None, "spec.kafka.saslMechanism",
                 "is only allowed when spec.kafka.securityProtocol is SASL_PLAINTEXT or SASL_SSL")
        if k.security_protocol == "PLAINTEXT":
            need(k.secret_name is None, "spec.kafka.secretRef",
                 "is only allowed when spec.kafka.securityProtocol is SSL, SASL_PLAINTEXT or "
                 "SASL_SSL: PLAINTEXT never uses credentials")
        else:
            need(k.secret_name is not None, "spec.kafka.secretRef",
                 f"is required when spec.kafka.securityProtocol is {k.security_protocol}")
        bounds(k.session_timeout_ms, 6_000, 300_000, "spec.kafka.sessionTimeoutMs")
        if k.secret_name is not None:
            text(k.secret_name, "spec.kafka.secretRef.name", DNS_SUBDOMAIN_RE, 253,
                 what="must be a DNS subdomain (lower-case letters, digits, '-', '.'), at most 253 characters")

        if text(self.topic, "spec.topic", TOPIC_RE, 249,
                what="must be 1-249 characters of letters, digits, '.', '_' or '-'"):
            need(self.topic not in (".", ".."), "spec.topic", 'must not be "." or ".."')
        need(bool(GROUP_ID_RE.fullmatch(self.group_id)) and len(self.group_id) <= 255, "spec.groupId",
             "must be 1-255 characters of letters, digits, '.', '_', ':' or '-'")

        bounds(self.batch.max_records, 1, 100_000, "spec.batch.maxRecords")
        bounds(self.batch.timeout_ms, 1, 600_000, "spec.batch.timeoutMs")
        if self.catch_up_sla_seconds >= 1:
            need(self.batch.timeout_ms < self.catch_up_sla_seconds * 1000, "spec.batch.timeoutMs",
                 "must be shorter than spec.catchUpSLASeconds: a batch that waits longer than the "
                 "SLA can never meet it")

        p = self.processing
        need((p.sink is None) != (p.handler is None), "spec.processing",
             "exactly one of spec.processing.sink or spec.processing.handler must be set")
        if p.sink is not None:
            need(p.sink in SINKS, "spec.processing.sink", f"must be one of {', '.join(SINKS)}")
        if p.handler is not None:
            text(p.handler, "spec.processing.handler", HANDLER_RE, 256, 3,
                 "must look like 'package.module:function'")
        bounds(p.concurrency, 1, 64, "spec.processing.concurrency")
        need(len(p.config) <= 64, "spec.processing.config", "must have at most 64 keys")
        # the config reaches the handler as ONE environment variable (JSON): the kernel refuses a
        # process whose variable exceeds 128 KiB (E2BIG); 10000 characters stay below it even if
        # every one needs the longest JSON escape (12 bytes). The CRD has the same rule (CEL).
        need(sum(len(k) + len(v) for k, v in p.config) <= CONFIG_MAX_CHARS, "spec.processing.config",
             f"keys and values must total at most {CONFIG_MAX_CHARS} characters (the handler's config is one "
             "environment variable, below the kernel's 128 KiB limit)")
        for key, value in p.config:
            need(len(value) <= 4096, f"spec.processing.config.{key}", "must be at most 4096 characters")
        pg = p.postgres
        if pg.dsn_secret_name is not None:
            text(pg.dsn_secret_name, "spec.processing.postgres.dsnSecretRef.name", DNS_SUBDOMAIN_RE, 253,
                 what="must be a DNS subdomain (lower-case letters, digits, '-', '.'), at most 253 characters")
        _check_key(pg.dsn_secret_key, "spec.processing.postgres.dsnSecretRef.key", need)
        need(bool(TABLE_RE.fullmatch(pg.table)) and len(pg.table) <= 127, "spec.processing.postgres.table",
             "must be an identifier or schema.identifier (each at most 63 characters, no quoting)")
        need(pg.mode in POSTGRES_MODES, "spec.processing.postgres.mode",
             f"must be one of {', '.join(POSTGRES_MODES)}")

        f = self.failure
        bounds(f.max_retries, 0, 100, "spec.failure.maxRetries")
        bounds(f.backoff_ms, 0, 600_000, "spec.failure.backoffMs")
        need(f.policy in FAILURE_POLICIES, "spec.failure.policy",
             f"must be one of {', '.join(FAILURE_POLICIES)}")
        dlq = f.dead_letter_topic
        if dlq is not None:
            if text(dlq, "spec.failure.deadLetterTopic", TOPIC_RE, 249,
                    what="must be 1-249 characters of letters, digits, '.', '_' or '-'"):
                need(dlq not in (".", ".."), "spec.failure.deadLetterTopic", 'must not be "." or ".."')
                need(not dlq.startswith("__"), "spec.failure.deadLetterTopic",
                     "must not start with \"__\" (Kafka's internal topics)")
            need(dlq != self.topic, "spec.failure.deadLetterTopic", "must differ from spec.topic")
            need(dlq.replace(".", "_") != self.topic.replace(".", "_"), "spec.failure.deadLetterTopic",
                 "must not collide with spec.topic ('.' and '_' are the same character to Kafka)")
            need(f.policy == "deadLetter", "spec.failure.deadLetterTopic",
                 "is only allowed when spec.failure.policy is deadLetter")
        elif f.policy == "deadLetter":
            need(len(self.topic) <= 245, "spec.topic",
                 "must be at most 245 characters while spec.failure.policy is deadLetter without "
                 "spec.failure.deadLetterTopic: the default <topic>.dlq must fit 249 characters")

        s = self.scaling
        bounds(s.min_replicas, 0, 1000, "spec.scaling.minReplicas")
        bounds(s.max_replicas, 1, 1000, "spec.scaling.maxReplicas")
        need(s.min_replicas <= s.max_replicas, "spec.scaling.minReplicas",
             f"({s.min_replicas}) must be less than or equal to spec.scaling.maxReplicas ({s.max_replicas})")
        need(0 <= s.tolerance <= 1, "spec.scaling.tolerance", "must be in [0, 1]")
        bounds(s.poll_interval_seconds, 1, 3600, "spec.scaling.pollIntervalSeconds")
        need(s.poll_interval_seconds <= self.catch_up_sla_seconds, "spec.scaling.pollIntervalSeconds",
             "must be less than or equal to spec.catchUpSLASeconds")
        bounds(s.scale_up_window_seconds, 0, 3600, "spec.scaling.behavior.scaleUp.stabilizationWindowSeconds")
        bounds(s.scale_down_window_seconds, 0, 3600,
               "spec.scaling.behavior.scaleDown.stabilizationWindowSeconds")
        bounds(self.catch_up_sla_seconds, 1, 604_800, "spec.catchUpSLASeconds")

        d = self.drain
        if d.split_factor is not None:
            bounds(d.split_factor, 1, 256, "spec.drain.splitFactor")
        bounds(d.max_tasks, 1, 1024, "spec.drain.maxTasks")
        bounds(d.min_backlog_records, 0, None, "spec.drain.minBacklogRecords")
        need(self.mode in MODES, "spec.mode", f"must be one of {', '.join(MODES)}")
        need(d.launcher in DRAIN_LAUNCHERS, "spec.drain.launcher", f"must be one of {', '.join(DRAIN_LAUNCHERS)}")
        need(not (d.warm_runtime and d.launcher == "sparkApplication"), "spec.drain.warmRuntime",
             "spec.drain.warmRuntime must be false when spec.drain.launcher is sparkApplication "
             "(the warm runtime serves drain Jobs only)")
        if d.warm_runtime_cooldown_s is not None:
            bounds(d.warm_runtime_cooldown_s, 0, 86_400, "spec.drain.warmRuntimeCooldownSeconds")
            need(d.warm_runtime, "spec.drain.warmRuntimeCooldownSeconds",
                 "spec.drain.warmRuntimeCooldownSeconds is allowed only with spec.drain.warmRuntime true "
                 "(it says when the warm drain runtime runs)")

        t = self.template
        text(t.image, "spec.template.image", IMAGE_RE, 1024,
             what="must be an image reference [registry[:port]/]name[:tag][@digest] (lower-case name)")
        need(t.image_pull_policy in PULL_POLICIES, "spec.template.imagePullPolicy",
             f"must be one of {', '.join(PULL_POLICIES)}")
        _check_resources(t.resources, need)
        _check_env(t.env, need)
        if problems:
            raise SpecError(problems)
        return self


def _check_key(key: str, path: str, need: Any) -> None:
    """A Secret/ConfigMap key as Kubernetes validates it (IsConfigMapKey)."""
    need(1 <= len(key) <= 253 and bool(CONFIG_KEY_RE.fullmatch(key)), path,
         "must be 1-253 characters of letters, digits, '-', '_' or '.'")
    need(key != "." and not key.startswith(".."), path, 'must not be "." or start with ".."')


_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: Any) -> Decimal | None:
    """A Kubernetes resource quantity (int, or a string the CRD's QUANTITY_RE accepts) as a Decimal;
    None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str) or len(value) > 64 or not QUANTITY_RE.fullmatch(value):
        return None
    m = re.match(r"^\+?([0-9]*\.?[0-9]*)(.*)$", value)
    assert m is not None  # QUANTITY_RE matched
    number, suffix = Decimal(m.group(1) if m.group(1) not in ("", ".") else "0"), m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))  # e/E exponent


def _check_resources(resources: Mapping[str, Any], need: Any) -> None:
    parsed: dict[str, dict[str, Decimal]] = {}
    for part in ("limits", "requests"):
        values = resources.get(part)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            need(False, f"spec.template.resources.{part}", "must be an object")
            continue
        need(len(values) <= 16, f"spec.template.resources.{part}", "must have at most 16 resources")
        parsed[part] = {}
        for name, raw in values.items():
            q = parse_quantity(raw)
            if isinstance(raw, int) and not isinstance(raw, bool) and raw < 0:
                need(False, f"spec.template.resources.{part}.{name}", "must be >= 0")
            elif q is None:
                need(False, f"spec.template.resources.{part}.{name}",
                     "must be a non-negative quantity such as 250m, 1, 512Mi")
            else:
                parsed[part][name] = q
    limits, requests = parsed.get("limits", {}), parsed.get("requests", {})
    bad = sorted(r for r in requests if r in limits and requests[r] > limits[r])
    need(not bad, "spec.template.resources.requests",
         f"must be less than or equal to spec.template.resources.limits ({', '.join(bad)})")
    extra = sorted(set(resources) - {"limits", "requests"})
    need(not extra, f"spec.template.resources.{extra[0] if extra else ''}", "unknown field")


_ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


def _check_env(env: tuple[Mapping[str, Any], ...], need: Any) -> None:
    need(len(env) <= 64, "spec.template.env", "must have at most 64 entries")
    seen: set[str] = set()
    for i, e in enumerate(env):
        at = f"spec.template.env[{i}]"
        name = e.get("name")
        if not isinstance(name, str):
            need(False, f"{at}.name", "is required")
        else:
            need(1 <= len(name) <= 256 and bool(ENV_NAME_RE.fullmatch(name)), f"{at}.name",
                 "must be 1-256 characters of letters, digits, '-', '.', '_', not starting with a digit")
            need(not name.startswith("LAGPILOT_"), f"{at}.name",
                 "names starting with LAGPILOT_ are reserved for the lagpilot runtime")
            need(not name.startswith(TEST_HOOK_PREFIX), f"{at}.name",
                 f"names starting with {TEST_HOOK_PREFIX} are reserved for the runtime's tests (fault hooks)")
            need(name not in seen, at, f"duplicate env name {name!r}")
            seen.add(name)
        value, value_from = e.get("value"), e.get("valueFrom")
        if value is not None:
            need(isinstance(value, str) and len(value) <= 32768, f"{at}.value",
                 "must be a string of at most 32768 characters")
        need(not (value is not None and value_from is not None), at,
             "an env entry takes value or valueFrom, not both")
        if value_from is None:
            continue
        if not isinstance(value_from, Mapping):
            need(False, f"{at}.valueFrom", "must be an object")
            continue
        vf = f"{at}.valueFrom"
        need(sum(1 for src in _ENV_SOURCES if value_from.get(src) is not None) == 1, vf,
             "valueFrom takes exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef")
        for src in ("secretKeyRef", "configMapKeyRef"):
            ref = value_from.get(src)
            if ref is None:
                continue
            ref = ref if isinstance(ref, Mapping) else {}
            ref_name, ref_key = ref.get("name"), ref.get("key")
            if not isinstance(ref_name, str):
                need(False, f"{vf}.{src}.name", "is required")
            else:
                need(1 <= len(ref_name) <= 253 and bool(DNS_SUBDOMAIN_RE.fullmatch(ref_name)), f"{vf}.{src}.name",
                     "must be a DNS subdomain (lower-case letters, digits, '-', '.'), at most 253 characters")
            if not isinstance(ref_key, str):
                need(False, f"{vf}.{src}.key", "is required")
            else:
                _check_key(ref_key, f"{vf}.{src}.key", need)
        field_ref = value_from.get("fieldRef")
        if isinstance(field_ref, Mapping):
            need(field_ref.get("apiVersion") in (None, "v1"), f"{vf}.fieldRef.apiVersion", "must be v1")
            fp = field_ref.get("fieldPath")
            need(isinstance(fp, str) and len(fp) <= 320 and bool(FIELD_PATH_RE.fullmatch(fp)),
                 f"{vf}.fieldRef.fieldPath",
                 "must be a field Kubernetes supports for env: metadata.name, metadata.namespace, "
                 "metadata.uid, metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, "
                 "spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP, status.podIPs")
        res_ref = value_from.get("resourceFieldRef")
        if isinstance(res_ref, Mapping):
            res = res_ref.get("resource")
            need(isinstance(res, str) and len(res) <= 64 and bool(RESOURCE_FIELD_RE.fullmatch(res)),
                 f"{vf}.resourceFieldRef.resource",
                 "must be limits.<r> or requests.<r> for cpu, memory, ephemeral-storage, hugepages-<size>")


def _raw_problems(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Presence rules of the CRD that the typed spec cannot tell apart (absent vs. empty)."""
    problems: list[tuple[str, str]] = []
    proc = raw.get("processing")
    if isinstance(proc, Mapping):
        pg = proc.get("postgres")
        if proc.get("sink") == "postgres" and pg is None:
            problems.append(("spec.processing.postgres", "is required when spec.processing.sink is postgres"))
        if pg is not None and proc.get("sink") != "postgres":
            problems.append(("spec.processing.postgres",
                             "is only allowed when spec.processing.sink is postgres"))
        if isinstance(pg, Mapping):
            ref = pg.get("dsnSecretRef")
            if ref is None:
                problems.append(("spec.processing.postgres.dsnSecretRef", "is required"))
            elif isinstance(ref, Mapping) and ref.get("name") is None:
                problems.append(("spec.processing.postgres.dsnSecretRef.name", "is required"))
    kafka = raw.get("kafka")
    if isinstance(kafka, Mapping):
        ref = kafka.get("secretRef")
        if isinstance(ref, Mapping) and ref.get("name") is None:
            problems.append(("spec.kafka.secretRef.name", "is required"))
    return problems


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
        session_timeout_ms=r.get(kafka, "sessionTimeoutMs", "spec.kafka", int, KafkaSpec.session_timeout_ms),
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
            poll_interval_seconds=float(r.get(scaling, "pollIntervalSeconds", "spec.scaling", int, 15)),
            scale_up_window_seconds=float(r.get(up, "stabilizationWindowSeconds",
                                                "spec.scaling.behavior.scaleUp", int, 0)),
            scale_down_window_seconds=float(r.get(down, "stabilizationWindowSeconds",
                                                  "spec.scaling.behavior.scaleDown", int, 300)),
        ),
        catch_up_sla_seconds=float(r.get(raw, "catchUpSLASeconds", P, int, 600)),
        drain=DrainSpec(
            enabled=r.get(drain, "enabled", "spec.drain", bool, True),
            split_factor=r.get(drain, "splitFactor", "spec.drain", int, None),
            max_tasks=r.get(drain, "maxTasks", "spec.drain", int, 16),
            min_backlog_records=r.get(drain, "minBacklogRecords", "spec.drain", int, 10000),
            cancel=r.get(drain, "cancel", "spec.drain", bool, False),
            launcher=r.get(drain, "launcher", "spec.drain", str, "job"),
            assist_replicas=r.get(drain, "assistReplicas", "spec.drain", bool, False),
            warm_runtime=r.get(drain, "warmRuntime", "spec.drain", bool, DrainSpec.warm_runtime),
            warm_runtime_cooldown_s=r.get(drain, "warmRuntimeCooldownSeconds", "spec.drain", int,
                                          DrainSpec.warm_runtime_cooldown_s),
        ),
        paused=r.get(raw, "paused", P, bool, False),
        mode=r.get(raw, "mode", P, str, "Act"),
        template=TemplateSpec(
            image=r.get(template, "image", "spec.template", str, DEFAULT_IMAGE),
            image_pull_policy=r.get(template, "imagePullPolicy", "spec.template", str, "IfNotPresent"),
            resources=dict(resources),
            env=tuple(e if isinstance(e, Mapping) else {} for e in env_raw),
        ),
    )
    r.problems.extend(_raw_problems(raw))
    if r.problems:
        raise SpecError(r.problems)
    return spec.validate()
