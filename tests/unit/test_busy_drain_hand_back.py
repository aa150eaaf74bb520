"""Issue 25 item 2: a busy drain hands its partitions back only when the capped group alone meets
the target again, never in the middle of a burst (docs/drain.md "Busy drains").

The cycle here is the operator's (``reconcile._cycle`` -> ``act.drain.run_in_cycle``), pure: the
step plans on the status the cycle read (``StepObservation.drains``: the lanes of the running drain
as the previous cycle wrote them), the hand-off then decides on the progress it reads fresh from
Kafka (``Observed.progress``), with ``wanted`` and ``roll_over`` from the step's decision.

CI of stop 34 (tests/real/test_busy_drain.py, test_busy_drain_rollover.py) saw drain 1 hand p0 back
(``HandingBack``) while p0 was fed at 2.5-9x one consumer, and a second drain (a new start-up)
follow. ``_deliver`` read "no next split this cycle" as "the group holds the partitions", but the
planner takes no split in a cycle for reasons that say nothing of that:

- **stale lanes**: the planner sees the status the cycle read, whose lane still holds more work than
  a poll and the hand-off (``_split_picks``: "split it then"), while the progress read afterwards in
  the same cycle shows every sub-range done: a tiny next split (902 records on 3 tasks, the roll-over
  run) or a cycle that came late (an operator restart, a loaded machine) and the final part goes out
  the same cycle;
- **an estimator that is not warm**: an operator that starts without its memory has no rate yet
  (every partition at 0 records/s): the group "holds" everything;
- **a momentary rate**: the rate measured over one 2 s poll dips (a producer stall): the group
  "holds" the partition for that one cycle.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lagpilot.decide import handoff as h
from lagpilot.decide import step as step_mod
from lagpilot.decide.drain_policy import RollOver
from lagpilot.decide.lag import PartitionOffsets, snapshot
from lagpilot.spec import parse_spec

CAP = 100.0  # records/s of one consumer (the real tests' 1 s handler per 100-record batch)
HOT = 300.0  # p0's rate during the burst: 3x one consumer
POLL = 2.0
T0 = 1_000_000.0
SPLIT = 60_000  # p0's last split: the group consumes from here


def spec() -> Any:
    return parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "t",
            "groupId": "g",
            "batch": {"maxRecords": 100, "timeoutMs": 500},
            "catchUpSLASeconds": 240,
            "scaling": {"minReplicas": 1, "maxReplicas": 3, "pollIntervalSeconds": int(POLL)},
            "drain": {"busy": True, "splitFactor": 4, "maxTasks": 12, "minBacklogRecords": 1000},
        }
    )


def policies() -> step_mod.Policies:
    return step_mod.Policies.from_group_spec(spec(), step_mod.Model(drain_busy=True))


def running(left: list[int]) -> h.DrainStatus:
    """Drain 1, busy, 4 slots, round 1: p0's last split [SPLIT - 4000, SPLIT) in 4 sub-ranges of
    1,000, each with ``left`` records still to process as the status records them."""
    subs = tuple(
        h.SubProgress(
            0, k, SPLIT - 4000 + 1000 * k, SPLIT - 3000 + 1000 * k, SPLIT - 3000 + 1000 * k - n, 1000 - n
        )
        for k, n in enumerate(left)
    )
    return h.DrainStatus(
        id=1,
        phase=h.Phase.RUNNING,
        busy=True,
        attempt=1,
        round=1,
        slots=4,
        slot_rate=CAP,
        planned_at=T0 - 300,
        published_at=T0 - 299,
        handed_off_at=T0 - 298,
        started_at=T0 - 297,
        progress_at=T0 - 1,
        hand_off_path=h.PATH_ACK,
        ranges=(h.PartitionRange(0, SPLIT, SPLIT - 4000, 4),),
        sub_ranges=subs,
    )


def done(d: h.DrainStatus) -> dict[tuple[int, int], tuple[int, int]]:
    """Every sub-range at its end, as the progress groups show it."""
    return {(s.partition, s.index): (s.end, s.end - s.start) for s in d.sub_ranges}


def snap(at: float, end0: int, lag0: int) -> Any:
    """p0 at ``end0`` with ``lag0`` behind it (the group's share since the split), p1 and p2 idle."""
    parts = [
        PartitionOffsets(0, 0, end0, end0 - lag0, at - 3.0),
        PartitionOffsets(1, 0, 100, 100),
        PartitionOffsets(2, 0, 100, 100),
    ]
    return snapshot(at, parts, {0: CAP, 1: CAP, 2: CAP})


def cycle(
    state: step_mod.StepState,
    d: h.DrainStatus,
    at: float,
    end0: int,
    lag0: int,
    progress: dict[tuple[int, int], tuple[int, int]],
) -> tuple[h.Action, step_mod.StepState]:
    """One operator cycle: the step on the status read (``d``), then the hand-off's next action with
    the step's decision (its ``hand_back`` too: ``reconcile._cycle`` passes it to ``run_drain``) and
    the progress read fresh (``act.drain.run_in_cycle`` / ``observe``)."""
    s = snap(at, end0, lag0)
    out, state = step_mod.step(state, step_mod.StepObservation(s, 3, (d,), ready_replicas=3), policies(), at)
    need = out.decision.drain
    offsets = {p.partition: h.Offsets(p.committed, p.low, p.end) for p in s.partitions}
    obs = h.Observed(
        generation=1,
        offsets=offsets,
        group_empty=None,
        replicas=3,
        wanted=tuple(need.partitions) if need is not None else (),
        tasks=dict(need.tasks_by_partition) if need is not None else {},
        job=h.JobObservation(h.JobState.ACTIVE, 1, running=1),
        progress=progress,
        owner="uid",
        busy=True,
        part=h.PartSeen(d.round, False),
        roll_over=out.decision.roll_over,
        hand_back=out.hand_back,
    )
    return h.next_action(spec(), d, obs, at), state


def warm_state(until: float, end0: int, rate: float = HOT) -> tuple[step_mod.StepState, int]:
    """The controller's memory after a minute of polls of the burst (the estimator warm), its last
    poll one poll before ``until`` with p0's end at ``end0``."""
    state = step_mod.StepState()
    d = running([0, 0, 0, 0])
    for k in range(30, 0, -1):  # the last poll at ``until - POLL``, p0 then at ``end0``
        at = until - k * POLL
        s = snap(at, end0 - int((k - 1) * POLL * rate), 600)
        seen = step_mod.StepObservation(s, 3, (d,), ready_replicas=3)
        _, state = step_mod.step(state, seen, policies(), at)
    return state, end0


def after(a: h.Action, d: h.DrainStatus, progress: dict[tuple[int, int], tuple[int, int]]) -> h.DrainStatus:
    """The status the next cycle reads: what the action wrote, else the progress it recorded."""
    return a.status if a.status is not None else h.with_progress(d, progress)


@pytest.mark.parametrize("case", ["stale-lanes", "restart-without-memory", "momentary-dip"])
def test_a_busy_drain_is_not_handed_back_in_the_middle_of_a_burst(case: str) -> None:
    # p0 fed at 3x one consumer all along: the capped group (3 replicas, one per partition) cannot
    # hold it; drain 1's 4 slots hold its regrowth (2 tasks): no roll-over either
    state, end = warm_state(T0, SPLIT + 600)
    stale = [0, 0, 0, 0]
    if case == "stale-lanes":
        # the status the cycle read: 1,300 records left on its 4 tasks (3.25 s at 100/s a task, more
        # than a poll + the hand-off); the progress read in the same cycle: all done
        stale = [400, 300, 300, 300]
    elif case == "restart-without-memory":
        state = step_mod.StepState()  # the operator's first cycle without its memory: no rate yet
    d = running(stale)
    at = T0
    seen: list[tuple[str, str]] = []
    for k in range(4):
        rate = HOT
        if case == "momentary-dip" and k == 0:
            rate = 30.0  # one 2 s poll in which the producer stalled
        end += int(POLL * rate)
        a, state = cycle(state, d, at, end, 600, done(d))
        seen.append((a.kind.value, a.reason))
        assert not (a.part is not None and a.part.final), (case, k, a.reason, a.message, seen)
        if a.status is not None and a.status.extension is not None:
            break  # the next split goes to the same drain
        d = after(a, d, done(d))
        at += POLL
    else:
        pytest.fail(f"{case}: no next split within 4 polls of a steady burst: {seen}")
    assert a.status is not None and a.status.id == 1 and a.status.extension.partitions == [0], seen
    assert a.reason == "NextSplitPlanned", seen


def test_the_premise_holds_the_planner_wants_the_next_split_on_fresh_lanes() -> None:
    """The same burst with the status the cycle read already showing every sub-range done: the
    planner takes the next split at once (the cases above differ only in what the cycle read)."""
    state, end = warm_state(T0, SPLIT + 600)
    d = running([0, 0, 0, 0])
    a, _ = cycle(state, d, T0, end + int(POLL * HOT), 600, done(d))
    assert a.reason == "NextSplitPlanned" and a.status is not None and a.status.extension is not None
    assert dataclasses.replace(a.status, extension=None).id == 1


# ---- the hold: an idle busy drain keeps its slots for a new drain's start-up, then hands back -------


def test_once_the_burst_is_over_the_drain_holds_its_slots_for_the_hold_then_hands_back() -> None:
    state, end = warm_state(T0, SPLIT + 600, rate=20.0)  # p0 at 20/s: its consumer holds it
    d = running([0, 0, 0, 0])
    a, state = cycle(state, d, T0, end + 40, 0, done(d))
    hold = step_mod.step(
        state, step_mod.StepObservation(snap(T0, end + 40, 0), 3, (d,), ready_replicas=3), policies(), T0
    )[0].hand_back
    # the model's drain start-up (20 s; no start-up learned yet), at least two 2 s polls
    assert hold == h.HandBack(20.0, True)
    assert a.kind is h.Kind.NONE and a.part is None and a.status is not None
    assert (a.status.reason, a.status.idle_since) == ("HoldingSlots", T0)
    assert "holding its 4 slots" in a.message
    d = a.status
    at = T0
    while at + POLL < T0 + hold.hold_s:  # within the hold: no part, nothing written
        at += POLL
        a, state = cycle(state, d, at, end + 40, 0, done(d))
        assert a.part is None and a.status is None, (at - T0, a)
    a, state = cycle(state, d, T0 + hold.hold_s, end + 40, 0, done(d))
    assert a.kind is h.Kind.DELIVER and a.part is not None and a.part.final and a.reason == "HandingBack"


def test_the_hold_survives_an_operator_restart_and_never_ends_on_an_unmeasured_rate() -> None:
    d = dataclasses.replace(running([0, 0, 0, 0]), idle_since=T0 - 100.0, reason="HoldingSlots")
    # status.drain.idleSince: written and read back (a restarted operator resumes the same hold)
    back = h.DrainStatus.from_dict(d.to_dict())
    assert back is not None and back.idle_since == T0 - 100.0
    rule = h.HandBack(hold_s=60.0, warm=True)
    assert h.hand_back_hold(back, rule, T0) is None  # held 100 s of 60: hand back now
    assert h.hand_back_hold(back, dataclasses.replace(rule, warm=False), T0) == T0 - 100.0  # not on no rate
    # the operator's first cycle without its memory: the estimator has no rate, the hold goes on
    a, _ = cycle(step_mod.StepState(), back, T0, SPLIT + 40, 0, done(back))
    assert a.part is None, a


def test_a_roll_over_is_not_held() -> None:
    d = running([0, 0, 0, 0])
    rolled = RollOver(slots=4, needed=9, rate=900.0, regrowth=8.0)
    obs = h.Observed(
        generation=1,
        offsets={0: h.Offsets(SPLIT, 0, SPLIT + 900)},
        group_empty=None,
        replicas=3,
        job=h.JobObservation(h.JobState.ACTIVE, 1, running=1),
        progress=done(d),
        owner="uid",
        busy=True,
        part=h.PartSeen(1, False),
        roll_over=rolled,
        hand_back=h.HandBack(90.0, True),
    )
    a = h.next_action(spec(), d, obs, T0)
    assert a.kind is h.Kind.DELIVER and a.part is not None and a.part.final and a.reason == "RollingOver"


def test_a_next_split_wanted_during_the_hold_goes_to_the_same_drain_and_ends_the_hold() -> None:
    state, end = warm_state(T0, SPLIT + 600)
    d = dataclasses.replace(running([0, 0, 0, 0]), idle_since=T0 - 10.0, reason="HoldingSlots")
    a, _ = cycle(state, d, T0, end + int(POLL * HOT), 600, done(d))
    assert a.reason == "NextSplitPlanned" and a.status is not None and a.status.id == 1
    assert a.status.idle_since is None and a.status.to_dict()["idleSince"] is None


@pytest.mark.parametrize(
    "start_up,poll,want",
    [
        (90.0, 15.0, 90.0),  # a cold start-up: hold for it
        (3.0, 15.0, 30.0),  # a warm runtime's start-up: at least two polls
        (20.0, 2.0, 20.0),
        (600.0, 15.0, h.HOLD_MAX_S),  # bounded: below the driver's own wait for a part
    ],
)
def test_the_hold_is_a_new_drains_start_up_within_bounds(start_up: float, poll: float, want: float) -> None:
    assert h.hold_seconds(start_up, poll) == want


def test_the_hold_ends_before_the_drivers_own_wait_for_a_part() -> None:
    from lagpilot_runtime.drain.job import PART_WAIT_S

    assert h.HOLD_MAX_S < PART_WAIT_S
