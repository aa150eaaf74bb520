"""The commit-metadata contract both sides use (lagpilot_runtime.commit_metadata): table + round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_runtime.commit_metadata import CapacityReport, decode, encode

CASES = [
    ("plain", "lp1;cap=137.5;ts=1700000000000", CapacityReport(137.5, 1_700_000_000_000)),
    ("reordered", "lp1;ts=5;cap=2", CapacityReport(2.0, 5)),
    ("extra-fields", "lp1;x=1;cap=2;ts=3000;y", CapacityReport(2.0, 3000)),
    ("not-measured-yet", "lp1;cap=;ts=1700000000000", None),
    ("no-ts", "lp1;cap=5.5", None),
    ("bad-ts", "lp1;cap=5.5;ts=soon", None),
    ("foreign", "someone else's metadata", None),
    ("empty", "", None),
    ("none", None, None),
    ("wrong-version", "lp2;cap=3;ts=1", None),
    ("negative", "lp1;cap=-3;ts=1", None),
    ("zero", "lp1;cap=0;ts=1", None),
    ("nan", "lp1;cap=nan;ts=1", None),
    ("inf", "lp1;cap=inf;ts=1", None),
    ("garbage-cap", "lp1;cap=fast;ts=1", None),
]


@pytest.mark.parametrize("text, want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode(text: str | None, want: CapacityReport | None) -> None:
    assert decode(text) == want


def test_encode_writes_the_documented_form() -> None:
    assert encode(137.04, 1_700_000_000_000) == "lp1;cap=137;ts=1700000000000"
    assert decode(encode(0.031, 5)) == CapacityReport(0.031, 5)  # a slow handler's capacity is not zero
    assert encode(None, 1_700_000_000_000) == "lp1;cap=;ts=1700000000000"


@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False), st.integers(min_value=1, max_value=2**53))
def test_round_trip_to_four_significant_digits(cap: float, ts: int) -> None:
    got = decode(encode(cap, ts))
    assert got is not None and got.ts_ms == ts and abs(got.records_per_second - cap) <= 5e-4 * cap
