"""The operator's configuration: every LAGPILOT_* environment variable the operator reads, in one place.

One reader (`Env`: numbers, integers, flags and text, each error naming its variable) and one
record (`OperatorConfig`, read once at start-up and passed down through kopf's memo and the cycle's
dependencies). The drain Job's settings (`act.drain_manifests.DrainSettings`) and the leader
election's timings (`decide.leader.LeaseTiming`) are read with the same reader. Documented for
users in docs/operator.md ("Environment").

Flags: 1, true, yes, on / 0, false, no, off (any case); empty or unset is the default; anything else
is an error naming the variable (a typo no longer silently means "on" or "off").
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


class Env:
    """Typed reads of environment variables (``os.environ`` unless a mapping is given)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env: Mapping[str, str] = os.environ if env is None else env

    def raw(self, key: str) -> str | None:
        value = self._env.get(key)
        return None if value is None or value.strip() == "" else value.strip()

    def number(self, key: str, default: float, *, minimum: float | None = 0.0) -> float:
        raw = self.raw(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"{key} must be >= {minimum:g}, got {raw!r}")
        return value

    def optional_number(self, key: str, *, minimum: float | None = 0.0) -> float | None:
        return None if self.raw(key) is None else self.number(key, 0.0, minimum=minimum)

    def integer(self, key: str, default: int, *, minimum: int | None = 0) -> int:
        raw = self.raw(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"{key} must be >= {minimum}, got {raw!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        raw = self.raw(key)
        if raw is None:
            return default
        if raw.lower() in TRUE:
            return True
        if raw.lower() in FALSE:
            return False
        raise ValueError(f"{key} must be one of {sorted(TRUE | FALSE)}, got {raw!r}")

    def text(self, key: str, default: str = "") -> str:
        raw = self.raw(key)
        return default if raw is None else raw


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings (docs/operator.md "Environment"); every field has its variable."""

    pod_start_seconds: float = 30.0  # LAGPILOT_POD_START_SECONDS: a new consumer pod's start-up
    kafka_timeout_seconds: float = 10.0  # LAGPILOT_KAFKA_TIMEOUT_SECONDS: per-cycle Kafka budget
    max_backoff_seconds: float = 300.0  # LAGPILOT_MAX_BACKOFF_SECONDS: ceiling of the retry delay
    min_backoff_seconds: float = 5.0
    cycle_workers: int = 32  # LAGPILOT_CYCLE_WORKERS: threads for the per-CR cycles (>= 1)
    status_heartbeat_seconds: float = 60.0  # LAGPILOT_STATUS_HEARTBEAT_SECONDS
    observe_max_age_seconds: float = 5.0  # LAGPILOT_OBSERVE_MAX_AGE_SECONDS: oldest shared view a cycle takes
    offsets_snapshot: bool = True  # LAGPILOT_OFFSETS_SNAPSHOT: committed offsets from __consumer_offsets
    kopf_scanning: bool = False  # LAGPILOT_KOPF_SCANNING: kopf's cluster-wide CRD/namespace scans
    crd_check_seconds: float = 300.0  # LAGPILOT_CRD_CHECK_SECONDS: the installed CRD re-read this often
    delete_drain_wait_seconds: float | None = (
        None  # LAGPILOT_DELETE_DRAIN_WAIT_SECONDS (None: deletion's default)
    )
    drain_ack_timeout_seconds: float | None = (
        None  # LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS (None: the executor's)
    )
    drain_stall_seconds: float | None = None  # LAGPILOT_DRAIN_STALL_SECONDS: no progress -> attempt failed
    drain_no_pod_seconds: float | None = None  # LAGPILOT_DRAIN_NO_POD_SECONDS: Job without a pod -> failed
    drain_startup_seconds: float | None = None  # LAGPILOT_DRAIN_STARTUP_SECONDS: no task started -> failed
    drain_quiesce_timeout_seconds: float | None = None  # LAGPILOT_DRAIN_QUIESCE_TIMEOUT_SECONDS
    metrics_port: int = 9090  # LAGPILOT_OPERATOR_METRICS_PORT (0: no metrics endpoint)
    log_level: str = "INFO"  # LAGPILOT_LOG_LEVEL
    pod_name: str = ""  # LAGPILOT_POD_NAME: the Lease holder identity (downward API)
    operator_namespace: str = ""  # LAGPILOT_OPERATOR_NAMESPACE: where the Lease lives (all namespaces)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        e = Env(env)
        return cls(
            pod_start_seconds=e.number("LAGPILOT_POD_START_SECONDS", cls.pod_start_seconds),
            kafka_timeout_seconds=e.number("LAGPILOT_KAFKA_TIMEOUT_SECONDS", cls.kafka_timeout_seconds),
            max_backoff_seconds=e.number("LAGPILOT_MAX_BACKOFF_SECONDS", cls.max_backoff_seconds),
            cycle_workers=max(1, int(e.number("LAGPILOT_CYCLE_WORKERS", cls.cycle_workers))),
            status_heartbeat_seconds=e.number(
                "LAGPILOT_STATUS_HEARTBEAT_SECONDS", cls.status_heartbeat_seconds
            ),
            observe_max_age_seconds=e.number("LAGPILOT_OBSERVE_MAX_AGE_SECONDS", cls.observe_max_age_seconds),
            offsets_snapshot=e.flag("LAGPILOT_OFFSETS_SNAPSHOT", cls.offsets_snapshot),
            kopf_scanning=e.flag("LAGPILOT_KOPF_SCANNING", cls.kopf_scanning),
            crd_check_seconds=e.number("LAGPILOT_CRD_CHECK_SECONDS", cls.crd_check_seconds),
            delete_drain_wait_seconds=e.optional_number("LAGPILOT_DELETE_DRAIN_WAIT_SECONDS"),
            drain_ack_timeout_seconds=e.optional_number("LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS"),
            drain_stall_seconds=e.optional_number("LAGPILOT_DRAIN_STALL_SECONDS"),
            drain_no_pod_seconds=e.optional_number("LAGPILOT_DRAIN_NO_POD_SECONDS"),
            drain_startup_seconds=e.optional_number("LAGPILOT_DRAIN_STARTUP_SECONDS"),
            drain_quiesce_timeout_seconds=e.optional_number("LAGPILOT_DRAIN_QUIESCE_TIMEOUT_SECONDS"),
            metrics_port=e.integer("LAGPILOT_OPERATOR_METRICS_PORT", cls.metrics_port),
            log_level=e.text("LAGPILOT_LOG_LEVEL", cls.log_level).upper(),
            pod_name=e.text("LAGPILOT_POD_NAME"),
            operator_namespace=e.text("LAGPILOT_OPERATOR_NAMESPACE"),
        )
