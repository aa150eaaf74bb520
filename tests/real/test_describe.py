"""`kubectl describe bcg` of a busy CR fits two screens (issue 26 item 2).

A screen is 50 lines (a terminal of common height; kubectl describe does not page), so two screens
are 100 lines. Measured with the real `kubectl describe` (the version-matched kubectl of the dev
stack) on a CR the operator reconciles on the real API server while a busy drain is in flight: the
consumers run, partition 0 keeps taking records, the drain Job is Running (sub-ranges listed, the
drain's ranges and its next split). The count includes everything describe prints: the header and
metadata, the spec the test applied (30 lines here), the status and the events."""
from __future__ import annotations

from typing import Any

import pytest

from tests.real.test_drain_operator import crd, scenario, wait_phase  # noqa: F401

pytestmark = [pytest.mark.real, pytest.mark.slow]

SCREEN = 50
BOUND = 2 * SCREEN


def sections(text: str) -> dict[str, int]:
    """Lines per top-level section of describe's output (Spec, Status, Events; the rest: header)."""
    out: dict[str, int] = {}
    current = "header"
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith(":") and line[:-1] in ("Spec", "Status", "Events"):
            current = line[:-1]
        elif line.startswith("  Conditions:") and current == "Status":
            current = "Status.conditions"
        elif current == "Status.conditions" and line.startswith("  ") and not line.startswith("    "):
            current = "Status"
        out[current] = out.get(current, 0) + 1
    return out


def test_describe_of_a_busy_cr_with_a_drain_in_flight_fits_two_screens(scenario: Any, crd: Any) -> None:
    s = scenario({0: 3000, 1: 100, 2: 100}, live={0: 300, 1: 0, 2: 0}, drain={"busy": True})
    d = wait_phase(s, ("Running",), 600, interval=1)
    assert d.get("subRanges"), d  # in flight: its sub-ranges (the Spark tasks) are listed
    text = crd.kubectl("describe", "bcg", s.name, "-n", s.ns).stdout
    lines = text.splitlines()
    print(text)
    print(f"kubectl describe bcg: {len(lines)} lines; per section {sections(text)}")
    assert "Type:                  Ready" in text and "Phase:" in text  # the status was described
    assert len(lines) <= BOUND, (len(lines), sections(text))
