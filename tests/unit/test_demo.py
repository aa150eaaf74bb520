"""Unit tests for the demo's pure parts: the traffic schedule, the summary arithmetic, the proof, the view."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev.demo import measure as demo_measure
from lagpilot_dev.demo import plot as demo_plot
from lagpilot_dev.demo import report as demo_report
from lagpilot_dev.demo import table as demo_table
from lagpilot_dev.demo import traffic as demo_traffic
from lagpilot_dev.demo import view as demo_view
from lagpilot_dev.demo.handler import batch_cost_s
from lagpilot_dev.demo.report import Proof, Sample
from lagpilot_dev.demo.traffic import PROFILES, Phase, partition_for, phase_at, records_due

PHASES = (Phase("quiet", 10, 2.0), Phase("peak", 5, 100.0), Phase("quiet", 10, 2.0))


@pytest.mark.parametrize(
    "t,expected",
    [
        (0, 0.0),
        (5, 10.0),
        (10, 20.0),
        (12, 220.0),
        (15, 520.0),
        (25, 540.0),
        (99, 540.0),
        (-1, 0.0),
    ],
    ids=["start", "mid-quiet", "end-quiet", "in-peak", "end-peak", "end", "after", "before"],
)
def test_records_due(t: float, expected: float) -> None:
    assert records_due(PHASES, t) == pytest.approx(expected)


@pytest.mark.parametrize(
    "t,index,left",
    [(0, 0, 10), (9.5, 0, 0.5), (10, 1, 5), (14, 1, 1), (24, 2, 1)],
    ids=["first", "end-first", "second", "late-second", "last"],
)
def test_phase_at(t: float, index: int, left: float) -> None:
    got = phase_at(PHASES, t)
    assert got is not None and got[0] == index and got[2] == pytest.approx(left)


def test_phase_at_after_the_replay_is_none() -> None:
    assert phase_at(PHASES, 25) is None


@given(st.floats(0, 100), st.floats(0, 100))
def test_records_due_is_monotonic(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert records_due(PHASES, lo) <= records_due(PHASES, hi) + 1e-9


@given(st.integers(0, 10_000), st.integers(1, 12))
def test_round_robin_partitions_are_balanced(n: int, parts: int) -> None:
    counts = [0] * parts
    for seq in range(n):
        counts[partition_for(seq, parts)] += 1
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profiles_need_a_drain(name: str) -> None:
    """Every profile's peak outruns the partition-capped group (or the demo would show no drain),
    and the quiet phases are within one consumer's reach."""
    p = PROFILES[name]
    peak = max(ph.rate for ph in p.phases)
    quiet = min(ph.rate for ph in p.phases)
    assert peak > p.partitions * p.consumer_capacity
    assert peak / p.partitions > p.consumer_capacity  # each partition regrows behind a drain
    assert quiet < p.consumer_capacity
    assert (
        p.min_backlog_records
        < (peak - p.partitions * p.consumer_capacity)
        * max(ph.seconds for ph in p.phases if ph.rate == peak)
        / p.partitions
    )


@pytest.mark.parametrize(
    "cfg,n,expected",
    [
        ({}, 100, 0.0),
        ({"recordDelayMs": "10"}, 100, 1.0),
        ({"batchDelayMs": "50", "recordDelayMs": "15"}, 200, 3.05),
        ({"batchDelayMs": "", "recordDelayMs": "2.5"}, 4, 0.01),
    ],
    ids=["free", "per-record", "both", "empty-string"],
)
def test_handler_cost(cfg: dict[str, str], n: int, expected: float) -> None:
    assert batch_cost_s(n, cfg) == pytest.approx(expected)


def _s(
    t: float,
    end: dict[int, int],
    sink: dict[int, int],
    committed: dict[int, int | None] | None = None,
    replicas: int | None = 1,
    drain: dict | None = None,
) -> Sample:
    return Sample(
        t=t, end=end, in_sink=sink, committed=committed or dict(sink), replicas=replicas, drain=drain
    )


def test_backlog_and_group_lag_differ_after_a_hand_off() -> None:
    s = _s(0, {0: 1000}, {0: 200}, committed={0: 900})
    assert s.group_lag(0) == 100 and s.backlog(0) == 800
    assert _s(0, {0: 10}, {0: 0}, committed={0: None}).group_lag(0) == 10


def test_catch_up_measures_from_the_peak_to_the_last_return_under_threshold() -> None:
    samples = [
        _s(t, {0: e}, {0: k})
        for t, e, k in [
            (0, 0, 0),
            (10, 500, 100),
            (20, 900, 100),
            (30, 900, 700),
            (40, 900, 880),
            (50, 1000, 880),
            (60, 1000, 995),
        ]
    ]
    cu = demo_report.catch_up(samples, threshold=50)
    assert cu["peak_backlog"] == 800 and cu["peak_t"] == 20
    # 40 s is under the threshold but it rises again at 50 s: caught up for good only at 60 s
    assert cu["caught_up_t"] == 60 and cu["catch_up_seconds"] == 40


def test_catch_up_never() -> None:
    samples = [_s(0, {0: 10}, {0: 0}), _s(1, {0: 500}, {0: 0})]
    assert demo_report.catch_up(samples, threshold=5)["catch_up_seconds"] is None


def test_integrate_minutes_is_step_wise() -> None:
    samples = [_s(0, {}, {}, replicas=1), _s(60, {}, {}, replicas=3), _s(90, {}, {}, replicas=3)]
    assert demo_report.integrate_minutes(samples, lambda s: s.replicas) == pytest.approx(1.0 + 1.5)


def test_scale_events() -> None:
    samples = [_s(t, {}, {}, replicas=r) for t, r in [(0, 1), (5, None), (10, 2), (20, 3), (30, 3), (40, 1)]]
    assert demo_report.scale_events(samples) == [
        {"t": 10, "from": 1, "to": 2, "cause": "scaling"},
        {"t": 20, "from": 2, "to": 3, "cause": "scaling"},
        {"t": 40, "from": 3, "to": 1, "cause": "scaling"},
    ]


def test_drains_seen_merges_live_status_and_history() -> None:
    running = {
        "id": 1,
        "phase": "Running",
        "ranges": [{"partition": 0, "start": 10, "end": 500}],
        "subRanges": [
            {"partition": 0, "index": 0, "start": 10, "end": 250, "next": 250, "records": 240},
            {"partition": 0, "index": 1, "start": 250, "end": 500, "next": 300, "records": 50},
        ],
        "recordsTotal": 490,
        "recordsDone": 290,
        "history": [],
        "plannedAt": "2023-11-14T22:13:20.000Z",
        "startedAt": "2023-11-14T22:13:25.250Z",
    }
    # as the status holds them: RFC 3339 times, ranges as objects
    hist1 = {
        "id": 1,
        "phase": "Verified",
        "reason": "RegrowingPartition",
        "ranges": [{"partition": 0, "start": 10, "end": 500}],
        "recordsTotal": 490,
        "recordsDone": 490,
        "pauseSeconds": 1.5,
        "seconds": 30.0,
    }
    second = {
        "id": 2,
        "phase": "Planned",
        "ranges": [{"partition": 1, "end": 900}],
        "subRanges": [],
        "recordsTotal": 0,
        "recordsDone": 0,
        "history": [hist1],
        "plannedAt": "2023-11-14T22:13:50.000Z",
    }
    samples = [_s(0, {}, {}, drain=running), _s(5, {}, {}, drain=second), _s(6, {}, {}, drain=running)]
    assert samples[0].drain_tasks == 1 and samples[0].drain_active
    drains = demo_report.drains_seen(samples)
    assert [d["id"] for d in drains] == [1, 2]
    # the history's final word is not overwritten by a stale live status seen later
    assert (
        drains[0]["phase"] == "Verified" and drains[0]["records_done"] == 490 and drains[0]["seconds"] == 30.0
    )
    assert drains[1]["phase"] == "Planned" and drains[1]["ranges"][0]["split"] == 900
    assert drains[0]["ranges"] == [{"partition": 0, "start": 10, "split": 500}]
    # the summary keeps epoch seconds (its format is unchanged)
    assert drains[0]["times"] == {"plannedAt": 1_700_000_000.0, "startedAt": 1_700_000_005.25}
    assert drains[1]["times"] == {"plannedAt": 1_700_000_030.0}


def _ledger(per: dict[int, tuple[int, int, int]] | None = None, ends: dict[int, int] | None = None) -> dict:
    ends = ends or {p: 10 for p in range(3)}
    return demo_measure.ledger_report(
        per if per is not None else {p: (n, n, 0) for p, n in ends.items()}, ends
    )


def _proof(**kw) -> Proof:
    base = dict(
        produced=30,
        end_offsets_total=30,
        rows_in_sink=30,
        distinct_in_sink=30,
        per_partition={p: {"end": 10, "rows": 10, "distinct": 10, "min": 0, "max": 9} for p in range(3)},
        ledger=_ledger(),
    )
    base.update(kw)
    return Proof(**base)


def test_proof_ok() -> None:
    p = _proof()
    assert p.ok and p.failures() == [] and p.duplicates == 0 and p.missing == 0


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(distinct_in_sink=29, rows_in_sink=29), "distinct"),
        (dict(rows_in_sink=31), "duplicate"),
        (dict(produced=0, end_offsets_total=0, rows_in_sink=0, distinct_in_sink=0), "nothing"),
        (dict(end_offsets_total=31), "end offsets"),
        (dict(per_partition={0: {"end": 10, "rows": 10, "distinct": 10, "min": 1, "max": 10}}), "0..end-1"),
        # the sink's key hides a redelivery; the ledger (no key) counts it: the proof fails
        (
            dict(ledger=_ledger({0: (11, 10, 0), 1: (10, 10, 0), 2: (10, 10, 0)})),
            "deliveries of records delivered before",
        ),
        (dict(ledger=_ledger({0: (9, 9, 0), 1: (10, 10, 0), 2: (10, 10, 0)})), "never delivered"),
        (dict(ledger=_ledger({0: (11, 11, 1), 1: (10, 10, 0), 2: (10, 10, 0)})), "never produced"),
        (dict(ledger=None), "no delivery ledger"),
    ],
    ids=[
        "missing",
        "duplicate",
        "empty",
        "offsets-disagree",
        "shifted-offsets",
        "ledger-duplicate",
        "ledger-lost",
        "ledger-outside",
        "no-ledger",
    ],
)
def test_proof_failures(kw: dict, needle: str) -> None:
    p = _proof(**kw)
    assert not p.ok
    assert any(needle in f for f in p.failures())


def test_summary_and_table() -> None:
    drain = {
        "id": 1,
        "phase": "Running",
        "ranges": [{"partition": 0, "start": 5, "end": 60}],
        "subRanges": [{"partition": 0, "index": 0, "start": 5, "end": 60, "next": 20, "records": 15}],
        "recordsTotal": 55,
        "recordsDone": 15,
    }
    samples = [
        _s(-3, {0: 0}, {0: 0}, replicas=None),
        _s(0, {0: 10}, {0: 10}),
        _s(10, {0: 100}, {0: 20}, replicas=3),
        _s(20, {0: 100}, {0: 60}, replicas=3, drain=drain),
        _s(30, {0: 100}, {0: 100}, replicas=3),
    ]
    proof = _proof(
        produced=100,
        end_offsets_total=100,
        rows_in_sink=100,
        distinct_in_sink=100,
        per_partition={0: {"end": 100, "rows": 100, "distinct": 100, "min": 0, "max": 99}},
        by_source={"consumer": 45, "drain": 55},
        ledger=_ledger(ends={0: 100}),
        latency={"max_s": 12.0, "p99_s": 11.0, "within_sla_fraction": 1.0},
    )
    summary = demo_report.summarize(
        samples,
        proof,
        profile="fast",
        sla_s=60,
        batch_max_records=5,
        partitions=1,
        timings={"total": 100.0},
        paths={"plot": "/x.png"},
    )
    assert summary["ok"] and summary["produced"] == summary["distinct_in_sink"] == 100
    assert summary["duplicates"] == 0 and summary["peak_backlog"] == 80 and summary["catch_up_seconds"] == 20
    assert summary["scale_ups"] == 1 and summary["max_replicas"] == 3
    assert summary["replica_minutes"] == pytest.approx((1 * 10 + 3 * 20) / 60, abs=0.01)
    assert summary["drains"][0]["ranges"] == [{"partition": 0, "start": 5, "split": 60}]
    table = demo_table.format_summary(summary)
    for needle in (
        "records produced",
        "duplicate rows",
        "time to catch up",
        "replica-minutes",
        "drain #1",
        "p0[5..60)",
        "45 / 55",
        "records processed more than once (ledger)",
        "records never delivered (ledger)",
    ):
        assert needle in table
    assert (
        summary["delivered_more_than_once"] == 0
        and summary["lost"] == 0
        and summary["ledger"]["delivered"] == 100
    )
    assert summary["reprocessed"] == summary["delivered_more_than_once"]
    assert summary["sim_params"]["partitions"] == 1 and summary["sim_params"]["sla_s"] == 60


def test_plot_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    samples = [_s(t, {0: 10 * t, 1: 10 * t}, {0: 5 * t, 1: 8 * t}, replicas=1 + (t > 3)) for t in range(10)]
    samples[4].projected_s = math.inf
    samples[5].projected_s = 30.0
    out = tmp_path / "demo.png"
    demo_plot.plot(samples, str(out), sla_s=60, title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "v,total,expected",
    [(0, 10, "░░░░"), (5, 10, "██░░"), (10, 10, "████"), (20, 10, "████"), (1, 0, "░░░░")],
    ids=["empty", "half", "full", "over", "zero-total"],
)
def test_bar(v: float, total: float, expected: str) -> None:
    assert demo_view.bar(v, total, width=4) == expected


def test_render_shows_every_part_of_the_story() -> None:
    drain = {
        "id": 2,
        "phase": "Running",
        "ranges": [{"partition": 1, "start": 7, "end": 70}],
        "subRanges": [{"partition": 1, "index": 0, "start": 7, "end": 70, "next": 30, "records": 23}],
        "recordsTotal": 63,
        "recordsDone": 23,
    }
    s = _s(12, {0: 100, 1: 100}, {0: 90, 1: 30}, committed={0: 95, 1: 98}, replicas=2, drain=drain)
    s.desired, s.projected_s, s.sla_s, s.decision = 3, math.inf, 60, "scale up 2→3: projected ∞ > SLA 60s"
    s.conditions = [("Ready", "True", "Consuming"), ("CatchUpAtRisk", "True", "ProjectionAboveSLA")]
    header = demo_view.Header(
        profile="fast", elapsed_s=75, stage="Replay", waiting_for="the replay", phase="peak"
    )
    text = "\n".join(
        demo_view.render(header, s, ["$ kubectl get bcg", "NAME  REPLICAS"], colors=False, width=120)
    )
    for needle in (
        "p0",
        "p1",
        "replicas  2 (desired 3)",
        "projected ∞ vs SLA 60 s",
        "over SLA",
        "drain #2 Running",
        "p1[7..70)",
        "23/63",
        "CatchUpAtRisk=True",
        "$ kubectl get bcg",
        "waiting for: the replay",
    ):
        assert needle in text
    line = demo_view.one_line(header, s)
    assert "drain#2 Running 23/63" in line and "waiting for: the replay" in line
    assert "waiting for: x" in "\n".join(
        demo_view.render(
            demo_view.Header(profile="fast", elapsed_s=1, stage="s", waiting_for="x"), None, [], colors=False
        )
    )


def test_handler_settings_read_the_dsn_from_the_named_env_var() -> None:
    from lagpilot_dev.demo.handler import settings

    cfg = settings({"postgres.table": "t1", "dsnEnv": "X_DSN"}, env={"X_DSN": "postgresql://u:p@h/d"})
    assert cfg.dsn == "postgresql://u:p@h/d" and cfg.table == "t1" and cfg.mode == "insert"
    assert settings({}, env={"DEMO_POSTGRES_DSN": "postgresql://a"}).table == "lagpilot_records"
    with pytest.raises(ValueError, match=r"\$DEMO_POSTGRES_DSN") as err:
        settings({}, env={"LAGPILOT_POSTGRES_DSN": "postgresql://secret"})
    assert "secret" not in str(err.value)


def test_scale_events_tell_the_hand_off_from_scaling() -> None:
    planned = {"id": 1, "phase": "Planned"}
    running = {"id": 1, "phase": "Running"}
    seq = [
        (-1, 0, None),
        (0, 1, None),
        (5, 3, None),
        (10, 3, planned),
        (12, 0, planned),
        (20, 3, running),
        (40, 1, running),
    ]
    events = demo_report.scale_events([_s(t, {}, {}, replicas=r, drain=d) for t, r, d in seq])
    assert [(e["from"], e["to"], e["cause"]) for e in events] == [
        (0, 1, "start"),
        (1, 3, "scaling"),
        (3, 0, "drain hand-off"),
        (0, 3, "drain hand-off"),
        (3, 1, "scaling"),
    ]
    proof = _proof()
    summary = demo_report.summarize(
        [_s(t, {0: 0}, {0: 0}, replicas=r, drain=d) for t, r, d in seq],
        proof,
        profile="fast",
        sla_s=60,
        batch_max_records=5,
        partitions=1,
        timings={},
        paths={},
    )
    assert summary["scale_ups"] == 1 and summary["scale_downs"] == 1


def test_measured_rates() -> None:
    samples = [_s(t, {0: 100 * t}, {}) for t in range(0, 12)]
    rates = demo_report.measured_rates(samples, window_s=5)
    assert rates[0] == 0.0 and rates[1] == pytest.approx(100) and rates[-1] == pytest.approx(100)


@pytest.mark.parametrize(
    "line,width,visible",
    [
        ("abcdef", 3, "abc"),
        ("abc", 10, "abc"),
        ("\x1b[1mabcdef\x1b[0m", 4, "abcd"),
        ("ab\x1b[33mcd\x1b[0mef", 3, "abc"),
    ],
    ids=["plain", "short", "bold", "color-mid"],
)
def test_clip_counts_visible_characters_only(line: str, width: int, visible: str) -> None:
    got = demo_view.clip(line, width)
    assert demo_view._ANSI.sub("", got) == visible
    if "\x1b[" in line and len(visible) < len(demo_view._ANSI.sub("", line)):
        assert got.endswith(demo_view.RESET)  # a cut never leaves the terminal colored


# ---- the ledger, the measurements from it, the trace -------------------------------------------------
@pytest.mark.parametrize(
    "per,ends,want",
    [
        ({0: (10, 10, 0)}, {0: 10}, dict(lost=0, duplicated=0, outside=0, delivered=10)),
        (
            {0: (13, 10, 0)},
            {0: 10},
            dict(lost=0, duplicated=3, outside=0, delivered=13),
        ),  # a replayed batch of 3
        ({0: (8, 8, 0)}, {0: 10}, dict(lost=2, duplicated=0, outside=0, delivered=8)),
        ({0: (12, 10, 2)}, {0: 10}, dict(lost=0, duplicated=0, outside=2, delivered=12)),
        ({}, {0: 5, 1: 5}, dict(lost=10, duplicated=0, outside=0, delivered=0)),
    ],
    ids=["exact", "duplicated", "lost", "outside", "nothing"],
)
def test_ledger_report(per, ends, want) -> None:
    rep = demo_measure.ledger_report(per, ends)
    assert {k: rep[k] for k in want} == want


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12)), max_size=60), st.integers(1, 10))
def test_ledger_report_matches_a_direct_count(rows: list[tuple[int, int]], end: int) -> None:
    ends = {p: end for p in range(3)}
    per = {}
    for p in {p for p, _ in rows}:
        offs = [o for q, o in rows if q == p]
        per[p] = (len(offs), len({o for o in offs if o < end}), len({o for o in offs if o >= end}))
    rep = demo_measure.ledger_report(per, ends)
    inside = {(p, o) for p, o in rows if o < end}
    assert rep["duplicated"] == len(rows) - len(set(rows))
    assert rep["lost"] == 3 * end - len(inside)
    assert (rep["lost"] == rep["duplicated"] == rep["outside"] == 0) == (
        sorted(rows) == sorted((p, o) for p in range(3) for o in range(end))
    )


def _b(worker: str, t: float, n: int, parts=(0,), source="consumer") -> demo_measure.Batch:
    return demo_measure.Batch(worker, source, t, n, tuple(parts))


def test_capacity_uses_full_batches_after_a_batch_of_the_same_worker() -> None:
    batches = [
        _b("a", 0, 50),
        _b("a", 1, 50),
        _b("a", 2, 50),
        _b("a", 3, 10),  # 50/s, then a partial batch
        _b("b", 0, 50),
        _b("b", 0.5, 50),
        _b("b", 100, 50),  # 100/s, then idle (gap > 30 s)
        _b("d", 0, 50, source="drain"),
        _b("d", 2, 50, source="drain"),
    ]
    assert sorted(demo_measure.saturated_rates(batches, "consumer", 50)) == [50.0, 50.0, 100.0]
    assert demo_measure.capacity(batches, "consumer", 50) == 50.0
    assert demo_measure.capacity(batches, "drain", 50) == 25.0
    assert demo_measure.capacity([], "consumer", 50) is None


@pytest.mark.parametrize(
    "times,w,expected",
    [
        ([0, 1, 2, 3, 4], (1.5, 2.5), 1.0),
        ([0, 1, 5, 6], (1.5, 2.0), 4.0),  # the gap spans the window
        ([0, 1, 2, 9, 10], (3.0, 4.0), 7.0),
        ([0, 1, 2], (1.5, 3.0), None),  # nothing after the window: not a live partition
        ([5, 6], (1.0, 2.0), None),  # nothing before it
    ],
    ids=["steady", "spanning", "late-resume", "no-after", "no-before"],
)
def test_longest_gap(times, w, expected) -> None:
    assert demo_measure.longest_gap(times, *w) == expected


def test_hand_off_pause_names_the_partition_and_its_usual_gap() -> None:
    times = {
        0: [float(t) for t in range(0, 40)],
        1: [t * 1.0 for t in range(0, 30)] + [33.5, 34.5, 35.5, 36.5, 37.5, 38.5, 39.5],
    }
    got = demo_measure.hand_off_pause(times, (30.0, 31.0))
    assert got["pause_seconds"] == 4.5 and got["pause_partition"] == 1
    assert got["usual_gap_seconds"] == 1.0 and got["pause_excess_seconds"] == 3.5


def test_drain_measurements_from_the_ledger_and_the_status() -> None:
    wall0 = 1000.0
    drain = {
        "id": 1,
        "phase": "Running",
        "ranges": [],
        "records_total": 0,
        "records_done": 0,
        "pause_seconds": 30.0,
        "times": {"plannedAt": wall0 + 20, "handedOffAt": wall0 + 21},
        "hand_off_path": "mailbox",
    }
    batches = (
        [_b("c0", float(t), 50, (0,)) for t in range(0, 40)]
        + [_b("c1", float(t), 50, (1,)) for t in range(0, 40)]
        + [_b("spark", 27.0, 50, (1,), source="drain"), _b("spark", 28.0, 50, (1,), source="drain")]
    )
    samples = [_s(t, {}, {}, replicas=3 if t != 20 else 2) for t in range(0, 40)]
    for s in samples:
        s.ready = 3
    drains = [drain]
    demo_measure.drain_measurements(drains, batches, samples, wall0)
    d = drains[0]
    assert d["status_pause_seconds"] == 30.0  # the operator's own figure, kept apart
    assert d["pause_seconds"] == 1.0 and d["hand_off_window"] == [20.0, 21.0]
    assert d["start_up_seconds"] == 7.0 and d["min_replicas_during_hand_off"] == 2
    assert d["launch_to_first_record_seconds"] == 6.0
    params = demo_measure.sim_params(
        partitions=3,
        sla_s=60,
        consumer_capacity=50.0,
        drain_task_capacity=None,
        pod_starts_s=[3.0, 5.0],
        drains=[
            *drains,
            {
                "launch_to_first_record_seconds": 10.0,
                "pause_excess_seconds": 0.5,
                "hand_off_path": "ConsumerAck",
            },
        ],
        split_factor=4,
        max_tasks=12,
        min_backlog_records=1000,
        poll_interval_s=5,
        min_replicas=1,
        max_replicas=3,
        scale_down_window_s=60,
        batch_timeout_s=1.0,
        batch_max_records=50,
    )
    assert (
        params["drain_start_s"] == 8.0 and params["handoff_pause_s"] == 0.25 and params["pod_start_s"] == 4.0
    )
    assert params["handoff_quiesce"] is False and params["capacity"] == 50.0
    assert d["pod_changes_near_hand_off"] == []
    for s in samples:
        s.pods = 1 if s.t < 15 else 3
    assert demo_measure.pod_changes(samples, 10.0, 21.0) == [[15.0, 1, 3]]


def test_pod_starts_from_the_deployment_and_the_ledger() -> None:
    seq = [(0, 1, 1), (5, 3, 1), (6, 3, 2), (9, 3, 3), (20, 2, 2), (30, 3, 2), (40, 3, 3)]
    samples = []
    for t, pods, ready in seq:
        s = _s(t, {}, {}, replicas=1)
        s.pods, s.ready = pods, ready
        samples.append(s)
    # without ledger rows: scale-up -> that many ready pods
    assert demo_measure.pod_starts(samples) == [4.0, 10.0]
    # with them: scale-up -> the new pods' first commits (the last of the new ones)
    batches = [
        _b("pod-a/1/1", 0.5, 50),
        _b("pod-b/2/1", 7.0, 50),
        _b("pod-c/3/1", 8.5, 50),
        _b("pod-b/2/1", 9.0, 50),
        _b("pod-d/4/1", 33.0, 50),
    ]
    assert demo_measure.pod_starts(samples, batches) == [3.5, 3.0]


def test_trace_rows_cover_the_observation_at_one_second_and_parse_in_the_simulator(tmp_path) -> None:
    from lagpilot.sim.trace import load_trace

    rows = demo_traffic.trace_rows({0: 6, 1: 6, 2: 450, 4: 80}, end_s=7.2)
    assert rows == [(0, 6.0), (1, 6.0), (2, 450.0), (3, 0.0), (4, 80.0), (5, 0.0), (6, 0.0), (7, 0.0)]
    path = tmp_path / "trace.csv"
    demo_traffic.write_trace(path, rows)
    trace = load_trace(str(path))
    assert trace.times == tuple(float(t) for t, _ in rows) and trace.rates[2] == 450.0 and trace.end_s == 8.0


def test_ledger_has_no_key_and_one_row_per_record() -> None:
    import logging

    from lagpilot_dev.demo.handler import ledger_ddl, ledger_rows, ledger_table
    from lagpilot_runtime.handler import BatchContext, Record

    sql = ledger_ddl("demo_ledger_x").upper()
    assert "PRIMARY KEY" not in sql and "UNIQUE" not in sql
    with pytest.raises(ValueError):
        ledger_ddl('x"; DROP TABLE y; --')
    recs = [Record("t", 0, 5, None, b"v", timestamp_ms=1), Record("t", 0, 5, None, b"v", timestamp_ms=1)]
    rows = ledger_rows(recs, BatchContext({}, logging.getLogger("t"), source="drain"), "w")
    assert rows == [("t", 0, 5, "drain", "w", None, 1)] * 2  # the same record twice: two rows
    assert (
        ledger_table({"auditTable": "a"}) == "a"
        and ledger_table({"ledgerTable": "l", "auditTable": "a"}) == "l"
    )
    assert ledger_table({}) is None


def test_render_shows_the_hand_off_path_and_the_live_group() -> None:
    drain = {
        "id": 3,
        "phase": "Planned",
        "ranges": [{"partition": 0, "start": 1, "end": 9}],
        "handOffPath": "mailbox",
    }
    s = _s(5, {0: 10}, {0: 2}, replicas=3, drain=drain)
    s.ready = 3
    header = demo_view.Header(profile="fast", elapsed_s=5, stage="Replay", waiting_for="x")
    text = "\n".join(demo_view.render(header, s, [], colors=False, width=160))
    assert "hand-off  path mailbox" in text and "live group: 3 replicas, 3 ready" in text
    assert "hand-off mailbox" in demo_view.one_line(header, s)


def test_plot_marks_hand_offs(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    samples = [_s(t, {0: 10 * t}, {0: 5 * t}, replicas=2) for t in range(10)]
    out = tmp_path / "demo.png"
    demo_plot.plot(
        samples,
        str(out),
        sla_s=60,
        title="t",
        drains=[
            {
                "id": 1,
                "hand_off_window": [3.0, 4.0],
                "hand_off_path": "mailbox",
                "pause_seconds": 1.2,
                "min_replicas_during_hand_off": 2,
            }
        ],
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profiles_keep_a_burst_static_replicas_and_keda_cannot_hold(name: str) -> None:
    """The demo shows drains rescuing the SLA, not a load too light to need them: on the profile's
    own trace, the simulator with the handler-only capacity (an upper bound: overheads only lower
    it, and a slower group keeps fewer records within the SLA) gives static replicas at the
    partition cap and KEDA at most 0.8 of the records within the SLA."""
    from lagpilot.sim import params as sim_params
    from lagpilot.sim import policies as sim_policies
    from lagpilot.sim import trace as sim_trace

    p = PROFILES[name]
    sent = {}
    t = 0
    for ph in p.phases:
        for _ in range(int(ph.seconds)):
            sent[t] = int(ph.rate)
            t += 1
    rows = demo_traffic.trace_rows(sent, p.replay_seconds + p.catch_up_timeout_s)
    trace = sim_trace.Trace(
        tuple(float(a) for a, _ in rows), tuple(r for _, r in rows), tuple(None for _ in rows)
    )
    params = sim_params.SimParams(
        partitions=p.partitions,
        capacity=p.consumer_capacity,
        sla_s=p.sla_s,
        pod_start_s=2.0,
        poll_interval_s=p.poll_interval_s,
        step_s=1.0,
    )
    for policy in ("static", "keda"):
        assert sim_policies.run_policy(trace, params, policy).within_sla_fraction <= 0.8, policy


def test_a_busy_drains_task_minutes_count_the_slots_it_holds_not_its_queued_sub_ranges() -> None:
    """The drain-task minutes a user pays are the Spark task slots the drain's executor holds: a busy
    drain holds status.drain.slots from its launch to its end (also while it waits for a next part),
    and sub-ranges beyond them queue; the simulator counts the same (sim/world.py). Counting unfinished
    sub-ranges made the demo's 'measured' 48.4 drain-task minutes for ~27 slot-minutes."""
    from lagpilot_dev.demo.report import drain_tasks_of

    def subs(unfinished: int, done: int) -> list[dict[str, int]]:
        return [{"partition": 0, "index": i, "start": 0, "end": 10, "next": 0} for i in range(unfinished)] + [
            {"partition": 1, "index": i, "start": 0, "end": 10, "next": 10} for i in range(done)
        ]

    assert drain_tasks_of({"phase": "Running", "busy": True, "slots": 12, "subRanges": subs(33, 2)}) == 12
    assert drain_tasks_of({"phase": "Running", "busy": True, "slots": 4, "subRanges": subs(0, 6)}) == 4
    assert (
        drain_tasks_of({"phase": "Running", "subRanges": subs(3, 2)}) == 3
    )  # a drain without slots: one task a sub-range
    assert drain_tasks_of({"phase": "Verified", "busy": True, "slots": 4, "subRanges": subs(0, 6)}) == 0
