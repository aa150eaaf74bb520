"""A busy drain's roll-over, end to end (issue 25; docs/drain.md "Busy drains", docs/decision.md
"Busy drains: the slots"): operator (subprocess, docs/rbac.md) + kube-apiserver + the pods
(consumers, the drain Jobs' pods) on the real node (`pods`) + Kafka + Spark (local mode in the Job's pod) + PostgreSQL.

Partition 0 is fed at 250 records/s (2.5x what one consumer processes, ~100/s) until the busy drain
the operator plans for it runs and took a next split; its Job holds the slots its launch asked for
that burst (``status.drain.slots``). Then the burst grows to 900 records/s: its regrowth keeps ~9
tasks busy, beyond those slots, and a new launch would hold more (``maxTasks`` 12): the planner
takes no further split (``drain_policy._outgrown``), the drain ends at its next part boundary with
its own reason (``status.drain.reason`` ``RollingOver``, event ``DrainRollingOver``, the slots held
and needed and the rate in its message) and the next drain is planned with more slots. That the
roll-over fired is asserted first (its reason in the status and its event); then that the second
drain held more slots than the first, that the last drain handed partition 0 back after the burst,
and that the delivery ledger is exact: every produced offset exactly once (lost 0, duplicated 0),
whichever path processed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.busy_drains import end_reasons, roll_over_problems
from tests.real.test_drain_operator import PARTS, Scenario, crd, produce, replay_runs, scenario  # noqa: F401 - fixtures too
from tests.real.test_operator_e2e import events_for

pytestmark = [pytest.mark.real, pytest.mark.slow]

FIRST = 250  # records/s on partition 0 at the burst's onset: the first drain's launch is sized for it
GROWN = 900  # then: ~9 tasks of regrowth, beyond the first drain's slots, within maxTasks 12
AFTER = 20  # after the burst: the group holds it alone
SLA_S = 240  # as tests/real/test_busy_drain.py (a cold start-up took 110 s at load 20)


def test_a_busy_drain_whose_burst_outgrew_its_slots_rolls_over_to_a_drain_with_more_slots(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str
) -> None:
    # no splitFactor cap (12 = maxTasks): a new drain may hold more slots than the first (with the
    # scenario's splitFactor 4 a partition's drain holds at most 4: no roll-over can bring more)
    s = scenario(
        {0: 1000, 1: 100, 2: 100},
        live={0: 0, 1: 0, 2: 0},
        sla_s=SLA_S,
        drain={"busy": True, "splitFactor": 12, "maxTasks": 12},
    )
    rate = {0: FIRST}
    stop = threading.Event()

    def feed() -> None:  # paced by elapsed time at the rate of the moment (a rise is no catch-up burst)
        last, owed = time.monotonic(), 0.0
        while not stop.wait(0.2):
            now = time.monotonic()
            owed += rate[0] * (now - last)
            last = now
            n = int(owed)
            if n <= 0:
                continue
            try:
                produce(s.bootstrap, s.topic, {0: n}, s.produced)
                owed -= n
            except Exception as exc:  # noqa: BLE001 - a broker hiccup must not end the feed silently
                s.live_errors.append(repr(exc))

    seen: dict[str, Any] = {"ids": set(), "slots": {}, "reasons_of": {}, "rounds": {}, "messages": {}}

    def watch() -> dict[str, Any]:
        s.op.ensure()
        try:
            d = s.drain()
        except Exception:  # noqa: BLE001 - apiserver hiccup: poll again
            return {}
        if d:
            i = d.get("id")
            seen["ids"].add(i)
            seen["reasons_of"].setdefault(i, set()).add(d.get("reason"))
            seen["messages"].setdefault(d.get("reason"), d.get("message"))
            if d.get("phase") == "Running":
                seen["slots"][i] = max(seen["slots"].get(i, 0), int(d.get("slots") or 0))
            seen["rounds"][i] = max(seen["rounds"].get(i, 0), int(d.get("round") or 0))
        return d

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        wait_until(
            lambda: (
                lambda d: (
                    d.get("busy") is True and d.get("phase") == "Running" and int(d.get("round") or 0) >= 1
                )
            )(watch()),
            "drain 1 running busy with a next split taken",
            600,
            interval=1,
        )
        first = min(seen["ids"])
        print("onset:", seen)
        rate[0] = GROWN  # the burst grows beyond the slots drain 1 holds
        wait_until(
            lambda: (lambda d: d.get("id") != first and d.get("phase") == "Running")(watch()),
            "drain 1 ended (a roll-over) and a new drain running",
            900,
            interval=1,
        )
        wait_until(
            lambda: watch() is not None and seen["rounds"].get(max(seen["ids"]), 0) >= 1,
            "the new drain takes a next split of the grown burst",
            600,
            interval=1,
        )
    finally:
        print("burst:", seen, "errors:", s.live_errors[-3:], "produced:", s.produced)
    rate[0] = AFTER  # the burst ends
    try:
        wait_until(
            lambda: (
                lambda d: (
                    d.get("phase") in ("Verified", "Failed", "Cancelled") and d.get("id") == max(seen["ids"])
                )
            )(watch()),
            "the last drain to end",
            900,
            interval=1,
        )
        d = s.drain()
        assert d["phase"] == "Verified", d
        time.sleep(10)  # the trickle goes on after the hand-back: the group alone takes it
    finally:
        stop.set()
        feeder.join(30)
    s.wait_caught_up(600)
    print(
        "drains:",
        sorted(seen["ids"]),
        "slots:",
        seen["slots"],
        "reasons:",
        seen["reasons_of"],
        "roll-over:",
        seen["messages"].get("RollingOver"),
    )

    # the roll-over fired: its event (durable), with a message naming the slots held and needed and
    # the rate, and the same reason in status.drain (seen unless a poll missed the seconds between
    # the final part and the Job's end)
    every = [(e.reason, e.message) for e in events_for(s.core, s.ns, s.name)]
    rolled = [m for r, m in every if r == "DrainRollingOver" and m.startswith(f"drain {first}:")]
    assert rolled, every
    message = rolled[0]
    assert "rolling over" in message and f"its {seen['slots'][first]} slots" in message, message
    assert "records/s" in message and "the next drain is planned with" in message, message
    print(
        "status reason seen:", "RollingOver" in seen["reasons_of"][first], seen["messages"].get("RollingOver")
    )
    assert seen["messages"].get("RollingOver") in (None, message), seen["messages"]
    for i, why in end_reasons(every).items():
        seen["reasons_of"].setdefault(i, set()).update(why)
    # then: a chain of roll-overs each to more slots, the last drain handed the partition back
    ids = sorted(seen["ids"])
    assert len(ids) >= 2 and not roll_over_problems(seen["ids"], seen["slots"], seen["reasons_of"]), (
        roll_over_problems(seen["ids"], seen["slots"], seen["reasons_of"]),
        seen,
    )
    assert seen["slots"][ids[1]] > seen["slots"][first], seen["slots"]
    assert "HandingBack" in seen["reasons_of"][ids[-1]], seen

    # the ledger: every produced offset exactly once, whichever path processed it
    led = s.ledger(postgres_dsn)
    rows, runs, expected, lost, duplicated, outside = (
        led.rows,
        led.runs,
        led.expected,
        led.lost,
        led.duplicated,
        led.outside,
    )
    drained = sum(1 for p, _, src, _ in rows if src == "drain" and p == 0)
    print(
        f"roll-over: produced {len(expected)} (p0 {s.produced.get(0)}), rows {len(rows)}, lost {lost}, "
        f"duplicated {duplicated} {runs[:5]}, drained on p0 {drained}"
    )
    assert (lost, duplicated, outside) == (0, 0, 0), led.missing[:20]
    assert drained > 0
    # handed back: the records produced after the last drain ended are the group's
    end = max(at for _, _, src, at in rows if src == "drain")
    assert any(p == 0 and src == "consumer" and at > end for p, _, src, at in rows)
