"""The demo's traffic: profiles (a scaled-down seed backfill) and the paced producer.

The seed's backfill (`backfill-seed0.csv`): 1.5 msg/s of normal traffic for 4 h, a backfill at
~81 msg/s for 6 h, a peak at ~464 msg/s for 3 h, ~81 msg/s again for 27 h, then back to 1.5 msg/s;
3 partitions; consumers that managed 5.5 msg/s each. The demo keeps that shape (quiet → backfill
→ peak → backfill → quiet) and the ratio that matters — the peak is several times what the
partition-capped group can process — but compresses hours into seconds: the peak lasts a minute
or two instead of three hours, and the handler's artificial cost makes a consumer process tens of
records per second instead of thousands.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("lagpilot_dev.demo")


@dataclass(frozen=True)
class Phase:
    """A stretch of constant produce rate."""

    name: str
    seconds: float
    rate: float  # records per second, whole topic
    # each partition's share of the phase's records (None: round-robin, every partition the same):
    # a hot partition (bench/versus.py's `hot` profile)
    weights: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Profile:
    """Everything that differs between the full demo and the fast one the test runs."""

    name: str
    phases: tuple[Phase, ...]
    partitions: int = 3
    sla_s: int = 120
    record_delay_ms: float = 18.0  # handler cost per record: at most ~52 records/s per consumer
    batch_delay_ms: float = 50.0  # handler cost per call
    # small batches (~1 s each): a partition's sink commits are ~1 s apart, so a hand-off that stalls a
    # live partition shows as a commit gap well above the usual one (the pause the demo measures)
    batch_max_records: int = 50
    batch_timeout_ms: int = 1000
    poll_interval_s: int = 5
    scale_down_window_s: int = 60
    min_backlog_records: int = 2000
    split_factor: int = 4
    max_tasks: int = 12
    warm_runtime: bool = True  # spec.drain.warmRuntime: drains start in seconds (docs/drain.md)
    # spec.drain.warmRuntimeCooldownSeconds (--runtime-on-demand): the runtime scaled 0 -> 1 when a drain
    # falls due, back to 0 this long after the last drain; None: always running (the README demo)
    runtime_cooldown_s: int | None = None
    catch_up_timeout_s: float = 480.0  # after the replay: how long to wait for the backlog to clear
    linger_s: float = 0.0  # after catching up, keep watching (e.g. to show the scale-down)

    @property
    def runtime_on_demand(self) -> bool:
        return self.warm_runtime and self.runtime_cooldown_s is not None

    @property
    def replay_seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    @property
    def expected_records(self) -> int:
        return int(sum(p.seconds * p.rate for p in self.phases))

    @property
    def consumer_capacity(self) -> float:
        """Records/s one consumer manages with full batches (the handler's cost only)."""
        cost_s = (self.batch_delay_ms + self.record_delay_ms * self.batch_max_records) / 1000.0
        return self.batch_max_records / cost_s if cost_s > 0 else float("inf")


PROFILES: dict[str, Profile] = {
    # the README demo: < 10 min on a warm cache
    "default": Profile(
        name="default",
        phases=(
            Phase("quiet", 30, 6.0),
            Phase("backfill", 30, 80.0),
            Phase("peak", 90, 450.0),
            Phase("backfill", 45, 80.0),
            Phase("quiet", 30, 6.0),
        ),
        sla_s=120,
        catch_up_timeout_s=420.0,
        linger_s=0.0,
    ),
    # what tests/real/test_demo.py runs: the same code path, a shorter spike, a tighter SLA; still a
    # burst the capped group alone cannot hold (static replicas keep < 0.8 within the SLA, simulated)
    "fast": Profile(
        name="fast",
        phases=(
            Phase("quiet", 15, 6.0),
            Phase("peak", 50, 400.0),
            Phase("quiet", 20, 6.0),
        ),
        sla_s=60,
        min_backlog_records=1000,
        catch_up_timeout_s=420.0,
    ),
}


# profiles bench/versus.py runs beyond the demo's (not `lagpilot demo` profiles: the demo's own rules,
# e.g. a peak each partition's consumer cannot hold, are not theirs)
VERSUS_PROFILES: dict[str, Profile] = {
    # a hot partition for 4 minutes: 70 % of 150 records/s on partition 0 (105/s, twice what its one
    # consumer manages), 22.5/s on each other one: the whole group could hold the total, no replica
    # count can hold partition 0 (one consumer a partition); 330 s replay, 36,540 records
    "hot": Profile(
        name="hot",
        phases=(
            Phase("quiet", 30, 6.0),
            Phase("hot p0", 240, 150.0, weights=(0.7, 0.15, 0.15)),
            Phase("quiet", 60, 6.0),
        ),
        sla_s=120,
        catch_up_timeout_s=480.0,
    ),
}


def phase_at(phases: Sequence[Phase], t: float) -> tuple[int, Phase, float] | None:
    """(index, phase, seconds left in it) at replay time ``t``; None once the replay is over."""
    start = 0.0
    for i, p in enumerate(phases):
        if t < start + p.seconds:
            return i, p, start + p.seconds - t
        start += p.seconds
    return None


def records_due(phases: Sequence[Phase], t: float) -> float:
    """Records the schedule has produced by replay time ``t`` (the integral of the rate)."""
    total, start = 0.0, 0.0
    for p in phases:
        if t <= start:
            break
        total += p.rate * (min(t, start + p.seconds) - start)
        start += p.seconds
    return total


def trace_rows(sent_per_second: dict[int, int], end_s: float) -> list[tuple[int, float]]:
    """The replayed trace at one-second resolution: ``(t_s, records/s)`` for every second from 0 to
    ``end_s`` (the end of the demo's observation; seconds with nothing produced are rows of 0), so a
    simulator run over it covers the same window as the demo's measurements."""
    last = max([math.ceil(end_s)] + [k + 1 for k in sent_per_second])
    return [(t, float(sent_per_second.get(t, 0))) for t in range(max(1, last))]


def write_trace(
    path: Any, rows: Sequence[tuple[int, float]], weights: dict[int, tuple[float, ...]] | None = None
) -> None:
    """``t_s,produce_msgs_per_s`` CSV, the format of ``lagpilot simulate --trace`` (one row a second);
    with ``weights`` (second -> each partition's share, from :func:`trace_weights`) a third column
    ``partition_weights`` where a second's records were not spread evenly."""
    with open(path, "w") as fh:
        fh.write("t_s,produce_msgs_per_s" + (",partition_weights" if weights else "") + "\n")
        for t, r in rows:
            w = (weights or {}).get(t)
            extra = ("," + '"' + ",".join(f"{x:g}" for x in w) + '"') if w else ("," if weights else "")
            fh.write(f"{t},{r:g}{extra}\n")


def trace_weights(
    sent_by_partition: dict[int, dict[int, int]],
    partitions: int,
) -> dict[int, tuple[float, ...]] | None:
    """Second -> each partition's share of the records produced in it, for the seconds of a weighted
    phase (None when every phase was round-robin)."""
    if not sent_by_partition:
        return None
    out = {}
    for sec, by_p in sent_by_partition.items():
        total = sum(by_p.values())
        if total:
            out[sec] = tuple(round(by_p.get(i, 0) / total, 4) for i in range(partitions))
    return out


def partition_for(seq: int, partitions: int) -> int:
    """Round-robin: every partition gets the same share, as in the seed (no hot key)."""
    return seq % partitions


def weighted_partition(sent: Sequence[int], weights: Sequence[float]) -> int:
    """The partition furthest behind its share (smooth weighted round-robin, deterministic): after n
    records, partition i has received within one record of ``n * weights[i] / sum(weights)``."""
    n = sum(sent) + 1
    total = sum(weights)
    return max(range(len(weights)), key=lambda i: (n * weights[i] / total - sent[i], -i))


@dataclass
class Producer:
    """Replays the profile's schedule into the topic from a background thread.

    Counts only records the broker acknowledged (``acked``): that is what ``produced`` means in the
    demo's proof. ``t0`` (monotonic) is the replay's start, shared with the live view's clock.
    """

    bootstrap: str
    topic: str
    phases: Sequence[Phase]
    partitions: int
    acked: int = 0
    failed: int = 0
    sent: int = 0
    acked_per_partition: dict[int, int] = field(default_factory=dict)
    t0: float | None = None
    wall0: float | None = (
        None  # time.time() at t0: maps the sink's and the ledger's timestamps to replay time
    )
    sent_per_second: dict[int, int] = field(default_factory=dict)  # replay second -> records produced in it
    # replay second -> partition -> records, for the seconds of a weighted phase only
    sent_by_partition: dict[int, dict[int, int]] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase_sent: dict[int, list[int]] = {}  # weighted phase index -> records sent per partition
        self._lock = threading.Lock()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.failed += 1
                self.error = str(err)
            else:
                self.acked += 1
                p = msg.partition()
                self.acked_per_partition[p] = self.acked_per_partition.get(p, 0) + 1

    def start(self) -> Producer:
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self._thread.start()
        return self

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def _run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": 20,
                "acks": "all",
                "enable.idempotence": True,
                "client.id": "lagpilot-demo-producer",
                "logger": logging.getLogger("lagpilot_dev.demo.producer"),
            }
        )
        try:
            total_s = sum(p.seconds for p in self.phases)
            while not self._stop.is_set():
                t = self.elapsed()
                due = int(records_due(self.phases, min(t, total_s)))
                now_ms = int(time.time() * 1000)
                ph = phase_at(self.phases, min(t, total_s - 1e-6))
                weights = ph[1].weights if ph else None
                while self.sent < due:
                    seq = self.sent
                    if weights:
                        counts = self._phase_sent.setdefault(ph[0], [0] * self.partitions)  # type: ignore[index]
                        part = weighted_partition(counts, weights)
                        counts[part] += 1
                    else:
                        part = partition_for(seq, self.partitions)
                    value = json.dumps(
                        {"order": seq, "amount_cents": 100 + seq % 9900, "produced_ms": now_ms}
                    )
                    try:
                        producer.produce(
                            self.topic,
                            key=f"order-{seq}".encode(),
                            value=value.encode(),
                            partition=part,
                            on_delivery=self._on_delivery,
                        )
                    except BufferError:
                        if weights:
                            counts[part] -= 1
                        producer.poll(0.1)
                        continue
                    self.sent += 1
                    sec = int(t)
                    self.sent_per_second[sec] = self.sent_per_second.get(sec, 0) + 1
                    if weights:
                        by_p = self.sent_by_partition.setdefault(sec, {})
                        by_p[part] = by_p.get(part, 0) + 1
                producer.poll(0)
                if t >= total_s:
                    break
                time.sleep(0.05)
            left = producer.flush(60)
            if left:
                self.error = f"{left} records not acknowledged after 60 s"
        except Exception as exc:  # reported by the demo, which fails its proof
            self.error = repr(exc)
            log.exception("producer failed")
        finally:
            self.done.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=90)
