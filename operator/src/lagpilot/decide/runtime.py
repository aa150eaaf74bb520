"""The warm drain runtime on demand (pure): when it runs, and when a due drain waits for it.

``spec.drain.warmRuntime: true`` keeps a drain runtime (a warm SparkSession, ``lagpilot.act.drain_runtime``)
per CR. Without ``spec.drain.warmRuntimeCooldownSeconds`` it runs all the time (mode ``always``). With
it (mode ``on-demand``) it runs only around bursts, scaled 0 -> 1 -> 0:

- **wanted** while a drain is wanted (due, or waiting for it) or in flight, and for ``cooldown``
  seconds after the last drain ended (follow-ups of the same burst start warm); a scale-up holds for
  its warm-up plus the cooldown. No separate burst signal: while the runtime is down the planner
  sees a drain's start-up as warm-up + warm start, so a drain falls due that much earlier — the
  anticipation is the planner's own due rule (a separate "group overloaded" trigger was tried: the
  same within-SLA on the flash traces, more idle runtime minutes on long overloads);
- **the split waits for it.** A drain due while the runtime warms up is not planned yet: its split
  is taken when the runtime is Ready, so the records that arrive during the warm-up belong to the
  first drain instead of waiting behind its split for the next one (one start-up a burst, paid
  before the split, not between two drains). A runtime that is not Ready :func:`give_up_s` after its
  scale-up (2 warm-ups, at least 120 s) is given up on for this drain (planned cold: the Job starts
  its own Spark);
- the start-up a drain planned now would see (:func:`start_up_s`) is the warm one once Ready, the
  warm-up left plus the warm one while warming, and a cold drain's otherwise. The step uses it in
  mode ``on-demand`` only: with ``always`` the planner keeps the model's cold figure, as before this
  module (conservative: a Ready runtime starts drains sooner than planned).

Mode ``off`` (``warmRuntime: false``, or drains disabled, or launcher ``sparkApplication``): every
drain is a cold Job, planned when due (the rule before this module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lagpilot.spec import GroupSpec

MODE_OFF = "off"
MODE_ALWAYS = "always"
MODE_ON_DEMAND = "on-demand"
MODES = (MODE_OFF, MODE_ALWAYS, MODE_ON_DEMAND)
# a runtime not Ready this long after its scale-up is given up on for the drain (planned cold):
# 2 warm-ups, at least the 120 s a JVM and SparkSession can take on 2 busy cores (measured 10-70 s;
# the runtime pod's liveness probe starts after 180 s, lagpilot.act.drain_runtime)
GIVE_UP_FACTOR = 2.0
GIVE_UP_MIN_S = 120.0


def mode_of(spec: GroupSpec) -> str:
    """The runtime mode a CR asks for (the runtime exists only where a drain Job could use it)."""
    d = spec.drain
    if not (d.warm_runtime and d.enabled and d.launcher == "job"):
        return MODE_OFF
    return MODE_ALWAYS if d.warm_runtime_cooldown_s is None else MODE_ON_DEMAND


@dataclass(frozen=True)
class RuntimePolicy:
    mode: str = MODE_OFF
    cooldown_s: float = 600.0  # on-demand: kept after the last drain ended
    warm_up_s: float = 20.0  # scale-up -> Ready: the JVM and SparkSession a cold drain also starts
    warm_start_s: float = 3.0  # a drain launched on a Ready runtime -> first record

    @classmethod
    def from_group_spec(cls, spec: GroupSpec, *, warm_up_s: float, warm_start_s: float) -> RuntimePolicy:
        cooldown = spec.drain.warm_runtime_cooldown_s
        return cls(
            mode_of(spec), cls.cooldown_s if cooldown is None else float(cooldown), warm_up_s, warm_start_s
        )


@dataclass(frozen=True)
class RuntimeObservation:
    """The runtime Deployment as observed: its replica count, a Ready pod of the current config,
    when it was last scaled from 0 to 1 (None: unknown or never), and what its not-ready pods say
    keeps them from Ready (decide.pod_health: an OOM kill at the memory limit, CrashLoopBackOff, an
    unschedulable pod; "" when none says anything: starting, Ready, or not read)."""

    replicas: int = 0
    ready: bool = False
    scaled_up_at_s: float | None = None
    problem: str = ""


def give_up_s(pol: RuntimePolicy) -> float:
    return max(GIVE_UP_FACTOR * pol.warm_up_s, GIVE_UP_MIN_S)


def _warming(pol: RuntimePolicy, obs: RuntimeObservation, now: float) -> bool:
    """Asked for, not Ready yet, and not given up on. Without a scale-up time (never stamped) the
    wait could not be bounded: not warming (the drain goes cold; the operator stamps every scale-up)."""
    if obs.ready or obs.replicas <= 0 or obs.scaled_up_at_s is None:
        return False
    return now - obs.scaled_up_at_s < give_up_s(pol)


def start_up_s(pol: RuntimePolicy, obs: RuntimeObservation | None, now: float) -> float:
    """Launch (or, when it must wait for the runtime, now) -> first record of a drain planned now."""
    if pol.mode == MODE_OFF or obs is None:
        return pol.warm_up_s
    if obs.ready:
        return pol.warm_start_s
    if _warming(pol, obs, now):
        assert obs.scaled_up_at_s is not None
        return max(0.0, obs.scaled_up_at_s + pol.warm_up_s - now) + pol.warm_start_s
    if obs.replicas <= 0 and pol.mode == MODE_ON_DEMAND:
        return pol.warm_up_s + pol.warm_start_s  # scaled up now, split once Ready
    return pol.warm_up_s  # given up on: a cold Job


def wanted_replicas(
    pol: RuntimePolicy,
    obs: RuntimeObservation | None,
    *,
    drain_wanted: bool,
    drain_in_flight: bool,
    last_drain_end_s: float | None,
    now: float,
) -> int | None:
    """The runtime Deployment's replica count (None: no runtime for this CR). On demand, a scale-up
    holds for its warm-up plus the cooldown (no 0 -> 1 -> 0 while a due drain flickers)."""
    if pol.mode == MODE_OFF:
        return None
    if pol.mode == MODE_ALWAYS:
        return 1
    recent = last_drain_end_s is not None and now - last_drain_end_s < pol.cooldown_s
    held = (
        obs is not None
        and obs.replicas > 0
        and obs.scaled_up_at_s is not None
        and now - obs.scaled_up_at_s < pol.warm_up_s + pol.cooldown_s
    )
    return 1 if (drain_wanted or drain_in_flight or recent or held) else 0


def split_waits(pol: RuntimePolicy, obs: RuntimeObservation | None, now: float) -> bool:
    """A drain due now is not planned yet: the on-demand runtime is (being) started and its split is
    taken once it is Ready (never longer than :func:`give_up_s` after the scale-up)."""
    if pol.mode != MODE_ON_DEMAND or obs is None or obs.ready:
        return False
    if obs.replicas <= 0:
        return True  # scaled up by this decision
    return _warming(pol, obs, now)


__all__ = [
    "MODES",
    "MODE_ALWAYS",
    "MODE_OFF",
    "MODE_ON_DEMAND",
    "RuntimeObservation",
    "RuntimePolicy",
    "give_up_s",
    "mode_of",
    "split_waits",
    "start_up_s",
    "wanted_replicas",
]
