"""A consumer that really slows down (a slower downstream) must not be believed fast for minutes.

decide/estimate.py ``_capacity`` followed a fall of the consumers' reports with a 120 s half-life:
after the reports fall 100 -> 40 records/s per replica under a steady produce rate the slower group
cannot hold, the operator kept its replica count (and said nothing of a risk) for minutes while the
backlog grew. Over-estimating capacity is the SLA risk. Driven through ``step`` as the operator
drives it: a world whose group commits min(produce, ready x true capacity), the consumers reporting
their true capacity.
"""

from __future__ import annotations

import math

import pytest

from lagpilot.decide import step as step_mod
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.spec import parse_spec

BASE = {"kafka": {"bootstrapServers": "127.0.0.1:9092"}, "topic": "t", "groupId": "g"}
N, POLL_S, POD_START_S = 12, 15.0, 30.0


def world(rate: float, before: float, after: float, replicas: int, drop_poll: int, polls: int):  # type: ignore[no-untyped-def]
    """``rate`` records/s over N partitions; each consumer handles ``before`` records/s until poll
    ``drop_poll``, ``after`` from then on (and reports it). Returns (poll, current, decision) per poll."""
    spec = parse_spec(
        {
            **BASE,
            "drain": {"enabled": False},
            "catchUpSLASeconds": 600,
            "scaling": {"minReplicas": 1, "maxReplicas": N},
        }
    )
    pol = step_mod.Policies.from_group_spec(spec, step_mod.Model(pod_start_s=POD_START_S))
    ends, committed = [0.0] * N, [0.0] * N
    pods: list[float] = [-math.inf] * replicas
    s, outs = step_mod.StepState(), []
    for k in range(polls):
        t = k * POLL_S
        per = before if k < drop_poll else after
        ready = sum(1 for r in pods if r <= t)
        parts = [
            PartitionOffsets(i, 0, int(e), int(c))
            for i, (e, c) in enumerate(zip(ends, committed, strict=True))
        ]
        obs = step_mod.StepObservation(
            snapshot(t, parts, {i: per for i in range(min(N, len(pods)))}),
            len(pods),
            (),
            ready_replicas=ready,
        )
        out, s = step_mod.step(s, obs, pol, t)
        outs.append((k, len(pods), out))
        if out.replicas > len(pods):
            pods += [t + POD_START_S] * (out.replicas - len(pods))
        elif out.replicas < len(pods):
            pods = sorted(pods)[: out.replicas]
        for sub in range(int(POLL_S)):  # one-second steps to the next poll
            per_s = before if k + (sub + 1) / POLL_S <= drop_poll else after
            ready = sum(1 for r in pods if r <= t + sub)
            for i in range(N):
                ends[i] += rate / N
            lagging = [i for i in range(N) if ends[i] - committed[i] > 0]
            tput = ready * per_s
            for i in lagging:
                committed[i] = min(ends[i], committed[i] + tput / len(lagging))
    return outs


@pytest.mark.parametrize(
    "case, rate, before, after",
    [
        ("a slower downstream: 100 -> 40/s per replica", 240.0, 100.0, 40.0),
        ("a milder fall: 100 -> 60/s per replica", 240.0, 100.0, 60.0),
    ],
)
def test_a_fall_of_the_reported_capacity_scales_up_within_two_polls(
    case: str, rate: float, before: float, after: float
) -> None:
    drop = 20  # five minutes of the steady state first
    outs = world(rate, before, after, replicas=4, drop_poll=drop, polls=drop + 8)
    steady = [(cur, o.replicas, o.decision.reason) for k, cur, o in outs if drop - 4 <= k < drop]
    # the precondition: before the drop the group holds the rate at its count, not at risk
    assert all(want == cur for cur, want, _ in steady), steady
    cur = outs[drop][1]
    assert cur * after < rate, f"{case}: the slower group would still hold the rate (test set-up)"
    # within 2 polls of the drop: a scale-up asked for, or the projection says the SLA is at risk
    seen = [
        (k - drop, o.replicas, o.decision.reason, o.decision.at_risk) for k, _, o in outs[drop : drop + 3]
    ]
    assert any(want > cur or risk for _, want, _, risk in seen), f"{case}: {seen}"
