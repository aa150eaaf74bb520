"""Retention deletes part of a handed-off range before the drain reads it (issue 12 item 2).

The low watermark is moved deterministically with the admin API's ``delete_records`` (what
retention does, without waiting for segment roll and the log cleaner) and asserted moved before
the drain starts. Then:

- ``lagpilot drain`` (a process, exactly as in the Job's pod) exits 0, logs ``drain_data_loss``,
  records the deleted offsets in the sub-range's progress metadata (``lost=1000-1500``) and drains
  the rest; the delivery ledger (no key) shows exactly the deleted offsets missing, nothing twice;
- the operator's side, on the same real Kafka: the executor reads that progress (what it does every
  cycle) and the hand-off machine turns it into a ``DataLoss`` status/condition and a Warning event
  naming the partition and the exact offsets, counted once in lagpilot_drain_records_lost_total.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from lagpilot_runtime.drain.plan import DrainPlan, owner_tag, split_ranges
from tests.real.test_drain_job import PARTS, PER_PARTITION, drain_env, pg_offsets, produce, start_drain

pytestmark = [pytest.mark.real]


def low_watermark(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lw-" + uuid.uuid4().hex[:6]})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[0])
    finally:
        c.close()


def test_retention_deleting_part_of_a_range_is_reported_exactly_and_the_rest_drained(
    kafka_bootstrap: str,
    kafka_admin: Any,
    postgres_dsn: str,
    spark_jars: list[str],
    new_topic: Any,
    tmp_path: Path,
) -> None:
    from confluent_kafka import TopicPartition

    topic = new_topic(partitions=PARTS, prefix="retention")
    produce(kafka_bootstrap, topic, PER_PARTITION)
    ranges = {0: (0, 1000), 1: (1000, 3000)}
    subs = split_ranges(ranges, 2, min_records_per_task=200)  # p1: [1000, 2000) and [2000, 3000)
    cr_uid = str(uuid.uuid4())  # the CR the drain belongs to: its progress groups carry its tag (H2)
    plan = DrainPlan(
        "5", topic, "g-" + uuid.uuid4().hex[:6], subs, 200, 2, owner=owner_tag(cr_uid)
    ).validate()

    # "retention" deletes partition 1 below 1500: half of its first sub-range
    for f in kafka_admin.delete_records([TopicPartition(topic, 1, 1500)]).values():
        f.result(timeout=60)
    assert low_watermark(kafka_bootstrap, topic, 1) == 1500  # the fault fired before the drain reads

    table = "ret_" + uuid.uuid4().hex[:8]
    env = drain_env(
        kafka_bootstrap,
        topic,
        plan.group_id,
        postgres_dsn,
        spark_jars,
        table,
        LAGPILOT_SINK="ledger",
        LAGPILOT_LEDGER_TABLE=table,
    )
    proc = start_drain(plan, env, tmp_path / "s.json", tmp_path / "d.log")
    rc = proc.wait(timeout=300)
    log = (tmp_path / "d.log").read_text(errors="replace")
    assert rc == 0, log[-4000:]
    loss_lines = [json.loads(ln) for ln in log.splitlines() if '"drain_data_loss"' in ln]
    assert loss_lines and loss_lines[0]["lost"] == ["p1[1000, 1500)"] and loss_lines[0]["records"] == 500

    # the ledger: every planned offset except exactly the deleted ones, each once
    from lagpilot_runtime.sinks.ledger import stats

    rep = stats(postgres_dsn, table, ranges)
    deleted = {(1, o) for o in range(1000, 1500)}
    expected = {(p, o) for p, (a, b) in ranges.items() for o in range(a, b)}
    got = pg_offsets(postgres_dsn, table)
    print("retention:", {k: rep[k] for k in ("produced", "delivered", "lost", "duplicated", "outside")})
    assert set(got) == expected - deleted and len(got) == len(set(got))
    assert (rep["lost"], rep["duplicated"], rep["outside"]) == (500, 0, 0), rep
    assert rep["per_partition"][1]["lost_offsets"][:1] == [1000]

    # the operator's side: read the progress like the executor does, then the hand-off machine
    from kubernetes import client as k8s

    from lagpilot.act import drain as drain_mod
    from lagpilot.act.drain import DrainExecutor
    from lagpilot.decide import handoff as h
    from lagpilot.spec import parse_spec

    spec = parse_spec(
        {
            "kafka": {"bootstrapServers": kafka_bootstrap},
            "topic": topic,
            "groupId": plan.group_id,
            "batch": {"maxRecords": 200},
            "drain": {"splitFactor": 2},
        }
    )
    subs_status = tuple(h.SubProgress(s.partition, s.index, s.start, s.end, s.start) for s in subs)
    running = h.DrainStatus(
        id=5,
        phase=h.Phase.RUNNING,
        attempt=1,
        sub_ranges=subs_status,
        ranges=tuple(h.PartitionRange(p, split=b, start=a) for p, (a, b) in ranges.items()),
    )
    ex = DrainExecutor(k8s.ApiClient())
    found: dict = {}
    progress = ex.progress(kafka_admin, spec, running, found, owner=cr_uid)
    assert progress is not None and found == {(1, 0): ((1000, 1500),)}
    observed = h.Observed(
        generation=1,
        offsets=None,
        group_empty=None,
        replicas=1,
        job=h.JobObservation(h.JobState.SUCCEEDED),
        progress=progress,
        lost=found,
    )
    action = h.next_action(spec, running, observed, 1000.0)
    assert action.event is not None and action.event[:2] == ("Warning", "DataLoss")
    assert "partition 1: offsets [1000, 1500)" in action.event[2] and action.lost_records == 500
    cond = h.data_loss_condition(action.status)
    assert cond[0] == "True" and "partition 1: offsets [1000, 1500)" in cond[2]
    # recorded once: the next cycle verifies the drain (the rest was drained), no second DataLoss
    after = h.next_action(spec, action.status, dataclasses.replace(observed), 1001.0)
    assert after.lost_records == 0
    follow = h.next_action(spec, after.status or action.status, observed, 1002.0)
    final = follow.status or after.status
    assert (
        final is not None
        and final.phase in (h.Phase.SUCCEEDED, h.Phase.VERIFIED)
        and final.lost == ((1, 1000, 1500),)
    )
    # the metric the executor increments with the event
    drain_mod._count_lost("ns", "retention-test", action.lost_records)
    from prometheus_client import REGISTRY

    assert (
        REGISTRY.get_sample_value(
            "lagpilot_drain_records_lost_total", {"namespace": "ns", "name": "retention-test"}
        )
        == 500
    )
