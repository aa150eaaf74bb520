"""handlers.py: the kopf wiring translates outcomes into kopf's retry semantics (no cluster)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import kopf
import pytest

from lagpilot import handlers
from lagpilot.act.kubeapi import KubeError
from lagpilot.config import OperatorConfig
from lagpilot.reconcile import delete

SPEC = {"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g", "processing": {"sink": "log"}}


class Kube:
    def __init__(self, fail: KubeError | None = None) -> None:
        self.fail = fail
        self.applied: list[dict[str, Any]] = []
        self.patches: list[dict[str, Any]] = []

    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]:
        if self.fail:
            raise self.fail
        self.applied.append(manifest)
        return manifest

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)

    def patch_status_guarded(self, namespace: str, name: str, patch: dict[str, Any], basis: Any) -> None:
        from lagpilot.act.kubeapi import StatusConflict

        if not basis(self.stored):
            raise StatusConflict("changed", "test")
        self.patches.append(patch)

    stored: ClassVar[dict[str, Any]] = {}  # the status as the API server has it (for guarded writes)


def _adopt(ref: Any, spec: Any, status: Any, memo: Any, emit: Any) -> Any:
    return delete.adopt_remainder(
        ref, spec, status, memo.kube, memo.admin_pool, memo.config.kafka_timeout_seconds, emit
    )


def memo(kube: Kube) -> Any:
    cfg = OperatorConfig(
        pod_start_seconds=0,
        kafka_timeout_seconds=1,
        min_backoff_seconds=1,
        max_backoff_seconds=2,
        status_heartbeat_seconds=60.0,
    )
    return SimpleNamespace(
        kube=kube, config=cfg, admin_pool=None, metrics=None, drain=FakeExecutor(None, None)
    )


def body(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "orders", "uid": "u1", "generation": 4}, "spec": spec}


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        kopf, "event", lambda obj, type, reason, message: seen.append((type, reason, message))
    )
    return seen


def test_apply_renders_and_applies(events: list) -> None:
    kube = Kube()
    handlers.apply(body=body(SPEC), spec=SPEC, status={"desiredReplicas": 2}, memo=memo(kube))
    (dep,) = kube.applied
    assert dep["metadata"]["name"] == "orders-consumer" and dep["spec"]["replicas"] == 2


def test_api_failure_is_temporary(events: list) -> None:
    kube = Kube(fail=KubeError(500, "InternalError", "apply"))
    with pytest.raises(kopf.TemporaryError):
        handlers.apply(body=body(SPEC), spec=SPEC, status={}, memo=memo(kube))


def test_invalid_spec_is_permanent_with_degraded_status_and_event(events: list) -> None:
    bad = {**SPEC, "scaling": {"minReplicas": 3, "maxReplicas": 1}}
    kube = Kube()
    # the field the CRD's rule names, with the rule's own message (issue 26: evaluated, not re-written)
    with pytest.raises(
        kopf.PermanentError,
        match=r"spec\.scaling\.minReplicas: .* less than or equal to scaling\.maxReplicas",
    ):
        handlers.apply(body=body(bad), spec=bad, status={}, memo=memo(kube))
    assert not kube.applied
    (patch,) = kube.patches
    deg = next(c for c in patch["conditions"] if c["type"] == "Degraded")
    assert deg["status"] == "True" and deg["reason"] == "InvalidSpec" and deg["observedGeneration"] == 4
    assert events and events[0][:2] == ("Warning", "InvalidSpec")


def test_a_cycle_that_runs_too_long_is_reported_with_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    """A hung library call must not make the operator go silent: the daemon logs where the cycle is."""
    import asyncio
    import concurrent.futures
    import threading

    release = threading.Event()

    def stuck_cycle() -> str:
        release.wait(60)
        return "done"

    async def main() -> str:
        where: dict[str, int] = {}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = asyncio.get_running_loop().run_in_executor(pool, handlers._tracked, where, stuck_cycle)

            async def unblock_after_first_report() -> None:
                while not any(r.getMessage() == "control loop cycle still running" for r in caplog.records):
                    await asyncio.sleep(0.01)
                release.set()

            helper = asyncio.ensure_future(unblock_after_first_report())
            out = await handlers.await_cycle(fut, where, "ns/orders", warn_after_s=0.05)
            await helper
            return out

    with caplog.at_level("ERROR", logger="lagpilot.handlers"):
        assert asyncio.run(asyncio.wait_for(main(), 60)) == "done"
    rec = next(r for r in caplog.records if r.getMessage() == "control loop cycle still running")
    assert rec.group == "ns/orders" and "stuck_cycle" in rec.stack and "release.wait" in rec.stack


# ------------------------------------------------------------------ the finalizer (on.delete)


class FakePool:
    def __init__(self) -> None:
        self.released: list[str] = []

    def lease(self, owner: str, conf: Any) -> Any:
        import contextlib

        @contextlib.contextmanager
        def cm() -> Any:
            yield SimpleNamespace(safe_admin=lambda timeout: "admin")

        return cm()

    def release(self, owner: str) -> None:
        self.released.append(owner)


class FakeExecutor:
    def __init__(self, job: Any, progress: Any) -> None:
        self._job, self._progress, self.deleted = job, progress, []

    def job(self, namespace: str, name: str, launcher: str = "job") -> Any:
        return self._job

    def progress(self, admin: Any, spec: Any, d: Any, *, owner: str) -> Any:
        return self._progress

    def delete_job(self, namespace: str, name: str, launcher: str = "job") -> None:
        self.deleted.append(name)

    def handoff_key(self, namespace: str, name: str, uid: str) -> bytes:
        return bytes(32)

    def handoff_key_id(self, namespace: str, name: str, uid: str) -> str:
        return "0" * 16


def running_drain() -> dict[str, Any]:
    return {
        "id": 2,
        "phase": "Running",
        "attempt": 1,
        "ranges": [{"partition": 0, "start": 0, "end": 100}],
        "subRanges": [{"partition": 0, "index": 0, "start": 0, "end": 100, "next": 40, "records": 40}],
    }


def deleting_memo(kube: Kube, ex: Any) -> Any:
    m = memo(kube)
    m.admin_pool, m.drain = FakePool(), ex
    return m


def test_finalize_without_a_drain_releases_at_once(events: list) -> None:
    kube = Kube()
    handlers.finalize(
        body=body(SPEC),
        spec=SPEC,
        status={},
        meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
        memo=memo(kube),
    )
    assert kube.patches == [] and events == []


def test_finalize_waits_for_a_running_drain_with_a_condition_and_one_event(events: list, monkeypatch) -> None:
    import time as _time

    from lagpilot.decide.handoff import JobObservation, JobState

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    kube = Kube()
    ex = FakeExecutor(JobObservation(JobState.ACTIVE, pods_alive=1), {(0, 0): (60, 60)})
    since = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(_time.time() - 30))
    with pytest.raises(kopf.TemporaryError):
        handlers.finalize(
            body=body(SPEC),
            spec=SPEC,
            status={"drain": running_drain()},
            meta={"deletionTimestamp": since},
            memo=deleting_memo(kube, ex),
        )
    (cond,) = [c for c in kube.patches[-1]["conditions"] if c["type"] == "Terminating"]
    assert (cond["status"], cond["reason"]) == ("True", "WaitingForDrain") and "60/100" in cond["message"]
    assert [e[1] for e in events] == ["DeletionWaitingForDrain"]
    assert ex.deleted == []


def test_finalize_stops_the_job_after_the_bound(events: list, monkeypatch) -> None:
    from lagpilot.decide.handoff import JobObservation, JobState

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    ex = FakeExecutor(JobObservation(JobState.ACTIVE, pods_alive=1), {(0, 0): (60, 60)})
    m = deleting_memo(Kube(), ex)
    m.config = OperatorConfig.from_env({"LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": "20"})
    with pytest.raises(kopf.TemporaryError):
        handlers.finalize(
            body=body(SPEC),
            spec=SPEC,
            status={"drain": running_drain()},
            meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
            memo=m,
        )
    assert ex.deleted == ["orders-drain-2-1"]


def test_finalize_hands_the_remainder_back_then_releases(events: list, monkeypatch) -> None:
    from lagpilot.act import deletion_io
    from lagpilot.decide.deletion import Remainder
    from lagpilot.decide.handoff import JobObservation, JobState

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    written: list[Any] = []
    monkeypatch.setattr(
        deletion_io, "write_remainder", lambda conf, admin, g, t, rem, timeout: written.append((g, t, rem))
    )
    monkeypatch.setattr(
        deletion_io, "list_progress_groups", lambda admin, g, timeout: [f"{g}.lagpilot-drain.2.0"]
    )
    deleted: list[Any] = []
    monkeypatch.setattr(
        deletion_io, "delete_groups", lambda admin, groups, timeout: deleted.extend(groups) or []
    )
    ex = FakeExecutor(JobObservation(JobState.FAILED), {(0, 0): (70, 70)})
    handlers.finalize(
        body=body(SPEC),
        spec=SPEC,
        status={"drain": running_drain()},
        meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
        memo=deleting_memo(Kube(), ex),
    )
    assert written == [("g", "t", Remainder(2, ((0, 70, 100),)))]
    assert deleted == ["g.lagpilot-drain.2.0"]
    assert [e[1] for e in events] == ["DrainRemainderHandedBack"] and "g.lagpilot-remainder" in events[0][2]


def test_finalize_retries_kafka_failures_then_drops_loudly(events: list, monkeypatch) -> None:
    import time as _time

    def boom(kube, ref, spec):
        raise RuntimeError("broker unreachable")

    monkeypatch.setattr(delete, "kafka_conf", boom)
    recent = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(_time.time() - 30))
    with pytest.raises(kopf.TemporaryError):
        handlers.finalize(
            body=body(SPEC),
            spec=SPEC,
            status={"drain": running_drain()},
            meta={"deletionTimestamp": recent},
            memo=deleting_memo(Kube(), FakeExecutor(None, None)),
        )
    # one Warning when the deletion starts failing (the Terminating reason changes), not one per retry
    assert [e[1] for e in events] == ["DeletionStepFailed"]
    events.clear()
    handlers.finalize(
        body=body(SPEC),
        spec=SPEC,
        status={"drain": running_drain()},
        meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
        memo=deleting_memo(Kube(), FakeExecutor(None, None)),
    )
    assert [e[1] for e in events] == ["DrainRemainderDropped"] and "(0, 40, 100)" in events[0][2]


def test_kopfs_line_for_a_waiting_finalizer_is_info_and_never_posted() -> None:
    """kopf logs a TemporaryError at ERROR and posts it as an `Error` event (M11): a DeletionWaiting
    is a wait, so its line becomes INFO and kopf's poster skips it (k8s_skip); other errors stay."""
    import logging

    def record(msg: str) -> logging.LogRecord:
        r = logging.LogRecord("kopf.objects", logging.ERROR, __file__, 1, msg, None, None)
        r.k8s_skip = False
        return r

    err = handlers.DeletionWaiting("deletion waits for drain 2 (up to 500s more)", delay=5)
    assert isinstance(err, kopf.TemporaryError) and err.delay == 5
    wait = record(f"Handler 'finalize' failed temporarily: {err}")
    assert handlers.waits_are_not_errors(wait) and wait.levelno == logging.INFO and wait.k8s_skip is True
    real = record("Handler 'finalize' failed temporarily: applying failed")
    assert handlers.waits_are_not_errors(real) and real.levelno == logging.ERROR and real.k8s_skip is False
    assert handlers.waits_are_not_errors in logging.getLogger("kopf.objects").filters


def test_adopt_remainder_records_the_drain_then_clears_the_group(monkeypatch) -> None:
    from lagpilot.act import deletion_io
    from lagpilot.decide.deletion import Remainder

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    monkeypatch.setattr(
        deletion_io, "read_remainder", lambda admin, g, t, timeout: Remainder(5, ((1, 10, 30),))
    )
    cleared: list[Any] = []
    monkeypatch.setattr(
        deletion_io, "delete_groups", lambda admin, groups, timeout: cleared.extend(groups) or []
    )
    kube, emitted = Kube(), []
    ref = handlers.GroupRef.from_body(body(SPEC))
    got = _adopt(ref, SPEC, {}, deleting_memo(kube, None), lambda *e: emitted.append(e))
    assert got == 6
    (patch,) = kube.patches
    d = patch["drain"]
    assert (d["id"], d["phase"], d["reason"]) == (6, "HandedOff", "AdoptedRemainder")
    assert d["subRanges"] == [{"partition": 1, "index": 0, "start": 10, "end": 30}]  # next: start, records: 0
    assert cleared == ["g.lagpilot-remainder"] and emitted[0][1] == "DrainRemainderAdopted"
    # already recorded (restart before the clear): only the clear, no second drain
    kube2, cleared[:] = Kube(), []
    assert _adopt(ref, SPEC, {"drain": d}, deleting_memo(kube2, None), lambda *e: None) is None
    assert kube2.patches == [] and cleared == ["g.lagpilot-remainder"]


def test_adopt_remainder_writes_the_drain_with_its_conditions(monkeypatch) -> None:
    """The adoption's status write carries status.drain AND the conditions it implies (Draining,
    DrainStalled) in the same guarded patch, as every other drain write (act.drain.drain_patch): no
    reader sees an adopted HandedOff drain under an old Draining=False."""
    from lagpilot.act import deletion_io
    from lagpilot.decide.deletion import Remainder

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    monkeypatch.setattr(
        deletion_io, "read_remainder", lambda admin, g, t, timeout: Remainder(5, ((1, 10, 30),))
    )
    monkeypatch.setattr(deletion_io, "delete_groups", lambda admin, groups, timeout: [])
    kube = Kube()
    old = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Reconciled",
            "message": "",
            "lastTransitionTime": "2026-11-26T00:00:00Z",
            "observedGeneration": 4,
        },
        {
            "type": "Draining",
            "status": "False",
            "reason": "NoDrain",
            "message": "",
            "lastTransitionTime": "2026-11-26T00:00:00Z",
            "observedGeneration": 4,
        },
    ]
    ref = handlers.GroupRef.from_body(body(SPEC))
    assert _adopt(ref, SPEC, {"conditions": old}, deleting_memo(kube, None), lambda *e: None) == 6
    (patch,) = kube.patches
    conds = {c["type"]: c for c in patch.get("conditions", [])}
    assert patch["drain"]["phase"] == "HandedOff"
    assert conds.get("Draining", {}).get("status") == "True", patch.get("conditions")
    assert conds["Ready"] == old[0] and conds["Draining"]["observedGeneration"] == 4


def test_adopt_remainder_never_overwrites_a_drain_another_writer_recorded(monkeypatch) -> None:
    """M3: the adoption is decided on the status it read; a drain recorded meanwhile (another
    operator instance) makes the guarded write a StatusConflict: nothing written, the group kept."""
    from lagpilot.act import deletion_io
    from lagpilot.act.kubeapi import StatusConflict
    from lagpilot.decide.deletion import Remainder

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    monkeypatch.setattr(
        deletion_io, "read_remainder", lambda admin, g, t, timeout: Remainder(5, ((1, 10, 30),))
    )
    cleared: list[Any] = []
    monkeypatch.setattr(
        deletion_io, "delete_groups", lambda admin, groups, timeout: cleared.extend(groups) or []
    )
    kube = Kube()
    kube.stored = {"drain": running_drain()}  # recorded by another writer after our read of {}
    with pytest.raises(StatusConflict):
        _adopt(handlers.GroupRef.from_body(body(SPEC)), SPEC, {}, deleting_memo(kube, None), lambda *e: None)
    assert kube.patches == [] and cleared == []


def test_finalize_of_a_planned_drain_hands_the_acked_range_back_and_seals_the_mailbox(
    events: list, monkeypatch
) -> None:
    """H1 wiring: the Planned inputs are read (consumers, offsets, mailbox), the acked range is written
    to the remainder group, THEN the mailbox is sealed, then the CR is released (no exception)."""
    from lagpilot.act import deletion_io
    from lagpilot.decide.deletion import Remainder
    from lagpilot_runtime import handoff_mailbox as mbx

    monkeypatch.setattr(delete, "kafka_conf", lambda kube, ref, spec: {"bootstrap.servers": "k:9092"})
    order: list[Any] = []
    ack = mbx.request(2, 100, owner="u1").with_ack(30)
    monkeypatch.setattr(
        deletion_io,
        "planned_inputs",
        lambda *a: {"consumers_alive": 1, "committed": {0: 120}, "mailbox": {0: ack}},
    )
    monkeypatch.setattr(
        deletion_io,
        "write_remainder",
        lambda conf, admin, g, t, rem, timeout: order.append(("remainder", rem)),
    )
    monkeypatch.setattr(deletion_io, "list_progress_groups", lambda admin, g, timeout: [])
    monkeypatch.setattr(deletion_io, "delete_groups", lambda admin, groups, timeout: [])
    ex = FakeExecutor(None, None)
    ex.write_mailbox = lambda admin, spec, entries, key: order.append(("seal", dict(entries)))  # type: ignore[attr-defined]
    planned = {
        "id": 2,
        "phase": "Planned",
        "ranges": [{"partition": 0, "end": 100}],
        "publishedAt": "2026-01-01T00:00:00Z",
    }
    handlers.finalize(
        body=body(SPEC),
        spec=SPEC,
        status={"drain": planned},
        meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
        memo=deleting_memo(Kube(), ex),
    )
    assert order == [("remainder", Remainder(2, ((0, 30, 100),))), ("seal", {0: ack.sealed()})]
    assert [e[1] for e in events] == ["DrainRemainderHandedBack"]
