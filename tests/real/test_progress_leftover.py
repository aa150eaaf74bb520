"""A deleted CR's leftover drain progress is not the re-created CR's (issue 23, with M8).

Operator subprocess + kube-apiserver/controller-manager + the pods where `pods` runs them (the real
node by default) + Kafka + PostgreSQL (the ledger
handler of tests/real/test_drain_operator.py) + the drain Job (Spark).

A CR deleted with `finalizers: null` never runs its finalizer, which deletes the progress groups; a CR
re-created with the same groupId numbers its drains from 1 again. The leftovers are planted the way
such a CR leaves them (the Kafka client, commits to memberless groups): drain 1's progress groups in
the pre-tag form `<groupId>.lagpilot-drain.1.<k>` and in the tagged form of another uid, every
partition far past any offset (a finished old drain). Before the tag the new drain 1 read them as its
own progress, clamped into its sub-ranges, found every sub-range done and ended `Verified` with its
ranges never processed. Now its groups carry its own tag: the exact-once ledger check holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot_runtime.drain import plan as dp
from tests.real.test_drain_operator import PARTS, Scenario, finish_and_check, scenario  # noqa: F401
from tests.real.test_handoff_live import enable_drain
from tests.real.test_operator_e2e import crd  # noqa: F401  (fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]

OLD_UID = "0b6f7c1e-8f3a-4c1d-9e2b-3f4a5b6c7d8e"  # the deleted CR
INDEXES = 64  # sub-range indexes planted (more than any drain of this backlog cuts a partition into)
FAR = 10**12  # the old drain's "next": past every offset


def plant_leftovers(s: Scenario) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    names = [f"{s.group}.lagpilot-drain.1.{k}" for k in range(INDEXES)]
    # the tagged form spelled out (drain_plan.progress_group with owner_tag): this file also ran on the pre-tag code
    tag = hashlib.sha256(OLD_UID.encode()).hexdigest()[:12]
    names += [f"{s.group}.lagpilot-drain.{tag}.1.{k}" for k in range(INDEXES)]
    for g in names:
        c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": g, "enable.auto.commit": False})
        try:
            res = c.commit(
                offsets=[
                    TopicPartition(s.topic, p, FAR, metadata=dp.progress_metadata(FAR)) for p in range(PARTS)
                ],
                asynchronous=False,
            )
            assert not [tp for tp in res if tp.error], res
        finally:
            c.close()
    return names


def test_a_recreated_crs_drain_does_not_take_a_deleted_crs_progress(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    s = scenario({p: 15000 for p in range(PARTS)}, drain_enabled=False)
    names = plant_leftovers(s)
    # the fault is in place: Kafka holds the old drain 1's progress under both names
    g = names[0]
    got = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(g, [TopicPartition(s.topic, p) for p in range(PARTS)])]
    )[g].result(30)
    assert [tp.offset for tp in got.topic_partitions] == [FAR] * PARTS, got
    enable_drain(s)
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert int(d["id"]) == 1 and d["attempt"] == 1, d  # drain 1: the id the leftovers carry
