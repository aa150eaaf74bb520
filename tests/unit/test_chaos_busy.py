"""bench/chaos/busy.py's drain 7 without a stack: the drain statuses, the driver's log and the parts group
are scripted; the faults' own injections (forge, replay, kill) run against fakes. Checked: the order of
the kinds, that a kind counts only once confirmed, and what makes each recovered."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import bench.chaos.busy as busy_mod
from bench.chaos import faults as cf
from bench.chaos.busy import BusyFaults
from bench.chaos.faults import Fault


class FakeProducer:
    def __init__(self) -> None:
        self.hot, self.heated = False, 0

    def heat(self, partition: int, rate: int) -> None:
        self.hot, self.heated, self.rate = True, self.heated + 1, rate

    def cool(self) -> None:
        self.hot = False


class FakeRunner:
    def __init__(self) -> None:
        self.hold: Any = None
        self.bound = 0

    def bind_pending(self, namespace: str) -> int:
        self.bound += 1
        return 2


class Scripted(BusyFaults):
    """A busy drain: round 1 delivered and taken by attempt 1, then round 2 delivered; attempt 2 after
    the driver kill; Verified by attempt 2."""

    def __init__(self, polls: list[dict[str, Any]], refuse: bool = True) -> None:
        self.kinds = frozenset(cf.BUSY_KINDS)
        self.polls, self.refuse, self.recorded = polls, refuse, []
        self.timeout, self.warm = 300.0, False
        self.producer = FakeProducer()
        self.args = type("A", (), {"hot_rate": None})()
        self.commit: tuple[int, str] | None = None
        self.events: list[dict[str, Any]] = []
        self.kills: list[dict[str, Any]] = []
        self.now_d: dict[str, Any] = {}
        self.pending: list[dict[str, Any]] = []  # driver log lines of its next poll
        self.topic = "t"
        self.runner = FakeRunner()
        self.deleted: list[str] = []
        self.alter_reached = True  # the operator reaches NextAlterOffsets once the group is empty
        self.ns = "ns"

    def drain_polls(
        self,
        before: str,
        before_burst: Any = None,
        each: Any = None,
        burst: int | None = None,
        window: float | None = None,
    ) -> Iterator[tuple[dict[str, Any], bool]]:
        assert window is not None and window > self.timeout * 2  # a busy drain is polled longer
        before_burst()
        for d in self.polls:
            self.now_d = d
            self.events += self.pending
            self.pending = []
            # the operator's delivery of the drain's round, as the real one does each cycle
            if d.get("phase") == "Running" and int(d.get("round") or 0) > 0 and d.get("deliver", True):
                r, i = int(d["round"]), str(d["id"])
                self.commit = (r, f"lpn1;id={i};r={r};more=1;s=;mac=genuine{i}-{r}")
                if d.get("taken", True) and not any(
                    e.get("round") == r and e["drain"] == i for e in self.events
                ):
                    self.events.append(
                        {
                            "event": "drain_next_part",
                            "drain": i,
                            "round": r,
                            "final": False,
                            "unfinished": 2,
                            "attempt": d["attempt"],
                        }
                    )
            if each is not None:
                each()
            yield d, True

    def check_points(self, faults: dict[str, Fault], points: dict[str, str], more: Any = None) -> None:
        for f in faults.values():  # the crash points fire at the first next split; NextAlterOffsets only
            if f.kind in cf.EMPTY_GROUP_POINTS and not (self.runner.hold and self.alter_reached):
                continue  # ... while the group is empty (the runner holds its consumers)
            if not f.fired and int(self.now_d.get("round") or 0) >= 1:
                f.fired, f.at, f.evidence = (
                    True,
                    time.time(),
                    {"marker": points[f.kind], **(more(self.now_d) if more else {})},
                )

    def consumer_pod_names(self) -> list[str]:
        return ["eos-a", "eos-b"]

    def delete_pod(self, name: str) -> None:
        self.deleted.append(name)

    def group_members(self) -> int | None:
        return 0 if self.runner.hold else 2

    def driver_events(self, event: str, drain: Any) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event and e["drain"] == str(drain)]

    def attempt_events(self, event: str, drain: Any, attempt: int) -> list[dict[str, Any]]:
        return [e for e in self.driver_events(event, drain) if e.get("attempt") == attempt]

    def read_parts_commit(self, drain: Any) -> tuple[int, str] | None:
        return self.commit

    def write_parts_commit(self, drain: Any, offset: int, metadata: str) -> None:
        self.commit = (offset, metadata)
        if "genuine" not in metadata and self.refuse:
            self.events.append({"event": "drain_part_refused", "drain": str(drain)})

    def cr(self, which: str) -> dict[str, Any]:
        return {"metadata": {"uid": "u-1"}, "status": {"capacityPerReplica": 151.2}}

    def watermarks(self) -> dict[int, int]:
        return {0: 9000, 1: 300}

    def busy_job(self, d: dict[str, Any]) -> tuple[str, int, str] | None:
        return (f"eos-drain-{d['id']}-{d['attempt']}-x", 4242, "cold")

    def drain(self, which: str = "eos") -> dict[str, Any]:
        return self.now_d

    def runtime_events(self, event: str, drain: str | None = None) -> list[dict[str, Any]]:
        return []

    def how_ran(self, d: dict[str, Any]) -> dict[str, Any]:
        return {"attempt": d.get("attempt"), "status_runtime": "cold"}

    def republish_ok(self, f: Fault) -> str | None:
        return None

    def recover_wait(
        self, since: float, what: str, timeout: float, base: Any = None, extra: Any = None
    ) -> float | None:
        return None if extra is not None and extra() is not None else 1.0

    def record(self, f: Fault) -> Fault:
        self.recorded.append(f)
        return f


def run(c: Scripted, monkeypatch: Any, tmp_path: Any) -> dict[str, Fault]:
    import bench.chaos.busy as busy

    c.crash_dir = tmp_path
    monkeypatch.setattr(busy.os, "killpg", lambda pid, sig: c.kills.append({"pid": pid, "sig": sig}))
    monkeypatch.setattr(busy, "pid_gone", lambda pid: True)
    monkeypatch.setattr(busy.time, "sleep", lambda s: None)
    return {f.kind: f for f in c.drain_seven(1)}


RUN = {"id": 1, "phase": "Running", "busy": True, "recordsDone": 100, "recordsTotal": 9000}
PLANNED = {"round": 2, "ranges": [{"partition": 0, "end": 12000}], "plannedAt": "2026-11-26T16:00:00Z"}
POLLS = [
    {**RUN, "round": 0, "attempt": 1},
    {**RUN, "round": 1, "attempt": 1},  # crash points; the driver takes round 1
    {**RUN, "round": 1, "attempt": 1, "recordsDone": 8000},  # (too little left: the drain may end first)
    {
        **RUN,
        "round": 1,
        "attempt": 1,
        "extension": {**PLANNED, "publishedAt": "2026-11-26T16:00:02Z"},
    },  # (in hand)
    {**RUN, "round": 1, "attempt": 1, "extension": PLANNED},  # (in hand: its owners may ack as they leave)
    {
        **RUN,
        "round": 1,
        "attempt": 1,
        "recordsTotal": 30000,
    },  # no split in hand, 29,900 left: the group emptied
    {**RUN, "round": 1, "attempt": 1},  # NextAlterOffsets reached; consumers released
    {**RUN, "round": 1, "attempt": 1},  # forged part
    {**RUN, "round": 2, "attempt": 1},  # round 2 delivered: stale round 1 replayed
    {**RUN, "round": 2, "attempt": 1},  # driver kill (it runs round 2: records left)
    {**RUN, "round": 2, "attempt": 2},  # the retry
    {**RUN, "round": 2, "attempt": 2},
    {**RUN, "phase": "Verified", "round": 2, "attempt": 2, "recordsDone": 9000},
]


def test_every_busy_kind_fires_in_order_and_recovers(monkeypatch: Any, tmp_path: Any) -> None:
    c = Scripted(POLLS)
    out = run(c, monkeypatch, tmp_path)
    assert list(out) == list(cf.BUSY_KINDS)
    assert [(k, f.detail) for k, f in out.items() if not (f.fired and f.recovered)] == []
    assert c.kills == [{"pid": 4242, "sig": 9}]
    assert out["busy_driver_kill"].evidence["driver_state"] == "running a part"
    assert out["busy_driver_kill"].evidence["retry_attempt"] == 2
    assert out["forged_part"].evidence["driver_refused_logged"] >= 1
    assert (out["stale_part"].evidence["stale_round"], out["stale_part"].evidence["current_round"]) == (1, 2)
    assert out["forged_part"].at <= out["stale_part"].at <= out["busy_driver_kill"].at
    assert out["stale_part"].evidence["parts_taken_after"] == []  # nothing taken after the replay
    # the empty group: after the other crash points, consumers deleted and held; NextAlterOffsets reached
    # with no member; released before the forgery
    ao = out["operator_at_next_alter_offsets"]
    assert c.deleted == ["eos-a", "eos-b"] and c.runner.hold is None and c.runner.bound == 1
    assert ao.evidence["group_members_at_fire"] == 0 and ao.evidence["pods_deleted"] == ["eos-a", "eos-b"]
    assert (
        max(out[k].at for k in cf.BUSY_POINTS) <= ao.at <= ao.evidence["released_at"] <= out["forged_part"].at
    )
    # the forged part (round 2 at offset 2) is never taken for the operator's own round 2
    assert c.producer.heated == 1 and not c.producer.hot
    # the hot stream: 3 x the eos consumers' measured capacity, said in every busy kind's evidence
    assert c.producer.rate == 454
    assert {(f.evidence["hot_rate"], f.evidence["hot_rate_source"]) for f in out.values()} == {
        (454, "measured")
    }


def test_a_forged_part_without_a_refusal_is_not_fired(monkeypatch: Any, tmp_path: Any) -> None:
    c = Scripted(POLLS, refuse=False)
    c.kinds = frozenset({"forged_part"})
    out = run(c, monkeypatch, tmp_path)
    assert not out["forged_part"].fired and "driver refusals logged 0" in out["forged_part"].detail
    assert out["forged_part"].evidence["forged_writes"] == busy_mod.FORGE_TRIES


def test_a_stale_round_taken_again_is_not_recovered(monkeypatch: Any, tmp_path: Any) -> None:
    c = Scripted(POLLS)
    c.kinds = frozenset({"stale_part"})
    orig = c.write_parts_commit

    def write(drain: Any, offset: int, metadata: str) -> None:
        orig(drain, offset, metadata)  # the driver takes it at its next poll
        c.pending.append(
            {"event": "drain_next_part", "drain": str(drain), "round": offset, "final": False, "attempt": 2}
        )

    c.write_parts_commit = write  # type: ignore[method-assign]
    out = run(c, monkeypatch, tmp_path)
    f = out["stale_part"]
    assert f.fired and not f.recovered


def test_a_drain_verified_by_the_killed_attempt_is_not_a_recovery(monkeypatch: Any, tmp_path: Any) -> None:
    polls = [p for p in POLLS if p["attempt"] == 1] + [{**RUN, "phase": "Verified", "round": 1, "attempt": 1}]
    c = Scripted(polls)
    c.kinds = frozenset({"busy_driver_kill"})  # (no stale_part: the kill does not wait for its window)
    out = run(c, monkeypatch, tmp_path)
    f = out["busy_driver_kill"]
    assert f.fired and not f.recovered and "not a retry" in f.detail


def test_a_drain_still_running_when_polling_stops_is_not_recovered(monkeypatch: Any, tmp_path: Any) -> None:
    c = Scripted(POLLS[:-1])
    out = run(c, monkeypatch, tmp_path)
    assert all(
        f.fired and not f.recovered and "still Running when polling stopped" in f.detail for f in out.values()
    )


def test_no_next_split_no_window(monkeypatch: Any, tmp_path: Any) -> None:
    c = Scripted([{**RUN, "round": 0, "attempt": 1}, {**RUN, "phase": "Verified", "round": 0, "attempt": 1}])
    out = run(c, monkeypatch, tmp_path)
    assert all(not f.fired and "no window" in f.detail for f in out.values())


def test_a_group_emptied_without_the_operator_reaching_alter_offsets_is_not_fired(
    monkeypatch: Any, tmp_path: Any
) -> None:
    c = Scripted(POLLS)
    c.kinds = frozenset({"operator_at_next_alter_offsets", "forged_part"})
    c.alter_reached = False
    monkeypatch.setattr(busy_mod, "ALTER_WAIT_S", -1.0)  # the bound passes at the next poll
    out = run(c, monkeypatch, tmp_path)
    ao = out["operator_at_next_alter_offsets"]
    assert not ao.fired and "did not reach NextAlterOffsets:effect" in ao.detail
    assert c.deleted == ["eos-a", "eos-b"] and c.runner.hold is None  # the consumers are back
    assert out["forged_part"].fired  # and the drain's other kinds go on


def test_the_consumers_are_released_when_the_drain_ends_while_they_are_held(
    monkeypatch: Any, tmp_path: Any
) -> None:
    c = Scripted([*POLLS[:6], {**RUN, "phase": "Verified", "round": 1, "attempt": 1}])
    c.kinds = frozenset({"operator_at_next_alter_offsets"})
    c.alter_reached = False
    out = run(c, monkeypatch, tmp_path)
    assert c.runner.hold is None and c.runner.bound == 1
    assert not out["operator_at_next_alter_offsets"].fired


def test_the_group_is_emptied_only_with_no_split_in_hand_and_records_left(
    monkeypatch: Any, tmp_path: Any
) -> None:
    c = Scripted([*POLLS[:5], {**RUN, "phase": "Verified", "round": 1, "attempt": 1}])  # never both
    c.kinds = frozenset({"operator_at_next_alter_offsets"})
    out = run(c, monkeypatch, tmp_path)
    assert c.deleted == [] and not out["operator_at_next_alter_offsets"].fired
    assert "no window" in out["operator_at_next_alter_offsets"].detail


def test_kinds_without_a_window_go_on_in_the_next_drain(monkeypatch: Any, tmp_path: Any) -> None:
    # the crash points' restarts ended drain 1 at round 1 (seen on the shared stack, 16:56): the hot stream
    # still runs, so the rest go on in drain 2; the crash points count as recovered by drain 1's Verified
    first = [
        {**RUN, "round": 0, "attempt": 1},
        {**RUN, "round": 1, "attempt": 1},
        {**RUN, "phase": "Verified", "round": 1, "attempt": 1},
        {**RUN, "phase": "Verified", "round": 1, "attempt": 1},
    ]
    c = Scripted(first + [{**p, "id": 2} for p in POLLS])
    out = run(c, monkeypatch, tmp_path)
    assert [(k, f.detail) for k, f in out.items() if not (f.fired and f.recovered)] == []
    assert {k: out[k].evidence["drain"] for k in cf.BUSY_POINTS} == {k: 1 for k in cf.BUSY_POINTS}
    assert out["operator_at_next_alter_offsets"].evidence["drain"] == 2
    assert (
        out["forged_part"].evidence["drain"] == 2 and out["busy_driver_kill"].evidence["retry_attempt"] == 2
    )
    assert out["stale_part"].evidence["drains_carried_over"] == [1]
    # drain 1's crash points recovered when drain 1 was Verified, not when drain 2's faults were checked
    assert all(
        out[k].recover_s is not None and out[k].recover_s <= out["forged_part"].at - out[k].at
        for k in cf.BUSY_POINTS
    )


def test_no_carry_over_once_a_later_kind_fired_or_the_drain_failed(monkeypatch: Any, tmp_path: Any) -> None:
    failed = [
        {**RUN, "round": 0, "attempt": 1},
        {**RUN, "round": 1, "attempt": 1},
        {**RUN, "phase": "Failed", "round": 1, "attempt": 1},
    ]
    c = Scripted(failed + [{**p, "id": 2} for p in POLLS])
    out = run(c, monkeypatch, tmp_path)
    assert all(not f.recovered for f in out.values())  # a Failed drain: nothing carried, nothing recovered
    assert not out["forged_part"].fired and "no window" in out["forged_part"].detail


def test_a_drain_that_ended_between_two_polls_is_judged_by_its_own_end(
    monkeypatch: Any, tmp_path: Any
) -> None:
    # under load a poll can miss a drain's end: the next one shows the following drain already Running
    # (the shared-stack run of 17:18 judged drain 2's faults by drain 3). The ended drain's outcome is
    # in status.drain.history: a Failed drain 1 recovers none of its crash points, whatever drain 2 does
    c = Scripted(
        [
            {**RUN, "round": 0, "attempt": 1},
            {**RUN, "round": 1, "attempt": 1},
            {**RUN, "id": 2, "round": 0, "attempt": 1, "history": [{"id": 1, "phase": "Failed"}]},
            {
                **RUN,
                "id": 2,
                "phase": "Verified",
                "round": 0,
                "attempt": 1,
                "history": [{"id": 1, "phase": "Failed"}],
            },
        ]
    )
    c.kinds = frozenset(cf.BUSY_POINTS)
    out = run(c, monkeypatch, tmp_path)
    assert all(f.fired for f in out.values())
    assert [k for k, f in out.items() if f.recovered] == []
    assert all("Failed" in f.detail for f in out.values()), [f.detail for f in out.values()]


def test_a_verified_drain_that_ended_between_two_polls_carries_the_kinds_left_over(
    monkeypatch: Any, tmp_path: Any
) -> None:
    hist = {"history": [{"id": 1, "phase": "Verified"}]}
    c = Scripted(
        [{**RUN, "round": 0, "attempt": 1}, {**RUN, "round": 1, "attempt": 1}]
        + [{**p, "id": 2, **hist} for p in POLLS]
    )
    out = run(c, monkeypatch, tmp_path)
    assert [(k, f.detail) for k, f in out.items() if not (f.fired and f.recovered)] == []
    assert out["forged_part"].evidence["drain"] == 2 and out["stale_part"].evidence[
        "drains_carried_over"
    ] == [1]
