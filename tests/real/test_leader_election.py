"""Two operator instances on the same namespace (issue 23, M3): only one reconciles, the other stands
by; when the leader dies (SIGKILL: no lease release), the other takes over.

Both run as the docs/rbac.md ServiceAccount (so the Lease verbs are proven sufficient), each with its
own identity (`LAGPILOT_POD_NAME`, as the chart sets it from the pod name). Who reconciles is read
from the operators' own log lines: kopf's create handler logs "deployment applied", the control
loop logs "first cycle done" once per CR; an operator without the lease does neither.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.operator_process import DEV_SESSION_TIMEOUT_MS, OperatorProcess, operator_env
from tests.fixtures.kube import wait_until
from tests.real.test_operator_e2e import (
    REPO,
    SA_NAME,
    apply_cr,
    cr,
    crd,  # noqa: F401  (fixture)
    get_cr,
    rbac_rules,
)

pytestmark = [pytest.mark.real, pytest.mark.slow]


def log_lines(op: OperatorProcess) -> list[dict[str, Any]]:
    out = []
    for line in op.log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def reconciled(op: OperatorProcess) -> int:
    """How many reconcile steps this operator logged (apply handler + first control-loop cycle)."""
    return sum(1 for rec in log_lines(op) if rec.get("message") in ("deployment applied", "first cycle done"))


@pytest.fixture
def two_operators(
    crd: Any, kube_api: Any, namespace: Callable[..., str]
) -> Iterator[tuple[str, list[OperatorProcess]]]:
    from kubernetes import client

    rbac, custom = client.RbacAuthorizationV1Api(kube_api), client.CustomObjectsApi(kube_api)
    ns = namespace("leader")
    rbac.create_namespaced_role(ns, {"metadata": {"name": SA_NAME}, "rules": rbac_rules()})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": SA_NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": ns}],
        },
    )
    kubeconfig = crd.kubeconfig_for_service_account(ns, SA_NAME)
    log_dir = Path(tempfile.mkdtemp(prefix="lagpilot-leader-"))
    ops = [
        OperatorProcess(
            ns,
            log_dir / f"operator-{who}.log",
            operator_env(kubeconfig, REPO, {"LAGPILOT_POD_NAME": f"operator-{who}"}),
        )
        for who in ("a", "b")
    ]
    yield ns, ops
    try:
        custom.delete_collection_namespaced_custom_object(
            "lagpilot.io", "v1alpha1", ns, "batchconsumergroups"
        )
        wait_until(
            lambda: (
                not custom.list_namespaced_custom_object(
                    "lagpilot.io", "v1alpha1", ns, "batchconsumergroups"
                )["items"]
            ),
            f"CRs in {ns} deleted",
            90,
        )
    except Exception as exc:  # noqa: BLE001 - teardown must stop the operators
        print(f"teardown of {ns}: {exc!r}")
    for op in ops:
        print(f"--- {op.log_path.name} ---\n{op.tail(60)}")
        op.stop()


def test_one_operator_reconciles_the_other_stands_by_and_takes_over(
    two_operators: tuple[str, list[OperatorProcess]],
    crd: Any,
    kube_api: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
) -> None:
    from kubernetes import client

    apps, custom = client.AppsV1Api(kube_api), client.CustomObjectsApi(kube_api)
    ns, ops = two_operators
    topic = new_topic(partitions=2, prefix="leader")
    name = "orders"
    spec = {
        "kafka": {"bootstrapServers": kafka_bootstrap, "sessionTimeoutMs": DEV_SESSION_TIMEOUT_MS},
        "topic": topic,
        "groupId": f"leader-{uuid.uuid4().hex[:6]}",
        "processing": {"sink": "log"},
        "scaling": {"minReplicas": 1, "maxReplicas": 3, "pollIntervalSeconds": 2},
        "catchUpSLASeconds": 60,
        "drain": {"enabled": False},
    }
    apply_cr(crd, ns, cr(name, spec))

    # 1. one operator reconciles: the Deployment, the status, its first cycle
    wait_until(
        lambda: apps.read_namespaced_deployment(f"{name}-consumer", ns), "the consumer Deployment", 120
    )
    wait_until(
        lambda: any('"first cycle done"' in op.log_path.read_text(errors="replace") for op in ops),
        "a first control-loop cycle",
        120,
        interval=1,
    )
    leaders = [op for op in ops if reconciled(op) > 0]
    assert len(leaders) == 1, f"{len(leaders)} operators reconcile the CR"
    (leader,) = leaders
    standby = next(op for op in ops if op is not leader)
    # the other one has either started reconciling too (the defect) or says it stands by
    wait_until(
        lambda: reconciled(standby) > 0 or '"standing by' in standby.log_path.read_text(errors="replace"),
        "the second operator to reconcile or to stand by",
        120,
        interval=1,
    )
    # a few more cycles of the leader: the status is written, the standby still does nothing
    wait_until(lambda: (get_cr(custom, ns, name).get("status") or {}).get("conditions"), "status written", 60)
    assert reconciled(standby) == 0, f"both operators reconcile:\n{standby.tail(20)}"

    # 2. the leader dies without releasing its lease; the standby takes over and reconciles: a spec
    # change made after the kill reaches the Deployment
    leader.kill()
    assert not leader.alive()
    custom.patch_namespaced_custom_object(
        "lagpilot.io", "v1alpha1", ns, "batchconsumergroups", name, {"spec": {"scaling": {"minReplicas": 2}}}
    )
    wait_until(
        lambda: apps.read_namespaced_deployment(f"{name}-consumer", ns).spec.replicas == 2,
        "the new leader to apply the spec change",
        180,
        interval=1,
    )
    assert reconciled(standby) > 0
    print("standby's log:\n" + standby.tail(15))
