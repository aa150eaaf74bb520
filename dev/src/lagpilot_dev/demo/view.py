"""The demo's live view: one frame of plain text (pure), redrawn in place with ANSI escapes.

No curses, no `rich`: a frame is a list of lines; on a terminal the demo moves the cursor home and
clears below before printing it, elsewhere (CI, the test) it prints one summary line now and then.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from lagpilot_dev.demo.report import Sample, condition

BOLD, DIM, RED, GREEN, YELLOW, CYAN, RESET = (
    "\x1b[1m",
    "\x1b[2m",
    "\x1b[31m",
    "\x1b[32m",
    "\x1b[33m",
    "\x1b[36m",
    "\x1b[0m",
)
HOME_CLEAR = "\x1b[H\x1b[J"

# what each drain phase means, for a reader who has not read docs/drain.md
DRAIN_PHASES = {
    "Planned": "hand-off: the consumers owning the ranges move past the split (or, with none alive, the group is quiesced)",
    "HandedOff": "the group consumes past the split; the Spark drain is being launched",
    "Running": "Spark processes the ranges with the same handler, more tasks than partitions",
    "Succeeded": "the Job finished; checking every sub-range's progress",
    "Verified": "every offset of the ranges was processed",
    "Failed": "the Job failed; the ranges stay recorded and are retried",
    "Cancelled": "cancelled; the unfinished ranges stay recorded",
}


@dataclass
class Header:
    """What the view shows besides the sample: where the demo is and what it waits for."""

    profile: str
    elapsed_s: float
    stage: str
    waiting_for: str
    phase: str = ""  # producer phase description
    namespace: str = ""
    name: str = ""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` visible characters (escape codes kept), so a redraw never wraps."""
    out, seen, i = [], 0, 0
    while i < len(line):
        m = _ANSI.match(line, i)
        if m:
            out.append(m.group(0))
            i = m.end()
            continue
        if seen >= width:
            out.append(RESET if "\x1b[" in line else "")
            break
        out.append(line[i])
        seen += 1
        i += 1
    return "".join(out)


def bar(value: float, total: float, width: int = 30, fill: str = "█", empty: str = "░") -> str:
    """A horizontal bar; ``value/total`` of it filled (clamped)."""
    if total <= 0 or width <= 0:
        return empty * max(0, width)
    n = round(width * max(0.0, min(1.0, value / total)))
    return fill * n + empty * (width - n)


def fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    if not math.isfinite(x):
        return "∞"
    if x >= 3600:
        return f"{x / 3600:.1f} h"
    return f"{x:.0f} s"


def color(text: str, code: str, enabled: bool) -> str:
    return f"{code}{text}{RESET}" if enabled else text


def render(
    header: Header,
    s: Sample | None,
    kubectl_lines: Sequence[str],
    *,
    colors: bool = True,
    width: int | None = None,
) -> list[str]:
    """The frame as lines."""
    width = width or shutil.get_terminal_size((110, 40)).columns
    c = lambda text, code: color(text, code, colors)  # noqa: E731
    mins, secs = divmod(int(header.elapsed_s), 60)
    out = [c(f"lagpilot demo · profile {header.profile} · {mins:02d}:{secs:02d} · {header.stage}", BOLD)]
    if header.phase:
        out.append(f"traffic   {header.phase}")
    if s is None:
        out.append(c(f"waiting for: {header.waiting_for}", YELLOW))
        return [line[: width + 20] for line in out]
    out.append(
        f"producer  {s.produce_rate:6.0f} rec/s   produced {s.produced:>9,}   in PostgreSQL "
        f"{s.total_in_sink:>9,}   backlog {c(f'{s.total_backlog:,}', BOLD)}"
    )
    out.append("")
    peak = max([1] + [s.backlog(p) for p in s.partitions] + [s.group_lag(p) for p in s.partitions])
    bw = max(10, min(40, width - 70))
    out.append(
        c(
            f"{'partition':<10}{'end':>10}{'committed':>11}{'group lag':>11}{'backlog':>10}  backlog (not yet in PostgreSQL)",
            DIM,
        )
    )
    for p in s.partitions:
        com = s.committed.get(p)
        out.append(
            f"  p{p:<7}{s.end.get(p, 0):>10,}{('—' if com is None else f'{com:,}'):>11}"
            f"{s.group_lag(p):>11,}{s.backlog(p):>10,}  {c(bar(s.backlog(p), peak, bw), CYAN)}"
        )
    out.append("")
    cap = "—" if s.capacity is None else f"{s.capacity:.1f} rec/s per replica"
    rate = "—" if s.observed_rate is None else f"{s.observed_rate:.0f} rec/s"
    rep = "—" if s.replicas is None else str(s.replicas)
    des = "—" if s.desired is None else str(s.desired)
    ready = "" if s.ready is None else f" ({s.ready} ready)"
    out.append(
        f"replicas  {c(rep, BOLD)} (desired {des}){ready}   measured capacity {cap}   produce rate seen {rate}"
    )
    if s.sla_s or s.projected_s is not None:
        over = (
            s.projected_s is not None
            and s.sla_s is not None
            and (not math.isfinite(s.projected_s) or s.projected_s > s.sla_s)
        )
        verdict = c("over SLA", RED) if over else c("within SLA", GREEN)
        out.append(f"catch-up  projected {c(fmt_s(s.projected_s), BOLD)} vs SLA {fmt_s(s.sla_s)}  {verdict}")
    d = s.drain or {}
    if d.get("phase"):
        done, total = s.drain_progress()
        ranges = " ".join(
            f"p{r.get('partition')}[{r.get('start', '?')}..{r.get('end', '?')})"
            for r in d.get("ranges") or ()
        )
        pct = f"{100 * done / total:.0f}%" if total else "—"
        active = s.drain_active
        label = c(f"drain #{d.get('id')} {d.get('phase')}", YELLOW if active else DIM)
        out.append(f"{label}  {ranges}  {c(DRAIN_PHASES.get(str(d.get('phase')), ''), DIM)}")
        if d.get("phase") in ("Planned", "HandedOff") or d.get("handOffPath"):
            rep = "—" if s.replicas is None else str(s.replicas)
            ready = "—" if s.ready is None else str(s.ready)
            zero = s.replicas == 0 or s.ready == 0
            out.append(
                f"hand-off  path {c(str(d.get('handOffPath') or '—'), BOLD)}   live group: {c(rep, RED if zero else GREEN)}"
                f" replicas, {ready} ready during the hand-off"
                + (
                    f"   operator's pause {d['pauseSeconds']:.1f} s"
                    if d.get("pauseSeconds") is not None
                    else ""
                )
            )
        out.append(
            f"          {c(bar(done, total, bw + 10), YELLOW if active else DIM)} {done:,}/{total:,} ({pct})"
            f" reported by the drain   Spark tasks with work left: {s.drain_tasks}"
        )
        if s.drain_in_sink is not None and total:
            out.append(
                f"          {c(bar(s.drain_in_sink, total, bw + 10), YELLOW if active else DIM)} "
                f"{s.drain_in_sink:,}/{total:,} of its ranges already in PostgreSQL"
            )
    else:
        out.append(c("drain     none so far", DIM))
    if s.decision:
        out.append(f"decision  {s.decision[: width - 10]}")
    if s.conditions:
        conds = []
        for t in ("Ready", "Scaling", "CatchUpAtRisk", "Draining", "Degraded"):
            cs = condition(s, t)
            if cs is None:
                continue
            st, reason = cs
            hot = (t in ("CatchUpAtRisk", "Degraded", "Draining", "Scaling") and st == "True") or (
                t == "Ready" and st != "True"
            )
            conds.append(c(f"{t}={st}", YELLOW if hot else "") + c(f"({reason})", DIM))
        out.append("conditions " + "  ".join(conds))
    out.append("")
    out.extend(c(line, DIM) if i == 0 else line for i, line in enumerate(kubectl_lines))
    out.append("")
    out.append(c(f"waiting for: {header.waiting_for}", YELLOW))
    return out


def one_line(header: Header, s: Sample | None) -> str:
    """The non-terminal progress line (CI logs, the test)."""
    t = f"[{int(header.elapsed_s):4d}s] {header.stage}"
    if s is None:
        return f"{t} · waiting for: {header.waiting_for}"
    lags = " ".join(f"p{p}:{s.group_lag(p)}/{s.backlog(p)}" for p in s.partitions)
    d = s.drain or {}
    drain = ""
    if d.get("phase"):
        done, total = s.drain_progress()
        drain = f" drain#{d.get('id')} {d.get('phase')} {done}/{total}"
        if d.get("handOffPath"):
            drain += f" hand-off {d.get('handOffPath')}"
    return (
        f"{t} · rate {s.produce_rate:.0f}/s produced {s.produced} in-sink {s.total_in_sink} "
        f"lag/backlog {lags} replicas {s.replicas}/{s.desired} projected {fmt_s(s.projected_s)} "
        f"SLA {fmt_s(s.sla_s)}{drain} · waiting for: {header.waiting_for}"
    )
