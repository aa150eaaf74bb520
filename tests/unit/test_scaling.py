"""The replica decision: table-driven cases + hypothesis invariants."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lagpilot.decide.drain_policy import DrainPolicy, overloaded_at
from lagpilot.decide.projection import PartitionLoad, project
from lagpilot.decide.scaling import (
    Decision,
    ScalingHistory,
    ScalingObservation,
    ScalingPolicy,
    decide,
    loads_from,
    stabilize,
)

NOW = 10_000.0


def obs(lags, rates, cur, cap=100.0, now=NOW, **kw) -> ScalingObservation:  # type: ignore[no-untyped-def]
    return ScalingObservation(now, len(lags), cur, loads_from(lags, rates), cap, **kw)


def hist(*recs: tuple[float, int]) -> ScalingHistory:
    return ScalingHistory(tuple((NOW - age, r) for age, r in recs))


P = ScalingPolicy()
ZERO = ScalingPolicy(min_replicas=0)
MIN2 = ScalingPolicy(min_replicas=2)

CASES = [
    # id, observation, policy, history, desired, reason
    ("scale-up-on-backlog", obs([30000] * 3, [10] * 3, 1), P, hist((20, 1)), 3, "ScaleUp"),
    ("within-tolerance", obs([17000, 17000, 16000], [0, 0, 0], 1), P, hist((20, 1)), 1, "WithinTolerance"),
    ("steady-with-headroom", obs([0, 0, 0], [30, 30, 30], 2), P, hist((20, 2)), 2, "Steady"),
    (
        "scale-down-held-by-window",
        obs([0, 0, 0], [1, 1, 1], 3),
        P,
        hist((200, 3), (15, 1)),
        3,
        "ScaleDownStabilized",
    ),
    (
        "scale-down-after-window",
        obs([0, 0, 0], [1, 1, 1], 3),
        P,
        hist((400, 3), (290, 1), (15, 1)),
        1,
        "ScaleDown",
    ),
    (
        "restart-without-history-never-scales-down",
        obs([0, 0, 0], [1, 1, 1], 3),
        P,
        ScalingHistory(),
        3,
        "ScaleDownStabilized",
    ),
    (
        "restart-without-history-still-scales-up",
        obs([30000] * 3, [10] * 3, 1),
        P,
        ScalingHistory(),
        3,
        "ScaleUp",
    ),
    (
        "scale-to-zero-when-idle",
        obs([0, 0, 0], [0, 0, 0], 1),
        ZERO,
        hist((310, 1), (100, 0)),
        0,
        "ScaleToZero",
    ),
    (
        "scale-to-zero-waits-for-window",
        obs([0, 0, 0], [0, 0, 0], 1),
        ZERO,
        hist((100, 1)),
        1,
        "ScaleDownStabilized",
    ),
    ("min-one-never-zero-when-idle", obs([0, 0, 0], [0, 0, 0], 1), P, hist((400, 1)), 1, "Steady"),
    (
        "scale-from-zero-no-capacity-yet",
        obs([50, 0, 0], [1, 0, 0], 0, cap=None),
        ZERO,
        ScalingHistory(),
        1,
        "ScaleFromZero",
    ),
    (
        "scale-from-zero-with-capacity",
        obs([30000, 30000, 0], [1, 0, 0], 0),
        ZERO,
        ScalingHistory(),
        3,
        "ScaleUp",
    ),
    (
        "capacity-unknown-keeps",
        obs([500, 0, 0], [1, 0, 0], 2, cap=None),
        P,
        hist((20, 2)),
        2,
        "CapacityUnknown",
    ),
    ("sla-unreachable-capped", obs([1e6, 1e6, 1e6], [0, 0, 0], 1), P, hist((20, 1)), 3, "SLAUnreachable"),
    ("above-partitions-capped", obs([0, 0], [1, 1], 5), P, hist((20, 5)), 2, "CappedAtPartitions"),
    (
        "above-max-capped",
        obs([0] * 6, [1] * 6, 5),
        ScalingPolicy(max_replicas=3),
        hist((20, 5)),
        3,
        "CappedAtMax",
    ),
    ("below-minimum", obs([0, 0, 0], [1, 1, 1], 1), MIN2, hist((20, 1)), 2, "BelowMinimum"),
    ("min-above-partitions-capped", obs([0], [1], 1), MIN2, hist((20, 1)), 1, "Steady"),
    (
        "scale-up-window-holds",
        obs([30000] * 3, [10] * 3, 1),
        ScalingPolicy(scale_up_window_s=60),
        hist((20, 1)),
        1,
        "ScaleUpStabilized",
    ),
]


@pytest.mark.parametrize("o,policy,history,desired,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_table(
    o: ScalingObservation, policy: ScalingPolicy, history: ScalingHistory, desired: int, reason: str
) -> None:
    d, h = decide(o, policy, history)
    assert (d.desired_replicas, d.reason) == (desired, reason), d.message
    assert d.message and d.reason[0].isupper() and " " not in d.reason
    assert h.recommendations[-1][0] == o.now_s
    json.dumps(d.to_dict())
    json.dumps(h.to_dict())


def test_sla_unreachable_is_at_risk_and_reports_hot_partitions() -> None:
    d, _ = decide(obs([1e6, 10, 0], [0, 0, 0], 3), P, hist((20, 3)))
    assert d.at_risk and d.hot_partitions == (0,) and d.required_replicas is None
    assert d.to_dict()["projectedCatchUpSeconds"] is not None


def test_drain_planned_when_capped_and_replicas_sized_without_the_drained_backlog() -> None:
    o = obs([2_000_000, 100, 100], [10, 10, 10], 3)
    d, _ = decide(o, P, hist((400, 3)), DrainPolicy())
    assert d.drain is not None and d.drain.partitions == (0,)
    assert d.drain.reason == "HotPartition"
    # after the hand-off one consumer suffices for 30/s: the recommendation is 1 (held by the window)
    assert d.required_replicas == 1
    assert "drain" in d.message


def test_no_drain_without_drain_policy() -> None:
    d, _ = decide(obs([2_000_000, 100, 100], [10, 10, 10], 3), P, hist((20, 3)))
    assert d.drain is None and d.reason == "SLAUnreachable"


def test_no_partitions_keeps_replicas() -> None:
    d, _ = decide(ScalingObservation(NOW, 0, 2, (), 100.0), P, None)
    assert d.desired_replicas == 2 and d.reason == "NoPartitions"


def test_history_round_trip_and_pruning() -> None:
    h = ScalingHistory(((NOW - 1000, 5), (NOW - 10, 2)), last_scale_s=NOW - 10)
    back = ScalingHistory.from_dict(json.loads(json.dumps(h.to_dict())))
    assert back == h
    assert ScalingHistory.from_dict(None) == ScalingHistory()
    assert ScalingHistory.from_dict({"recommendations": "garbage"}) == ScalingHistory()
    out, h2 = stabilize(2, 2, NOW, h, P)
    assert out == 2 and all(NOW - t <= 300 for t, _ in h2.recommendations)


def test_policy_from_the_parsed_spec_and_validation() -> None:
    from lagpilot.spec import parse_spec

    base = {"kafka": {"bootstrapServers": "127.0.0.1:9092"}, "topic": "t", "groupId": "g"}
    pol = ScalingPolicy.from_group_spec(
        parse_spec(
            {
                **base,
                "scaling": {
                    "minReplicas": 0,
                    "maxReplicas": 6,
                    "tolerance": 0.2,
                    "pollIntervalSeconds": 10,
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": 5},
                        "scaleDown": {"stabilizationWindowSeconds": 120},
                    },
                },
                "catchUpSLASeconds": 900,
            }
        ),
        pod_start_s=20,
    )
    assert (pol.min_replicas, pol.max_replicas, pol.tolerance, pol.poll_interval_s) == (0, 6, 0.2, 10)
    assert (pol.scale_up_window_s, pol.scale_down_window_s, pol.sla_s, pol.pod_start_s) == (5, 120, 900, 20)
    assert pol.scale_to_zero
    assert ScalingPolicy.from_group_spec(parse_spec(base)) == ScalingPolicy()  # the same defaults
    with pytest.raises(ValueError, match="maxReplicas"):
        ScalingPolicy(min_replicas=4, max_replicas=2).validate()
    with pytest.raises(ValueError, match="catchUpSLASeconds"):
        ScalingPolicy(sla_s=0).validate()


# ------------------------------------------------------------------------------ properties
lag_st = st.floats(min_value=0, max_value=2e6, allow_nan=False)
rate_st = st.floats(min_value=0, max_value=300, allow_nan=False)
load_lists = st.lists(st.tuples(lag_st, rate_st), min_size=1, max_size=8)
policies = st.builds(
    lambda lo, span, tol, down: ScalingPolicy(
        min_replicas=lo, max_replicas=max(1, lo + span), tolerance=tol, scale_down_window_s=down
    ),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=0, max_value=8),
    st.sampled_from([0.0, 0.1, 0.3]),
    st.sampled_from([0.0, 60.0, 300.0]),
)
histories = st.lists(
    st.tuples(st.floats(min_value=0, max_value=600), st.integers(min_value=0, max_value=12)), max_size=6
).map(lambda rs: ScalingHistory(tuple(sorted((NOW - a, r) for a, r in rs))))
caps = st.one_of(st.none(), st.floats(min_value=1, max_value=500))


def _obs(pairs, cur, cap) -> ScalingObservation:  # type: ignore[no-untyped-def]
    return obs([p[0] for p in pairs], [p[1] for p in pairs], cur, cap=cap)


@settings(max_examples=200, deadline=None)
@given(load_lists, st.integers(min_value=0, max_value=12), caps, policies, histories)
def test_bounds(pairs, cur, cap, policy, history) -> None:  # type: ignore[no-untyped-def]
    o = _obs(pairs, cur, cap)
    d, _ = decide(o, policy, history, DrainPolicy())
    assert 0 <= d.desired_replicas <= min(policy.max_replicas, len(pairs))
    idle = o.total_lag <= 0 and o.produce_rate <= policy.idle_rate
    if not (policy.scale_to_zero and idle):
        assert d.desired_replicas >= min(policy.min_replicas, len(pairs), policy.max_replicas)
    if o.total_lag > 0:
        assert d.desired_replicas >= 1
    assert isinstance(d, Decision) and d.reason and d.message


@pytest.mark.parametrize("assist_always", [False, True], ids=["default", "assistReplicas"])
@settings(max_examples=200, deadline=None)
@given(
    load_lists,
    st.integers(min_value=0, max_value=12),
    st.floats(min_value=1, max_value=500),
    policies,
    histories,
)
def test_no_scale_down_while_projection_exceeds_sla(assist_always, pairs, cur, cap, policy, history) -> None:  # type: ignore[no-untyped-def]
    """The guard. One exception: in a burst (the group at its cap cannot hold the live rates, so the
    projection is infinite at every count and holding replicas cannot meet the SLA) a scale-down to
    the drain-assisted count, whose drains carry the excess, is allowed."""
    o = _obs(pairs, cur, cap)
    d, _ = decide(o, policy, history, DrainPolicy(assist_always=assist_always))
    cap_hi = min(policy.max_replicas, len(pairs))
    if d.desired_replicas < cur <= cap_hi:
        if project(list(o.loads), cur, cap).catch_up_s > policy.sla_s:
            assert overloaded_at([p[1] for p in pairs], cap_hi, cap), d
            assert "drain-assisted" in d.message and d.desired_replicas >= (d.required_replicas or 0)
            assert project(list(o.loads), cap_hi, cap).catch_up_s == math.inf


@settings(max_examples=200, deadline=None)
@given(
    load_lists,
    st.integers(min_value=0, max_value=12),
    caps,
    policies,
    histories,
    st.integers(min_value=0, max_value=7),
    st.floats(min_value=0, max_value=1e6),
)
def test_more_lag_never_fewer_replicas(pairs, cur, cap, policy, history, which, extra) -> None:  # type: ignore[no-untyped-def]
    """Without drains (a drain legitimately takes a backlog away from the group)."""
    base = _obs(pairs, cur, cap)
    i = which % len(pairs)
    more_pairs = list(pairs)
    more_pairs[i] = (pairs[i][0] + extra, pairs[i][1])
    more = _obs(more_pairs, cur, cap)
    a, _ = decide(base, policy, history)
    b, _ = decide(more, policy, history)
    assert b.desired_replicas >= a.desired_replicas


@settings(max_examples=100, deadline=None)
@given(load_lists, st.integers(min_value=0, max_value=12), st.floats(min_value=1, max_value=500), policies)
def test_constant_load_does_not_flap(pairs, cur, cap, policy) -> None:  # type: ignore[no-untyped-def]
    """Same load every 15 s for an hour, replicas following the decision: the replica count moves
    in one direction only and settles."""
    history = ScalingHistory()
    seq = [cur]
    for k in range(240):
        o = ScalingObservation(
            NOW + 15 * k, len(pairs), seq[-1], loads_from([p[0] for p in pairs], [p[1] for p in pairs]), cap
        )
        d, history = decide(o, policy, history)
        seq.append(d.desired_replicas)
    diffs = [b - a for a, b in itertools.pairwise(seq) if b != a]
    assert all(x > 0 for x in diffs) or all(x < 0 for x in diffs), seq
    assert len(set(seq[-40:])) == 1, seq


def test_flapping_guard_against_noisy_rate_around_a_boundary() -> None:
    """Load oscillating +-5 % around the 2-replica boundary: the dead band and the scale-down
    window keep the replica count from toggling every cycle."""
    history = ScalingHistory()
    cur = 2
    changes = 0
    for k in range(400):
        rate = 90 * (1.05 if k % 2 else 0.95)  # per partition, capacity 100: around util 0.9
        o = ScalingObservation(NOW + 15 * k, 2, cur, loads_from([0, 0], [rate, rate]), 100.0)
        d, history = decide(o, P, history)
        changes += d.desired_replicas != cur
        cur = d.desired_replicas
    assert changes <= 1
    assert not math.isnan(cur)


def test_observation_from_estimate() -> None:
    from lagpilot.decide.estimate import update
    from lagpilot.decide.lag import PartitionOffsets, snapshot

    s0 = snapshot(0, [PartitionOffsets(0, 0, 100, 50), PartitionOffsets(1, 10, 20, None, 5.0)], {0: 120.0})
    s1 = snapshot(10, [PartitionOffsets(0, 0, 200, 150), PartitionOffsets(1, 10, 40, None, 5.0)], {0: 120.0})
    est = update(update(None, s0), s1)
    o = ScalingObservation.from_estimate(10, 2, est, s1, drain_active=True)
    assert o.partitions == 2 and o.current_replicas == 2 and o.capacity_per_replica == 120.0
    assert o.loads[0] == PartitionLoad(0, 50.0, 10.0, 150, 200)
    assert o.loads[1].start_offset == 10 and o.loads[1].lag == 30
    assert o.oldest_age_s == {1: 5.0} and o.drain_active


# ------------------------------------------------------------------ drain-assisted replica count
OPT_IN = DrainPolicy(assist_always=True)  # spec.drain.assistReplicas: true


def test_drain_assisted_count_is_chosen_and_drains_planned_for_it() -> None:
    """4 partitions at 98 % of two consumers: without drains the group is sized at 4 (90 %
    utilization); with the drain policy 2 replicas, and the drain planner plans for 2."""
    loads = [0, 0, 0, 0], [67.0] * 4
    d, _ = decide(obs(*loads, 4, cap=137.0), P, ScalingHistory())
    assert d.desired_replicas == 4
    d, _ = decide(obs(*loads, 4, cap=137.0), P, hist((400, 2)), OPT_IN)
    assert d.required_replicas == 2 and d.desired_replicas == 2 and d.reason == "ScaleDown"
    assert "drain-assisted" in d.message
    # the default (burst-scoped): no burst here (every partition under a consumer), sized for the load
    d, _ = decide(obs(*loads, 4, cap=137.0), P, hist((400, 2)), DrainPolicy())
    assert d.required_replicas == 4 and d.desired_replicas == 4 and "drain-assisted" not in d.message
    # backlog behind the 2 consumers' split: planned as for the group at 2 (not at the cap of 4)
    d, _ = decide(
        obs(
            [30_000, 30_000, 300, 300],
            [67.0, 67.0, 67.0, 67.0],
            2,
            cap=137.0,
            oldest_age_s={0: 400.0, 1: 400.0},
        ),
        P,
        ScalingHistory(),
        OPT_IN,
    )
    assert d.desired_replicas == 2 and d.drain is not None and set(d.drain.partitions) == {0, 1}
    # assist off: back to sizing for the load
    d, _ = decide(obs(*loads, 4, cap=137.0), P, hist((400, 2)), DrainPolicy(assist_min_saving=None))
    assert d.required_replicas == 4 and d.desired_replicas == 4


def assert_one_direction_then_settled(rates: list[float], cur: int, pol: DrainPolicy) -> None:
    """A constant load for an hour (240 cycles of 15 s, lag 0): the replica count moves in one
    direction, then stays."""
    history = ScalingHistory()
    seq = [min(cur, len(rates))]
    for k in range(240):
        o = ScalingObservation(NOW + 15 * k, len(rates), seq[-1], loads_from([0] * len(rates), rates), 137.0)
        d, history = decide(o, P, history, pol)
        seq.append(d.desired_replicas)
    diffs = [b - a for a, b in itertools.pairwise(seq) if b != a]
    assert all(x > 0 for x in diffs) or all(x < 0 for x in diffs), seq
    assert len(set(seq[-40:])) == 1, seq


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(0, 300), min_size=1, max_size=6),
    cur=st.integers(1, 6),
    start=st.sampled_from([20.0, 90.0]),
)
def test_constant_load_with_drain_assist_does_not_flap(rates, cur, start) -> None:  # type: ignore[no-untyped-def]
    """The drain-assisted count depends on the rates only: same load for an hour, the replica count
    moves in one direction and settles (drains take the lag; here the lag stays 0)."""
    assert_one_direction_then_settled(rates, cur, DrainPolicy(start_up_s=start, assist_always=True))


def test_noisy_rate_around_the_assist_boundary_does_not_toggle() -> None:
    """A rate +-5 % around where 1 replica + drains stops saving a replica over 3: at most one change."""
    from lagpilot.decide.drain_policy import assisted_replicas

    pol = OPT_IN
    lo, hi = 50.0, 130.0  # per partition: assisted at 50, not at 130 (3 partitions, 137/s)
    for _ in range(40):
        mid = (lo + hi) / 2
        got = assisted_replicas(
            loads_from([0] * 3, [mid] * 3), 137.0, min_replicas=1, cap=3, sla_s=600.0, policy=pol
        )
        lo, hi = (mid, hi) if got is not None else (lo, mid)
    history, cur, changes = ScalingHistory(), 3, 0
    for k in range(400):
        rate = lo * (1.05 if k % 2 else 0.95)
        o = ScalingObservation(NOW + 15 * k, 3, cur, loads_from([0] * 3, [rate] * 3), 137.0)
        d, history = decide(o, P, history, pol)
        changes += d.desired_replicas != cur
        cur = d.desired_replicas
    assert changes <= 1


# ------------------------------------------------------------------ burst-scoped assist (the default)
HOT = [206.0, 45.0, 45.0, 45.0]  # one partition at 1.5 consumers, the others at a third of one


def test_burst_scales_down_to_the_assisted_count_despite_the_infinite_projection() -> None:
    """A hot partition over one consumer (4 partitions, 137/s): at 4 replicas the projection is
    infinite (it regrows) and stays infinite at every count, so the guard does not hold the 3 idle
    neighbours' consumers: after the scale-down window the group goes to the assisted count and the
    planner plans the drains for the group at that count."""
    o = obs([40_000.0, 300.0, 300.0, 300.0], HOT, 4, cap=137.0, oldest_age_s={0: 200.0})
    d, _ = decide(o, P, hist((400, 4)), DrainPolicy())
    assert d.required_replicas == 1 and d.desired_replicas == 1 and d.reason == "ScaleDown"
    assert "drain-assisted" in d.message
    # inside the scale-down window: held (stabilized), not blocked
    d, _ = decide(o, P, hist((100, 4)), DrainPolicy())
    assert d.desired_replicas == 4 and d.reason == "ScaleDownStabilized"
    # no assist at all (simulate --no-drain-assist): the guard holds the cap for the whole burst
    d, _ = decide(o, P, hist((400, 4)), DrainPolicy(assist_min_saving=None))
    assert d.desired_replicas == 4 and d.reason in ("ScaleDownBlockedAtRisk", "SLAUnreachable", "Steady")
    # the same backlog without a burst (the hot partition at 0.9 of a consumer): the guard holds
    calm = obs(
        [40_000.0, 300.0, 300.0, 300.0], [123.0, 45.0, 45.0, 45.0], 4, cap=137.0, oldest_age_s={0: 200.0}
    )
    d, _ = decide(calm, P, hist((400, 4)), DrainPolicy())
    assert d.desired_replicas == 4


def test_burst_ends_back_to_the_count_sized_for_the_load() -> None:
    """The hot partition falls back under a consumer: the burst-scoped count is no longer used and
    the group scales up at once to what the load needs (no up-window), as any scale-up."""
    d, _ = decide(obs([0.0] * 4, [130.0, 45.0, 45.0, 45.0], 1, cap=137.0), P, hist((400, 1)), DrainPolicy())
    assert d.desired_replicas > 1 and "drain-assisted" not in d.message


def test_hot_partition_noisy_around_one_consumer_does_not_toggle_every_cycle() -> None:
    """The hot partition's rate +-5 % around one consumer every poll (in and out of a burst): the
    scale-down window keeps the count from toggling: at most one change in 100 minutes."""
    history, cur, changes = ScalingHistory(), 4, 0
    for k in range(400):
        hot = 137.0 * (1.05 if k % 2 else 0.95)
        o = ScalingObservation(NOW + 15 * k, 4, cur, loads_from([0] * 4, [hot, 45.0, 45.0, 45.0]), 137.0)
        d, history = decide(o, P, history, DrainPolicy())
        changes += d.desired_replicas != cur
        cur = d.desired_replicas
    assert changes <= 1


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(0, 300), min_size=1, max_size=6),
    cur=st.integers(1, 6),
    start=st.sampled_from([20.0, 90.0]),
)
@example(
    rates=[13.0, 123.0], cur=1, start=20.0
)  # found by hypothesis: 1 -> 2 -> 1 -> 2 (99 % of one consumer)
def test_constant_load_burst_scoped_does_not_flap(rates, cur, start) -> None:  # type: ignore[no-untyped-def]
    """The default policy under a constant load (bursts included): one direction, then settled."""
    assert_one_direction_then_settled(rates, cur, DrainPolicy(start_up_s=start))
