"""The hand-off state machine: one table row per transition, and a model-based property that an
operator killed between any effect and its status write still gives every offset exactly one owner."""
from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot import handoff as h
from lagpilot.handoff import (Action, DrainStatus, JobObservation, JobState, Kind, Observed, Offsets,
                              PartitionRange, Phase, SubProgress, next_action)
from lagpilot.spec import parse_spec
from lagpilot_runtime.drain_plan import DrainPlan, SubRange, parse_progress_metadata, progress_metadata, split_ranges

NOW = 1_000_000.0


def spec(**drain):
    raw = {"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g",
           "batch": {"maxRecords": 10}, "drain": {"splitFactor": 2, **drain}}
    return parse_spec(raw)


def obs(offsets=None, empty=None, replicas=3, wanted=(), job=None, progress=None, generation=1):
    return Observed(generation=generation, offsets=offsets, group_empty=empty, replicas=replicas,
                    wanted=wanted, job=job, progress=progress)


PLANNED = DrainStatus(id=1, phase=Phase.PLANNED, ranges=(PartitionRange(0, split=1000),), restore_replicas=3, planned_at=NOW)
FIXED = dataclasses.replace(PLANNED, ranges=(PartitionRange(0, split=1000, start=200),), quiesced_at=NOW)
SUBS = (SubProgress(0, 0, 200, 600, 200), SubProgress(0, 1, 600, 1000, 600))
HANDED = dataclasses.replace(FIXED, phase=Phase.HANDED_OFF, sub_ranges=SUBS, handed_off_at=NOW)
RUNNING = dataclasses.replace(HANDED, phase=Phase.RUNNING, attempt=1, started_at=NOW, resumed_at=NOW)
DONE_PROGRESS = {(0, 0): (600, 400), (0, 1): (1000, 400)}


# (id, spec, status, observed, expected kind, expected phase after (None: status untouched))
CASES = [
    ("idle-nothing-wanted", spec(), None, obs({0: Offsets(200, 0, 1000)}), Kind.NONE, None),
    ("idle-plans-wanted", spec(), None, obs({0: Offsets(200, 0, 1000)}, wanted=(0,)), Kind.WRITE_STATUS, Phase.PLANNED),
    ("idle-disabled", spec(enabled=False), None, obs({0: Offsets(200, 0, 1000)}, wanted=(0,)), Kind.NONE, None),
    ("idle-cancel-blocks-new", spec(cancel=True), None, obs({0: Offsets(200, 0, 1000)}, wanted=(0,)), Kind.NONE, None),
    ("idle-no-backlog", spec(), None, obs({0: Offsets(1000, 0, 1000)}, wanted=(0,)), Kind.NONE, None),
    ("idle-kafka-unknown", spec(), None, obs(None, wanted=(0,)), Kind.NONE, None),
    ("planned-quiesces", spec(), PLANNED, obs({0: Offsets(200, 0, 1000)}, empty=False, replicas=3), Kind.QUIESCE, Phase.PLANNED),
    ("planned-waits-members", spec(), FIXED, obs({0: Offsets(200, 0, 1000)}, empty=False, replicas=0), Kind.NONE, Phase.PLANNED),
    ("planned-fixes-start", spec(), PLANNED, obs({0: Offsets(200, 0, 1000)}, empty=True, replicas=0), Kind.WRITE_STATUS, Phase.PLANNED),
    ("planned-no-commit-uses-low", spec(), PLANNED, obs({0: Offsets(None, 50, 1000)}, empty=True, replicas=0), Kind.WRITE_STATUS, Phase.PLANNED),
    ("planned-alters", spec(), FIXED, obs({0: Offsets(200, 0, 1000)}, empty=True, replicas=0), Kind.ALTER_OFFSETS, Phase.HANDED_OFF),
    ("planned-alter-already-done", spec(), FIXED, obs({0: Offsets(1000, 0, 1200)}, empty=True, replicas=0), Kind.WRITE_STATUS, Phase.HANDED_OFF),
    ("planned-alter-done-consumers-past-split", spec(), FIXED, obs({0: Offsets(1050, 0, 1200)}, empty=True, replicas=0), Kind.WRITE_STATUS, Phase.HANDED_OFF),
    ("planned-refix-when-moved", spec(), FIXED, obs({0: Offsets(300, 0, 1000)}, empty=True, replicas=0), Kind.WRITE_STATUS, Phase.PLANNED),
    ("planned-group-got-there", spec(), PLANNED, obs({0: Offsets(1000, 0, 1100)}, empty=True, replicas=0), Kind.RESTORE, Phase.CANCELLED),
    ("planned-cancel-before-alter", spec(cancel=True), FIXED, obs({0: Offsets(200, 0, 1000)}, empty=True, replicas=0), Kind.RESTORE, Phase.CANCELLED),
    ("planned-cancel-after-alter-hands-off", spec(cancel=True), FIXED, obs({0: Offsets(1000, 0, 1000)}, empty=True, replicas=0), Kind.WRITE_STATUS, Phase.HANDED_OFF),
    ("planned-kafka-unknown", spec(), FIXED, obs(None, empty=True, replicas=0), Kind.NONE, None),
    ("handedoff-launches", spec(), HANDED, obs(), Kind.LAUNCH, Phase.RUNNING),
    ("handedoff-disabled-still-launches", spec(enabled=False), HANDED, obs(), Kind.LAUNCH, Phase.RUNNING),
    ("handedoff-cancel-keeps-range", spec(cancel=True), HANDED, obs(), Kind.RESTORE, Phase.CANCELLED),
    ("running-progress", spec(), RUNNING, obs(job=JobObservation(JobState.ACTIVE, 1), progress={(0, 0): (400, 200)}), Kind.NONE, Phase.RUNNING),
    ("running-no-change", spec(), RUNNING, obs(job=JobObservation(JobState.ACTIVE, 1), progress={}), Kind.NONE, None),
    ("running-succeeded", spec(), RUNNING, obs(job=JobObservation(JobState.SUCCEEDED)), Kind.WRITE_STATUS, Phase.SUCCEEDED),
    ("running-failed-schedules-retry", spec(), RUNNING, obs(job=JobObservation(JobState.FAILED, 0, "boom")), Kind.WRITE_STATUS, Phase.RUNNING),
    ("running-retry-waits", spec(), dataclasses.replace(RUNNING, retry_at=NOW + 5), obs(job=JobObservation(JobState.FAILED)), Kind.NONE, None),
    ("running-retry-due", spec(), dataclasses.replace(RUNNING, retry_at=NOW - 1), obs(job=JobObservation(JobState.FAILED)), Kind.LAUNCH, Phase.RUNNING),
    ("running-exhausted", spec(), dataclasses.replace(RUNNING, attempt=h.MAX_ATTEMPTS), obs(job=JobObservation(JobState.FAILED)), Kind.WRITE_STATUS, Phase.FAILED),
    ("running-job-vanished", spec(), RUNNING, obs(job=JobObservation(JobState.ABSENT)), Kind.LAUNCH, Phase.RUNNING),
    ("running-cancel-deletes", spec(cancel=True), RUNNING, obs(job=JobObservation(JobState.ACTIVE, 2)), Kind.DELETE_JOB, Phase.RUNNING),
    ("running-cancel-waits-pods", spec(cancel=True), RUNNING, obs(job=JobObservation(JobState.ABSENT, 1)), Kind.DELETE_JOB, Phase.RUNNING),
    ("running-cancel-done", spec(cancel=True), RUNNING, obs(job=JobObservation(JobState.ABSENT, 0)), Kind.WRITE_STATUS, Phase.CANCELLED),
    ("succeeded-verifies", spec(), dataclasses.replace(RUNNING, phase=Phase.SUCCEEDED), obs(progress=DONE_PROGRESS), Kind.WRITE_STATUS, Phase.VERIFIED),
    ("succeeded-incomplete-retries", spec(), dataclasses.replace(RUNNING, phase=Phase.SUCCEEDED), obs(progress={(0, 0): (600, 400)}), Kind.WRITE_STATUS, Phase.RUNNING),
    ("succeeded-progress-unknown", spec(), dataclasses.replace(RUNNING, phase=Phase.SUCCEEDED), obs(progress=None), Kind.NONE, None),
    ("failed-waits", spec(), dataclasses.replace(RUNNING, phase=Phase.FAILED, failed_generation=1), obs(generation=1), Kind.NONE, None),
    ("failed-retries-on-spec-change", spec(), dataclasses.replace(RUNNING, phase=Phase.FAILED, failed_generation=1), obs(generation=2), Kind.LAUNCH, Phase.RUNNING),
    ("cancelled-resumes", spec(), dataclasses.replace(RUNNING, phase=Phase.CANCELLED), obs(job=JobObservation(JobState.ABSENT)), Kind.LAUNCH, Phase.RUNNING),
    ("cancelled-stays", spec(cancel=True), dataclasses.replace(RUNNING, phase=Phase.CANCELLED), obs(job=JobObservation(JobState.ABSENT)), Kind.NONE, None),
    ("verified-plans-again", spec(), dataclasses.replace(RUNNING, phase=Phase.VERIFIED, sub_ranges=()), obs({0: Offsets(1000, 0, 5000)}, wanted=(0,)), Kind.WRITE_STATUS, Phase.PLANNED),
]


@pytest.mark.parametrize("sp,status,observed,kind,phase", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_transition(sp, status, observed, kind, phase):
    a = next_action(sp, status, observed, NOW)
    assert a.kind is kind, a
    if phase is None:
        assert a.status is None
    else:
        assert a.status is not None and a.status.phase is phase
        # the status always round-trips through the CR (what a restarted operator reads back)
        assert DrainStatus.from_dict(a.status.to_dict()) == a.status


def test_plan_records_split_and_replicas_before_acting():
    a = next_action(spec(), None, obs({0: Offsets(200, 0, 1000), 1: Offsets(5, 0, 10)}, wanted=(0,), replicas=2), NOW)
    assert a.kind is Kind.WRITE_STATUS  # no side effect: the plan is written first
    assert a.status.ranges == (PartitionRange(0, split=1000, start=None),)
    assert a.status.restore_replicas == 2 and a.status.id == 1
    assert h.replicas_override(a.status) == 0


def test_crash_after_alter_then_consumers_past_split_keeps_every_range():
    """Seen on the real stack: the operator died right after altering the offsets (before recording
    HandedOff); a restarted operator's apply brought consumers back, which committed past split. The
    ranges fixed before the alter must stay the drain's — re-fixing them from the group's position
    would drop [start, split) and hand those records to nobody."""
    fixed = dataclasses.replace(PLANNED, quiesced_at=NOW, ranges=(
        PartitionRange(0, split=15010, start=0), PartitionRange(1, split=15010, start=0),
        PartitionRange(2, split=15010, start=500)))
    offsets = {0: Offsets(0, 0, 15400), 1: Offsets(15200, 0, 15400), 2: Offsets(15010, 0, 15400)}
    a = next_action(spec(), fixed, obs(offsets, empty=True, replicas=0), NOW)
    assert a.kind is Kind.ALTER_OFFSETS and a.offsets == {0: 15010}  # only p0 still needs its alter
    assert {(r.partition, r.start, r.split) for r in a.status.ranges} == {(0, 0, 15010), (1, 0, 15010), (2, 500, 15010)}
    covered = {p: sum(x.end - x.start for x in a.status.sub_ranges if x.partition == p) for p in range(3)}
    assert covered == {0: 15010, 1: 15010, 2: 14510}


def test_apply_outside_the_loop_holds_a_quiesced_group_at_zero():
    from lagpilot.reconcile import _clamp_initial
    sp = parse_spec({"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g",
                     "scaling": {"minReplicas": 1, "maxReplicas": 5}})
    planned = {"phase": "Planned", "ranges": [{"partition": 0, "split": 10, "start": None}]}
    emptied = {**planned, "quiescedAt": NOW}
    fixed = {**planned, "ranges": [{"partition": 0, "split": 10, "start": 4}]}
    for name, drain, want in (("planned-not-yet-quiesced", planned, 3), ("planned-quiesced", emptied, 0),
                              ("planned-starts-fixed", fixed, 0), ("handed-off", {"phase": "HandedOff"}, 3),
                              ("running", {"phase": "Running"}, 3), ("none", None, 3)):
        status = {"desiredReplicas": 3, "partitions": 3, "drain": drain}
        assert _clamp_initial(sp, status) == want, name


def test_alter_moves_only_to_split_and_sub_ranges_tile_the_range():
    a = next_action(spec(splitFactor=3), FIXED, obs({0: Offsets(200, 0, 1000)}, empty=True, replicas=0), NOW)
    assert a.offsets == {0: 1000}
    subs = a.status.sub_ranges
    assert subs[0].start == 200 and subs[-1].end == 1000
    assert all(x.end == y.start for x, y in zip(subs, subs[1:]))
    assert h.replicas_override(a.status) is None


def test_retry_backoff_grows_and_relaunch_keeps_ranges():
    failed = next_action(spec(), RUNNING, obs(job=JobObservation(JobState.FAILED)), NOW).status
    assert failed.retry_at == NOW + h.backoff_seconds(1)
    relaunch = next_action(spec(), failed, obs(job=JobObservation(JobState.FAILED)), failed.retry_at)
    assert relaunch.kind is Kind.LAUNCH and relaunch.attempt == 2
    assert relaunch.status.sub_ranges == RUNNING.sub_ranges and relaunch.status.ranges == RUNNING.ranges
    assert h.backoff_seconds(2) > h.backoff_seconds(1) and h.backoff_seconds(50) == h.BACKOFF_MAX_S


def test_progress_never_moves_backwards():
    s = h.with_progress(RUNNING, {(0, 0): (500, 300)})
    assert h.with_progress(s, {(0, 0): (300, 100)}).sub_ranges[0].next == 500
    assert s.records_done == 300 and s.remaining == 100 + 400


def test_job_names_are_deterministic_and_short():
    assert h.job_name("orders", 3, 2) == "orders-drain-3-2"
    assert len(h.job_name("x" * 80, 12, 3)) <= 63


def test_condition_reports_progress():
    s = h.with_progress(RUNNING, {(0, 0): (400, 200)})
    status, reason, msg = h.condition(s)
    assert status == "True" and reason == "DrainRunning" and "0/800" in msg  # message written at action time
    assert h.condition(None)[0] == "False"


# ---- drain_plan (the runtime side of the contract) ----------------------------------------

@given(st.dictionaries(st.integers(0, 20), st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), max_size=6),
       st.integers(1, 20), st.integers(1, 1000))
def test_split_ranges_tile_exactly(ranges, factor, min_per_task):
    ranges = {p: (min(a, b), max(a, b)) for p, (a, b) in ranges.items()}
    subs = split_ranges(ranges, factor, min_per_task)
    for p, (a, b) in ranges.items():
        mine = sorted((s for s in subs if s.partition == p), key=lambda s: s.start)
        covered = [o for s in mine for o in range(s.start, s.end)]
        assert covered == list(range(a, b))  # every offset once, in order, nothing outside
        assert len(mine) <= factor
        assert len({s.index for s in mine}) == len(mine)
    DrainPlan("1", "t", "g", subs).validate()


def test_plan_json_round_trip_and_overlap_rejected():
    plan = DrainPlan("7", "t", "g", (SubRange(0, 0, 0, 10), SubRange(0, 1, 10, 20)), 5, 2, True)
    assert DrainPlan.from_json(plan.to_json()) == dataclasses.replace(plan, extra={})
    with pytest.raises(ValueError, match="overlapping"):
        DrainPlan("7", "t", "g", (SubRange(0, 0, 0, 10), SubRange(0, 1, 9, 20))).validate()
    assert parse_progress_metadata(progress_metadata(42)) == 42
    assert parse_progress_metadata("lp1;cap=3") == 0 and parse_progress_metadata(None) == 0


# ---- model-based: the operator dies between effect and status write --------------------------

class World:
    """A toy Kafka group + Deployment + Job, enough to check ownership of every offset."""

    def __init__(self, rnd: random.Random, parts: int = 3):
        self.rnd = rnd
        self.end = {p: rnd.randint(0, 3000) for p in range(parts)}
        self.committed = {p: rnd.randint(0, self.end[p]) for p in range(parts)}
        self.initial = dict(self.committed)
        self.replicas = 3
        self.members = 3
        self.by_group: list[tuple[int, int]] = []
        self.by_drain: list[tuple[int, int]] = []
        self.job: dict | None = None  # {"attempt", "state", "subs"}
        self.progress: dict[tuple[int, int], tuple[int, int]] = {}
        self.status: DrainStatus | None = None
        self.generation = 1

    def tick(self) -> None:
        for p in self.end:  # produce
            self.end[p] += self.rnd.randint(0, 50)
        if self.members:  # the group processes some records and commits them
            for p in self.end:
                n = self.rnd.randint(0, 40)
                hi = min(self.end[p], self.committed[p] + n)
                self.by_group += [(p, o) for o in range(self.committed[p], hi)]
                self.committed[p] = hi
        if self.replicas == 0 and self.members and self.rnd.random() < 0.5:
            self.members = 0  # members time out / leave
        if self.replicas > 0 and not self.members and self.rnd.random() < 0.7:
            self.members = self.replicas
        j = self.job
        if j and j["state"] == "active":
            for s in j["subs"]:
                key = (s.partition, s.index)
                nxt, recs = self.progress.get(key, (s.start, 0))
                hi = min(s.end, nxt + self.rnd.randint(0, 300))
                self.by_drain += [(s.partition, o) for o in range(nxt, hi)]
                self.progress[key] = (hi, recs + hi - nxt)
            if self.rnd.random() < 0.15:
                j["state"] = "failed"
            elif all(self.progress.get((s.partition, s.index), (s.start, 0))[0] >= s.end for s in j["subs"]):
                j["state"] = "succeeded"

    def observe(self, wanted) -> Observed:
        offs = {p: Offsets(self.committed[p], 0, self.end[p]) for p in self.end}
        job = None
        if self.status is not None and self.status.attempt:
            if self.job is None or self.job["attempt"] != self.status.attempt:
                job = JobObservation(JobState.ABSENT)
            else:
                job = JobObservation({"active": JobState.ACTIVE, "failed": JobState.FAILED,
                                      "succeeded": JobState.SUCCEEDED}[self.job["state"]], 1 if self.job["state"] == "active" else 0)
        return Observed(self.generation, offs, self.members == 0, self.replicas, wanted, job, dict(self.progress))

    def apply(self, a: Action, crash: bool) -> None:
        if a.kind is Kind.QUIESCE:
            self.replicas = 0
        elif a.kind is Kind.ALTER_OFFSETS:
            assert self.members == 0, "alter with members: the broker would refuse"
            self.committed.update(a.offsets)
        elif a.kind in (Kind.LAUNCH, Kind.RESTORE):
            if a.replicas is not None:
                self.replicas = a.replicas
            if a.kind is Kind.LAUNCH and (self.job is None or self.job["attempt"] != a.attempt):
                self.job = {"attempt": a.attempt, "state": "active", "subs": [s.sub_range() for s in a.status.sub_ranges]}
        elif a.kind is Kind.DELETE_JOB:
            self.job = None
        if a.status is not None and not crash:
            self.status = a.status


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 0.5))
def test_every_offset_has_exactly_one_owner_despite_crashes(seed, crash_rate):
    rnd = random.Random(seed)
    w = World(rnd)
    sp = spec(splitFactor=3)
    now = NOW
    wanted = tuple(sorted(rnd.sample(range(3), rnd.randint(1, 3))))
    planned_once = False
    for _ in range(400):
        w.tick()
        now += 5
        want = wanted if not planned_once else ()
        a = next_action(sp, w.status, w.observe(want), now)
        w.apply(a, crash=rnd.random() < crash_rate)
        if w.status is not None:
            planned_once = True
            if w.status.phase is Phase.FAILED and w.status.failed_generation == w.generation:
                w.generation += 1  # the user fixes the spec: the same ranges are retried
            if w.status.phase is Phase.VERIFIED or (w.status.phase is Phase.CANCELLED and w.status.remaining == 0):
                break
    else:
        raise AssertionError(f"did not converge: {w.status}")
    assert w.replicas > 0  # the live group got its consumers back
    # let the group finish everything that is left
    w.members = w.replicas
    for p in w.end:
        w.by_group += [(p, o) for o in range(w.committed[p], w.end[p])]
        w.committed[p] = w.end[p]
    owners = w.by_group + w.by_drain
    assert len(owners) == len(set(owners)), "an offset was processed by both paths"
    assert set(owners) == {(p, o) for p in w.end for o in range(w.initial[p], w.end[p])}, "an offset was skipped"
