"""The SQL behind the proof: what reached the sink table, what the delivery ledger (one row per
delivery, no key) counted, the end-to-end latency, and the ledger's deliveries for the measurements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagpilot_dev.demo import measure as demo_measure
from lagpilot_dev.demo.config import RunNames
from lagpilot_dev.demo.observe import sql_rows
from lagpilot_dev.demo.report import Proof


def proof(
    pg: Any, names: RunNames, *, partitions: int, sla_s: float, end: Mapping[int, int], produced: int
) -> Proof:
    """``end``: the last sample's end offsets; ``produced``: the records the producer had acked."""
    q = f'"{names.table}"'
    rows, distinct = 0, 0
    r = sql_rows(
        pg,
        f'SELECT count(*), count(DISTINCT (topic, partition, "offset")) FROM {q} WHERE topic = %s',
        (names.topic,),
    )
    if r:
        rows, distinct = int(r[0][0]), int(r[0][1])
    per: dict[int, dict[str, int]] = {}
    for p in range(partitions):
        per[p] = {"end": int(end.get(p, 0)), "rows": 0, "distinct": 0, "min": -1, "max": -1}
    for part, n, nd, lo, hi in sql_rows(
        pg,
        f'SELECT partition, count(*), count(DISTINCT "offset"), min("offset"), max("offset") FROM {q} '
        "WHERE topic = %s GROUP BY partition",
        (names.topic,),
    ):
        per.setdefault(int(part), {"end": 0})
        per[int(part)].update(rows=int(n), distinct=int(nd), min=int(lo), max=int(hi))
    result = Proof(
        produced=produced,
        end_offsets_total=sum(int(v) for v in end.values()),
        rows_in_sink=rows,
        distinct_in_sink=distinct,
        per_partition=per,
    )
    ledger = f'"{names.ledger_table}"'
    ends = {p: int(v) for p, v in end.items()}
    counts: dict[int, tuple[int, int, int]] = {}
    rows_ok = sql_rows(pg, "SELECT to_regclass(%s) IS NOT NULL", (names.ledger_table,))
    if rows_ok and rows_ok[0][0]:
        for part, n, ndist, _hi in sql_rows(
            pg,
            f'SELECT partition, count(*), count(DISTINCT "offset"), max("offset") FROM {ledger} '
            "WHERE topic = %s GROUP BY partition",
            (names.topic,),
        ):
            counts[int(part)] = (int(n), int(ndist), 0)
        for part, nout in sql_rows(
            pg,
            f'SELECT l.partition, count(DISTINCT l."offset") FROM {ledger} l '
            f'JOIN (SELECT unnest(%s::int[]) AS partition, unnest(%s::bigint[]) AS "end") e '
            'ON e.partition = l.partition WHERE l.topic = %s AND (l."offset" >= e."end" OR l."offset" < 0) '
            "GROUP BY l.partition",
            (list(ends), list(ends.values()), names.topic),
        ):
            n, ndist, _ = counts.get(int(part), (0, 0, 0))
            counts[int(part)] = (n, ndist - int(nout), int(nout))
        for part in set(counts) - set(ends):  # a partition the topic does not have: all outside
            n, ndist, _ = counts[part]
            counts[part] = (n, 0, ndist)
        result.ledger = demo_measure.ledger_report(counts, ends)
        result.by_source = {
            str(src): int(n)
            for src, n in sql_rows(
                pg,
                f'SELECT source, count(DISTINCT (partition, "offset")) FROM {ledger} WHERE topic = %s GROUP BY source',
                (names.topic,),
            )
        }
    lat = sql_rows(
        pg,
        (
            "SELECT max(l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l), avg((l <= %s)::int) FROM ("
            f"SELECT extract(epoch FROM written_at) - timestamp_ms / 1000.0 AS l FROM {q} "
            "WHERE topic = %s AND timestamp_ms IS NOT NULL) x"
        ),
        (sla_s, names.topic),
    )
    if lat and lat[0][0] is not None:
        result.latency = {
            "max_s": round(float(lat[0][0]), 1),
            "p99_s": round(float(lat[0][1]), 1),
            "within_sla_fraction": round(float(lat[0][2]), 4),
        }
    return result


def ledger_batches(pg: Any, names: RunNames, wall0: float | None) -> list[demo_measure.Batch]:
    """The ledger's rows grouped by delivery (worker + commit time), in replay time (``wall0``: the
    replay's start, wall clock)."""
    if wall0 is None:
        return []
    rows = sql_rows(
        pg,
        (
            "SELECT source, worker, extract(epoch FROM delivered_at), count(*), array_agg(DISTINCT partition) "
            f'FROM "{names.ledger_table}" WHERE topic = %s GROUP BY source, worker, delivered_at'
        ),
        (names.topic,),
    )
    return [
        demo_measure.Batch(
            str(w or ""), str(src), float(ts) - wall0, int(n), tuple(sorted(int(x) for x in parts))
        )
        for src, w, ts, n, parts in rows
    ]
