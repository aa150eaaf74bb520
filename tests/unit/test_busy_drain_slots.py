"""Issue 25: a busy drain's task slots (``status.drain.slots``) are recorded by the operator's own
launch, and are the Job's true parallelism.

A busy drain's Job keeps the parallelism it was launched with (its driver's session: next splits run
on those slots, docs/drain.md "Busy drains"); the planner budgets next splits within
``status.drain.slots`` (``step.busy_drain_of``). The operator's launch (``handoff._launch``) records
that figure, computed by the one function the Job manifest uses (``drain_manifests.drain_plan_for``),
so the two always agree."""
from __future__ import annotations

import dataclasses

import pytest

from lagpilot.act.drain_manifests import drain_plan_for
from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import DrainStatus, JobObservation, JobState, Kind, Observed, Offsets, Phase, SubProgress
from lagpilot.decide.step import busy_drain_of
from lagpilot.spec import parse_spec

NOW = 1_000_000.0


def spec(**drain: object):  # noqa: ANN201
    raw = {"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g",
           "batch": {"maxRecords": 10}, "drain": {"maxTasks": 16, **drain}}
    return parse_spec(raw)


SUBS = (SubProgress(0, 0, 200, 600, 200), SubProgress(0, 1, 600, 1000, 600), SubProgress(1, 0, 0, 300, 0))
HANDED = DrainStatus(id=4, phase=Phase.HANDED_OFF, busy=True, planned_at=NOW - 10, published_at=NOW - 9,
                     handed_off_at=NOW - 1, hand_off_path=h.PATH_ACK,
                     ranges=(h.PartitionRange(0, 1000, 200, 2), h.PartitionRange(1, 300, 0, 1)), sub_ranges=SUBS)


def obs(job: JobObservation | None = None) -> Observed:
    return Observed(generation=1, offsets={0: Offsets(1000, 0, 1200), 1: Offsets(300, 0, 300)}, group_empty=None,
                    replicas=2, job=job, busy=True)


@pytest.mark.parametrize("max_tasks,want", [(16, 3), (2, 2)])
def test_the_launch_of_a_busy_drain_records_the_jobs_parallelism_as_its_slots(max_tasks: int, want: int) -> None:
    s = spec(maxTasks=max_tasks)
    a = h.next_action(s, HANDED, obs(), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None
    assert a.status.slots == want
    # the Job created from the status the launch writes runs exactly that many tasks at once
    assert drain_plan_for(s, a.status, "uid").parallelism == a.status.slots
    # and the planner sees those slots (not one per unfinished sub-range, not maxTasks)
    b = busy_drain_of([a.status])
    assert b is not None and b.slots == want


def test_a_retried_busy_drain_records_the_slots_of_its_new_job() -> None:
    s = spec()
    failed = dataclasses.replace(HANDED, phase=Phase.RUNNING, attempt=1, started_at=NOW - 1, progress_at=NOW - 1,
                                 slots=0, retry_at=NOW - 1)  # launched by an operator that wrote none
    a = h.next_action(s, failed, obs(JobObservation(JobState.FAILED, 0)), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None and a.attempt == 2
    assert a.status.slots == drain_plan_for(s, a.status, "uid").parallelism == 3


def test_a_drain_that_is_not_busy_records_no_slots() -> None:
    s = spec()
    a = h.next_action(s, dataclasses.replace(HANDED, busy=False), obs(), NOW)
    assert a.kind is Kind.LAUNCH and a.status is not None
    assert a.status.slots == 0 and "slots" not in {k for k, v in a.status.to_dict().items() if v is not None}


def test_the_simulator_launches_with_the_slots_the_operators_launch_records() -> None:
    """The simulated executor holds exactly the slots ``handoff.job_slots`` gives the status it
    launches (no figure of its own)."""
    from tests.unit.test_sim_busy_driver import P, _burst, _need, _run, _world

    w = _world()
    t = _burst(w, 8_000.0)
    w.plan_drain(_need({0: 3}), t)
    _run(w, t, 20.0)
    d = w.sim_drains[0]
    assert d.status.phase is Phase.RUNNING
    assert d.status.slots == h.job_slots(d.status, P.max_drain_tasks) == 3 == len(d.tasks)
