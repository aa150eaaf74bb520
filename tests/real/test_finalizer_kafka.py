"""The finalizer's Kafka edges on the real broker: the remainder group round trip (commit metadata
carries the exact ranges), a hand-back replaces stale content, progress groups listed and deleted."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot.act import deletion_io
from lagpilot.decide.deletion import Remainder, remainder_group

pytestmark = [pytest.mark.real]


def test_remainder_round_trip_and_replace(
    kafka_bootstrap: str, kafka_admin: Any, new_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic(partitions=3, prefix="remainder")
    group = "g-" + uuid.uuid4().hex[:6]
    conf = {"bootstrap.servers": kafka_bootstrap}
    assert deletion_io.read_remainder(kafka_admin, group, topic, 30) is None
    first = Remainder(4, ((0, 100, 200), (0, 300, 350), (2, 7, 9)))
    deletion_io.write_remainder(conf, kafka_admin, group, topic, first, 30)
    assert deletion_io.read_remainder(kafka_admin, group, topic, 30) == first
    # a later hand-back replaces it completely: partition 2's stale range must not survive
    second = Remainder(6, ((1, 5, 10),))
    deletion_io.write_remainder(conf, kafka_admin, group, topic, second, 30)
    assert deletion_io.read_remainder(kafka_admin, group, topic, 30) == second
    assert deletion_io.delete_groups(kafka_admin, [remainder_group(group)], 30) == []
    assert deletion_io.read_remainder(kafka_admin, group, topic, 30) is None
    assert deletion_io.delete_groups(kafka_admin, [remainder_group(group)], 30) == []  # absent: fine

    # progress groups of a deleted CR: listed by prefix, deleted; other groups untouched
    names = [f"{group}.lagpilot-drain.1.0", f"{group}.lagpilot-drain.2.3", f"{group}-other"]
    for g in names:
        c = Consumer({**conf, "group.id": g, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        c.close()
    assert deletion_io.list_progress_groups(kafka_admin, group, 30) == sorted(names[:2])
    assert (
        deletion_io.delete_groups(kafka_admin, deletion_io.list_progress_groups(kafka_admin, group, 30), 30)
        == []
    )
    assert deletion_io.list_progress_groups(kafka_admin, group, 30) == []
    left = {x.group_id for x in kafka_admin.list_consumer_groups().result(30).valid}
    assert f"{group}-other" in left
