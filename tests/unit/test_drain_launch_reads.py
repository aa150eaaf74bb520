"""Plan → first drained record (docs/node.md): between the seal (HandedOff written) and the Job's
creation the executor reads nothing from Kafka. The HandedOff step (`decide.handoff._handed_off`:
launch, or cancel keeping the range) is decided from the spec, the stored drain and the clock alone,
so the group's offsets and the progress groups, re-read before it, only delayed the Job (~1 s at
load 18 on the node demo, 2026-11-26)."""

from __future__ import annotations

import dataclasses
from typing import Any

from lagpilot.decide.handoff import (
    DrainStatus,
    JobObservation,
    JobState,
    Observed,
    Offsets,
    Phase,
    next_action,
)
from tests.unit.test_drain_executor import SPEC, FakeExecutor, ctx, kinds, world0


class CountingExecutor(FakeExecutor):
    def progress(
        self, admin: Any, spec: Any, d: Any, lost_out: Any = None, *, owner: str, attempts_out: Any = None
    ) -> dict[tuple[int, int], tuple[int, int]]:
        self.log.append(("read", "progress"))
        return super().progress(admin, spec, d, lost_out, owner=owner, attempts_out=attempts_out)


def _to_handed_off() -> tuple[CountingExecutor, list[tuple[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    log: list[tuple[str, Any]] = []
    w = world0()
    ex = CountingExecutor(log, w)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))  # planned, published, waiting for the ack
    w["mailbox"][0] = w["mailbox"][0].with_ack(100)  # the owner acks, then commits the split
    w["committed"][0] = 500
    log.clear()
    written: list[dict[str, Any]] = []
    c = ctx(log, w, w["status"])
    patch = c.patch_status
    c.patch_status = lambda p: (written.append(p["drain"]), patch(p))  # type: ignore[assignment]
    ex.reconcile(c)
    return ex, log, w, written


def test_no_kafka_read_between_the_seal_and_the_job() -> None:
    _ex, log, _w, _written = _to_handed_off()
    seq = kinds(log)
    sealed, created = seq.index("status:HandedOff:HandedOff"), seq.index("create_job")
    assert sealed < created, log
    assert "read" not in seq[sealed:created], log[sealed:created]


def test_the_handed_off_step_is_decided_without_the_observation() -> None:
    """The contract the executor relies on: whatever was (or was not) observed, a HandedOff drain's
    next action is the same."""
    _ex, _log, _w, written = _to_handed_off()
    handed = DrainStatus.from_dict(next(d for d in written if d["phase"] == Phase.HANDED_OFF.value))
    nothing = Observed(generation=1, offsets=None, group_empty=None, replicas=3)
    full = Observed(
        generation=1,
        offsets={0: Offsets(480, 450, 900)},
        group_empty=True,
        replicas=1,
        wanted=(0,),
        job=JobObservation(JobState.ACTIVE, 1),
        progress={(0, 0): (300, 200)},
        mailbox={0: None},
        lost={(0, 0): ((100, 120),)},
        busy=True,
    )
    for spec in (SPEC, dataclasses.replace(SPEC, drain=dataclasses.replace(SPEC.drain, cancel=True))):
        a, b = next_action(spec, handed, nothing, 2000.0), next_action(spec, handed, full, 2000.0)
        assert a == b, (a, b)


def test_the_acks_are_polled_every_fifth_of_a_second(monkeypatch: Any) -> None:
    """Right after the publish the executor polls for the owners' acks every ACK_POLL_S (0.2 s; 0.5 s
    before): the seal follows the last ack by at most one poll and one observation."""
    from lagpilot.act import drain as drain_mod

    log: list[tuple[str, Any]] = []
    w = world0()
    ex = CountingExecutor(log, w)
    ex.ack_wait_s = 3.0
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:  # the owner acks during the second wait, then commits the split
            w["mailbox"][0] = w["mailbox"][0].with_ack(100)
            w["committed"][0] = 500

    monkeypatch.setattr(drain_mod.time, "sleep", sleep)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    assert sleeps == [drain_mod.ACK_POLL_S] * 2 and drain_mod.ACK_POLL_S <= 0.2, sleeps
    assert w["status"]["phase"] == "Running", w["status"]  # sealed and launched within the same call
