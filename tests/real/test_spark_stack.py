"""pyspark (local mode) reads an exact offset range from the real broker through the Kafka connector."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]

PER_PARTITION = 400


@pytest.fixture(scope="module")
def spark(spark_jars: list[str]) -> Iterator[Any]:
    from lagpilot_dev.spark import local_session

    session = local_session("lagpilot-test-spark", spark_jars)
    try:
        yield session
    finally:
        session.stop()


def produce_to_partitions(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """Partition p, offset i holds value "p:i" (a fresh topic, so offsets start at 0)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(
                topic,
                value=f"{part}:{i}".encode(),
                key=str(i).encode(),
                partition=part,
                on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
            )
            p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:5]


# (starting, ending) per partition; -2 = earliest, -1 = latest in the connector's JSON
RANGES = {0: (10, 250), 1: (-2, 100), 2: (399, -1)}


def expected_rows(ranges: dict[int, tuple[int, int]], per_partition: int) -> set[tuple[int, int, str]]:
    rows = set()
    for part, (start, end) in ranges.items():
        lo = 0 if start == -2 else start
        hi = per_partition if end == -1 else end
        rows |= {(part, off, f"{part}:{off}") for off in range(lo, hi)}
    return rows


def test_spark_reads_exactly_the_offset_range(spark: Any, kafka_bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(partitions=3)
    produce_to_partitions(kafka_bootstrap, topic, 3, PER_PARTITION)

    starting = {topic: {str(p): s for p, (s, _e) in RANGES.items()}}
    ending = {topic: {str(p): e for p, (_s, e) in RANGES.items()}}
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .load()
    )
    expected = expected_rows(RANGES, PER_PARTITION)
    assert len(expected) == 240 + 100 + 1

    assert df.count() == len(expected)
    rows = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS v").collect()
    got = {(r["partition"], r["offset"], r["v"]) for r in rows}
    assert len(rows) == len(got)  # no duplicates
    assert got == expected
