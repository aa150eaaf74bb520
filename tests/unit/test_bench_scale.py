"""bench/scale.py's pure parts: the start-up figures from the operator log, the histogram quantile."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "bench_scale", Path(__file__).resolve().parents[2] / "bench" / "scale.py"
)
scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scale)  # type: ignore[union-attr]


def test_first_cycles_from_the_operator_log() -> None:
    lines = ["not json", json.dumps({"message": "deployment applied", "group": "ns/g0"})]
    for i, (created, adopt, ok) in enumerate(
        [(3.0, 0.5, True), (5.0, 1.0, True), (9.0, 2.0, False), (4.0, 0.1, True)]
    ):
        lines.append(
            json.dumps(
                {
                    "message": "first cycle done",
                    "group": f"ns/g{i}",
                    "ok": ok,
                    "since_created_s": created,
                    "adopt_s": adopt,
                }
            )
        )
    got = scale.first_cycles("\n".join(lines))
    assert got == {
        "first_cycles": 4,
        "first_cycle_failed": 1,
        "first_cycle_s": {"p50": 5.0, "p90": 9.0, "max": 9.0},
        "adopt_s": {"p50": 1.0, "max": 2.0},
    }
    assert scale.first_cycles("")["first_cycles"] == 0


@pytest.mark.parametrize(
    "q, buckets, want",
    [
        (0.5, {"0.1": 50, "1": 100, "+Inf": 100}, 0.1),
        (0.99, {"0.1": 50, "1": 100, "+Inf": 100}, 0.982),
        (0.5, {"0.1": 0, "+Inf": 0}, None),
    ],
)
def test_histogram_quantile(q: float, buckets: dict, want: float | None) -> None:
    got = scale.histogram_quantile(q, buckets)
    assert (got is None and want is None) or got == pytest.approx(want)
