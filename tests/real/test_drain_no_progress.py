"""H3 through the operator, the no-progress detector: a drain attempt whose handler hangs (every
task's first call never returns: a sink that stopped answering) records no progress; the operator
notices within its limit, reports it and retries, and the retry finishes. Real stack of
tests/real/test_drain_operator.py (operator subprocess as the docs/rbac.md ServiceAccount,
kube-apiserver + controller-manager + the pods where `pods` runs them: the real node; Kafka, Spark local mode, PostgreSQL ledger). The sink's outage is a
row in a PostgreSQL table (`HANG_DDL`), not a file: the test and the drain's pods share the
database, where a file of the test's would not reach a container.

The window counts from the attempt's first sign of life (each task commits its progress group with
the attempt's number before its handler's first call), not from its launch: operator env
LAGPILOT_DRAIN_STALL_SECONDS=60, far below a cold attempt's start-up under load, and
LAGPILOT_DRAIN_STARTUP_SECONDS=900 (the start-up's own bound: not reached here). Before the sign of
life the window counted from the launch: 150 s stalled attempts under load before their first task
ran, so the test used 240 s and waited them out (569 s; now 352 s, docs/drain.md). The handler's own deadline,
max.poll.interval.ms, stays at its 300 s default: the detector, not the task deadline, ends the attempt.

Proven: the fault fired (drain calls hung — their rows — and no drain row is in the ledger while
attempt 1 runs); every sub-range's progress group carries attempt 1's sign of life at the offset it
had (nothing committed beyond what is processed); the operator sets DrainStalled=True/NoProgress
counted from the tasks' start, posts the Warning event DrainStalled naming attempt 1, deletes attempt
1's Job and schedules attempt 2; with the sink back (the outage row deleted) the drain reaches Verified
at attempt >= 2 with DrainStalled back to False (no longer listed), and the ledger holds every offset once (the hung
calls wrote nothing).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot_runtime.drain.plan import (
    owner_tag,
    parse_progress_attempt,
    parse_progress_metadata,
    progress_group,
)
from tests.fixtures.kube import wait_until
from tests.real.drain_handlers import HANG_DDL
from tests.real.test_drain_operator import PARTS, Scenario, crd, finish_and_check, scenario  # noqa: F401
from tests.real.test_operator_e2e import condition, events_for, get_cr

pytestmark = [pytest.mark.real, pytest.mark.slow]


def sub_range_progress(
    admin: Any, group: str, topic: str, uid: str, subs: list[dict[str, Any]]
) -> list[tuple[int, str | None]]:
    """(committed offset, metadata) of each sub-range's progress group (-1, None: none committed)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    out = []
    for sub in subs:
        g = progress_group(group, "1", int(sub["index"]), owner_tag(uid))
        res = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, int(sub["partition"]))])]
        )[g].result(timeout=30)
        tp = res.topic_partitions[0]
        out.append(
            (int(tp.offset), getattr(tp, "metadata", None))
            if tp.offset is not None and tp.offset >= 0
            else (-1, None)
        )
    return out


def test_a_drain_without_progress_is_stalled_reported_and_retried(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str
) -> None:
    import psycopg
    from kubernetes import client

    # the sink's outage: a 'down' row (the drain's calls hang while it exists), each hung call a 'hung' row
    hang_table = "hang_" + uuid.uuid4().hex[:8]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(HANG_DDL.format(table=hang_table))
        conn.execute(f"INSERT INTO {hang_table} (kind) VALUES ('down')")
    s = scenario(
        {p: 8000 for p in range(PARTS)},
        live_per_s=0,
        sla_s=20,
        operator_env={"LAGPILOT_DRAIN_STALL_SECONDS": "60", "LAGPILOT_DRAIN_STARTUP_SECONDS": "900"},
        handler="tests.real.drain_handlers:ledger_drain_hangs_while_marked",
        handler_config={"hang_table": hang_table},
    )
    batch = client.BatchV1Api(s.custom.api_client)
    job = wait_until(
        lambda: next(
            iter(batch.list_namespaced_job(s.ns, label_selector="lagpilot.io/drain-job").items), None
        ),
        "the drain Job of attempt 1",
        600,
        interval=1,
    )
    name = job.metadata.name
    assert name.endswith("-1"), name

    def stalled() -> Any:
        c = condition(get_cr(s.custom, s.ns, s.name), "DrainStalled")
        return c if c is not None and c.get("status") == "True" else None

    c = wait_until(stalled, "DrainStalled=True", 600, interval=1)
    # the fault fired: drain calls hung, and none wrote a row
    with psycopg.connect(postgres_dsn) as conn:
        hung = conn.execute(
            f"SELECT pid, partition, \"offset\" FROM {hang_table} WHERE kind = 'hung'"
        ).fetchall()
        drained = conn.execute(f"SELECT count(*) FROM {s.table} WHERE source = 'drain'").fetchone()[0]
    assert hung, "no drain call hung: the fault did not fire"
    assert drained == 0, f"{drained} drain rows written while the sink hung"
    # each task's sign of life: attempt 1's number on its sub-range's progress, at its start (nothing moved)
    uid = get_cr(s.custom, s.ns, s.name)["metadata"]["uid"]
    subs = s.drain()["subRanges"]
    signs = sub_range_progress(kafka_admin, s.group, s.topic, uid, subs)
    assert all(
        o in (-1, sub["start"]) and parse_progress_metadata(m) == 0
        for sub, (o, m) in zip(subs, signs, strict=True)
    ), signs
    started = [m for _, m in signs if parse_progress_attempt(m) == 1]
    assert started, f"no task of attempt 1 left its sign of life: {signs}"
    assert c["reason"] == "NoProgress" and "since the attempt's tasks started" in c["message"], c
    d = s.drain()
    assert d.get("stalled") == "NoProgress" and d["attempt"] == 1 and d.get("retryAt"), d
    ev = [e for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainStalled"]
    assert ev and ev[0].type == "Warning" and "attempt 1 stalled" in ev[0].message, [e.message for e in ev]
    wait_until(
        lambda: not [j for j in batch.list_namespaced_job(s.ns).items if j.metadata.name == name],
        "attempt 1's Job deleted",
        120,
        interval=1,
    )

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # the sink answers again
        conn.execute(f"DELETE FROM {hang_table} WHERE kind = 'down'")
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d["attempt"] >= 2, d
    c = condition(get_cr(s.custom, s.ns, s.name), "DrainStalled")
    assert c is None, c  # back to False: no longer listed (abnormal-true)
    print(
        f"stalled without progress ({len(hung)} hung calls, {len(started)} of {len(subs)} sub-ranges signed by "
        f"attempt 1): {ev[0].message}; verified at attempt {d['attempt']}"
    )
