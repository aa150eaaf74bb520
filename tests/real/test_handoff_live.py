"""The mailbox hand-off under faults on the real stack (operator subprocess + kube-apiserver +
controller-manager + the pods where `pods` runs them: the real node by default, Pod Security
`restricted` + Kafka + Spark + PostgreSQL), with the ledger handler of
tests/real/test_drain_operator.py (one row per delivery, no key): every offset processed, none
lost, duplicates at most one in-flight batch per killed consumer.

- a consumer SIGKILLed between its split commit and its seek (test-only crash point, proven fired:
  its once-claim in PostgreSQL, exit code 137 and its `test_crash` line; the LP_TEST_* hooks reach
  the pods through the test hooks' admission policy, `tests.fixtures.node.TestHooks`),
  in the same run as a drain planned while another partition is mid-rebalance (its owner SIGKILLed
  just before the drain is enabled: the partition has no live owner when the split is published; the
  restarted member finds the request in on_assign);
- a scale-down and scale-up of the Deployment while the hand-off is published (Planned): the
  scaler stays free on the ConsumerAck path, partitions move with their offsets and mailbox entries;
- consumers that never ack (an older image, simulated by LP_TEST_NO_HANDOFF): after the ack
  timeout the quiesce fallback (scale to 0, wait for the group to be empty, ack + alter for it),
  judged on the Deployment's replicas, the group's members (AdminClient) and the ledger.

The operator's ack timeout is raised so the quiesce fallback cannot take over (path ConsumerAck).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lagpilot.decide.status import parse_time
from tests.fixtures.kube import wait_until
from tests.real.test_drain_operator import (  # noqa: F401
    PARTS,
    Scenario,
    assert_crashed,
    crash_fired,
    finish_and_check,
    scenario,
    wait_phase,
)
from tests.real.test_operator_e2e import crd  # noqa: F401  (fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]

NO_FALLBACK = {"LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "300"}


def consumer_pids(s: Scenario) -> dict[str, list[int]]:
    """pod name -> host pids of the scenario's running consumer pods (`pod_io.pids`: the node's
    container init), for a test to watch /proc/<pid> end."""
    assert s.io is not None
    return {n: s.io.pids(s.ns, n) for n in running_consumers(s)}


def gone(pids: list[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def running_consumers(s: Scenario) -> set[str]:
    """The scenario's consumer pods whose process runs now (`pod_io.running`)."""
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
    s.patch_spec({"drain": {"enabled": True}})


def handoff_log_lines(s: Scenario) -> list[str]:
    """The consumers' `handoff_ack` log lines (`pod_io`: the API's logs and the
    last read of deleted pods)."""
    assert s.io is not None
    return [
        ln for text in s.io.namespace_logs(s.ns).values() for ln in text.splitlines() if "handoff_ack" in ln
    ]


def test_consumer_killed_between_commit_and_seek_and_drain_planned_mid_rebalance(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str
) -> None:
    s = scenario(
        {p: 8000 for p in range(PARTS)},
        sla_s=30,
        drain_enabled=False,
        operator_env=NO_FALLBACK,
        consumer_env={"LP_TEST_HANDOFF_CRASH_AT": "after_commit"},
    )
    wait_group_running(s, postgres_dsn)
    assert s.io is not None
    # mid-rebalance: one member gone (SIGKILL, restarted in place by the kubelet)
    victim, vpids = sorted(consumer_pids(s).items())[0]
    assert vpids and s.io.kill(s.ns, victim), f"{victim} had no process to kill"
    wait_until(lambda: gone(vpids), "the killed consumer gone", 30, interval=0.1)
    killed_at = time.time()
    enable_drain(s)
    d = wait_phase(s, ("Planned", "HandedOff", "Running", "Succeeded", "Verified"), 300, interval=0.2)
    assert parse_time(d["plannedAt"]) >= killed_at - 1, "the drain was planned before the rebalance started"
    restarted = s.io.pids(s.ns, victim)
    print(
        f"killed {victim} (pids {vpids}) at {killed_at:.1f}; drain planned at {parse_time(d['plannedAt']):.1f}; "
        f"victim running again: {bool(restarted) and restarted != vpids}"
    )
    d = wait_phase(s, ("HandedOff", "Running", "Succeeded", "Verified"), 600)
    fired = crash_fired(s, postgres_dsn, "handoff-after_commit")
    assert fired is not None, (
        "the consumer's crash point (after its split commit, before its seek) never fired"
    )
    cpid, crashed_pod, claimed_at = fired
    exited = assert_crashed(s, crashed_pod, claimed_at)
    print(
        f"consumer {crashed_pod} (pid {cpid}) died between its split commit and its seek ({exited}); "
        f"the SIGKILLed member was {victim}"
    )
    d = finish_and_check(s, kafka_admin, postgres_dsn, allow_replayed_batches=2)
    assert d["handOffPath"] == "ConsumerAck" and d.get("quiescedAt") is None, d
    acks = handoff_log_lines(s)
    print(f"{len(acks)} handoff_ack log lines, e.g. {acks[:1]}")
    assert acks, "no consumer logged a hand-off"


def test_scale_down_and_up_during_the_hand_off(
    scenario: Callable[..., Scenario], kube_api: Any, kafka_admin: Any, postgres_dsn: str
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
    before = {n: pids for n, pids in consumer_pids(s).items() if pids}
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
    left: dict[str, float] = {}

    def members_left() -> bool:
        for name, pids in before.items():
            if name not in left and gone(pids):
                left[name] = time.time()
        return len(left) >= 2

    wait_until(members_left, "two consumers stopped by the scale-down", 60, interval=0.1)
    d = wait_phase(s, ("HandedOff", "Running", "Succeeded", "Verified"), 600)
    print(
        f"scale-down at {down_at:.1f}, published {parse_time(d.get('publishedAt')):.1f}, scale-up at {up_at:.1f} (phase then "
        f"{phase_at_up}), members gone at {sorted(round(t, 1) for t in left.values())}, handed off {parse_time(d.get('handedOffAt')):.1f}"
    )
    assert down_at < parse_time(d["handedOffAt"]), "the scale-down came after the hand-off"
    d = finish_and_check(s, kafka_admin, postgres_dsn, allow_replayed_batches=2)
    assert d["handOffPath"] == "ConsumerAck", d


@dataclass
class HoldSample:
    """One look at the group while the quiesce fallback holds it (phase Planned, path Quiesce,
    quiescedAt set): the Deployment's spec.replicas, the consumer pods that exist (terminating
    ones included) with their host pids, the group's members' client ids (None: not read)."""

    at: float  # after the reads: a group described empty was empty by then
    replicas: int | None
    pods: dict[str, list[int]]
    members: list[str] | None


def held(d: dict[str, Any]) -> bool:
    return d.get("phase") == "Planned" and d.get("handOffPath") == "Quiesce" and bool(d.get("quiescedAt"))


def member_client_ids(kafka_admin: Any, group: str) -> list[str] | None:
    """The group's members' client ids (a consumer's is `lagpilot-<its pod>`); None when the broker
    did not answer (a coordinator hiccup: that look is skipped, not judged)."""
    try:
        desc = kafka_admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:  # noqa: BLE001 - judged only on answers
        return None
    return sorted(str(m.client_id) for m in desc.members or ())


def consumer_pods(s: Scenario) -> dict[str, list[int]]:
    """Every consumer pod that exists now, those being deleted included, -> its host pids (none once
    its process ended)."""
    assert s.io is not None
    names = {
        p.metadata.name for p in s.core.list_namespaced_pod(s.ns).items if "drain" not in p.metadata.name
    }
    return {n: s.io.pids(s.ns, n) for n in sorted(names)}


def test_consumers_that_never_ack_get_the_quiesce_fallback(
    scenario: Callable[..., Scenario], kube_api: Any, kafka_admin: Any, postgres_dsn: str
) -> None:
    """What the fallback promises (docs/drain.md, phase table): the Deployment at 0 with the scaler
    held, the group empty before the operator acks and moves it, nothing consumed by the group from
    then until the replicas are back. Judged on what cannot be a sampling accident: replicas 0 at
    every look while held, no consumer pod created while held, no held pod a member of the group
    after the seal, every held pod's process ended, no consumer batch from the first look at an
    empty group (or the seal) until the resume (the ledger's handler start times), and the
    exact-once ledger (no offset by both paths).
    Not judged: how many consumer processes happen to run at the last look while held (a consumer
    leaves the group before its process exits, so the group is empty and sealed while the process
    still runs for a moment)."""
    import psycopg
    from kubernetes import client

    from lagpilot.act.deployment import deployment_name

    apps = client.AppsV1Api(kube_api)
    s = scenario(
        {p: 8000 for p in range(PARTS)},
        sla_s=30,
        consumer_env={"LP_TEST_NO_HANDOFF": "1"},
        operator_env={"LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "10"},
    )
    dep = deployment_name(s.name)
    samples: list[HoldSample] = []
    after_seal: list[tuple[float, list[str] | None]] = []

    def watch(d: dict[str, Any]) -> None:
        if held(d):
            scale = apps.read_namespaced_deployment(dep, s.ns).spec.replicas
            pods, members = consumer_pods(s), member_client_ids(kafka_admin, s.group)
            samples.append(HoldSample(time.time(), scale, pods, members))
        elif samples and not after_seal:  # the first look after the hold
            after_seal.append((time.time(), member_client_ids(kafka_admin, s.group)))

    d = wait_phase(s, ("HandedOff", "Running", "Succeeded", "Verified"), 600, on_poll=watch, interval=0.3)
    if not after_seal:
        watch(d)
    assert d["handOffPath"] == "Quiesce", d
    reasons = [
        e.reason
        for e in __import__("tests.real.test_operator_e2e", fromlist=["events_for"]).events_for(
            s.core, s.ns, s.name
        )
    ]
    assert "DrainHandOffFallback" in reasons, reasons
    assert samples, (
        f"the hold was never seen (published {d.get('publishedAt')}, quiesced {d.get('quiescedAt')})"
    )
    held_pods = {n for x in samples for n in x.pods}
    held_ids = {f"lagpilot-{n}" for n in held_pods}
    print(
        f"fallback: published {d.get('publishedAt')}, quiesced {d.get('quiescedAt')}, handed off "
        f"{d.get('handedOffAt')}; {len(samples)} looks while held (replicas, pods with a process, members): "
        f"{[(x.replicas, sum(1 for p in x.pods.values() if p), x.members) for x in samples]}; "
        f"members at the first look after the seal {after_seal}"
    )
    # the scaler is held at 0 and no consumer pod is created while the group is held
    assert all(x.replicas == 0 for x in samples), [(round(x.at, 1), x.replicas) for x in samples]
    first = set(samples[0].pods)
    assert held_pods <= first, f"consumer pods created while held: {sorted(held_pods - first)}"
    # every member while held is one of the held pods (nobody joined), and none is a member after
    # the seal: the operator's "group empty" as the broker describes it
    joined = {m for x in samples for m in x.members or () if m not in held_ids}
    assert not joined, f"members that are not held consumers joined while held: {sorted(joined)}"
    seal_members = after_seal[0][1] if after_seal else None
    assert seal_members is not None, "the group was not described after the seal"
    assert not held_ids & set(seal_members), f"held consumers still members after the seal: {seal_members}"
    # every held pod's process ends (a consumer that left the group exits a moment later)
    held_pids = [pid for x in samples for pids in x.pods.values() for pid in pids]
    wait_until(lambda: gone(held_pids), "the held consumers' processes ended", 120, interval=0.5)
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d["pauseSeconds"] is not None and d["pauseSeconds"] > 0
    # nothing consumed by the group from the first look at an empty group (or the seal) until the
    # replicas' return: handler start times, on the same host clock as the operator's and the test's
    sealed_at = parse_time(d.get("handedOffAt"))
    quiesced_at = parse_time(d.get("quiescedAt"))
    assert sealed_at is not None and quiesced_at is not None, d
    resumed_at = parse_time(d.get("resumedAt")) or quiesced_at + float(d["pauseSeconds"])
    empty_at = min([x.at for x in samples if x.members == []] + [sealed_at])
    with psycopg.connect(postgres_dsn) as conn:
        during, last_before, first_after = conn.execute(
            f"SELECT count(*) FILTER (WHERE at >= %s AND at < %s), max(at) FILTER (WHERE at < %s), "
            f"min(at) FILTER (WHERE at >= %s) FROM {s.table} WHERE source = 'consumer'",
            (empty_at, resumed_at, empty_at, resumed_at),
        ).fetchone()
    print(
        f"quiesced {quiesced_at:.1f}, group first seen empty {empty_at:.1f}, sealed {sealed_at:.1f}, resumed "
        f"{resumed_at:.1f}: last consumer batch before {last_before}, first after the resume {first_after}, "
        f"rows in between {during}"
    )
    assert during == 0, f"{during} rows consumed by the group while it was empty or sealed, before the resume"
