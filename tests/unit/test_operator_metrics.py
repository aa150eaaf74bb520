"""metrics.py: series per group, removed when the group goes away."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from lagpilot.metrics import OperatorMetrics


def sample(reg: CollectorRegistry, metric: str, **labels: str) -> float | None:
    return reg.get_sample_value(metric, labels)


def test_group_series_and_forget() -> None:
    reg = CollectorRegistry()
    m = OperatorMetrics(reg)
    m.observe_group(
        "ns",
        "g",
        partition_lag={0: 5, 1: 7},
        partition_rate={0: 1.5},
        total_lag=12,
        projected_s=None,
        sla_s=600,
        desired=2,
        replicas=1,
        produce_rate=1.5,
        capacity=10.0,
        data_loss=0,
    )
    m.count_decision("ns", "g", "up")
    assert sample(reg, "lagpilot_partition_lag_records", namespace="ns", name="g", partition="1") == 7
    assert sample(reg, "lagpilot_projected_catch_up_seconds", namespace="ns", name="g") == float("inf")
    assert sample(reg, "lagpilot_desired_replicas", namespace="ns", name="g") == 2
    assert sample(reg, "lagpilot_scale_decisions_total", namespace="ns", name="g", direction="up") == 1
    # a partition that disappears (topic recreated smaller) loses its series
    m.observe_group(
        "ns",
        "g",
        partition_lag={0: 5},
        partition_rate={},
        total_lag=5,
        projected_s=3.0,
        sla_s=600,
        desired=1,
        replicas=1,
        produce_rate=0,
        capacity=None,
        data_loss=0,
    )
    assert sample(reg, "lagpilot_partition_lag_records", namespace="ns", name="g", partition="1") is None
    m.forget("ns", "g")
    assert b'name="g"' not in generate_latest(reg)


def test_offsets_per_partition() -> None:
    """Log-end and committed offsets as gauges (users rate() them); a partition without a commit has
    no committed series; a commit that disappears (group offsets deleted) loses its series."""
    reg = CollectorRegistry()
    m = OperatorMetrics(reg)
    kw = dict(
        partition_rate={},
        total_lag=0,
        projected_s=None,
        sla_s=60,
        desired=1,
        replicas=1,
        produce_rate=0,
        capacity=None,
        data_loss=0,
    )
    m.observe_group(
        "ns", "g", partition_lag={0: 5, 1: 7}, log_end={0: 105, 1: 7}, committed={0: 100, 1: None}, **kw
    )
    assert sample(reg, "lagpilot_partition_log_end_offset", namespace="ns", name="g", partition="0") == 105
    assert sample(reg, "lagpilot_partition_log_end_offset", namespace="ns", name="g", partition="1") == 7
    assert sample(reg, "lagpilot_partition_committed_offset", namespace="ns", name="g", partition="0") == 100
    assert sample(reg, "lagpilot_partition_committed_offset", namespace="ns", name="g", partition="1") is None
    m.observe_group(
        "ns", "g", partition_lag={0: 0, 1: 0}, log_end={0: 110, 1: 9}, committed={0: None, 1: 9}, **kw
    )
    assert sample(reg, "lagpilot_partition_committed_offset", namespace="ns", name="g", partition="0") is None
    assert sample(reg, "lagpilot_partition_committed_offset", namespace="ns", name="g", partition="1") == 9
    m.observe_group("ns", "g", partition_lag={0: 0}, log_end={0: 111}, committed={0: 111}, **kw)
    assert sample(reg, "lagpilot_partition_log_end_offset", namespace="ns", name="g", partition="1") is None
    m.forget("ns", "g")
    assert b'name="g"' not in generate_latest(reg)
