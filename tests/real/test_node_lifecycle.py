"""Consumer pods of a BatchConsumerGroup on the real node, ended by the node itself (issue 24):

- scale-down: the helm-installed operator lowers the consumer Deployment's replicas, the ReplicaSet
  deletes a pod, the kubelet sends SIGTERM; the consumer finishes the batch in flight and commits it
  within the pod's grace period (the operator's `terminationGracePeriodSeconds`), then exits 0;
- OOM: a consumer whose memory limit is below what a batch of large records needs is OOM-killed by
  the memory cgroup; what the user sees (the container status, the pod's events, the CR's
  conditions), and that raising the limit in the CR lets the group finish with nothing lost.

Checked through Kafka (committed offsets, the group's assignment), the ledger sink in PostgreSQL
(one row per delivery, no key) and the API (pod statuses, events, CR status), not through logs.
Off with the other node tests (LAGPILOT_NODE=0).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.fixtures.kube import KubeEnv, wait_until
from tests.real.test_node import node  # noqa: F401 - fixture
from tests.real.test_node_consumer import _built_and_loaded, _image_refused
from tests.real.test_node_operator import on_node, pods_postgres  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.real,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

LEDGER = "lagpilot_runtime.sinks.ledger:process"
COST_S = 8.0  # each handler call of the scale-down test: its write, then padded to this


@pytest.fixture(scope="module")
def helm_bin() -> Any:
    from lagpilot_dev import helm as h

    return h.ensure_helm()


@pytest.fixture
def operator_for(
    kube: KubeEnv,
    node: Any,
    helm_bin: Any,
    on_node: Callable[[str], str],
    tmp_path: Any,
) -> Iterator[Callable[[], tuple[str, str]]]:
    """`helm install` of charts/lagpilot watching a fresh team namespace (both on the node,
    `restricted`); returns (team namespace, consumer image). Uninstalled at the end."""
    from lagpilot_dev import helm as h

    installed: list[list[str]] = []

    def make() -> tuple[str, str]:
        operator_image = _built_and_loaded(node, "operator")
        consumer_image = _built_and_loaded(node, "consumer")
        rel_ns, team = on_node("lpl-sys"), on_node("lpl-team")
        release = f"lpl-{uuid.uuid4().hex[:6]}"
        repository, tag = operator_image.rsplit(":", 1)
        values = {
            "watchNamespaces": [team],
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        }
        values_file = tmp_path / "values.json"
        values_file.write_text(json.dumps(values))
        args = ["--kubeconfig", str(kube.kubeconfig), "-n", rel_ns]
        h.run_helm(
            helm_bin, ["install", release, str(h.CHART_DIR), "-f", str(values_file), *args], timeout=300
        )
        installed.append([team, release, *args])
        return team, consumer_image

    yield make
    for team, release, *args in installed:
        # the CRs first, while their operator runs: it removes its finalizer (else the namespace
        # never finishes terminating)
        kube.kubectl(
            "delete", "bcg", "--all", "-n", team, "--wait=true", "--timeout=180s", check=False, timeout=200
        )
        h.run_helm(helm_bin, ["uninstall", release, "--wait", "--timeout", "180s", *args], timeout=240)


def _bcg(
    name: str,
    bootstrap: str,
    topic: str,
    image: str,
    table: str,
    *,
    replicas: int,
    cost_ms: int,
    max_records: int,
    resources: dict[str, Any] | None = None,
    timeout_ms: int = 500,
) -> dict[str, Any]:
    template: dict[str, Any] = {
        "image": image,
        "imagePullPolicy": "Never",
        "env": [{"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}],
    }
    if resources is not None:
        template["resources"] = resources
    return {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "topic": topic,
            "groupId": f"{topic}-g",
            "batch": {"maxRecords": max_records, "timeoutMs": timeout_ms},
            "processing": {"handler": LEDGER, "config": {"table": table, "cost_ms": str(cost_ms)}},
            "scaling": {
                "minReplicas": replicas,
                "maxReplicas": replicas,
                "pollIntervalSeconds": 5,
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
            },
            "catchUpSLASeconds": 3600,
            "drain": {"enabled": False},
            "template": template,
        },
    }


def _ledger(dsn: str, table: str) -> list[tuple[int, int, float]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [
            (int(p), int(o), float(t))
            for p, o, t in conn.execute(
                f'SELECT partition, "offset", delivered_at FROM {table} ORDER BY delivered_at'
            )
        ]


def test_scale_down_sigterm_finishes_the_batch_in_flight_and_commits_it(
    node: Any,
    kube: KubeEnv,
    kube_api: Any,
    kafka_part: Any,
    pods_postgres: Any,
    operator_for: Callable[[], tuple[str, str]],
) -> None:
    """Two consumers, one partition each, batches of 50 records padded to COST_S; the CR goes from
    2 replicas to 1. The pod the ReplicaSet deletes is inside a batch when deleted (checked from the
    ledger), exits 0 within its grace period, and the survivor picks its partition up exactly at the
    next offset: the ledger has each record once (a batch written but not committed would be written
    again by the survivor) and the group's committed offsets end at the topic's end."""
    from confluent_kafka.admin import AdminClient
    from kubernetes import client, watch

    from lagpilot_dev.images.run import committed_offsets, produce

    team, image = operator_for()
    pods_bootstrap, pods_dsn = kafka_part.pods_bootstrap_servers(), pods_postgres.pods_dsn()
    assert pods_bootstrap and pods_dsn
    topic, table, parts, per_part = (
        f"node-sd-{uuid.uuid4().hex[:8]}",
        f"ledger_{uuid.uuid4().hex[:8]}",
        2,
        600,
    )
    group = f"{topic}-g"
    produce(kafka_part.bootstrap_servers(), topic, parts * per_part, partitions=parts)
    kube.kubectl(
        "create", "secret", "generic", "pg", "-n", team, "--from-file=dsn=/dev/stdin", input_text=pods_dsn
    )
    name = "scale-down"
    bcg = _bcg(
        name, pods_bootstrap, topic, image, table, replicas=2, cost_ms=int(COST_S * 1000), max_records=50
    )
    kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))
    core = client.CoreV1Api(kube_api)
    selector = f"app.kubernetes.io/instance={name}"
    admin = AdminClient({"bootstrap.servers": kafka_part.bootstrap_servers()})

    def owners() -> dict[str, list[int]] | None:
        """pod name -> its partitions, once both consumers own one each and both committed."""
        pods = {
            p.status.pod_ip: p.metadata.name
            for p in core.list_namespaced_pod(team, label_selector=selector).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        got: dict[str, list[int]] = {}
        for m in desc.members:
            host = m.host.strip("/")
            if host in pods:
                got[pods[host]] = sorted(tp.partition for tp in m.assignment.topic_partitions)
        committed = committed_offsets(kafka_part.bootstrap_servers(), group, topic, parts)
        ok = (
            len(got) == 2
            and all(len(v) == 1 for v in got.values())
            and all(o > 0 for o in committed.values())
        )
        return got if ok else None

    assigned = wait_until(owners, "two consumer pods on the node, one partition each, both committed", 600)
    for p in core.list_namespaced_pod(team, label_selector=selector).items:
        assert p.spec.node_name == node.info()["node_name"]
    grace = (
        core.list_namespaced_pod(team, label_selector=selector).items[0].spec.termination_grace_period_seconds
    )
    rv = core.list_namespaced_pod(team, label_selector=selector).metadata.resource_version

    seen: dict[str, dict[str, Any]] = {}  # pod -> deletion time, termination
    stop = threading.Event()

    def watch_pods() -> None:
        w = watch.Watch()
        for ev in w.stream(
            core.list_namespaced_pod, team, label_selector=selector, resource_version=rv, timeout_seconds=600
        ):
            pod = ev["object"]
            rec = seen.setdefault(pod.metadata.name, {})
            if pod.metadata.deletion_timestamp is not None:
                # a pod's deletionTimestamp is the request's time plus its grace period
                rec.setdefault(
                    "deleted_at",
                    pod.metadata.deletion_timestamp.timestamp()
                    - (pod.metadata.deletion_grace_period_seconds or 0),
                )
            for cs in pod.status.container_statuses or []:
                if cs.state is not None and cs.state.terminated is not None:
                    rec["terminated"] = cs.state.terminated
            if stop.is_set():
                w.stop()

    watcher = threading.Thread(target=watch_pods, daemon=True)
    watcher.start()

    # the ReplicaSet deletes the pod of lowest pod-deletion-cost first: the victim is chosen, and the
    # scale-down comes just after it began a batch (its ledger write comes first), so the deletion, a
    # few seconds later, lands inside that batch (.ci/run 2026-11-27 at load ~10: patched at a random
    # moment with 4 s batches, the deletion came 4.8 s after a batch's write, between two batches,
    # and the premise check below failed)
    victim = sorted(assigned)[0]
    (victim_part,) = assigned[victim]
    core.patch_namespaced_pod(
        victim, team, {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1000"}}}
    )

    def victim_began_a_batch() -> bool:
        latest = max(
            (t for q, _, t in _ledger(pods_postgres.app_dsn(), table) if q == victim_part), default=0.0
        )
        return time.time() - latest < 1.0

    wait_until(victim_began_a_batch, f"{victim} at the start of a batch", 300, interval=0.2)
    kube.kubectl(
        "patch",
        "bcg",
        name,
        "-n",
        team,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"scaling": {"minReplicas": 1, "maxReplicas": 1}}}),
    )

    def terminated() -> tuple[str, dict[str, Any]] | None:
        done = [(n, r) for n, r in seen.items() if r.get("terminated") is not None and r.get("deleted_at")]
        return done[0] if done else None

    gone, rec = wait_until(terminated, "the scaled-down pod's container to terminate", 300)
    term = rec["terminated"]
    # the fault fired: the operator scaled down and the kubelet ended the pod, the one chosen
    assert gone == victim, (gone, victim, assigned)
    assert term.exit_code == 0, (
        f"{gone}: exit {term.exit_code} ({term.reason}); 137 = SIGKILL after the grace period"
    )
    finished = term.finished_at.timestamp()
    assert finished - rec["deleted_at"] <= grace, (finished - rec["deleted_at"], grace)
    at_exit = committed_offsets(kafka_part.bootstrap_servers(), group, topic, parts)  # shown, not judged

    def all_committed() -> dict[int, int] | None:
        got = committed_offsets(kafka_part.bootstrap_servers(), group, topic, parts)
        return got if all(got[p] == per_part for p in range(parts)) else None

    wait_until(all_committed, "the remaining consumer committed every record", 900)
    stop.set()
    rows = _ledger(pods_postgres.app_dsn(), table)
    per = {p: [o for q, o, _ in rows if q == p] for p in range(parts)}
    for p, offsets in per.items():
        assert sorted(offsets) == list(range(per_part)), f"partition {p}: lost or delivered twice"
    (moved,) = assigned[gone]
    # the fault fired inside a batch: a handler call of the pod's partition (its write, then the
    # 3 s pad) overlapped the deletion (the ledger sink writes first, then pads; before the deletion
    # no other consumer owned that partition)
    deleted = rec["deleted_at"]
    before = [t for q, _, t in rows if q == moved and t <= deleted]
    assert before and deleted - max(before) < COST_S, deleted - max(before) if before else None
    # nothing lost, nothing twice (checked above) across the hand-over of that partition: the batch
    # in flight was committed before the survivor took the partition (a batch written but not
    # committed would be written again; one committed but not written would be missing)
    print(
        f"scale-down: {gone} (partition {moved}) deleted {deleted - max(before):.1f} s into a {COST_S:.0f} s "
        f"batch, exit 0 {finished - deleted:.1f} s after its deletion (grace {grace} s); the committed offsets "
        f"then {at_exit}; the ledger holds each of {parts * per_part} records once"
    )


def _produce_sized(bootstrap: str, topic: str, sizes: list[int]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        fut.result(60)
    wait_until(
        lambda: (
            (admin.list_topics(topic, timeout=10).topics.get(topic) or None) is not None
            and admin.list_topics(topic, timeout=10).topics[topic].error is None
        ),
        "the topic",
        60,
    )
    prod = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.max.bytes": 1_000_000}
    )
    for i, size in enumerate(sizes):
        prod.produce(topic, key=str(i).encode(), value=(b"%08d" % i) * (size // 8), partition=0)
        prod.poll(0)
    assert prod.flush(120) == 0


def test_consumer_oom_killed_by_its_limit_shows_and_loses_nothing(
    node: Any,
    kube: KubeEnv,
    kube_api: Any,
    kafka_part: Any,
    pods_postgres: Any,
    operator_for: Callable[[], tuple[str, str]],
) -> None:
    """A consumer with a 128 Mi memory limit: small records pass, then records of ~900 KB (a batch of
    200 of them, ~180 MB, which the batch's 60 s timeout lets fill) exceed it; the memory cgroup kills
    the container (OOMKilled, 137) again at each restart. What the user sees is asserted and printed; raising the
    limit in the CR rolls the Deployment and every record reaches the ledger."""
    from kubernetes import client

    from lagpilot_dev.images.run import committed_offsets

    team, image = operator_for()
    pods_bootstrap, pods_dsn = kafka_part.pods_bootstrap_servers(), pods_postgres.pods_dsn()
    assert pods_bootstrap and pods_dsn
    topic, table = f"node-oom-{uuid.uuid4().hex[:8]}", f"ledger_{uuid.uuid4().hex[:8]}"
    sizes = [200] * 200 + [900_000] * 200 + [200] * 100
    _produce_sized(kafka_part.bootstrap_servers(), topic, sizes)
    kube.kubectl(
        "create", "secret", "generic", "pg", "-n", team, "--from-file=dsn=/dev/stdin", input_text=pods_dsn
    )
    name = "oom"
    small = {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "128Mi"}}
    bcg = _bcg(
        name,
        pods_bootstrap,
        topic,
        image,
        table,
        replicas=1,
        cost_ms=0,
        # the first batch the 200 small records, the next the 200 large ones: ~180 MB held at once,
        # whatever the machine's load. With batches of 50 and a 500 ms timeout the kill depended on
        # the fetch: CI (cold .ci/run, 2026-11-27) fetched ~1 MB per round trip at load ~8, its
        # batches closed at 4-33 large records, and all 500 were processed under 128 Mi, no kill
        max_records=200,
        timeout_ms=60_000,
        resources=small,
    )
    kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))
    core = client.CoreV1Api(kube_api)
    selector = f"app.kubernetes.io/instance={name}"

    def oom_killed() -> Any:
        for p in core.list_namespaced_pod(team, label_selector=selector).items:
            assert not _image_refused(kube_api.sanitize_for_serialization(p).get("status") or {})
            for cs in p.status.container_statuses or []:
                last = cs.last_state.terminated if cs.last_state is not None else None
                if last is not None and last.reason == "OOMKilled" and cs.restart_count >= 2:
                    return p
        return None

    pod = wait_until(oom_killed, "the consumer OOM-killed by its limit (twice)", 600)
    cs = pod.status.container_statuses[0]
    # the fault fired: the memory cgroup's kill, as the kubelet reports it
    assert cs.last_state.terminated.exit_code == 137 and cs.last_state.terminated.reason == "OOMKilled"
    assert pod.spec.containers[0].resources.limits["memory"] == "128Mi"
    assert pod.spec.node_name == node.info()["node_name"]
    committed_before = committed_offsets(kafka_part.bootstrap_servers(), f"{topic}-g", topic, 1)[0]
    assert 0 < committed_before < len(sizes), (
        committed_before
    )  # the small records passed, the large ones stop it

    def cr_conditions() -> dict[str, tuple[str, str, str]]:
        obj = json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout)
        return {
            c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
            for c in (obj.get("status") or {}).get("conditions") or []
        }

    # the CR says it: Ready False, and its message names the kill (lagpilot.decide.pod_health)
    not_ready = wait_until(
        lambda: (
            (c := cr_conditions()).get("Ready", ("",))[0] == "False" and "OOMKilled" in c["Ready"][2] and c
        ),
        "the CR's Ready condition False, naming OOMKilled, while the consumer crash-loops",
        300,
    )
    assert "memory limit 128Mi" in not_ready["Ready"][2], not_ready
    events = json.loads(kube.kubectl("get", "events", "-n", team, "-o", "json").stdout)["items"]
    on_pod = [
        (e["type"], e["reason"], e.get("message", "")[:160])
        for e in events
        if e["involvedObject"].get("name") == pod.metadata.name
    ]
    assert any(r == "BackOff" for _, r, _ in on_pod) or cs.state.waiting is not None, on_pod
    print(
        f"OOM: {pod.metadata.name} restarts {cs.restart_count}, lastState {cs.last_state.terminated.reason} "
        f"exit {cs.last_state.terminated.exit_code}; state now "
        f"{cs.state.waiting.reason if cs.state.waiting else 'running'}; committed {committed_before}/{len(sizes)}"
    )
    print("OOM: the CR's conditions: " + json.dumps(not_ready))
    print("OOM: the pod's events: " + json.dumps(on_pod))

    # the user's fix: a limit the batches fit in; the operator rolls the Deployment
    kube.kubectl(
        "patch",
        "bcg",
        name,
        "-n",
        team,
        "--type=merge",
        "-p",
        json.dumps(
            {
                "spec": {
                    "template": {
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "256Mi"},
                            "limits": {"memory": "1Gi"},
                        }
                    }
                }
            }
        ),
    )

    def all_committed() -> int | None:
        got = committed_offsets(kafka_part.bootstrap_servers(), f"{topic}-g", topic, 1)[0]
        return got if got == len(sizes) else None

    wait_until(all_committed, "every record committed after the limit was raised", 900)
    offsets = [o for _, o, _ in _ledger(pods_postgres.app_dsn(), table)]
    assert set(offsets) == set(range(len(sizes))), (
        f"lost: {sorted(set(range(len(sizes))) - set(offsets))[:20]}"
    )
    twice = len(offsets) - len(set(offsets))
    ready = wait_until(
        lambda: (c := cr_conditions()).get("Ready", ("",))[0] == "True" and c, "the CR Ready again", 300
    )
    print(
        f"OOM: after the limit was raised: every record in the ledger ({len(set(offsets))}), {twice} delivered "
        f"more than once (at-least-once: a batch written but killed before its commit); Ready {ready['Ready']}"
    )
