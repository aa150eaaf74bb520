"""The act phase of a cycle (reconcile.py) on the consumer Deployment: server-side apply of the
replica count (`apply_deployment`, also called by the create/update/resume handlers and by the drain
executor to scale), creating a missing Deployment, scaling to 0 while paused, scaling to the
decision's count, and the estimator's events."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lagpilot.act.deployment import build_deployment, deployment_name, selector_labels
from lagpilot.decide import estimate as est_mod
from lagpilot.decide.pod_health import not_ready_detail
from lagpilot.decide.scaling import Decision
from lagpilot.decide.status import rfc3339
from lagpilot.reconcile.deps import Deps, GroupRef
from lagpilot.spec import GroupSpec, parse_spec

log = logging.getLogger(__name__)


def clamp_initial(spec: GroupSpec, status: Mapping[str, Any]) -> int:
    """Replica count for an apply outside the control loop: what the loop last decided, else the
    minimum; never above maxReplicas or the last known partition count; 0 when paused."""
    if spec.paused:
        return 0
    from lagpilot.decide.handoff import replicas_override_raw

    if replicas_override_raw(status.get("drain")) == 0:
        return 0  # the quiesce fallback of the hand-off emptied the group: keep it empty
    s = spec.scaling
    want = status.get("desiredReplicas")
    n = int(want) if isinstance(want, int) and want >= 0 else s.min_replicas
    cap = s.max_replicas
    parts = status.get("partitions")
    if isinstance(parts, int) and parts > 0:
        cap = min(cap, parts)
    return max(min(n, cap), min(s.min_replicas, cap))


def dep_replicas(dep: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(spec.replicas, status.replicas, status.readyReplicas) of a Deployment."""
    if not dep:
        return 0, 0, 0
    spec_r = int((dep.get("spec") or {}).get("replicas") or 0)
    st = dep.get("status") or {}
    return spec_r, int(st.get("replicas") or 0), int(st.get("readyReplicas") or 0)


def apply_deployment(
    ref: GroupRef,
    raw_spec: Mapping[str, Any],
    raw_status: Mapping[str, Any] | None,
    deps: Deps,
    replicas: int | None = None,
) -> int:
    """Server-side apply the consumer Deployment; returns the replica count applied.

    Raises SpecError (invalid spec) or KubeError (API failure) for the handler to translate.
    """
    spec = parse_spec(raw_spec)
    n = clamp_initial(spec, raw_status or {}) if replicas is None else replicas
    # the CR's hand-off key Secret first (created on first use): the pods reference it (M8)
    kid = (
        deps.drain.handoff_key_id(ref.namespace, ref.name, ref.uid)
        if deps.drain is not None and ref.uid
        else ""
    )
    deps.kube.apply_deployment(
        build_deployment(ref.name, ref.namespace, ref.uid, spec, n, deps.version, handoff_key_id=kid)
    )
    return n


def ensure_deployment(
    ref: GroupRef, raw_spec: Mapping[str, Any], status: Mapping[str, Any], deps: Deps
) -> tuple[int, int, int]:
    """The Deployment's replicas (`dep_replicas`), after creating it if it is missing."""
    dname = deployment_name(ref.name)
    dep = deps.kube.get_deployment(ref.namespace, dname)
    if dep is None:
        n = apply_deployment(ref, raw_spec, status, deps)
        deps.emit("Normal", "DeploymentCreated", f"created Deployment {dname} with {n} replicas")
        dep = deps.kube.get_deployment(ref.namespace, dname)
    return dep_replicas(dep)


def consumers_not_ready(ref: GroupRef, deps: Deps) -> str:
    """Why the consumer pods are not ready, as their pod objects say (decide.pod_health): read only
    while the Deployment has fewer ready replicas than it asks for. "" when nothing says, or when
    the pods cannot be read (the condition then keeps its count alone)."""
    lister = getattr(deps.kube, "list_pods", None)
    if lister is None:
        return ""
    try:
        return not_ready_detail(lister(ref.namespace, selector_labels(ref.name)))
    except Exception as err:  # noqa: BLE001 - a detail of the message, never a reason to fail the cycle
        log.debug("consumer pods not read", extra={"group": ref.key, "error": str(err)[:300]})
        return ""


def pause(
    ref: GroupRef, raw_spec: Mapping[str, Any], status: Mapping[str, Any], deps: Deps, cur: int
) -> int | None:
    """spec.paused: scale the Deployment to 0; the count applied (None: it already was 0)."""
    if cur == 0:
        return None
    apply_deployment(ref, raw_spec, status, deps, replicas=0)
    deps.emit("Normal", "Paused", f"spec.paused: scaled {deployment_name(ref.name)} {cur}->0")
    return 0


def scale(
    ref: GroupRef,
    raw_spec: Mapping[str, Any],
    status: Mapping[str, Any],
    deps: Deps,
    cur: int,
    decision: Decision,
    held: bool,
    now: float,
) -> tuple[int | None, Any]:
    """Apply the decided replica count when it differs from the Deployment's and the drain hand-off
    does not hold it: (the count applied or None, status.lastScaleTime)."""
    applied: int | None = None
    desired = decision.desired_replicas
    last_scale_time = status.get("lastScaleTime")
    if desired != cur and not held:
        apply_deployment(ref, raw_spec, status, deps, replicas=desired)
        applied = desired
        direction = "up" if desired > cur else "down"
        deps.metrics.count_decision(ref.namespace, ref.name, direction)
        deps.emit("Normal", "ScaledUp" if desired > cur else "ScaledDown", decision.message)
        log.info("scaled", extra={"group": ref.key, "from": cur, "to": desired, "reason": decision.reason})
        last_scale_time = rfc3339(now)
    return applied, last_scale_time


def emit_estimate_events(spec: GroupSpec, est: est_mod.EstimatorState, deps: Deps) -> None:
    """A Warning event per estimator event of this step: records retention deleted unconsumed, offsets
    that moved backwards."""
    for e in est.events:
        kind, _, rest = e.partition(":")
        if kind == "DataLoss":
            p, _, n = rest.partition(":")
            deps.emit(
                "Warning",
                "DataLoss",
                f"retention deleted {n} records of partition {p} of topic "
                f"{spec.topic!r} before group {spec.group_id!r} consumed them",
            )
        elif kind == "OffsetsWentBackwards":
            deps.emit(
                "Warning",
                "OffsetsWentBackwards",
                f"offsets of partition {rest} of topic {spec.topic!r} "
                "moved backwards (topic recreated?); its estimate was reset",
            )
