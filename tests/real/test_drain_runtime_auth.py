"""C1 on the real stack: a plan forged by another process and sent to the warm drain runtime's port
is refused, and the real drain still processes every record exactly once (the delivery ledger).

The stack of tests/real/test_drain_runtime.py (operator as the docs/rbac.md ServiceAccount, the pods
on the real node (`pods`), where the attacker reaches the runtime at its pod IP; Kafka, Spark local mode, PostgreSQL ledger). While the CR holds `cancel: true` (no drain yet)
and the runtime pod is Ready, a separate Python process (the attacker: no key, but it can reach the
port, as any pod could before) sends the attack of issue 23: the drain id the operator will use
next ("1") with one sub-range per partition covering the whole backlog, as a bare plan (the old
protocol) and wrapped with a made-up signature. Both must be refused (401) and the runtime must log
each refusal (the fault fired: it reached the runtime). Then the drain runs and the ledger holds
every offset once, the drain exactly its recorded ranges (finish_and_check). Finally the real Job's
own signed plan (read from its env, as anyone who can read Jobs could) is replayed from the attacker
process: refused as a replay, and the ledger does not change.

NetworkPolicy enforcement needs the `netpol` part (test_node_runtime.py): here only that the operator created the policy and the key Secret, owned by the CR.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot.act.drain_runtime import runtime_name, runtime_port
from lagpilot_dev.runtime_attacker import attack
from tests.fixtures.kube import wait_until
from tests.fixtures.node import PodIO, Pods
from tests.real.test_drain_operator import PARTS, Scenario, crd, finish_and_check, scenario, wait_phase  # noqa: F401
from tests.real.test_drain_runtime import _log_events, _ready_runtime_pod, _worktree_pythonpath

pytestmark = [pytest.mark.real, pytest.mark.slow]

# a backlog the 3 capped consumers (~17 records/s each at 6 s per batch of 100) cannot clear while
# the runtime warms up under load (a first run at 2 s per batch: the consumers had cleared 12,000
# records before the runtime was Ready at load 22, and no drain was due any more)
PER_PARTITION, COST_MS = 6000, 6000


def ledger_rows(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_a_forged_plan_is_refused_and_the_drain_stays_exact(
    scenario: Callable[..., Scenario], pods: Pods, pod_io: PodIO, kafka_admin: Any, postgres_dsn: str
) -> None:
    from kubernetes import client

    s = scenario(
        {p: PER_PARTITION for p in range(PARTS)},
        live_per_s=0,
        sla_s=20,
        cost_ms=COST_MS,
        drain={"warmRuntime": True, "cancel": True},
        operator_env=_worktree_pythonpath(),
    )
    pod = wait_until(lambda: _ready_runtime_pod(s), "the runtime pod Ready (warm)", 240, interval=1)
    port = runtime_port(s.ns, s.name)
    # the runtime listens in its pod (the host reaches pod IPs through the bridge; no NetworkPolicy
    # agent on this path)
    host = pod.status.pod_ip

    def rt_log() -> str:
        return pod_io.logs(s.ns, pod.metadata.name)

    assert not s.drain().get("id"), "a drain started before the attack"

    # the attack: the next drain id, one sub-range per partition over the whole backlog
    forged = json.dumps(
        {
            "drainId": "1",
            "topic": s.topic,
            "groupId": s.group,
            "batchMaxRecords": 100,
            "parallelism": PARTS,
            "readCommitted": False,
            "subRanges": [
                {"partition": p, "index": 0, "start": 0, "end": PER_PARTITION} for p in range(PARTS)
            ],
        },
        separators=(",", ":"),
        sort_keys=True,
    )
    made_up = json.dumps(
        {
            "plan": forged,
            "auth": {
                "crUid": "x",
                "drainId": "1",
                "attempt": 1,
                "expiresAt": int(time.time()) + 600,
                "signature": "00" * 32,
            },
        }
    )
    answers = attack(port, [forged, made_up], healthz=True, host=host)
    assert [a[0] for a in answers[:2]] == [401, 401], answers
    healthz = answers[2]
    assert healthz[0] == 200 and '"1"' not in healthz[1], healthz
    # the fault fired: both requests reached the runtime and were refused there
    refused = wait_until(
        lambda: (
            len(_log_events(rt_log(), "drain_runtime_refused")) >= 2
            and _log_events(rt_log(), "drain_runtime_refused")
        ),
        "the runtime's refusals logged",
        30,
    )
    assert len(refused) == 2 and not _log_events(rt_log(), "drain_runtime_served"), refused

    s.patch_spec({"drain": {"cancel": False}})
    wait_phase(s, ("Running", "Succeeded", "Verified", "Failed"), 300)
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d.get("runtime") == "warm" and d["attempt"] == 1, d
    served = [e for e in _log_events(rt_log(), "drain_runtime_served") if str(e.get("drain")) == str(d["id"])]
    assert len(served) == 1 and served[0]["exit"] == 0 and served[0]["records"] == d["recordsTotal"], served

    # the real Job's signed plan, replayed by the attacker: refused, the ledger unchanged
    jobs = (
        client.BatchV1Api(s.custom.api_client)
        .list_namespaced_job(s.ns, label_selector="lagpilot.io/drain-job")
        .items
    )
    assert len(jobs) == 1
    env = {e.name: e.value for e in jobs[0].spec.template.spec.containers[0].env}
    replay = json.dumps(
        {"plan": env["LAGPILOT_DRAIN_PLAN"], "auth": json.loads(env["LAGPILOT_DRAIN_PLAN_AUTH"])}
    )
    rows = ledger_rows(postgres_dsn, s.table)
    answers = attack(port, [replay], host=host)
    assert answers[0][0] == 401 and "replay" in answers[0][1], answers
    assert ledger_rows(postgres_dsn, s.table) == rows
    assert len([e for e in _log_events(rt_log(), "drain_runtime_served")]) == 1

    # what the operator made for it: the key Secret and the NetworkPolicy, both owned by the CR
    uid = s.custom.get_namespaced_custom_object(
        "lagpilot.io", "v1alpha1", s.ns, "batchconsumergroups", s.name
    )["metadata"]["uid"]
    secret = s.core.read_namespaced_secret(f"{s.name}-drain-runtime-key", s.ns)
    assert [o.uid for o in secret.metadata.owner_references] == [uid]
    pol = client.NetworkingV1Api(s.custom.api_client).read_namespaced_network_policy(
        runtime_name(s.name), s.ns
    )
    assert [o.uid for o in pol.metadata.owner_references] == [uid]
    assert pol.spec.ingress[0].ports[0].port == port
