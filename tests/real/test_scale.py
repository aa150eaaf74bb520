"""bench/scale.py --quick runs end to end on the real parts (one operator, 20 CRs over 4 topics on
the local Kafka and kube-apiserver): every CR reaches Ready, the JSON line has its shape, and the
Kafka requests per poll interval do not scale with the CRs (one shared view of 2 ListOffsets per
cluster cycle, counted by the operator's own `lagpilot_kafka_requests_total`). No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_bench_scale_quick_reaches_ready_and_reports_its_figures(kafka_bootstrap: str, kube: object) -> None:
    env = dict(os.environ, LAGPILOT_KEEP_STACK="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "scale.py"), "--quick", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # the bench raises unless every CR reached Ready=True; it reports how many it waited for
    assert result["crs"] == 20 and result["topics"] == 4 and result["clusters"] == 1
    for key in (
        "ready_seconds",
        "cycle_p50_s",
        "cycle_p99_s",
        "admin_requests_per_cycle",
        "watermark_requests_per_cycle",
        "offset_fetch_per_cycle",
        "api_requests_per_cycle",
        "views_per_cycle",
        "operator_rss_mb",
        "load_before",
        "load_after",
        "window_s",
    ):
        assert isinstance(result[key], (int, float)), key
    assert result["observe_errors"] == {}
    kinds = result["kafka_requests_by_kind"]
    # the cycles really observed Kafka, and read the commits from the one __consumer_offsets
    # consumer, not with an OffsetFetch per CR (a fallback under load may add a few)
    assert result["cr_cycles"] > 0 and kinds["list_offsets"] > 0
    assert kinds.get("offset_fetch", 0) < result["cr_cycles"] / 2
    # 20 CRs' cycles shared the cluster's views: a view is 2 ListOffsets (the topics' starts with
    # the __consumer_offsets ends, then the topics' ends) for all topics; DescribeTopics only every
    # 30 s. Far fewer views than CR cycles (the cycles are aligned to the poll interval)
    assert kinds["list_offsets"] % 2 == 0 and result["views_per_cycle"] == round(
        kinds["list_offsets"] / 2 / (result["window_s"] / result["poll_interval_s"]), 1
    )
    assert kinds["list_offsets"] / 2 * 4 <= result["cr_cycles"]
    assert kinds.get("describe_topics", 0) <= kinds["list_offsets"] / 2


def test_offsets_snapshot_agrees_with_each_groups_offset_fetch(kafka_bootstrap: str) -> None:
    """Committed offsets (and their metadata) read from `__consumer_offsets` by the one snapshot
    consumer equal what each group's own OffsetFetch returns, including a commit made just before
    the observation and a group that never committed; after warm-up no per-group OffsetFetch is sent."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagpilot.observe import kafka_observe as ko

    run = uuid.uuid4().hex[:6]
    topics = [f"snap-{run}-{i}" for i in range(3)]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        f.result(60)
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": kafka_bootstrap})
    for t in topics:
        for p in range(3):
            for _ in range(6):
                prod.produce(t, b"x", partition=p)
    assert prod.flush(30) == 0
    groups = [(f"snap-{run}-g{i}", topics[i % 3]) for i in range(12)]

    def commit(group: str, topic: str, base: int) -> None:
        c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
        # a different offset per group and partition (partition 1 of even groups: never committed)
        c.commit(
            offsets=[
                TopicPartition(topic, p, (base + p) % 6) for p in range(3) if not (p == 1 and base % 2 == 0)
            ],
            asynchronous=False,
        )
        c.close()

    for i, (g, t) in enumerate(groups):
        commit(g, t, i)
    counted: dict[str, int] = {}
    ko.set_request_counter(lambda kind, n: counted.__setitem__(kind, counted.get(kind, 0) + n))
    pool = ko.AdminPool(snapshot_factory=ko._snapshot_consumer_factory)
    try:
        with pool.lease(
            "bench/snap", {"bootstrap.servers": kafka_bootstrap, "security.protocol": "PLAINTEXT"}
        ) as h:
            ko.observe(h, topics[0], groups[0][0])  # starts the snapshot
            wait = __import__("time").monotonic() + 60
            while (
                not (h.snapshot and h.snapshot.healthy and h.snapshot.loaded)
                and __import__("time").monotonic() < wait
            ):
                __import__("time").sleep(0.2)
            # warmed up: the first load of the (shared dev broker's) __consumer_offsets is done
            assert h.snapshot is not None and h.snapshot.healthy and h.snapshot.loaded, (
                h.snapshot and h.snapshot.failed
            )
            # commit with the runtime's capacity metadata just before observing: must be seen
            c = Consumer(
                {"bootstrap.servers": kafka_bootstrap, "group.id": groups[1][0], "enable.auto.commit": False}
            )
            tp = TopicPartition(groups[1][1], 2, 5, metadata="lp1;cap=42.5;ts=1700000000000")
            c.commit(offsets=[tp], asynchronous=False)
            c.close()
            counted.clear()
            seen = {g: ko.observe(h, t, g) for g, t in groups}
            assert counted.get("offset_fetch", 0) == 0 and counted.get("snapshot_fallback", 0) == 0, counted
            for g, t in groups:
                direct = ko.committed_offsets(h, g, t, [0, 1, 2], 10)
                got = {p.partition: p.committed for p in seen[g].partitions}
                assert got == direct, (g, got, direct)
            assert {p.partition: p.committed for p in seen[groups[2][0]].partitions} == {0: 2, 1: None, 2: 4}
            p2 = seen[groups[1][0]].partitions[2]
            assert p2.committed == 5 and p2.capacity is not None and p2.capacity.records_per_second == 42.5
            # a group never committed: None everywhere, from the snapshot too
            fresh = ko.observe(h, topics[0], f"snap-{run}-never")
            assert [p.committed for p in fresh.partitions] == [None, None, None]
    finally:
        ko.set_request_counter(None)
        pool.release("bench/snap")
        for f in admin.delete_topics(topics).values():
            try:
                f.result(60)
            except Exception:  # noqa: BLE001
                pass


def test_remainder_check_from_the_snapshot_sees_a_hand_back(
    kafka_bootstrap: str, kafka_admin: object, new_topic: object
) -> None:
    """The start-up adoption's cheap check (kafka_observe.has_commits) on the real broker: False for
    a group that never committed, True right after a finalizer's hand-back wrote the remainder (a
    view read after the call sees it), False again once the remainder group is deleted (tombstones)."""
    import time
    import uuid

    from lagpilot.act import deletion_io
    from lagpilot.decide.deletion import Remainder, remainder_group
    from lagpilot.observe import kafka_observe as ko

    topic = new_topic(partitions=3, prefix="remainder-check")  # type: ignore[operator]
    group = "g-" + uuid.uuid4().hex[:6]
    conf = {"bootstrap.servers": kafka_bootstrap, "security.protocol": "PLAINTEXT"}
    pool = ko.AdminPool(snapshot_factory=ko._snapshot_consumer_factory)
    try:
        with pool.lease("bench/remainder-check", conf) as h:
            h.offsets_snapshot()
            deadline = time.monotonic() + 60
            while not (h.snapshot and h.snapshot.loaded) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert h.snapshot is not None and h.snapshot.loaded, h.snapshot and h.snapshot.failed
            assert ko.has_commits(h, topic, remainder_group(group), 10) is False
            deletion_io.write_remainder(
                {"bootstrap.servers": kafka_bootstrap},
                kafka_admin,
                group,
                topic,
                Remainder(3, ((1, 5, 10),)),
                30,
            )
            assert deletion_io.read_remainder(kafka_admin, group, topic, 30) is not None  # really written
            assert ko.has_commits(h, topic, remainder_group(group), 10) is True
            assert deletion_io.delete_groups(kafka_admin, [remainder_group(group)], 30) == []
            assert ko.has_commits(h, topic, remainder_group(group), 10) is False
    finally:
        pool.release("bench/remainder-check")
