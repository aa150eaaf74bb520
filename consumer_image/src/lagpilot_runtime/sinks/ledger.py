"""The built-in ``ledger`` sink: one row per delivery, NO unique key — duplicates are counted, not hidden.

A keyed table (the ``postgres`` sink: primary key topic/partition/offset, ``ON CONFLICT DO NOTHING``)
cannot show a record delivered twice. The ledger appends a row for every record every time a
handler call delivers it, so a replay, a record processed by both the group and a drain, or a lost
record is visible to a plain count. Tests, ``bench/`` and the demo use it as their proof of
exactly-once; :func:`ledger_report` compares it with what was produced.

Rows: ``(topic, partition, offset, source, drain_id, delivered_at)``; ``source`` is ``consumer`` or
``drain`` (``BatchContext.source``), ``drain_id`` the drain's plan id (``BatchContext.drain_id``,
else the id in ``LAGPILOT_DRAIN_PLAN``; NULL for the consumer), ``delivered_at`` the wall clock of
the batch's write (seconds, float).

Selecting it: ``LAGPILOT_SINK=ledger`` (runtime), or in a CR ``processing.handler:
lagpilot_runtime.sinks.ledger:process``. Settings: the DSN from ``LAGPILOT_LEDGER_DSN``, else
``LEDGER_DSN`` (the one a CR can set: ``template.env`` names ``LAGPILOT_*`` are reserved; use a
``secretKeyRef``), else ``LAGPILOT_POSTGRES_DSN`` (environment only: a secret); the table from
``ctx.config['ledger.table']`` (or ``table``), else ``LAGPILOT_LEDGER_TABLE``, else
``lagpilot_ledger``; ``ctx.config['ledger.cost_ms']`` (or ``cost_ms``) pads each call to that many
milliseconds (a fixed-latency sink for tests and benches). The table is created if missing.

Writes: one ``COPY`` per batch in its own transaction (the batch's rows appear all or none).
Delivery into the ledger is at-least-once like every handler: that is the point — a replay shows up
as extra rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..handler import BatchContext, Record
from . import postgres as postgres_sink

DEFAULT_TABLE = "lagpilot_ledger"
COLUMNS = ("topic", "partition", "offset", "source", "drain_id", "delivered_at")


def _check_identifier(name: str) -> str:
    return postgres_sink._check_identifier(name, "ledger table")


def qualified(table: str) -> str:
    """``"schema"."table"`` (validated)."""
    return postgres_sink._qualified(_check_identifier(table))


def ddl(table: str) -> str:
    """CREATE TABLE IF NOT EXISTS without any key or unique constraint (on purpose)."""
    t = qualified(table)
    return (
        f'CREATE TABLE IF NOT EXISTS {t} (topic text NOT NULL, partition integer NOT NULL, "offset" bigint NOT NULL, '
        "source text NOT NULL, drain_id text, delivered_at double precision NOT NULL)"
    )


@dataclass(frozen=True)
class LedgerSettings:
    dsn: str = field(repr=False)
    table: str = DEFAULT_TABLE
    cost_ms: float = 0.0

    @classmethod
    def resolve(
        cls, config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
    ) -> LedgerSettings:
        e = os.environ if env is None else env
        c = config or {}
        dsn = e.get("LAGPILOT_LEDGER_DSN") or e.get("LEDGER_DSN") or e.get("LAGPILOT_POSTGRES_DSN") or ""
        if not dsn:
            raise ValueError("the ledger sink needs LAGPILOT_LEDGER_DSN, LEDGER_DSN or LAGPILOT_POSTGRES_DSN")
        table = c.get("ledger.table") or c.get("table") or e.get("LAGPILOT_LEDGER_TABLE") or DEFAULT_TABLE
        cost = c.get("ledger.cost_ms") or c.get("cost_ms") or "0"
        return cls(dsn=dsn, table=_check_identifier(table), cost_ms=float(cost))


def drain_id_of(ctx: BatchContext, env: Mapping[str, str] | None = None) -> str | None:
    """The drain id for ``source == 'drain'``: ``ctx.drain_id``, else the plan in the environment."""
    if ctx.source != "drain":
        return None
    did = getattr(ctx, "drain_id", None)
    if did:
        return str(did)
    raw = (os.environ if env is None else env).get("LAGPILOT_DRAIN_PLAN")
    if raw:
        try:
            plan = json.loads(raw)
            v = plan.get("drainId", plan.get("id"))
            return None if v is None else str(v)
        except (ValueError, AttributeError):
            return None
    return None


def rows_for(
    records: Sequence[Record], source: str, drain_id: str | None, now: float
) -> list[tuple[Any, ...]]:
    """One row per record, in the ledger's column order (pure)."""
    return [(r.topic, r.partition, r.offset, source, drain_id, now) for r in records]


_local = threading.local()  # one connection per thread (handler threads, Spark worker threads)
_created: set[tuple[str, str]] = set()
_created_lock = threading.Lock()


def _key(dsn: str) -> str:
    return hashlib.sha256(dsn.encode()).hexdigest()


def _connection(settings: LedgerSettings) -> Any:
    import psycopg

    conns: dict[str, Any] = getattr(_local, "conns", None) or {}
    _local.conns = conns
    conn = conns.get(_key(settings.dsn))
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(
            settings.dsn, autocommit=True, connect_timeout=10, application_name="lagpilot-ledger"
        )
        conns[_key(settings.dsn)] = conn
    return conn


def ensure_table(conn: Any, table: str) -> None:
    """Create the ledger table if missing (advisory lock: replicas and tasks race on first use)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"lagpilot-ledger:{table}",))
        conn.execute(ddl(table))


def create_table(dsn: str, table: str) -> None:
    """Create the ledger table up front (tests, benches)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
        ensure_table(conn, table)


def append(conn: Any, table: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Append rows with one COPY in one transaction."""
    if not rows:
        return
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    with conn.transaction():
        with conn.cursor() as cur:
            with cur.copy(f"COPY {qualified(table)} ({cols}) FROM STDIN") as cp:
                for row in rows:
                    cp.write_row(row)


def process(records: list[Record], ctx: BatchContext) -> None:
    """Handler-contract entry point: the batch's deliveries are in the ledger when this returns."""
    import psycopg

    t0 = time.monotonic()
    settings = LedgerSettings.resolve(ctx.config)
    try:
        conn = _connection(settings)
        marker = (_key(settings.dsn), settings.table)
        if marker not in _created:
            ensure_table(conn, settings.table)
            with _created_lock:
                _created.add(marker)
        append(conn, settings.table, rows_for(records, ctx.source, drain_id_of(ctx), time.time()))
    except psycopg.OperationalError:
        conn = (getattr(_local, "conns", None) or {}).pop(_key(settings.dsn), None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
        raise
    left = settings.cost_ms / 1000.0 - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)


# ---------------------------------------------------------------- the report (pure + one query)


@dataclass(frozen=True)
class PartitionReport:
    produced: int
    delivered: int
    distinct: int
    lost: int
    duplicated: int
    outside: int  # distinct delivered offsets outside what was produced: a bug, or the wrong table
    lost_offsets: tuple[int, ...] = ()  # the first 20, for messages


def report_from_counts(
    counts: Iterable[tuple[int, int, int]],
    produced_per_partition: Mapping[int, int],
    produced_from: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """The report from ``(partition, offset, times delivered)`` triples (pure).

    Offsets ``[produced_from.get(p, 0), produced_per_partition[p])`` of partition p had to be
    delivered. ``lost`` = those never delivered; ``duplicated`` = deliveries beyond the first (sum
    over offsets of times - 1, inside or outside); ``outside`` = distinct delivered offsets outside it.
    """
    start = dict(produced_from or {})
    by_part: dict[int, dict[int, int]] = {}
    for p, o, n in counts:
        seen = by_part.setdefault(int(p), {})
        seen[int(o)] = seen.get(int(o), 0) + int(n)
    per: dict[int, PartitionReport] = {}
    for p in sorted(set(by_part) | set(produced_per_partition)):
        seen = by_part.get(p, {})
        lo, hi = int(start.get(p, 0)), int(produced_per_partition.get(p, 0))
        inside = sum(1 for o in seen if lo <= o < hi)
        lost_n = max(0, hi - lo) - inside
        lost_list: list[int] = []
        if lost_n:
            for o in range(lo, hi):
                if o not in seen:
                    lost_list.append(o)
                    if len(lost_list) >= 20:
                        break
        per[p] = PartitionReport(
            produced=max(0, hi - lo),
            delivered=sum(seen.values()),
            distinct=len(seen),
            lost=lost_n,
            duplicated=sum(n - 1 for n in seen.values()),
            outside=len(seen) - inside,
            lost_offsets=tuple(lost_list),
        )
    return {
        "produced": sum(r.produced for r in per.values()),
        "delivered": sum(r.delivered for r in per.values()),
        "distinct": sum(r.distinct for r in per.values()),
        "lost": sum(r.lost for r in per.values()),
        "duplicated": sum(r.duplicated for r in per.values()),
        "outside": sum(r.outside for r in per.values()),
        "per_partition": {p: asdict(r) | {"lost_offsets": list(r.lost_offsets)} for p, r in per.items()},
    }


def _where(topic: str | None, source: str | None, drain_id: str | None) -> tuple[list[str], list[Any]]:
    where, args = [], []
    for column, value in (("topic", topic), ("source", source), ("drain_id", drain_id)):
        if value is not None:
            where.append(f"{column} = %s")
            args.append(value)
    return where, args


def ledger_counts(
    conn: Any, table: str, topic: str | None = None, source: str | None = None, drain_id: str | None = None
) -> list[tuple[int, int, int]]:
    """``(partition, offset, deliveries)`` from the ledger (optionally one topic, one source, one drain)."""
    where, args = _where(topic, source, drain_id)
    sql = (
        f'SELECT partition, "offset", count(*) FROM {qualified(table)}'
        + (" WHERE " + " AND ".join(where) if where else "")
        + ' GROUP BY partition, "offset"'
    )
    return [(int(p), int(o), int(n)) for p, o, n in conn.execute(sql, args).fetchall()]


def ledger_report(
    conn: Any,
    table: str,
    topic: str | None,
    produced_per_partition: Mapping[int, int],
    produced_from: Mapping[int, int] | None = None,
    source: str | None = None,
    drain_id: str | None = None,
) -> dict[str, Any]:
    """``{produced, delivered, distinct, lost, duplicated, outside, per_partition, by_source,
    first_at, last_at}`` for a topic (None: every topic in the table).

    ``conn``: a psycopg connection; ``produced_per_partition``: partition → end of what had to be
    delivered (offsets ``produced_from.get(p, 0) .. n-1``); ``source`` restricts to one path,
    ``drain_id`` to one drain's deliveries.
    ``by_source``: deliveries per ``consumer`` / ``drain``; ``first_at``/``last_at``: the first and
    last delivery's wall time (steady-state rates for benches).
    """
    rep = report_from_counts(
        ledger_counts(conn, table, topic, source, drain_id), produced_per_partition, produced_from
    )
    where, args = _where(topic, None, drain_id)
    rows = conn.execute(
        f"SELECT source, count(*), min(delivered_at), max(delivered_at) FROM {qualified(table)} "
        + (" WHERE " + " AND ".join(where) if where else "")
        + " GROUP BY source",
        args,
    ).fetchall()
    rep["by_source"] = {str(s): int(n) for s, n, _, _ in rows}
    picked = [r for r in rows if source is None or r[0] == source]
    rep["first_at"] = min((r[2] for r in picked), default=None)
    rep["last_at"] = max((r[3] for r in picked), default=None)
    return rep


def stats(
    dsn: str,
    table: str,
    ranges: Mapping[int, tuple[int, int]],
    source: str | None = None,
    drain_id: str | None = None,
) -> dict[str, Any]:
    """Convenience over :func:`ledger_report` with a DSN and ``ranges`` (partition → [start, end))."""
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        return ledger_report(
            conn,
            table,
            None,
            {p: b for p, (_, b) in ranges.items()},
            {p: a for p, (a, _) in ranges.items()},
            source=source,
            drain_id=drain_id,
        )
