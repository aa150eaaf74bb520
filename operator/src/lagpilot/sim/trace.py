"""The simulator's input: a produce-rate trace (CSV ``t_s,produce_msgs_per_s[,partition_weights]``)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trace:
    """Produce rate per row (one row a minute); optional per-row partition weights."""

    times: tuple[float, ...]
    rates: tuple[float, ...]
    weights: tuple[tuple[float, ...] | None, ...]

    @property
    def end_s(self) -> float:
        if not self.times:
            return 0.0
        step = self.times[-1] - self.times[-2] if len(self.times) > 1 else 60.0
        return self.times[-1] + step


def parse_trace(lines: Sequence[str] | Any) -> Trace:
    """Parse CSV text rows ``t_s,produce_msgs_per_s[,partition_weights]`` (header required)."""
    reader = csv.DictReader(lines)
    times: list[float] = []
    rates: list[float] = []
    weights: list[tuple[float, ...] | None] = []
    for row in reader:
        times.append(float(row["t_s"]))
        rates.append(max(0.0, float(row["produce_msgs_per_s"])))
        w = (row.get("partition_weights") or "").strip()
        weights.append(tuple(float(x) for x in w.split(",")) if w else None)
    order = sorted(range(len(times)), key=lambda i: times[i])
    return Trace(
        tuple(times[i] for i in order), tuple(rates[i] for i in order), tuple(weights[i] for i in order)
    )


def load_trace(path: str) -> Trace:
    with open(path, newline="") as f:
        return parse_trace(f)


def _weights(w: tuple[float, ...] | None, partitions: int) -> list[float]:
    if not w:
        return [1.0 / partitions] * partitions
    vals = [max(0.0, x) for x in (list(w) + [0.0] * partitions)[:partitions]]
    total = sum(vals)
    return [v / total for v in vals] if total > 0 else [1.0 / partitions] * partitions


def trace_from_rows(rows: Sequence[tuple[float, float, tuple[float, ...] | None]]) -> Trace:
    return Trace(tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows))
