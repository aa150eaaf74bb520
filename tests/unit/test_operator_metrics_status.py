"""The status-as-metrics gauges the chart's alert rules and dashboard read (docs/observability.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from lagpilot.metrics import OperatorMetrics


def _text(reg: CollectorRegistry) -> str:
    return generate_latest(reg).decode()


def test_a_changed_condition_replaces_its_series_and_forget_drops_all() -> None:
    reg = CollectorRegistry()
    m = OperatorMetrics(reg)
    m.observe_status(
        "ns",
        "g",
        conditions=[{"type": "Draining", "status": "True", "reason": "DrainRunning"}],
        max_replicas=4,
        oldest_age_s={0: 12.5, 1: 3.0},
        drain_done=2,
        drain_remaining=6,
    )
    t = _text(reg)
    # the condition's identity is its type and status (kube-state-metrics' convention: one 0/1 series per status)
    assert 'lagpilot_status_condition{name="g",namespace="ns",status="True",type="Draining"} 1.0' in t
    assert 'lagpilot_status_condition{name="g",namespace="ns",status="False",type="Draining"} 0.0' in t
    assert 'lagpilot_status_condition{name="g",namespace="ns",status="Unknown",type="Draining"} 0.0' in t
    assert (
        'lagpilot_status_condition_reason{name="g",namespace="ns",reason="DrainRunning",type="Draining"} 1.0'
        in t
    )
    assert 'lagpilot_max_replicas{name="g",namespace="ns"} 4.0' in t
    assert 'lagpilot_partition_oldest_record_age_seconds{name="g",namespace="ns",partition="0"} 12.5' in t
    assert 'lagpilot_drain_tasks{name="g",namespace="ns",state="remaining"} 6.0' in t
    m.observe_status(
        "ns",
        "g",
        conditions=[{"type": "Draining", "status": "False", "reason": "DrainFailed"}],
        oldest_age_s={0: 20.0},
    )
    t = _text(reg)
    assert 'reason="DrainRunning"' not in t  # one reason series per condition type: the old reason is gone
    assert (
        'lagpilot_status_condition_reason{name="g",namespace="ns",reason="DrainFailed",type="Draining"} 1.0'
        in t
    )
    # a new reason or status changes values, not the condition's series set
    assert 'lagpilot_status_condition{name="g",namespace="ns",status="False",type="Draining"} 1.0' in t
    assert 'lagpilot_status_condition{name="g",namespace="ns",status="True",type="Draining"} 0.0' in t
    assert "reason" not in "".join(
        line for line in t.splitlines() if line.startswith("lagpilot_status_condition{")
    )
    assert 'partition="1"' not in t and 'partition="0"} 20.0' in t
    m.forget("ns", "g")
    assert 'name="g"' not in _text(reg)


def test_a_condition_type_that_disappears_loses_its_series() -> None:
    reg = CollectorRegistry()
    m = OperatorMetrics(reg)
    m.observe_status(
        "ns",
        "g",
        conditions=[
            {"type": "DrainStalled", "status": "True", "reason": "NoProgress"},
            {"type": "Ready", "status": "True", "reason": "ConsumersReady"},
        ],
    )
    m.observe_status("ns", "g", conditions=[{"type": "Ready", "status": "True", "reason": "ConsumersReady"}])
    t = _text(reg)
    assert 'type="DrainStalled"' not in t
    assert 'lagpilot_status_condition{name="g",namespace="ns",status="True",type="Ready"} 1.0' in t


def test_build_info() -> None:
    import platform

    from lagpilot import __version__

    reg = CollectorRegistry()
    OperatorMetrics(reg)
    assert (
        reg.get_sample_value(
            "lagpilot_build_info", {"version": __version__, "python_version": platform.python_version()}
        )
        == 1
    )
