"""Deleting a CR mid-drain (issue 12, item 1): operator subprocess + kube-apiserver/controller-manager +
the pods where `pods` runs them (the real node by default: containers of the test image under Pod
Security `restricted`) + Kafka + Spark (local mode in the Job's
pod) + PostgreSQL (`pods_dsn` for the pods); every delivery counted in the
built-in ledger sink (one row per delivery, no unique key).

`test_cr_deleted_mid_drain_hands_back_the_remainder_and_a_recreated_cr_drains_it`: the drain is
running and provably mid-way (progress recorded, less than its total) when the CR is deleted; the
operator's wait bound is short (5 s), so the finalizer stops the Job and hands the unfinished
sub-ranges back to `<groupId>.lagpilot-remainder`; the CR disappears only after that. A CR re-created
with the same groupId adopts the remainder as its next drain; at the end the ledger holds every
produced offset (lost 0), replays bounded by the batches the stopped tasks had not committed.

`test_cr_deleted_mid_drain_waits_for_the_drain`: with the default bound the deletion waits
(Terminating condition) until the drain is done; nothing is handed back, nothing lost.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.operator_process import DEV_SESSION_TIMEOUT_MS
from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.fixtures.stack import produce_counts
from tests.real.test_drain_operator import NODE_DRAIN_CPU_PER_TASK_M, Operator, grant_operator, operator_rules
from tests.real.test_operator_e2e import SA_NAME, apply_cr, condition, cr, crd, events_for, get_cr  # noqa: F401  (crd: fixture)

pytestmark = [pytest.mark.real, pytest.mark.slow]

PARTS = 3
BATCH = 100
COST_MS = 2000  # per handler call: ~50 records/s per consumer or drain task (the drain must be slow enough to catch mid-way)
PLURAL = ("lagpilot.io", "v1alpha1")


@dataclass
class Case:
    ns: str
    name: str
    topic: str
    group: str
    table: str
    spec: dict[str, Any]
    op: Operator
    custom: Any
    core: Any
    produced: dict[int, int] = field(default_factory=dict)

    def get(self) -> dict[str, Any] | None:
        try:
            return get_cr(self.custom, self.ns, self.name)
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return None
            raise

    def drain(self) -> dict[str, Any]:
        obj = self.get() or {}
        return (obj.get("status") or {}).get("drain") or {}

    def delete(self) -> None:
        self.custom.delete_namespaced_custom_object(*PLURAL, self.ns, "batchconsumergroups", self.name)


@pytest.fixture
def case(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    pods_dsn: str,
    tmp_path: Path,
) -> Iterator[Callable[..., Case]]:
    from kubernetes import client

    from lagpilot_runtime.sinks.ledger import create_table

    rbac, core, custom = (
        client.RbacAuthorizationV1Api(kube_api),
        client.CoreV1Api(kube_api),
        client.CustomObjectsApi(kube_api),
    )
    made: list[Case] = []

    def make(backlog: int, wait_s: str) -> Case:
        ns = pods.namespace("fin")
        # the pods' DSN (on the node PostgreSQL's listener on the bridge); the test reads the ledger
        # through postgres_dsn, the same database
        grant_operator(rbac, core, ns, operator_rules(), pods_dsn)
        topic = new_topic(partitions=PARTS, prefix="fin")
        table = "fin_ledger_" + uuid.uuid4().hex[:8]
        create_table(postgres_dsn, table)
        op = Operator(
            crd.kubeconfig_for_service_account(ns, SA_NAME),
            ns,
            tmp_path / f"operator-{ns}.log",
            {
                # on the node the image's connector jars and the node demo's CPU request per task
                # (12 tasks at the default 250m would stay Pending on the 2-CPU node)
                "LAGPILOT_DRAIN_CPU_PER_TASK_M": NODE_DRAIN_CPU_PER_TASK_M,
                "LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": wait_s,
            },
        )
        spec = {
            "kafka": {"bootstrapServers": pods.kafka_bootstrap, "sessionTimeoutMs": DEV_SESSION_TIMEOUT_MS},
            "topic": topic,
            "groupId": "g-" + uuid.uuid4().hex[:6],
            "batch": {"maxRecords": BATCH, "timeoutMs": 500},
            "processing": {
                "handler": "lagpilot_runtime.sinks.ledger:process",
                "config": {"ledger.table": table, "ledger.cost_ms": str(COST_MS)},
            },
            "scaling": {
                "minReplicas": 1,
                "maxReplicas": 3,
                "pollIntervalSeconds": 2,
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30}},
            },
            "catchUpSLASeconds": 60,
            "drain": {"enabled": True, "splitFactor": 4, "maxTasks": 12, "minBacklogRecords": 1000},
            "template": pods.template(
                env=[{"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}]
            ),
        }
        c = Case(ns, "orders", topic, spec["groupId"], table, spec, op, custom, core)
        produce_counts(
            kafka_bootstrap, topic, {p: backlog for p in range(PARTS)}, c.produced, lambda part: b"{}"
        )
        apply_cr(crd, ns, cr(c.name, spec))
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            if c.get() is not None:
                c.delete()
                wait_until(lambda c=c: c.get() is None, "CR deleted", 120)
        except Exception as exc:  # noqa: BLE001 - release it whatever happens: the namespace must go
            print(f"teardown {c.ns}: {exc!r}")
            try:
                custom.patch_namespaced_custom_object(
                    *PLURAL, c.ns, "batchconsumergroups", c.name, {"metadata": {"finalizers": None}}
                )
            except Exception:  # noqa: BLE001
                pass
        print(f"--- operator log ({c.ns}) ---\n{c.op.tail(150)}")
        c.op.stop()


def wait_drain(c: Case, pred: Callable[[dict[str, Any]], bool], what: str, timeout: float) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> bool:
        nonlocal last
        try:
            last = c.drain()
        except Exception:  # noqa: BLE001 - apiserver hiccup
            return False
        return pred(last)

    try:
        wait_until(check, what, timeout, interval=1)
    except AssertionError:
        raise AssertionError(f"{what}: last drain status {json.dumps(last)[:1500]}\n{c.op.tail()}") from None
    return last


def remainder_in_kafka(kafka_admin: Any, group: str, topic: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from lagpilot.decide.deletion import decode_remainder, group_offsets_of, remainder_group

    g = remainder_group(group)
    res = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p) for p in range(PARTS)])]
    )[g].result(30)
    return decode_remainder(group_offsets_of(res.topic_partitions))


def group_committed(kafka_admin: Any, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    res = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTS)])]
    )[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def ledger_report(dsn: str, c: Case) -> dict[str, Any]:
    import psycopg

    from lagpilot_runtime.sinks.ledger import ledger_report as report

    with psycopg.connect(dsn) as conn:
        return report(conn, c.table, c.topic, c.produced)


def delivered(dsn: str, c: Case) -> set[tuple[int, int]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {(int(p), int(o)) for p, o in conn.execute(f'SELECT partition, "offset" FROM {c.table}')}


def test_cr_deleted_mid_drain_hands_back_the_remainder_and_a_recreated_cr_drains_it(
    case: Callable[..., Case], crd: Any, kafka_admin: Any, postgres_dsn: str
) -> None:
    c = case(backlog=8000, wait_s="5")
    d = wait_drain(
        c, lambda d: d.get("phase") == "Running" and 500 <= d.get("recordsDone", 0), "a drain mid-way", 900
    )
    first_id = d["id"]
    c.delete()
    at_delete = c.drain()
    # the fault really is "mid-drain": progress recorded, but less than the drain's total
    assert at_delete["phase"] == "Running" and 0 < at_delete["recordsDone"] < at_delete["recordsTotal"], (
        at_delete
    )
    # the finalizer holds the CR until it has handed the remainder back
    wait_until(lambda: c.get() is None, "the CR to be released by the finalizer", 300, interval=1)
    reasons = [e.reason for e in events_for(c.core, c.ns, c.name)]
    assert "DrainRemainderHandedBack" in reasons, reasons
    rem = remainder_in_kafka(kafka_admin, c.group, c.topic)
    assert rem is not None and rem.drain_id == first_id and rem.records > 0, rem
    wait_until(
        lambda: not c.core.list_namespaced_pod(c.ns).items, "every pod gone (GC of Job and Deployment)", 180
    )
    # nothing fell between the chairs: every produced offset not yet delivered is either handed back
    # or still ahead of the group's committed offset (the group never moved backwards)
    committed = group_committed(kafka_admin, c.group, c.topic)
    handed = {(p, o) for p, a, b in rem.ranges for o in range(a, b)}
    ahead = {(p, o) for p in range(PARTS) for o in range(max(committed.get(p, 0), 0), c.produced[p])}
    missing = {(p, o) for p, n in c.produced.items() for o in range(n)} - delivered(postgres_dsn, c)
    print(
        f"at delete: {at_delete['recordsDone']}/{at_delete['recordsTotal']}; handed back {rem.records} "
        f"{rem.ranges}; missing {len(missing)}; group at {committed}"
    )
    assert missing, "nothing was missing after the delete: the test did not delete mid-drain"
    assert missing <= handed | ahead, f"{len(missing - handed - ahead)} offsets owned by nobody"
    assert all(
        committed[p] >= max(r["end"] for r in at_delete["ranges"] if r["partition"] == p)
        for p in {r["partition"] for r in at_delete["ranges"]}
    )

    # re-create the CR with the same group: the remainder is drained first, as a new drain
    apply_cr(crd, c.ns, cr(c.name, c.spec))
    d = wait_drain(
        c,
        lambda d: d.get("phase") == "Verified" and d.get("id", 0) > first_id,
        "the adopted remainder drained",
        900,
    )
    reasons = [e.reason for e in events_for(c.core, c.ns, c.name)]
    assert "DrainRemainderAdopted" in reasons, reasons
    adopted = [h for h in d.get("history") or () if h["id"] == first_id + 1]
    assert adopted and adopted[0]["recordsTotal"] == rem.records, d["history"]
    assert remainder_in_kafka(kafka_admin, c.group, c.topic) is None  # cleared once recorded
    wait_until(
        lambda: (
            group_committed(kafka_admin, c.group, c.topic) == c.produced
            and c.drain().get("phase") in ("Verified", "Failed", "Cancelled")
        ),
        "the group caught up, no drain in flight",
        900,
        interval=2,
    )
    assert c.drain()["phase"] == "Verified", c.drain()
    rep = ledger_report(postgres_dsn, c)
    print(
        "ledger:",
        {
            k: rep[k]
            for k in ("produced", "delivered", "distinct", "lost", "duplicated", "outside", "by_source")
        },
    )
    assert rep["lost"] == 0 and rep["outside"] == 0, rep
    # the stopped drain's tasks may each replay the batch they had delivered but not yet committed
    assert rep["duplicated"] <= 12 * BATCH, rep


def test_cr_deleted_mid_drain_waits_for_the_drain(
    case: Callable[..., Case], kafka_admin: Any, postgres_dsn: str
) -> None:
    c = case(backlog=6000, wait_s="900")
    wait_drain(
        c, lambda d: d.get("phase") == "Running" and d.get("recordsDone", 0) >= 200, "a drain mid-way", 900
    )
    c.delete()
    at_delete = c.drain()
    assert 0 < at_delete["recordsDone"] < at_delete["recordsTotal"], at_delete
    seen: list[dict[str, Any]] = []

    def terminating() -> bool:
        obj = c.get()
        if obj is None:
            return True
        cond = condition(obj, "Terminating")
        if cond:
            seen.append(cond)
        return False

    wait_until(terminating, "the CR to be released after its drain", 900, interval=1)
    assert any(x["reason"] == "WaitingForDrain" and x["status"] == "True" for x in seen), seen
    reasons = [e.reason for e in events_for(c.core, c.ns, c.name)]
    assert "DeletionWaitingForDrain" in reasons and "DrainFinished" in reasons, reasons
    assert "DrainRemainderHandedBack" not in reasons, reasons
    assert remainder_in_kafka(kafka_admin, c.group, c.topic) is None
    ranges = {r["partition"]: (r.get("start"), r["end"]) for r in at_delete["ranges"]}
    import psycopg

    from lagpilot_runtime.sinks.ledger import ledger_report as report

    with psycopg.connect(postgres_dsn) as conn:
        rep = report(
            conn,
            c.table,
            c.topic,
            {p: b for p, (_, b) in ranges.items()},
            {p: a for p, (a, _) in ranges.items()},
            source="drain",
        )
    print("drain ledger:", {k: rep[k] for k in ("produced", "delivered", "lost", "duplicated", "outside")})
    assert rep["lost"] == 0 and rep["duplicated"] == 0 and rep["outside"] == 0, rep
