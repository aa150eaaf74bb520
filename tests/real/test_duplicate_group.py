"""A second BatchConsumerGroup with the same groupId on the same Kafka cluster (issue 23, M4).

Operator subprocess (as its docs/rbac.md ServiceAccount) + kube-apiserver/controller-manager + Kafka;
the consumer pods run where the `pods` fixture says (tests/fixtures/node.py): containers of the test
image on the real node (namespace enforcing `restricted`). The first CR runs its consumer; the second CR (same groupId and bootstrapServers, another
topic) gets `Degraded=True/DuplicateGroupId` naming `spec.groupId` and the first CR, a Warning event,
and creates nothing: no Deployment, so no member of its own joins the first CR's group, whose Deployment
and membership stay as they were. Once the first CR is deleted, the second takes the group over.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.real.test_operator_e2e import (
    Operator,
    apply_cr,
    condition,
    cr,
    crd,  # noqa: F401 - the fixture
    events_for,
    get_cr,
    start_operator,  # noqa: F401 - the fixture
)

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_second_cr_with_the_same_group_id_is_degraded_and_the_first_is_undisturbed(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_admin: Any,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
) -> None:
    from kubernetes import client

    apps, core, custom = (
        client.AppsV1Api(kube_api),
        client.CoreV1Api(kube_api),
        client.CustomObjectsApi(kube_api),
    )
    ns = pods.namespace("dup")
    start_operator(ns)
    group = "g-dup-" + uuid.uuid4().hex[:6]
    base = {
        "kafka": {"bootstrapServers": pods.kafka_bootstrap},
        "groupId": group,
        "processing": {"sink": "log"},
        "drain": {"enabled": False},
        "scaling": {"minReplicas": 1, "maxReplicas": 1, "pollIntervalSeconds": 2},
        "template": pods.template(),
    }
    apply_cr(crd, ns, cr("first", {**base, "topic": new_topic(partitions=2, prefix="dup-a")}))

    def members() -> int:
        desc = kafka_admin.describe_consumer_groups([group])[group].result(30)
        return len(desc.members)

    wait_until(lambda: members() == 1, "the first CR's consumer in the group", 300, interval=1)
    first_pods = core.list_namespaced_pod(ns, label_selector="lagpilot.io/group=first").items
    assert first_pods and {p.spec.node_name for p in first_pods} == {pods.node_name}, [
        (p.metadata.name, p.spec.node_name) for p in first_pods
    ]
    dep_before = apps.read_namespaced_deployment("first-consumer", ns)

    apply_cr(crd, ns, cr("second", {**base, "topic": new_topic(partitions=2, prefix="dup-b")}))

    def degraded() -> dict[str, Any] | None:
        c = condition(get_cr(custom, ns, "second"), "Degraded")
        return c if c and c["status"] == "True" and c["reason"] == "DuplicateGroupId" else None

    c = wait_until(degraded, "the second CR Degraded/DuplicateGroupId", 120, interval=1)
    print(f"second: {c['reason']}: {c['message']}")
    assert "spec.groupId" in c["message"] and group in c["message"] and f"{ns}/first" in c["message"], c
    ready = condition(get_cr(custom, ns, "second"), "Ready")
    assert ready is not None and ready["status"] == "False" and ready["reason"] == "DuplicateGroupId", ready
    wait_until(
        lambda: any(
            e.type == "Warning" and e.reason == "DuplicateGroupId" for e in events_for(core, ns, "second")
        ),
        "a Warning event DuplicateGroupId on the second CR",
        60,
        interval=1,
    )
    # the second CR created nothing; the first is undisturbed (same Deployment spec, one member, not Degraded)
    names = [d.metadata.name for d in apps.list_namespaced_deployment(ns).items]
    assert "second-consumer" not in names, names
    dep_after = apps.read_namespaced_deployment("first-consumer", ns)
    assert dep_after.metadata.generation == dep_before.metadata.generation
    assert members() == 1
    first_deg = condition(get_cr(custom, ns, "first"), "Degraded")
    assert first_deg is None or first_deg["status"] == "False", first_deg

    # the first CR goes: the second takes the group over (its Deployment, its consumer)
    custom.delete_namespaced_custom_object("lagpilot.io", "v1alpha1", ns, "batchconsumergroups", "first")
    wait_until(
        lambda: "second-consumer" in [d.metadata.name for d in apps.list_namespaced_deployment(ns).items],
        "the second CR's Deployment once the first is gone",
        180,
        interval=1,
    )
    wait_until(
        lambda: (
            (condition(get_cr(custom, ns, "second"), "Degraded") or {}).get("reason") != "DuplicateGroupId"
        ),
        "the second CR no longer Degraded/DuplicateGroupId",
        120,
        interval=1,
    )
