"""kopf handlers for BatchConsumerGroup: thin — gather inputs, call reconcile/, apply outputs.

- create / update (spec) / resume: server-side apply the consumer Deployment at once, so a new or
  changed CR has its Deployment without waiting for the control loop.
- the consumer Deployments are watched (label `app.kubernetes.io/managed-by=lagpilot`) into a cache
  the cycles read (deployment_cache.py): no GET of the Deployment per cycle.
- one daemon per CR: the control loop (observe → estimate → decide → scale → one status patch),
  paced by spec.scaling.pollIntervalSeconds (re-read every cycle: a changed interval applies at the
  next cycle), backing off exponentially while Degraded.
- delete (`finalize`, kopf's finalizer): a CR whose drain holds a range is not let go silently —
  the deletion waits (bounded) for the drain, else hands the unprocessed remainder back to the
  memberless group `<groupId>.lagpilot-remainder`; decisions in `deletion.py` (pure), Kafka edges
  in `deletion_io.py`. Without a drain the deletion completes within a second. The Deployment and
  the Job carry ownerReferences, so the garbage collector deletes them with the CR. If the operator
  is uninstalled first, a CR deletion waits for it; `kubectl patch bcg NAME --type=merge -p
  '{"metadata":{"finalizers":null}}'` releases it (docs/rbac.md) — and drops a drain's remainder.
- daemon start: a remainder left by a deleted CR of the same group becomes this CR's next drain
  (`adopt_remainder`).
- `group_claims` (a kopf index): a CR whose `groupId` an older CR already uses on the same Kafka
  cluster is `Degraded/DuplicateGroupId` and does nothing (decide/duplicates.py).
"""

from __future__ import annotations

import asyncio
import calendar
import contextvars
import logging
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf
from confluent_kafka import KafkaException

from lagpilot import settings  # noqa: F401  registers the @kopf.on.startup settings
from lagpilot.act.deployment_cache import MANAGED_BY, MANAGED_BY_LABEL, CachingKube
from lagpilot.act.kubeapi import KubeError
from lagpilot.decide import deletion, duplicates
from lagpilot.decide.handoff import DrainStatus
from lagpilot.decide.status import TRUE, Condition, merge_conditions
from lagpilot.model.crd import GROUP, PLURAL, VERSION
from lagpilot.observe.kafka_observe import ObserveError
from lagpilot.reconcile import delete
from lagpilot.reconcile.act import apply_deployment
from lagpilot.reconcile.cycle import run_cycle
from lagpilot.reconcile.deps import Cache, Deps, GroupRef
from lagpilot.spec import SpecError
from lagpilot_runtime.redaction import redact

log = logging.getLogger(__name__)
RESOURCE = (GROUP, VERSION, PLURAL)
SLOW_CYCLE_S = 2.0  # a cycle (queueing for a thread included) slower than this logs its phases


def _deps(memo: kopf.Memo, body: kopf.Body) -> Deps:
    """The cycle's dependencies; events go through kopf's poster (core/v1 events on the CR)."""

    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=redact(message))

    cfg = memo.config
    if getattr(memo, "drain", None) is None:  # the drain executor: Jobs + offset hand-off
        from lagpilot.act.drain import DrainExecutor

        memo.drain = DrainExecutor(memo.kube._client, config=cfg)
    # the Deployment from the watch's cache (deployment_seen), not a GET per cycle
    cached = getattr(memo, "deployments", None)
    kube = CachingKube(memo.kube, cached) if cached is not None else memo.kube
    return Deps(
        kube=kube,
        admin_pool=memo.admin_pool,
        metrics=memo.metrics,
        emit=emit,
        pod_start_seconds=cfg.pod_start_seconds,
        kafka_timeout_seconds=cfg.kafka_timeout_seconds,
        min_backoff_seconds=cfg.min_backoff_seconds,
        max_backoff_seconds=cfg.max_backoff_seconds,
        drain=memo.drain,
        status_heartbeat_seconds=cfg.status_heartbeat_seconds,
        observe_max_age_seconds=cfg.observe_max_age_seconds,
        crd_outdated=crd.outdated if (crd := getattr(memo, "crd_check", None)) is not None else None,
    )


@kopf.on.event("apps", "v1", "deployments", labels={MANAGED_BY_LABEL: MANAGED_BY})
async def deployment_seen(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """The watch of the consumer Deployments feeds the cache the cycles read (deployment_cache.py)."""
    cache = getattr(memo, "deployments", None)
    obj = event.get("object")
    if cache is not None and isinstance(obj, Mapping):
        cache.watched(event.get("type"), obj)


@kopf.index(*RESOURCE)
def group_claims(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """(Kafka cluster, groupId) -> this CR's claim; the oldest claim holds the group (M4)."""
    key = duplicates.index_key(dict(body.get("spec") or {}))
    return {} if key is None else {key: duplicates.claim_of(body.get("metadata") or {})}


def _duplicate(body: Mapping[str, Any], claims: Any) -> duplicates.Claim | None:
    """The older CR that holds this CR's (cluster, groupId), if any."""
    key = duplicates.index_key(dict(body.get("spec") or {}))
    if claims is None or key is None:
        return None
    return duplicates.other_holder(duplicates.claim_of(body.get("metadata") or {}), claims.get(key, ()))


def _report_duplicate(
    body: kopf.Body, memo: kopf.Memo, status: Mapping[str, Any], holder: duplicates.Claim
) -> None:
    """Degraded/Ready False with reason DuplicateGroupId and a Warning event (when they change); a
    Deployment of this CR left from before (a pair created before the check) is scaled to 0."""
    from lagpilot.act.deployment import deployment_name

    ref = GroupRef.from_body(body)
    message = duplicates.message(str((body.get("spec") or {}).get("groupId")), holder)
    before = next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), None)
    try:
        dep = memo.kube.get_deployment(ref.namespace, deployment_name(ref.name))
        if dep is not None and int((dep.get("spec") or {}).get("replicas") or 0) > 0:
            apply_deployment(ref, dict(body.get("spec") or {}), dict(status), _deps(memo, body), replicas=0)
        if before is None or (before.get("reason"), before.get("message"), before.get("status")) != (
            duplicates.REASON,
            message,
            TRUE,
        ):
            conds = merge_conditions(
                status.get("conditions"),
                [
                    Condition("Degraded", TRUE, duplicates.REASON, message),
                    Condition("Ready", "False", duplicates.REASON, message),
                ],
                ref.generation,
                time.time(),
            )
            memo.kube.patch_status(
                ref.namespace, ref.name, {"conditions": conds, "observedGeneration": ref.generation}
            )
            kopf.event(body, type="Warning", reason=duplicates.REASON, message=message)
            log.warning("duplicate groupId", extra={"group": ref.key, "holder": holder.ref})
    except (KubeError, SpecError) as err:
        log.warning("reporting a duplicate groupId failed", extra={"group": ref.key, "error": str(err)})


def _recommend_only(spec: Mapping[str, Any]) -> bool:
    """spec.mode Recommend (docs/recommend.md): the handlers touch nothing but the CR's status."""
    return (spec or {}).get("mode") == "Recommend"


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
def apply(
    body: kopf.Body, spec: kopf.Spec, status: kopf.Status, memo: kopf.Memo, group_claims: Any = None, **_: Any
) -> None:
    """Render and server-side apply the consumer Deployment (not for a duplicate groupId, not in
    spec.mode Recommend: that mode creates and changes no Deployment)."""
    ref = GroupRef.from_body(body)
    if _recommend_only(spec):
        log.info("spec.mode Recommend: no Deployment applied", extra={"group": ref.key})
        return
    holder = _duplicate(body, group_claims)
    if holder is not None:
        _report_duplicate(body, memo, status, holder)
        return
    try:
        n = apply_deployment(ref, dict(spec), dict(status), _deps(memo, body))
    except SpecError as err:
        # the CRD schema catches most mistakes at admission; this is what it cannot express
        message = f"spec is invalid: {err}"
        kopf.event(body, type="Warning", reason="InvalidSpec", message=message)
        conds = merge_conditions(
            status.get("conditions"),
            [
                Condition("Degraded", TRUE, "InvalidSpec", message),
                Condition("Ready", "False", "InvalidSpec", message),
            ],
            ref.generation,
            time.time(),
        )
        try:
            memo.kube.patch_status(
                ref.namespace, ref.name, {"conditions": conds, "observedGeneration": ref.generation}
            )
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
        except TimeoutError:
            waited += warn_after_s
            frame = sys._current_frames().get(where.get("thread", -1))
            stack = (
                "".join(traceback.format_stack(frame))
                if frame
                else "(not started: every cycle thread is busy)"
            )
            log.error(
                "control loop cycle still running",
                extra={"group": key, "seconds": round(waited), "stack": stack},
            )


@kopf.daemon(*RESOURCE, cancellation_timeout=10.0)
async def control_loop(
    body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, group_claims: Any = None, **_: Any
) -> None:
    """Observe → decide → act → report, every pollIntervalSeconds, until the CR goes away."""
    cache = Cache()
    deps = _deps(memo, body)
    ref = GroupRef.from_body(body)
    adoption_pending = True
    spawned = time.monotonic()
    first: dict[str, float] | None = {}  # start-up timings, logged once with the first cycle
    try:
        while not stopped:
            ref = GroupRef.from_body(body)  # `body` is live: generation and spec are current
            holder = _duplicate(body, group_claims)
            if holder is not None:  # another CR holds this groupId: no cycle, no adoption (M4)
                ctx = contextvars.copy_context()
                await asyncio.get_running_loop().run_in_executor(
                    memo.cycle_pool, ctx.run, _report_duplicate, body, memo, dict(body.status), holder
                )
                await stopped.wait(float((body.spec.get("scaling") or {}).get("pollIntervalSeconds") or 15))
                continue
            if adoption_pending and _recommend_only(body.spec):
                adoption_pending = False  # mode Recommend adopts nothing (it would record a drain)
            if adoption_pending:  # before any cycle may plan a drain of the same offsets; retried until done
                t = time.monotonic()
                adoption_pending = not await _adopt(body, memo, deps, ref)
                if first is not None:
                    first["adopt_s"] = first.get("adopt_s", 0.0) + time.monotonic() - t
            try:
                # a dedicated pool: a cycle blocks on Kafka for up to LAGPILOT_KAFKA_TIMEOUT_SECONDS
                # (an unreachable broker), which must not starve the other CRs' cycles or kopf's own
                # sync handlers; the context is copied so kopf.event works from the thread
                ctx = contextvars.copy_context()
                where: dict[str, int] = {}
                fut = asyncio.get_running_loop().run_in_executor(
                    memo.cycle_pool,
                    ctx.run,
                    _tracked,
                    where,
                    run_cycle,
                    ref,
                    dict(body.spec),
                    dict(body.status),
                    deps,
                    cache,
                )
                # a cycle needs at most ~3 Kafka timeouts (observe, peek, drain) plus API calls
                t = time.monotonic()
                result = await await_cycle(fut, where, ref.key, 3 * deps.kafka_timeout_seconds + 60.0)
            except Exception as err:  # a bug must not kill the loop for good
                log.exception("control loop cycle crashed", extra={"group": ref.key})
                raise kopf.TemporaryError(f"cycle crashed: {type(err).__name__}", delay=30) from None
            if first is not None:
                # how a CR's loop started: time from the daemon's spawn (and from the CR's creation)
                # to its first cycle's end, and what it waited for (docs/operator.md "Scale")
                now = time.monotonic()
                created = _timestamp((body.get("metadata") or {}).get("creationTimestamp"), time.time())
                log.info(
                    "first cycle done",
                    extra={
                        "group": ref.key,
                        "ok": result.ok,
                        "reason": result.reason,
                        "since_spawn_s": round(now - spawned, 2),
                        "since_created_s": round(time.time() - created, 1),
                        "adopt_s": round(first.get("adopt_s", 0.0), 2),
                        "cycle_s": round(now - t, 2),
                        "phases_s": cache.timing,
                    },
                )
                first = None
            elif time.monotonic() - t > SLOW_CYCLE_S:
                log.info(
                    "slow cycle",
                    extra={
                        "group": ref.key,
                        "seconds": round(time.monotonic() - t, 2),
                        "phases_s": cache.timing,
                    },
                )
            await stopped.wait(max(0.5, result.delay_s))
    finally:
        memo.admin_pool.release(ref.key)
        memo.metrics.forget(ref.namespace, ref.name)


async def _adopt(body: kopf.Body, memo: kopf.Memo, deps: Deps, ref: GroupRef) -> bool:
    """Adopt a remainder handed back by a deleted CR of the same group (adopt_remainder); True when
    done (adopted or nothing to adopt). An unreachable broker or bad Kafka settings are the cycle's
    to report (Degraded): here they only postpone the adoption to the next cycle."""
    try:
        ctx = contextvars.copy_context()
        adopted = await asyncio.get_running_loop().run_in_executor(
            memo.cycle_pool,
            ctx.run,
            delete.adopt_remainder,
            ref,
            dict(body.spec),
            dict(body.status),
            memo.kube,
            memo.admin_pool,
            memo.config.kafka_timeout_seconds,
            deps.emit,
        )
    except (ObserveError, KafkaException, KubeError, SpecError) as err:
        log.warning(
            "adopting a remainder postponed",
            extra={"group": ref.key, "error": type(err).__name__, "reason": getattr(err, "reason", "")},
        )
        return False
    except Exception:  # a bug: logged, retried next cycle; the loop must run
        log.exception("adopting a remainder failed", extra={"group": ref.key})
        return False
    for _ in range(40):  # the first cycle must see the adopted drain (the watch delivers it)
        if adopted is None or (body.status.get("drain") or {}).get("id") == adopted:
            break
        await asyncio.sleep(0.25)
    return True


# ------------------------------------------------------------------------------ deletion (finalizer)


def _executor(memo: kopf.Memo) -> Any:
    if getattr(memo, "drain", None) is None:
        from lagpilot.act.drain import DrainExecutor

        memo.drain = DrainExecutor(memo.kube._client, config=memo.config)
    return memo.drain


def _timestamp(value: str | None, default: float) -> float:
    if not value:
        return default
    try:
        return float(
            calendar.timegm(time.strptime(value.replace("Z", "+0000")[:19] + "+0000", "%Y-%m-%dT%H:%M:%S%z"))
        )
    except ValueError:
        return default


WAIT_MARK = "deletion waits: "


class DeletionWaiting(kopf.TemporaryError):
    """A retry of the finalizer that is a wait (for a drain, its Job, Kafka), not a failure. kopf
    logs every TemporaryError at ERROR ("Handler 'finalize' failed temporarily: ...") and, with
    posting at WARNING, posts each as an `Error` event: ~120 per deletion that waits 600 s. These
    carry WAIT_MARK, and `waits_are_not_errors` turns kopf's line for them into an INFO log line that
    is not posted; the deletion's events are the finalizer's own, one per change of the `Terminating`
    condition's reason."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(WAIT_MARK + message, delay=delay)


def waits_are_not_errors(record: logging.LogRecord) -> bool:
    """logging filter on `kopf.objects`: kopf's "failed temporarily" line for a DeletionWaiting, and
    its "Daemon 'control_loop' is cancelled" line when a CR's loop is stopped for its deletion, are
    logged at INFO and never posted as events (kopf's poster skips records with k8s_skip)."""
    msg = str(record.msg)
    expected = (WAIT_MARK in msg and "failed temporarily" in msg) or msg.startswith(
        "Daemon 'control_loop' is cancelled"
    )
    if record.levelno >= logging.WARNING and expected:
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.k8s_skip = True
    return True


logging.getLogger("kopf.objects").addFilter(waits_are_not_errors)


@kopf.on.delete(*RESOURCE)
def finalize(
    body: kopf.Body,
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    memo: kopf.Memo,
    group_claims: Any = None,
    **_: Any,
) -> None:
    """Let a drain finish (bounded) or hand its remainder back before the CR goes (reconcile/delete.py)."""
    ref = GroupRef.from_body(body)
    if _recommend_only(spec) and not deletion.holds_range(DrainStatus.from_dict(status.get("drain"))):
        return  # mode Recommend: no drain of its own, nothing to hand back, no progress groups to delete
    now = time.time()
    out = delete.finalize(
        ref,
        dict(spec),
        dict(status),
        since=_timestamp(meta.get("deletionTimestamp"), now),
        now=now,
        shared=_duplicate(body, group_claims) is not None,
        deps=_delete_deps(memo, body),
    )
    if out is not None:
        raise DeletionWaiting(out.message, delay=out.delay_s)


def _delete_deps(memo: kopf.Memo, body: kopf.Body) -> delete.DeleteDeps:
    wait_s = memo.config.delete_drain_wait_seconds
    return delete.DeleteDeps(
        kube=memo.kube,
        admin_pool=memo.admin_pool,
        executor=_executor(memo),
        emit=lambda type_, reason, message: kopf.event(
            body, type=type_, reason=reason, message=redact(message)
        ),
        kafka_timeout_s=memo.config.kafka_timeout_seconds,
        wait_s=deletion.DEFAULT_WAIT_S if wait_s is None else wait_s,
        stop_consumers=lambda: apply_deployment(
            GroupRef.from_body(body),
            dict(body.get("spec") or {}),
            dict(body.get("status") or {}),
            _deps(memo, body),
            replicas=0,
        ),
    )
