"""The mailbox hand-off under faults on the real stack (operator subprocess + kube-apiserver +
controller-manager + pod runner + Kafka + Spark + PostgreSQL), with the ledger handler of
tests/real/test_drain_operator.py (one row per delivery, no key): every offset processed, none
lost, duplicates at most one in-flight batch per killed consumer.

- a consumer SIGKILLed between its split commit and its seek (test-only crash point, proven fired),
  in the same run as a drain planned while another partition is mid-rebalance (its owner SIGKILLed
  just before the drain is enabled: the partition has no live owner when the split is published; the
  restarted member finds the request in on_assign);
- a scale-down and scale-up of the Deployment while the hand-off is published (Planned): the
  scaler stays free on the ConsumerAck path, partitions move with their offsets and mailbox entries;
- consumers that never ack (an older image, simulated by LP_TEST_NO_HANDOFF): after the ack
  timeout the quiesce fallback (scale to 0, wait for the group to be empty, ack + alter for it).

The operator's ack timeout is raised so the quiesce fallback cannot take over (path ConsumerAck).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot.decide.status import parse_time
from tests.fixtures.kube import wait_until
from tests.fixtures.node import pods_on_the_runner as pods  # noqa: F401 - its pods stay on the runner (docs/node.md step 4)
from tests.real.test_drain_operator import PARTS, Scenario, finish_and_check, scenario, wait_phase  # noqa: F401
from tests.real.test_operator_e2e import crd  # noqa: F401  (fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]

NO_FALLBACK = {"LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "300"}


def consumer_pids(pod_runner: Any, s: Scenario) -> dict[str, int]:
    return {n: pid for n, pid in pod_runner.running_pids(s.ns).items() if "drain" not in n}


def running_consumers(s: Scenario) -> set[str]:
    """The scenario's consumer pods whose process runs now (`pod_io.running`: on the runner or the node)."""
    assert s.io is not None
    return {n for n in s.io.running(s.ns) if "drain" not in n}


def wait_group_running(s: Scenario, postgres_dsn: str, replicas: int = PARTS) -> None:
    import psycopg

    def ready() -> bool:
        s.op.ensure()
        if len(running_consumers(s)) < replicas:
            return False
        with psycopg.connect(postgres_dsn) as conn:
            parts = conn.execute(
                f"SELECT count(DISTINCT partition) FROM {s.table} WHERE source = 'consumer'"
            ).fetchone()[0]
        return int(parts) == PARTS

    wait_until(ready, "the live group processing every partition", 300, interval=1)


def enable_drain(s: Scenario) -> None:
    s.custom.patch_namespaced_custom_object(
        "lagpilot.io", "v1alpha1", s.ns, "batchconsumergroups", s.name, {"spec": {"drain": {"enabled": True}}}
    )


def handoff_log_lines(pod_runner: Any, s: Scenario) -> list[str]:
    logs = Path(pod_runner.workdir) / "logs"
    out = []
    for f in logs.glob(f"*{s.ns}*"):
        out += [ln for ln in f.read_text(errors="replace").splitlines() if "handoff_ack" in ln]
    return out


def test_consumer_killed_between_commit_and_seek_and_drain_planned_mid_rebalance(
    scenario: Callable[..., Scenario], pod_runner: Any, tmp_path: Path, kafka_admin: Any, postgres_dsn: str
) -> None:
    crash_dir = tmp_path / "consumer-crash"
    crash_dir.mkdir()
    s = scenario(
        {p: 8000 for p in range(PARTS)},
        sla_s=30,
        drain_enabled=False,
        operator_env=NO_FALLBACK,
        consumer_env={
            "LP_TEST_HANDOFF_CRASH_AT": "after_commit",
            "LP_TEST_HANDOFF_CRASH_DIR": str(crash_dir),
        },
    )
    wait_group_running(s, postgres_dsn)
    # mid-rebalance: one member gone (SIGKILL, restarted by the pod runner after its back-off)
    victim, vpid = sorted(consumer_pids(pod_runner, s).items())[0]
    os.killpg(vpid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{vpid}").exists(), "the killed consumer gone", 30, interval=0.1)
    killed_at = time.time()
    enable_drain(s)
    d = wait_phase(s, ("Planned", "HandedOff", "Running", "Succeeded", "Verified"), 300, interval=0.2)
    assert parse_time(d["plannedAt"]) >= killed_at - 1, "the drain was planned before the rebalance started"
    restarted = pod_runner.pid_of(s.ns, victim)
    print(
        f"killed {victim} (pid {vpid}) at {killed_at:.1f}; drain planned at {parse_time(d['plannedAt']):.1f}; "
        f"victim running again: {restarted is not None and restarted != vpid}"
    )
    d = wait_phase(s, ("HandedOff", "Running", "Succeeded", "Verified"), 600)
    marker = crash_dir / "handoff-after_commit"
    assert marker.exists(), "the consumer's crash point (after its split commit, before its seek) never fired"
    cpid = int(marker.read_text().split()[0])
    assert not Path(f"/proc/{cpid}").exists(), f"consumer pid {cpid} still alive"
    crashed_pod = [*marker.read_text().split(), ""][2]
    print(
        f"consumer pid {cpid} ({crashed_pod}) died between its split commit and its seek; "
        f"the SIGKILLed member was {victim}"
    )
    d = finish_and_check(s, kafka_admin, postgres_dsn, allow_replayed_batches=2)
    assert d["handOffPath"] == "ConsumerAck" and d.get("quiescedAt") is None, d
    acks = handoff_log_lines(pod_runner, s)
    print(f"{len(acks)} handoff_ack log lines, e.g. {acks[:1]}")
    assert acks, "no consumer logged a hand-off"


def test_scale_down_and_up_during_the_hand_off(
    scenario: Callable[..., Scenario], pod_runner: Any, kube_api: Any, kafka_admin: Any, postgres_dsn: str
) -> None:
    from kubernetes import client

    from lagpilot.act.deployment import deployment_name

    apps = client.AppsV1Api(kube_api)
    # a slower handler (3 s per batch of 100): owners ack at their next batch boundary, so the
    # hand-off stays published for a few seconds while the group rebalances
    s = scenario(
        {p: 4000 for p in range(PARTS)}, sla_s=30, drain_enabled=False, operator_env=NO_FALLBACK, cost_ms=3000
    )
    wait_group_running(s, postgres_dsn)
    before = consumer_pids(pod_runner, s)
    dep = deployment_name(s.name)
    # scale down (two members finish their 3 s batch and leave: a rebalance) and enable the drain
    # at once, so the split is published while the group rebalances; scale up again as soon as the
    # hand-off is seen published (new members join while it resolves)
    apps.patch_namespaced_deployment_scale(dep, s.ns, {"spec": {"replicas": 1}})
    down_at = time.time()
    enable_drain(s)
    d = wait_phase(s, ("Planned", "HandedOff", "Running", "Succeeded", "Verified"), 300, interval=0.1)
    phase_at_up = d.get("phase")
    apps.patch_namespaced_deployment_scale(dep, s.ns, {"spec": {"replicas": 3}})
    up_at = time.time()
    gone: dict[str, float] = {}

    def members_left() -> bool:
        for name, pid in before.items():
            if name not in gone and not Path(f"/proc/{pid}").exists():
                gone[name] = time.time()
        return len(gone) >= 2

    wait_until(members_left, "two consumers stopped by the scale-down", 60, interval=0.1)
    d = wait_phase(s, ("HandedOff", "Running", "Succeeded", "Verified"), 600)
    print(
        f"scale-down at {down_at:.1f}, published {parse_time(d.get('publishedAt')):.1f}, scale-up at {up_at:.1f} (phase then "
        f"{phase_at_up}), members gone at {sorted(round(t, 1) for t in gone.values())}, handed off {parse_time(d.get('handedOffAt')):.1f}"
    )
    assert down_at < parse_time(d["handedOffAt"]), "the scale-down came after the hand-off"
    d = finish_and_check(s, kafka_admin, postgres_dsn, allow_replayed_batches=2)
    assert d["handOffPath"] == "ConsumerAck", d


def test_consumers_that_never_ack_get_the_quiesce_fallback(
    scenario: Callable[..., Scenario], pod_runner: Any, kafka_admin: Any, postgres_dsn: str
) -> None:
    s = scenario(
        {p: 8000 for p in range(PARTS)},
        sla_s=30,
        consumer_env={"LP_TEST_NO_HANDOFF": "1"},
        operator_env={"LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "10"},
    )
    held: list[int] = []

    def watch(d: dict[str, Any]) -> None:  # while the fallback holds, the Deployment stays at 0
        if d.get("phase") == "Planned" and d.get("handOffPath") == "Quiesce" and d.get("quiescedAt"):
            held.append(len(consumer_pids(pod_runner, s)))

    d = wait_phase(s, ("HandedOff", "Running", "Succeeded", "Verified"), 600, on_poll=watch)
    assert d["handOffPath"] == "Quiesce", d
    reasons = [
        e.reason
        for e in __import__("tests.real.test_operator_e2e", fromlist=["events_for"]).events_for(
            s.core, s.ns, s.name
        )
    ]
    assert "DrainHandOffFallback" in reasons, reasons
    print(
        f"fallback: published {d.get('publishedAt')}, quiesced {d.get('quiescedAt')}, consumer pods seen while held {held[-5:]}"
    )
    assert held and held[-1] == 0, held
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d["pauseSeconds"] is not None and d["pauseSeconds"] > 0
