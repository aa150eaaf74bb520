"""A Spark-on-Kubernetes drain on the real node (issue 24; issue 23 H4).

test_drain_k8s.py runs the same drain (and its faults) where `pods` runs pods. Here the
drain Job's pod (the Spark driver, client mode) and the executor pods it asks the API server for
run as containers of the consumer image on the real node, in a namespace enforcing Pod Security
`restricted`, as the chart's drain ServiceAccount, with the chart's ValidatingAdmissionPolicy
for that ServiceAccount applied. Checked: the Job completes; at least two executor pods ran on
the node, admitted there and owned by the driver pod; the delivery ledger holds every planned
offset exactly once.

H4: Spark's RPC is authenticated with a secret that is not in any pod spec. Spark would generate
it and put it into every executor pod as the literal env value `_SPARK_AUTH_SECRET` (readable by
anyone who may `get` pods); the operator's per-CR Secret, mounted as a file in the driver and the
executors, replaces it (docs/rbac.md).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import KubeEnv, wait_until
from tests.real.test_drain_job import produce
from tests.real.test_node import node  # noqa: F401 - fixture
from tests.real.test_node_consumer import _built_and_loaded, pods_postgres  # noqa: F401 - fixture
from tests.real.test_node_operator import on_node  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.real,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

PARTS, PER_PARTITION = 2, 1000


def test_spark_k8s_drain_on_the_node_in_a_restricted_namespace(
    node: Any,
    kube: KubeEnv,
    kafka_part: Any,
    pods_postgres: Any,
    new_topic: Callable[..., str],
    on_node: Callable[[str], str],
) -> None:
    from lagpilot.act.drain_manifests import DrainSettings, build_drain_job
    from lagpilot.act.spark_rpc_key import SPARK_RPC_KEY, new_key
    from lagpilot.decide.handoff import DrainStatus, PartitionRange, Phase, SubProgress
    from lagpilot.spec import parse_spec
    from lagpilot_dev.spark_k8s import apply_drain_rbac
    from lagpilot_runtime.sinks.ledger import stats

    pods_bootstrap = kafka_part.pods_bootstrap_servers()
    assert pods_bootstrap, "the shared broker has no PODS listener"
    image = _built_and_loaded(node, "consumer")
    ns = on_node("spk8s")
    kube.kubectl(
        "create",
        "secret",
        "generic",
        "pg",
        "-n",
        ns,
        "--from-file=dsn=/dev/stdin",
        input_text=pods_postgres.pods_dsn(),
    )
    sa = apply_drain_rbac(kube.part, ns, f"lpn-{uuid.uuid4().hex[:5]}")  # + the admission policy
    topic = new_topic(partitions=PARTS, prefix="spk8s")
    produce(kafka_part.bootstrap_servers(), topic, PER_PARTITION, PARTS)
    ranges = {p: (0, PER_PARTITION) for p in range(PARTS)}
    table = "spk8s_" + uuid.uuid4().hex[:8]
    spec = parse_spec(
        {
            "kafka": {"bootstrapServers": pods_bootstrap},
            "topic": topic,
            "groupId": f"{topic}-g",
            "batch": {"maxRecords": 100},
            "processing": {
                "handler": "lagpilot_runtime.sinks.ledger:process",
                "config": {"ledger.table": table},
            },
            "drain": {"maxTasks": 2},
            "template": {
                "image": image,
                "imagePullPolicy": "Never",
                # the driver only schedules: a small request (the node has 2 CPUs)
                "resources": {"requests": {"cpu": "250m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}},
                "env": [{"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}],
            },
        }
    )
    drain = DrainStatus(
        id=1,
        phase=Phase.HANDED_OFF,
        ranges=tuple(PartitionRange(p, b, a) for p, (a, b) in ranges.items()),
        sub_ranges=tuple(SubProgress(p, 0, a, b, a) for p, (a, b) in ranges.items()),
    )
    settings = DrainSettings(
        spark_master="k8s://https://kubernetes.default.svc",
        service_account=sa,
        executor_cores=1,
        executor_memory="512m",
    )
    job = build_drain_job("orders", ns, "unused", spec, drain, 1, settings)
    # no BatchConsumerGroup here: the test owns the Job, and makes the CR's RPC key as the operator does
    key = SPARK_RPC_KEY.secret("orders", ns, "unused", new_key())
    for obj in (key, job):
        obj["metadata"].pop("ownerReferences")
        kube.kubectl("create", "-n", ns, "-f", "-", input_text=json.dumps(obj))
    name = job["metadata"]["name"]

    def done() -> str | None:
        obj = json.loads(kube.kubectl("get", "job", "-n", ns, name, "-o", "json").stdout)
        return next(
            (
                c["type"]
                for c in (obj.get("status") or {}).get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )

    outcome = wait_until(done, "the drain Job to finish", 1200, 2.0)
    (driver,) = json.loads(
        kube.kubectl("get", "pods", "-n", ns, "-l", f"job-name={name}", "-o", "json").stdout
    )["items"]
    driver_log = kube.kubectl("logs", "-n", ns, driver["metadata"]["name"], "--tail=-1", check=False).stdout
    assert outcome == "Complete", driver_log[-6000:]
    execs = json.loads(
        kube.kubectl("get", "pods", "-n", ns, "-l", "spark-role=executor", "-o", "json").stdout
    )["items"]
    print(kube.kubectl("get", "pods", "-n", ns, "-o", "wide").stdout)
    assert len(execs) >= 2, [p["metadata"]["name"] for p in execs]
    for p in [*execs, driver]:  # containers on the real node, admitted under `restricted`
        assert p["spec"]["nodeName"] == node.info()["node_name"], p["metadata"]["name"]
        assert p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    for p in execs:
        assert [(o["kind"], o["name"]) for o in p["metadata"]["ownerReferences"]] == [
            ("Pod", driver["metadata"]["name"])
        ]
    rep = stats(pods_postgres.app_dsn(), table, ranges)
    print("ledger:", rep)
    assert (
        rep["lost"] == 0
        and rep["outside"] == 0
        and rep["duplicated"] == 0
        and rep["distinct"] == PARTS * PER_PARTITION
    )

    # H4: the RPC is authenticated (the executors start with spark.authenticate), and its secret is
    # in no pod spec: no literal SPARK_AUTH_SECRET env; the executors read it from a Secret volume
    for p in execs:
        env = {e["name"]: e for e in p["spec"]["containers"][0].get("env") or []}
        opts = [e.get("value", "") for k, e in env.items() if k.startswith("SPARK_JAVA_OPT_")]
        assert "-Dspark.authenticate=true" in opts, opts
        # Spark 4's SecurityManager.ENV_AUTH_SECRET is `_SPARK_AUTH_SECRET` (older: SPARK_AUTH_SECRET)
        literal = [k for k in env if "AUTH_SECRET" in k]
        assert literal == [], (
            f"{p['metadata']['name']}: the RPC secret is a literal in the pod spec: {literal}"
        )
        secret_volumes = [v["secret"]["secretName"] for v in p["spec"].get("volumes") or [] if "secret" in v]
        assert secret_volumes == ["orders-drain-rpc-key"], secret_volumes
        # the executor's own word: its RPC ran authenticated (it read the key from the mounted file)
        log = kube.kubectl("logs", "-n", ns, p["metadata"]["name"], "--tail=-1").stdout
        assert "SecurityManager: authentication enabled" in log, log[-3000:]
    assert [
        ln for ln in driver_log.splitlines() if "Forbidden" in ln
    ] == []  # the chart's drain Role sufficed
