"""What the demo observed, and what it concludes from it (pure).

The demo samples the world about once a second into a `Sample`: Kafka (end and committed offsets
per partition), PostgreSQL (rows per partition) and the CR status (replicas, projection, drain).
`summarize` turns the samples and the final SQL proof into the summary (summary.json);
`demo.table` prints it and `demo.plot` draws the samples.

Two kinds of "lag" are shown, because a drain makes them differ:
- *group lag* (Kafka): end offset − committed offset of the live group. A hand-off moves the group's
  committed offset to the split point, so group lag drops at once — the records are not processed yet.
- *backlog*: records produced but not yet in PostgreSQL (end offset − rows in the sink table), the
  group's and the drain's together. Catch-up is measured on the backlog.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagpilot.decide.status import parse_time
from lagpilot.spec import DrainSpec
from lagpilot_dev.demo import measure as demo_measure

ACTIVE_DRAIN_PHASES = ("Planned", "HandedOff", "Running", "Succeeded")


@dataclass
class Sample:
    """One observation; ``t`` is seconds since the replay started (negative before it)."""

    t: float
    produce_rate: float = 0.0  # the schedule's rate at t
    produced: int = 0  # acknowledged by the broker so far
    end: dict[int, int] = field(default_factory=dict)
    committed: dict[int, int | None] = field(default_factory=dict)
    in_sink: dict[int, int] = field(default_factory=dict)
    replicas: int | None = None
    desired: int | None = None
    ready: int | None = None  # the Deployment's ready replicas
    pods: int | None = None  # the Deployment's spec.replicas: pods that exist (starting ones included)
    capacity: float | None = None
    observed_rate: float | None = None
    projected_s: float | None = None
    sla_s: float | None = None
    decision: str = ""
    conditions: list[tuple[str, str, str]] = field(default_factory=list)
    drain: dict[str, Any] | None = None  # status.drain as read
    drain_in_sink: int | None = None  # rows of the current drain's ranges already in PostgreSQL
    # the warm drain runtime Deployment, sampled only when it runs on demand (--runtime-on-demand):
    # spec.replicas, its scale-up stamp (epoch s) and since when a runtime pod is Ready (epoch s; None: none)
    runtime_replicas: int | None = None
    runtime_scaled_up_at: float | None = None
    runtime_ready_since: float | None = None

    @property
    def partitions(self) -> list[int]:
        return sorted(set(self.end) | set(self.committed) | set(self.in_sink))

    def group_lag(self, p: int) -> int:
        end = self.end.get(p, 0)
        c = self.committed.get(p)
        return max(0, end - (c if c is not None else 0))

    def backlog(self, p: int) -> int:
        return max(0, self.end.get(p, 0) - self.in_sink.get(p, 0))

    @property
    def total_group_lag(self) -> int:
        return sum(self.group_lag(p) for p in self.partitions)

    @property
    def total_backlog(self) -> int:
        return sum(self.backlog(p) for p in self.partitions)

    @property
    def total_in_sink(self) -> int:
        return sum(self.in_sink.values())

    @property
    def drain_phase(self) -> str | None:
        return (self.drain or {}).get("phase")

    @property
    def drain_active(self) -> bool:
        return self.drain_phase in ACTIVE_DRAIN_PHASES

    @property
    def drain_tasks(self) -> int:
        """Spark task slots the running drain holds (``drain_tasks_of``)."""
        return drain_tasks_of(self.drain)

    def drain_progress(self) -> tuple[int, int]:
        """(records done, records total) of the current drain."""
        d = self.drain or {}
        return int(d.get("recordsDone") or 0), int(d.get("recordsTotal") or 0)


def drain_tasks_of(drain: Mapping[str, Any] | None) -> int:
    """Spark task slots a drain (status.drain) holds while Running: a busy drain's ``slots`` (held
    from its launch to its end, also while it waits for a next part; sub-ranges beyond them queue),
    else one task for each unfinished sub-range. What the simulator counts as drain-task minutes."""
    d = drain or {}
    if d.get("phase") != "Running":
        return 0
    if d.get("busy") and d.get("slots"):
        return int(d["slots"])
    return sum(1 for s in d.get("subRanges") or () if s.get("next", s["start"]) < s["end"])


def condition(sample: Sample, ctype: str) -> tuple[str, str] | None:
    for t, s, r in sample.conditions:
        if t == ctype:
            return s, r
    return None


def drains_seen(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Every drain the status showed (by id), with its last known state; history entries fill in
    drains that started and finished between two samples."""
    by_id: dict[int, dict[str, Any]] = {}
    for s in samples:
        d = s.drain
        if not d:
            continue
        for h in d.get("history") or ():
            if "id" in h:
                entry = by_id.setdefault(int(h["id"]), {})
                new = _drain_entry(h, final=True)
                new["times"] = {**entry.get("times", {}), **new.get("times", {})}
                entry.update(new)
        if "id" in d:
            entry = by_id.setdefault(int(d["id"]), {})
            if entry.get("final"):
                continue  # the history's final word wins over a stale live view
            new = _drain_entry(d)
            new["times"] = {**entry.get("times", {}), **new.get("times", {})}
            entry.update(new)
            entry.setdefault("first_seen_t", round(s.t, 1))
            entry["last_seen_t"] = round(s.t, 1)
    for entry in by_id.values():
        entry.pop("final", None)
    return [dict(id=i, **by_id[i]) for i in sorted(by_id)]


DRAIN_TIMES = (
    "plannedAt",
    "publishedAt",
    "quiescedAt",
    "handedOffAt",
    "resumedAt",
    "startedAt",
    "finishedAt",
)


def _drain_entry(d: Mapping[str, Any], final: bool = False) -> dict[str, Any]:
    # status.drain.ranges[] (and a history entry's): {partition, start, end}; the summary keeps
    # [start, split) as it always named them
    ranges = [
        {"partition": r["partition"], "start": r.get("start"), "split": r["end"]}
        for r in d.get("ranges") or ()
    ]
    out: dict[str, Any] = {
        "phase": d.get("phase"),
        "reason": d.get("reason"),
        "ranges": ranges,
        "records_total": int(d.get("recordsTotal") or 0),
        "records_done": int(d.get("recordsDone") or 0),
    }
    if d.get("pauseSeconds") is not None:
        out["pause_seconds"] = d.get("pauseSeconds")
    times = {k: parse_time(d[k]) for k in DRAIN_TIMES if d.get(k) is not None}  # RFC 3339 -> epoch s
    if times:
        out["times"] = times
    if d.get("handOffPath"):
        out["hand_off_path"] = d.get("handOffPath")
    if d.get("runtime"):
        out["runtime"] = d.get(
            "runtime"
        )  # warm | cold: how the drain's Job was launched (status.drain.runtime)
    if d.get("seconds") is not None:
        out["seconds"] = d.get("seconds")
    elif d.get("startedAt") is not None and d.get("finishedAt") is not None:
        out["seconds"] = round(parse_time(d["finishedAt"]) - parse_time(d["startedAt"]), 1)
    if final:  # a history entry: the drain is over
        out["final"] = True
    return out


def integrate_minutes(samples: Sequence[Sample], value: Any) -> float:
    """∫ value(sample) dt in minutes (step-wise: each sample's value holds until the next)."""
    total = 0.0
    for a, b in itertools.pairwise(samples):
        v = value(a)
        if v:
            total += float(v) * max(0.0, b.t - a.t)
    return total / 60.0


def caught_up_threshold(batch_max_records: int, partitions: int) -> int:
    """A backlog this small is 'caught up': at most one batch in flight per partition."""
    return batch_max_records * max(1, partitions)


def catch_up(samples: Sequence[Sample], threshold: int) -> dict[str, float | None]:
    """Peak backlog, when it peaked, and how long until it was back under ``threshold`` for good
    (``None`` when it never came back)."""
    if not samples:
        return {"peak_backlog": 0, "peak_t": None, "caught_up_t": None, "catch_up_seconds": None}
    peak = max(samples, key=lambda s: s.total_backlog)
    after = [s for s in samples if s.t >= peak.t]
    caught: float | None = None
    for s in after:
        if s.total_backlog <= threshold:
            if caught is None:
                caught = s.t
        else:
            caught = None  # it went up again: not caught up yet
    return {
        "peak_backlog": peak.total_backlog,
        "peak_t": round(peak.t, 1),
        "caught_up_t": None if caught is None else round(caught, 1),
        "catch_up_seconds": None if caught is None else round(caught - peak.t, 1),
    }


HAND_OFF_PHASES = ("Planned", "HandedOff")


def scale_events(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Every change of the Deployment's replica count seen, in order. A drain hand-off quiesces
    the group (→ 0) and gives the replicas back: those two are marked ``"cause": "drain hand-off"``;
    the first 0 → n is ``"start"`` (the Deployment rolling out); the others ``"cause": "scaling"``
    (the operator's decisions)."""
    out: list[dict[str, Any]] = []
    prev: int | None = None
    prev_phase: str | None = None
    quiesced = False
    seen_running = False
    for s in samples:
        if s.replicas is None:
            continue
        if prev is not None and s.replicas != prev:
            hand_off = (
                s.replicas == 0 and (s.drain_phase in HAND_OFF_PHASES or prev_phase in HAND_OFF_PHASES)
            ) or (prev == 0 and quiesced)
            quiesced = s.replicas == 0 and hand_off
            cause = (
                "drain hand-off" if hand_off else ("start" if prev == 0 and not seen_running else "scaling")
            )
            out.append({"t": round(s.t, 1), "from": prev, "to": s.replicas, "cause": cause})
        seen_running = seen_running or s.replicas > 0
        prev = s.replicas
        prev_phase = s.drain_phase
    return out


def measured_rates(samples: Sequence[Sample], window_s: float = 5.0) -> list[float]:
    """Produce rate per sample from the end offsets (records/s over the last ``window_s``)."""
    out: list[float] = []
    j = 0
    for i, s in enumerate(samples):
        while j < i and s.t - samples[j + 1].t >= window_s:
            j += 1
        a = samples[j]
        dt = s.t - a.t
        out.append(max(0.0, (sum(s.end.values()) - sum(a.end.values())) / dt) if dt > 0 else 0.0)
    return out


@dataclass
class Proof:
    """The SQL checks: every produced record is in PostgreSQL, and the delivery ledger (one row per
    delivery, no key) shows each delivered exactly once."""

    produced: int
    end_offsets_total: int
    rows_in_sink: int
    distinct_in_sink: int
    per_partition: dict[int, dict[str, int]]  # partition -> end, rows, distinct, min, max
    ledger: dict[str, Any] | None = None  # demo_measure.ledger_report(...)
    by_source: dict[str, int] = field(default_factory=dict)
    latency: dict[str, float | None] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        """Duplicate rows in the keyed sink table (0 by construction: the ledger is the real check)."""
        return self.rows_in_sink - self.distinct_in_sink

    @property
    def missing(self) -> int:
        return max(0, self.produced - self.distinct_in_sink)

    @property
    def gapless(self) -> bool:
        """Every partition holds exactly offsets 0 .. end-1 (nothing missing, nothing extra)."""
        for p in self.per_partition.values():
            if p["distinct"] != p["end"]:
                return False
            if p["end"] and (p["min"] != 0 or p["max"] != p["end"] - 1):
                return False
        return True

    @property
    def delivered_twice(self) -> int | None:
        """Deliveries beyond the first, from the ledger (None without a ledger)."""
        return None if self.ledger is None else int(self.ledger["duplicated"])

    @property
    def lost(self) -> int | None:
        """Produced offsets the ledger never saw delivered (None without a ledger)."""
        return None if self.ledger is None else int(self.ledger["lost"])

    @property
    def ok(self) -> bool:
        return not self.failures()

    def failures(self) -> list[str]:
        out = []
        if self.produced <= 0:
            out.append("nothing was produced")
        if self.produced != self.distinct_in_sink:
            out.append(f"produced {self.produced} != distinct in PostgreSQL {self.distinct_in_sink}")
        if self.end_offsets_total != self.produced:
            out.append(
                f"Kafka end offsets sum to {self.end_offsets_total}, the producer counted {self.produced}"
            )
        if self.duplicates:
            out.append(f"{self.duplicates} duplicate rows")
        if not self.gapless:
            out.append("some partition's offsets in PostgreSQL are not exactly 0..end-1")
        if self.ledger is None:
            out.append("no delivery ledger to count deliveries")
        else:
            if self.ledger["lost"]:
                out.append(f"the ledger shows {self.ledger['lost']} produced records never delivered")
            if self.ledger["duplicated"]:
                out.append(
                    f"the ledger shows {self.ledger['duplicated']} deliveries of records delivered before"
                )
            if self.ledger["outside"]:
                out.append(f"the ledger holds {self.ledger['outside']} offsets that were never produced")
        return out


def summarize(
    samples: Sequence[Sample],
    proof: Proof,
    *,
    profile: str,
    sla_s: float,
    batch_max_records: int,
    partitions: int,
    timings: Mapping[str, float],
    paths: Mapping[str, str],
    batches: Sequence[demo_measure.Batch] = (),
    wall0: float | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The demo's summary (what the JSON file holds; the table is rendered from it). ``batches``
    (the ledger's) and ``wall0`` (replay start, epoch seconds) give the measured hand-off pauses,
    start-ups and capacities; ``spec`` the run's settings for ``sim_params``."""
    replay = [s for s in samples if s.t >= 0]
    cu = catch_up(replay, caught_up_threshold(batch_max_records, partitions))
    drains = drains_seen(samples)
    demo_measure.drain_measurements(drains, batches, replay, wall0)
    events = scale_events(replay)
    cons_cap = demo_measure.capacity(batches, "consumer", batch_max_records)
    task_cap = demo_measure.capacity(batches, "drain", batch_max_records)
    pods = demo_measure.pod_starts(replay, batches)
    runtime = demo_measure.runtime_report(replay, wall0)  # None unless the runtime ran on demand (sampled)
    sp = spec or {}
    params = demo_measure.sim_params(
        partitions=partitions,
        sla_s=sla_s,
        consumer_capacity=cons_cap,
        drain_task_capacity=task_cap,
        pod_starts_s=pods,
        drains=drains,
        split_factor=int(sp.get("split_factor", 4)),
        max_tasks=int(sp.get("max_tasks", 12)),
        min_backlog_records=int(sp.get("min_backlog_records", 0)),
        poll_interval_s=float(sp.get("poll_interval_s", 5)),
        min_replicas=int(sp.get("min_replicas", 1)),
        max_replicas=int(sp.get("max_replicas", partitions)),
        scale_down_window_s=float(sp.get("scale_down_window_s", 60)),
        batch_timeout_s=float(sp.get("batch_timeout_s", 1.0)),
        batch_max_records=batch_max_records,
        warm_runtime=sp.get("warm_runtime"),
        runtime_cooldown_s=sp.get("runtime_cooldown_s"),
        runtime=runtime,
        busy_drains=bool(sp.get("busy_drains", DrainSpec().busy)),  # the CRD's default
        reported_capacity=demo_measure.reported_capacity(replay),
    )
    pauses = [d["pause_seconds"] for d in drains if d.get("pause_seconds") is not None]
    led = proof.ledger or {}
    out = {
        "profile": profile,
        "ok": proof.ok,
        "failures": proof.failures(),
        "produced": proof.produced,
        "distinct_in_sink": proof.distinct_in_sink,
        "rows_in_sink": proof.rows_in_sink,
        "duplicates": proof.duplicates,
        "missing": proof.missing,
        "gapless": proof.gapless,
        "ledger": {k: v for k, v in led.items() if k != "per_partition"}
        if proof.ledger is not None
        else None,
        "delivered_more_than_once": proof.delivered_twice,
        "reprocessed": proof.delivered_twice,  # the name summary.json had before the ledger: same count
        "lost": proof.lost,
        "processed_by": dict(proof.by_source),
        "per_partition": {str(k): v for k, v in sorted(proof.per_partition.items())},
        "peak_lag": max((s.total_group_lag for s in replay), default=0),
        "peak_backlog": cu["peak_backlog"],
        "catch_up_seconds": cu["catch_up_seconds"],
        "peak_t": cu["peak_t"],
        "caught_up_t": cu["caught_up_t"],
        "sla_seconds": sla_s,
        "latency": dict(proof.latency),
        "max_replicas": max((s.replicas or 0 for s in replay), default=0),
        "scale_ups": sum(1 for e in events if e["to"] > e["from"] and e["cause"] == "scaling"),
        "scale_downs": sum(1 for e in events if e["to"] < e["from"] and e["cause"] == "scaling"),
        "scale_events": events,
        # pods that exist (the Deployment's spec.replicas, as the simulator counts them); the status's
        # replicas when the Deployment could not be read
        "replica_minutes": round(
            integrate_minutes(replay, lambda s: s.pods if s.pods is not None else s.replicas), 2
        ),
        "drain_task_minutes": round(integrate_minutes(replay, lambda s: s.drain_tasks), 2),
        "observed_seconds": round(replay[-1].t, 1) if replay else 0.0,
        "drains": drains,
        "drained_records": sum(int(d.get("records_total") or 0) for d in drains),
        "max_pause_seconds": max(pauses) if pauses else None,
        "measured": {
            "consumer_capacity": cons_cap,
            "drain_task_capacity": task_cap,
            "pod_starts_s": pods,
            "consumer_batches": sum(1 for b in batches if b.source == "consumer"),
            "drain_batches": sum(1 for b in batches if b.source == "drain"),
        },
        "sim_params": params,
        "sim_params_measured": [
            k
            for k in (
                "capacity",
                "drain_task_capacity",
                "pod_start_s",
                "drain_start_s",
                "drain_warm_start_s",
                "handoff_pause_s",
            )
            if params.get(k) is not None
        ],
        "timings_seconds": {k: round(v, 1) for k, v in timings.items()},
        "paths": dict(paths),
    }
    if runtime is not None:
        # the warm drain runtime on demand: scale-ups/downs, warm-ups, minutes up and idle
        out["runtime"] = {
            "mode": sp.get("warm_runtime"),
            "cooldown_seconds": sp.get("runtime_cooldown_s"),
            **runtime,
        }
    return out
