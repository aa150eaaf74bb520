"""Simulator sanity: conservation, ample capacity, FIFO latency maths, the hot partition, the CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from lagpilot.sim import cli as simulate_cli
from lagpilot.sim import params as simulate_params
from lagpilot.sim import trace as simulate_trace
from lagpilot.sim.backlog import _Latency, _Queue, _split
from lagpilot.sim.cli import main
from lagpilot.sim.params import SimParams
from lagpilot.sim.policies import run_all, run_policy
from lagpilot.sim.trace import parse_trace
from lagpilot.sim.world import _water_fill, range_assignment


def trace_of(rows: list[tuple[float, float, str]]):  # type: ignore[no-untyped-def]
    text = "t_s,produce_msgs_per_s,partition_weights\n" + "".join(f'{t},{r},"{w}"\n' for t, r, w in rows)
    return parse_trace(io.StringIO(text))


def flat(rate: float, minutes: int, weights: str = ""):  # type: ignore[no-untyped-def]
    return trace_of([(60 * m, rate, weights) for m in range(minutes)])


def burst(minutes: int = 120):  # type: ignore[no-untyped-def]
    """Quiet, a 40-minute burst above 3 consumers, quiet again."""
    return trace_of([(60 * m, 600.0 if 20 <= m < 60 else 20.0, "") for m in range(minutes)])


def hot(minutes: int = 150):  # type: ignore[no-untyped-def]
    """One partition of four carries 70 % of 250/s = 175/s > 137/s: one consumer can never keep up."""
    return trace_of(
        [
            (60 * m, 250.0 if 10 <= m < 100 else 20.0, "0.7,0.1,0.1,0.1" if 10 <= m < 100 else "")
            for m in range(minutes)
        ]
    )


def test_parse_trace_with_and_without_weights() -> None:
    tr = parse_trace(io.StringIO('t_s,produce_msgs_per_s,partition_weights\n60,2.5,\n0,1.5,"0.7,0.3"\n'))
    assert tr.times == (0.0, 60.0) and tr.rates == (1.5, 2.5)
    assert tr.weights == ((0.7, 0.3), None) and tr.end_s == 120.0
    tr2 = parse_trace(io.StringIO("t_s,produce_msgs_per_s\n0,1\n"))
    assert tr2.weights == (None,)


def test_queue_fifo_latency_is_exact_for_the_fluid_model() -> None:
    q, lat = _Queue(), _Latency(sla_s=100)
    q.push(0, 10, 100)  # 10/s over [0, 10]
    q.take(50, 50, 60, lat)  # first half (produced 0..5) processed over 50..60
    assert lat.count == 50 and lat.max == pytest.approx(55)  # last record: produced 5, done 60
    assert q.total == 50 and q.oldest() == pytest.approx(5)
    q.take(50, 200, 210, lat)  # second half: latencies 195..200, all late
    assert lat.within == pytest.approx(50) and lat.count == 100
    assert lat.quantile(0.99) == pytest.approx(197.5, abs=1)


def test_split_keeps_order_and_counts() -> None:
    parts = _split([[0, 10, 100], [10, 20, 50]], 3)
    assert [round(p.total, 6) for p in parts] == [50, 50, 50]
    assert (
        parts[0].oldest() == 0
        and parts[1].oldest() == pytest.approx(5)
        and parts[2].oldest() == pytest.approx(10)
    )


@pytest.mark.parametrize(
    "budget,queued,expected",
    [(10, [100, 100], [5, 5]), (10, [2, 100], [2, 8]), (10, [0, 3], [0, 3]), (0, [5], [0])],
    ids=["even", "one-short", "one-empty", "no-budget"],
)
def test_water_fill(budget: float, queued: list[float], expected: list[float]) -> None:
    assert _water_fill(budget, queued) == pytest.approx(expected)


@pytest.mark.parametrize(
    "partitions,consumers,expected",
    [(3, 1, [[0, 1, 2]]), (3, 2, [[0, 1], [2]]), (3, 5, [[0], [1], [2]]), (3, 0, [])],
    ids=["one", "two", "more-than-partitions", "none"],
)
def test_range_assignment(partitions: int, consumers: int, expected: list[list[int]]) -> None:
    assert range_assignment(partitions, consumers) == expected


def test_static_with_ample_capacity_is_always_within_sla() -> None:
    r = run_policy(flat(30, 60), SimParams(partitions=3, capacity=100), "static")
    assert r.within_sla_fraction == 1.0 and r.violation_minutes == 0
    assert r.replica_minutes == pytest.approx(3 * 60)
    assert r.p99_latency_s < 10


@pytest.mark.parametrize("policy", ["lagpilot", "static", "keda"])
@pytest.mark.parametrize("trace_name", ["burst", "hot"])
def test_conservation(policy: str, trace_name: str) -> None:
    tr = burst() if trace_name == "burst" else hot()
    params = SimParams(partitions=3 if trace_name == "burst" else 4, capacity=137)
    r = run_policy(tr, params, policy)
    assert r.produced == pytest.approx(r.processed + r.remaining, rel=1e-9, abs=1e-6)
    assert 0.0 <= r.within_sla_fraction <= 1.0
    assert r.p99_latency_s <= r.max_latency_s + 1


def test_lagpilot_drains_a_burst_that_the_capped_group_cannot_clear() -> None:
    params = SimParams(partitions=3, capacity=137)
    lp = run_policy(burst(), params, "lagpilot")
    st = run_policy(burst(), params, "static")
    assert lp.drains >= 1 and lp.drain_task_minutes > 0
    assert st.within_sla_fraction < 1.0
    assert lp.within_sla_fraction > st.within_sla_fraction
    assert lp.replica_minutes < st.replica_minutes


def test_hot_partition_is_drained_repeatedly_and_alone() -> None:
    params = SimParams(partitions=4, capacity=137)
    lp = run_policy(hot(), params, "lagpilot")
    st = run_policy(hot(), params, "static")
    assert lp.extra["drains_by_partition"].get("0", 0) >= 5
    assert set(lp.extra["drains_by_partition"]) == {"0"}
    assert lp.within_sla_fraction > 0.99 > st.within_sla_fraction


def test_keda_tuned_is_the_best_of_the_sweep() -> None:
    results, sweep = run_all(burst(60), SimParams(partitions=3, capacity=137), sweep=(1, 10, 1000))
    best = max(s["within_sla_fraction"] for s in sweep)
    assert results["keda_tuned"].within_sla_fraction == pytest.approx(best, abs=1e-6)
    assert results["keda_tuned"].extra["lag_threshold"] in (1, 10, 1000)
    assert set(results) == {"lagpilot", "static", "keda", "keda_tuned"}


def test_cli_json_last_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "t_s,produce_msgs_per_s\n" + "".join(f"{60 * m},{400 if m < 10 else 5}\n" for m in range(30))
    )
    rc = main(
        [
            "--trace",
            str(path),
            "--partitions",
            "3",
            "--capacity",
            "137",
            "--sla-seconds",
            "300",
            "--pod-start-seconds",
            "20",
            "--drain-start-seconds",
            "40",
            "--drain-task-capacity",
            "200",
            "--max-drain-tasks",
            "8",
            "--json",
            "--policies",
            "lagpilot,static,keda",
        ]
    )
    assert rc == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    out = json.loads(last)
    assert set(out["policies"]) == {"lagpilot", "static", "keda"}
    for metrics in out["policies"].values():
        for key in (
            "within_sla_fraction",
            "p99_latency_s",
            "max_latency_s",
            "violation_minutes",
            "replica_minutes",
            "drain_task_minutes",
            "scale_events",
        ):
            assert key in metrics
    assert out["params"]["drain_task_capacity"] == 200 and out["params"]["sla_s"] == 300


def test_cli_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "t.csv"
    path.write_text("t_s,produce_msgs_per_s\n" + "".join(f"{60 * m},50\n" for m in range(10)))
    png = tmp_path / "p.png"
    assert main(["--trace", str(path), "--policies", "lagpilot,static", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "within_sla_fraction" in out and "lagpilot" in out
    assert png.stat().st_size > 1000


@pytest.mark.parametrize(
    "args",
    [
        ["--trace", "/nonexistent.csv"],
        ["--trace", "x", "--capacity", "0"],
        ["--trace", "x", "--policies", "nope"],
    ],
    ids=["missing", "bad-capacity", "bad-policy"],
)
def test_cli_bad_input(args: list[str], tmp_path: Path) -> None:
    if args[1] == "x":
        p = tmp_path / "x.csv"
        p.write_text("t_s,produce_msgs_per_s\n0,1\n")
        args = [a if a != "x" else str(p) for a in args]
    assert main(args) == 2


# --- the hand-off and drain timing (the operator's drain phases, handoff.Phase) -------------------
from lagpilot.decide import handoff  # noqa: E402
from lagpilot.decide.drain_policy import DrainNeed, DrainRange  # noqa: E402
from lagpilot.sim.trace import trace_from_rows  # noqa: E402
from lagpilot.sim.world import _World  # noqa: E402


def _need(parts: dict[int, int]) -> DrainNeed:
    return DrainNeed(
        tuple(DrainRange(p, None, None, 0, n, 0.0, 0.0) for p, n in parts.items()), "HotPartition", ""
    )


@pytest.mark.parametrize("quiesce", [False, True], ids=["consumer-ack", "quiesce"])
def test_drain_goes_planned_handed_off_running_done_with_the_measured_timing(quiesce: bool) -> None:
    # a drain that ends with its range (a busy one waits for the next part: test_sim_busy_driver.py)
    params = SimParams(
        partitions=2,
        capacity=100,
        drain_start_s=20,
        handoff_quiesce=quiesce,
        step_s=1.0,
        pod_start_s=30,
        busy_drains=False,
    )
    world = _World(flat(0, 10), params, 2)
    world.queues[0].push(-100, 0, 10_000)
    world.produced_by[0] = 10_000
    world.plan_drain(_need({0: 4}), 0.0)
    st = world.drain_statuses()[0]
    assert st.phase is handoff.Phase.PLANNED
    assert handoff.replicas_override(st) == (0 if quiesce else None)  # the hold is the hand-off's rule
    assert len(world.pods) == (0 if quiesce else 2)
    pause = params.pause_s
    assert pause == (simulate_params.QUIESCE_PAUSE_S if quiesce else params.batch_timeout_s)
    t = 0.0
    while world.drain_statuses()[0].handed_off_at is None:
        world.advance(t, 1.0, 0.0, [0.5, 0.5])
        t += 1.0
    st = world.drain_statuses()[0]
    assert st.phase is handoff.Phase.RUNNING and st.handed_off_at == pytest.approx(pause, abs=1.0)
    assert len(st.sub_ranges) == 4 and len(world.tasks) == 4
    assert len(world.pods) == 2 and world.ready(t) == (0 if quiesce else 2)  # restored pods start again
    assert world.queues[0].total < 1e-6  # [start, split) left the group
    while world.drain_active:
        world.advance(t, 1.0, 0.0, [0.5, 0.5])
        t += 1.0
    last = world.drain_statuses()[0]
    assert last.phase is handoff.Phase.VERIFIED
    # start-up + 10 000 records over 4 tasks at 100/s = 25 s, after the pause
    assert last.finished_at == pytest.approx(pause + 20 + 25, abs=1.0)
    assert world.lat.count == pytest.approx(10_000)


def test_records_produced_after_the_plan_stay_with_the_group() -> None:
    params = SimParams(partitions=1, capacity=100, handoff_pause_s=10, step_s=5.0)
    world = _World(flat(0, 10), params, 0)
    world.queues[0].push(-100, 0, 5_000)
    world.produced_by[0] = 5_000
    world.plan_drain(_need({0: 1}), 0.0)
    world.advance(0.0, 5.0, 100.0, [1.0])  # 500 produced during the pause, no consumer
    world.advance(5.0, 5.0, 100.0, [1.0])
    world.advance(10.0, 5.0, 100.0, [1.0])
    assert world.queues[0].total == pytest.approx(1500)  # the split was the end at plan time
    assert sum(task.queue.total for task in world.tasks) == pytest.approx(5000)


def test_quiesce_path_costs_sla_against_the_consumer_path() -> None:
    tr = burst()
    # the quiesce path is for consumers that do not ack: such a CR sets spec.drain.busy false
    ack = run_policy(tr, SimParams(partitions=3, capacity=137, busy_drains=False), "lagpilot")
    quiesce = run_policy(
        tr, SimParams(partitions=3, capacity=137, handoff_quiesce=True, busy_drains=False), "lagpilot"
    )
    assert ack.drains >= 1 and quiesce.drains >= 1
    # what the quiesce path costs: the group held at 0 replicas during its hand-offs; the consumer
    # path never stops it (the max latency of the two runs is set by the burst, not by the pause,
    # and differed by a few seconds either way as the drains' timing changed)
    assert min(ack.series["replicas"]) >= 1
    assert any(r == 0 for r in quiesce.series["replicas"])


def test_keda_compares_at_lagpilots_minimum_and_sweeps_windows() -> None:
    params = SimParams(partitions=3, capacity=137, min_replicas=2)
    assert run_policy(flat(5, 30), params, "keda").extra["min_replica_count"] == 2
    assert run_policy(flat(5, 30), params, "keda_min0").extra["min_replica_count"] == 0
    results, sweep = run_all(burst(60), params, sweep=(1, 10, 1000), windows=(0.0, 300.0), top=1)
    assert {s["scale_down_window_s"] for s in sweep} == {0.0, 300.0}
    best = max(s["within_sla_fraction"] for s in sweep)
    assert results["keda_tuned"].within_sla_fraction == pytest.approx(best, abs=1e-6)
    zero = SimParams(partitions=3, capacity=137, min_replicas=0)
    _, sweep0 = run_all(burst(60), zero, sweep=(10,), windows=(300.0,), cooldowns=(60.0, 300.0), top=1)
    assert {s["cooldown_s"] for s in sweep0} == {60.0, 300.0}


def test_keda_tuned_sweeps_the_scalers_partition_options() -> None:
    """Issue 25 item 6: limitToPartitionsWithLag, ensureEvenDistributionOfPartitions and
    excludePersistentLag, every combination KEDA accepts on the best threshold/window (a fair
    baseline); KEDA refuses limitToPartitionsWithLag with ensureEvenDistributionOfPartitions."""
    from lagpilot.sim.policies import KEDA_OPTIONS

    results, sweep = run_all(
        burst(60), SimParams(partitions=3, capacity=137), sweep=(10,), windows=(300.0,), top=1
    )
    combos = {tuple(s[k] for k in KEDA_OPTIONS) for s in sweep}
    accepted = {
        (a, b, c) for a in (False, True) for b in (False, True) for c in (False, True) if not (a and b)
    }
    assert KEDA_OPTIONS[:2] == ("limit_to_partitions_with_lag", "ensure_even_distribution_of_partitions")
    assert combos == accepted
    best = max(s["within_sla_fraction"] for s in sweep)
    assert results["keda_tuned"].within_sla_fraction == pytest.approx(best, abs=1e-6)


def test_cli_generate_and_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "flash.csv"
    assert main(["--generate", "flash", "--seed", "3", "--out", str(out)]) == 0
    tr = simulate_trace.load_trace(str(out))
    assert len(tr.times) == 24 * 60
    assert main(["--generate", "nope"]) == 2
    from lagpilot.sim import tracegen

    monkeypatch.setattr(
        tracegen, "generate", lambda kind, seed, p=None, c=None: [(60.0 * m, 50.0, None) for m in range(20)]
    )
    capsys.readouterr()
    assert main(["--suite", "--suite-kinds", "step", "--suite-seeds", "0,1", "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "| step s0 |" in text and "| step s1 |" in text and "2/2 traces" in text


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"handoff_quiesce": True, "busy_drains": False},
        {"concurrent_drains": 3, "busy_drains": False},
        {"concurrent_drains": 3, "handoff_quiesce": True, "drain_start_s": 90, "busy_drains": False},
        {"drain_start_s": 90},
    ],
    ids=["ack-busy", "quiesce", "follow-ups", "follow-ups-quiesce-slow", "busy-slow"],
)
def test_conservation_through_hand_offs(extra: dict) -> None:  # type: ignore[type-arg]
    """A flash spike at 2x the group on every partition: every record is processed once or still waits."""
    tr = trace_of([(60 * m, 900.0 if 10 <= m < 22 else 40.0, "") for m in range(60)])
    params = SimParams(partitions=3, capacity=150, sla_s=300, min_backlog_records=1000, **extra)
    r = run_policy(tr, params, "lagpilot")
    assert r.drains + r.extra.get("busy_drain_splits", 0) >= 2  # hand-offs: drains and next splits
    assert r.produced == pytest.approx(r.processed + r.remaining, rel=1e-9, abs=1e-6)
    assert r.remaining == pytest.approx(0.0, abs=1e-6)  # the quiet hour clears everything


def test_drain_assist_beats_keda_where_partition_granularity_costs_replicas() -> None:
    """hot-partition family (4 partitions at 30-50 % of the group, one partition over a consumer for
    an hour): sized for the load lagpilot runs what KEDA runs (4) plus the hot partition's drains;
    with the drain-assisted count it runs 1-2 replicas and the drains carry the excess, within the
    SLA and cheaper than KEDA. Without the assist the same check fails (the test can fail)."""
    from lagpilot.sim import tracegen

    trace = simulate_trace.trace_from_rows(tracegen.generate("hot-partition", 0, hours=4))
    params = SimParams(
        partitions=4, capacity=137.0, sla_s=600.0, drain_assist=True
    )  # spec.drain.assistReplicas
    keda = run_policy(trace, params, "keda")
    lp = run_policy(trace, params, "lagpilot")
    assert lp.within_sla_fraction >= 0.999 and lp.drains > 0
    assert lp.replica_minutes + lp.drain_task_minutes <= keda.replica_minutes
    # the default (spec.drain.assistReplicas unset): the assisted count only while the hot partition
    # is over a consumer (drains run anyway): the idle neighbours' consumers go, cheaper than KEDA
    default = run_policy(trace, SimParams(partitions=4, capacity=137.0, sla_s=600.0), "lagpilot")
    assert default.within_sla_fraction >= 0.999
    assert default.replica_minutes + default.drain_task_minutes <= keda.replica_minutes
    # never assisted (--no-drain-assist): sized for the load, the hot partition's drains on top of
    # KEDA's replicas (the check fails: the test can fail)
    sized = run_policy(
        trace, SimParams(partitions=4, capacity=137.0, sla_s=600.0, drain_assist_min_saving=None), "lagpilot"
    )
    assert sized.within_sla_fraction >= 0.999
    assert sized.replica_minutes + sized.drain_task_minutes > keda.replica_minutes


def test_cli_drain_assist_flags() -> None:
    def params(*flags: str) -> SimParams:
        return simulate_cli.params_from_args(
            simulate_cli.build_parser().parse_args(["--trace", "x.csv", *flags])
        )

    assert not params().drain_assist  # like the CRD's spec.drain.assistReplicas: off unless asked
    assert params("--drain-assist").drain_assist and params("--drain-assist").drain_assist_min_saving == 1.0
    p = params("--drain-assist-min-saving", "0.5")
    assert p.drain_assist and p.drain_assist_min_saving == 0.5
    assert not params("--drain-assist", "--no-drain-assist").drain_assist
    assert params().drain_assist_min_saving == 1.0  # the default: burst-scoped assist
    assert params("--no-drain-assist").drain_assist_min_saving is None  # never, also in bursts
    assert params("--no-drain-assist").model().drain_assist_min_saving is None
    assert params("--drain-assist").group_spec().drain.assist_replicas


def test_scale_down_window_reaches_the_simulated_cr_and_from_demo() -> None:
    """lagpilot's scale-down window (the demo's CR sets 60 s) is a simulator parameter: the flag, the
    simulated CR's spec, and a summary.json's sim_params all reach it (it was 'not modelled')."""
    from lagpilot.sim import compare as sim_compare

    args = simulate_cli.build_parser().parse_args(["--trace", "x.csv", "--scale-down-window-seconds", "60"])
    p = simulate_cli.params_from_args(args)
    assert p.scale_down_window_s == 60
    assert p.group_spec().scaling.scale_down_window_seconds == 60
    pol = simulate_params.step_mod.Policies.from_group_spec(p.group_spec(), p.model())
    assert pol.scaling.scale_down_window_s == 60
    assert SimParams().group_spec().scaling.scale_down_window_seconds == 300  # the HPA's default
    params, _used, unknown = sim_compare.params_from_summary({"sim_params": {"scale_down_window_s": 60.0}})
    assert params.scale_down_window_s == 60 and "scale_down_window_s" not in unknown


def test_shorter_scale_down_window_releases_replicas_sooner() -> None:
    """A burst then quiet: with a 60 s window the extra replicas go ~4 minutes sooner than with
    300 s, and the SLA is kept either way (the window is lagpilot's, KEDA's stays 300 s)."""
    tr = trace_of([(60 * m, 400.0 if 5 <= m < 15 else 20.0, "") for m in range(40)])
    long = run_policy(tr, SimParams(partitions=3, capacity=150, sla_s=600), "lagpilot")
    short = run_policy(
        tr, SimParams(partitions=3, capacity=150, sla_s=600, scale_down_window_s=60), "lagpilot"
    )
    assert short.within_sla_fraction >= 0.999 and long.within_sla_fraction >= 0.999
    assert short.replica_minutes < long.replica_minutes - 3
    k1 = run_policy(tr, SimParams(partitions=3, capacity=150, sla_s=600), "keda")
    k2 = run_policy(tr, SimParams(partitions=3, capacity=150, sla_s=600, scale_down_window_s=60), "keda")
    assert k1.replica_minutes == k2.replica_minutes


def test_flash_burst_at_a_90s_drain_start_keeps_the_sla() -> None:
    """Held-out flash seed 8 (6 partitions x 150/s, SLA 300 s) at a 90 s drain start, its two bursts
    (each from 10 min before to 20 min after; most records of the day are outside them): 0.9966 of
    the bursts' records within the SLA before the planner sized each drain for the next one (the
    whole day 0.9989), 0.9988 now (the whole day 0.9996: docs/decision.md, held-out seeds)."""
    from lagpilot.sim import tracegen

    fam = tracegen.SUITE["flash"]
    rows = tracegen.generate("flash", 8, fam.partitions, fam.capacity)
    params = SimParams(
        partitions=fam.partitions,
        capacity=fam.capacity,
        sla_s=fam.sla_s,
        drain_start_s=90.0,
        handoff_pause_s=1.0,
        max_drain_tasks=16,
    )
    within = total = 0.0
    for b0, b1 in ((32160.0, 32760.0), (51600.0, 52140.0)):  # rows above the group's 900/s
        window = [(t - (b0 - 600), r, w) for t, r, w in rows if b0 - 600 <= t <= b1 + 1200]
        lp = run_policy(trace_from_rows(window), params, "lagpilot")
        assert lp.remaining == pytest.approx(0.0, abs=1e-6)
        assert lp.drains + lp.extra.get("busy_drain_splits", 0) >= 2  # hand-offs: drains and next splits
        within += lp.within_sla_fraction * lp.processed
        total += lp.processed
    assert within / total >= 0.998


@pytest.mark.parametrize("start", [90.0, 20.0])
def test_burst_that_ends_while_the_drain_is_starting(start: float) -> None:
    """2,300/s over 6 x 150/s for 90 s only: the burst is over before the drain's tasks start; one
    drain, every record within the SLA, the group keeps what arrived after the split."""
    rows = [(0.0, 480.0, None), (600.0, 2300.0, None), (690.0, 480.0, None), (2400.0, 480.0, None)]
    params = SimParams(partitions=6, capacity=150.0, sla_s=300.0, drain_start_s=start, handoff_pause_s=1.0)
    lp = run_policy(trace_from_rows(rows), params, "lagpilot")
    assert lp.drains == 1 and lp.within_sla_fraction == 1.0
    assert lp.produced == pytest.approx(lp.processed + lp.remaining, rel=1e-9)
