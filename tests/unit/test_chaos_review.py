"""bench/chaos/review.py's drains 5 and 6 (delete_while_planned, aborted_transactions) without a stack.

A small simulated world stands for the API server, the operator and Kafka: the eos CR and its
`status.drain`, the operator's crash point at `Publish:status`, its finalizer handing a remainder back,
the re-created CR adopting it (reason `AdoptedRemainder`) and `spec.drain.cancel` cancelling a drain in
flight (`CancelledBySpec`, resumed once the hold is lifted). Time is the world's clock: every sleep of
the bench advances it, so the bench's real loops (`until`, `drain_polls`) run unchanged.

The race of the 2026-11-26 campaign (docs/chaos.md, the 57th fault): `delete_while_planned` did not fire
(no owner acked while the operator was held down), yet the finalizer handed a remainder back; the kind
returned before the re-created CR's adopted drain ended, and `aborted_transactions` took that drain
(cancelled by its own hold) for the drain of its backlog."""

from __future__ import annotations

import datetime as dt
import threading
import time as real_time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import bench.chaos.drain_watch as drain_watch_mod
import bench.chaos.review as review_mod
import bench.chaos.stack as stack_mod
from bench.chaos import faults as cf
from bench.chaos.faults import Fault
from bench.chaos.procs import TERMINAL
from bench.chaos.review import ReviewFaults
from lagpilot.decide.deletion import Remainder

T0 = 1_795_000_000.0
SPLITS = {0: 236_501, 1: 118_000}
ACKS = {0: 227_513, 1: 117_000}


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class World:
    """The API server, the operator and Kafka as far as drains 5 and 6 see them. One step a second."""

    FIRST_CYCLE_S = 3  # a created CR's first cycle (the adoption runs before it)
    RESUME_S = 3  # a drain cancelled by spec.drain.cancel resumes this long after the hold is lifted
    RUN_S = 20  # a drain runs this long once launched

    def __init__(self, crash_dir: Path, handed_back: bool = True) -> None:
        self.t = T0
        self.crash_dir = crash_dir
        self.handed_back = handed_back
        self.op_alive = True
        self.op_starts = 1
        self.cancel = False
        self.cancel_off_at: float | None = None
        self.backlog = 0
        self.remainder: Remainder | None = None
        self.events: list[SimpleNamespace] = []
        self.uids = 0
        self.cr: dict[str, Any] | None = None
        self.create_cr()
        assert self.cr is not None
        self.cr["status"]["drain"] = {
            "id": 15,
            "phase": "Verified",
            "reason": "Verified",
            "plannedAt": iso(T0 - 600),
            "ranges": [],
            "history": [],
        }
        self.log: list[tuple[float, str]] = []

    # -- the clock ---------------------------------------------------------------------------------
    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        end = self.t + max(float(s), 0.001)
        while self.t < end:
            step = min(1.0, end - self.t)
            self.t += step
            if step >= 1.0 or self.t >= end:
                self.step()

    def strftime(self, *a: Any) -> str:
        return real_time.strftime(*a)

    # -- the world's state -------------------------------------------------------------------------
    def create_cr(self) -> None:
        self.uids += 1
        self.cr = {
            "metadata": {"name": "eos", "uid": f"u-{self.uids}", "generation": 1},
            "spec": {"drain": {"cancel": self.cancel}},
            "status": {},
            "created": self.t,
            "deleting": False,
        }

    def drain(self) -> dict[str, Any]:
        return dict((self.cr or {}).get("status", {}).get("drain") or {})

    def in_flight(self) -> bool:
        d = self.drain()
        return bool(d) and d["phase"] not in TERMINAL

    def holds_nothing(self) -> bool:
        """Nothing left for anyone: no remainder waiting to be adopted, no drain in flight."""
        return self.remainder is None and not self.in_flight()

    def set_drain(self, **kv: Any) -> None:
        assert self.cr is not None
        self.cr["status"]["drain"] = {**self.drain(), **kv}
        self.log.append((self.t, f"drain {self.drain().get('id')} {self.drain().get('phase')}"))

    def new_drain(self, **kv: Any) -> None:
        old = self.drain()
        hist = list(old.get("history") or ()) + (
            [{k: old[k] for k in ("id", "phase", "reason")}] if old else []
        )
        assert self.cr is not None
        self.cr["status"]["drain"] = {"history": hist[-5:], "recordsDone": 0, "plannedAt": iso(self.t), **kv}
        self.log.append((self.t, f"drain {kv['id']} {kv['phase']} ({kv.get('reason')})"))

    def step(self) -> None:
        if not self.op_alive or self.cr is None:
            return
        cr = self.cr
        if cr["deleting"]:  # the finalizer: the Planned drain's [ack, split) handed back, then released
            d = self.drain()
            if self.handed_back and d.get("phase") == "Planned":
                self.remainder = Remainder(
                    int(d["id"]), tuple((p, ACKS[p], SPLITS[p]) for p in sorted(SPLITS))
                )
                self.events.append(
                    SimpleNamespace(
                        reason="DrainRemainderHandedBack",
                        involved_object=SimpleNamespace(kind="BatchConsumerGroup", uid=cr["metadata"]["uid"]),
                    )
                )
            self.cr = None
            return
        if self.t < cr["created"] + self.FIRST_CYCLE_S:
            return
        d = self.drain()
        held = bool(d) and d["phase"] not in TERMINAL
        if self.remainder is not None and not held:  # adoption (deletion.adoption), even under the hold
            rem = self.remainder
            self.new_drain(
                id=max(rem.drain_id, int(d.get("id") or 0)) + 1,
                phase="HandedOff",
                reason="AdoptedRemainder",
                ranges=[{"partition": p, "start": a, "end": b} for p, a, b in rem.ranges],
                recordsTotal=rem.records,
                launched=None,
            )
            self.remainder = None
            return
        if (
            d.get("phase") == "Cancelled"
            and d.get("reason") == "CancelledBySpec"
            and not self.cancel
            and self.cancel_off_at is not None
            and self.t >= self.cancel_off_at + self.RESUME_S
        ):
            self.set_drain(phase="Running", reason="Resumed", launched=self.t)
            return
        if held:
            if self.cancel and d["phase"] in ("HandedOff", "Running"):
                self.set_drain(phase="Cancelled", reason="CancelledBySpec")
            elif d["phase"] == "HandedOff":
                self.set_drain(phase="Running", reason="Launched", launched=self.t)
            elif d["phase"] == "Running" and self.t >= float(d["launched"]) + self.RUN_S:
                self.set_drain(phase="Verified", reason="Verified", recordsDone=d["recordsTotal"])
            elif d["phase"] == "Planned" and not d.get("publishedAt"):
                marker = self.crash_dir / cf.PLANNED_POINT.replace(":", "-")
                self.set_drain(publishedAt=iso(self.t))
                if not marker.exists():  # the armed crash point: the operator dies right after publishing
                    marker.write_text(str(self.t))
                    self.op_alive = False
            elif d["phase"] == "Planned":
                self.set_drain(phase="HandedOff")
            return
        if (
            self.backlog
            and not self.cancel
            and not (d.get("phase") == "Cancelled" and d.get("reason") == "CancelledBySpec")
        ):
            self.new_drain(
                id=int(d.get("id") or 0) + 1,
                phase="Planned",
                reason="Planned",
                ranges=[{"partition": p, "end": SPLITS[p]} for p in SPLITS],
                recordsTotal=self.backlog,
            )
            self.backlog = 0


class FakeApi:
    def __init__(self, w: World) -> None:
        self.w = w

    # CustomObjectsApi
    def get_namespaced_custom_object(self, *a: Any) -> dict[str, Any]:
        if self.w.cr is None:
            raise ApiError(404)
        return {k: v for k, v in self.w.cr.items() if k in ("metadata", "spec", "status")}

    def delete_namespaced_custom_object(self, *a: Any) -> None:
        assert self.w.cr is not None
        self.w.cr["deleting"] = True

    def create_namespaced_custom_object(self, *a: Any) -> None:
        assert self.w.cr is None
        self.w.create_cr()

    def patch_namespaced_custom_object(
        self, group: str, version: str, ns: str, plural: str, name: str, body: dict[str, Any]
    ) -> None:
        on = bool(body["spec"]["drain"]["cancel"])
        if self.w.cancel and not on:
            self.w.cancel_off_at = self.w.t
        self.w.cancel = on

    # CoreV1Api
    def list_namespaced_event(self, ns: str) -> SimpleNamespace:
        return SimpleNamespace(items=list(self.w.events))

    def list_namespaced_pod(self, ns: str, label_selector: str = "") -> SimpleNamespace:
        return SimpleNamespace(items=[])


class FakeOperator:
    def __init__(self, w: World) -> None:
        self.w, self.gen, self.deaths = w, 1, []

    def alive(self) -> bool:
        return self.w.op_alive

    def ensure(self) -> None:
        if not self.w.op_alive:
            self.w.op_alive, self.gen = True, self.gen + 1

    def cycles(self) -> float:
        return 10.0


class FakeProducer:
    def __init__(self, w: World) -> None:
        self.w, self.paused = w, threading.Event()

    def burst(self, n: int) -> None:
        self.w.backlog += n


class Sim(ReviewFaults):
    """ReviewFaults on the simulated world: only the bench's I/O edges are replaced (the API clients,
    the operator process, the producer, the remainder group and the mailbox reads, the transactional
    writes); its loops and verdicts run as they are."""

    def __init__(self, w: World, acked: bool = False) -> None:
        self.w, self.acked = w, acked
        self.args = SimpleNamespace(burst=3000)
        self.kinds = frozenset(cf.KINDS)
        self.ns, self.topic, self.run_id = "chaos-x", "chaos-x", "x"
        self.groups = {"eos": "chaos-eos-x", "alo": "chaos-alo-x"}
        self.crash_dir = w.crash_dir
        self.timeout, self.timeout_ms, self.warm = 300.0, 500, False
        self.present = {"eos": True, "alo": True}
        self.hold_operator = False
        self.faults: list[Fault] = []
        self.custom = self.core = FakeApi(w)
        self.op = FakeOperator(w)
        self.producer = FakeProducer(w)
        self.aborted: dict[int, tuple[int, int]] = {}

    def spec(self, which: str) -> dict[str, Any]:
        return {}

    def mailbox(self) -> tuple[dict[int, Any], dict[int, int]]:
        d = self.w.drain()
        if not self.acked or d.get("phase") != "Planned":
            return {}, {p: 0 for p in SPLITS}
        e = {p: SimpleNamespace(ack=ACKS[p], acked=True, drain_id=d["id"]) for p in SPLITS}
        return e, dict(SPLITS)

    def remainder(self) -> Remainder | None:
        return self.w.remainder

    def write_transactions(self, f: Fault) -> None:
        """As the real one: drains held by spec.drain.cancel while the transactions are written (8 s),
        the steady stream paused; the transactions are the backlog."""
        self.set_drain_cancel(True)
        self.producer.paused.set()
        self.w.sleep(8)
        self.w.backlog += 1200
        self.set_drain_cancel(False)
        self.aborted = {0: (240_000, 240_199), 1: (120_000, 120_199)}
        f.evidence = {"aborted": {str(p): list(r) for p, r in self.aborted.items()}}
        f.fired, f.at = True, self.w.t

    def recover_wait(
        self, since: float, what: str, timeout: float, base: Any = None, extra: Any = None
    ) -> float | None:
        try:
            self.until(lambda: extra is None or extra() is None, what, timeout)
        except TimeoutError:
            return None
        return self.w.t - since

    def record(self, f: Fault) -> Fault:
        self.faults.append(f)
        return f


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = World(tmp_path)
    for p in cf.OPERATOR_POINTS:
        (tmp_path / p.replace(":", "-")).write_text("disarmed")
    for mod in (review_mod, drain_watch_mod, stack_mod):
        monkeypatch.setattr(mod, "time", w)
    return w


def test_delete_while_planned_that_did_not_fire_returns_only_once_the_recreated_cr_holds_nothing(
    world: World,
) -> None:
    """No owner acked while the operator was down (not fired), yet the finalizer handed a remainder back
    (as in the campaign): the kind returns only once the re-created CR adopted it and that drain ended."""
    c = Sim(world)
    f = c.drain_five(2)
    assert not f.fired and "not Planned with a non-empty acked range" in f.detail
    assert f.evidence["handed_back"] is True  # the case of the race: a remainder although not fired
    assert world.holds_nothing(), f"returned with {world.drain()} in flight / remainder {world.remainder}"
    assert world.drain()["reason"] == "Verified" and world.drain()["id"] == 17
    assert f.evidence["adopted_drain"]["id"] == 17 and f.evidence["adopted_drain"]["phase"] == "Verified"


def test_delete_while_planned_that_did_not_fire_and_handed_nothing_back_does_not_wait(world: World) -> None:
    world.handed_back = False
    c = Sim(world)
    f = c.drain_five(2)
    assert not f.fired and f.evidence["handed_back"] is False
    assert world.holds_nothing() and "adopted_drain" not in f.evidence
    assert c.present["eos"] is True


def test_delete_while_planned_that_fired_is_recovered_by_the_adopted_drain(world: World) -> None:
    c = Sim(world, acked=True)
    f = c.drain_five(2)
    assert f.fired and f.recovered, f.detail
    assert f.evidence["acks"] == ACKS and f.evidence["adopted_drain"]["id"] == 17
    assert world.holds_nothing()


def test_aborted_transactions_never_judges_a_drain_it_did_not_start(world: World) -> None:
    """The re-created CR adopts its remainder while aborted_transactions holds drains for its writes:
    the hold cancels the adopted drain (CancelledBySpec). That drain was planned before the kind's
    backlog existed: the kind waits for a drain of its own (18) and judges that one."""
    world.handed_back = True
    world.cr = None
    world.remainder = Remainder(16, tuple((p, ACKS[p], SPLITS[p]) for p in sorted(SPLITS)))
    world.create_cr()  # re-created: status empty until its first cycle adopts the remainder
    c = Sim(world)
    f = c.drain_six(2)
    assert f.fired
    assert any(
        "drain 17 Cancelled" in what for _, what in world.log
    )  # the race happened: the hold cancelled 17
    assert f.evidence["drain"] == 18, (
        f"judged drain {f.evidence.get('drain')} ({f.evidence.get('final_phase')})"
    )
    assert f.evidence["final_phase"] == "Verified" and f.recovered


def test_the_57th_fault_delete_while_planned_not_fired_then_aborted_transactions(world: World) -> None:
    """The two kinds in the campaign's order, as in round 2 of the 2026-11-26 campaign."""
    c = Sim(world)
    five = c.drain_five(2)
    six = c.drain_six(2)
    assert not five.fired and five.evidence["handed_back"]
    assert not any("drain 17 Cancelled" in what for _, what in world.log)  # the adopted drain ended first
    assert (
        six.fired
        and six.recovered
        and six.evidence["drain"] == 18
        and six.evidence["final_phase"] == "Verified"
    )
