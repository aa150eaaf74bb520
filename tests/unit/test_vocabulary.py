"""One vocabulary: every condition type the operator writes is declared once, in the status model
(lagpilot.model.status.ConditionType), and listed in that order by merge_conditions."""

from __future__ import annotations

import re
from pathlib import Path

from lagpilot.decide import kstatus
from lagpilot.decide.status import CONDITION_TYPES, Condition, merge_conditions
from lagpilot.model.status import ConditionType

SRC = Path(__file__).resolve().parents[2] / "operator" / "src" / "lagpilot"
WRITTEN = re.compile(r'Condition\(\s*"([A-Za-z]+)"')


def _types_written_in_the_code() -> set[str]:
    return {m.group(1) for p in SRC.rglob("*.py") for m in WRITTEN.finditer(p.read_text())}


def test_every_condition_type_in_the_code_is_declared() -> None:
    written = _types_written_in_the_code()
    assert written, "the scan found no Condition(...) at all: the pattern is wrong"
    assert written - {t.value for t in ConditionType} == set()


def test_the_scan_notices_an_undeclared_type(tmp_path: Path) -> None:
    """The check above must be able to fail."""
    found = {m.group(1) for m in WRITTEN.finditer('x = Condition("Sleepy", TRUE, "Why")')}
    assert found - {t.value for t in ConditionType} == {"Sleepy"}


def test_merge_lists_the_declared_types_in_order() -> None:
    assert CONDITION_TYPES == tuple(t.value for t in ConditionType)
    assert (kstatus.RECONCILING, kstatus.STALLED) == (
        ConditionType.RECONCILING.value,
        ConditionType.STALLED.value,
    )
    merged = merge_conditions(
        None,
        [
            Condition("Terminating", "True", "WaitingForDrain"),
            Condition("DataLoss", "False", "NoDataLoss"),
            Condition("Ready", "True", "ConsumersReady"),
        ],
        1,
        0.0,
    )
    types = [c["type"] for c in merged]
    assert types == sorted(types, key=CONDITION_TYPES.index)
