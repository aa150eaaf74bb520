"""A local drain (the Job's pod, no warm runtime) ends on SIGTERM: the Job deleted (a cancel, the
finalizer's stop of a deleted CR's drain). In a container the drain is PID 1, and the kernel ignores
a signal whose action is the default for PID 1: without a handler the drain ran on for the pod's
whole grace period (seen on the real node: tests/real/test_finalizer.py, the deleted CR's drain
finished during it instead of handing its remainder back)."""

from __future__ import annotations

import signal

import pytest

from lagpilot_runtime.drain import job as drain_job
from lagpilot_runtime.drain import runtime as drain_runtime
from tests.unit.test_drain_runtime import ENV, PLAN  # the same drain and its environment


class Exited(Exception):
    pass


def test_a_local_drain_ends_on_sigterm_even_as_pid_1(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for k, v in {**ENV, "LAGPILOT_DRAIN_PLAN": PLAN.to_json()}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv(drain_runtime.RUNTIME_URL_ENV, raising=False)
    seen: dict[str, object] = {}

    def fake_run(plan, cfg, master, jars, extra, marks, part_key=None):
        seen["handler"] = signal.getsignal(signal.SIGTERM)  # what a SIGTERM meets while it drains
        return {"records": 10}

    monkeypatch.setattr(drain_job, "run", fake_run)
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise Exited(code)

    before = signal.getsignal(signal.SIGTERM)
    try:
        assert drain_job.main(["--summary-file", str(tmp_path / "summary.json")]) == 0
    finally:
        signal.signal(signal.SIGTERM, before)
    handler = seen["handler"]
    assert callable(handler), f"SIGTERM's action while the drain runs is {handler!r}: PID 1 ignores it"
    monkeypatch.setattr(drain_job.os, "_exit", fake_exit)
    with pytest.raises(Exited):
        handler(signal.SIGTERM, None)
    assert exits == [128 + signal.SIGTERM]


def test_the_warm_runtime_stops_serving_on_sigterm_even_as_pid_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """`lagpilot drain --serve` (the warm runtime's pod) is PID 1 of its container too: without a
    handler a SIGTERM (its Deployment scaled down, the CR deleted, a rollout) is ignored and the pod
    waits out its grace period before the SIGKILL. It stops serving and stops Spark instead; a drain
    it was serving keeps what its committed batches recorded, and its Job retries the rest."""
    monkeypatch.setattr(drain_runtime, "runtime_identity", lambda env: (b"k" * 32, "uid-1"))
    seen: dict[str, object] = {}

    class FakeServer:
        def serve_forever(self) -> None:
            pass

        def shutdown(self) -> None:
            seen["shutdown"] = True

    class FakeRuntime:
        spark = None

        def __init__(self, *a: object, **k: object) -> None:
            pass

        def warm_up(self) -> None:
            handler = signal.getsignal(signal.SIGTERM)
            seen["handler"] = handler
            assert callable(handler), f"SIGTERM's action while serving is {handler!r}: PID 1 ignores it"
            handler(signal.SIGTERM, None)  # the kubelet's SIGTERM arrives

        def rewarm(self) -> bool:
            raise AssertionError("served on after SIGTERM")

    monkeypatch.setattr(drain_runtime, "DrainRuntime", FakeRuntime)
    monkeypatch.setattr(drain_runtime, "make_server", lambda runtime, host, port: FakeServer())
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert drain_runtime.serve(object(), None, (), {}, env={}) == drain_job.EXIT_OK  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen.get("shutdown") is True
