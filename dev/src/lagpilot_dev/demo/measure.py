"""What the demo measures from its delivery ledger and its samples (pure, no I/O).

The ledger (``demo.handler``) holds one row per delivered record with the path (``consumer`` or
``drain``), the worker (pod/pid/thread) and the commit time of its transaction. A *batch* is the
rows one worker committed together: ``Batch(worker, source, t, n, partitions)`` with ``t`` in
seconds since the replay started. From those:

- the exactly-once report: lost (produced offsets never delivered) and duplicated (deliveries
  beyond the first) per partition, counted on rows that have no key;
- a consumer's capacity: records per second of a saturated consumer, ``n / (t - t_prev)`` over
  consecutive *full* batches of one worker (a full batch means records were waiting), median;
- each drain's hand-off pause: the longest gap between two consumer commits of any partition of
  the live group across the hand-off window (plan → the group consuming past the split again),
  next to that partition's usual gap just before, so a reader sees what the hand-off added;
- the drain start-up: plan → first drained record committed;
- the pod start: a scale-up seen in the status → the Deployment reporting that many ready;
- the warm drain runtime on demand (``--runtime-on-demand``): each scale-up (the operator's stamp)
  → a runtime pod Ready (its Ready transition), the scale-downs, and the minutes it ran (all, and
  serving no warm drain: the simulator's ``drain_runtime_minutes``).

These are also the parameters ``lagpilot simulate --from-demo`` uses to predict the run.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lagpilot.spec import DrainSpec


@dataclass(frozen=True)
class Batch:
    """Rows of the ledger one worker committed in one transaction."""

    worker: str
    source: str  # consumer | drain
    t: float  # commit time, seconds since the replay started
    n: int
    partitions: tuple[int, ...] = ()


def ledger_report(
    per_partition: Mapping[int, tuple[int, int, int]], ends: Mapping[int, int]
) -> dict[str, Any]:
    """Exactly-once from the ledger. ``per_partition[p] = (rows, distinct offsets in [0, end),
    distinct offsets outside it)``; ``ends[p]`` = the partition's end offset (records produced)."""
    parts: dict[int, dict[str, int]] = {}
    for p in sorted(set(per_partition) | set(ends)):
        rows, inside, outside = per_partition.get(p, (0, 0, 0))
        end = int(ends.get(p, 0))
        parts[p] = {
            "produced": end,
            "delivered": rows,
            "distinct": inside + outside,
            "lost": max(0, end - inside),
            "duplicated": rows - inside - outside,
            "outside": outside,
        }
    total = {
        k: sum(v[k] for v in parts.values())
        for k in ("produced", "delivered", "distinct", "lost", "duplicated", "outside")
    }
    return {**total, "per_partition": {str(p): v for p, v in parts.items()}}


def _median(xs: Sequence[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def saturated_rates(batches: Iterable[Batch], source: str, full: int, max_gap_s: float = 30.0) -> list[float]:
    """Records/s of each full batch of ``source`` after another batch of the same worker:
    ``n / (t - t_prev)``. Gaps longer than ``max_gap_s`` (an idle worker) are left out."""
    by_worker: dict[str, list[Batch]] = {}
    for b in batches:
        if b.source == source:
            by_worker.setdefault(b.worker, []).append(b)
    rates = []
    for bs in by_worker.values():
        bs.sort(key=lambda b: b.t)
        for a, b in itertools.pairwise(bs):
            dt = b.t - a.t
            if b.n >= full and 0 < dt <= max_gap_s:
                rates.append(b.n / dt)
    return rates


def capacity(batches: Iterable[Batch], source: str, full: int) -> float | None:
    """A saturated worker's records/s (median over its full batches); None without any."""
    return _median(saturated_rates(batches, source, full))


def commit_times(batches: Iterable[Batch], source: str = "consumer") -> dict[int, list[float]]:
    """Partition -> sorted commit times of the batches of ``source`` that held that partition."""
    out: dict[int, set[float]] = {}
    for b in batches:
        if b.source == source:
            for p in b.partitions:
                out.setdefault(p, set()).add(b.t)
    return {p: sorted(ts) for p, ts in out.items()}


def longest_gap(times: Sequence[float], w0: float, w1: float) -> float | None:
    """The longest gap between consecutive ``times`` that overlaps [w0, w1]; None when no commit
    came after the window (the partition was not consumed again) or none came before it."""
    if not times or times[0] > w0 or times[-1] < w1:
        return None
    best = 0.0
    for a, b in itertools.pairwise(times):
        if b >= w0 and a <= w1:
            best = max(best, b - a)
    return best


def usual_gap(times: Sequence[float], before: float, span_s: float = 60.0) -> float | None:
    """Median gap between commits in the ``span_s`` seconds before ``before``."""
    ts = [t for t in times if before - span_s <= t <= before]
    return _median([b - a for a, b in itertools.pairwise(ts)])


def hand_off_window(times: Mapping[str, float], wall0: float) -> tuple[float, float] | None:
    """Replay-time window of a drain's hand-off: planned → the live group consuming past the split
    (``handedOffAt`` on the non-stopping path, ``resumedAt`` after a quiesce); None if not known.
    ``times``: a summary drain's times, epoch seconds (``demo_report._drain_entry`` parsed them)."""
    planned = times.get("plannedAt")
    ends = [float(times[k]) for k in ("handedOffAt", "resumedAt") if times.get(k) is not None]
    if planned is None or not ends:
        return None
    return float(planned) - wall0, max(ends) - wall0


def hand_off_pause(
    times_by_partition: Mapping[int, Sequence[float]], window: tuple[float, float]
) -> dict[str, Any]:
    """The longest commit gap of any live-group partition across the window, with its partition and
    that partition's usual gap before the window."""
    w0, w1 = window
    best: tuple[float, int] | None = None
    for p, ts in sorted(times_by_partition.items()):
        g = longest_gap(ts, w0, w1)
        if g is not None and (best is None or g > best[0]):
            best = (g, p)
    if best is None:
        return {"pause_seconds": None}
    usual = usual_gap(times_by_partition[best[1]], w0)
    return {
        "pause_seconds": round(best[0], 2),
        "pause_partition": best[1],
        "usual_gap_seconds": usual,
        "pause_excess_seconds": None if usual is None else round(max(0.0, best[0] - usual), 2),
    }


def first_drained(batches: Iterable[Batch], after: float) -> float | None:
    """Commit time of the first drained batch at or after ``after``."""
    ts = [b.t for b in batches if b.source == "drain" and b.t >= after]
    return min(ts) if ts else None


def pod_starts(samples: Sequence[Any], batches: Sequence[Batch] = ()) -> list[float]:
    """Seconds from each scale-up (the Deployment's ``spec.replicas`` n → m > n, n > 0; the status's
    desired replicas when the Deployment was not read) until the new consumers commit: the m − n
    consumer workers first seen in the ledger after it, the last of them; without ledger rows,
    until the Deployment reported m ready pods."""
    first_seen: dict[str, float] = {}
    for b in sorted(batches, key=lambda b: b.t):
        if b.source == "consumer":
            first_seen.setdefault(b.worker.split("/")[0], b.t)  # per pod
    out = []
    prev = None
    for i, s in enumerate(samples):
        cur = s.pods if s.pods is not None else s.desired
        if cur is None:
            continue
        if prev is not None and cur > prev > 0:
            new = sorted(t for t in first_seen.values() if t >= s.t - 1.0)[: cur - prev]
            if first_seen and len(new) == cur - prev:
                out.append(round(max(0.0, new[-1] - s.t), 1))
            else:
                for later in samples[i:]:
                    if later.ready is not None and later.ready >= cur:
                        out.append(round(later.t - s.t, 1))
                        break
        prev = cur
    return out


def pod_changes(samples: Sequence[Any], t0: float, t1: float) -> list[list[float]]:
    """``[t, from, to]`` for each change of the Deployment's pods (spec.replicas) within [t0, t1]."""
    out = []
    prev = None
    for s in samples:
        if s.pods is None:
            continue
        if prev is not None and s.pods != prev and t0 <= s.t <= t1:
            out.append([round(s.t, 1), prev, s.pods])
        prev = s.pods
    return out


def min_replicas_during(samples: Sequence[Any], window: tuple[float, float]) -> int | None:
    """The fewest replicas (status) and ready pods (Deployment) seen inside the window."""
    vals = [
        min(v for v in (s.replicas, s.ready) if v is not None)
        for s in samples
        if window[0] <= s.t <= window[1] and (s.replicas is not None or s.ready is not None)
    ]
    return min(vals) if vals else None


def drain_measurements(
    drains: Sequence[dict[str, Any]], batches: Sequence[Batch], samples: Sequence[Any], wall0: float | None
) -> None:
    """Adds to each drain (in place): its hand-off window, ``pause_seconds`` from the ledger (the
    operator's own figure stays as ``status_pause_seconds``), ``start_up_seconds`` and the fewest
    replicas seen during the hand-off."""
    times = commit_times(batches)
    for d in drains:
        if "pause_seconds" in d:
            d["status_pause_seconds"] = d.pop("pause_seconds")
        d["pause_seconds"] = None
        if wall0 is None:
            continue
        w = hand_off_window(d.get("times") or {}, wall0)
        if w is None:
            continue
        d["hand_off_window"] = [round(w[0], 1), round(w[1], 1)]
        d.update(hand_off_pause(times, w))
        d["min_replicas_during_hand_off"] = min_replicas_during(samples, w)
        # a scale event just before or inside the window: its rebalance also stalls partitions, so a
        # long gap there is not the hand-off's alone
        d["pod_changes_near_hand_off"] = pod_changes(samples, w[0] - 10.0, w[1])
        first = first_drained(batches, w[0])
        d["start_up_seconds"] = None if first is None else round(first - w[0], 1)
        # for the simulator, which launches the drain when the hand-off ends and models that pause
        # itself: launch -> first drained record
        d["launch_to_first_record_seconds"] = None if first is None else round(max(0.0, first - w[1]), 1)


def _serving_warm_drain(s: Any) -> bool:
    """The sample shows a warm drain attempt running (its Job handed its plan to the runtime)."""
    d = s.drain or {}
    return d.get("phase") == "Running" and d.get("runtime") == "warm"


def runtime_report(samples: Sequence[Any], wall0: float | None) -> dict[str, Any] | None:
    """The warm drain runtime as sampled (``Sample.runtime_*``; None when it was not sampled): each
    scale-up (0 -> n, the first sample already up included) with its stamp, when a pod of it was
    Ready and the warm-up between them (stamp -> Ready transition), the scale-downs, and the minutes
    it had replicas: ``up_minutes`` all of them, ``idle_minutes`` those serving no warm drain (what
    the simulator's ``drain_runtime_minutes`` counts). Times ``*_t`` in seconds since ``wall0``."""
    seen = [s for s in samples if s.runtime_replicas is not None]
    if not seen:
        return None
    episodes: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    up_s = idle_s = 0.0
    for a, b in itertools.pairwise(seen):
        if a.runtime_replicas:
            dt = max(0.0, b.t - a.t)
            up_s += a.runtime_replicas * dt
            if not _serving_warm_drain(a):
                idle_s += a.runtime_replicas * dt
    for s in seen:
        r = int(s.runtime_replicas or 0)
        stamp = s.runtime_scaled_up_at
        restamped = (
            cur is not None
            and r > 0
            and stamp is not None
            and cur["stamp"] is not None
            and abs(stamp - cur["stamp"]) > 0.5
        )  # down and up again between two samples
        if cur is not None and (r == 0 or restamped):
            cur["scaled_down_t"] = round(s.t, 1)
            cur = None
        if r > 0 and cur is None:
            cur = {"stamp": stamp, "seen_up_t": round(s.t, 1), "ready_at": None, "scaled_down_t": None}
            episodes.append(cur)
        if cur is not None:
            if cur["stamp"] is None:
                cur["stamp"] = stamp
            ready = s.runtime_ready_since
            if (
                cur["ready_at"] is None
                and ready is not None
                and (cur["stamp"] is None or ready >= cur["stamp"] - 1.0)
            ):
                cur["ready_at"] = ready  # a pod of this scale-up (the transition time has whole seconds)
    out_eps = []
    for e in episodes:
        warm = (
            None
            if e["stamp"] is None or e["ready_at"] is None
            else round(max(0.0, e["ready_at"] - e["stamp"]), 1)
        )
        rel = lambda x: None if x is None or wall0 is None else round(x - wall0, 1)  # noqa: E731
        out_eps.append(
            {
                "scaled_up_t": rel(e["stamp"]),
                "seen_up_t": e["seen_up_t"],
                "ready_t": rel(e["ready_at"]),
                "warm_up_seconds": warm,
                "scaled_down_t": e["scaled_down_t"],
            }
        )
    warm_ups = [e["warm_up_seconds"] for e in out_eps if e["warm_up_seconds"] is not None]
    return {
        "scale_ups": len(out_eps),
        "scale_downs": sum(1 for e in out_eps if e["scaled_down_t"] is not None),
        "warm_ups_seconds": warm_ups,
        "warm_up_seconds": round(sum(warm_ups) / len(warm_ups), 2) if warm_ups else None,
        "up_minutes": round(up_s / 60.0, 2),
        "idle_minutes": round(idle_s / 60.0, 2),
        "replicas_at_end": int(seen[-1].runtime_replicas or 0),
        "episodes": out_eps,
    }


def reported_capacity(samples: Sequence[Any]) -> list[tuple[float, float]]:
    """The operator's estimate of a consumer's capacity (``status`` as sampled) at each change:
    (t, records/s per replica); samples without one (nothing reported yet) are left out."""
    out: list[tuple[float, float]] = []
    for s in samples:
        cap = getattr(s, "capacity", None)
        if cap is not None and (not out or out[-1][1] != float(cap)):
            out.append((round(float(s.t), 1), float(cap)))
    return out


def sim_params(
    *,
    partitions: int,
    sla_s: float,
    consumer_capacity: float | None,
    drain_task_capacity: float | None,
    pod_starts_s: Sequence[float],
    drains: Sequence[Mapping[str, Any]],
    split_factor: int,
    max_tasks: int,
    min_backlog_records: int,
    poll_interval_s: float,
    min_replicas: int,
    max_replicas: int,
    scale_down_window_s: float,
    batch_timeout_s: float,
    batch_max_records: int,
    warm_runtime: str | None = None,
    runtime_cooldown_s: float | None = None,
    runtime: Mapping[str, Any] | None = None,
    busy_drains: bool = DrainSpec().busy,
    reported_capacity: Sequence[tuple[float, float]] = (),
) -> dict[str, Any]:
    """The run's parameters as the simulator names them (``SimParams`` fields); ``None`` = not
    measured in this run (the simulator keeps its default).

    With the runtime on demand (``warm_runtime="on-demand"``, ``runtime`` = :func:`runtime_report`)
    the drain start-up splits in two as the simulator models it: ``drain_start_s`` = the runtime's
    warm-up (scale-up -> Ready, the mean; also a cold drain's start-up there) and
    ``drain_warm_start_s`` = launch -> first record of the warm drains (the mean). Without it the
    keys are as before (``drain_start_s`` = every drain's launch -> first record; the README demo
    runs the runtime all the time, so its drains start warm, as the simulator's default "off" mode
    starts them after ``drain_start_s``).

    What the operator knew, where it differs from what was measured (the simulator runs the
    operator's decision step with it, the world with the measurements): ``reported_capacity`` —
    its estimate of a consumer's capacity over the run (:func:`reported_capacity`); it learns the
    start-ups (``learn_start_ups``) and is not told the drain tasks' capacity (``tell_task_capacity``
    false: its default, a consumer's)."""
    starts = [
        float(d["launch_to_first_record_seconds"])
        for d in drains
        if d.get("launch_to_first_record_seconds") is not None
    ]
    pauses = [float(d["pause_excess_seconds"]) for d in drains if d.get("pause_excess_seconds") is not None]
    paths = [d.get("hand_off_path") for d in drains if d.get("hand_off_path")]
    out: dict[str, Any] = {
        "partitions": partitions,
        "sla_s": float(sla_s),
        "capacity": consumer_capacity,
        "drain_task_capacity": drain_task_capacity,
        "pod_start_s": _median(list(pod_starts_s)),
        # drain start-up: the mean, as every drain pays it
        "drain_start_s": round(sum(starts) / len(starts), 2) if starts else None,
        "handoff_pause_s": _median(pauses),
        "max_drain_tasks": max_tasks,
        "split_factor": split_factor,
        "min_backlog_records": min_backlog_records,
        "poll_interval_s": float(poll_interval_s),
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "scale_down_window_s": float(scale_down_window_s),
        "batch_timeout_s": float(batch_timeout_s),
        "batch_max_records": batch_max_records,
        "busy_drains": busy_drains,
        # the quiesce fallback empties the group (pods restart); measured by the paths the drains took
        "handoff_quiesce": bool(paths) and sum(p == "Quiesce" for p in paths) * 2 > len(paths),
        "reported_capacity": [[t, c] for t, c in reported_capacity] or None,
        "learn_start_ups": True,
        "tell_task_capacity": False,
    }
    if warm_runtime == "on-demand":
        warm = [
            float(d["launch_to_first_record_seconds"])
            for d in drains
            if d.get("runtime") == "warm" and d.get("launch_to_first_record_seconds") is not None
        ]
        out.update(
            warm_runtime="on-demand",
            runtime_cooldown_s=None if runtime_cooldown_s is None else float(runtime_cooldown_s),
            drain_warm_start_s=round(sum(warm) / len(warm), 2) if warm else None,
            drain_start_s=(runtime or {}).get("warm_up_seconds"),
        )
    return out
