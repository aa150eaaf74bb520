"""A cancelled (or stopped, then resumed) drain attempt that keeps writing to an exactly-once sink
after another attempt took its sub-range over must be fenced (issue 23, the open part of 23-dup).

The zombie: a warm drain runtime's Spark task frozen mid-batch (SIGSTOP of its node or process, a
cancel that has not landed yet); its caller gave the attempt up, and the operator's retry (same
drain, next attempt) — or, after the CR was deleted and re-created, the adopted remainder (a new
drain id and owner) — reads the sink's progress and writes the rest. Then the zombie resumes and
writes the batch it held. Kafka-style zombie fencing: every attempt that starts a sub-range claims
it in the sink (an epoch recorded with the sink's progress for the range), and a write from an
older claim is refused inside the sink's transaction.

The whole drain task (``drain_task.run_task``), the driver's catch-up (``catch_up_to_sink``) and for
the adopted case the operator's hand-back and adoption, in one process: the zombie is a thread
whose record iterator blocks mid-batch; the sink an in-memory exactly-once sink that keeps the
contract (``claim``: a new epoch per (scope, topic, partition); a write under an older epoch is
refused, nothing of it stored). Invariant: every offset of the sub-range in the sink exactly once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from lagpilot.act.drain_manifests import drain_plan_for
from lagpilot.decide import deletion
from lagpilot.decide.handoff import DrainStatus, Phase, SubProgress
from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import progress as drain_progress
from lagpilot_runtime.drain import task as drain_task
from lagpilot_runtime.drain.plan import SubRange, owner_tag, progress_group
from lagpilot_runtime.handler import Fenced, Record

ENV = {
    "LAGPILOT_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "LAGPILOT_TOPIC": "orders",
    "LAGPILOT_GROUP_ID": "g",
    "LAGPILOT_HANDLER": "tests.unit.test_drain_fence:sink",
    "LAGPILOT_MAX_RETRIES": "0",
}
START, END, BATCH = 1000, 1600, 100


class Sink:
    """One exactly-once sink (rows and progress in one 'transaction', under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[int] = []
        self.progress: dict[tuple[str, str, int], int] = {}
        self.epochs: dict[tuple[str, str, int], int] = {}
        self.calls: list[tuple[str, int, bool]] = []  # (thread, first offset, refused)


SINK = Sink()


def sink(records: list[Record], ctx: Any) -> None:
    with SINK.lock:
        epoch = getattr(ctx, "epoch", None)
        keys = {(ctx.progress_scope, r.topic, r.partition) for r in records}
        refused = epoch is not None and any(SINK.epochs.get(k, 0) != epoch for k in keys)
        SINK.calls.append((threading.current_thread().name, records[0].offset, refused))
        if refused:
            raise Fenced(f"epoch {epoch} fenced by a later claim")  # the contract's refusal
        SINK.rows.extend(r.offset for r in records)
        for (t, p), o in (ctx.offsets or {}).items():
            k = (ctx.progress_scope, t, p)
            SINK.progress[k] = max(SINK.progress.get(k, o), o)


def _progress(topic: str, partitions: list[int], ctx: Any) -> dict[int, int]:
    with SINK.lock:
        return {
            p: SINK.progress[(ctx.progress_scope, topic, p)]
            for p in partitions
            if (ctx.progress_scope, topic, p) in SINK.progress
        }


def _claim(topic: str, partitions: list[int], ctx: Any) -> dict[int, int]:
    with SINK.lock:
        out = {}
        for p in partitions:
            k = (ctx.progress_scope, topic, p)
            SINK.epochs[k] = out[p] = SINK.epochs.get(k, 0) + 1
        return out


sink.commits_progress = True  # type: ignore[attr-defined]
sink.progress = _progress  # type: ignore[attr-defined]
sink.claim = _claim  # type: ignore[attr-defined]


class FakeProgress:
    """One progress group in Kafka (committed offset + metadata)."""

    def __init__(self) -> None:
        self.offset, self.metadata = -1001, None
        self.lock = threading.Lock()

    def committed(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        with self.lock:
            return [SimpleNamespace(offset=self.offset, metadata=self.metadata)]

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> list[Any]:
        with self.lock:
            self.offset, self.metadata = offsets[0].offset, offsets[0].metadata
        return offsets

    def close(self) -> None:
        pass


def records(a: int, b: int) -> list[Record]:
    return [Record("orders", 1, o, None, b"x") for o in range(a, b)]


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeProgress]:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    SINK.__init__()  # type: ignore[misc]
    by_name: dict[str, FakeProgress] = {}
    lock = threading.Lock()

    def consumer(cfg: Any, group: str) -> FakeProgress:
        with lock:
            return by_name.setdefault(group, FakeProgress())

    monkeypatch.setattr(drain_task, "progress_consumer", consumer)
    monkeypatch.setattr(drain_progress, "progress_consumer", consumer)
    return by_name


class Zombie:
    """Attempt 1's task on a thread: it writes batch 1, buffers half of batch 2 and freezes there
    (its record iterator blocks) until ``resume()``; then it carries on as a resumed process would."""

    def __init__(self, spec: drain_task.TaskSpec) -> None:
        self.frozen, self.go = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(spec,), name="zombie", daemon=True)

    def _items(self) -> Iterator[Record]:
        yield from records(START, START + BATCH + BATCH // 2)
        self.frozen.set()
        self.go.wait(30)
        yield from records(START + BATCH + BATCH // 2, END)

    def _run(self, spec: drain_task.TaskSpec) -> None:
        try:
            list(drain_task.run_task(spec, self._items()))
        except BaseException as exc:  # noqa: BLE001 - a fenced zombie fails its task
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        assert self.frozen.wait(30), "the zombie never reached its frozen point"

    def resume(self) -> None:
        self.go.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def _run_attempt(plan_like: Any) -> None:
    """What the drain driver and its task do for one attempt: catch up to the sink, then each task."""
    cfg = ConsumerConfig.from_env()
    work = drain_progress.catch_up_to_sink(cfg, plan_like, [(s, s.start) for s in plan_like.sub_ranges])
    spec = drain_task.TaskSpec(
        plan_like.topic,
        plan_like.group_id,
        plan_like.drain_id,
        plan_like.batch_max_records,
        plan_like.sub_ranges,
        plan_like.owner,
    )
    for s, start in work:
        list(drain_task.run_task(spec, iter(records(start, s.end))))


def _check(zombie: Zombie) -> None:
    # the fault fired: the zombie, resumed after the other attempt finished, tried to write again
    after = [c for c in SINK.calls if c[0] == "zombie" and c[1] >= START + BATCH]
    assert after, f"the resumed zombie never called the sink (calls {SINK.calls})"
    twice = sorted(o for o, n in Counter(SINK.rows).items() if n > 1)
    assert not twice, (
        f"{len(twice)} records written to the exactly-once sink twice: p1 [{twice[0]}, {twice[-1] + 1}) "
        f"(the resumed attempt's writes after the other attempt took the range over)"
    )
    assert sorted(SINK.rows) == list(range(START, END))
    assert zombie.error is not None, "the fenced zombie's task should fail, not finish"


def test_a_resumed_attempt_is_fenced_by_the_retry(groups: dict[str, FakeProgress]) -> None:
    sub = SubRange(1, 0, START, END)
    tag = owner_tag("uid-1")
    zombie = Zombie(drain_task.TaskSpec("orders", "g", "3", BATCH, (sub,), tag))
    zombie.start()
    assert sorted(SINK.rows) == list(range(START, START + BATCH))
    # the operator's retry of drain 3 (same plan, next attempt): the sink says 1100
    plan = SimpleNamespace(
        drain_id="3", topic="orders", group_id="g", sub_ranges=(sub,), batch_max_records=BATCH, owner=tag
    )
    _run_attempt(plan)
    assert sorted(SINK.rows) == list(range(START, END))
    zombie.resume()
    _check(zombie)


def test_a_resumed_attempt_is_fenced_by_the_adopted_remainder(groups: dict[str, FakeProgress]) -> None:
    old_uid, new_uid = "uid-of-the-deleted-cr", "uid-of-the-re-created-cr"
    sub = SubRange(1, 1, START, END)
    zombie = Zombie(drain_task.TaskSpec("orders", "g", "2", BATCH, (sub,), owner_tag(old_uid)))
    zombie.start()
    done = groups[progress_group("g", "2", 1, owner_tag(old_uid))].offset
    assert done == START + BATCH
    # the CR deleted: the finalizer hands [next, end) back; the re-created CR adopts it as a new drain
    d = DrainStatus(id=2, phase=Phase.FAILED, sub_ranges=(SubProgress(1, 1, START, END, done, BATCH),))
    rem = deletion.decode_remainder(
        {p: (o, m) for p, (o, m) in deletion.encode_remainder(deletion.remainder_of(d)).items()}
    )
    kind, new = deletion.adoption(rem, None, 1, 0.0)
    assert kind is deletion.AdoptKind.ADOPT and new is not None
    spec = SimpleNamespace(
        topic="orders",
        group_id="g",
        batch=SimpleNamespace(max_records=BATCH),
        drain=SimpleNamespace(max_tasks=4),
    )
    _run_attempt(drain_plan_for(spec, new, new_uid))  # type: ignore[arg-type]
    assert sorted(SINK.rows) == list(range(START, END))
    zombie.resume()
    _check(zombie)


def test_a_fenced_call_is_not_retried_isolated_or_dead_lettered() -> None:
    from lagpilot_runtime.failure import RetryPolicy, run_batch

    calls: list[int] = []

    def call(piece: list[Record]) -> None:
        calls.append(len(piece))
        raise Fenced("claimed by a later attempt")

    with pytest.raises(Fenced):
        run_batch(records(0, 8), call, RetryPolicy(max_retries=3, backoff_ms=1), sleep=lambda s: None)
    assert calls == [8]


def test_the_postgres_sink_fences_each_written_range() -> None:
    from lagpilot_runtime.sinks import postgres as pg

    assert "epoch bigint NOT NULL DEFAULT 0" in pg.progress_ddl("t")
    recs = [
        Record("orders", 1, 5, None, b""),
        Record("orders", 2, 9, None, b""),
        Record("orders", 1, 6, None, b""),
    ]
    assert pg.fence_rows("drain:g:1:10", 3, recs) == [
        ("drain:g:1:10", "orders", 1, 3),
        ("drain:g:1:10", "orders", 2, 3),
    ]
    assert pg.fence_rows("group:g", None, recs) == []  # the consumer claims nothing
    assert callable(pg.process.claim)  # type: ignore[attr-defined]


class Paused:
    """A drain task on a thread whose records stop after ``before`` until ``resume()``."""

    def __init__(
        self, name: str, spec: drain_task.TaskSpec, before: list[Record], after: list[Record]
    ) -> None:
        self.before, self.after = before, after
        self.frozen, self.go = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.done = False
        self.thread = threading.Thread(target=self._run, args=(spec,), name=name, daemon=True)

    def _items(self) -> Iterator[Record]:
        yield from self.before
        self.frozen.set()
        self.go.wait(30)
        yield from self.after

    def _run(self, spec: drain_task.TaskSpec) -> None:
        try:
            list(drain_task.run_task(spec, self._items()))
            self.done = True
        except BaseException as exc:  # noqa: BLE001
            self.error = exc

    def start(self) -> Paused:
        self.thread.start()
        assert self.frozen.wait(30), f"{self.thread.name} never reached its pause"
        return self

    def resume(self) -> None:
        self.go.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_two_live_claimers_fence_each_other_in_turn_and_write_nothing_twice(
    groups: dict[str, FakeProgress],
) -> None:
    """The retry's task claims first; a resumed attempt's task starts late and claims after it (so
    the retry's next write is refused); Spark runs the retry's task again, which claims again (so
    the resumed one is refused). Each claimer resumed from the progress its claim read."""
    sub = SubRange(1, 0, START, END)
    tag = owner_tag("uid-1")
    spec = drain_task.TaskSpec("orders", "g", "3", BATCH, (sub,), tag)
    retry = Paused(
        "retry", spec, records(START, 1150), records(1150, END)
    ).start()  # claim 1, wrote [1000, 1100)
    late = Paused(
        "late", spec, records(START, 1300), records(1300, END)
    ).start()  # claim 2, wrote [1100, 1300)
    retry.resume()
    assert retry.error is not None and "fenced" in str(retry.error), retry.error  # its [1100, 1200) refused
    again = Paused("retry-2", spec, records(START, END), []).start()  # Spark's retry of the task: claim 3
    again.resume()
    assert again.done and again.error is None
    late.resume()
    assert late.error is not None and "fenced" in str(late.error), late.error
    refused = [(who, first) for who, first, no in SINK.calls if no]
    assert refused == [("retry", 1100), ("late", 1300)], SINK.calls
    assert sorted(SINK.rows) == list(range(START, END)), "an offset written twice or not at all"
