"""Issue 25: a busy drain's roll-over (``drain_policy._outgrown``) and the launch's slots
(``drain_policy.burst_need`` / ``burst_slots``) judge the burst by one rate and one task capacity.

A busy drain's Job keeps the slots it was launched with; when the load outgrows them the drain
takes no next split and the next drain is planned with more slots (a roll-over, one start-up). A
steady burst (rates constant) is what the launch was sized for: its slots hold every later split,
so it never rolls over."""

from __future__ import annotations

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from lagpilot.decide.drain_policy import (
    BusyDrain,
    DrainPolicy,
    Lane,
    _outgrown,
    _Split,
    drain_need,
)
from lagpilot.decide.projection import PartitionLoad, project

CAP = 150.0


def _steady(rates: list[float], share: float, age_s: float) -> tuple[list[PartitionLoad], dict[int, float]]:
    """Loads of a steady burst ``age_s`` after the group last held it: each partition's backlog is
    what its rate brought beyond its consumer's share, its oldest record as old as that backlog
    (the backlog shows the rate itself: lag / age = rate)."""
    loads, ages = [], {}
    for p, r in enumerate(rates):
        lag = max(0.0, r - share) * age_s
        loads.append(PartitionLoad(p, lag, r))
        if lag > 0:
            ages[p] = lag / r
    return loads, ages


@settings(max_examples=500, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 8 * CAP), min_size=2, max_size=8),
    group=st.integers(1, 8),
    max_tasks=st.integers(2, 32),
    start_up=st.sampled_from([20.0, 90.0]),
    onset=st.floats(30.0, 240.0),
    later=st.floats(5.0, 60.0),
    split_factor=st.one_of(st.none(), st.integers(1, 8)),
)
@example(
    rates=[270.0, 60.0, 60.0],
    group=3,
    max_tasks=16,
    start_up=20.0,
    onset=120.0,
    later=15.0,
    split_factor=None,
)
# the CR's splitFactor caps the launch at 2 tasks a partition: a hot partition at 5x its share gets 2
# slots, and no later drain can get more
@example(
    rates=[750.0, 50.0, 50.0], group=3, max_tasks=16, start_up=20.0, onset=120.0, later=15.0, split_factor=2
)
def test_a_steady_burst_never_outgrows_the_slots_its_launch_was_sized_for(
    rates: list[float],
    group: int,
    max_tasks: int,
    start_up: float,
    onset: float,
    later: float,
    split_factor: int | None,
) -> None:
    policy = DrainPolicy(
        start_up_s=start_up,
        handoff_s=1.0,
        max_tasks=max_tasks,
        busy=True,
        min_backlog_records=0,
        split_factor=split_factor,
    )
    group = min(group, len(rates))
    idle = [PartitionLoad(p, 0.0, r) for p, r in enumerate(rates)]
    share = CAP / project(idle, group, CAP).per_consumer_partitions
    loads, ages = _steady(rates, share, onset)
    need = drain_need(
        loads,
        CAP,
        group_replicas=group,
        target_s=240.0,
        sla_s=300.0,
        policy=policy,
        now_s=0.0,
        oldest_age_s=ages,
    )
    assume(need is not None and not need.extension)
    assert need is not None
    slots = min(max_tasks, max(need.slots, need.tasks))  # handoff.job_slots: the Job's parallelism
    # later in the same burst: every lane ran dry, the rates unchanged
    loads, ages = _steady(rates, share, later)
    lanes = tuple(Lane(p, 0, 0.0) for p in need.partitions)
    x = _Split(
        loads=loads,
        capacity=CAP,
        busy=BusyDrain(lanes, slots),
        policy=policy,
        target_s=240.0,
        sla_s=300.0,
        share=share,
        task_cap=CAP,
        slot_cap=CAP,
        ages=ages,
    )
    assert not _outgrown(x), (need.tasks_by_partition, need.slots, slots)


def test_the_slots_are_judged_by_the_task_capacity_the_launch_sized_them_with() -> None:
    """One task capacity for a busy drain's life: the launch records the figure it sized the slots
    with (``DrainNeed.slot_rate`` -> ``status.drain.slotRate`` -> ``BusyDrain.slot_rate``); a next
    split's roll-over check judges the slots by it, not by the consumers' figure of the moment (it
    moves with their batches while the drain takes the backlog: the real test's roll-over)."""
    from lagpilot.decide.drain_policy import extension_need

    rates = [300.0, 0.0, 0.0]  # the real busy-drain test: p0 at 3x one consumer, one replica
    share = CAP / 3
    loads, ages = _steady(rates, share, 90.0)
    policy = DrainPolicy(start_up_s=90.0, handoff_s=1.0, max_tasks=16, busy=True)
    need = drain_need(
        loads, CAP, group_replicas=1, target_s=240.0, sla_s=300.0, policy=policy, now_s=0.0, oldest_age_s=ages
    )
    assert need is not None and need.slot_rate == CAP and need.to_dict()["slotRate"] == CAP
    slots = need.slots
    loads, ages = _steady(rates, share, 15.0)
    lanes = tuple(Lane(p, 0, 0.0) for p in need.partitions)
    kw = dict(group_replicas=1, target_s=240.0, policy=policy, sla_s=300.0, oldest_age_s=ages)
    # the consumers report a third of the capacity now (small batches): with the recorded figure the
    # slots still hold the burst they were sized for, so the drain takes its next split
    low = CAP / 3
    loads_low = [PartitionLoad(ld.partition, ld.lag, ld.rate) for ld in loads]
    split = extension_need(loads_low, low, BusyDrain(lanes, slots, need.slot_rate), **kw)  # type: ignore[arg-type]
    assert split is not None and split.partitions == (0,)
    # its cut follows the task capacity of the moment (when the tasks run dry, how many sub-ranges:
    # those beyond the slots queue on them, _holds_first); only the roll-over judges by slotRate
    # judged by the figure of the moment (a status without slotRate), the same slots look outgrown
    x = _Split(
        loads=loads_low,
        capacity=low,
        busy=BusyDrain(lanes, slots),
        policy=policy,
        target_s=240.0,
        sla_s=300.0,
        share=low / 3,
        task_cap=low,
        slot_cap=low,
        ages=ages,
    )
    assert _outgrown(x)


def test_the_slot_rate_is_recorded_at_the_plan_and_read_back_by_the_planner() -> None:
    import dataclasses

    from lagpilot.decide import handoff as h
    from lagpilot.decide.step import busy_drain_of
    from lagpilot.spec import parse_spec

    s = parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "t",
            "groupId": "g",
            "batch": {"maxRecords": 10},
            "drain": {"maxTasks": 16},
        }
    )
    o = h.Observed(
        generation=1,
        offsets={0: h.Offsets(200, 0, 1000)},
        group_empty=None,
        replicas=2,
        wanted=(0,),
        tasks={0: 2},
        slots=6,
        slot_rate=97.5,
        busy=True,
    )
    planned = h.next_action(s, None, o, 1000.0).status
    assert planned is not None and planned.slot_rate == 97.5
    back = h.DrainStatus.from_dict(planned.to_dict())
    assert back is not None and back.slot_rate == 97.5 and planned.to_dict()["slotRate"] == 97.5
    running = dataclasses.replace(back, phase=h.Phase.RUNNING)
    b = busy_drain_of([running])
    assert b is not None and b.slots == 6 and b.slot_rate == 97.5
    # a status without it (written before): the task capacity of the moment
    b = busy_drain_of([dataclasses.replace(running, slot_rate=0.0)])
    assert b is not None and b.slot_rate is None
    # a drain that is not busy records none
    plain = h.next_action(s, None, dataclasses.replace(o, busy=False), 1000.0).status
    assert (
        plain is not None
        and plain.slot_rate == 0.0
        and "slotRate" not in {k for k, v in plain.to_dict().items() if v is not None}
    )


# ---- the roll-over's own reason and message (status.drain.reason RollingOver, event DrainRollingOver) --


def _outgrown_drain() -> tuple[list[PartitionLoad], BusyDrain, dict[str, object]]:
    """Two partitions at 6x a consumer regrow 10 tasks' worth; the drain holds 4 slots (sized with 150/s)."""
    loads = [
        PartitionLoad(0, 12_000.0, 900.0),
        PartitionLoad(1, 12_000.0, 900.0),
        PartitionLoad(2, 0.0, 50.0),
    ]
    busy = BusyDrain((Lane(0, 0, 0.0), Lane(1, 0, 0.0), Lane(2, 0, 0.0)), slots=4, slot_rate=CAP)
    kw: dict[str, object] = dict(
        group_replicas=3,
        target_s=270.0,
        sla_s=300.0,
        oldest_age_s={0: 15.0, 1: 15.0},
        policy=DrainPolicy(start_up_s=90.0, handoff_s=1.0, max_tasks=16, busy=True),
    )
    return loads, busy, kw


def test_the_planner_names_a_roll_over_with_the_slots_held_and_needed_and_the_rate() -> None:
    from lagpilot.decide.drain_policy import extension_need, roll_over

    loads, busy, kw = _outgrown_drain()
    assert extension_need(loads, CAP, busy, **kw) is None  # type: ignore[arg-type]
    r = roll_over(loads, CAP, busy, **kw)  # type: ignore[arg-type]
    assert r is not None
    # 2 x 750 / 150 = 10 tasks of regrowth; a launch now: 2 x ceil(5 x 1.2) = 12 slots, and one for
    # partition 2, which the drain holds too
    assert (r.slots, r.needed, round(r.rate), round(r.regrowth, 1)) == (4, 13, 1800, 10.0)
    assert "4 slots" in r.message and "1800 records/s" in r.message and "13 slots" in r.message
    # a drain that takes its next split, or whose group holds the load, is no roll-over
    big = BusyDrain(busy.lanes, slots=16, slot_rate=CAP)
    assert extension_need(loads, CAP, big, **kw) is not None  # type: ignore[arg-type]
    assert roll_over(loads, CAP, big, **kw) is None  # type: ignore[arg-type]
    calm = [PartitionLoad(p, 0.0, 50.0) for p in range(3)]
    assert roll_over(calm, CAP, busy, **kw) is None  # type: ignore[arg-type]


def test_the_decision_carries_the_roll_over() -> None:
    from lagpilot.decide.scaling import ScalingObservation, ScalingPolicy, decide

    loads, busy, kw = _outgrown_drain()
    o = ScalingObservation(
        now_s=1000.0,
        partitions=3,
        current_replicas=3,
        loads=tuple(loads),
        capacity_per_replica=CAP,
        oldest_age_s={0: 15.0, 1: 15.0},
        drains_in_flight=1,
        tasks_in_flight=4,
        busy_partitions=(0, 1, 2),
        busy_drain=busy,
    )
    pol = ScalingPolicy(min_replicas=1, max_replicas=3, sla_s=300.0)
    d, _ = decide(o, pol, drain_policy=kw["policy"])  # type: ignore[arg-type]
    assert d.drain is None and d.roll_over is not None and d.roll_over.slots == 4
    big = ScalingObservation(**{**o.__dict__, "busy_drain": BusyDrain(busy.lanes, 16, CAP)})
    d2, _ = decide(big, pol, drain_policy=kw["policy"])  # type: ignore[arg-type]
    assert d2.roll_over is None and d2.drain is not None and d2.drain.extension


def test_a_roll_over_ends_the_drain_with_its_own_reason_message_and_event() -> None:
    from lagpilot.decide import handoff as h
    from lagpilot.decide.drain_policy import RollOver
    from lagpilot.spec import parse_spec

    sp = parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "t",
            "groupId": "g",
            "batch": {"maxRecords": 10},
            "drain": {"maxTasks": 16},
        }
    )
    now = 1_000_000.0
    d = h.DrainStatus(
        id=4,
        phase=h.Phase.RUNNING,
        busy=True,
        attempt=1,
        planned_at=now - 100,
        published_at=now - 99,
        handed_off_at=now - 98,
        started_at=now - 97,
        progress_at=now - 1,
        hand_off_path=h.PATH_ACK,
        slots=4,
        ranges=(h.PartitionRange(0, 1000, 400, 2),),
        sub_ranges=(h.SubProgress(0, 0, 400, 700, 700, 300), h.SubProgress(0, 1, 700, 1000, 1000, 300)),
    )

    def seen(roll: RollOver | None) -> h.Observed:
        return h.Observed(
            1,
            {0: h.Offsets(1000, 0, 1000)},
            False,
            2,
            (),
            h.JobObservation(h.JobState.ACTIVE, 1),
            {},
            None,
            tasks={0: 3},
            owner="uid",
            busy=True,
            part=h.NO_PART,
            roll_over=roll,
        )

    a = h.next_action(sp, d, seen(RollOver(slots=4, needed=12, rate=1800.0, regrowth=10.0)), now)
    assert a.kind is h.Kind.DELIVER and a.part is not None and a.part.final  # the same final part
    assert a.status is not None and a.status.reason == "RollingOver" and a.event is not None
    assert a.event[:2] == ("Normal", "DrainRollingOver") and a.event[2] == a.status.message
    for words in ("drain 4", "rolling over", "4 slots", "1800 records/s", "12 slots"):
        assert words in a.status.message, (words, a.status.message)
    # without a roll-over: the ordinary hand-back
    a = h.next_action(sp, d, seen(None), now)
    assert a.status is not None and a.status.reason == "HandingBack" and a.event is not None
    assert a.event[1] == "DrainHandedBack" and "holds partitions [0] again" in a.status.message


def test_the_real_tests_accept_a_roll_over_only_to_more_slots() -> None:
    """tests/real/test_busy_drain.py's check of the drains a burst saw (tests/real/busy_drains.py)."""
    from tests.real.busy_drains import roll_over_problems

    assert roll_over_problems({1}, {1: 8}, {1: {"Launched", "HandingBack"}}) == []
    assert roll_over_problems({1, 2}, {1: 4, 2: 9}, {1: {"RollingOver"}, 2: {"HandingBack"}}) == []
    # a second drain without more slots, or without the roll-over's reason, or a gap: refused
    assert roll_over_problems({1, 2}, {1: 8, 2: 8}, {1: {"RollingOver"}, 2: {"HandingBack"}})
    assert roll_over_problems({1, 2}, {1: 8, 2: 6}, {1: {"RollingOver"}, 2: {"HandingBack"}})
    assert roll_over_problems({1, 2}, {1: 4, 2: 9}, {1: {"HandingBack"}, 2: {"HandingBack"}})
    assert roll_over_problems({1, 3}, {1: 4, 3: 9}, {1: {"RollingOver"}, 3: {"HandingBack"}})
    assert roll_over_problems({1, 2}, {2: 9}, {1: {"RollingOver"}, 2: {"HandingBack"}})  # slots unseen
    # the final part's reason from its event (the status shows it only until the Job ends)
    from tests.real.busy_drains import end_reasons

    assert end_reasons(
        [
            ("DrainRollingOver", "drain 1: every sub-range done; rolling over: its 4 slots ..."),
            ("DrainHandedBack", "drain 2: every sub-range done and the group holds ..."),
            ("DrainLaunched", "drain 3: ..."),
            ("DrainRollingOver", "garbled"),
        ]
    ) == {1: {"RollingOver"}, 2: {"HandingBack"}}
