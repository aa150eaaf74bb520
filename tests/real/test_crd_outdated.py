"""An older CRD installed under the operator (issue 26; docs/operator.md "The installed CRD"): the
real API server prunes what the CRD lacks, and the operator says so on every CR it reconciles while
it keeps acting; once this version's CRD is applied, the condition clears by itself.

On a PRIVATE control plane (its own state dir, started here): the test installs an older CRD on
purpose, which on the shared one would prune other tests' status fields. The operator runs as a
ServiceAccount with docs/rbac.md's namespaced rules plus the chart's own `-crd` ClusterRole (get on
the one CRD by name), so the chart's rule is shown sufficient (no refused read in the log). Kafka is
the shared broker (one topic of its own).
"""

from __future__ import annotations

import copy
import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot.model.crd import crd
from lagpilot_dev.operator_process import OperatorProcess, operator_env
from tests.fixtures.kube import wait_until
from tests.fixtures.stack import create_topic
from tests.real.test_operator_e2e import SA_NAME, free_port, produce, rbac_rules

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "batchconsumergroup.yaml"
CRD_NAME = "batchconsumergroups.lagpilot.io"
# what the older CRD lacks: a field the operator writes only on a busy drain's idle cycles (the
# 2026-11-27 incident) and one it writes on every cycle (its prune is seen on the stored object)
DROPPED = ("status.drain.idleSince", "status.startUps")


def older_crd() -> dict[str, Any]:
    """This checkout's CRD without DROPPED: the CRD of an older operator."""
    obj = copy.deepcopy(crd())
    schema = obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path in DROPPED:
        *head, leaf = path.split(".")
        node = schema
        for part in head:
            node = node["properties"][part]
        node["properties"].pop(leaf)
    return obj


@pytest.fixture(scope="module")
def private_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lagpilot_dev import paths
    from lagpilot_dev.kube import KubePart

    part = KubePart(paths.cache_dir(), tmp_path_factory.mktemp("crd-outdated") / "state")
    part.start()
    try:
        yield part
    finally:
        part.stop()


def kubectl(part: Any, *args: str, input_text: str | None = None) -> str:
    proc = part.kubectl(*args, input_text=input_text)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return str(proc.stdout)


def apply_crd(part: Any, text: str) -> None:
    kubectl(
        part,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=lagpilot-tests",
        "-f",
        "-",
        input_text=text,
    )
    kubectl(part, "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=120s")


def grant(part: Any, ns: str) -> None:
    """docs/rbac.md's namespaced rules in a Role, and the chart's `-crd` ClusterRole (rendered)."""
    from lagpilot_dev import helm as h

    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": SA_NAME, "namespace": ns},
        "rules": rbac_rules(),
    }
    crd_role = h.template(release="lpt", namespace=ns).get("ClusterRole", "lpt-lagpilot-crd")
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{ns}-crd"},
        "rules": crd_role["rules"],
    }
    subjects = [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": ns}]
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": SA_NAME, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA_NAME},
            "subjects": subjects,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{ns}-crd"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{ns}-crd"},
            "subjects": subjects,
        },
    ]
    kubectl(part, "apply", "-f", "-", input_text=yaml.safe_dump_all([role, cluster_role, *bindings]))


def get_cr(part: Any, ns: str, name: str) -> dict[str, Any]:
    return dict(json.loads(kubectl(part, "get", "bcg", name, "-n", ns, "-o", "json")))


def degraded(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Degraded"), None
    )


def test_an_older_crd_is_named_on_every_cr_and_cleared_by_applying_this_one(
    private_kube: Any, kafka_bootstrap: str, kafka_admin: Any
) -> None:
    part = private_kube
    apply_crd(part, yaml.safe_dump(older_crd()))
    ns = f"crd-old-{uuid.uuid4().hex[:6]}"
    kubectl(part, "create", "namespace", ns)
    wait_until(
        lambda: part.kubectl("get", "serviceaccount", "default", "-n", ns).returncode == 0, "default SA", 60
    )
    grant(part, ns)
    topic = f"crd-outdated-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_admin, topic, partitions=2)
    produce(kafka_bootstrap, topic, per_partition=20, partitions=2)
    name = "old-crd"
    cr = {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": kafka_bootstrap},
            "topic": topic,
            "groupId": f"{topic}-g",
            "processing": {"sink": "log"},
            "scaling": {"minReplicas": 1, "maxReplicas": 2, "pollIntervalSeconds": 2},
            "drain": {"enabled": False},
        },
    }
    kubectl(part, "apply", "-n", ns, "-f", "-", input_text=yaml.safe_dump(cr))

    kubeconfig = part.kubeconfig_for_service_account(ns, SA_NAME)
    log_path = Path(tempfile.mkdtemp(prefix="lagpilot-crd-outdated-")) / "operator.log"
    op = OperatorProcess(
        ns,
        log_path,
        operator_env(kubeconfig, REPO, extra={"LAGPILOT_CRD_CHECK_SECONDS": "3"}),
        metrics_port=free_port(),
    )
    try:
        got = wait_until(
            lambda: (
                (d := degraded(get_cr(part, ns, name))) is not None and d.get("reason") == "CRDOutdated" and d
            ),
            "Degraded=CRDOutdated on the CR",
            180,
        )
        assert got["status"] == "True"
        for path in DROPPED:
            assert f"{path} (missing)" in got["message"], got["message"]
        assert "kubectl apply --server-side -f crds/" in got["message"]
        obj = get_cr(part, ns, name)
        st = obj["status"]
        # it kept acting: observed Kafka, created the consumer Deployment
        assert st.get("partitions") == 2 and st.get("totalLag") == 40, st
        assert part.kubectl("get", "deployment", f"{name}-consumer", "-n", ns).returncode == 0
        # kstatus reads it Failed: Stalled follows Degraded
        stalled = next(c for c in st["conditions"] if c["type"] == "Stalled")
        assert (stalled["status"], stalled["reason"]) == ("True", "CRDOutdated")
        # the prune is real: what the operator writes each cycle is not stored
        assert "startUps" not in st, st
        events = json.loads(kubectl(part, "get", "events", "-n", ns, "-o", "json"))["items"]
        warned = [
            e for e in events if e.get("reason") == "CRDOutdated" and e["involvedObject"]["name"] == name
        ]
        assert warned and warned[0]["type"] == "Warning" and "status.drain.idleSince" in warned[0]["message"]

        # this version's CRD applied: the condition clears at the next check, the field is kept
        apply_crd(part, CRD_FILE.read_text())
        cleared = wait_until(
            lambda: (o := get_cr(part, ns, name)) and degraded(o) is None and "startUps" in o["status"] and o,
            "Degraded cleared and status.startUps stored",
            120,
        )
        assert not any(c["type"] == "Stalled" for c in cleared["status"]["conditions"])
        log = log_path.read_text(errors="replace")
        assert "is outdated" in log and "status.drain.idleSince" in log
        # the chart's -crd ClusterRole is enough: the read was never refused
        assert "could not be read" not in log, op.tail(60)
    finally:
        print(f"--- operator log ---\n{op.tail(120)}")
        op.stop()
        for kind in ("clusterrolebinding", "clusterrole"):
            part.kubectl("delete", kind, f"{ns}-crd", "--ignore-not-found")
        try:
            kafka_admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
        except Exception:  # noqa: BLE001 - best effort
            pass
