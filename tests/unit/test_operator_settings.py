"""settings.py: the operator's environment, parsed with defaults and clear errors."""
from __future__ import annotations

import pytest

from lagpilot.settings import OperatorConfig


@pytest.mark.parametrize("env, field, value", [
    ({}, "pod_start_seconds", 30.0),
    ({"LAGPILOT_POD_START_SECONDS": "3"}, "pod_start_seconds", 3.0),
    ({"LAGPILOT_KAFKA_TIMEOUT_SECONDS": "5"}, "kafka_timeout_seconds", 5.0),
    ({"LAGPILOT_MAX_BACKOFF_SECONDS": ""}, "max_backoff_seconds", 300.0),
    ({"LAGPILOT_CYCLE_WORKERS": "0"}, "cycle_workers", 1),
], ids=["default", "pod-start", "kafka-timeout", "empty-is-default", "workers-at-least-1"])
def test_from_env(env: dict[str, str], field: str, value: float) -> None:
    assert getattr(OperatorConfig.from_env(env), field) == value


@pytest.mark.parametrize("raw", ["abc", "-1"])
def test_bad_values_name_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match="LAGPILOT_POD_START_SECONDS"):
        OperatorConfig.from_env({"LAGPILOT_POD_START_SECONDS": raw})
