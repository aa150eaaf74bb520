"""What one control-loop cycle (reconcile.py) is given: the CR it runs for (`GroupRef`), everything
it touches outside itself (`Deps`; fakes in unit tests) and the per-CR memo kept between cycles
(`Cache`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from lagpilot import __version__
from lagpilot.decide.status import Condition
from lagpilot.metrics import OperatorMetrics
from lagpilot.observe.kafka_observe import AdminPool, Observation, peek_oldest
from lagpilot.observe.kafka_observe import observe as kafka_observe


class Kube(Protocol):
    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]: ...
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def read_secret_data(self, namespace: str, name: str) -> dict[str, str] | None: ...
    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...
    def patch_status_guarded(
        self, namespace: str, name: str, patch: dict[str, Any], basis: Callable[[Mapping[str, Any]], bool]
    ) -> None: ...
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def apply_configmap(self, manifest: dict[str, Any]) -> None: ...


EmitFn = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)
ObserveFn = Callable[..., Observation]


@dataclasses.dataclass(frozen=True)
class GroupRef:
    namespace: str
    name: str
    uid: str
    generation: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> GroupRef:
        meta = body.get("metadata", {})
        gen = meta.get("generation")
        return cls(
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            int(gen) if gen is not None else None,
        )


@dataclasses.dataclass
class Deps:
    """Everything a cycle touches outside itself (fakes in unit tests)."""

    kube: Kube
    admin_pool: AdminPool
    metrics: OperatorMetrics
    emit: EmitFn
    pod_start_seconds: float = 30.0
    kafka_timeout_seconds: float = 10.0
    min_backoff_seconds: float = 5.0
    max_backoff_seconds: float = 300.0
    clock: Callable[[], float] = time.time
    observe: ObserveFn = kafka_observe
    # timestamps of the oldest unprocessed record per lagging partition; None: do not read them
    peek: Callable[..., dict[int, float]] | None = peek_oldest
    version: str = __version__
    drain: Any = None  # lagpilot.act.drain.DrainExecutor (drain issue); None: no drain hand-offs
    # a status whose only change is the per-partition view (reconcile/report.VIEW_KEYS), and the
    # memory ConfigMap while only its rates and windows move, are written at most this often
    status_heartbeat_seconds: float = 60.0
    observe_max_age_seconds: float = 5.0  # the oldest shared Kafka view a cycle takes (at most half its poll)
    # the installed CRD's verdict (act/crd_check.CrdCheck.outdated): Degraded=CRDOutdated; None: unchecked
    crd_outdated: Callable[[], Condition | None] | None = None


@dataclasses.dataclass
class Cache:
    """Per-CR memo: what this operator last wrote to the status and when its per-partition view was
    written, the controller's memory (the newest, written or not; read from the ConfigMap once per
    process), when and with which facts it was last written, and the failure streak."""

    last_status: dict[str, Any] | None = None
    view_written_at: float | None = None
    memory: dict[str, Any] | None = None
    memory_loaded: bool = False
    memory_written_at: float | None = None
    memory_facts: tuple[Any, ...] | None = None
    failures: int = 0
    last_error: str | None = None
    last_event_reason: str | None = None
    crd_reported: str | None = None  # the CRD verdict's message last posted as an event on this CR
    # seconds per phase of the last cycle (deployment, observe, peek, step, act, drain, write, ...):
    # logged by the control loop with a CR's first cycle and with any slow one
    timing: dict[str, float] = dataclasses.field(default_factory=dict)
    # (Secret name, when read, its data): the Kafka credentials, re-read at most every
    # SECRET_MAX_AGE_S while cycles succeed, at every attempt while they fail; never in a repr
    secret: tuple[str, float, dict[str, str]] | None = dataclasses.field(default=None, repr=False)
