"""The demo's PNG: backlog and lag, replicas and drain tasks, projection vs SLA (needs matplotlib)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lagpilot_dev.demo.report import Sample, measured_rates


def plot(
    samples: Sequence[Sample],
    path: str,
    *,
    sla_s: float,
    title: str,
    drains: Sequence[Mapping[str, Any]] = (),
) -> None:
    """PNG: backlog and group lag per partition, replicas (status, desired, ready pods) and drain
    tasks, projection vs SLA. Drains are shaded orange; each hand-off window (plan → the group past
    the split) red, labelled with its path and the longest commit gap of the live group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [s.t for s in samples]
    parts = sorted({p for s in samples for p in s.partitions})
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]})
    ax = axes[0]
    if parts:
        ax.stackplot(
            xs,
            *[[s.backlog(p) for s in samples] for p in parts],
            labels=[f"backlog p{p} (not in PostgreSQL)" for p in parts],
            alpha=0.55,
        )
    ax.plot(
        xs,
        [s.total_group_lag for s in samples],
        color="black",
        lw=1.2,
        label="group lag (Kafka, all partitions)",
    )
    ax.set_ylabel("records")
    ax.legend(loc="upper left", fontsize=8)
    rate_ax = ax.twinx()
    rate_ax.plot(xs, measured_rates(samples), color="tab:red", lw=1, ls="--", label="produce rate (measured)")
    rate_ax.set_ylabel("produce rate (records/s)", color="tab:red")
    rate_ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title)

    ax = axes[1]
    ax.step(
        xs,
        [s.replicas if s.replicas is not None else math.nan for s in samples],
        where="post",
        label="replicas",
        color="tab:blue",
        lw=2,
    )
    ax.step(
        xs,
        [s.desired if s.desired is not None else math.nan for s in samples],
        where="post",
        label="desired",
        color="tab:cyan",
        ls="--",
    )
    ax.step(
        xs,
        [s.ready if s.ready is not None else math.nan for s in samples],
        where="post",
        label="ready pods",
        color="tab:green",
        lw=1,
        ls=":",
    )
    ax.set_ylim(bottom=-0.2)
    ax.set_ylabel("consumers")
    ax.legend(loc="upper left", fontsize=8)
    task_ax = ax.twinx()
    task_ax.fill_between(
        xs,
        [s.drain_tasks for s in samples],
        step="post",
        color="tab:orange",
        alpha=0.35,
        label="drain tasks (Spark)",
    )
    task_ax.set_ylabel("drain tasks", color="tab:orange")
    task_ax.legend(loc="upper right", fontsize=8)

    ax = axes[2]
    cap = 10 * sla_s
    proj = [
        min(s.projected_s, cap)
        if s.projected_s is not None and math.isfinite(s.projected_s)
        else (cap if s.projected_s is not None else math.nan)
        for s in samples
    ]
    ax.plot(xs, proj, color="tab:purple", label=f"projected catch-up (capped at {cap:.0f} s)")
    ax.axhline(sla_s, color="tab:red", ls="--", label=f"SLA {sla_s:.0f} s")
    ax.set_ylabel("seconds")
    ax.set_xlabel("seconds since the replay started")
    ax.legend(loc="upper left", fontsize=8)

    # shade the drains on every panel
    active = [s.drain_active for s in samples]
    start = None
    for i, a in enumerate([*active, False]):
        if a and start is None:
            start = xs[i]
        elif not a and start is not None:
            end = xs[i] if i < len(xs) else xs[-1]
            for a_ in axes:
                a_.axvspan(start, end, color="tab:orange", alpha=0.08)
            start = None
    for d in drains:
        w = d.get("hand_off_window")
        if not w:
            continue
        for a_ in axes:
            a_.axvspan(w[0], max(w[1], w[0] + 0.5), color="tab:red", alpha=0.25)
        label = f"#{d.get('id')} {d.get('hand_off_path') or 'hand-off'}"
        if d.get("pause_seconds") is not None:
            label += f"\ngap {d['pause_seconds']:.1f}s"
        if d.get("min_replicas_during_hand_off") is not None:
            label += f", min {d['min_replicas_during_hand_off']} rep."
        axes[1].annotate(
            label,
            (w[0], 0.02),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="tab:red",
            rotation=90,
            va="bottom",
            ha="right",
        )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
