"""Issue 25 item 3: the estimator's step response, through the decision step (a unit table).

The README demo's shape: 3 partitions, consumers of ~52.6 records/s (the demo's handler), SLA 120 s,
polled every 15 s; the produce rate steps 6 -> 450 -> 80 -> 6 records/s, each change 5 s after a poll
(a step inside a poll interval, not on its edge). The group (3 replicas, never changed here: the table
is about what the step *sees*) consumes what it can; at the end of the 450 phase a drain takes the
backlog (the hand-off moves the group's offsets to the split), as the demo's drains did.

Asserted: the estimated produce rate is within 10 % of a rise 2 polls after it; CatchUpAtRisk is
false (and the reason never SLAUnreachable) from the 2nd poll after the backlog cleared on.
Before: 228/s two polls into the 450 phase (30 s half-life) and an infinite projection, at risk,
for 2 minutes after the backlog had gone (209/155 records/s in the demo's samples).
"""

from __future__ import annotations

from lagpilot.decide import step as step_mod
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.spec import parse_spec

SPEC = parse_spec(
    {
        "kafka": {"bootstrapServers": "127.0.0.1:9092"},
        "topic": "t",
        "groupId": "g",
        "catchUpSLASeconds": 120,
        "scaling": {"maxReplicas": 3, "pollIntervalSeconds": 15},
    }
)
P, CAP, POLL = 3, 52.6, 15
PHASES = ((65, 6.0), (95, 450.0), (90, 80.0), (150, 6.0))  # (seconds, records/s): changes at 65, 160, 250
DRAIN_AT = 160  # the drain's split: the backlog leaves the group


def table() -> list[dict]:
    ends, done = [0.0] * P, [0.0] * P
    state, rows, t = step_mod.StepState(), [], 0
    bounds, acc = [], 0
    for secs, rate in PHASES:
        bounds.append((acc, acc + secs, rate))
        acc += secs
    while t < acc:
        rate = next(r for a, b, r in bounds if a <= t < b)
        for i in range(P):
            ends[i] += rate / P
            done[i] = min(ends[i], done[i] + CAP)
        t += 1
        if t == DRAIN_AT:
            done = list(ends)
        if t % POLL == 0:
            parts = [PartitionOffsets(i, 0, int(ends[i]), int(done[i])) for i in range(P)]
            obs = step_mod.StepObservation(snapshot(t, parts, {i: CAP for i in range(P)}), 3)
            out, state = step_mod.step(state, obs, SPEC, float(t))
            assert state.estimator is not None
            rows.append(
                {
                    "t": t,
                    "rate": rate,
                    "estimate": round(state.estimator.produce_rate, 1),
                    "lag": int(sum(e - d for e, d in zip(ends, done, strict=False))),
                    "at_risk": out.decision.at_risk,
                    "reason": out.decision.reason,
                }
            )
    return rows


def _polls_after(rows: list[dict], t0: float, k: int) -> dict:
    return [r for r in rows if r["t"] > t0][k - 1]


def test_step_response_table() -> None:
    rows = table()
    shown = "\n".join(str(r) for r in rows)
    # up: 6 -> 450 at t = 65: within 10 % at the 2nd poll after the change (t = 90)
    up = _polls_after(rows, 65, 2)
    assert abs(up["estimate"] - 450) <= 45, shown
    # and stays there while the rate holds (a steady rate is no fall to the window's average)
    assert all(abs(r["estimate"] - 450) <= 45 for r in rows if up["t"] <= r["t"] <= 155), shown
    # the backlog is gone at t = 160 (the drain's split): not at risk from the 2nd poll after it on,
    # through the 450 -> 80 and the 80 -> 6 falls
    clear = _polls_after(rows, DRAIN_AT, 2)
    later = [r for r in rows if r["t"] >= clear["t"]]
    assert all(r["lag"] < 500 for r in later), shown  # the table's premise: no backlog from here on
    assert not any(r["at_risk"] for r in later), shown
    assert not any(r["reason"] == "SLAUnreachable" for r in later), shown
    # the premise that makes the test bite: before the drain the group was at risk (450/s > 3 x 52.6)
    assert any(r["at_risk"] for r in rows if r["t"] < DRAIN_AT), shown
