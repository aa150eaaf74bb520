"""handlers.py: the kopf wiring translates outcomes into kopf's retry semantics (no cluster)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from lagpilot import handlers
from lagpilot.kubeapi import KubeError

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


def memo(kube: Kube) -> Any:
    cfg = SimpleNamespace(pod_start_seconds=0, kafka_timeout_seconds=1, min_backoff_seconds=1, max_backoff_seconds=2)
    return SimpleNamespace(kube=kube, config=cfg, admin_pool=None, metrics=None, drain=object())


def body(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "orders", "uid": "u1", "generation": 4}, "spec": spec}


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    monkeypatch.setattr(kopf, "event", lambda obj, type, reason, message: seen.append((type, reason, message)))
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
    with pytest.raises(kopf.PermanentError, match="spec.scaling.maxReplicas"):
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
