"""The built-in PostgreSQL sink (psycopg 3): idempotent, one transaction per batch.

``insert`` mode: one row per record, primary key (topic, topic_id, partition, offset), ``ON CONFLICT
DO NOTHING``: a batch replayed after a crash (processed, not yet committed) writes nothing twice.
``topic_id`` is the topic's incarnation — the id Kafka assigns when the topic is created, from the
cluster's metadata (:func:`topic_id_for`) — so a topic deleted and created again, whose offsets
start over, keeps its new records instead of dropping them as replays of the old ones.
``upsert`` mode: one row per (topic, key) holding the newest record (:func:`supersedes`): within one
partition of one incarnation the higher offset wins (Kafka's order; a producer's clock may go
back); otherwise (the key moved partitions after partitions were added, or the topic was
re-created) the later record timestamp wins, ties broken by the higher partition, then the higher
offset; a missing timestamp counts as the oldest. Records without a key cannot be upserted and
fail permanently (dead-lettered).

Exactly once without relying on a key: every batch's rows and its progress (``ctx.offsets``: next
offset per partition, under ``ctx.progress_scope`` — the consumer group, or the drain's range:
group, partition, end) are written in ONE transaction; the progress lives in ``<table>_lagpilot_progress`` (primary key
scope/topic/partition, ``next_offset`` only ever grows). The consumer and the drain read it back
(:func:`progress`) and skip what the sink already holds, so a crash between this commit and the
Kafka commit delivers nothing twice. ``postgres.key`` = ``none`` (or ``LAGPILOT_POSTGRES_KEY``)
creates the insert-mode table without a primary key and inserts plainly: then the progress table is
the only protection against duplicates (tests use it to prove exactly-once with a table that can
show duplicates). A progress row never expires (unlike Kafka offsets: offsets.retention.minutes).

Fencing (issue 23; handler contract ``claim``): a drain task claims its range before it reads the
progress (:func:`claim`: the progress row's ``epoch`` + 1, the row created with ``next_offset`` -1
if missing) and writes with ``ctx.epoch``; each write locks the range's progress row (``SELECT ...
FOR UPDATE``) and raises :class:`~lagpilot_runtime.handler.Fenced` in its transaction when the
row's epoch is not the writer's: an attempt given up (cancelled, its runtime stopped and resumed)
cannot write records a later attempt already wrote. A claim waits for a write holding the lock,
so the claimer's progress read includes it. The consumer (no claim, ``epoch`` None) is unchanged.

Settings come from the pod environment (``LAGPILOT_POSTGRES_DSN`` / ``_TABLE`` / ``_MODE``), which
the drain job shares; ``ctx.config`` keys ``postgres.table`` / ``postgres.mode`` override them.
The table is created if missing. Batches of 100 rows or more are staged with ``COPY`` into a
temporary table and moved with one ``INSERT ... SELECT ... ON CONFLICT``; smaller ones use
``executemany`` (pipelined). Measured on the dev stack (docs/consumer.md): COPY 82-89k rows/s at
500 rows per batch vs 54-56k for executemany, executemany 38-40k vs 23-31k at 50 rows.
``postgres.method`` (copy | executemany | auto) forces one path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..handler import BatchContext, Fenced, Record, RecordError, RecordsFailed

COLUMNS = ("topic", "topic_id", "partition", "offset", "key", "value", "headers", "timestamp_ms")
# how long a looked-up topic id is trusted without a sign of re-creation (offsets going back)
TOPIC_ID_MAX_AGE_S = 300.0


@dataclass(frozen=True)
class PostgresSettings:
    dsn: str = field(repr=False)
    table: str = "lagpilot_records"
    mode: str = "insert"
    method: str = "auto"
    key: str = "primary"  # "primary" | "none" (insert mode only)

    @classmethod
    def resolve(
        cls, config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
    ) -> PostgresSettings:
        """Environment first, ``ctx.config`` overrides; raises ValueError naming what is missing."""
        e = os.environ if env is None else env
        c = config or {}
        dsn = e.get("LAGPILOT_POSTGRES_DSN") or ""  # a secret: only ever from the environment
        if not dsn:
            raise ValueError("the postgres sink needs LAGPILOT_POSTGRES_DSN")
        table = c.get("postgres.table") or e.get("LAGPILOT_POSTGRES_TABLE") or "lagpilot_records"
        mode = c.get("postgres.mode") or e.get("LAGPILOT_POSTGRES_MODE") or "insert"
        method = c.get("postgres.method") or "auto"
        key = c.get("postgres.key") or e.get("LAGPILOT_POSTGRES_KEY") or "primary"
        if key not in ("primary", "none"):
            raise ValueError(f"postgres key must be primary or none, got {key!r}")
        if key == "none" and mode != "insert":
            raise ValueError("postgres key none needs insert mode (upsert is keyed by (topic, key))")
        if mode not in ("insert", "upsert"):
            raise ValueError(f"postgres mode must be insert or upsert, got {mode!r}")
        if method not in ("auto", "copy", "executemany"):
            raise ValueError(f"postgres method must be auto, copy or executemany, got {method!r}")
        _check_identifier(table)
        return cls(dsn=dsn, table=table, mode=mode, method=method, key=key)


def _check_identifier(name: str, what: str = "postgres table") -> str:
    """``name`` if it is a plain identifier, optionally ``schema.table`` (it is interpolated into SQL);
    shared by every sink that names a table (postgres, ledger)."""
    parts = name.split(".")
    ok = 1 <= len(parts) <= 2 and all(
        p and p.isascii() and (p[0].isalpha() or p[0] == "_") and all(ch.isalnum() or ch == "_" for ch in p)
        for p in parts
    )
    if not ok:
        raise ValueError(f"{what} must be a plain identifier (optionally schema.table), got {name!r}")
    return name


def _qualified(table: str) -> str:
    return ".".join(f'"{p}"' for p in table.split("."))


def ddl(table: str, mode: str, key: str = "primary") -> str:
    """CREATE TABLE IF NOT EXISTS for the mode's key (``key="none"``: insert mode without a key)."""
    pk = '(topic, topic_id, partition, "offset")' if mode == "insert" else "(topic, key)"
    key_null = "" if mode == "insert" else " NOT NULL"
    pk_clause = "" if key == "none" and mode == "insert" else f", PRIMARY KEY {pk}"
    return (
        f"CREATE TABLE IF NOT EXISTS {_qualified(table)} (topic text NOT NULL, partition integer NOT NULL, "
        f"topic_id text NOT NULL DEFAULT '', "
        f'"offset" bigint NOT NULL, key bytea{key_null}, value bytea, headers jsonb, timestamp_ms bigint, '
        f"written_at timestamptz NOT NULL DEFAULT now(){pk_clause})"
    )


def progress_table(table: str) -> str:
    """The sink's progress table: ``<table>_lagpilot_progress`` (same schema)."""
    return f"{table}_lagpilot_progress"


def progress_ddl(table: str) -> str:
    """``epoch``: the newest claim on the range (drains; 0 never claimed); ``next_offset`` -1: claimed,
    nothing written yet."""
    return (
        f"CREATE TABLE IF NOT EXISTS {_qualified(progress_table(table))} (scope text NOT NULL, topic text NOT NULL, "
        "partition integer NOT NULL, next_offset bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), "
        "epoch bigint NOT NULL DEFAULT 0, PRIMARY KEY (scope, topic, partition))"
    )


def progress_rows(
    scope: str, offsets: Mapping[tuple[str, int], int] | None
) -> list[tuple[str, str, int, int]]:
    """(scope, topic, partition, next_offset) rows for a batch's progress (pure)."""
    return [(scope, t, int(p), int(o)) for (t, p), o in sorted((offsets or {}).items())]


def headers_json(headers: Sequence[tuple[str, bytes]]) -> str | None:
    """Headers as a JSON array of [name, text] (values decoded as UTF-8, undecodable bytes escaped)."""
    if not headers:
        return None
    return json.dumps([[k, (v or b"").decode("utf-8", "backslashreplace")] for k, v in headers])


def _ts(timestamp_ms: int | None) -> int:
    return -1 if timestamp_ms is None or timestamp_ms < 0 else int(timestamp_ms)


def supersedes(new: tuple[str, int, int, int | None], old: tuple[str, int, int, int | None]) -> bool:
    """Upsert's newest-wins rule on (topic_id, partition, offset, timestamp_ms) (pure; the SQL of
    :func:`_conflict_clause` is the same): the same partition of the same incarnation is ordered by
    offset; anything else by (timestamp, partition, offset)."""
    if new[0] == old[0] and new[1] == old[1]:
        return new[2] > old[2]
    return (_ts(new[3]), new[1], new[2]) > (_ts(old[3]), old[1], old[2])


def rows_for(records: Sequence[Record], mode: str, topic_id: str = "") -> list[tuple[Any, ...]]:
    """The rows to write; in upsert mode only the newest record per key (one statement cannot
    update the same row twice) and keyless records fail permanently (raised as RecordsFailed)."""
    if mode == "insert":
        return [
            (
                r.topic,
                topic_id,
                r.partition,
                r.offset,
                r.key,
                r.value,
                headers_json(r.headers),
                r.timestamp_ms,
            )
            for r in records
        ]
    keyless = [
        RecordError(r, "upsert mode needs a record key, this record has none", retriable=False)
        for r in records
        if r.key is None
    ]
    if keyless:
        raise RecordsFailed(keyless)
    newest: dict[tuple[str, bytes], Record] = {}
    for r in records:
        k = (r.topic, cast(bytes, r.key))  # not None: keyless records raised above
        cur = newest.get(k)
        if cur is None or supersedes(
            (topic_id, r.partition, r.offset, r.timestamp_ms),
            (topic_id, cur.partition, cur.offset, cur.timestamp_ms),
        ):
            newest[k] = r
    return [
        (r.topic, topic_id, r.partition, r.offset, r.key, r.value, headers_json(r.headers), r.timestamp_ms)
        for r in newest.values()
    ]


def _conflict_clause(table: str, mode: str, key: str = "primary", legacy_key: bool = False) -> str:
    """``legacy_key``: an insert table created before the topic incarnation joined its primary key
    (docs/consumer.md: how to migrate it); its conflict target stays (topic, partition, offset)."""
    if mode == "insert" and key == "none":
        return ""
    if mode == "insert":
        return (
            'ON CONFLICT (topic, partition, "offset") DO NOTHING'
            if legacy_key
            else 'ON CONFLICT (topic, topic_id, partition, "offset") DO NOTHING'
        )
    t = _qualified(table)
    return (
        "ON CONFLICT (topic, key) DO UPDATE SET topic_id = EXCLUDED.topic_id, partition = EXCLUDED.partition, "
        '"offset" = EXCLUDED."offset", value = EXCLUDED.value, headers = EXCLUDED.headers, '
        "timestamp_ms = EXCLUDED.timestamp_ms, written_at = now() "
        # supersedes(): offset order within one partition of one incarnation, else the timestamp
        f"WHERE CASE WHEN {t}.topic_id = EXCLUDED.topic_id AND {t}.partition = EXCLUDED.partition "
        f'THEN {t}."offset" < EXCLUDED."offset" '
        f'ELSE (CASE WHEN {t}.timestamp_ms >= 0 THEN {t}.timestamp_ms ELSE -1 END, {t}.partition, {t}."offset") '
        "< (CASE WHEN EXCLUDED.timestamp_ms >= 0 THEN EXCLUDED.timestamp_ms ELSE -1 END, EXCLUDED.partition, "
        'EXCLUDED."offset") END'
    )


_lock = threading.Lock()
_connections: dict[str, Any] = {}
_created: dict[tuple[str, str, str], bool] = {}  # (dsn hash, table, mode) -> legacy insert key


def _connection(settings: PostgresSettings) -> Any:
    import psycopg

    key = hashlib.sha256(settings.dsn.encode()).hexdigest()
    conn = _connections.get(key)
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(
            settings.dsn, autocommit=True, connect_timeout=10, application_name="lagpilot-sink"
        )
        _connections[key] = conn
    return conn


def _drop_connection(settings: PostgresSettings) -> None:
    key = hashlib.sha256(settings.dsn.encode()).hexdigest()
    conn = _connections.pop(key, None)
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - already broken
            pass


def ensure_table(conn: Any, table: str, mode: str, key: str = "primary") -> bool:
    """Create the table and its progress table if missing; an advisory lock stops concurrent replicas
    racing on the DDL. A table of an older version gets the topic_id column; True when its insert
    primary key is still the old (topic, partition, offset) (logged: docs/consumer.md migrates it)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"lagpilot:{table}",))
        conn.execute(ddl(table, mode, key))
        conn.execute(
            f"ALTER TABLE {_qualified(table)} ADD COLUMN IF NOT EXISTS topic_id text NOT NULL DEFAULT ''"
        )
        conn.execute(progress_ddl(table))
        conn.execute(
            f"ALTER TABLE {_qualified(progress_table(table))} ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0"
        )
        if mode != "insert" or key == "none":
            return False
        pk = (
            conn.execute(
                "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (_qualified(table),),
            ).fetchone()[0]
            or []
        )
    legacy = "topic_id" not in pk
    if legacy:
        logging.getLogger("lagpilot.sink.postgres").warning(
            "table has the old insert key (topic, partition, offset): records of a re-created topic at reused "
            "offsets are dropped until it is migrated (docs/consumer.md)",
            extra={"fields": {"event": "sink_legacy_key", "table": table}},
        )
    return legacy


COPY_MIN_ROWS = 100


def fence_rows(scope: str, epoch: int | None, records: Sequence[Record]) -> list[tuple[str, str, int, int]]:
    """(scope, topic, partition, epoch) the write must hold the newest claim of (pure; none without a claim)."""
    if epoch is None:
        return []
    return [(scope, t, p, int(epoch)) for t, p in sorted({(r.topic, int(r.partition)) for r in records})]


def check_fence(conn: Any, table: str, fence: Sequence[tuple[str, str, int, int]]) -> None:
    """Inside the write's transaction: lock each range's progress row and raise Fenced unless its epoch
    is the writer's (a later claim, or no claim at all)."""
    pt = _qualified(progress_table(table))
    for scope, topic, partition, epoch in fence:
        row = conn.execute(
            f"SELECT epoch FROM {pt} WHERE scope = %s AND topic = %s AND partition = %s FOR UPDATE",
            (scope, topic, partition),
        ).fetchone()
        if row is None or int(row[0]) != epoch:
            raise Fenced(
                f"{topic}/{partition}: the range was claimed by a later attempt (epoch "
                f"{row[0] if row else 'none'}, this writer's {epoch})"
            )


def claim_rows(conn: Any, table: str, scope: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    """A new epoch per partition's range (one transaction); creates the progress row (next_offset -1)."""
    pt = _qualified(progress_table(table))
    out: dict[int, int] = {}
    with conn.transaction():
        for p in partitions:
            got = conn.execute(
                f"INSERT INTO {pt} (scope, topic, partition, next_offset, epoch) VALUES (%s, %s, %s, -1, 1) "
                f"ON CONFLICT (scope, topic, partition) DO UPDATE SET epoch = {pt}.epoch + 1, updated_at = now() "
                "RETURNING epoch",
                (scope, topic, int(p)),
            ).fetchone()
            out[int(p)] = int(got[0])
    return out


def write_rows(
    conn: Any,
    table: str,
    mode: str,
    rows: Sequence[tuple[Any, ...]],
    method: str = "auto",
    key: str = "primary",
    progress: Sequence[tuple[str, str, int, int]] = (),
    legacy_key: bool = False,
    fence: Sequence[tuple[str, str, int, int]] = (),
) -> None:
    """Write rows (idempotently unless ``key="none"``) and the batch's progress rows in ONE
    transaction (COPY into a staging table, or executemany); ``fence`` (:func:`fence_rows`) checked
    first in the same transaction (Fenced: nothing written)."""
    if not rows and not progress:
        return
    if method == "auto":
        method = "copy" if len(rows) >= COPY_MIN_ROWS else "executemany"
    t = _qualified(table)
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    conflict = _conflict_clause(table, mode, key, legacy_key)
    with conn.transaction():
        if fence:
            check_fence(conn, table, fence)
        if progress:
            pt = _qualified(progress_table(table))
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {pt} (scope, topic, partition, next_offset) VALUES (%s, %s, %s, %s) "
                    f"ON CONFLICT (scope, topic, partition) DO UPDATE SET next_offset = "
                    f"GREATEST({pt}.next_offset, EXCLUDED.next_offset), updated_at = now()",
                    list(progress),
                )
        if not rows:
            return
        if method == "executemany":
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {t} ({cols}) VALUES ({', '.join(['%s'] * len(COLUMNS))}) {conflict}", rows
                )
            return
        stage = "lagpilot_stage_" + hashlib.sha1(table.encode()).hexdigest()[:12]
        conn.execute(
            f'CREATE TEMP TABLE IF NOT EXISTS "{stage}" (topic text, topic_id text, partition integer, '
            '"offset" bigint, key bytea, value bytea, headers jsonb, timestamp_ms bigint) ON COMMIT DELETE ROWS'
        )
        with conn.cursor() as cur:
            with cur.copy(f'COPY "{stage}" ({cols}) FROM STDIN') as copy:
                for row in rows:
                    copy.write_row(row)
        conn.execute(f'INSERT INTO {t} ({cols}) SELECT {cols} FROM "{stage}" {conflict}')


def _ready_connection(settings: PostgresSettings) -> tuple[Any, bool]:
    """The connection, and whether the table has the legacy insert key."""
    conn = _connection(settings)
    marker = (hashlib.sha256(settings.dsn.encode()).hexdigest(), settings.table, settings.mode)
    if marker not in _created:
        _created[marker] = ensure_table(conn, settings.table, settings.mode, settings.key)
    return conn, _created[marker]


# ---- the topic's incarnation ----------------------------------------------------------------------

_topic_ids: dict[str, tuple[str, float]] = {}
_max_offsets: dict[tuple[str, int], int] = {}


def _admin_conf(env: Mapping[str, str]) -> dict[str, Any] | None:
    """An admin client's configuration from the pod environment (the consumer's Kafka settings), or
    None without LAGPILOT_BOOTSTRAP_SERVERS (a sink used outside a consumer: no incarnation known)."""
    from ..config import ConsumerConfig

    boot = (env.get("LAGPILOT_BOOTSTRAP_SERVERS") or "").strip()
    if not boot:
        return None

    def opt(name: str) -> str | None:
        return env.get(name) or None

    cfg = ConsumerConfig(
        bootstrap_servers=boot,
        topic="",
        group_id="",
        security_protocol=(opt("LAGPILOT_SECURITY_PROTOCOL") or "PLAINTEXT").upper(),
        sasl_mechanism=(opt("LAGPILOT_SASL_MECHANISM") or "").upper() or None,
        sasl_username=opt("LAGPILOT_SASL_USERNAME"),
        sasl_password=opt("LAGPILOT_SASL_PASSWORD"),
        oauth_token_endpoint_url=opt("LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"),
        oauth_scope=opt("LAGPILOT_SASL_OAUTHBEARER_SCOPE"),
        oauth_client_id=opt("LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID"),
        oauth_client_secret=opt("LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET"),
        ssl_ca_pem=opt("LAGPILOT_SSL_CA_PEM"),
        ssl_cert_pem=opt("LAGPILOT_SSL_CERT_PEM"),
        ssl_key_pem=opt("LAGPILOT_SSL_KEY_PEM"),
    )
    return {"bootstrap.servers": boot, "client.id": "lagpilot-sink-metadata", **cfg.kafka_security()}


def topic_id_for(
    topic: str, records: Sequence[Record], env: Mapping[str, str] | None = None, now: float | None = None
) -> str:
    """The topic's id (its incarnation) from the cluster's metadata, "" when no Kafka is configured.

    Looked up once per process and topic, again when a partition's offsets go back below what this
    process saw (a re-created topic starts over; also a reset or a drain's lower sub-range: one
    lookup each) and every TOPIC_ID_MAX_AGE_S. A failed lookup raises: the batch is retried rather
    than written under a wrong incarnation."""
    e = os.environ if env is None else env
    conf = _admin_conf(e)
    if conf is None:
        return ""
    now = time.monotonic() if now is None else now
    back = any(r.offset < _max_offsets.get((r.topic, r.partition), -1) for r in records)
    held = _topic_ids.get(topic)
    if held is None or back or now - held[1] > TOPIC_ID_MAX_AGE_S:
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(conf)  # held until the answer: a collected client fails its futures (_DESTROY)
        desc = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
        held = (str(desc.topic_id), now)
        _topic_ids[topic] = held
    for r in records:
        k = (r.topic, r.partition)
        _max_offsets[k] = max(_max_offsets.get(k, -1), r.offset)
    return held[0]


def write_records(
    records: Sequence[Record],
    settings: PostgresSettings,
    progress: Sequence[tuple[str, str, int, int]] = (),
    fence: Sequence[tuple[str, str, int, int]] = (),
) -> None:
    """Write a batch and its progress (creating the tables on first use); reconnects next time
    after a broken connection."""
    import psycopg

    topics = {r.topic for r in records}
    with _lock:
        # one topic per consumer/drain; several (a custom caller): each its own incarnation
        ids = {t: topic_id_for(t, [r for r in records if r.topic == t]) for t in sorted(topics)}
        rows = [
            row
            for t in sorted(topics)
            for row in rows_for([r for r in records if r.topic == t], settings.mode, ids[t])
        ]
        try:
            conn, legacy = _ready_connection(settings)
            write_rows(
                conn,
                settings.table,
                settings.mode,
                rows,
                settings.method,
                settings.key,
                progress,
                legacy,
                fence,
            )
            _test_crash_point("after_sink_write")
        except psycopg.OperationalError:
            _drop_connection(settings)
            raise


def _test_crash_point(point: str) -> None:
    """Tests only: die like ``kill -9`` right after a batch's transaction committed (once across
    processes: an O_EXCL marker file holding the pid). LP_TEST_SINK_CRASH_AT=after_sink_write
    (optionally LP_TEST_SINK_CRASH_SOURCE=consumer|drain) and LP_TEST_SINK_CRASH_DIR; unset in
    production (a no-op)."""
    if os.environ.get("LP_TEST_SINK_CRASH_AT") != point or not os.environ.get("LP_TEST_SINK_CRASH_DIR"):
        return
    _crash_once(point)


def _crash_once(point: str) -> None:
    import time as _time

    want = os.environ.get("LP_TEST_SINK_CRASH_SOURCE")
    if want and want != _current_source.get("source"):
        return
    after = int(os.environ.get("LP_TEST_SINK_CRASH_AFTER_BATCHES", "0") or 0)
    _current_source["batches"] = _current_source.get("batches", 0) + 1
    if _current_source["batches"] <= after:
        return
    marker = os.path.join(os.environ["LP_TEST_SINK_CRASH_DIR"], f"sink-{point}")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{os.getpid()} {_time.time()} {_current_source.get('source')}".encode())
    os.close(fd)
    os._exit(137)


_current_source: dict[str, Any] = {}


def process(records: list[Record], ctx: BatchContext) -> None:
    """Handler-contract entry point: the batch (and ``ctx.offsets`` under ``ctx.progress_scope``)
    is durable in PostgreSQL when this returns."""
    _current_source["source"] = ctx.source
    write_records(
        records,
        PostgresSettings.resolve(ctx.config),
        progress_rows(ctx.progress_scope, ctx.offsets),
        fence_rows(ctx.progress_scope, ctx.epoch, records),
    )


def progress(topic: str, partitions: Sequence[int], ctx: BatchContext) -> dict[int, int]:
    """The next offset per partition this sink holds under ``ctx.progress_scope`` (missing: none)."""
    import psycopg

    settings = PostgresSettings.resolve(ctx.config)
    with _lock:
        try:
            conn, _ = _ready_connection(settings)
            got = conn.execute(
                f"SELECT partition, next_offset FROM {_qualified(progress_table(settings.table))} "
                "WHERE scope = %s AND topic = %s AND partition = ANY(%s) AND next_offset >= 0",
                (ctx.progress_scope, topic, [int(p) for p in partitions]),
            ).fetchall()
        except psycopg.OperationalError:
            _drop_connection(settings)
            raise
    return {int(p): int(o) for p, o in got}


def claim(topic: str, partitions: Sequence[int], ctx: BatchContext) -> dict[int, int]:
    """Claim the range (``ctx.progress_scope``) of each partition: a new epoch, above every earlier
    claim's; writes under an older one are refused from now on (module doc: fencing)."""
    import psycopg

    settings = PostgresSettings.resolve(ctx.config)
    with _lock:
        try:
            conn, _ = _ready_connection(settings)
            return claim_rows(conn, settings.table, ctx.progress_scope, topic, partitions)
        except psycopg.OperationalError:
            _drop_connection(settings)
            raise


process.commits_progress = True  # type: ignore[attr-defined]
process.progress = progress  # type: ignore[attr-defined]
process.claim = claim  # type: ignore[attr-defined]


def close() -> None:
    """Close cached connections (end of the process)."""
    with _lock:
        for conn in _connections.values():
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
        _connections.clear()
