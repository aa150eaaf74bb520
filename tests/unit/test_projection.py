"""Catch-up projection: tables + properties (bounds, monotonicity, upper bound of real assignments)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide.projection import (
    PartitionLoad,
    clear_time_s,
    hot_partitions,
    lag_after_startup,
    per_consumer_partitions,
    project,
    regrowing_partitions,
    required_replicas,
)
from lagpilot.sim.world import range_assignment

INF = math.inf

CLEAR_CASES = [
    ("nothing-to-do", 0, 5, 10, 0.0),
    ("nothing-but-overrun", 0, 11, 10, INF),
    ("drains", 1000, 5, 10, 200.0),
    ("rate-equals-capacity", 1000, 10, 10, INF),
    ("rate-above-capacity", 1000, 20, 10, INF),
    ("no-arrivals", 100, 0, 10, 10.0),
]


@pytest.mark.parametrize(
    "lag,rate,cap,expected", [c[1:] for c in CLEAR_CASES], ids=[c[0] for c in CLEAR_CASES]
)
def test_clear_time(lag: float, rate: float, cap: float, expected: float) -> None:
    assert clear_time_s(lag, rate, cap) == expected


@pytest.mark.parametrize(
    "partitions,replicas,k",
    [(3, 1, 3), (3, 2, 2), (3, 3, 1), (3, 5, 1), (6, 4, 2), (0, 2, 0), (4, 0, 4)],
    ids=["1of3", "2of3", "3of3", "over", "6on4", "no-partitions", "no-replicas"],
)
def test_per_consumer_partitions(partitions: int, replicas: int, k: int) -> None:
    assert per_consumer_partitions(partitions, replicas) == k


def loads(lags: list[float], rates: list[float]) -> list[PartitionLoad]:
    return [PartitionLoad(i, lag, r) for i, (lag, r) in enumerate(zip(lags, rates, strict=False))]


PROJECT_CASES = [
    # id, lags, rates, replicas, capacity, catch_up
    ("one-consumer-three-partitions", [100, 100, 100], [1, 1, 1], 1, 13, 300 / 10),
    ("dedicated", [100, 200, 300], [0, 0, 0], 3, 10, 30.0),
    ("two-consumers-worst-pair", [100, 200, 300], [1, 2, 3], 2, 10, 500 / 5),
    ("overloaded", [0, 0, 0], [5, 5, 5], 1, 10, INF),
    ("zero-replicas-with-lag", [1, 0, 0], [0, 0, 0], 0, 10, INF),
    ("zero-replicas-idle", [0, 0, 0], [0, 0, 0], 0, 10, 0.0),
]


@pytest.mark.parametrize(
    "lags,rates,replicas,cap,expected", [c[1:] for c in PROJECT_CASES], ids=[c[0] for c in PROJECT_CASES]
)
def test_project(lags: list[float], rates: list[float], replicas: int, cap: float, expected: float) -> None:
    assert project(loads(lags, rates), replicas, cap).catch_up_s == pytest.approx(expected)


def test_startup_adds_time_and_growth_only_when_scaling_up() -> None:
    ld = loads([1000, 1000], [20, 20])
    plain = project(ld, 2, 30).catch_up_s
    up = project(ld, 2, 30, current_replicas=1, startup_s=30).catch_up_s
    same = project(ld, 2, 30, current_replicas=2, startup_s=30).catch_up_s
    assert same == plain
    # during the start-up the single consumer gives each partition 15/s < 20/s: +5/s each for 30 s
    assert up == pytest.approx(30 + (1000 + 150) / 10)
    grown = lag_after_startup(ld, 30, 0, 10)
    assert [g.lag for g in grown] == [1200, 1200]


REQUIRED_CASES = [
    ("idle-needs-one", [0, 0, 0], [0, 0, 0], 10, 100, 3, 1),
    ("backlog-needs-two", [500, 400, 300], [0, 0, 0], 10, 100, 3, 2),
    ("backlog-needs-three", [600, 600, 600], [0, 0, 0], 10, 100, 3, 3),
    ("unreachable", [5000, 0, 0], [0, 0, 0], 10, 100, 3, None),
    ("utilization-headroom", [0, 0], [9.5, 0], 10, 100, 2, 1),  # util 0.95 > 0.9, but nothing better
    ("utilization-prefers-two", [0, 0], [5, 4.5], 10, 100, 2, 2),
]


@pytest.mark.parametrize(
    "lags,rates,cap,target,max_r,expected",
    [c[1:] for c in REQUIRED_CASES],
    ids=[c[0] for c in REQUIRED_CASES],
)
def test_required_replicas(lags, rates, cap, target, max_r, expected) -> None:  # type: ignore[no-untyped-def]
    assert required_replicas(loads(lags, rates), cap, target, max_r, max_utilization=0.9) == expected


def test_hot_and_regrowing_partitions() -> None:
    ld = loads([100_000, 10, 5000], [50, 1, 200])
    assert hot_partitions(ld, 137, 600) == [2, 0]  # 2 never catches up, 0 needs 1149 s
    assert regrowing_partitions(ld, 137) == [2]


lag_st = st.floats(min_value=0, max_value=1e6, allow_nan=False)
rate_st = st.floats(min_value=0, max_value=500, allow_nan=False)
load_lists = st.lists(st.tuples(lag_st, rate_st), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(load_lists, st.floats(min_value=1, max_value=1000), st.integers(min_value=1, max_value=12))
def test_more_replicas_never_longer(pairs, cap, r) -> None:  # type: ignore[no-untyped-def]
    ld = loads([p[0] for p in pairs], [p[1] for p in pairs])
    assert project(ld, r + 1, cap).catch_up_s <= project(ld, r, cap).catch_up_s


@settings(max_examples=150, deadline=None)
@given(
    load_lists,
    st.floats(min_value=1, max_value=1000),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=0, max_value=11),
    st.floats(min_value=0, max_value=1e5),
)
def test_more_lag_never_shorter(pairs, cap, r, which, extra) -> None:  # type: ignore[no-untyped-def]
    ld = loads([p[0] for p in pairs], [p[1] for p in pairs])
    i = which % len(ld)
    more = list(ld)
    more[i] = PartitionLoad(i, ld[i].lag + extra, ld[i].rate)
    for startup in (0.0, 30.0):
        a = project(ld, r + 1, cap, current_replicas=r, startup_s=startup).catch_up_s
        b = project(more, r + 1, cap, current_replicas=r, startup_s=startup).catch_up_s
        assert b >= a


@settings(max_examples=150, deadline=None)
@given(load_lists, st.floats(min_value=1, max_value=1000), st.integers(min_value=1, max_value=12))
def test_projection_bounds_the_range_assignment(pairs, cap, r) -> None:  # type: ignore[no-untyped-def]
    """The projection is an upper bound of what the real (range) assignment gives."""
    ld = loads([p[0] for p in pairs], [p[1] for p in pairs])
    actual = max(
        clear_time_s(sum(ld[i].lag for i in block), sum(ld[i].rate for i in block), cap)
        for block in range_assignment(len(ld), r)
    )
    assert project(ld, r, cap).catch_up_s >= actual * (1 - 1e-9)


@settings(max_examples=100, deadline=None)
@given(
    load_lists,
    st.floats(min_value=1, max_value=1000),
    st.floats(min_value=1, max_value=5000),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=0, max_value=11),
    st.floats(min_value=0, max_value=1e5),
)
def test_required_replicas_bounded_and_monotone_in_lag(pairs, cap, target, max_r, which, extra) -> None:  # type: ignore[no-untyped-def]
    ld = loads([p[0] for p in pairs], [p[1] for p in pairs])
    req = required_replicas(ld, cap, target, max_r, max_utilization=0.9)
    assert req is None or 1 <= req <= max_r
    i = which % len(ld)
    more = list(ld)
    more[i] = PartitionLoad(i, ld[i].lag + extra, ld[i].rate)
    req_more = required_replicas(more, cap, target, max_r, max_utilization=0.9)
    if req is None:
        assert req_more is None
    elif req_more is not None:
        assert req_more >= req
