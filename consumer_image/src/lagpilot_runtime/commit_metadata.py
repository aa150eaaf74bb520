"""The offset-commit metadata contract (docs/CONTRACTS.md): ``lp1;cap=<records/busy s>;ts=<unix ms>``.

Written by the consumer runtime with every commit of its group's offsets (its measured capacity, or
``cap=`` empty while it has none); read by the operator from the committed offsets it fetches. One
module for both sides: the consumer image's runtime owns it, the operator imports it (as it imports
the drain plan and the hand-off mailbox contracts). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PREFIX = "lp1"


@dataclass(frozen=True)
class CapacityReport:
    """What one consumer measured: records per busy second, and when (unix ms)."""

    records_per_second: float
    ts_ms: int


def encode(capacity: float | None, ts_ms: int) -> str:
    """The metadata string for a commit; ``capacity`` None (not measured yet) leaves ``cap`` empty.
    Four significant digits: a slow handler's capacity (0.03 records/s) must not round to zero."""
    cap = "" if capacity is None else f"{capacity:.4g}"
    return f"{PREFIX};cap={cap};ts={int(ts_ms)}"


def decode(text: str | None) -> CapacityReport | None:
    """The report in a commit's metadata, or None: no metadata, another tool's, another version, an
    empty/zero/negative/non-finite capacity or a missing/bad timestamp (foreign or corrupt metadata
    never breaks observation). Fields may come in any order; unknown ones are ignored."""
    if not text:
        return None
    parts = text.strip().split(";")
    if parts[0] != PREFIX:
        return None
    fields: dict[str, str] = {}
    for item in parts[1:]:
        key, sep, value = item.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        cap = float(fields["cap"])
        ts = int(fields["ts"])
    except (KeyError, ValueError):
        return None
    if not math.isfinite(cap) or cap <= 0 or ts <= 0:
        return None
    return CapacityReport(records_per_second=cap, ts_ms=ts)
