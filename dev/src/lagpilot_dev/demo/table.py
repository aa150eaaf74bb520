"""The end-of-demo summary as a plain-text table (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _fmt_int(x: Any) -> str:
    return "—" if x is None else f"{int(x):,}"


def _fmt_s(x: Any) -> str:
    if x is None:
        return "never"
    return f"{float(x):.0f} s"


def format_ranges(ranges: Sequence[Mapping[str, Any]]) -> str:
    return (
        " ".join(f"p{r['partition']}[{_fmt_int(r.get('start'))}..{_fmt_int(r.get('split'))})" for r in ranges)
        or "—"
    )


def format_summary(summary: Mapping[str, Any]) -> str:
    """The end-of-demo table, plain text."""
    lat = summary.get("latency") or {}
    rows = [
        ("records produced", _fmt_int(summary["produced"])),
        ("distinct records in PostgreSQL", _fmt_int(summary["distinct_in_sink"])),
        ("duplicate rows", _fmt_int(summary["duplicates"])),
        ("peak group lag (Kafka)", _fmt_int(summary["peak_lag"])),
        ("peak backlog (not yet in PostgreSQL)", _fmt_int(summary["peak_backlog"])),
        ("time to catch up (peak → caught up)", _fmt_s(summary["catch_up_seconds"])),
        ("catch-up SLA", _fmt_s(summary["sla_seconds"])),
        ("max record latency (produce → row)", _fmt_s(lat.get("max_s"))),
        (
            "records within SLA of being produced",
            "—"
            if lat.get("within_sla_fraction") is None
            else f"{100 * float(lat['within_sla_fraction']):.1f} %",
        ),
        (
            "max replicas / scale-ups / scale-downs (by the scaler)",
            f"{summary['max_replicas']} / {summary['scale_ups']} / {summary['scale_downs']}",
        ),
        ("replica-minutes", f"{summary['replica_minutes']:.1f}"),
        ("drain task-minutes", f"{summary['drain_task_minutes']:.1f}"),
        ("drains", str(len(summary["drains"]))),
    ]
    by = summary.get("processed_by") or {}
    if by:
        rows.append(
            (
                "processed by consumers / by the drain",
                f"{_fmt_int(by.get('consumer', 0))} / {_fmt_int(by.get('drain', 0))}",
            )
        )
    if summary.get("ledger") is not None:
        rows.append(
            ("deliveries in the ledger (one row each, no key)", _fmt_int(summary["ledger"]["delivered"]))
        )
        rows.append(
            ("records processed more than once (ledger)", _fmt_int(summary["delivered_more_than_once"]))
        )
        rows.append(("records never delivered (ledger)", _fmt_int(summary["lost"])))
    base = summary.get("baselines") or {}
    for name, label in (
        ("static", "static replicas (simulated on this trace)"),
        ("keda", "KEDA (simulated on this trace)"),
    ):
        if (base.get(name) or {}).get("within_sla_fraction") is not None:
            rows.append(
                (f"within SLA with {label}", f"{100 * float(base[name]['within_sla_fraction']):.1f} %")
            )
    rt = summary.get("runtime")
    if rt:  # --runtime-on-demand
        warm = "—" if rt.get("warm_up_seconds") is None else f"{float(rt['warm_up_seconds']):.0f} s"
        rows.append(
            (
                "warm drain runtime on demand: scale-ups / scale-downs / warm-up (mean)",
                f"{rt.get('scale_ups')} / {rt.get('scale_downs')} / {warm}",
            )
        )
        rows.append(
            (
                "warm drain runtime minutes up / serving no drain",
                f"{float(rt.get('up_minutes') or 0):.1f} / {float(rt.get('idle_minutes') or 0):.1f}",
            )
        )
    if summary.get("operator_restarts"):
        rows.append(
            (
                "operator crashes (restarted by the demo)",
                f"{summary['operator_restarts']} (exit codes {summary.get('operator_exit_codes')})",
            )
        )
    width = max(len(k) for k, _ in rows)
    lines = [f"  {k.ljust(width)}  {v}" for k, v in rows]
    for d in summary["drains"]:
        secs = f", {d['seconds']:.0f} s" if d.get("seconds") is not None else ""
        pause = ""
        if d.get("pause_seconds") is not None:
            usual = (
                f" (usual {d['usual_gap_seconds']:.1f} s)" if d.get("usual_gap_seconds") is not None else ""
            )
            pause = f", longest commit gap of the live group {d['pause_seconds']:.1f} s{usual}"
        if d.get("hand_off_path"):
            pause += f", hand-off {d['hand_off_path']}"
        if d.get("min_replicas_during_hand_off") is not None:
            pause += f", min replicas {d['min_replicas_during_hand_off']}"
        if d.get("pod_changes_near_hand_off"):
            pause += (
                " (pods "
                + ", ".join(f"{int(a)}→{int(b)} at {t:.0f} s" for t, a, b in d["pod_changes_near_hand_off"])
                + ")"
            )
        if d.get("start_up_seconds") is not None:
            pause += f", first drained record {d['start_up_seconds']:.0f} s after the plan"
            cpu = d.get("node_cpu")
            if cpu:  # --node: the CPU the node's pods got meanwhile (docs/node.md "CPU")
                pause += (
                    f" (the node's pods got {cpu['cpu_seconds']:.1f} CPU-s meanwhile, "
                    f"{100 * cpu['share_of_machine']:.0f} % of the machine, load {cpu['load1']:.0f})"
                )
        if rt and d.get("runtime"):
            pause += f", {d['runtime']} start"
        lines.append(
            f"  drain #{d['id']} {d.get('phase')} ({d.get('reason') or '-'}): {format_ranges(d['ranges'])}"
            f" — {_fmt_int(d.get('records_done'))}/{_fmt_int(d.get('records_total'))} records{secs}{pause}"
        )
    return "\n".join(lines)
