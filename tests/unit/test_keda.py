"""The KEDA Kafka scaler + HPA baseline model: table-driven."""

from __future__ import annotations

import pytest

from lagpilot.decide.keda import KedaConfig, KedaState, hpa_replicas, is_active, keda_metric, step

CFG = KedaConfig()


@pytest.mark.parametrize(
    "lags,partitions,expected",
    [([5, 5, 5], 3, 15), ([100, 0, 0], 3, 30), ([31, 0, 0], 3, 31), ([29, 0, 0], 3, 29), ([0.9, 0.9], 2, 0)],
    ids=[
        "under-cap",
        "capped-at-partitions",
        "integer-division-quirk-lets-31-through",
        "just-under",
        "fractions-truncated",
    ],
)
def test_metric_capped_at_partitions(lags: list[float], partitions: int, expected: int) -> None:
    assert keda_metric(lags, partitions, CFG) == expected


def test_allow_idle_consumers_lifts_the_cap() -> None:
    assert keda_metric([1000], 3, KedaConfig(allow_idle_consumers=True)) == 1000


@pytest.mark.parametrize(
    "current,metric,expected",
    [(1, 30, 3), (3, 30, 3), (3, 32, 3), (3, 34, 4), (3, 0, 0), (0, 100, 0), (2, 5, 1)],
    ids=["up", "on-target", "within-tolerance", "outside-tolerance", "zero-metric", "scaled-to-zero", "down"],
)
def test_hpa_replica_calculator(current: int, metric: int, expected: int) -> None:
    assert hpa_replicas(current, metric, CFG) == expected


def test_activation() -> None:
    assert not is_active([0, 0], CFG) and is_active([1, 0], CFG)
    assert not is_active([3], KedaConfig(activation_lag_threshold=3))


def run(lags_at, start: int, until: float, cfg: KedaConfig = CFG, partitions: int = 20):  # type: ignore[no-untyped-def]
    state, cur, t, seen = KedaState(), start, 0.0, []
    while t <= until:
        cur, state = step(state, t, cur, lags_at(t), partitions, cfg)
        seen.append((t, cur))
        t += 5
    return seen


def test_scale_up_rate_limited_to_max_4_pods_or_double_per_15s() -> None:
    seen = run(lambda t: [10_000] * 20, 1, 60)
    counts = [c for _, c in seen]
    assert counts[0] == 5  # 1 -> max(1+4, 2)
    assert max(counts) == 20
    # never more than max(+4, x2) within any 15 s
    for t0, c0 in seen:
        later = [c for t, c in seen if t0 < t < t0 + 15]
        assert all(c <= max(c0 + 4, 2 * c0) for c in later)


def test_scale_down_waits_for_the_300s_window() -> None:
    seen = run(lambda t: [10_000] * 3 if t < 100 else [1, 1, 1], 3, 700, partitions=3)
    at = dict(seen)
    assert at[100] == 3 and at[395] == 3  # recommendations of 3 still inside the window
    assert at[700] == 1


def test_never_active_scales_to_zero_at_once() -> None:
    """KEDA with no LastActiveTime (and initialCooldownPeriod 0) scales an idle target to zero."""
    assert dict(run(lambda t: [0, 0], 1, 10, partitions=2))[0] == 0


def test_scale_to_zero_after_cooldown_and_back_on_activation() -> None:
    seen = run(lambda t: [5, 0] if t < 10 or t >= 1000 else [0, 0], 1, 1100, partitions=2)
    at = dict(seen)
    assert at[250] == 1  # active at t=0: cooldown 300 s not over
    assert at[330] == 0
    assert at[1050] == 1  # activated by the 30 s poll


# issue 25 item 6: the Kafka scaler's partition options, as kedacore/keda pkg/scalers/kafka_scaler.go
# getTotalLag / getLagForPartition compute them (docs/keda-comparison.md)
@pytest.mark.parametrize(
    "lags,partitions,cfg,expected",
    [
        ([100, 0, 0, 0], 4, KedaConfig(), 40),  # default: capped at partitions x threshold
        (
            [100, 0, 0, 0],
            4,
            KedaConfig(limit_to_partitions_with_lag=True),
            10,
        ),  # one partition lags: one consumer
        ([100, 5, 0, 0], 4, KedaConfig(limit_to_partitions_with_lag=True), 20),
        ([0, 0, 0, 0], 4, KedaConfig(limit_to_partitions_with_lag=True), 0),
        ([25, 0, 0, 0, 0, 0], 6, KedaConfig(ensure_even_distribution_of_partitions=True), 30),  # 3 divides 6
        ([41, 0, 0, 0, 0, 0], 6, KedaConfig(ensure_even_distribution_of_partitions=True), 60),  # 4, 5 do not
        ([0, 0, 0, 0, 0, 0], 6, KedaConfig(ensure_even_distribution_of_partitions=True), 10),  # factor 1
        ([500, 0, 0, 0, 0, 0], 6, KedaConfig(ensure_even_distribution_of_partitions=True), 60),
    ],
    ids=["default", "limit-one", "limit-two", "limit-none", "even-3", "even-6", "even-idle", "even-capped"],
)
def test_partition_options(lags: list[float], partitions: int, cfg: KedaConfig, expected: int) -> None:
    assert keda_metric(lags, partitions, cfg) == expected


@pytest.mark.parametrize(
    "kw, words",
    [
        (
            {"limit_to_partitions_with_lag": True, "ensure_even_distribution_of_partitions": True},
            ("limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions"),
        ),
        (
            {"limit_to_partitions_with_lag": True, "allow_idle_consumers": True},
            ("allowIdleConsumers", "limitToPartitionsWithLag"),
        ),
    ],
)
def test_options_keda_rejects_together_are_rejected(kw: dict[str, bool], words: tuple[str, str]) -> None:
    """KEDA v2.20's kafka_scaler.go (parseKafkaMetadata's validate) refuses these pairs ("... cannot be set
    simultaneously"): the ScaledObject never gets a scaler, so the model must not predict one."""
    with pytest.raises(ValueError, match="cannot be set simultaneously") as err:
        KedaConfig(**kw)  # type: ignore[arg-type]
    for w in words:
        assert w in str(err.value)


def test_exclude_persistent_lag_drops_a_partition_whose_consumer_did_not_move() -> None:
    cfg = KedaConfig(exclude_persistent_lag=True)
    # first sight: every partition counts; then p0's committed offset did not move: its lag is excluded
    # from the metric (not from activation: totalLagWithPersistent)
    assert keda_metric([50, 30], 2, cfg, persistent=()) == 20  # 80 capped at 2 x 10
    assert keda_metric([50, 3], 2, cfg, persistent=(0,)) == 3
    state = KedaState()
    _, state = step(state, 0.0, 1, [50, 30], 2, cfg, committed=[100, 200])
    assert state.previous_committed == (100, 200)
    _, state = step(state, 15.0, 1, [60, 3], 2, cfg, committed=[100, 230])
    assert state.persistent == (0,)  # p0 stuck at 100
    assert is_active([60, 3], cfg)  # activation still sees the stuck partition's lag
    assert keda_metric([60, 0], 2, KedaConfig(), persistent=(0,)) == 20  # without the option: ignored
