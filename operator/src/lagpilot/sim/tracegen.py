"""Trace generators for `lagpilot simulate --generate KIND --seed N [--out FILE]` (pure, seeded).

A trace is CSV rows one a minute: ``t_s,produce_msgs_per_s,partition_weights`` (weights empty:
spread evenly), the format of ``../shared/traces/backfill-seed0.csv``. Rates are scaled to the group
the trace is meant for: ``partitions x capacity`` records/s is what the partition-capped group can
process (``group``). Families (each seed draws its own times, levels and noise):

- ``flash``: a quiet base (6-10 % of ``group``) and, twice a day, a flash spike 20-30x the base
  (1.2-3.0x ``group``, raised to at least 1.5x: always well above what the group can process) for
  10-15 minutes, spread over every partition (weights jitter +-10 %). 24 h.
- ``hot-partition``: a moderate load (30-50 % of ``group``) with, for 1-3 hours at a time (twice),
  one partition (a different one each time) carrying 1.1-1.6x one consumer's capacity. 12 h.
- ``diurnal``: a daily sine between 10-20 % and 90-130 % of ``group`` with 5 % noise. 24 h.
- ``step``: levels held 1-3 hours each, drawn between 5 % and 140 % of ``group``. 12 h.
- ``backfill``: quiet (1-2/s), a plateau (15-30 % of ``group``), a backfill peak (105-130 % of
  ``group``) for 2-4 hours, the plateau again, quiet again (the seed's backfill shape). 24 h.
- ``rolling-hot`` (issue 25): a quiet base (5-30 % of ``group``) and, every ``N`` minutes (45-120),
  a burst of 5-10x one consumer for 10-30 minutes of which one partition (a different one each
  time) takes 60-75 %; the others share the rest evenly. 12 h. :func:`rolling_hot` builds one
  such trace from explicit figures (the issue's own trace: every 90 min, 60 % of 1,500/s for 20 min).
- ``long-flash`` (issue 25): a diurnal base (10-40 % of ``group``) and, twice a day, every
  partition at 2-4x ``group`` (weights jitter +-10 %) for 8-20 minutes. 24 h.

``SUITE`` lists the simulator parameters each family is checked with (`lagpilot simulate --suite`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

KINDS = ("flash", "hot-partition", "diurnal", "step", "backfill", "rolling-hot", "long-flash")

Row = tuple[float, float, tuple[float, ...] | None]


@dataclass(frozen=True)
class Family:
    partitions: int
    capacity: float
    sla_s: float
    hours: int


# the group each family's traces are scaled for, and the SLA they are checked against
SUITE: dict[str, Family] = {
    "flash": Family(partitions=6, capacity=150.0, sla_s=300.0, hours=24),
    "hot-partition": Family(partitions=4, capacity=137.0, sla_s=600.0, hours=12),
    "diurnal": Family(partitions=3, capacity=137.0, sla_s=600.0, hours=24),
    "step": Family(partitions=3, capacity=137.0, sla_s=600.0, hours=12),
    "backfill": Family(partitions=3, capacity=137.0, sla_s=600.0, hours=24),
    "rolling-hot": Family(partitions=6, capacity=150.0, sla_s=300.0, hours=12),
    "long-flash": Family(partitions=6, capacity=150.0, sla_s=300.0, hours=24),
}


def generate(
    kind: str,
    seed: int,
    partitions: int | None = None,
    capacity: float | None = None,
    hours: int | None = None,
) -> list[Row]:
    """Rows (t_s, rate, weights or None) of a ``kind`` trace for ``seed``."""
    if kind not in KINDS:
        raise ValueError(f"unknown trace kind {kind!r}; choose from {', '.join(KINDS)}")
    fam = SUITE[kind]
    p = partitions or fam.partitions
    c = capacity or fam.capacity
    minutes = 60 * (hours or fam.hours)
    rng = random.Random(f"{kind}:{seed}")
    group = p * c
    gen = {
        "flash": _flash,
        "hot-partition": _hot,
        "diurnal": _diurnal,
        "step": _step,
        "backfill": _backfill,
        "rolling-hot": _rolling_hot,
        "long-flash": _long_flash,
    }[kind]
    return gen(rng, minutes, p, c, group)


def _noise(rng: random.Random, x: float, frac: float) -> float:
    return max(0.0, x * (1 + rng.uniform(-frac, frac)))


def _flash(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    base = group * rng.uniform(0.06, 0.10)
    spikes: list[tuple[int, int, float]] = []
    for day in range(max(1, math.ceil(minutes / 1440))):
        for half in (0, 1):  # one in each half of the day: twice a day
            lo = day * 1440 + half * 720 + 30
            start = rng.randrange(lo, lo + 720 - 60)
            length = rng.randint(10, 15)
            mult = rng.uniform(20, 30)
            spikes.append((start, start + length, max(mult * base, 1.5 * group)))
    return _spiked(rng, minutes, p, spikes, lambda m: _noise(rng, base, 0.1))


def _spiked(
    rng: random.Random,
    minutes: int,
    p: int,
    spikes: Sequence[tuple[int, int, float]],
    rate_at: Callable[[int], float],
) -> list[Row]:
    """One row a minute: the rate `rate_at(m)` (its noise drawn first), but inside a spike
    (start, end, level) the spike's level with 5 % noise, spread over the partitions with weights
    of 0.9-1.1."""
    rows: list[Row] = []
    for m in range(minutes):
        rate, w = rate_at(m), None
        for a, b, level in spikes:
            if a <= m < b:
                rate = _noise(rng, level, 0.05)
                w = tuple(round(rng.uniform(0.9, 1.1), 3) for _ in range(p))
        rows.append((60.0 * m, rate, w))
    return rows


def _hot(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    base = group * rng.uniform(0.3, 0.5)
    windows = []
    for k in (0, 1):
        half = minutes // 2
        length = rng.randint(60, min(180, half - 30))
        start = k * half + rng.randrange(15, max(16, half - length - 15))
        hot_p = rng.randrange(p)
        windows.append((start, start + length, hot_p, rng.uniform(1.1, 1.6) * c))
    rows: list[Row] = []
    for m in range(minutes):
        rate, w = _noise(rng, base, 0.05), None
        for a, b, hp, hot_rate in windows:
            if a <= m < b:
                others = _noise(rng, base, 0.05) * (p - 1) / p
                rate = hot_rate + others
                w = tuple(round(hot_rate / rate if i == hp else others / (p - 1) / rate, 4) for i in range(p))
        rows.append((60.0 * m, rate, w))
    return rows


def _diurnal(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    lo = group * rng.uniform(0.1, 0.2)
    hi = group * rng.uniform(0.9, 1.3)
    phase = rng.uniform(0, 2 * math.pi)
    rows: list[Row] = []
    for m in range(minutes):
        x = 0.5 * (1 + math.sin(2 * math.pi * m / 1440 + phase))
        rows.append((60.0 * m, _noise(rng, lo + (hi - lo) * x**2, 0.05), None))
    return rows


def _step(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    rows: list[Row] = []
    m = 0
    while m < minutes:
        length = rng.randint(60, 180)
        level = group * rng.uniform(0.05, 1.4)
        for k in range(m, min(minutes, m + length)):
            rows.append((60.0 * k, _noise(rng, level, 0.02), None))
        m += length
    return rows


def _backfill(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    quiet = rng.uniform(1.0, 2.0)
    plateau = group * rng.uniform(0.15, 0.3)
    peak = group * rng.uniform(1.05, 1.3)
    a = rng.randint(60, 240)
    peak_start = a + rng.randint(120, 360)
    peak_end = peak_start + rng.randint(120, 240)
    b = min(minutes - 60, peak_end + rng.randint(240, 600))
    rows: list[Row] = []
    for m in range(minutes):
        rate = quiet if m < a or m >= b else (peak if peak_start <= m < peak_end else plateau)
        rows.append((60.0 * m, rate, None))
    return rows


def rolling_hot(
    minutes: int,
    p: int,
    *,
    base: float,
    period_min: int,
    burst: float,
    hot_share: float,
    length_min: int,
    first_min: int = 30,
    hot: Sequence[int] | None = None,
) -> list[Row]:
    """Explicit rolling-hot trace: ``base`` records/s spread evenly, and from ``first_min`` every
    ``period_min`` minutes a burst of ``burst`` records/s for ``length_min`` minutes, ``hot_share``
    of it on one partition (``hot[k]`` for the k-th burst, default partition ``k mod p``), the rest
    spread evenly over the others. The issue-25 trace: ``rolling_hot(720, 6, base=90, period_min=90,
    burst=1500, hot_share=0.6, length_min=20)`` (capacity 150/s a consumer)."""
    rows: list[Row] = []
    for m in range(minutes):
        k, off = divmod(m - first_min, period_min)
        if m >= first_min and off < length_min:
            hp = hot[k % len(hot)] if hot else k % p
            rest = (1 - hot_share) / (p - 1) if p > 1 else 0.0
            w = tuple(round(hot_share if i == hp else rest, 4) for i in range(p))
            rows.append((60.0 * m, burst, w))
        else:
            rows.append((60.0 * m, base, None))
    return rows


def _rolling_hot(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    base = group * rng.uniform(0.05, 0.3)
    period = rng.randint(45, 120)
    length = rng.randint(10, min(30, period - 15))
    burst = c * rng.uniform(5.3, 9.5)  # >= 5x one consumer after the 5 % noise
    share = rng.uniform(0.6, 0.75)
    hot: list[int] = []
    for _ in range(minutes // period + 1):
        hot.append(rng.choice([i for i in range(p) if not hot or i != hot[-1]] or [0]))
    rows = rolling_hot(
        minutes,
        p,
        base=base,
        period_min=period,
        burst=burst,
        hot_share=share,
        length_min=length,
        first_min=rng.randint(10, period),
        hot=hot,
    )
    return [(t, _noise(rng, r, 0.05), w) for t, r, w in rows]


def _long_flash(rng: random.Random, minutes: int, p: int, c: float, group: float) -> list[Row]:
    lo = group * rng.uniform(0.1, 0.2)
    hi = group * rng.uniform(0.25, 0.4)
    phase = rng.uniform(0, 2 * math.pi)
    spikes: list[tuple[int, int, float]] = []
    for day in range(max(1, math.ceil(minutes / 1440))):
        for half in (0, 1):
            a = day * 1440 + half * 720 + 30
            start = rng.randrange(a, a + 720 - 60)
            spikes.append(
                (start, start + rng.randint(8, 20), group * rng.uniform(2.1, 3.8))
            )  # 2-4x after the 5 % noise

    def rate_at(m: int) -> float:
        x = 0.5 * (1 + math.sin(2 * math.pi * m / 1440 + phase))
        return _noise(rng, lo + (hi - lo) * x, 0.05)

    return _spiked(rng, minutes, p, spikes, rate_at)


def to_csv(rows: Sequence[Row]) -> str:
    out = ["t_s,produce_msgs_per_s,partition_weights"]
    for t, r, w in rows:
        ws = '"' + ",".join(f"{x:g}" for x in w) + '"' if w else ""
        out.append(f"{t:g},{r:.3f},{ws}")
    return "\n".join(out) + "\n"


__all__ = ["KINDS", "SUITE", "Family", "generate", "rolling_hot", "to_csv"]
