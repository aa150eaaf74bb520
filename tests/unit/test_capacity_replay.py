"""The demo run 20261126-184930-56d0 replayed through the consumer's CapacityEstimator and the operator's
capacity estimate (decide/estimate.py), before (the first batch's set-up counted, a 120 s half-life
on rises) and after (the set-up left out once a second batch is seen, 15 s).

The world: the run's trace (6/s for 30 s, 80/s to 60 s, 450/s to 150 s, 80/s to 195 s, 6/s to 225 s),
3 partitions, one consumer until t=42 s (the run's scale-up: 3 Ready then), then one per partition;
the demo handler (50 ms per call + 18 ms per record, maxRecords 50, batchTimeout 1 s), a 5 ms sink
write, a 4 ms commit, and 100 ms of one-off set-up (connection, DDL) in each consumer's first batch;
at t=150 s the drain has taken the backlog (the run's hand-offs). The operator polls every 5 s and
takes the median of the partitions' last reports. Run as a script to print the series:

    PYTHONPATH=... python tests/unit/test_capacity_replay.py
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lagpilot.decide.estimate import EstimatorConfig, update
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot_runtime.metrics import CapacityEstimator

MAX, TIMEOUT_S, POLL_S = 50, 1.0, 5.0
WRITE_S, COMMIT_S, SETUP_S = 0.005, 0.004, 0.1
PHASES = ((30.0, 6.0), (60.0, 80.0), (150.0, 450.0), (195.0, 80.0), (225.0, 6.0))  # (until t, records/s)
SCALE_UP_AT, DRAIN_TAKES_BACKLOG_AT, DRAIN_PLANNED_AT = 42.0, 150.0, 85.0
FULL = MAX / (0.050 + 0.018 * MAX + WRITE_S + COMMIT_S)  # a saturated consumer: 52.1/s
BEFORE = (EstimatorConfig(capacity_half_life_s=120.0), False)  # (operator, consumer's first_is_setup)
AFTER = (EstimatorConfig(), True)


def rate_at(t: float) -> float:
    return next((r for until, r in PHASES if t < until), 0.0)


@dataclass
class Consumer:
    partitions: tuple[int, ...]
    free_at: float
    pending: float = 0.0
    first: bool = True
    last_commit_s: float = 0.0
    ests: list[CapacityEstimator] = field(default_factory=list)  # one per configuration replayed


def replay(
    configs: list[tuple[EstimatorConfig, bool]], dt: float = 0.01
) -> list[tuple[float, float | None, list[float | None]]]:
    """(t, median report of the last configuration, [estimate per configuration]) at each operator poll."""

    def consumer(partitions: tuple[int, ...], t: float, pending: float = 0.0) -> Consumer:
        return Consumer(
            partitions,
            free_at=t,
            pending=pending,
            ests=[CapacityEstimator(max_records=MAX, first_is_setup=f) for _, f in configs],
        )

    cfg_list = [cfg for cfg, _ in configs]
    consumers = [consumer((0, 1, 2), 0.0)]
    reports: list[dict[int, float]] = [{} for _ in configs]
    states: list = [None] * len(cfg_list)
    out = []
    t, next_poll, end = 0.0, POLL_S, PHASES[-1][0]
    while t < end:
        if len(consumers) == 1 and t >= SCALE_UP_AT:
            left = consumers[0].pending
            consumers = [consumer((p,), t, left / 3) for p in range(3)]
        if abs(t - DRAIN_TAKES_BACKLOG_AT) < dt / 2:
            for c in consumers:
                c.pending = min(c.pending, rate_at(t) * len(c.partitions) / 3 * TIMEOUT_S)
        for c in consumers:
            c.pending += rate_at(t) * len(c.partitions) / 3 * dt
            if t < c.free_at:
                continue
            # a batch closes when full, or on the timeout with what arrived
            if c.pending >= MAX or (c.pending >= 1 and t - c.free_at >= TIMEOUT_S):
                n = int(min(MAX, c.pending))
                c.pending -= n
                handler = 0.050 + 0.018 * n + WRITE_S + (SETUP_S if c.first else 0.0)
                c.first = False
                for est, rep in zip(c.ests, reports, strict=True):
                    est.observe(n, handler + c.last_commit_s)  # batch_commit.py: + the previous commit
                    cap = est.capacity()
                    if cap is not None:
                        for p in c.partitions:
                            rep[p] = cap
                c.last_commit_s = COMMIT_S
                c.free_at = t + handler + COMMIT_S
        t = round(t + dt, 6)
        if t >= next_poll:
            offsets = [PartitionOffsets(p, 0, 0, 0) for p in range(3)]
            states = [
                update(s, snapshot(t, offsets, dict(rep)), cfg)
                for s, cfg, rep in zip(states, cfg_list, reports, strict=True)
            ]
            vals = sorted(reports[-1].values())
            median = (
                None
                if not vals
                else (
                    vals[len(vals) // 2]
                    if len(vals) % 2
                    else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
                )
            )
            out.append((t, median, [s.capacity_per_replica for s in states]))
            next_poll += POLL_S
    return out


def _at(series, t: float, i: int) -> float:
    return [est[i] for at, _, est in series if at <= t + 1e-6][-1]


def test_the_replayed_demo_plans_its_drain_on_the_consumers_capacity() -> None:
    series = replay([BEFORE, AFTER])
    reported = [m for at, m, _ in series if 45 <= at <= 150]
    assert min(reported) >= 0.93 * FULL and max(reported) <= FULL * (1 + 1e-9)  # the consumers were right
    before, after = _at(series, DRAIN_PLANNED_AT, 0), _at(series, DRAIN_PLANNED_AT, 1)
    assert before < 0.75 * FULL  # the run's operator: 35.6/s at its drain plan
    assert after >= 0.9 * FULL, f"the estimate at the drain plan (t={DRAIN_PLANNED_AT}) was {after:.1f}/s"
    highest = max(m for _, m, _ in series if m is not None)
    assert all(e[1] <= highest for _, _, e in series if e[1] is not None)


if __name__ == "__main__":
    series = replay([BEFORE, AFTER])
    print(f"full-batch throughput {FULL:.1f}/s; the operator's estimate before / after")
    print(f"{'t':>6} {'median report (after)':>22} {'before':>8} {'after':>8}")
    for at, median, (b, a) in series:
        if round(at) % 10 == 0 or round(at) == DRAIN_PLANNED_AT:
            fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            print(f"{at:6.0f} {fmt(median):>22} {fmt(b):>8} {fmt(a):>8}")
    for i, name in enumerate(("before", "after")):
        within = next((at for at, _, e in series if e[i] is not None and e[i] >= 0.9 * FULL), None)
        at_plan = _at(series, DRAIN_PLANNED_AT, i)
        print(
            f"{name}: at the drain plan (t={DRAIN_PLANNED_AT:.0f} s) {at_plan:.1f}/s; "
            f"within 10 % of {FULL:.1f}/s from t={within}"
        )
