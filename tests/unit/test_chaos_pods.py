"""The chaos bench with its pods on the real node (bench/chaos/pods.py, docs/chaos.md "Pods on the
real node"): which kinds apply there, the CRs' spec (the test image, no PYTHONPATH, the eos
handler's crash hook), and that hook's claim. The host pids of the pods' containers come from
lagpilot_dev.node (tests/unit/test_node_pids.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import faults as cf
from bench.chaos import handler
from bench.chaos.cli import QUICK_KINDS
from bench.chaos.pods import (
    CRASH_TABLE_KEY,
    NODE_NOT_APPLICABLE,
    epoch,
    hook_crash_in_runtime,
    hook_crash_in_status,
    node_kinds,
)
from bench.chaos.stack import CampaignBase


def test_on_the_node_the_shared_control_planes_restarts_and_the_hold_are_not_applicable() -> None:
    kinds, na = node_kinds(cf.KINDS)
    assert na == ("apiserver_restart", "etcd_restart", "operator_at_next_alter_offsets")
    assert set(na) == set(NODE_NOT_APPLICABLE)
    assert kinds == frozenset(cf.KINDS) - set(na)
    # the CI campaign's six kinds all run on the node
    assert node_kinds(QUICK_KINDS) == (frozenset(QUICK_KINDS), ())


def _campaign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CampaignBase:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    args = argparse.Namespace(
        fault_timeout=1.0,
        warm_runtime=False,
        quick=False,
        eos_handler="bench.chaos.handler:process",
        cost_ms=500,
        alo_cost_ms=50,
        sla=20,
    )
    c = CampaignBase(args)
    c.bootstrap, c.pods_bootstrap = "127.0.0.1:9092", "10.244.0.1:9094"
    c.image = "lagpilot/test-consumer:0.1.0-cabc"
    return c


@pytest.mark.parametrize("which", ["eos", "alo"])
def test_on_the_node_the_crs_run_the_test_image_and_reach_the_bridge(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = _campaign(tmp_path, monkeypatch)
    spec = c.spec(which)
    assert spec["kafka"]["bootstrapServers"] == "10.244.0.1:9094"
    t = spec["template"]
    assert (t["image"], t["imagePullPolicy"]) == ("lagpilot/test-consumer:0.1.0-cabc", "Never")
    assert "PYTHONPATH" not in {e["name"] for e in t["env"]}  # the image's own
    config = spec["processing"]["config"]
    assert (config.get(CRASH_TABLE_KEY) == c.crash_table) is (which == "eos")


class _Conn:
    def __init__(self, claimed: bool) -> None:
        self.claimed, self.sql = claimed, []

    def __enter__(self) -> _Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: Any = None) -> Any:
        self.sql.append((sql, params))
        answer = (("x",) if self.claimed else None) if sql.startswith("UPDATE") else (self.fired_elsewhere,)

        class R:
            def fetchone(self) -> Any:
                return answer

        return R()

    fired_elsewhere = False


@pytest.mark.parametrize("claimed", [True, False])
def test_the_handlers_node_hook_dies_once_claimed_after_two_consumer_batches(
    claimed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    conn = _Conn(claimed)
    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: conn)
    monkeypatch.setenv("LAGPILOT_POSTGRES_DSN", "postgresql://x")
    monkeypatch.setattr(handler, "_batches", {"consumer": 0})
    exits: list[int] = []
    monkeypatch.setattr(handler.os, "_exit", exits.append)
    ctx = argparse.Namespace(config={CRASH_TABLE_KEY: "chaos_crash_x"}, source="consumer")
    for _ in range(handler.CRASH_AFTER_BATCHES):
        handler.crash_after_write(ctx)  # type: ignore[arg-type]
    assert conn.sql == [] and exits == []  # not before its 3rd batch
    handler.crash_after_write(ctx)  # type: ignore[arg-type]
    assert conn.sql[0] == (handler.crash_claim_sql("chaos_crash_x"), (conn.sql[0][1][0],))
    assert "WHERE armed AND fired IS NULL" in conn.sql[0][0]
    assert exits == ([137] if claimed else [])
    assert len(conn.sql) == (1 if claimed else 2)  # not claimed: is it spent?
    # a drain's batches and a CR without the hook never claim it
    conn.sql.clear()
    handler.crash_after_write(argparse.Namespace(config={CRASH_TABLE_KEY: "t"}, source="drain"))  # type: ignore[arg-type]
    handler.crash_after_write(argparse.Namespace(config={}, source="consumer"))  # type: ignore[arg-type]
    assert conn.sql == []


def test_the_hooks_config_key_is_the_handlers() -> None:
    assert handler.CRASH_TABLE_KEY == CRASH_TABLE_KEY


def test_the_handlers_node_hook_stops_asking_once_fired_and_never_fails_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    conn = _Conn(False)
    conn.fired_elsewhere = True  # another pod claimed it
    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: conn)
    monkeypatch.setenv("LAGPILOT_POSTGRES_DSN", "postgresql://x")
    monkeypatch.setattr(handler, "_batches", {"consumer": handler.CRASH_AFTER_BATCHES})
    ctx = argparse.Namespace(config={CRASH_TABLE_KEY: "t"}, source="consumer")
    handler.crash_after_write(ctx)  # type: ignore[arg-type]
    assert len(conn.sql) == 2 and handler._batches["spent"] == 1
    handler.crash_after_write(ctx)  # type: ignore[arg-type]
    assert len(conn.sql) == 2  # spent: no more queries

    def down(*a: Any, **k: Any) -> Any:
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(psycopg, "connect", down)
    monkeypatch.setattr(handler, "_batches", {"consumer": handler.CRASH_AFTER_BATCHES})
    handler.crash_after_write(ctx)  # type: ignore[arg-type]  # no exception: the batch stands


class _Pod:
    def __init__(self, name: str, ip: str | None) -> None:
        self.metadata = argparse.Namespace(name=name)
        self.status = argparse.Namespace(pod_ip=ip)


def test_forged_plans_go_to_the_runtime_pods_ip_on_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """forged_plan with the pods on the node: the runtime listens on its pod's IP, not the host's
    loopback (seen before the fix: not fired, 'Connection refused' from 127.0.0.1:<port>)."""
    from bench.chaos import review
    from bench.chaos.cli import Campaign

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    c = Campaign(
        argparse.Namespace(
            fault_timeout=1.0,
            warm_runtime=True,
            quick=False,
            eos_handler="x:y",
            cost_ms=1,
            alo_cost_ms=1,
            sla=1,
        )
    )
    c.ns, c.topic = "chaos-x", "chaos-x"
    pod = _Pod("eos-drain-runtime-1", "10.244.0.77")
    c.core = argparse.Namespace(read_namespaced_pod=lambda name, ns: pod)
    monkeypatch.setattr(c, "runtime_pod", lambda: (pod.metadata.name, 123, True))
    monkeypatch.setattr(c, "runtime_events", lambda *a: [])
    monkeypatch.setattr(c, "watermarks", lambda: {0: 10, 1: 10})
    monkeypatch.setattr(c, "live_job_plan", lambda: None)
    monkeypatch.setattr(c, "how_ran", lambda d: {})
    monkeypatch.setattr(review.time, "sleep", lambda s: None)
    sent: list[tuple[Any, ...]] = []

    def attack(port: int, bodies: list[str], healthz: bool = False, host: str = "127.0.0.1") -> Any:
        sent.append((port, host))
        return [(401, "refused")] * len(bodies)

    monkeypatch.setattr(review, "attack", attack)
    f = cf.Fault("forged_plan", 1, "eos")
    c.forge(f, {"id": 3, "recordsDone": 1, "recordsTotal": 9})
    assert f.fired
    assert {h for _, h in sent} == {"10.244.0.77"}


CLAIM = 1795773320.2  # the hook's claim (its container's clock)


def _api(restarts: int, last_exit: int | None, finished: str, running: bool = True) -> dict[str, Any]:
    return {
        "restartCount": restarts,
        "state": {"running": {"startedAt": "2026-11-27T09:55:31Z"}} if running else {"waiting": {}},
        "lastState": {"terminated": {"exitCode": last_exit, "finishedAt": finished}} if last_exit else {},
    }


@pytest.mark.parametrize(
    ("status", "seen"),
    [
        # ended with 137 in the claim's second (whole seconds) and runs again: the hook's crash
        (_api(2, 137, "2026-11-27T09:55:20Z"), {"exit_code": 137, "restarts": 2, "seen_by": "api"}),
        # still in its back-off: not yet run again
        (_api(1, 137, "2026-11-27T09:55:20Z", running=False), None),
        # the last end is consumer_kill's, before the claim: not the hook's
        (_api(1, 137, "2026-11-27T09:55:06Z"), None),
        # ended after the claim but not with 137 (another failure): not the hook's
        (_api(2, 1, "2026-11-27T09:55:21Z"), None),
        (_api(0, None, ""), None),
    ],
)
def test_the_hooks_crash_in_the_pods_api_status_is_a_137_end_after_the_claim_and_a_new_run(
    status: dict[str, Any], seen: dict[str, Any] | None
) -> None:
    assert hook_crash_in_status([status], CLAIM) == seen


def _rt(
    attempt: int, state: str, exit_code: int = 0, finished: str = "0001-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "metadata": {"name": "consumer", "attempt": attempt},
        "state": state,
        "exitCode": exit_code,
        "finishedAt": finished,
    }


def test_the_hooks_crash_seen_by_the_runtime_is_an_exited_137_after_the_claim_and_a_later_attempt_running() -> (
    None
):
    # the failing run's containers (containerd's log, 2026-11-27): attempt 0 killed by consumer_kill at
    # 09:55:06, attempt 1 ended by the hook at 09:55:20.31, attempt 2 started at 09:55:31
    killed = _rt(0, "CONTAINER_EXITED", 137, "2026-11-27T09:55:06.167184972Z")
    hooked = _rt(1, "CONTAINER_EXITED", 137, "2026-11-27T09:55:20.310889270Z")
    again = _rt(2, "CONTAINER_RUNNING")
    assert hook_crash_in_runtime([killed, hooked, again], CLAIM) == {
        "exit_code": 137,
        "restarts": 2,
        "seen_by": "runtime",
    }
    assert hook_crash_in_runtime([killed, hooked], CLAIM) is None  # in its back-off
    assert hook_crash_in_runtime([killed, _rt(1, "CONTAINER_RUNNING")], CLAIM) is None  # consumer_kill's only
    other = _rt(1, "CONTAINER_EXITED", 1, "2026-11-27T09:55:21Z")
    assert hook_crash_in_runtime([other, again], CLAIM) is None  # not a 137 end
    assert hook_crash_in_runtime([], CLAIM) is None


def test_epoch_reads_the_apis_and_crictls_times() -> None:
    assert epoch("2026-11-27T09:55:20Z") == 1795773320.0
    assert epoch("2026-11-27T09:55:20+00:00") == 1795773320.0
    assert abs(epoch("2026-11-27T09:55:20.310889270Z") - 1795773320.310889) < 1e-5
    assert epoch("0001-01-01T00:00:00Z") == 0.0 and epoch("") == 0.0 and epoch(None) == 0.0
    assert epoch(12.5) == 12.5
