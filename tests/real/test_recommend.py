"""spec.mode Recommend on a group lagpilot does not run (issue 28 item 2), on the real stack.

The group is consumed by a plain confluent-kafka loop started here by hand (no Deployment, no
lagpilot runtime, no commit metadata): slow (about 100 records/s), committing every 50 records and
writing each commit to a file. A backlog is produced; the operator (mode Recommend) publishes its
recommendation (status.recommendation with the capacity measured from the group's commits, a
Recommendation event, metrics). Then the proof that it changed nothing: the group's committed
offsets are exactly the hand consumer's last commits, its only member while it ran was the hand
consumer, no other group of that name family exists, and the namespace has no Deployment, Job or
SparkApplication and no ScaledUp/ScaledDown/Drain* event."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.test_crd import crd  # noqa: F401 - fixture
from tests.real.test_operator_e2e import (
    Operator,
    apply_cr,
    cr,
    events_for,
    get_cr,
    produce,
    start_operator,  # noqa: F401 - the fixture
)

pytestmark = pytest.mark.real

HAND_CONSUMER = r"""
import json, os, signal, sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, group, out = sys.argv[1:5]
# SIGINT only sets a flag, read between records: a commit and the file that records it are never
# split by the stop (a KeyboardInterrupt raised anywhere, inside poll() or between the commit and
# the file's rename, once left the consumer hanging in close() or the file behind the commit)
stop = []
signal.signal(signal.SIGINT, lambda *_: stop.append(1))
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "hand-consumer",
              "enable.auto.commit": False, "auto.offset.reset": "earliest"})
c.subscribe([topic])
done, last = 0, {}
try:
    while not stop:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        time.sleep(0.01)  # "processing": about 100 records/s
        last[m.partition()] = m.offset() + 1
        done += 1
        if done % 50 == 0:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in last.items()], asynchronous=False)
            with open(out + ".tmp", "w") as f:
                json.dump({str(p): o for p, o in last.items()}, f)
            os.replace(out + ".tmp", out)
finally:
    print("hand consumer stopping after", done, "records", flush=True)
    c.close()
    print("hand consumer closed", flush=True)
"""


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[str, int]:
    """The group's committed offsets, read without joining it (OffsetFetch)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return {str(tp.partition): tp.offset for tp in tps if tp.offset >= 0}


def test_recommend_only_on_a_hand_run_group_publishes_and_touches_nothing(
    crd: Any,
    kube_api: Any,
    namespace: Callable[..., str],
    kafka_bootstrap: str,
    kafka_admin: Any,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
    tmp_path: Path,
) -> None:
    import signal

    from kubernetes import client

    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    ns = namespace("recommend")
    topic = new_topic(partitions=2)
    group = f"hand-{uuid.uuid4().hex[:6]}"
    produce(kafka_bootstrap, topic, per_partition=5000, partitions=2)
    commits = tmp_path / "commits.json"
    hand = subprocess.Popen(
        [sys.executable, "-c", HAND_CONSUMER, kafka_bootstrap, topic, group, str(commits)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        op = start_operator(ns)
        apply_cr(
            crd,
            ns,
            cr(
                "billing",
                {
                    "mode": "Recommend",
                    "kafka": {"bootstrapServers": kafka_bootstrap},
                    "topic": topic,
                    "groupId": group,
                    "processing": {"sink": "log"},
                    "catchUpSLASeconds": 10,
                    "scaling": {"minReplicas": 1, "maxReplicas": 4, "pollIntervalSeconds": 2},
                    "drain": {"enabled": True, "minBacklogRecords": 1000},
                },
            ),
        )

        def recommendation() -> dict[str, Any] | None:
            st = get_cr(custom, ns, "billing").get("status") or {}
            rec = st.get("recommendation") or {}
            print(
                "status:",
                json.dumps({k: st.get(k) for k in ("recommendation", "capacityPerReplica", "totalLag")}),
                flush=True,
            )
            return (
                rec if rec.get("capacitySource") == "CommittedRate" and rec.get("replicas", 0) > 1 else None
            )

        rec = wait_until(recommendation, "a recommendation from the measured commit rate", 180, interval=1)
        st = get_cr(custom, ns, "billing")["status"]
        print("recommendation:", json.dumps(rec), "capacityPerReplica:", st.get("capacityPerReplica"))
        assert rec["source"] == "GroupMembers" and rec["currentReplicas"] == 1
        # the measured capacity is the hand consumer's pace: at most the 10 ms sleep allows (~100
        # records/s), less on a loaded machine
        assert 1 < float(st["capacityPerReplica"]) < 120, st.get("capacityPerReplica")
        assert st["desiredReplicas"] == rec["replicas"] and rec["replicas"] == 2  # capped at the partitions
        scaling = next(c for c in st["conditions"] if c["type"] == "Scaling")
        assert (scaling["status"], scaling["reason"]) == ("False", "RecommendOnly")
        ev = wait_until(
            lambda: [e for e in events_for(core, ns, "billing") if e.reason == "Recommendation"],
            "a Recommendation event",
            60,
            interval=1,
        )
        print("event:", ev[-1].message)
        assert "not applied" in ev[-1].message
        metrics = op.metrics()
        assert f'lagpilot_recommend_only{{name="billing",namespace="{ns}"}} 1.0' in metrics
        assert (
            f'lagpilot_desired_replicas{{name="billing",namespace="{ns}"}} {float(rec["replicas"])}'
            in metrics
        )
        assert not [
            ln
            for ln in metrics.splitlines()
            if ln.startswith("lagpilot_scale_decisions_total{") and f'namespace="{ns}"' in ln
        ]
        # while the hand consumer runs, it is the group's only member
        desc = kafka_admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert [m.client_id for m in desc.members] == ["hand-consumer"], [m.client_id for m in desc.members]
    finally:
        hand.send_signal(signal.SIGINT)
        try:
            out, _ = hand.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            hand.kill()
            out, _ = hand.communicate()
            print("hand consumer (killed: not stopped 120 s after SIGINT):", out[-2000:])
            raise
        print("hand consumer:", out[-2000:])

    # after the hand consumer stopped, the operator keeps cycling (recommending) for a while
    def count() -> float:
        return float(
            next(
                ln.split()[-1]
                for ln in op.metrics().splitlines()
                if ln.startswith("lagpilot_cycle_duration_seconds_count")
            )
        )

    c0 = count()
    wait_until(lambda: count() >= c0 + 4, "four more operator cycles", 120, interval=1)

    # nothing committed by lagpilot: the group's offsets are the hand consumer's last commits
    last = json.loads(commits.read_text())
    assert _committed(kafka_bootstrap, group, topic, 2) == last, last
    # no member left, and no side group (drain progress, remainder) of this group
    desc = kafka_admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert list(desc.members) == []
    groups = {g.group_id for g in kafka_admin.list_consumer_groups().result(timeout=30).valid}
    assert {g for g in groups if g.startswith(group)} == {group}, sorted(
        g for g in groups if g.startswith(group)
    )
    # nothing created or scaled in Kubernetes
    apps, batch = client.AppsV1Api(kube_api), client.BatchV1Api(kube_api)
    assert apps.list_namespaced_deployment(ns).items == []
    assert batch.list_namespaced_job(ns).items == []
    reasons = {e.reason for e in events_for(core, ns, "billing")}
    assert not {r for r in reasons if r.startswith("Drain")} | (
        reasons & {"ScaledUp", "ScaledDown", "DeploymentCreated"}
    ), reasons
    assert "drain" not in get_cr(custom, ns, "billing")["status"]
    assert "Recommendation" in reasons
    assert op.alive(), op.tail()
