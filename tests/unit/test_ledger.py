"""The delivery ledger's report on hand-made rows (pure), its settings and row shape."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot_runtime.handler import BUILTIN_SINKS, BatchContext, Record, load_handler
from lagpilot_runtime.sinks import ledger
from lagpilot_runtime.sinks.ledger import LedgerSettings, ddl, drain_id_of, report_from_counts, rows_for


def counts(rows: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    out: dict[tuple[int, int], int] = {}
    for p, o in rows:
        out[(p, o)] = out.get((p, o), 0) + 1
    return [(p, o, n) for (p, o), n in out.items()]


@pytest.mark.parametrize(
    "rows, produced, want",
    [
        # every offset once: nothing lost, nothing duplicated
        (
            [(0, 0), (0, 1), (0, 2), (1, 0)],
            {0: 3, 1: 1},
            dict(delivered=4, distinct=4, lost=0, duplicated=0, outside=0),
        ),
        # offset 1 delivered three times (a replayed batch + the drain): 2 duplicates, still nothing lost
        (
            [(0, 0), (0, 1), (0, 1), (0, 1), (0, 2)],
            {0: 3},
            dict(delivered=5, distinct=3, lost=0, duplicated=2, outside=0),
        ),
        # a gap: offset 1 of p0 and all of p1 never delivered
        ([(0, 0), (0, 2)], {0: 3, 1: 2}, dict(delivered=2, distinct=2, lost=3, duplicated=0, outside=0)),
        # a row beyond what was produced (wrong table, or a bug) is counted as outside, not as delivered-ok
        ([(0, 0), (0, 5)], {0: 1}, dict(delivered=2, distinct=2, lost=0, duplicated=0, outside=1)),
        # nothing delivered at all
        ([], {0: 2}, dict(delivered=0, distinct=0, lost=2, duplicated=0, outside=0)),
    ],
)
def test_report_counts_lost_and_duplicated(rows, produced, want) -> None:
    rep = report_from_counts(counts(rows), produced)
    assert {k: rep[k] for k in want} == want
    assert rep["produced"] == sum(produced.values())


def test_report_per_partition_names_lost_offsets() -> None:
    rep = report_from_counts(counts([(0, 0), (0, 3), (1, 0), (1, 0)]), {0: 4, 1: 1})
    assert rep["per_partition"][0]["lost"] == 2 and rep["per_partition"][0]["lost_offsets"] == [1, 2]
    assert rep["per_partition"][1] == {
        "produced": 1,
        "delivered": 2,
        "distinct": 1,
        "lost": 0,
        "duplicated": 1,
        "outside": 0,
        "lost_offsets": [],
    }


def test_report_with_a_produced_start() -> None:
    # offsets below 10 were deleted by retention before the test started counting: not lost
    rep = report_from_counts(counts([(0, o) for o in range(10, 20)]), {0: 20}, produced_from={0: 10})
    assert rep["lost"] == 0 and rep["produced"] == 10 and rep["outside"] == 0


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.integers(0, 3), st.integers(0, 30), max_size=4),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 35)), max_size=200),
)
def test_report_properties(produced: dict[int, int], rows: list[tuple[int, int]]) -> None:
    rep = report_from_counts(counts(rows), produced)
    inside = {(p, o) for p, o in rows if o < produced.get(p, 0)}
    assert rep["delivered"] == len(rows)
    assert rep["distinct"] == len(set(rows))
    assert rep["duplicated"] == len(rows) - len(set(rows))
    assert rep["lost"] == sum(produced.values()) - len(inside)
    assert rep["outside"] == len(set(rows)) - len(inside)
    # exactly once <=> no loss, no duplicate, nothing outside
    exact = sorted(rows) == sorted((p, o) for p, n in produced.items() for o in range(n))
    assert exact == (rep["lost"] == 0 and rep["duplicated"] == 0 and rep["outside"] == 0)


def test_ddl_has_no_key_and_table_is_validated() -> None:
    sql = ddl("public.my_ledger").upper()
    assert "PRIMARY KEY" not in sql and "UNIQUE" not in sql
    with pytest.raises(ValueError):
        ddl("x; DROP TABLE y")


def test_settings_dsn_from_env_only_and_table_from_config() -> None:
    s = LedgerSettings.resolve(
        {"ledger.table": "t1", "cost_ms": "5"}, {"LAGPILOT_POSTGRES_DSN": "postgresql://u:secret@h/db"}
    )
    assert (s.table, s.cost_ms) == ("t1", 5.0)
    assert "secret" not in repr(s)
    assert LedgerSettings.resolve({}, {"LAGPILOT_LEDGER_DSN": "a", "LAGPILOT_POSTGRES_DSN": "b"}).dsn == "a"
    assert LedgerSettings.resolve({}, {"LEDGER_DSN": "x"}).table == "lagpilot_ledger"
    with pytest.raises(ValueError, match="LAGPILOT_LEDGER_DSN"):
        LedgerSettings.resolve({}, {})


def test_rows_carry_source_and_drain_id() -> None:
    log = logging.getLogger("t")
    recs = [Record("t", 1, 7, None, b"v"), Record("t", 1, 8, None, b"w")]
    assert drain_id_of(BatchContext({}, log)) is None
    assert drain_id_of(BatchContext({}, log, source="drain", drain_id="ns.cr.3")) == "ns.cr.3"
    assert (
        drain_id_of(BatchContext({}, log, source="drain"), {"LAGPILOT_DRAIN_PLAN": '{"drainId": "d9"}'})
        == "d9"
    )
    assert rows_for(recs, "drain", "d9", 1.5) == [
        ("t", 1, 7, "drain", "d9", 1.5),
        ("t", 1, 8, "drain", "d9", 1.5),
    ]


def test_selectable_as_a_builtin_sink() -> None:
    assert load_handler("ledger") is ledger.process
    assert "ledger" in BUILTIN_SINKS
    from lagpilot_runtime.config import SINKS

    assert "ledger" in SINKS
