"""Unit tests for the demo's pure parts: the traffic schedule, the summary arithmetic, the proof, the view."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev import demo_report, demo_view
from lagpilot_dev.demo_handler import batch_cost_s
from lagpilot_dev.demo_report import Proof, Sample
from lagpilot_dev.demo_traffic import PROFILES, Phase, partition_for, phase_at, records_due

PHASES = (Phase("quiet", 10, 2.0), Phase("peak", 5, 100.0), Phase("quiet", 10, 2.0))


@pytest.mark.parametrize("t,expected", [
    (0, 0.0), (5, 10.0), (10, 20.0), (12, 220.0), (15, 520.0), (25, 540.0), (99, 540.0), (-1, 0.0),
], ids=["start", "mid-quiet", "end-quiet", "in-peak", "end-peak", "end", "after", "before"])
def test_records_due(t: float, expected: float) -> None:
    assert records_due(PHASES, t) == pytest.approx(expected)


@pytest.mark.parametrize("t,index,left", [(0, 0, 10), (9.5, 0, 0.5), (10, 1, 5), (14, 1, 1), (24, 2, 1)],
                         ids=["first", "end-first", "second", "late-second", "last"])
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
    assert p.min_backlog_records < (peak - p.partitions * p.consumer_capacity) * max(
        ph.seconds for ph in p.phases if ph.rate == peak) / p.partitions


@pytest.mark.parametrize("cfg,n,expected", [
    ({}, 100, 0.0),
    ({"recordDelayMs": "10"}, 100, 1.0),
    ({"batchDelayMs": "50", "recordDelayMs": "15"}, 200, 3.05),
    ({"batchDelayMs": "", "recordDelayMs": "2.5"}, 4, 0.01),
], ids=["free", "per-record", "both", "empty-string"])
def test_handler_cost(cfg: dict[str, str], n: int, expected: float) -> None:
    assert batch_cost_s(n, cfg) == pytest.approx(expected)


def _s(t: float, end: dict[int, int], sink: dict[int, int], committed: dict[int, int | None] | None = None,
       replicas: int | None = 1, drain: dict | None = None) -> Sample:
    return Sample(t=t, end=end, in_sink=sink, committed=committed or dict(sink), replicas=replicas, drain=drain)


def test_backlog_and_group_lag_differ_after_a_hand_off() -> None:
    s = _s(0, {0: 1000}, {0: 200}, committed={0: 900})
    assert s.group_lag(0) == 100 and s.backlog(0) == 800
    assert _s(0, {0: 10}, {0: 0}, committed={0: None}).group_lag(0) == 10


def test_catch_up_measures_from_the_peak_to_the_last_return_under_threshold() -> None:
    samples = [_s(t, {0: e}, {0: k}) for t, e, k in [
        (0, 0, 0), (10, 500, 100), (20, 900, 100), (30, 900, 700), (40, 900, 880), (50, 1000, 880), (60, 1000, 995),
    ]]
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
    assert demo_report.scale_events(samples) == [{"t": 10, "from": 1, "to": 2, "cause": "scaling"},
                                                 {"t": 20, "from": 2, "to": 3, "cause": "scaling"},
                                                 {"t": 40, "from": 3, "to": 1, "cause": "scaling"}]


def test_drains_seen_merges_live_status_and_history() -> None:
    running = {"id": 1, "phase": "Running", "ranges": [{"partition": 0, "start": 10, "split": 500}],
               "subRanges": [{"partition": 0, "index": 0, "start": 10, "end": 250, "next": 250, "records": 240},
                             {"partition": 0, "index": 1, "start": 250, "end": 500, "next": 300, "records": 50}],
               "recordsTotal": 490, "recordsDone": 290, "history": []}
    hist1 = {"id": 1, "phase": "Verified", "reason": "RegrowingPartition", "ranges": running["ranges"],
             "recordsTotal": 490, "recordsDone": 490, "pauseSeconds": 1.5, "seconds": 30.0}
    second = {"id": 2, "phase": "Planned", "ranges": [{"partition": 1, "start": None, "split": 900}],
              "subRanges": [], "recordsTotal": 0, "recordsDone": 0, "history": [hist1]}
    samples = [_s(0, {}, {}, drain=running), _s(5, {}, {}, drain=second), _s(6, {}, {}, drain=running)]
    assert samples[0].drain_tasks == 1 and samples[0].drain_active
    drains = demo_report.drains_seen(samples)
    assert [d["id"] for d in drains] == [1, 2]
    # the history's final word is not overwritten by a stale live status seen later
    assert drains[0]["phase"] == "Verified" and drains[0]["records_done"] == 490 and drains[0]["seconds"] == 30.0
    assert drains[1]["phase"] == "Planned" and drains[1]["ranges"][0]["split"] == 900


def _proof(**kw) -> Proof:
    base = dict(produced=30, end_offsets_total=30, rows_in_sink=30, distinct_in_sink=30,
                per_partition={p: {"end": 10, "rows": 10, "distinct": 10, "min": 0, "max": 9} for p in range(3)})
    base.update(kw)
    return Proof(**base)


def test_proof_ok() -> None:
    p = _proof()
    assert p.ok and p.failures() == [] and p.duplicates == 0 and p.missing == 0


@pytest.mark.parametrize("kw,needle", [
    (dict(distinct_in_sink=29, rows_in_sink=29), "distinct"),
    (dict(rows_in_sink=31), "duplicate"),
    (dict(produced=0, end_offsets_total=0, rows_in_sink=0, distinct_in_sink=0), "nothing"),
    (dict(end_offsets_total=31), "end offsets"),
    (dict(per_partition={0: {"end": 10, "rows": 10, "distinct": 10, "min": 1, "max": 10}}), "0..end-1"),
], ids=["missing", "duplicate", "empty", "offsets-disagree", "shifted-offsets"])
def test_proof_failures(kw: dict, needle: str) -> None:
    p = _proof(**kw)
    assert not p.ok
    assert any(needle in f for f in p.failures())


def test_summary_and_table() -> None:
    drain = {"id": 1, "phase": "Running", "ranges": [{"partition": 0, "start": 5, "split": 60}],
             "subRanges": [{"partition": 0, "index": 0, "start": 5, "end": 60, "next": 20, "records": 15}],
             "recordsTotal": 55, "recordsDone": 15}
    samples = [_s(-3, {0: 0}, {0: 0}, replicas=None), _s(0, {0: 10}, {0: 10}), _s(10, {0: 100}, {0: 20}, replicas=3),
               _s(20, {0: 100}, {0: 60}, replicas=3, drain=drain), _s(30, {0: 100}, {0: 100}, replicas=3)]
    proof = _proof(produced=100, end_offsets_total=100, rows_in_sink=100, distinct_in_sink=100,
                   per_partition={0: {"end": 100, "rows": 100, "distinct": 100, "min": 0, "max": 99}},
                   by_source={"consumer": 45, "drain": 55}, processed_attempts=100, processed_distinct=100,
                   latency={"max_s": 12.0, "p99_s": 11.0, "within_sla_fraction": 1.0})
    summary = demo_report.summarize(samples, proof, profile="fast", sla_s=60, batch_max_records=5, partitions=1,
                                    timings={"total": 100.0}, paths={"plot": "/x.png"})
    assert summary["ok"] and summary["produced"] == summary["distinct_in_sink"] == 100
    assert summary["duplicates"] == 0 and summary["peak_backlog"] == 80 and summary["catch_up_seconds"] == 20
    assert summary["scale_ups"] == 1 and summary["max_replicas"] == 3
    assert summary["replica_minutes"] == pytest.approx((1 * 10 + 3 * 20) / 60, abs=0.01)
    assert summary["drains"][0]["ranges"] == [{"partition": 0, "start": 5, "split": 60}]
    table = demo_report.format_summary(summary)
    for needle in ("records produced", "duplicate rows", "time to catch up", "replica-minutes", "drain #1",
                   "p0[5..60)", "45 / 55"):
        assert needle in table


def test_plot_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    samples = [_s(t, {0: 10 * t, 1: 10 * t}, {0: 5 * t, 1: 8 * t}, replicas=1 + (t > 3)) for t in range(10)]
    samples[4].projected_s = math.inf
    samples[5].projected_s = 30.0
    out = tmp_path / "demo.png"
    demo_report.plot(samples, str(out), sla_s=60, title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("v,total,expected", [(0, 10, "░░░░"), (5, 10, "██░░"), (10, 10, "████"), (20, 10, "████"),
                                              (1, 0, "░░░░")], ids=["empty", "half", "full", "over", "zero-total"])
def test_bar(v: float, total: float, expected: str) -> None:
    assert demo_view.bar(v, total, width=4) == expected


def test_render_shows_every_part_of_the_story() -> None:
    drain = {"id": 2, "phase": "Running", "ranges": [{"partition": 1, "start": 7, "split": 70}],
             "subRanges": [{"partition": 1, "index": 0, "start": 7, "end": 70, "next": 30, "records": 23}],
             "recordsTotal": 63, "recordsDone": 23}
    s = _s(12, {0: 100, 1: 100}, {0: 90, 1: 30}, committed={0: 95, 1: 98}, replicas=2, drain=drain)
    s.desired, s.projected_s, s.sla_s, s.decision = 3, math.inf, 60, "scale up 2→3: projected ∞ > SLA 60s"
    s.conditions = [("Ready", "True", "Consuming"), ("CatchUpAtRisk", "True", "ProjectionAboveSLA")]
    header = demo_view.Header(profile="fast", elapsed_s=75, stage="Replay", waiting_for="the replay", phase="peak")
    text = "\n".join(demo_view.render(header, s, ["$ kubectl get bcg", "NAME  REPLICAS"], colors=False, width=120))
    for needle in ("p0", "p1", "replicas  2 (desired 3)", "projected ∞ vs SLA 60 s", "over SLA", "drain #2 Running",
                   "p1[7..70)", "23/63", "CatchUpAtRisk=True", "$ kubectl get bcg", "waiting for: the replay"):
        assert needle in text
    line = demo_view.one_line(header, s)
    assert "drain#2 Running 23/63" in line and "waiting for: the replay" in line
    assert "waiting for: x" in "\n".join(demo_view.render(
        demo_view.Header(profile="fast", elapsed_s=1, stage="s", waiting_for="x"), None, [], colors=False))


def test_handler_settings_read_the_dsn_from_the_named_env_var() -> None:
    from lagpilot_dev.demo_handler import settings

    cfg = settings({"postgres.table": "t1", "dsnEnv": "X_DSN"}, env={"X_DSN": "postgresql://u:p@h/d"})
    assert cfg.dsn == "postgresql://u:p@h/d" and cfg.table == "t1" and cfg.mode == "insert"
    assert settings({}, env={"DEMO_POSTGRES_DSN": "postgresql://a"}).table == "lagpilot_records"
    with pytest.raises(ValueError, match=r"\$DEMO_POSTGRES_DSN") as err:
        settings({}, env={"LAGPILOT_POSTGRES_DSN": "postgresql://secret"})
    assert "secret" not in str(err.value)


def test_scale_events_tell_the_hand_off_from_scaling() -> None:
    planned = {"id": 1, "phase": "Planned"}
    running = {"id": 1, "phase": "Running"}
    seq = [(-1, 0, None), (0, 1, None), (5, 3, None), (10, 3, planned), (12, 0, planned), (20, 3, running),
           (40, 1, running)]
    events = demo_report.scale_events([_s(t, {}, {}, replicas=r, drain=d) for t, r, d in seq])
    assert [(e["from"], e["to"], e["cause"]) for e in events] == [
        (0, 1, "start"), (1, 3, "scaling"), (3, 0, "drain hand-off"), (0, 3, "drain hand-off"), (3, 1, "scaling")]
    proof = _proof()
    summary = demo_report.summarize([_s(t, {0: 0}, {0: 0}, replicas=r, drain=d) for t, r, d in seq], proof,
                                    profile="fast", sla_s=60, batch_max_records=5, partitions=1, timings={}, paths={})
    assert summary["scale_ups"] == 1 and summary["scale_downs"] == 1


def test_measured_rates() -> None:
    samples = [_s(t, {0: 100 * t}, {}) for t in range(0, 12)]
    rates = demo_report.measured_rates(samples, window_s=5)
    assert rates[0] == 0.0 and rates[1] == pytest.approx(100) and rates[-1] == pytest.approx(100)


@pytest.mark.parametrize("line,width,visible", [
    ("abcdef", 3, "abc"), ("abc", 10, "abc"), ("\x1b[1mabcdef\x1b[0m", 4, "abcd"), ("ab\x1b[33mcd\x1b[0mef", 3, "abc"),
], ids=["plain", "short", "bold", "color-mid"])
def test_clip_counts_visible_characters_only(line: str, width: int, visible: str) -> None:
    got = demo_view.clip(line, width)
    assert demo_view._ANSI.sub("", got) == visible
    if "\x1b[" in line and len(visible) < len(demo_view._ANSI.sub("", line)):
        assert got.endswith(demo_view.RESET)  # a cut never leaves the terminal colored
