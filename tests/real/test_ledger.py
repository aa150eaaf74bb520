"""The delivery ledger on the real PostgreSQL: the sink appends one row per delivery (a replayed
batch shows up twice), and ledger_report counts lost and duplicated offsets from those rows."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest

from lagpilot_runtime.handler import BatchContext, Record, load_handler
from lagpilot_runtime.sinks.ledger import ledger_report, stats

pytestmark = [pytest.mark.real]


def test_sink_rows_and_report_count_replays_and_gaps(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    monkeypatch.setenv("LAGPILOT_LEDGER_DSN", postgres_dsn)
    table = "ledger_" + uuid.uuid4().hex[:8]
    process = load_handler("ledger")
    log = logging.getLogger("test")
    consumer = BatchContext({"ledger.table": table}, log)
    drain = BatchContext({"ledger.table": table}, log, source="drain", drain_id="ns.cr.7")

    def recs(p: int, offs: range, topic: str = "t1") -> list[Record]:
        return [Record(topic, p, o, None, b"x") for o in offs]

    process(recs(0, range(0, 100)), consumer)  # the group: p0 [0, 100)
    process(recs(0, range(100, 200)), drain)  # a drain: p0 [100, 200)
    process(recs(0, range(150, 200)), drain)  # a replayed half batch: 50 duplicates
    process(recs(1, range(0, 40)), consumer)  # p1 [0, 40); [40, 60) never delivered
    process(recs(1, range(0, 1000), topic="other"), consumer)  # another topic: not counted
    # concurrent writers (handler threads / Spark tasks) each get their own connection
    ts = [
        threading.Thread(target=process, args=(recs(2, range(i * 10, i * 10 + 10)), consumer))
        for i in range(5)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

    with psycopg.connect(postgres_dsn) as conn:
        rep = ledger_report(conn, table, "t1", {0: 200, 1: 60, 2: 50})
        rows = conn.execute(
            f"SELECT source, drain_id, count(*) FROM {table} WHERE topic = %s GROUP BY 1, 2 ORDER BY 1",
            ["t1"],
        ).fetchall()
        keys = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s", [table]).fetchone()[0]
    print(rep)
    assert keys == 0  # no primary key, no unique index: nothing can hide a duplicate
    assert rep["delivered"] == 100 + 100 + 50 + 40 + 50
    assert rep["distinct"] == 200 + 40 + 50
    assert rep["duplicated"] == 50
    assert rep["lost"] == 20 and rep["per_partition"][1]["lost_offsets"] == list(range(40, 60))
    assert rep["outside"] == 0
    assert rep["by_source"] == {"consumer": 190, "drain": 150}
    assert sorted(rows) == [("consumer", None, 190), ("drain", "ns.cr.7", 150)]
    s = stats(postgres_dsn, table, {0: (100, 200)}, source="drain")
    assert (s["delivered"], s["lost"], s["duplicated"], s["outside"]) == (150, 0, 50, 0)
