"""bench/versus.py's PNG: one round's runs side by side on the same trace (needs matplotlib).

Top: records produced but not yet in PostgreSQL (the backlog, group + drain) per run. Middle:
consumer replicas (the Deployment's spec.replicas) per run, and the KEDA model's predicted
replicas for each KEDA run (dashed). Bottom: lagpilot's drain tasks. Read from each run's
samples.jsonl (the demo's samples) and versus.json's model trajectories.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _samples(run_out: Path) -> list[dict[str, Any]]:
    rows = []
    with open(run_out / "samples.jsonl") as fh:
        for line in fh:
            s = json.loads(line)
            if s["t"] >= 0:
                rows.append(s)
    return rows


def _backlog(s: Mapping[str, Any]) -> int:
    end, sink = s.get("end") or {}, s.get("in_sink") or {}
    return sum(max(0, int(v) - int(sink.get(p, 0))) for p, v in end.items())


def _tasks(s: Mapping[str, Any]) -> int:
    from lagpilot_dev.demo.report import drain_tasks_of

    return drain_tasks_of(s.get("drain"))


def plot_round(rnd: Mapping[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1]})
    colors = {"lagpilot": "tab:blue"}
    palette = iter(["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"])
    for name, res in rnd["results"].items():
        color = colors.setdefault(name, next(palette, "tab:gray"))
        rows = _samples(Path(res["out"]))
        xs = [r["t"] for r in rows]
        w = res.get("within_sla_fraction")
        label = (
            f"{name}: within SLA {100 * w:.1f} %, {res.get('replica_minutes')} replica-min"
            if w is not None
            else name
        )
        axes[0].plot(xs, [_backlog(r) for r in rows], color=color, lw=1.5, label=label)
        axes[1].step(
            xs,
            [r["pods"] if r.get("pods") is not None else math.nan for r in rows],
            where="post",
            color=color,
            lw=2,
            label=f"{name} replicas (measured)",
        )
        model = res.get("model") or {}
        traj = model.get("predicted_replica_changes") or []
        if traj:
            end = xs[-1] if xs else traj[-1][0]
            tx = [t for t, _ in traj] + [end]
            ty = [r for _, r in traj] + [traj[-1][1]]
            axes[1].step(
                tx, ty, where="post", color=color, lw=1.2, ls="--", label=f"{name} replicas (KEDA model)"
            )
        if name == "lagpilot":
            axes[2].step(
                xs, [_tasks(r) for r in rows], where="post", color=color, lw=1.5, label="lagpilot drain tasks"
            )
    axes[0].set_ylabel("backlog (records)")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(title)
    axes[1].set_ylabel("replicas")
    axes[1].legend(loc="upper right", fontsize=8)
    axes[2].set_ylabel("drain tasks")
    axes[2].set_xlabel("seconds since the replay started")
    axes[2].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


SUMMARY_PANELS = (
    ("within_sla_fraction", "records within the SLA (%)", 100.0),
    ("p99_s", "p99 produce → sink latency (s)", 1.0),
    ("replica_minutes", "replica-minutes (+ drain-task-minutes, hatched)", 1.0),
    ("scale_events", "scale events", 1.0),
)


def plot_summary(result: Mapping[str, Any], path: Path) -> None:
    """The medians side by side: one bar per variant and figure, each round's value as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["summary"])
    names.sort(key=lambda n: (n != "lagpilot", n))
    fig, axes = plt.subplots(1, len(SUMMARY_PANELS), figsize=(14, 4))
    for ax, (key, label, scale) in zip(axes, SUMMARY_PANELS, strict=True):
        for i, name in enumerate(names):
            med = result["summary"][name]["median"].get(key)
            if med is None:
                continue
            ax.bar(i, med * scale, color="tab:blue" if name == "lagpilot" else "tab:orange", alpha=0.8)
            if key == "replica_minutes":
                drain = result["summary"][name]["median"].get("drain_task_minutes") or 0.0
                if drain:
                    ax.bar(i, drain, bottom=med, color="none", edgecolor="tab:blue", hatch="//")
            for rnd in result["rounds"]:
                r = rnd["results"].get(name) or {}
                if r.get(key) is not None:
                    ax.plot(i, r[key] * scale, "k.", ms=5)
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_title(label, fontsize=9)
    fig.suptitle(
        f"lagpilot vs KEDA {result.get('keda_version')} · profile {result.get('profile')} · "
        f"median of {max((v['rounds'] for v in result['summary'].values()), default=0)} rounds (dots: each round)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
