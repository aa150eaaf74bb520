"""kafka_observe.has_commits (the start-up adoption's cheap "nothing to adopt") and its use by
handlers.adopt_remainder: False only when the snapshot, read after the call, shows no commit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lagpilot import handlers
from lagpilot.act import deletion_io
from lagpilot.observe import kafka_observe
from lagpilot.observe.cluster_view import TopicWatermarks
from lagpilot.observe.offsets_snapshot import offsets_partition_for
from lagpilot.reconcile import delete


class Snap:
    def __init__(
        self, commits: list[tuple[int, int | None, str | None]] | None, healthy: bool = True
    ) -> None:
        self.commits, self.healthy, self.asked = commits, healthy, []

    def group_partition(self, group: str) -> int:
        return offsets_partition_for(group, 4)

    def committed(self, group: str, topic: str, parts: list[int], end: int, wait: float) -> Any:
        self.asked.append((group, topic, tuple(parts), end))
        return self.commits


class Observer:
    def __init__(self, ends: dict[int, int], error: BaseException | None = None) -> None:
        self.ends, self.error, self.calls = ends, error, []

    def view(self, topic: str, group: str | None, not_before: float, timeout: float) -> Any:
        self.calls.append((topic, group, not_before))
        if self.error:
            raise self.error
        wm = TopicWatermarks((0, 1), {0: 0, 1: 0}, {0: 5, 1: 5}, self.ends)
        return SimpleNamespace(topic=lambda t: wm)


def _adopt(ref: Any, spec: Any, status: Any, memo: Any, emit: Any) -> Any:
    return delete.adopt_remainder(
        ref, spec, status, memo.kube, memo.admin_pool, memo.config.kafka_timeout_seconds, emit
    )


def handle(snap: Snap | None, observer: Observer) -> Any:
    return SimpleNamespace(offsets_snapshot=lambda: snap, observer=observer)


G = "g.lagpilot-remainder"
ENDS = {p: 100 + p for p in range(4)}


@pytest.mark.parametrize(
    "name, snap, observer, want",
    [
        ("no commit at all", Snap([(0, None, None), (1, None, None)]), Observer(ENDS), False),
        (
            "a commit on one partition",
            Snap([(0, None, None), (1, 7, "lpr1;d=3;r=5-9")]),
            Observer(ENDS),
            True,
        ),
        ("snapshot disabled", None, Observer(ENDS), None),
        (
            "snapshot unhealthy (no permission on __consumer_offsets)",
            Snap([], healthy=False),
            Observer(ENDS),
            None,
        ),
        ("snapshot not loaded in time", Snap(None), Observer(ENDS), None),
        ("the view has no __consumer_offsets ends", Snap([(0, None, None)]), Observer({}), None),
        ("the topic's own error", Snap([(0, None, None)]), Observer(ENDS, KeyError("gone")), None),
    ],
)
def test_has_commits(name: str, snap: Snap | None, observer: Observer, want: bool | None) -> None:
    assert kafka_observe.has_commits(handle(snap, observer), "t", G, 10.0) is want, name
    if observer.calls:
        topic, group, _not_before = observer.calls[0]
        assert topic == "t" and group is None  # the group is asked once, not registered for every view
    if want is not None:  # as of the end the view read for the group's __consumer_offsets partition
        assert snap.asked == [(G, "t", (0, 1), ENDS[offsets_partition_for(G, 4)])]


SPEC = {"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g", "processing": {"sink": "log"}}


@pytest.mark.parametrize("says, reads", [(False, 0), (None, 1), (True, 1)])
def test_adoption_reads_the_remainder_group_only_when_the_snapshot_cannot_rule_it_out(
    monkeypatch: pytest.MonkeyPatch, says: bool | None, reads: int
) -> None:
    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    monkeypatch.setattr(kafka_observe, "has_commits", lambda h, topic, group, timeout: says)
    read: list[str] = []
    monkeypatch.setattr(deletion_io, "read_remainder", lambda admin, g, t, timeout: read.append(g))
    monkeypatch.setattr(deletion_io, "delete_groups", lambda admin, groups, timeout: [])
    leased: list[str] = []

    class Pool:
        def lease(self, owner: str, conf: Any) -> Any:
            import contextlib

            leased.append(owner)
            return contextlib.nullcontext(SimpleNamespace(safe_admin=lambda timeout: "admin"))

    memo = SimpleNamespace(config=SimpleNamespace(kafka_timeout_seconds=1.0), admin_pool=Pool(), kube=None)
    ref = handlers.GroupRef("ns", "orders", "u", 1)
    assert _adopt(ref, SPEC, {}, memo, lambda *e: None) is None
    assert len(read) == reads and leased == ["ns/orders"]  # the CR's own lease: no handle churn
