"""The simulator's output: the policy table, the plot (matplotlib, optional) and the suite's rows."""

from __future__ import annotations

import sys
from typing import Any

from lagpilot.sim.params import SimParams
from lagpilot.sim.policies import PolicyResult

COLUMNS = (
    "within_sla_fraction",
    "p99_latency_s",
    "max_latency_s",
    "violation_minutes",
    "replica_minutes",
    "drain_task_minutes",
    "scale_events",
)


def format_table(results: dict[str, PolicyResult]) -> str:
    head = f"{'policy':<18}" + "".join(f"{c:>21}" for c in COLUMNS)
    lines = [head]
    for name, r in results.items():
        d = r.to_dict()
        cells = []
        for c in COLUMNS:
            v = d[c]
            cells.append(f"{v:>21.4f}" if c == "within_sla_fraction" else f"{v:>21}")
        label = name + (f" ({d['lag_threshold']})" if "lag_threshold" in d and name == "keda_tuned" else "")
        lines.append(f"{label:<18}" + "".join(cells))
    return "\n".join(lines)


def plot(results: dict[str, PolicyResult], params: SimParams, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    for name, r in results.items():
        hrs = [x / 3600 for x in r.series["t"]]
        axes[0].plot(hrs, r.series["age"], label=name, lw=1)
        axes[1].plot(hrs, r.series["lag"], label=name, lw=1)
        axes[2].plot(hrs, r.series["replicas"], label=name, lw=1)
        axes[3].plot(hrs, r.series["tasks"], label=name, lw=1)
    axes[0].axhline(params.sla_s, color="red", ls="--", lw=1, label=f"SLA {params.sla_s:.0f}s")
    axes[0].set_ylabel("oldest record age (s)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    axes[0].set_yscale("symlog", linthresh=max(1.0, params.sla_s / 10))
    axes[1].set_ylabel("unprocessed records")
    axes[1].set_yscale("symlog", linthresh=1000)
    axes[2].set_ylabel("replicas")
    axes[3].set_ylabel("drain tasks")
    axes[3].set_xlabel("hours")
    axes[0].legend(fontsize=8, ncol=5)
    fig.suptitle(
        f"{params.partitions} partitions, capacity {params.capacity}/s per consumer, SLA {params.sla_s:.0f}s"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_or_say(results: dict[str, PolicyResult], params: SimParams, path: str) -> None:
    try:
        plot(results, params, path)
        print(f"plot: {path}", file=sys.stderr)
    except ImportError:
        print("plot skipped: matplotlib not installed (pip install 'lagpilot[plot]')", file=sys.stderr)


def _suite_line(row: dict[str, Any], markdown: bool) -> str:
    cells = [f"{row['kind']} s{row['seed']}"]
    for name in ("lagpilot", "static", "keda", "keda_tuned"):
        m = row.get(name)
        cells.append("-" if m is None else f"{m['within_sla_fraction']:.4f} / {m['cost_minutes']:.0f}")
    cells.append("yes" if row["lagpilot_ok"] else "no")
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return f"{cells[0]:<18}" + "".join(f"{c:>22}" for c in cells[1:])


def suite_header(markdown: bool) -> str:
    cols = ["trace", "lagpilot", "static", "keda", "keda_tuned", ">=0.999 & cost<=keda"]
    if markdown:
        return "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)
    return f"{cols[0]:<18}" + "".join(f"{c:>22}" for c in cols[1:])
