"""A foreign member in the consumer group during a drain hand-off (issue 23, M6).

The real `kafka-console-consumer` (Kafka's own ConsoleConsumer class, what kafka-console-consumer.sh
runs) joins the CR's group with auto-commit off: it owns some partitions, never acknowledges the
hand-off and never commits. After the ack timeout the operator falls back to the quiesce (scale the
consumers to 0) — but the foreign member keeps the group non-empty. Before the fix the Deployment
stayed at 0 replicas for ever (`WaitingForGroupEmpty`).

Now the quiesce wait is bounded: past it, the operator names the foreign member (client id, host) in
the `Draining` condition and a `DrainHandOffForeignMembers` Warning event, gives the consumers their
replicas back and continues with the exact hand-off (owners ack; a partition the foreign member owns
resolves when it is given up or passes the split by itself). When the foreign consumer stops, the
hand-off completes and the drain is verified: every produced offset processed, the drain exactly its
recorded ranges (finish_and_check's ledger).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.test_drain_operator import PARTS, Scenario, finish_and_check, scenario  # noqa: F401  (fixture)
from tests.real.test_operator_e2e import condition, crd, events_for, get_cr  # noqa: F401  (crd: fixture)

pytestmark = [pytest.mark.real, pytest.mark.slow]

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"  # bin/kafka-console-consumer.sh's class


def console_consumer(
    kafka_part: Any, bootstrap: str, topic: str, group: str, client_id: str
) -> subprocess.Popen[bytes]:
    """`kafka-console-consumer.sh --group G` (auto-commit off), as kafka_part.run_cli_tool runs the tools."""
    kafka_part.install()
    argv = [
        shutil.which("java") or "java",
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={kafka_part.home / 'config' / 'tools-log4j2.properties'}",
        "-cp",
        str(kafka_part.libs / "*"),
        CONSOLE_CONSUMER,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--consumer-property",
        f"client.id={client_id}",
        "--consumer-property",
        "enable.auto.commit=false",
    ]
    return subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def members(kafka_admin: Any, group: str) -> list[str]:
    desc = kafka_admin.describe_consumer_groups([group])[group].result(30)
    return [m.client_id for m in desc.members]


def test_a_foreign_member_does_not_hold_the_group_at_zero_replicas(
    scenario: Callable[..., Scenario], kafka_part: Any, kafka_admin: Any, postgres_dsn: str
) -> None:
    from kubernetes import client

    s = scenario(
        {p: 15000 for p in range(PARTS)},
        operator_env={
            "LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "10",
            "LAGPILOT_DRAIN_QUIESCE_TIMEOUT_SECONDS": "20",
            "LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": "5",
        },
    )
    apps = client.AppsV1Api(s.custom.api_client)
    client_id = f"foreign-console-{uuid.uuid4().hex[:6]}"
    foreign = console_consumer(kafka_part, s.bootstrap, s.topic, s.group, client_id)
    try:
        # the fault fired: the foreign member is in the group while the quiesce fallback runs
        quiesced: dict[str, Any] = {}

        def quiescing() -> bool:
            d = s.drain()
            if d.get("handOffPath") == "Quiesce" and client_id in members(kafka_admin, s.group):
                quiesced.update(d)
                return True
            return False

        wait_until(quiescing, "the quiesce fallback with the foreign member in the group", 600, interval=1)
        print("quiesced:", {k: quiesced.get(k) for k in ("id", "phase", "reason", "message", "quiescedAt")})

        # bounded: the operator names the foreign member and gives the consumers their replicas back
        def named() -> list[Any]:
            return [
                e
                for e in events_for(s.core, s.ns, s.name)
                if e.reason == "DrainHandOffForeignMembers" and client_id in (e.message or "")
            ]

        (event,) = wait_until(named, "an event naming the foreign member", 300, interval=1)
        print("event:", event.type, event.message)
        assert event.type == "Warning"
        wait_until(
            lambda: (apps.read_namespaced_deployment(f"{s.name}-consumer", s.ns).spec.replicas or 0) > 0,
            "the consumers' replicas given back",
            120,
            interval=1,
        )
        # the conditions are written at the end of the cycle that scaled: wait for that write
        cond = wait_until(
            lambda: (lambda c: c if c and c["reason"] == "ForeignGroupMembers" else None)(
                condition(get_cr(s.custom, s.ns, s.name), "Draining")
            ),
            "the Draining condition to name the cause",
            60,
            interval=1,
        )
        assert cond["status"] == "True" and client_id in cond["message"], cond
        assert s.drain()["phase"] == "Planned"  # nothing was handed off behind the foreign member's back
    finally:
        foreign.terminate()
        foreign.wait(60)
    wait_until(
        lambda: client_id not in members(kafka_admin, s.group), "the foreign member gone", 120, interval=1
    )
    # the exact hand-off completes once the foreign member has left: nothing lost, nothing twice
    finish_and_check(s, kafka_admin, postgres_dsn)
    assert len([e for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainHandOffForeignMembers"]) == 1
