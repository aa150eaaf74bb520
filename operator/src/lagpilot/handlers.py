"""kopf handlers for BatchConsumerGroup: thin — gather inputs, call reconcile.py, apply outputs.

- create / update (spec) / resume: server-side apply the consumer Deployment at once, so a new or
  changed CR has its Deployment without waiting for the control loop.
- one daemon per CR: the control loop (observe → estimate → decide → scale → one status patch),
  paced by spec.scaling.pollIntervalSeconds (re-read every cycle: a changed interval applies at the
  next cycle), backing off exponentially while Degraded.
- delete: nothing to do. The Deployment carries a controller ownerReference, so the garbage
  collector deletes it (and its pods) with the CR; no external resource needs cleaning up. lagpilot
  adds no finalizer of its own. kopf does put its finalizer on each CR because daemons require one
  (kopf stops the daemon before the object disappears); it is removed as soon as the daemon stops,
  so a deletion completes within a second while the operator runs. If the operator is uninstalled
  first, a CR deletion waits for it; `kubectl patch bcg NAME --type=merge -p
  '{"metadata":{"finalizers":null}}'` releases it (docs/rbac.md).
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from lagpilot import settings  # noqa: F401  registers the @kopf.on.startup settings
from lagpilot.deployment import API_GROUP
from lagpilot.kubeapi import PLURAL, VERSION, KubeError
from lagpilot.reconcile import Cache, Deps, GroupRef, apply_deployment, run_cycle
from lagpilot.spec import SpecError
from lagpilot.status import TRUE, Condition, merge_conditions

log = logging.getLogger(__name__)
RESOURCE = (API_GROUP, VERSION, PLURAL)


def _deps(memo: kopf.Memo, body: kopf.Body) -> Deps:
    """The cycle's dependencies; events go through kopf's poster (core/v1 events on the CR)."""

    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)

    cfg = memo.config
    if getattr(memo, "drain", None) is None:  # the drain executor (issue 6): Jobs + offset hand-off
        from lagpilot.drain import DrainExecutor
        memo.drain = DrainExecutor(memo.kube._client)
    return Deps(kube=memo.kube, admin_pool=memo.admin_pool, metrics=memo.metrics, emit=emit,
                pod_start_seconds=cfg.pod_start_seconds, kafka_timeout_seconds=cfg.kafka_timeout_seconds,
                min_backoff_seconds=cfg.min_backoff_seconds, max_backoff_seconds=cfg.max_backoff_seconds,
                drain=memo.drain)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
def apply(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
    """Render and server-side apply the consumer Deployment."""
    ref = GroupRef.from_body(body)
    try:
        n = apply_deployment(ref, dict(spec), dict(status), _deps(memo, body))
    except SpecError as err:
        # the CRD schema catches most mistakes at admission; this is what it cannot express
        message = f"spec is invalid: {err}"
        kopf.event(body, type="Warning", reason="InvalidSpec", message=message)
        conds = merge_conditions(status.get("conditions"), [
            Condition("Degraded", TRUE, "InvalidSpec", message),
            Condition("Ready", "False", "InvalidSpec", message),
        ], ref.generation, time.time())
        try:
            memo.kube.patch_status(ref.namespace, ref.name, {"conditions": conds, "observedGeneration": ref.generation})
        except KubeError as kerr:
            log.warning("status write failed", extra={"group": ref.key, "error": str(kerr)})
        raise kopf.PermanentError(message) from None
    except KubeError as err:
        raise kopf.TemporaryError(f"applying the consumer Deployment failed: {err}", delay=10) from None
    log.info("deployment applied", extra={"group": ref.key, "replicas": n})


def _tracked(where: dict[str, int], fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn` recording its thread, so a cycle that runs too long can be shown (its stack)."""
    where["thread"] = threading.get_ident()
    return fn(*args)


async def await_cycle(fut: Awaitable[Any], where: dict[str, int], key: str, warn_after_s: float) -> Any:
    """Await a cycle; every `warn_after_s` it is still running, log the stack of its thread.

    Every Kafka and API call of a cycle has its own timeout, so this should never fire; if a library
    call hangs anyway, the log says where instead of going silent (the thread cannot be killed).
    """
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), warn_after_s)
        except asyncio.TimeoutError:
            waited += warn_after_s
            frame = sys._current_frames().get(where.get("thread", -1))
            stack = "".join(traceback.format_stack(frame)) if frame else "(not started: every cycle thread is busy)"
            log.error("control loop cycle still running", extra={"group": key, "seconds": round(waited), "stack": stack})


@kopf.daemon(*RESOURCE, cancellation_timeout=10.0)
async def control_loop(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
    """Observe → decide → act → report, every pollIntervalSeconds, until the CR goes away."""
    cache = Cache()
    deps = _deps(memo, body)
    ref = GroupRef.from_body(body)
    try:
        while not stopped:
            ref = GroupRef.from_body(body)  # `body` is live: generation and spec are current
            try:
                # a dedicated pool: a cycle blocks on Kafka for up to LAGPILOT_KAFKA_TIMEOUT_SECONDS
                # (an unreachable broker), which must not starve the other CRs' cycles or kopf's own
                # sync handlers; the context is copied so kopf.event works from the thread
                ctx = contextvars.copy_context()
                where: dict[str, int] = {}
                fut = asyncio.get_running_loop().run_in_executor(
                    memo.cycle_pool, ctx.run, _tracked, where, run_cycle, ref, dict(body.spec), dict(body.status),
                    deps, cache)
                # a cycle needs at most ~3 Kafka timeouts (observe, peek, drain) plus API calls
                result = await await_cycle(fut, where, ref.key, 3 * deps.kafka_timeout_seconds + 60.0)
            except Exception as err:  # noqa: BLE001 - a bug must not kill the loop for good
                log.exception("control loop cycle crashed", extra={"group": ref.key})
                raise kopf.TemporaryError(f"cycle crashed: {type(err).__name__}", delay=30) from None
            await stopped.wait(max(0.5, result.delay_s))
    finally:
        memo.admin_pool.release(ref.key)
        memo.metrics.forget(ref.namespace, ref.name)
