"""decide.learn (issue 25 item 4): the start-ups this CR showed, and scale-ups that did not raise the
throughput (a downstream limit). Tables + hypothesis properties; the step is driven as the operator
and the simulator drive it."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide import handoff, learn
from lagpilot.decide import step as step_mod
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.decide.scaling import ScalingObservation, ScalingPolicy, decide, loads_from
from lagpilot.spec import parse_spec

BASE = {"kafka": {"bootstrapServers": "127.0.0.1:9092"}, "topic": "t", "groupId": "g"}


# --- the figure the planner uses --------------------------------------------------------------------


@pytest.mark.parametrize(
    "samples, default, want",
    [
        ((), 20.0, 20.0),  # nothing measured: the model's figure
        ((13.0,), 20.0, 13.0),  # one sample: it (a quicker start-up than the model's is used too)
        ((10.0, 50.0), 20.0, 50.0),  # fewer than 5: the largest (Flink's maximum)
        ((10.0, 20.0, 30.0, 40.0, 50.0), 20.0, 40.0),  # 5: the second largest (nearest-rank 80th percentile)
        ((30.0, 30.0, 30.0, 30.0, 400.0), 20.0, 30.0),  # one outlier does not rule
        ((10.0, 2000.0), 20.0, learn.LIMIT_S),  # capped (Flink: restart.time-tracking.limit)
    ],
)
def test_figure_table(samples: tuple[float, ...], default: float, want: float) -> None:
    assert learn.figure(samples, default) == want


@given(st.lists(st.floats(0, 5000, allow_nan=False), min_size=1, max_size=learn.KEEP), st.floats(0, 100))
def test_figure_is_one_of_the_samples_within_their_range(samples: list[float], default: float) -> None:
    f = learn.figure(samples, default)
    assert min(min(samples), learn.LIMIT_S) <= f <= min(max(samples), learn.LIMIT_S)
    assert f in samples or f == learn.LIMIT_S


@given(st.lists(st.floats(0, 5000, allow_nan=False), max_size=12))
def test_the_memory_is_bounded_and_round_trips(samples: list[float]) -> None:
    learned = learn.Learned()
    for x in samples:
        learned = dataclasses.replace(learned, pod_start=learn._kept(learned.pod_start, x))
    assert len(learned.pod_start) <= learn.KEEP
    learned = dataclasses.replace(
        learned,
        limit=learn.Limit(1.0, 6, 2, 100.0, 300.0, 101.0),
        check=learn.ScaleUpCheck(2.0, 1, 3, 50.0, 3, 5.0, 900),
    )
    assert learn.Learned.from_dict(json.loads(json.dumps(learned.to_dict()))) == learned


def test_a_malformed_memory_starts_fresh() -> None:
    assert learn.Learned.from_dict({"podStart": ["x"]}) == learn.Learned()
    assert learn.Learned.from_dict({"limit": {"nope": 1}}) == learn.Learned()


# --- driving the step -------------------------------------------------------------------------------


def snap(at: float, ends: list[int], committed: list[int], cap: float | None):  # type: ignore[no-untyped-def]
    parts = [PartitionOffsets(i, 0, e, c) for i, (e, c) in enumerate(zip(ends, committed, strict=True))]
    return snapshot(at, parts, {i: cap for i in range(len(ends))} if cap else {})


def go(state, at, ends, committed, cur, ready, spec, drains=(), cap=100.0):  # type: ignore[no-untyped-def]
    obs = step_mod.StepObservation(snap(at, ends, committed, cap), cur, tuple(drains), ready_replicas=ready)
    return step_mod.step(state, obs, spec, at)


def test_pod_start_is_measured_from_the_scale_up_to_ready_and_planned_with() -> None:
    spec = parse_spec({**BASE, "drain": {"enabled": False}})
    s = step_mod.StepState()
    out, s = go(s, 0.0, [1000] * 3, [1000] * 3, 1, 1, spec)
    assert out.start_ups["podStart"] == (30.0, ())  # the model's figure until measured
    out, s = go(s, 15.0, [30000] * 3, [1000] * 3, 1, 1, spec)
    assert out.replicas == 3 and s.learned.pending_scale == learn.PendingScale(15.0, 3)
    out, s = go(s, 30.0, [30000] * 3, [1000] * 3, 3, 1, spec)  # applied, not Ready yet
    assert s.learned.pod_start == ()
    out, s = go(s, 45.0, [30000] * 3, [2000] * 3, 3, 3, spec)  # Ready: 30 s after the scale-up
    assert s.learned.pod_start == (30.0,) and s.learned.pending_scale is None
    out, s = go(s, 60.0, [30000] * 3, [3000] * 3, 3, 3, spec)
    assert out.start_ups["podStart"] == (30.0, (30.0,))
    back = step_mod.StepState.from_memory(json.loads(json.dumps(s.to_memory())))
    assert back.learned == s.learned  # restarts keep it (the controller's memory)


def test_a_scale_up_never_applied_is_not_a_start_up() -> None:
    """Recommend mode (or a hand-off holding the count): the Deployment never got the count."""
    spec = parse_spec({**BASE, "drain": {"enabled": False}})
    s = step_mod.StepState()
    _, s = go(s, 0.0, [1000] * 3, [1000] * 3, 1, 1, spec)
    out, s = go(s, 15.0, [30000] * 3, [1000] * 3, 1, 1, spec)
    assert out.replicas == 3 and s.learned.pending_scale is not None
    _, s = go(s, 30.0, [30000] * 3, [1000] * 3, 1, 1, spec)  # not applied: asked again (from now)
    assert s.learned.pending_scale == learn.PendingScale(30.0, 3) and s.learned.pod_start == ()
    _, s = go(s, 45.0, [30000] * 3, [1000] * 3, 1, 3, spec)  # 3 Ready, but not because of the ask
    assert s.learned.pod_start == ()


def drain(**kw):  # type: ignore[no-untyped-def]
    base = handoff.DrainStatus(
        id=7,
        phase=handoff.Phase.RUNNING,
        ranges=(handoff.PartitionRange(0, start=0, split=1000),),
        sub_ranges=(handoff.SubProgress(0, 0, 0, 1000, 0),),
        planned_at=98.0,
        handed_off_at=99.0,
        started_at=100.0,
        attempt=1,
        runtime="cold",
        progress_at=100.0,
    )
    return dataclasses.replace(base, **kw)


def progressed(**kw):  # type: ignore[no-untyped-def]
    return drain(sub_ranges=(handoff.SubProgress(0, 0, 0, 1000, 200, 200),), **kw)


def watch(steps):  # type: ignore[no-untyped-def]
    """learn.observe over (now, prev_at, drains) looks: the start-up figures afterwards."""
    learned = learn.Learned()
    prev = None
    for now, drains in steps:
        est = snap(now, [1000], [0], None)
        from lagpilot.decide import estimate

        e = estimate.update(prev, est)
        learned, _ = learn.observe(
            learned, now=now, current=1, ready=1, drains=drains, prev=prev, est=e, poll_s=15
        )
        prev = e
    return learned


@pytest.mark.parametrize(
    "case, steps, cold, warm",
    [
        # launched at 100, seen without progress at 105, progress first seen by the executor at 118
        ("cold", [(90.0, ()), (105.0, (drain(),)), (120.0, (progressed(progress_at=118.0),))], (18.0,), ()),
        (
            "warm runtime",
            [
                (90.0, ()),
                (105.0, (drain(runtime="warm"),)),
                (120.0, (progressed(runtime="warm", progress_at=104.0),)),
            ],
            (),
            (4.0,),
        ),
        # progress already at the first look, but it launched after the previous one: the look is fresh
        ("fresh first look", [(90.0, ()), (110.0, (progressed(progress_at=None),))], (10.0,), ()),
        # a restarted operator finds a drain well under way: nothing learned from it
        ("under way at a restart", [(300.0, ()), (315.0, (progressed(progress_at=290.0),))], (), ()),
        # retried before its progress was seen: the first attempt's start-up is unknown
        (
            "retried",
            [(90.0, ()), (105.0, (drain(),)), (200.0, (progressed(attempt=2, progress_at=190.0),))],
            (),
            (),
        ),
        # measured once per drain
        (
            "once",
            [
                (90.0, ()),
                (105.0, (drain(),)),
                (120.0, (progressed(progress_at=118.0),)),
                (135.0, (progressed(progress_at=133.0),)),
            ],
            (18.0,),
            (),
        ),
    ],
)
def test_drain_start_up_table(case: str, steps, cold, warm) -> None:  # type: ignore[no-untyped-def]
    learned = watch(steps)
    assert (learned.drain_start, learned.drain_warm_start) == (cold, warm), case


def test_measured_drain_start_up_is_what_the_planner_uses() -> None:
    pol = step_mod.Policies.from_group_spec(parse_spec(BASE), step_mod.Model())
    assert pol.drain is not None and pol.drain.start_up_s == 20.0
    learned = learn.Learned(pod_start=(41.0,), drain_start=(55.0, 61.0), drain_warm_start=(2.0,))
    got = pol.with_learned(learned)
    assert got.drain is not None
    assert (
        got.scaling.pod_start_s,
        got.drain.start_up_s,
        got.runtime.warm_up_s,
        got.runtime.warm_start_s,
    ) == (41.0, 61.0, 61.0, 2.0)
    assert pol.with_learned(learn.Learned()) == pol  # until measured: the model's figures


# --- ineffective scale-ups --------------------------------------------------------------------------


def limited_world(limit: float, per_consumer: float, detect: bool = True, polls: int = 40):  # type: ignore[no-untyped-def]
    """12 partitions at 20 records/s each; the group's throughput is min(limit, ready x per_consumer)
    (a sink that takes at most ``limit`` records/s in total), spread over the lagging partitions.
    Each consumer reports what it achieves per busy second (throughput / ready: always busy)."""
    spec = parse_spec(
        {
            **BASE,
            "drain": {"enabled": False},
            "catchUpSLASeconds": 600,
            "scaling": {"minReplicas": 2, "maxReplicas": 12},
        }
    )
    pol = step_mod.Policies.from_group_spec(spec, step_mod.Model(detect_ineffective_scaling=detect))
    n, rate, poll, pod_start = 12, 20.0, 15.0, 30.0
    ends, committed = [0.0] * n, [0.0] * n
    pods: list[float] = [-math.inf, -math.inf]  # ready-at times
    s = step_mod.StepState()
    outs = []
    for k in range(polls):
        t = k * poll
        ready = sum(1 for r in pods if r <= t)
        cap = min(limit, ready * per_consumer) / ready if ready else None
        out, s = go(s, t, [int(e) for e in ends], [int(c) for c in committed], len(pods), ready, pol, cap=cap)
        outs.append((t, len(pods), out, s))
        want = out.replicas
        if want > len(pods):
            pods += [t + pod_start] * (want - len(pods))
        elif want < len(pods):
            pods = sorted(pods)[:want]
        for sub in range(int(poll)):  # one-second steps to the next poll
            ready = sum(1 for r in pods if r <= t + sub)
            for i in range(n):
                ends[i] += rate
            tput = min(limit, ready * per_consumer)
            lagging = [i for i in range(n) if ends[i] - committed[i] > 0]
            for i in lagging:
                committed[i] = min(ends[i], committed[i] + tput / len(lagging))
    return outs


def test_a_scale_up_that_did_not_raise_the_throughput_stops_the_scale_ups() -> None:
    outs = limited_world(limit=100.0, per_consumer=50.0)
    limited = [(t, cur, o) for t, cur, o, _ in outs if o.limit is not None]
    assert limited, "the downstream limit was never detected"
    t0, cur0, first = limited[0]
    assert first.limit is not None and first.limit.after < first.limit.before + 0.1 * (
        first.limit.expected - first.limit.before
    )
    assert any(e[1] == "DownstreamLimited" for _, _, o, _ in outs for e in o.learn_events)
    # from the detection on, no more replicas: the count stays where the limit was seen
    after = [(cur, o) for t, cur, o, _ in outs if t >= t0]
    assert all(o.replicas <= cur0 for _, o in after), [
        (cur, o.replicas, o.decision.reason) for cur, o in after
    ]
    assert any(o.decision.reason == "DownstreamLimited" for _, o in after)
    # without the detection the same world scales to the cap (each consumer's capacity keeps falling)
    blind = limited_world(limit=100.0, per_consumer=50.0, detect=False)
    assert max(o.replicas for _, _, o, _ in blind) == 12 > cur0


def test_a_scale_up_that_raised_the_throughput_is_not_limited() -> None:
    outs = limited_world(limit=math.inf, per_consumer=50.0)
    assert all(o.limit is None for _, _, o, _ in outs)
    assert max(o.replicas for _, _, o, _ in outs) > 2  # it scaled up, and that helped


@pytest.mark.parametrize(
    "case, before, after, lagging_after, limited",
    [
        ("no rise", 100.0, 100.0, 3, True),
        ("rise 9 % of expected", 100.0, 118.0, 3, True),  # expected 300: +200; +18 < 20
        ("rise 10 % of expected", 100.0, 120.0, 3, False),
        ("caught up", 100.0, 100.0, 1, False),  # the group ran out of backlog: not held back
    ],
)
def test_effectiveness_threshold_table(
    case: str, before: float, after: float, lagging_after: int, limited: bool
) -> None:
    check = learn.ScaleUpCheck(0.0, 1, 3, before, 3, ready_s=30.0, committed_at_ready=0)
    from lagpilot.decide import estimate

    lags = [5000 if i < lagging_after else 0 for i in range(3)]
    committed = int(after * 30)  # 30 s window at `after` records/s, spread
    per = [committed // 3 + (committed % 3 if i == 0 else 0) for i in range(3)]
    est = estimate.update(None, snap(60.0, [p + lag for p, lag in zip(per, lags, strict=True)], per, None))
    learned, events = learn.observe(
        learn.Learned(check=check), now=60.0, current=3, ready=3, drains=(), prev=None, est=est, poll_s=15.0
    )
    assert (learned.limit is not None) is limited, case
    assert learned.check is None  # judged (or dropped) once
    assert bool(events) is limited


@pytest.mark.parametrize(
    "case, current, lag, since, cleared",
    [
        ("held", 6, 5000, 0.0, False),
        ("replicas changed", 5, 5000, 0.0, True),
        ("backlog gone", 6, 0, 0.0, True),
        # less than the group commits in one poll (100 records/s x 15 s): no backlog left
        ("backlog under one poll", 6, 1400, 0.0, True),
        ("backlog of more than one poll", 6, 1600, 0.0, False),
        ("window over", 6, 5000, -learn.HOLD_S, True),
    ],
)
def test_the_limit_clears_when_things_change(
    case: str, current: int, lag: int, since: float, cleared: bool
) -> None:
    from lagpilot.decide import estimate

    lim = learn.Limit(since, 6, 2, 100.0, 300.0, 100.0)
    est = estimate.update(None, snap(0.0, [lag, 0], [0, 0], None))
    learned, events = learn.observe(
        learn.Learned(limit=lim),
        now=0.0,
        current=current,
        ready=current,
        drains=(),
        prev=None,
        est=est,
        poll_s=15.0,
    )
    assert (learned.limit is None) is cleared, case
    assert [e[1] for e in events] == (["DownstreamLimitCleared"] if cleared else [])


def test_no_check_while_a_drain_is_in_flight() -> None:
    """A hand-off moves committed offsets by whole ranges: the throughput is not the group's then."""
    from lagpilot.decide import estimate

    prev = estimate.update(None, snap(0.0, [5000] * 3, [0] * 3, None))
    est = estimate.update(prev, snap(15.0, [6000] * 3, [500] * 3, None))
    base = dict(now=15.0, current=1, replicas=3, held=False, prev=prev, est=est)
    assert learn.after_decision(learn.Learned(), drains=(), **base).check is not None  # type: ignore[arg-type]
    assert learn.after_decision(learn.Learned(), drains=(drain(),), **base).check is None  # type: ignore[arg-type]


def _hold_by_limit(at: int) -> dict[str, object]:
    return {"downstream_limit": learn.Limit(0.0, at, 1, 100.0, 200.0, 100.0)}


def _hold_unjudged(at: int) -> dict[str, object]:
    return {"unjudged_scale_up": at}


@pytest.mark.parametrize(
    ("hold", "reason"), [(_hold_by_limit, "DownstreamLimited"), (_hold_unjudged, "ScaleUpUnjudged")]
)
@settings(max_examples=200, deadline=None)
@given(
    lags=st.lists(st.integers(0, 200_000), min_size=1, max_size=8),
    rates=st.lists(st.floats(0, 400), min_size=8, max_size=8),
    cur=st.integers(0, 8),
    at=st.integers(1, 8),
    lo=st.integers(1, 4),
)
def test_a_hold_only_ever_stops_scale_ups_at_or_above_its_count(
    hold: Callable[[int], dict[str, object]],
    reason: str,
    lags: list[int],
    rates: list[float],
    cur: int,
    at: int,
    lo: int,
) -> None:
    """The downstream limit (learn.Limit) and the unjudged scale-up (learn.unjudged) hold alike."""
    p = ScalingPolicy(min_replicas=lo, max_replicas=8)
    loads = loads_from(lags, rates[: len(lags)])
    free, _ = decide(ScalingObservation(1000.0, len(lags), cur, loads, 100.0), p)
    held, _ = decide(ScalingObservation(1000.0, len(lags), cur, loads, 100.0, **hold(at)), p)  # type: ignore[arg-type]
    keep = max(cur, min(lo, len(lags)))
    if free.desired_replicas > keep and cur >= at:
        assert held.desired_replicas == keep and held.reason == reason
        assert held.desired_replicas >= min(lo, len(lags))  # never below minReplicas
    else:
        assert held.desired_replicas == free.desired_replicas and held.reason == free.reason


@settings(max_examples=200, deadline=None)
@given(before=st.floats(1, 1000), r0=st.integers(1, 8), r1=st.integers(2, 16), frac=st.floats(0.1, 3))
def test_a_rise_of_at_least_the_threshold_is_never_called_ineffective(
    before: float, r0: int, r1: int, frac: float
) -> None:
    r1 = max(r1, r0 + 1)
    check = learn.ScaleUpCheck(0.0, r0, r1, before, r1, ready_s=30.0, committed_at_ready=0)
    after = before + frac * (check.expected - before) + 1.0  # +1: whole records
    from lagpilot.decide import estimate

    total = math.ceil(after * 30)
    per = [total // r1] * r1
    per[0] += total - sum(per)
    est = estimate.update(None, snap(60.0, [x + 1000 for x in per], per, None))
    learned, _ = learn.observe(
        learn.Learned(check=check), now=60.0, current=r1, ready=r1, drains=(), prev=None, est=est, poll_s=15.0
    )
    assert learned.limit is None


def test_a_partition_the_group_never_committed_does_not_hide_the_throughput() -> None:
    """Found on the real stack (12 partitions, 3 consumers): partitions without a commit yet made the
    throughput unmeasurable, so no scale-up was ever checked. Their position is the log start, as
    their lag counts."""
    from lagpilot.decide import estimate

    parts0 = [PartitionOffsets(0, 0, 5000, 0), PartitionOffsets(1, 0, 5000, None)]
    parts1 = [PartitionOffsets(0, 0, 6000, 1500), PartitionOffsets(1, 0, 6000, None)]
    prev = estimate.update(None, snapshot(0.0, parts0, {}))
    est = estimate.update(prev, snapshot(15.0, parts1, {}))
    assert learn.throughput(prev, est) == pytest.approx(100.0)
    got = learn.after_decision(
        learn.Learned(), now=15.0, current=1, replicas=3, held=False, drains=(), prev=prev, est=est
    )
    assert got.check is not None and got.check.before == pytest.approx(100.0)


def test_the_status_view_is_what_the_model_declares() -> None:
    """status.startUps and the ScalingIneffective condition as the operator writes them validate
    against the status model (unknown fields forbidden, as the API server would prune them)."""
    from lagpilot.model.status import BatchConsumerGroupStatus, ConditionType
    from lagpilot.reconcile import report

    spec = parse_spec({**BASE, "drain": {"enabled": False}})
    s = step_mod.StepState(
        learned=learn.Learned(pod_start=(12.5, 14.0), limit=learn.Limit(0.0, 1, 1, 1.0, 2.0, 1.0))
    )
    out, _ = go(s, 0.0, [5000] * 3, [1000] * 3, 1, 1, spec)  # backlogged: the limit holds
    view = report.start_ups(out)
    assert view is not None and view["podStart"] == {
        "seconds": 14.0,
        "source": "Measured",
    }
    assert view["drainStart"] == {"seconds": 20.0, "source": "Default"}
    cond = report.scaling_ineffective(out)
    assert (cond.type, cond.status, cond.reason) == (
        ConditionType.SCALING_INEFFECTIVE.value,
        "True",
        "DownstreamLimited",
    )
    merged = [{"type": cond.type, "status": cond.status, "reason": cond.reason, "message": cond.message}]
    got = BatchConsumerGroupStatus.model_validate({"startUps": view, "conditions": merged})
    assert (
        got.start_ups is not None
        and got.start_ups.pod_start is not None
        and got.start_ups.pod_start.seconds == 14.0
    )


@pytest.mark.parametrize("lag_each, limited", [(400, False), (600, True)])
def test_a_backlog_under_one_poll_is_not_judged(lag_each: int, limited: bool) -> None:
    """No rise at all, but the lag left (3 x lag_each) is under what the group commits in one poll
    (100/s x 15 s = 1,500): it caught up, nothing held it back (the limit's own clearing rule)."""
    from lagpilot.decide import estimate

    check = learn.ScaleUpCheck(0.0, 1, 3, 100.0, 3, ready_s=30.0, committed_at_ready=0)
    per = [1000, 1000, 1000]  # 3,000 records over the 30 s window: 100/s
    est = estimate.update(None, snap(60.0, [p + lag_each for p in per], per, None))
    learned, _ = learn.observe(
        learn.Learned(check=check), now=60.0, current=3, ready=3, drains=(), prev=None, est=est, poll_s=15.0
    )
    assert (learned.limit is not None) is limited


# --- one scale-up at a time while the last one is unjudged ------------------------------------------


def _check_est(rate_now: float):  # type: ignore[no-untyped-def]
    from lagpilot.decide import estimate

    prev = estimate.update(None, snap(0.0, [5000] * 3, [0] * 3, None))
    return estimate.update(prev, snap(15.0, [5000 + int(rate_now * 5)] * 3, [500] * 3, None))


@pytest.mark.parametrize(
    "case, check_rate, current, rate_now, held_at",
    [
        ("pending, same load", 300.0, 6, 300.0, 6),
        ("pending, load up < 10 %", 300.0, 6, 320.0, 6),
        ("pending, load up > 10 %", 300.0, 6, 340.0, None),  # load the check does not explain
        ("count changed since", 300.0, 5, 300.0, None),  # the check is dropped at the next observation
        ("older memory without the rate", None, 6, 300.0, None),
    ],
)
def test_unjudged_table(
    case: str, check_rate: float | None, current: int, rate_now: float, held_at: int | None
) -> None:
    check = learn.ScaleUpCheck(0.0, 2, 6, 100.0, 3, rate=check_rate)
    got = learn.unjudged(learn.Learned(check=check), current=current, est=_check_est(rate_now))
    assert got == held_at, case
    assert learn.unjudged(learn.Learned(), current=current, est=_check_est(rate_now)) is None  # no check


def test_a_limited_world_holds_the_second_scale_up_until_the_first_is_judged() -> None:
    outs = limited_world(limit=100.0, per_consumer=50.0)
    first_up = next(o.replicas for _, cur, o, _ in outs if o.replicas > cur)
    judged = next(t for t, _, o, _ in outs if o.limit is not None)
    before = [(cur, o.replicas, o.decision.reason) for t, cur, o, _ in outs if t < judged]
    assert all(want <= max(cur, first_up) for cur, want, _ in before), before
    assert any(reason == "ScaleUpUnjudged" for _, _, reason in before)  # held while unjudged
