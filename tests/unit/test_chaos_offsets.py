"""The chaos bench reads committed offsets (the hand-off mailbox, the eos group, the remainder group)
without ``AdminClient.list_consumer_group_offsets``.

Full campaign, 2026-11-27 (session 16, round 2): `delete_while_planned` reported not fired — "timed
out after 180 s waiting for every owner acked and moved to its split (last error TimeoutError())" —
while both eos owners had acked drain 15 and moved to its split 0.1 s after the operator's crash
(their `handoff_ack` lines; the finalizer then handed the 23,234 records back and the re-created CR
adopted them). The bench's long-lived AdminClient answered none of its OffsetFetch calls
(`list_consumer_group_offsets(...).result(30)` timed out on every poll) while a new AdminClient on
the same broker answered the same read in 0.05 s. The operator never uses that call
(lagpilot.observe.kafka_admin: librdkafka 2.16.0's admin OffsetFetch mishandles a coordinator error
answer); it reads through a Consumer of the group that never subscribes. The bench now does too.

The simulated world of tests/unit/test_chaos_review.py stands for the API server and the operator; the
Kafka edge is a fake AdminClient whose OffsetFetch never answers (as the bench's did) and a fake
Consumer that answers ``committed()`` from the world."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pytest

from bench.chaos.review import ReviewFaults
from lagpilot.decide.deletion import encode_remainder, remainder_group
from lagpilot_runtime import handoff_mailbox as mbx
from tests.unit.test_chaos_review import ACKS, SPLITS, Sim, World, world  # noqa: F401 - world: the fixture


class HungFuture:
    def result(self, timeout: float | None = None) -> Any:
        raise concurrent.futures.TimeoutError()


class HungAdmin:
    """An AdminClient whose OffsetFetch never answers (the bench's, round 2 of the campaign)."""

    def __init__(self) -> None:
        self.offset_fetches = 0

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Any]:
        self.offset_fetches += 1
        return {r.group_id: HungFuture() for r in requests}

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        parts = dict.fromkeys(SPLITS)
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=parts)})


class GroupReaders:
    """confluent_kafka.Consumer as a reader of one group's commits, answered from the world: the
    mailbox holds the owners' acks of the published drain once the operator died at Publish:status,
    the eos group stands at the splits then, the remainder group holds the world's remainder."""

    def __init__(self, w: World, groups: dict[str, str]) -> None:
        self.w, self.groups, self.reads, self.subscribed = w, groups, 0, False

    def __call__(self, conf: dict[str, Any], **_: Any) -> Any:
        readers = self

        class Reader:
            def committed(self, tps: list[Any], timeout: float = -1) -> list[Any]:
                readers.reads += 1
                return [readers.answer(conf["group.id"], tp) for tp in tps]

            def subscribe(self, *a: Any, **k: Any) -> None:
                readers.subscribed = True

            def close(self) -> None:
                pass

        return Reader()

    def answer(self, group: str, tp: Any) -> Any:
        d, p = self.w.drain(), tp.partition
        acked = d.get("phase") == "Planned" and d.get("publishedAt") and not self.w.op_alive
        if group == mbx.mailbox_group(self.groups["eos"]):
            if acked:
                e = mbx.request(int(d["id"]), SPLITS[p]).with_ack(ACKS[p])
                return confluent_kafka.TopicPartition(tp.topic, p, SPLITS[p], metadata=e.encode())
            return confluent_kafka.TopicPartition(tp.topic, p, -1001)
        if group == self.groups["eos"]:
            return confluent_kafka.TopicPartition(tp.topic, p, SPLITS[p] if acked else ACKS[p])
        if group == remainder_group(self.groups["eos"]) and self.w.remainder is not None:
            commits = encode_remainder(self.w.remainder)
            if p in commits:
                off, meta = commits[p]
                return confluent_kafka.TopicPartition(tp.topic, p, off, metadata=meta)
        return confluent_kafka.TopicPartition(tp.topic, p, -1001)


class KafkaSim(Sim):
    """Sim with the bench's own Kafka reads (mailbox, remainder) on the fake clients above."""

    mailbox = ReviewFaults.mailbox
    remainder = ReviewFaults.remainder

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.bootstrap = "127.0.0.1:9"
        self.admin = HungAdmin()


def test_delete_while_planned_sees_the_acks_although_the_admin_clients_offset_fetch_hangs(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:  # the imported fixture
    c = KafkaSim(world)
    readers = GroupReaders(world, c.groups)
    monkeypatch.setattr(confluent_kafka, "Consumer", readers)
    f = c.drain_five(2)
    assert f.fired, f"not fired: {f.detail}"
    assert f.evidence["acks"] == ACKS and f.recovered, f.detail
    assert c.admin.offset_fetches == 0, "the bench asked the AdminClient's OffsetFetch"
    assert readers.reads > 0 and not readers.subscribed  # read through group readers that never join


class MovingCoordinator:
    """A group reader whose first ``committed()`` meets the coordinator moving (librdkafka raises
    COORDINATOR_NOT_AVAILABLE, not retriable by its own flag), then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, conf: dict[str, Any], **_: Any) -> Any:
        reader = self

        class Reader:
            def committed(self, tps: list[Any], timeout: float = -1) -> list[Any]:
                reader.calls += 1
                if reader.calls == 1:
                    raise confluent_kafka.KafkaException(
                        confluent_kafka.KafkaError(confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE)
                    )
                return [confluent_kafka.TopicPartition(tp.topic, tp.partition, 42) for tp in tps]

            def close(self) -> None:
                pass

        return Reader()


def test_the_bench_reads_commits_through_the_runtimes_one_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """One reader of committed offsets (lagpilot_runtime.drain.progress.read_committed): the bench's
    read rides out a coordinator that moves, as the drain's progress reads do."""
    from bench.chaos.stack import CampaignBase
    from lagpilot_runtime.drain import progress as drain_progress

    monkeypatch.setattr(drain_progress, "_BACKOFF_S", (0.0, 0.0))
    readers = MovingCoordinator()
    monkeypatch.setattr(confluent_kafka, "Consumer", readers)
    bench = SimpleNamespace(bootstrap="127.0.0.1:9", topic="chaos")
    got = CampaignBase.committed_offsets(bench, "g", [0, 1])  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in got] == [(0, 42), (1, 42)]
    assert readers.calls == 2  # the moving coordinator was met, and retried
