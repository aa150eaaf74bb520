"""The consumer runtime against the real broker and PostgreSQL (issue 4, "What must be shown").

Consumers run as real `lagpilot consume` subprocesses configured by environment, as a container's
entrypoint starts them, so SIGKILL and SIGTERM are real signals. Test handlers live in tests/handlers.py.
Every wait is on a condition with a generous timeout; nothing asserts on timing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.operator_process import checkout_pythonpath

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# this interpreter and this checkout's code (a git worktree has no .venv of its own, and the venv's
# editable install points at the checkout it was installed from)
LAGPILOT = [sys.executable, "-m", "lagpilot.cli"]


def wait_until(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class ConsumerProc:
    """One `lagpilot consume` subprocess; its JSON log lines are read from a file."""

    def __init__(self, tmp: Path, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = tmp / f"{name}-{uuid.uuid4().hex[:6]}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
        full_env.update(
            {
                "PYTHONPATH": checkout_pythonpath(REPO),
                "LAGPILOT_METRICS_PORT": "0",
                "LAGPILOT_POD_NAME": name,
                "LAGPILOT_RETRY_BACKOFF_MS": "20",
                "LAGPILOT_SESSION_TIMEOUT_MS": "10000",
                "LAGPILOT_SHUTDOWN_GRACE_MS": "60000",
            }
        )
        full_env.update(env)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [*LAGPILOT, "consume"],
            env=full_env,
            cwd=str(REPO),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                out.append({"raw": raw})
        return out

    def events(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == event]

    def metrics_port(self) -> int:
        found = wait_until(lambda: self.events("metrics_listening"), 60, f"{self.name} metrics port")
        return int(found[0]["port"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.flush()

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


@pytest.fixture
def consumers(tmp_path: Path):
    started: list[ConsumerProc] = []

    def start(name: str, env: dict[str, str]) -> ConsumerProc:
        c = ConsumerProc(tmp_path, name, env)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    keys: list[bytes] | None = None,
    partition: int | None = None,
) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i, v in enumerate(values):
        kwargs: dict[str, Any] = {"value": v, "on_delivery": report}
        if keys is not None:
            kwargs["key"] = keys[i]
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """Committed offsets of `group` (partitions with no commit are absent)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def committed_with_metadata(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, tuple[int, str]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return {tp.partition: (tp.offset, tp.metadata) for tp in got if tp.offset >= 0}


def read_all(bootstrap: str, topic: str, expect: int, timeout: float = 120) -> list[Any]:
    """Every record of `topic` from the beginning (waits until `expect` arrived)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(out) < expect:
            for m in c.consume(num_messages=1000, timeout=1.0):
                if m.error() is None:
                    out.append(m)
        # a little longer: anything beyond `expect` would be a defect
        for m in c.consume(num_messages=1000, timeout=2.0):
            if m.error() is None:
                out.append(m)
    finally:
        c.close()
    return out


def sql(dsn: str, query: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=30) as conn:
        try:
            return conn.execute(query).fetchall()
        except psycopg.errors.UndefinedTable:
            return []


def row_count(dsn: str, table: str) -> int:
    rows = sql(dsn, f'SELECT count(*) FROM "{table}"')
    return rows[0][0] if rows else 0


def base_env(bootstrap: str, topic: str, group: str, dsn: str, table: str) -> dict[str, str]:
    return {
        "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap,
        "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group,
        "LAGPILOT_POSTGRES_DSN": dsn,
        "LAGPILOT_POSTGRES_TABLE": table,
    }


def owned_now(c: ConsumerProc) -> set[int]:
    """The partitions a consumer owns according to its latest assigned/revoked/lost log line."""
    owned: set[int] = set()
    for line in c.lines():
        if line.get("event") in ("assigned", "revoked", "lost") and "owned" in line:
            owned = set(line["owned"])
    return owned


def uid() -> str:
    return uuid.uuid4().hex[:8]


def drop_topic(admin: Any, name: str) -> None:
    try:
        for fut in admin.delete_topics([name], operation_timeout=30).values():
            fut.result(timeout=60)
    except Exception:  # noqa: BLE001 - best effort cleanup
        pass


# ------------------------------------------------------------------------------------------------
def test_sigkill_mid_batch_then_restart_every_record_exactly_once(
    kafka_bootstrap, postgres_dsn, new_topic, consumers
):
    topic = new_topic(partitions=3)
    group, table, attempts = f"g-{uid()}", f"kill_{uid()}", f"kill_att_{uid()}"
    total = 3000
    produce(
        kafka_bootstrap,
        topic,
        [b"record-%d" % i for i in range(total)],
        keys=[b"k%d" % i for i in range(total)],
    )
    env = {
        **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
        "LAGPILOT_HANDLER": "tests.handlers:slow_postgres",
        "LAGPILOT_BATCH_MAX_RECORDS": "200",
        "LAGPILOT_FAILURE_POLICY": "exit",
        "LAGPILOT_HANDLER_CONFIG": json.dumps({"sleep_ms": "4000", "attempts_table": attempts}),
    }
    first = consumers("kill-0", env)
    # let a couple of batches commit, then kill while a later batch is written but not committed
    wait_until(lambda: len(first.events("batch_written")) >= 3, 180, f"three batches written\n{first.tail()}")
    first.signal(signal.SIGKILL)
    assert first.wait(60) == -signal.SIGKILL
    written = row_count(postgres_dsn, table)
    done = sum(committed(kafka_bootstrap, group, topic, 3).values())
    assert 0 < done < written <= total, (done, written)  # the kill landed between a write and its commit

    second = consumers(
        "kill-0",
        {**env, "LAGPILOT_HANDLER_CONFIG": json.dumps({"sleep_ms": "0", "attempts_table": attempts})},
    )
    wait_until(
        lambda: sum(committed(kafka_bootstrap, group, topic, 3).values()) == total,
        240,
        f"all {total} committed\n{second.tail()}",
        interval=1.0,
    )
    rows = sql(postgres_dsn, f'SELECT count(*), count(DISTINCT (partition, "offset")) FROM "{table}"')[0]
    assert rows == (total, total)
    values = {bytes(v) for (v,) in sql(postgres_dsn, f'SELECT value FROM "{table}"')}
    assert values == {b"record-%d" % i for i in range(total)}
    # the batch in flight at the kill was really processed twice, yet stored once
    replayed = sql(
        postgres_dsn, f'SELECT count(*) - count(DISTINCT (partition, "offset")) FROM "{attempts}"'
    )[0][0]
    assert replayed >= written - done > 0
    second.signal(signal.SIGTERM)
    assert second.wait(90) == 0


@contextlib.contextmanager
def producing(
    bootstrap: str, topic: str, step: int, pause_s: float, keyed: bool = False
) -> Iterator[dict[str, int]]:
    """Produce `step` records ("r-<i>", keyed "k<i>" if `keyed`) every `pause_s` from a thread until
    the block ends; yields {"n": records produced so far}."""
    stop = threading.Event()
    produced = {"n": 0}

    def producer() -> None:
        i = 0
        while not stop.is_set():
            produce(
                bootstrap,
                topic,
                [b"r-%d" % (i + j) for j in range(step)],
                keys=[b"k%d" % (i + j) for j in range(step)] if keyed else None,
            )
            i += step
            produced["n"] = i
            time.sleep(pause_s)

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    try:
        yield produced
    finally:
        stop.set()
        t.join(60)


def test_sigterm_mid_stream_clean_exit_commits_exactly_what_was_processed(
    kafka_bootstrap, postgres_dsn, new_topic, consumers
):
    topic = new_topic(partitions=3)
    group, table, attempts = f"g-{uid()}", f"term_{uid()}", f"term_att_{uid()}"
    with producing(kafka_bootstrap, topic, step=100, pause_s=0.05) as produced:
        c = consumers(
            "term-0",
            {
                **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
                "LAGPILOT_HANDLER": "tests.handlers:counting",
                "LAGPILOT_BATCH_MAX_RECORDS": "100",
                "LAGPILOT_HANDLER_CONFIG": json.dumps({"sleep_ms": "300", "attempts_table": attempts}),
            },
        )
        wait_until(
            lambda: row_count(postgres_dsn, attempts) >= 1000, 180, f"1000 records processed\n{c.tail()}"
        )
        c.signal(signal.SIGTERM)
        assert c.wait(90) == 0, c.tail()
    assert c.events("stopped") and c.events("stopped")[0]["exit_code"] == 0
    offsets = committed(kafka_bootstrap, group, topic, 3)
    processed = sql(
        postgres_dsn,
        f'SELECT partition, count(*), count(DISTINCT "offset"), max("offset") FROM "{attempts}" GROUP BY partition',
    )
    assert processed, "nothing processed"
    for partition, count, distinct, highest in processed:
        assert count == distinct  # processed once each
        assert offsets.get(partition) == highest + 1 == count  # committed == processed, contiguous from 0
    assert sum(offsets.values()) == row_count(postgres_dsn, table) < produced["n"]


def test_failing_records_retried_then_dead_lettered_rest_processed(
    kafka_bootstrap, postgres_dsn, kafka_admin, new_topic, consumers
):
    topic = new_topic(partitions=3)
    group, table = f"g-{uid()}", f"dlq_{uid()}"
    total = 1200
    # failing records never sit next to each other nor at the very end, so every batch holds good ones
    fail_at = {i for i in range(30, total - 100, 37)}
    values = [b"FAIL-%d" % i if i in fail_at else b"good-%d" % i for i in range(total)]
    produce(kafka_bootstrap, topic, values, keys=[b"k%d" % i for i in range(total)])
    c = consumers(
        "dlq-0",
        {
            **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
            "LAGPILOT_HANDLER": "tests.handlers:fail_marked",
            "LAGPILOT_BATCH_MAX_RECORDS": "150",
            "LAGPILOT_MAX_RETRIES": "2",
        },
    )
    try:
        wait_until(
            lambda: sum(committed(kafka_bootstrap, group, topic, 3).values()) == total,
            300,
            f"all committed\n{c.tail()}",
            interval=1.0,
        )
        dead = read_all(kafka_bootstrap, f"{topic}.dlq", expect=len(fail_at))
        assert sorted(m.value() for m in dead) == sorted(values[i] for i in fail_at)
        source = set()
        for m in dead:
            h = dict(m.headers())
            assert b"value contains FAIL" in h["lagpilot.error"]
            assert h["lagpilot.source.topic"] == topic.encode()
            source.add((int(h["lagpilot.source.partition"]), int(h["lagpilot.source.offset"])))
        assert len(source) == len(fail_at)
        stored = {bytes(v) for (v,) in sql(postgres_dsn, f'SELECT value FROM "{table}"')}
        assert stored == {values[i] for i in range(total) if i not in fail_at}
        # retried before giving up: each dead record saw its retries, logged with the attempt number
        assert max(e["attempt"] for e in c.events("handler_error")) == 2
        failed = c.events("record_failed")
        assert {(e["partition"], e["offset"]) for e in failed} == source
        assert c.alive()
    finally:
        drop_topic(kafka_admin, f"{topic}.dlq")


def test_poison_record_structured_error_and_dead_lettered(
    kafka_bootstrap, postgres_dsn, kafka_admin, new_topic, consumers
):
    topic = new_topic(partitions=1)
    group, table = f"g-{uid()}", f"poison_{uid()}"
    poison = b"\xff\xfe\x00 not utf-8 {"
    values = [json.dumps({"n": i}).encode() for i in range(300)]
    values.insert(137, poison)
    produce(kafka_bootstrap, topic, values, partition=0)
    c = consumers(
        "poison-0",
        {
            **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
            "LAGPILOT_HANDLER": "tests.handlers:json_postgres",
            "LAGPILOT_BATCH_MAX_RECORDS": "100",
        },
    )
    try:
        wait_until(
            lambda: committed(kafka_bootstrap, group, topic, 1).get(0) == len(values),
            240,
            f"all committed\n{c.tail()}",
            interval=1.0,
        )
        failed = c.events("record_failed")
        assert len(failed) == 1
        err = failed[0]
        assert (err["topic"], err["partition"], err["offset"]) == (topic, 0, 137)
        assert err["level"] == "ERROR" and "UnicodeDecodeError" in err["error"]
        dead = read_all(kafka_bootstrap, f"{topic}.dlq", expect=1)
        assert [m.value() for m in dead] == [poison]
        h = dict(dead[0].headers())
        assert (h["lagpilot.source.partition"], h["lagpilot.source.offset"]) == (b"0", b"137")
        assert b"UnicodeDecodeError" in h["lagpilot.error"]
        assert row_count(postgres_dsn, table) == len(values) - 1
        # the loop is alive and reports it
        port = c.metrics_port()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "lagpilot_consumer_dlq_records_total 1.0" in body
        assert f'lagpilot_consumer_committed_offset{{partition="0",topic="{topic}"}} {len(values)}.0' in body
        assert "lagpilot_consumer_capacity_records_per_second" in body
        assert (
            json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10).read())["ok"]
            is True
        )
        ready = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10).read())
        assert ready["ok"] is True and ready["assigned_partitions"] == 1
        meta = committed_with_metadata(kafka_bootstrap, group, topic, 1)[0][1]
        assert meta.startswith("lp1;cap=") and ";ts=" in meta
        assert float(meta.split("cap=")[1].split(";")[0]) > 0
        c.signal(signal.SIGTERM)
        assert c.wait(90) == 0
    finally:
        drop_topic(kafka_admin, f"{topic}.dlq")


def test_two_consumers_third_joins_and_leaves_nothing_lost_or_duplicated(
    kafka_bootstrap, postgres_dsn, new_topic, consumers
):
    topic = new_topic(partitions=6)
    group, table, attempts = f"g-{uid()}", f"reb_{uid()}", f"reb_att_{uid()}"
    env = {
        **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
        "LAGPILOT_HANDLER": "tests.handlers:counting",
        "LAGPILOT_BATCH_MAX_RECORDS": "100",
        "LAGPILOT_BATCH_TIMEOUT_MS": "200",
        "LAGPILOT_HANDLER_CONFIG": json.dumps({"sleep_ms": "50", "attempts_table": attempts}),
    }
    with producing(kafka_bootstrap, topic, step=60, pause_s=0.1, keyed=True) as produced:
        a, b = consumers("reb-0", env), consumers("reb-1", env)
        wait_until(
            lambda: a.events("assigned") and b.events("assigned") and row_count(postgres_dsn, table) > 500,
            180,
            f"two consumers running\n{a.tail()}\n{b.tail()}",
        )
        c = consumers("reb-2", env)
        wait_until(
            lambda: any(e["partitions"] for e in c.events("assigned")),
            180,
            f"third consumer assigned\n{c.tail()}",
        )
        wait_until(
            lambda: sql(postgres_dsn, f"SELECT count(*) FROM \"{attempts}\" WHERE pod = 'reb-2'")[0][0] > 100,
            180,
            f"third consumer processing\n{c.tail()}",
        )
        c.signal(signal.SIGTERM)
        assert c.wait(90) == 0, c.tail()
        # its partitions go back to the two others once its static membership expires
        wait_until(
            lambda: len(owned_now(a) | owned_now(b)) == 6,
            120,
            f"partitions back with the first two\n{a.tail()}\n{b.tail()}",
        )
        time.sleep(2)
    total = produced["n"]
    wait_until(
        lambda: sum(committed(kafka_bootstrap, group, topic, 6).values()) == total,
        240,
        f"all {total} committed\n{a.tail()}\n{b.tail()}",
        interval=1.0,
    )
    assert a.alive() and b.alive()
    rows = sql(postgres_dsn, f'SELECT count(*), count(DISTINCT (partition, "offset")) FROM "{table}"')[0]
    assert rows == (total, total)  # nothing lost
    att = sql(
        postgres_dsn,
        f'SELECT count(*), count(DISTINCT (partition, "offset")), count(DISTINCT pod) FROM "{attempts}"',
    )[0]
    assert att[1] == total and att[2] == 3
    assert att[0] == total, f"{att[0] - total} records were processed twice across the rebalances"
    revokes = [e for e in a.events("revoked") + b.events("revoked") if e["partitions"]]
    assert revokes, "the third consumer's arrival revoked partitions from the first two"


def test_sigterm_during_a_handler_longer_than_the_grace_period_exits_without_committing(
    kafka_bootstrap, postgres_dsn, new_topic, consumers
):
    topic = new_topic(partitions=1)
    group, table = f"g-{uid()}", f"grace_{uid()}"
    produce(kafka_bootstrap, topic, [b"r-%d" % i for i in range(50)])
    c = consumers(
        "grace-0",
        {
            **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
            "LAGPILOT_HANDLER": "tests.handlers:slow_postgres",
            "LAGPILOT_SHUTDOWN_GRACE_MS": "2000",
            "LAGPILOT_HANDLER_CONFIG": json.dumps({"sleep_ms": "120000"}),
        },
    )
    wait_until(lambda: c.events("batch_written"), 120, f"a batch written\n{c.tail()}")
    c.signal(signal.SIGTERM)
    assert c.wait(60) == 1  # the watchdog ended it long before the handler's 120 s
    assert c.events("grace_expired")
    assert row_count(postgres_dsn, table) == 50
    assert committed(kafka_bootstrap, group, topic, 1) == {}  # written but never committed: replayed later


def test_pause_policy_stops_only_the_failing_partition_and_reports_it(
    kafka_bootstrap, postgres_dsn, new_topic, consumers
):
    topic = new_topic(partitions=2)
    group, table = f"g-{uid()}", f"pause_{uid()}"
    produce(kafka_bootstrap, topic, [b"FAIL" if i == 10 else b"p0-%d" % i for i in range(40)], partition=0)
    produce(kafka_bootstrap, topic, [b"p1-%d" % i for i in range(40)], partition=1)
    env = {
        **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
        "LAGPILOT_HANDLER": "tests.handlers:fail_marked",
        "LAGPILOT_FAILURE_POLICY": "pause",
        "LAGPILOT_MAX_RETRIES": "1",
        "LAGPILOT_BATCH_MAX_RECORDS": "15",
    }
    c = consumers("pause-0", env)
    wait_until(
        lambda: committed(kafka_bootstrap, group, topic, 2) == {0: 10, 1: 40},
        180,
        f"p0 committed up to its failure, p1 fully\n{c.tail()}",
        interval=1.0,
    )
    paused = c.events("partitions_paused")
    assert [e["partitions"] for e in paused] == [[f"{topic}/0"]]
    port = c.metrics_port()
    ready = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10).read())
    assert ready["paused_partitions"] == [f"{topic}/0"]
    assert (
        "lagpilot_consumer_paused_partitions 1.0"
        in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    )
    # p0 records after the failing record's batch (at most 15 records, so offsets < 25) never reach the sink
    assert max(o for (o,) in sql(postgres_dsn, f'SELECT "offset" FROM "{table}" WHERE partition = 0')) < 25
    c.signal(signal.SIGTERM)
    assert c.wait(90) == 0
    assert committed(kafka_bootstrap, group, topic, 2) == {0: 10, 1: 40}
