"""lagpilot.config: the operator's environment, read by one reader, with defaults and clear errors."""

from __future__ import annotations

import pytest

from lagpilot.config import Env, OperatorConfig


@pytest.mark.parametrize(
    "env, field, value",
    [
        ({}, "pod_start_seconds", 30.0),
        ({"LAGPILOT_POD_START_SECONDS": "3"}, "pod_start_seconds", 3.0),
        ({"LAGPILOT_KAFKA_TIMEOUT_SECONDS": "5"}, "kafka_timeout_seconds", 5.0),
        ({"LAGPILOT_MAX_BACKOFF_SECONDS": ""}, "max_backoff_seconds", 300.0),
        ({"LAGPILOT_CYCLE_WORKERS": "0"}, "cycle_workers", 1),
        ({}, "offsets_snapshot", True),
        ({"LAGPILOT_OFFSETS_SNAPSHOT": "off"}, "offsets_snapshot", False),
        ({}, "kopf_scanning", False),
        ({"LAGPILOT_KOPF_SCANNING": "True"}, "kopf_scanning", True),
        ({}, "crd_check_seconds", 300.0),
        ({"LAGPILOT_CRD_CHECK_SECONDS": "5"}, "crd_check_seconds", 5.0),
        ({}, "delete_drain_wait_seconds", None),
        ({"LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": "0"}, "delete_drain_wait_seconds", 0.0),
        ({"LAGPILOT_OBSERVE_MAX_AGE_SECONDS": "2"}, "observe_max_age_seconds", 2.0),
        ({"LAGPILOT_OPERATOR_METRICS_PORT": "0"}, "metrics_port", 0),
        ({"LAGPILOT_LOG_LEVEL": "debug"}, "log_level", "DEBUG"),
    ],
    ids=[
        "default",
        "pod-start",
        "kafka-timeout",
        "empty-is-default",
        "workers-at-least-1",
        "snapshot-default",
        "snapshot-off",
        "scanning-default",
        "scanning-any-case",
        "crd-check-default",
        "crd-check",
        "wait-default",
        "wait-zero-is-zero",
        "observe-age",
        "metrics-off",
        "log-level",
    ],
)
def test_from_env(env: dict[str, str], field: str, value: object) -> None:
    assert getattr(OperatorConfig.from_env(env), field) == value


@pytest.mark.parametrize(
    "key, raw",
    [
        ("LAGPILOT_POD_START_SECONDS", "abc"),
        ("LAGPILOT_POD_START_SECONDS", "-1"),
        ("LAGPILOT_OFFSETS_SNAPSHOT", "maybe"),
        ("LAGPILOT_KOPF_SCANNING", "enabled"),
        ("LAGPILOT_OPERATOR_METRICS_PORT", "9090.5"),
        ("LAGPILOT_DRAIN_STALL_SECONDS", "soon"),
    ],
)
def test_bad_values_name_the_variable(key: str, raw: str) -> None:
    with pytest.raises(ValueError, match=key):
        OperatorConfig.from_env({key: raw})


@pytest.mark.parametrize(
    "raw, value",
    [
        ("1", True),
        ("yes", True),
        ("ON", True),
        ("0", False),
        ("No", False),
        ("off", False),
        ("", True),
        (" ", True),
    ],
)
def test_one_flag_parser(raw: str, value: bool) -> None:
    assert Env({"X": raw}).flag("X", True) is value
