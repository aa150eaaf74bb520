"""The BatchConsumerGroup spec as the decisions read it: frozen dataclasses, parsed by the model.

The resource is declared once, in `lagpilot.model.spec` (fields, defaults, bounds, patterns, CEL
rules); `parse_spec` validates a CR's `spec` there (pydantic, then the CRD's CEL rules evaluated as
written) and projects the result onto the flat view below: snake_case names, sections folded
(`kafka.secret_name` for `kafka.secretRef.name`, `scaling.scale_down_window_seconds` for
`scaling.behavior.scaleDown.stabilizationWindowSeconds`), seconds as floats. The view's defaults
are read from the model, not written again; the simulator builds the view directly
(`lagpilot.sim.params`). Every error names the field path (`spec.scaling.maxReplicas`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from lagpilot.model import spec as m
from lagpilot.model.quantity import parse_quantity
from lagpilot.model.validate import SpecError, parse, stored

__all__ = [
    "DEFAULT_IMAGE",
    "TEST_HOOK_PREFIX",
    "BatchSpec",
    "DrainSpec",
    "FailureSpec",
    "GroupSpec",
    "KafkaSpec",
    "PostgresSpec",
    "ProcessingSpec",
    "ScalingSpec",
    "SpecError",
    "TemplateSpec",
    "parse_quantity",
    "parse_spec",
]


def _default(model: type[BaseModel], name: str) -> Any:
    """The model's default of a field (the one place defaults are written)."""
    return model.model_fields[name].get_default(call_default_factory=True)


DEFAULT_IMAGE: str = _default(m.Template, "image")
# the runtime's test fault hooks (LP_TEST_*): never from a CR (a CEL rule of the CRD); the dev pod
# runner sets them
TEST_HOOK_PREFIX = "LP_TEST_"


@dataclasses.dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    security_protocol: str = _default(m.Kafka, "security_protocol")
    sasl_mechanism: str | None = None
    secret_name: str | None = None
    session_timeout_ms: int = _default(m.Kafka, "session_timeout_ms")
    # OAUTHBEARER (OIDC client credentials): where the clients fetch their tokens
    oauth_token_endpoint_url: str | None = None
    oauth_scope: str | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_oauthbearer(self) -> bool:
        return self.uses_sasl and self.sasl_mechanism == "OAUTHBEARER"

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    max_records: int = _default(m.Batch, "max_records")
    timeout_ms: int = _default(m.Batch, "timeout_ms")


@dataclasses.dataclass(frozen=True)
class PostgresSpec:
    dsn_secret_name: str | None = None
    dsn_secret_key: str = _default(m.DsnSecretRef, "key")
    table: str = _default(m.Postgres, "table")
    mode: str = _default(m.Postgres, "mode")


@dataclasses.dataclass(frozen=True)
class ProcessingSpec:
    sink: str | None = None
    handler: str | None = None
    concurrency: int = _default(m.Processing, "concurrency")
    # sorted (key, value) pairs: hashable and deterministic when rendered as JSON
    config: tuple[tuple[str, str], ...] = ()
    postgres: PostgresSpec = PostgresSpec()

    @property
    def config_dict(self) -> dict[str, str]:
        return dict(self.config)


@dataclasses.dataclass(frozen=True)
class FailureSpec:
    max_retries: int = _default(m.Failure, "max_retries")
    backoff_ms: int = _default(m.Failure, "backoff_ms")
    policy: str = _default(m.Failure, "policy")
    dead_letter_topic: str | None = None  # None: "<topic>.dlq"


@dataclasses.dataclass(frozen=True)
class ScalingSpec:
    min_replicas: int = _default(m.Scaling, "min_replicas")
    max_replicas: int = _default(m.Scaling, "max_replicas")
    tolerance: float = float(_default(m.Scaling, "tolerance"))
    poll_interval_seconds: float = float(_default(m.Scaling, "poll_interval_seconds"))
    scale_up_window_seconds: float = float(_default(m.ScaleUp, "stabilization_window_seconds"))
    scale_down_window_seconds: float = float(_default(m.ScaleDown, "stabilization_window_seconds"))


@dataclasses.dataclass(frozen=True)
class DrainSpec:
    enabled: bool = _default(m.Drain, "enabled")
    split_factor: int | None = None  # optional cap (issue 25): None, the planner sizes each partition
    max_tasks: int = _default(m.Drain, "max_tasks")
    min_backlog_records: int = _default(m.Drain, "min_backlog_records")
    cancel: bool = _default(m.Drain, "cancel")
    launcher: str = _default(m.Drain, "launcher")  # job: a batch/v1 Job; sparkApplication: kubeflow's CR
    assist_replicas: bool = _default(m.Drain, "assist_replicas")
    busy: bool = _default(m.Drain, "busy")  # issue 25 item 2: drains stay busy across a burst
    warm_runtime: bool = _default(m.Drain, "warm_runtime")  # a long-lived drain runtime per CR
    # spec.drain.warmRuntimeCooldownSeconds, with warm_runtime only: None = always running; a number =
    # on demand (decide.runtime: scaled 0 -> 1 for a burst or a due drain, kept this long after)
    warm_runtime_cooldown_s: int | None = None
    # spec.drain.resources as stored (core/v1 ResourceRequirements): the drain Job's and the warm
    # runtime's container; empty: template.resources, else the drain defaults (act.drain_manifests)
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def fallback_tasks(self) -> int:
        """Tasks a partition's range is cut into when its plan carries no per-partition count (a
        status written before plans did): splitFactor, else 4 (the CRD's default before issue 25)."""
        return self.split_factor if self.split_factor is not None else 4


@dataclasses.dataclass(frozen=True)
class TemplateSpec:
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = _default(m.Template, "image_pull_policy")
    # core/v1 ResourceRequirements and EnvVar list as stored (CRD names), passed through to the
    # Deployment
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
    catch_up_sla_seconds: float = float(_default(m.BatchConsumerGroupSpec, "catch_up_sla_seconds"))
    drain: DrainSpec = DrainSpec()
    paused: bool = _default(m.BatchConsumerGroupSpec, "paused")
    template: TemplateSpec = TemplateSpec()
    # Act: observe, decide and act (scale, drain). Recommend: observe, decide and publish the
    # decisions (status.recommendation, events, metrics) without touching the Deployment, drains or
    # offsets; for groups run by something else too (docs/recommend.md)
    mode: str = _default(m.BatchConsumerGroupSpec, "mode")

    @property
    def recommend_only(self) -> bool:
        return self.mode == "Recommend"

    @property
    def dead_letter_topic(self) -> str:
        return self.failure.dead_letter_topic or f"{self.topic}.dlq"

    @classmethod
    def from_model(cls, s: m.BatchConsumerGroupSpec) -> GroupSpec:
        """The view of a validated model."""
        k, p, sc, d, t = s.kafka, s.processing, s.scaling, s.drain, s.template
        pg = p.postgres
        out = stored(s)
        return cls(
            kafka=KafkaSpec(
                bootstrap_servers=k.bootstrap_servers,
                security_protocol=k.security_protocol,
                sasl_mechanism=k.sasl_mechanism,
                secret_name=k.secret_ref.name if k.secret_ref else None,
                session_timeout_ms=k.session_timeout_ms,
                oauth_token_endpoint_url=k.oauthbearer.token_endpoint_url if k.oauthbearer else None,
                oauth_scope=k.oauthbearer.scope if k.oauthbearer else None,
            ),
            topic=s.topic,
            group_id=s.group_id,
            batch=BatchSpec(max_records=s.batch.max_records, timeout_ms=s.batch.timeout_ms),
            processing=ProcessingSpec(
                sink=p.sink,
                handler=p.handler,
                concurrency=p.concurrency,
                config=tuple(sorted((p.config or {}).items())),
                postgres=PostgresSpec(
                    dsn_secret_name=pg.dsn_secret_ref.name,
                    dsn_secret_key=pg.dsn_secret_ref.key,
                    table=pg.table,
                    mode=pg.mode,
                )
                if pg
                else PostgresSpec(),
            ),
            failure=FailureSpec(
                max_retries=s.failure.max_retries,
                backoff_ms=s.failure.backoff_ms,
                policy=s.failure.policy,
                dead_letter_topic=s.failure.dead_letter_topic,
            ),
            scaling=ScalingSpec(
                min_replicas=sc.min_replicas,
                max_replicas=sc.max_replicas,
                tolerance=float(sc.tolerance),
                poll_interval_seconds=float(sc.poll_interval_seconds),
                scale_up_window_seconds=float(sc.behavior.scale_up.stabilization_window_seconds),
                scale_down_window_seconds=float(sc.behavior.scale_down.stabilization_window_seconds),
            ),
            catch_up_sla_seconds=float(s.catch_up_sla_seconds),
            drain=DrainSpec(
                enabled=d.enabled,
                split_factor=d.split_factor,
                max_tasks=d.max_tasks,
                min_backlog_records=d.min_backlog_records,
                cancel=d.cancel,
                launcher=d.launcher,
                assist_replicas=d.assist_replicas,
                busy=d.busy,
                warm_runtime=d.warm_runtime,
                warm_runtime_cooldown_s=d.warm_runtime_cooldown_seconds,
                resources=out["drain"].get("resources", {}),
            ),
            paused=s.paused,
            mode=s.mode,
            template=TemplateSpec(
                image=t.image,
                image_pull_policy=t.image_pull_policy,
                resources=out["template"].get("resources", {}),
                env=tuple(out["template"].get("env", [])),
            ),
        )


def parse_spec(raw: Mapping[str, Any]) -> GroupSpec:
    """Build a validated GroupSpec from the CR's `spec` dict; raise SpecError naming the fields.

    The one leniency: a spec without `processing` (which the CRD requires) parses as `sink: log`,
    for tests that build specs by hand.
    """
    if isinstance(raw, Mapping) and raw.get("processing") is None:
        raw = {**raw, "processing": {"sink": "log"}}
    return GroupSpec.from_model(parse(raw))
