"""Trace families: seeded, one row a minute, the shape each family promises."""

from __future__ import annotations

import io
import itertools

import pytest

from lagpilot.sim import tracegen
from lagpilot.sim.trace import parse_trace


@pytest.mark.parametrize("kind", tracegen.KINDS)
def test_seeded_one_row_a_minute_and_parseable(kind: str) -> None:
    a = tracegen.generate(kind, 7)
    assert a == tracegen.generate(kind, 7)
    assert a != tracegen.generate(kind, 8)
    fam = tracegen.SUITE[kind]
    assert [r[0] for r in a] == [60.0 * m for m in range(60 * fam.hours)]
    assert all(r[1] >= 0 for r in a)
    tr = parse_trace(io.StringIO(tracegen.to_csv(a)))
    assert len(tr.times) == len(a)
    assert tr.rates == pytest.approx([round(r[1], 3) for r in a], abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
def test_flash_twice_a_day_above_the_group_on_every_partition(seed: int) -> None:
    fam = tracegen.SUITE["flash"]
    group = fam.partitions * fam.capacity
    rows = tracegen.generate("flash", seed)
    spikes, run = [], 0
    for _, rate, w in [*rows, (0.0, 0.0, None)]:
        if w is not None:
            run += 1
            assert rate >= 1.4 * group
            assert len(w) == fam.partitions and min(w) >= 0.9 * max(w) * 0.9 / 1.1
        elif run:
            spikes.append(run)
            run = 0
    assert len(spikes) == 2
    assert all(10 <= s <= 15 for s in spikes)
    base = sorted(r for _, r, w in rows if w is None)
    median = base[len(base) // 2]
    assert median < 0.12 * group
    spike_level = min(r for _, r, w in rows if w is not None)
    assert spike_level >= 12 * median  # ~20-30x the base


@pytest.mark.parametrize("seed", range(4))
def test_hot_partition_one_partition_above_a_consumer(seed: int) -> None:
    fam = tracegen.SUITE["hot-partition"]
    hot_rows = [(r, w) for _, r, w in tracegen.generate("hot-partition", seed) if w is not None]
    assert hot_rows
    for rate, w in hot_rows:
        hottest = max(w)
        assert rate * hottest >= 1.05 * fam.capacity
        assert sorted(w)[-2] * rate < fam.capacity  # only one is hot
        assert sum(w) == pytest.approx(1.0, abs=1e-3)


def test_backfill_shape() -> None:
    fam = tracegen.SUITE["backfill"]
    group = fam.partitions * fam.capacity
    rates = [r for _, r, _ in tracegen.generate("backfill", 0)]
    assert rates[0] <= 2.0 and rates[-1] <= 2.0
    assert max(rates) >= 1.05 * group  # the backfill peak exceeds the capped group


def test_unknown_kind() -> None:
    with pytest.raises(ValueError):
        tracegen.generate("nope", 0)


def _bursts(rows: list) -> list[tuple[int, int, tuple[float, ...]]]:
    """(first minute, length, weights of the first minute) of each run of weighted rows."""
    out, start = [], None
    for m, (_, _, w) in enumerate([*rows, (0.0, 0.0, None)]):
        if w is not None and start is None:
            start = m
        elif w is None and start is not None:
            out.append((start, m - start, rows[start][2]))
            start = None
    return out


@pytest.mark.parametrize("seed", range(6))
def test_rolling_hot_a_different_partition_hot_each_burst(seed: int) -> None:
    fam = tracegen.SUITE["rolling-hot"]
    rows = tracegen.generate("rolling-hot", seed)
    bursts = _bursts(rows)
    assert len(bursts) >= 5
    hot = [max(range(fam.partitions), key=lambda i: w[i]) for _, _, w in bursts]
    assert all(a != b for a, b in itertools.pairwise(hot))  # a different partition each time
    assert all(10 <= n <= 30 for _, n, _ in bursts[:-1])  # the last may be cut by the trace's end
    gaps = {b[0] - a[0] for a, b in itertools.pairwise(bursts)}
    assert len(gaps) == 1 and 45 <= gaps.pop() <= 120  # every N minutes
    for _, rate, w in rows:
        if w is not None:
            assert rate >= 5 * fam.capacity and max(w) >= 0.6
            assert sum(w) == pytest.approx(1.0, abs=1e-3)


def test_rolling_hot_the_issue_trace() -> None:
    rows = tracegen.rolling_hot(720, 6, base=90.0, period_min=90, burst=1500.0, hot_share=0.6, length_min=20)
    bursts = _bursts(rows)
    assert [(a, n) for a, n, _ in bursts] == [(30 + 90 * k, 20) for k in range(8)]
    assert [max(range(6), key=lambda i: w[i]) for _, _, w in bursts] == [0, 1, 2, 3, 4, 5, 0, 1]
    assert all(r == 1500.0 and max(w) == 0.6 for _, r, w in rows if w is not None)


@pytest.mark.parametrize("seed", range(6))
def test_long_flash_every_partition_at_2_to_4x_the_group(seed: int) -> None:
    fam = tracegen.SUITE["long-flash"]
    group = fam.partitions * fam.capacity
    rows = tracegen.generate("long-flash", seed)
    bursts = _bursts(rows)
    assert len(bursts) == 2 and all(8 <= n <= 20 for _, n, _ in bursts)
    for _, rate, w in rows:
        if w is not None:
            assert 2 * group <= rate <= 4 * group and len(w) == fam.partitions
        else:
            assert rate <= 0.45 * group
