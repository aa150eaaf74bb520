"""The capacity a real consumer commits in its metadata vs the throughput it really had (docs/consumer.md
"Capacity report", docs/decision.md "Capacity per replica").

A `lagpilot consume` subprocess with the demo's handler (50 ms per call + 18 ms per record, then the
PostgreSQL sink and the delivery ledger in one transaction; maxRecords 50, batchTimeout 1 s) works
through a backlog of 1,200 records on one partition: 24 full batches. Its throughput is measured from
the ledger as the demo measures it (`demo_measure.capacity`: records of each full batch over the time
since the worker's previous batch, median), so it counts everything a saturated consumer pays: the
poll, the batch's assembly and the commit as well as the handler. The busy-time capacity in the
committed metadata (`lp1;cap=`) must be within 15 % of it. No assertion on how long anything takes.
"""

from __future__ import annotations

import json
import signal

import pytest

from lagpilot_dev.demo import measure as demo_measure
from tests.real.test_consumer_runtime import (
    base_env,
    committed,
    committed_with_metadata,
    consumers,  # noqa: F401 - the fixture
    produce,
    sql,
    uid,
    wait_until,
)

pytestmark = [pytest.mark.real, pytest.mark.slow]

RECORDS, MAX = 1200, 50


def test_committed_capacity_matches_the_ledgers_full_batch_throughput(
    kafka_bootstrap, postgres_dsn, new_topic, consumers
):
    topic = new_topic(partitions=1)
    group, table, ledger = f"g-{uid()}", f"cap_{uid()}", f"cap_ledger_{uid()}"
    produce(kafka_bootstrap, topic, [json.dumps({"n": i}).encode() for i in range(RECORDS)], partition=0)
    env = {
        **base_env(kafka_bootstrap, topic, group, postgres_dsn, table),
        "LAGPILOT_HANDLER": "lagpilot_dev.demo.handler:process",
        "LAGPILOT_HANDLER_CONFIG": json.dumps(
            {"recordDelayMs": "18", "batchDelayMs": "50", "postgres.table": table, "ledgerTable": ledger}
        ),
        "DEMO_POSTGRES_DSN": postgres_dsn,
        "LAGPILOT_BATCH_MAX_RECORDS": str(MAX),
        "LAGPILOT_BATCH_TIMEOUT_MS": "1000",
    }
    c = consumers("capacity-0", env)
    wait_until(
        lambda: committed(kafka_bootstrap, group, topic, 1).get(0) == RECORDS,
        600,
        f"all {RECORDS} committed\n{c.tail()}",
        interval=1.0,
    )
    meta = committed_with_metadata(kafka_bootstrap, group, topic, 1)[0][1]
    assert meta.startswith("lp1;cap="), meta
    reported = float(meta.split("cap=")[1].split(";")[0])

    rows = sql(
        postgres_dsn,
        f'SELECT worker, extract(epoch FROM delivered_at), count(*) FROM "{ledger}" '
        f"GROUP BY worker, delivered_at ORDER BY delivered_at",
    )
    batches = [demo_measure.Batch(worker=w, source="consumer", t=float(t), n=int(n)) for w, t, n in rows]
    # the precondition: the consumer was saturated (full batches from a backlog), each delivered once
    assert sum(b.n for b in batches) == RECORDS
    assert sum(1 for b in batches if b.n == MAX) >= RECORDS // MAX - 1, [b.n for b in batches]
    measured = demo_measure.capacity(batches, "consumer", MAX)
    assert measured is not None
    print(f"committed capacity {reported:.2f}/s, ledger full-batch throughput {measured:.2f}/s")
    assert reported == pytest.approx(measured, rel=0.15), f"committed {reported:.1f}/s vs {measured:.1f}/s"
    c.signal(signal.SIGTERM)
    assert c.wait(90) == 0
