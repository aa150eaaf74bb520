"""The real single-node Kafka broker: produce/consume, committed offsets cross-checked with Kafka's
own `kafka-consumer-groups --describe`, and durability across a SIGKILL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lagpilot_dev.kafka import parse_consumer_groups_describe
from tests.fixtures.stack import create_topic, private_part, wait_topic_ready

pytestmark = [pytest.mark.real]

N_RECORDS = 10_000
PARTITIONS = 3


def produce(bootstrap: str, topic: str, n: int, tag: str = "r") -> dict[int, int]:
    """Produce n keyed records; return how many the broker acknowledged per partition."""
    from confluent_kafka import Producer

    acked: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()] = acked.get(msg.partition(), 0) + 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=f"k{i}".encode(), value=f"{tag}-{i}".encode(), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0, "records still in flight after 120s"
    assert not errors, errors[:5]
    return acked


def consume_all(bootstrap: str, topic: str, group: str, expected: int, timeout: float = 180.0) -> list[Any]:
    """Consume until `expected` records arrived, committing synchronously; return the messages."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 30000,
        }
    )
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            batch = c.consume(num_messages=1000, timeout=1.0)
            batch = [m for m in batch if m.error() is None]
            if batch:
                got.extend(batch)
                c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def test_10k_records_round_trip_and_offsets_agree_with_kafka_cli(
    kafka_bootstrap: str, kafka_admin: Any, kafka_part: Any, new_topic: Any
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    topic = new_topic(partitions=PARTITIONS)
    acked = produce(kafka_bootstrap, topic, N_RECORDS)
    assert sum(acked.values()) == N_RECORDS
    assert len(acked) == PARTITIONS  # keyed records spread over every partition

    group = f"g-{uuid.uuid4().hex[:8]}"
    msgs = consume_all(kafka_bootstrap, topic, group, N_RECORDS)
    values = {m.value() for m in msgs}
    assert len(msgs) == N_RECORDS
    assert values == {f"r-{i}".encode() for i in range(N_RECORDS)}

    # committed offsets as the AdminClient sees them
    res = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    )[group].result(timeout=60)
    admin_committed = {tp.partition: tp.offset for tp in res.topic_partitions}
    assert admin_committed == {p: acked[p] for p in range(PARTITIONS)}

    # ... and as Kafka's own CLI tool prints them
    proc = kafka_part.consumer_groups(["--describe", "--group", group])
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in parse_consumer_groups_describe(proc.stdout) if r["TOPIC"] == topic]
    assert len(rows) == PARTITIONS, proc.stdout
    cli_committed = {int(r["PARTITION"]): int(r["CURRENT-OFFSET"]) for r in rows}
    cli_end = {int(r["PARTITION"]): int(r["LOG-END-OFFSET"]) for r in rows}
    cli_lag = {int(r["PARTITION"]): int(r["LAG"]) for r in rows}
    assert cli_committed == admin_committed
    assert cli_end == {p: acked[p] for p in range(PARTITIONS)}
    assert cli_lag == {p: 0 for p in range(PARTITIONS)}


@pytest.fixture
def private_kafka(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A second broker with its own state dir (same jar cache): killing it disturbs no other test
    or session sharing the stack's broker."""
    from lagpilot_dev.kafka import KafkaPart

    with private_part(KafkaPart(stack.cache_dir, tmp_path_factory.mktemp("kafka-fault-state"))) as part:
        yield part


@pytest.mark.slow
def test_broker_killed_with_sigkill_restarts_on_same_data_dir(private_kafka: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = private_kafka.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"fault-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic, 2)
    acked = produce(bootstrap, topic, 500, tag="before-kill")
    pid_before = private_kafka.process.pid()
    assert pid_before is not None

    private_kafka.kill()
    assert not private_kafka.is_running()
    private_kafka.start()
    assert private_kafka.is_running()
    assert private_kafka.process.pid() != pid_before
    assert private_kafka.bootstrap_servers() == bootstrap  # same address after the restart
    wait_topic_ready(admin, topic, 2)

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=60)[1] for p in range(2)}
        assert ends == {p: acked.get(p, 0) for p in range(2)}
        c.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got: list[bytes] = []
        deadline = time.monotonic() + 120
        while len(got) < 500 and time.monotonic() < deadline:
            got.extend(m.value() for m in c.consume(500, timeout=1.0) if m.error() is None)
    finally:
        c.close()
    assert sorted(got) == sorted(f"before-kill-{i}".encode() for i in range(500))
