"""Operator-wide settings: kopf tuning (one @kopf.on.startup) and the env-driven model figures.

The environment is read once, by lagpilot.config (OperatorConfig.from_env), into `memo.config`.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

import kopf

from lagpilot.config import OperatorConfig
from lagpilot.metrics import default_metrics
from lagpilot.observe.kafka_observe import AdminPool


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Tune kopf and build the shared, operator-wide objects (copied by reference into every CR's memo)."""
    # Progress and the diff base go to annotations under our own prefix: the CRD's status schema is
    # structural, so kopf's default `status.kopf` would be pruned (and cause endless re-handling).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.lagpilot.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.lagpilot.io", key="last-handled-configuration"
    )
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
    # No cluster-wide scans of CRDs and namespaces: the operator's only cluster-scoped permission is
    # then `get` on its own CRD by name (the check below; docs/rbac.md). The CRD must exist before the operator starts (the chart
    # installs it first); LAGPILOT_KOPF_SCANNING=true re-enables kopf's scans (CRDs installed later
    # are noticed; needs list/watch on customresourcedefinitions and namespaces).
    memo.config = OperatorConfig.from_env()
    settings.scanning.disabled = not memo.config.kopf_scanning
    # Create/update handlers retry with backoff when the apply fails (API server briefly away).
    settings.execution.max_workers = 16
    # The daemon per CR does its own pacing; on operator shutdown give a cycle in flight a moment.
    # threads for the control-loop cycles (handlers.control_loop): each CR's cycle holds one while it
    # waits on Kafka and the API server, so size it for the CRs that may be slow at the same time
    memo.cycle_pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=memo.config.cycle_workers, thread_name_prefix="lagpilot-cycle"
    )
    memo.admin_pool = AdminPool(
        socket_timeout_ms=int(memo.config.kafka_timeout_seconds * 1000),
        offsets_snapshot=memo.config.offsets_snapshot,
    )
    memo.metrics = default_metrics()
    # the consumer Deployments as the watch (handlers.deployment_seen) delivers them: no GET per cycle;
    # the API server sends only the operator's own Deployments (label selector), not every one
    from lagpilot.act.deployment_cache import WATCH_SELECTOR, DeploymentCache

    settings.watching.label_selectors["apps", "v1", "deployments"] = WATCH_SELECTOR
    memo.deployments = DeploymentCache()
    if getattr(memo, "kube", None) is None:  # tests may inject a fake before startup
        from lagpilot.act.kubeapi import KubeApi, load_api_client

        memo.kube = KubeApi(load_api_client(pool_size=memo.config.cycle_workers))
    # the installed CRD against this operator's (act/crd_check.py): read once now, so a stale CRD is
    # logged at start-up, then by the cycles every LAGPILOT_CRD_CHECK_SECONDS; every CR it reconciles
    # says Degraded=CRDOutdated while it lacks fields (a fake kube without get_crd: not checked)
    if getattr(memo, "crd_check", None) is None and hasattr(memo.kube, "get_crd"):
        from lagpilot.act.crd_check import CRD_NAME, CrdCheck

        memo.crd_check = CrdCheck(lambda: memo.kube.get_crd(CRD_NAME), every_s=memo.config.crd_check_seconds)
        memo.crd_check.outdated()
