"""The drain hand-off's part of a cycle (reconcile.py): what the decision step reads of status.drain
and of the topic's retention, the drain executor's call after the scaler acted (lagpilot.act.drain,
issue 6), and the recorded drain's progress for the metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagpilot.decide import status as status_mod
from lagpilot.decide.scaling import Decision
from lagpilot.reconcile.act import apply_deployment
from lagpilot.reconcile.deps import Deps, GroupRef
from lagpilot.reconcile.observe import Observed
from lagpilot.spec import GroupSpec


def drains_of(raw: Mapping[str, Any]) -> tuple[Any, ...]:
    """status.drain as the hand-off's DrainStatus (none if absent or unreadable)."""
    from lagpilot.decide.handoff import DrainStatus

    try:
        d = DrainStatus.from_dict(raw)
    except (ValueError, TypeError, KeyError):
        return ()
    return (d,) if d is not None else ()


def last_drain_end(raw: Mapping[str, Any]) -> float | None:
    """When the recorded drain finished (status.drain.finishedAt); None when absent or unreadable."""
    try:
        return status_mod.parse_time(raw.get("finishedAt"))
    except ValueError:
        return None


def retention_s(handle: Any, spec: GroupSpec, deps: Any) -> float | None:
    """The topic's retention for the drain planner (best effort, cached; None without drains)."""
    if getattr(deps, "drain", None) is None or not spec.drain.enabled:
        return None
    from lagpilot.observe import topic_retention

    return topic_retention.cached(handle, spec.topic, deps.kafka_timeout_seconds)


def run_drain(
    ref: GroupRef,
    spec: GroupSpec,
    raw_spec: Mapping[str, Any],
    status: Mapping[str, Any],
    seen: Observed,
    decision: Decision,
    replicas: int,
    deps: Deps,
    runtime_replicas: int | None = 1,
    hand_back: Any = None,
) -> Any:
    """The drain executor's step (its DrainResult), after the scaler acted and before the status
    write, with the step's replica count for the warm drain runtime and its hand-back rule
    (``StepDecision.hand_back``); None without a drain executor."""
    if deps.drain is None:
        return None
    from lagpilot.act.drain import run_in_cycle

    return run_in_cycle(
        deps.drain,
        ref,
        spec,
        raw_spec,
        status,
        seen.obs,
        decision,
        replicas,
        seen.handle,
        deps,
        apply_deployment,
        runtime_replicas=runtime_replicas,
        runtime_seen=seen.runtime,
        hand_back=hand_back,
    )


def drain_progress(raw: Mapping[str, Any]) -> tuple[int, int]:
    """(tasks done, tasks remaining) of the recorded drain; (0, 0) without one."""
    drain_now = next(iter(drains_of(raw)), None)
    tasks_done = sum(1 for s in drain_now.sub_ranges if s.done) if drain_now is not None else 0
    return tasks_done, (len(drain_now.sub_ranges) - tasks_done) if drain_now is not None else 0
