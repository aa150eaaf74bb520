"""Deleting a BatchConsumerGroup: let its drain finish (bounded) or hand its remainder back, and
adopt a remainder a deleted CR of the same group left (docs/drain.md "Deleting a CR mid-drain").

The decisions are `decide/deletion.py` (pure), the Kafka edges `act/deletion_io.py`; this module
orders them for one finalizer pass (`finalize`) and one adoption (`adopt_remainder`). kopf stays in
handlers.py: a pass returns `Waiting` (retry after `delay_s`) or None (the CR may go).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lagpilot.act import deletion_io
from lagpilot.act.drain import drain_patch, same_drain
from lagpilot.act.kubeapi import KubeError
from lagpilot.decide import deletion
from lagpilot.decide.handoff import DrainStatus, Phase, job_name
from lagpilot.decide.status import Condition, merge_conditions
from lagpilot.observe import kafka_observe
from lagpilot.observe.kafka_observe import AdminPool, admin_config
from lagpilot.reconcile.deps import EmitFn, GroupRef, Kube
from lagpilot.spec import GroupSpec, SpecError, parse_spec

log = logging.getLogger(__name__)

DELETE_GRACE_S = (
    600.0  # past the drain wait: how long a deletion retries an unreachable Kafka before dropping (loudly)
)


@dataclasses.dataclass(frozen=True)
class DeleteDeps:
    """What a deletion pass touches (built by handlers.py from kopf's memo; fakes in unit tests)."""

    kube: Kube
    admin_pool: AdminPool
    executor: Any  # lagpilot.act.drain.DrainExecutor: the drain's Job, progress, mailbox, hand-off key
    emit: EmitFn
    kafka_timeout_s: float
    wait_s: float  # how long a deletion waits for a running drain (LAGPILOT_DELETE_DRAIN_WAIT_SECONDS)
    # scale the consumer Deployment to 0 (a Planned drain's hand-off); its result is not used
    stop_consumers: Callable[[], object]


@dataclasses.dataclass(frozen=True)
class Waiting:
    """The deletion waits (for a drain, its Job, Kafka): retry after `delay_s`."""

    message: str
    delay_s: float


def kafka_conf(kube: Kube, ref: GroupRef, spec: GroupSpec) -> dict[str, Any]:
    secret = kube.read_secret_data(ref.namespace, spec.kafka.secret_name) if spec.kafka.secret_name else None
    return admin_config(spec.kafka, secret)


def _terminating(kube: Kube, ref: GroupRef, status: Mapping[str, Any], cond: tuple[str, str, str]) -> bool:
    """Write the Terminating condition; True when its reason changed (then an event is worth posting)."""
    before = next((c for c in status.get("conditions") or [] if c.get("type") == "Terminating"), None)
    conds = merge_conditions(
        status.get("conditions"), [Condition("Terminating", *cond)], ref.generation, time.time()
    )
    try:
        kube.patch_status(ref.namespace, ref.name, {"conditions": conds})
    except KubeError as err:
        log.warning("status write failed", extra={"group": ref.key, "error": str(err)})
    return before is None or before.get("reason") != cond[1]


def finalize(
    ref: GroupRef,
    raw_spec: Mapping[str, Any],
    status: Mapping[str, Any],
    *,
    since: float,
    now: float,
    shared: bool,
    deps: DeleteDeps,
) -> Waiting | None:
    """One finalizer pass: None when the CR may go (nothing held, handed back, released or dropped
    loudly), else what it waits for. `shared`: another CR holds this groupId (its side groups stay)."""
    d = DrainStatus.from_dict(status.get("drain"))
    if not deletion.holds_range(d):
        if d is not None and not shared:
            forget_progress_groups(deps, ref, raw_spec)
        return None  # nothing held: release at once
    assert d is not None
    try:
        gspec = parse_spec(dict(raw_spec))
    except SpecError as err:
        message = (
            f"drain {d.id} holds {d.remaining} unprocessed records but the spec is invalid ({err}); "
            f"they cannot be handed back: {deletion.remainder_of(d).ranges}"
        )
        if now - since < deps.wait_s:
            if _terminating(deps.kube, ref, status, ("True", "InvalidSpec", message)):
                deps.emit("Warning", "DeletionWaitingForValidSpec", message[:1000])
            return Waiting(message, 30)
        deps.emit("Warning", "DrainRemainderDropped", message[:1000])
        log.error("drain remainder dropped", extra={"group": ref.key, "detail": message})
        return None
    try:
        dec, message = _step(ref, gspec, d, since=since, now=now, deps=deps)
    except Exception as err:  # noqa: BLE001 - Kafka or the API unreachable: retry; past a long grace, say what is dropped
        deps.admin_pool.release(ref.key + "#delete")
        return _step_failed(ref, status, d, err, since=since, now=now, deps=deps)
    deps.admin_pool.release(ref.key + "#delete")
    if dec.kind in (deletion.DeleteKind.HAND_BACK, deletion.DeleteKind.RELEASE) and not shared:
        # the progress groups are not needed any more, and a CR re-created with this group starts
        # its drain ids at 1 again: stale progress must not mark its sub-ranges done
        forget_progress_groups(deps, ref, raw_spec)
    changed = _terminating(deps.kube, ref, status, (dec.condition[0], dec.reason, message[:1000]))
    if dec.event is not None and (changed or dec.kind is not deletion.DeleteKind.WAIT):
        deps.emit(dec.event[0], dec.event[1], message[:1000])
    if dec.kind in (
        deletion.DeleteKind.WAIT,
        deletion.DeleteKind.DELETE_JOB,
        deletion.DeleteKind.STOP_CONSUMERS,
    ):
        return Waiting(message, dec.delay_s)
    return None


def _step(
    ref: GroupRef, gspec: GroupSpec, d: DrainStatus, *, since: float, now: float, deps: DeleteDeps
) -> tuple[deletion.DeleteDecision, str]:
    """Read what the decision needs (the Job, the drain's progress, a Planned drain's hand-off
    inputs), decide (decide/deletion.py) and do its one effect; the decision and its message."""
    ex, timeout = deps.executor, deps.kafka_timeout_s
    conf = kafka_conf(deps.kube, ref, gspec)
    with deps.admin_pool.lease(ref.key + "#delete", conf) as handle:
        admin = handle.safe_admin(timeout)
        job = (
            ex.job(ref.namespace, job_name(ref.name, d.id, d.attempt), gspec.drain.launcher)
            if d.attempt > 0
            else None
        )
        progress = ex.progress(admin, gspec, d, owner=ref.uid) if d.sub_ranges else None
        planned: dict[str, Any] = {"committed": None}
        if d.phase is Phase.PLANNED:  # consumers, then offsets, then the mailbox (H1: complete the hand-off)
            planned = deletion_io.planned_inputs(
                ex,
                deps.kube,
                admin,
                ref.namespace,
                ref.name,
                gspec,
                d.partitions,
                timeout,
                ex.handoff_key(ref.namespace, ref.name, ref.uid),
            )
        dec = deletion.decide(
            d,
            job=job,
            progress=progress,
            deleting_since=since,
            now=now,
            wait_s=deps.wait_s,
            owner=ref.uid,
            **planned,
        )
        message = dec.message.replace("{group}", gspec.group_id)
        log.info(
            "deletion step",
            extra={"group": ref.key, "step": dec.kind.value, "reason": dec.reason, "detail": message},
        )
        if dec.kind is deletion.DeleteKind.DELETE_JOB:
            ex.delete_job(ref.namespace, job_name(ref.name, d.id, d.attempt), gspec.drain.launcher)
        elif dec.kind is deletion.DeleteKind.HAND_BACK:
            assert dec.remainder is not None
            deletion_io.write_remainder(conf, admin, gspec.group_id, gspec.topic, dec.remainder, timeout)
        elif dec.kind is deletion.DeleteKind.STOP_CONSUMERS:
            deps.stop_consumers()
        if dec.entries:  # a Planned drain's mailbox entries sealed before the CR goes
            ex.write_mailbox(admin, gspec, dec.entries, key=ex.handoff_key(ref.namespace, ref.name, ref.uid))
    return dec, message


def _step_failed(
    ref: GroupRef,
    status: Mapping[str, Any],
    d: DrainStatus,
    err: Exception,
    *,
    since: float,
    now: float,
    deps: DeleteDeps,
) -> Waiting | None:
    """Kafka or the API unreachable: retry (one Warning event when it starts failing, not one per
    retry); past the drain wait and a long grace, drop the remainder loudly, naming its ranges."""
    if now - since < deps.wait_s + DELETE_GRACE_S:
        message = f"deletion step failed ({type(err).__name__}: {err}); retrying"
        if _terminating(deps.kube, ref, status, ("True", "DeletionStepFailed", message[:1000])):
            deps.emit("Warning", "DeletionStepFailed", message[:1000])
        return Waiting(message, 10)
    message = (
        f"drain {d.id}: could not hand its remainder back for {now - since:.0f}s ({type(err).__name__}: {err}); "
        f"{d.remaining} records are dropped: {list(deletion.remainder_of(d).ranges)[:20]}"
    )
    deps.emit("Warning", "DrainRemainderDropped", message[:1000])
    log.error("drain remainder dropped", extra={"group": ref.key, "detail": message})
    return None


def forget_progress_groups(deps: DeleteDeps, ref: GroupRef, raw_spec: Mapping[str, Any]) -> None:
    """Best effort (never blocks a deletion): delete `<groupId>.lagpilot-drain.*`, so a CR re-created
    with this group, whose drain ids start at 1 again, cannot read a finished drain's progress."""
    try:
        gspec = parse_spec(raw_spec)
        timeout = deps.kafka_timeout_s
        with deps.admin_pool.lease(ref.key + "#delete", kafka_conf(deps.kube, ref, gspec)) as handle:
            admin = handle.safe_admin(timeout)
            failed = deletion_io.delete_groups(
                admin, deletion_io.list_progress_groups(admin, gspec.group_id, timeout), timeout
            )
        if failed:
            log.warning(
                "deleting drain progress groups failed", extra={"group": ref.key, "failed": failed[:5]}
            )
        deps.admin_pool.release(ref.key + "#delete")
    except Exception as err:  # noqa: BLE001
        log.warning("deleting drain progress groups failed", extra={"group": ref.key, "error": str(err)})


def adopt_remainder(
    ref: GroupRef,
    raw_spec: Mapping[str, Any],
    status: Mapping[str, Any],
    kube: Kube,
    admin_pool: AdminPool,
    kafka_timeout_s: float,
    emit: EmitFn,
) -> int | None:
    """A deleted CR of the same group left a remainder: record it as this CR's next drain (it is then
    launched by the executor like any handed-off drain), then clear the remainder group. Returns the
    adopted drain's id (None: nothing adopted)."""
    try:
        gspec = parse_spec(dict(raw_spec))
    except SpecError:
        return None  # the cycle reports the invalid spec; adoption waits for a valid one
    adopted = None
    timeout = kafka_timeout_s
    conf = kafka_conf(kube, ref, gspec)
    # leased as the CR itself (its cycles use the same handle; released when its loop ends): a
    # separate owner released here dropped the shared handle whenever no cycle held it yet
    with admin_pool.lease(ref.key, conf) as handle:
        # almost always nothing to adopt: the shared view + offsets snapshot say so without a
        # metadata request and an OffsetFetch (a consumer) per CR at start-up; if they cannot
        # say, or the group has commits, it is read exactly as before
        if (
            kafka_observe.has_commits(handle, gspec.topic, deletion.remainder_group(gspec.group_id), timeout)
            is False
        ):
            return None
        admin = handle.safe_admin(timeout)
        rem = deletion_io.read_remainder(admin, gspec.group_id, gspec.topic, timeout)
        d = DrainStatus.from_dict(status.get("drain"))
        replicas = int(status.get("desiredReplicas") or max(1, gspec.scaling.min_replicas))
        kind, new = deletion.adoption(rem, d, replicas, time.time())
        if kind is deletion.AdoptKind.NONE:
            if rem is not None:
                log.info(
                    "remainder waits for the running drain", extra={"group": ref.key, "records": rem.records}
                )
            return None
        if kind is deletion.AdoptKind.ADOPT:
            assert new is not None
            # guarded: recorded only over the drain this decision read (a concurrent writer's wins)
            # status.drain and the conditions it implies in one write, as the executor's (drain_patch)
            patch = drain_patch(new, status.get("conditions") or [], ref.generation or 0, time.time())
            kube.patch_status_guarded(ref.namespace, ref.name, patch, same_drain(d))
            emit("Normal", "DrainRemainderAdopted", new.message[:1000])
            log.info(
                "remainder adopted", extra={"group": ref.key, "drain": new.id, "records": new.records_total}
            )
            adopted = new.id
        failed = deletion_io.delete_groups(admin, [deletion.remainder_group(gspec.group_id)], timeout)
        if failed:
            log.warning(
                "clearing the remainder group failed (retried at the next start)",
                extra={"group": ref.key, "failed": failed},
            )
    return adopted
