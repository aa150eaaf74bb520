"""Operator-wide settings: kopf tuning (one @kopf.on.startup) and the env-driven model figures.

Environment (all optional):
- LAGPILOT_POD_START_SECONDS (default 30): how long a new consumer pod takes to start consuming;
  the projection adds it before new replicas help (pods are not instant).
- LAGPILOT_KAFKA_TIMEOUT_SECONDS (default 10): per-cycle budget for the Kafka admin requests.
- LAGPILOT_MAX_BACKOFF_SECONDS (default 300): ceiling of the retry delay after a failed cycle.
- LAGPILOT_OPERATOR_METRICS_PORT: read by run.py (0 disables the metrics endpoint).
- LAGPILOT_CYCLE_WORKERS (default 32): threads for the per-CR control-loop cycles.
- LAGPILOT_STATUS_HEARTBEAT_SECONDS (default 60): while only the per-partition view moves, the status
  is written at most this often (reconcile_report.status_write), and so is the memory ConfigMap
  while only its rates and windows move (reconcile_report.save_memory); any other change at once.
- LAGPILOT_KOPF_SCANNING (default false): let kopf scan/watch CRDs and namespaces cluster-wide.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
from typing import Any

import kopf

from lagpilot.observe.kafka_observe import AdminPool
from lagpilot.metrics import default_metrics


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    pod_start_seconds: float = 30.0
    kafka_timeout_seconds: float = 10.0
    max_backoff_seconds: float = 300.0
    min_backoff_seconds: float = 5.0
    cycle_workers: int = 32
    status_heartbeat_seconds: float = 60.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "OperatorConfig":
        env = dict(os.environ if env is None else env)

        def num(key: str, default: float) -> float:
            raw = env.get(key)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{key} must be a number, got {raw!r}") from None
            if value < 0:
                raise ValueError(f"{key} must be >= 0, got {raw!r}")
            return value

        return cls(
            pod_start_seconds=num("LAGPILOT_POD_START_SECONDS", cls.pod_start_seconds),
            kafka_timeout_seconds=num("LAGPILOT_KAFKA_TIMEOUT_SECONDS", cls.kafka_timeout_seconds),
            max_backoff_seconds=num("LAGPILOT_MAX_BACKOFF_SECONDS", cls.max_backoff_seconds),
            cycle_workers=max(1, int(num("LAGPILOT_CYCLE_WORKERS", cls.cycle_workers))),
            status_heartbeat_seconds=num("LAGPILOT_STATUS_HEARTBEAT_SECONDS", cls.status_heartbeat_seconds),
        )


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Tune kopf and build the shared, operator-wide objects (copied by reference into every CR's memo)."""
    # Progress and the diff base go to annotations under our own prefix: the CRD's status schema is
    # structural, so kopf's default `status.kopf` would be pruned (and cause endless re-handling).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.lagpilot.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.lagpilot.io", key="last-handled-configuration")
    # Only our explicit events (scale decisions, Degraded causes) and kopf's own warnings become
    # Kubernetes events; INFO log lines stay in the log instead of flooding `kubectl describe`.
    # kopf >= 1.4x posts its log lines only with posting.loggers (older kopf always did): set it, so
    # the behaviour is the same on every kopf the project allows. A finalizer's waits are not
    # warnings: handlers.waits_are_not_errors keeps kopf's retry lines for them out (issue 23, M11).
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    if hasattr(settings.posting, "loggers"):
        settings.posting.loggers = True
    # A watch that silently stalls (proxy, NAT) is noticed within minutes: the server ends it after
    # server_timeout and kopf re-lists; the client gives up a little later.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # API calls are small; a stuck call is retried instead of blocking a handler forever.
    settings.networking.request_timeout = 60
    # No cluster-wide scans of CRDs and namespaces: the operator then needs no cluster-scoped
    # permission at all (docs/rbac.md). The CRD must exist before the operator starts (the chart
    # installs it first); LAGPILOT_KOPF_SCANNING=true re-enables kopf's scans (CRDs installed later
    # are noticed; needs list/watch on customresourcedefinitions and namespaces).
    settings.scanning.disabled = os.environ.get("LAGPILOT_KOPF_SCANNING", "").lower() not in ("1", "true", "yes")
    # Create/update handlers retry with backoff when the apply fails (API server briefly away).
    settings.execution.max_workers = 16
    # The daemon per CR does its own pacing; on operator shutdown give a cycle in flight a moment.
    memo.config = OperatorConfig.from_env()
    # threads for the control-loop cycles (handlers.control_loop): each CR's cycle holds one while it
    # waits on Kafka and the API server, so size it for the CRs that may be slow at the same time
    memo.cycle_pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=memo.config.cycle_workers, thread_name_prefix="lagpilot-cycle")
    memo.admin_pool = AdminPool(socket_timeout_ms=int(memo.config.kafka_timeout_seconds * 1000))
    memo.metrics = default_metrics()
    # the consumer Deployments as the watch (handlers.deployment_seen) delivers them: no GET per cycle;
    # the API server sends only the operator's own Deployments (label selector), not every one
    from lagpilot.act.deployment_cache import WATCH_SELECTOR, DeploymentCache
    settings.watching.label_selectors["apps", "v1", "deployments"] = WATCH_SELECTOR
    memo.deployments = DeploymentCache()
    if getattr(memo, "kube", None) is None:  # tests may inject a fake before startup
        from lagpilot.act.kubeapi import KubeApi, load_api_client
        memo.kube = KubeApi(load_api_client(pool_size=memo.config.cycle_workers))
