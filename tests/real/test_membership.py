"""Group membership on the real broker: a member that joins and stops during a rebalance must not
fence the member that keeps working (docs/consumer.md "Why not static membership").

The runtime's own client configuration (`ConsumerConfig.consumer_conf`, pod names set as the
Deployment sets them): member A consumes slowly and commits synchronously after each batch, as the
loop does; member B joins (a cooperative rebalance starts) and closes before it gets partitions, as
a pod of a scale-up does when the group is scaled down again at once. With static membership
(`group.instance.id` = pod name) B's close did not leave the group: the rebalance waited for B's
session timeout, A's commit blocked meanwhile and came back ILLEGAL_GENERATION (its batch replayed
by the next owner). The check is on outcomes, never on durations: every commit of A succeeds, and
B's close left the group (the broker lists only A once the rebalance settles).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot_runtime.config import ConsumerConfig
from tests.fixtures.kube import wait_until

pytestmark = [pytest.mark.real]


def conf(bootstrap: str, topic: str, group: str, pod: str) -> dict[str, Any]:
    env = {
        "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap,
        "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group,
        "LAGPILOT_SINK": "log",
        "LAGPILOT_POD_NAME": pod,
    }
    return ConsumerConfig.from_env(env).consumer_conf()


def test_a_member_stopping_mid_rebalance_does_not_fence_the_committing_member(
    kafka_bootstrap: str, new_topic: Callable[..., str], kafka_admin: Any
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic(partitions=3, prefix="membership")
    group = "g-" + uuid.uuid4().hex[:6]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(6000):
        producer.produce(topic, b"x", partition=i % 3)
    assert producer.flush(30) == 0

    a = Consumer(conf(kafka_bootstrap, topic, group, "pod-a"))
    a.subscribe([topic])
    wait_until(
        lambda: a.consume(50, 0.5) is not None and len(a.assignment()) == 3,
        "member A owning every partition",
        60,
    )
    b_closed = threading.Event()

    def member_b() -> None:
        b = Consumer(conf(kafka_bootstrap, topic, group, "pod-b"))
        b.subscribe([topic])
        until = time.monotonic() + 2.5  # joins; the rebalance is under way; closes before it settles
        while time.monotonic() < until:
            b.consume(50, 0.2)
        b.close()
        b_closed.set()

    outcomes: list[str] = []
    thread = threading.Thread(target=member_b)
    thread.start()
    after_close = 0
    try:
        while after_close < 20:  # A's batches until well after B closed
            msgs = [m for m in a.consume(50, 0.5) if m.error() is None]
            if b_closed.is_set():
                after_close += 1
            if not msgs:
                continue
            time.sleep(0.3)  # the handler's work: the rebalance overlaps A's batches
            last: dict[int, int] = {}
            for m in msgs:
                last[m.partition()] = m.offset() + 1
            try:
                a.commit(offsets=[TopicPartition(topic, p, o) for p, o in last.items()], asynchronous=False)
                outcomes.append("ok")
            except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
                outcomes.append(str(exc))
        thread.join(30)
        assert b_closed.is_set(), (
            "member B never closed: the fault (a member stopping mid-rebalance) did not happen"
        )

        def members() -> int:
            desc = kafka_admin.describe_consumer_groups([group])[group].result(timeout=10)
            return len(desc.members)

        wait_until(lambda: members() == 1, "the group down to member A", 60)
    finally:
        a.close()
    failed = [o for o in outcomes if o != "ok"]
    print(f"member A: {len(outcomes)} commits, {len(failed)} refused")
    assert outcomes and not failed, failed
