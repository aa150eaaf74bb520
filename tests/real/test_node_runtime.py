"""The warm drain runtime itself on the real node, behind the operator's NetworkPolicy (issue 24;
issue 23's "a pod that is not the CR's drain pod cannot open the warm runtime's port").

test_node_netpol.py showed the policy with a stand-in server (busybox httpd). Here everything is
the operator's: the helm-installed operator pod creates, for a CR with `drain.warmRuntime: true`,
the NetworkPolicy and the runtime Deployment, whose pod (the consumer image, `lagpilot drain
--serve`, a JVM under Pod Security `restricted`) becomes Ready on the node. Two busybox clients ask
the runtime's pod IP and port once a second: one labelled as the CR's drain pods are
(drain_manifests._labels), one not. The labelled one gets the runtime's HTTP answer (the control:
the runtime listens and the policy lets drain pods in), the other is refused. Then the operator's
own drain Job hands a plan to that runtime (label `lagpilot.io/drain-runtime: warm`) and the drain
reaches Verified with every record in the ledger exactly once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.fixtures.kube import KubeEnv, wait_until
from tests.real.test_node import netpol, node  # noqa: F401 - fixtures
from tests.real.test_node_lifecycle import LEDGER, helm_bin, operator_for  # noqa: F401 - fixtures
from tests.real.test_node_netpol import _answers, _pod
from tests.real.test_node_operator import _pods, on_node, pods_postgres  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.real,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

# any HTTP answer counts as reaching the runtime (its API answers 404 to GET /): the question is
# whether a TCP connection opens, not what it serves
CLIENT = (
    "while true; do if printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $TARGET_IP $TARGET_PORT 2>/dev/null "
    "| grep -q '^HTTP/'; then echo OK; else echo NO; fi; sleep 1; done"
)


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    ).values():
        fut.result(60)


def _produce_into(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        prod.produce(topic, key=b"k%d" % i, value=b"runtime-record-%d" % i, partition=i % partitions)
        prod.poll(0)
    assert prod.flush(120) == 0


def test_warm_runtime_on_the_node_answers_its_drain_pods_only(
    node: Any,
    netpol: Any,
    kube: KubeEnv,
    kafka_part: Any,
    pods_postgres: Any,
    operator_for: Callable[[], tuple[str, str]],
) -> None:
    import psycopg

    from lagpilot.act.drain_manifests import _labels as drain_pod_labels
    from lagpilot.act.drain_runtime import runtime_name, runtime_port, selector

    assert netpol.is_running(), "kube-router (the node's policy agent) is not running"
    team, image = operator_for()
    pods_bootstrap, pods_dsn = kafka_part.pods_bootstrap_servers(), pods_postgres.pods_dsn()
    assert pods_bootstrap and pods_dsn
    topic, table, parts, per_part = (
        f"node-rt-{uuid.uuid4().hex[:8]}",
        f"ledger_{uuid.uuid4().hex[:8]}",
        3,
        4000,
    )
    kube.kubectl(
        "create", "secret", "generic", "pg", "-n", team, "--from-file=dsn=/dev/stdin", input_text=pods_dsn
    )
    _create_topic(
        kafka_part.bootstrap_servers(), topic, parts
    )  # empty: the records come after the policy check
    name = "warm"
    bcg = {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": pods_bootstrap},
            "topic": topic,
            "groupId": f"{topic}-g",
            "batch": {"maxRecords": 100, "timeoutMs": 500},
            # ~100 records/s per consumer: 12,000 records are beyond one consumer's 60 s
            "processing": {"handler": LEDGER, "config": {"table": table, "cost_ms": "1000"}},
            "scaling": {"minReplicas": 1, "maxReplicas": 1, "pollIntervalSeconds": 5},
            "catchUpSLASeconds": 60,
            "drain": {"enabled": True, "maxTasks": 4, "minBacklogRecords": 1000, "warmRuntime": True},
            "template": {
                "image": image,
                "imagePullPolicy": "Never",
                "env": [{"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}],
            },
        },
    }
    kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))

    def runtime_ready() -> dict[str, Any] | None:
        for p in _pods(kube, team, selector(name)):
            st = p.get("status") or {}
            if st.get("phase") == "Running" and any(
                c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or []
            ):
                return p
        return None

    runtime = wait_until(
        runtime_ready, "the warm drain runtime pod Ready on the node (a JVM, kubelet probes)", 900
    )
    assert runtime["spec"]["nodeName"] == node.info()["node_name"]
    assert runtime["spec"]["containers"][0]["image"] == image
    policy = json.loads(
        kube.kubectl("get", "networkpolicy", runtime_name(name), "-n", team, "-o", "json").stdout
    )
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "BatchConsumerGroup"
    port = runtime_port(team, name)
    target = {"TARGET_IP": runtime["status"]["podIP"], "TARGET_PORT": str(port)}
    clients = {
        "drain-labelled": drain_pod_labels(name, f"{name}-drain-1", "0.1.0"),
        "stranger": {"app": "stranger"},
    }
    for cname, labels in clients.items():
        kube.kubectl(
            "apply", "-n", team, "-f", "-", input_text=json.dumps(_pod(cname, node, labels, CLIENT, target))
        )

    def answered(cname: str, count: int) -> list[str] | None:
        got = _answers(node, team, cname)
        return got if len(got) >= count else None

    # the control: a pod labelled as the CR's drain pods opens the runtime's port (it listens, the
    # policy lets drain pods in); then the stranger's answers over the same seconds
    wait_until(
        lambda: (a := answered("drain-labelled", 5)) and a[-3:] == ["OK"] * 3 and a,
        "the drain-labelled pod reaching the runtime",
        300,
    )
    stranger = wait_until(lambda: answered("stranger", 10), "10 answers to the stranger", 300)
    assert set(stranger) == {"NO"}, stranger

    # the CR's own drain pod: the operator's Job hands its plan to this runtime
    _produce_into(kafka_part.bootstrap_servers(), topic, parts * per_part, parts)

    def finished() -> dict[str, Any] | None:
        d = (
            json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout).get("status") or {}
        ).get("drain") or {}
        return d if d.get("phase") in ("Verified", "Failed", "Cancelled") else None

    d = wait_until(finished, "the drain finished", 1500)
    assert d["phase"] == "Verified", json.dumps(d)[:2000]
    jobs = _pods(kube, team, "app.kubernetes.io/name=lagpilot-drain")
    warm = [p for p in jobs if p["metadata"]["labels"].get("lagpilot.io/drain-runtime") == "warm"]
    assert warm, [p["metadata"]["labels"] for p in jobs]
    assert all(p["spec"]["nodeName"] == node.info()["node_name"] for p in jobs)
    # the label says what the operator launched; the Job's own log says where the drain ran: in the
    # runtime, reached through the policy (not cold after a refused connection)
    job_log = kube.kubectl("logs", "-n", team, warm[0]["metadata"]["name"], "--tail=-1").stdout
    assert '"drain_runtime_used"' in job_log and '"drain_runtime_unreachable"' not in job_log, job_log[-2000:]

    def all_delivered() -> list[Any] | None:
        with psycopg.connect(pods_postgres.app_dsn()) as conn:
            rows = conn.execute(
                f'SELECT partition, count(*), count(DISTINCT "offset"), '
                f"count(*) FILTER (WHERE source = 'drain') FROM {table} GROUP BY partition"
            ).fetchall()
        return rows if sum(r[2] for r in rows) == parts * per_part else None

    rows = wait_until(all_delivered, "every record in the ledger", 900)
    assert all(n == distinct == per_part for _, n, distinct, _ in rows), rows  # none lost, none twice
    assert sum(r[3] for r in rows) > 0, rows  # the warm runtime processed some
    # and the stranger is still refused after the drain
    later = wait_until(lambda: answered("stranger", len(stranger) + 5), "5 more answers to the stranger", 120)
    assert set(later) == {"NO"}, later[-10:]
    print(
        f"warm runtime {runtime['metadata']['name']} on the node: drain-labelled pod OK, stranger NO "
        f"({len(later)} answers); drain {d.get('id')} Verified through {warm[0]['metadata']['name']} (warm)"
    )
