"""`kubectl lagpilot` run as a user runs it (issue 28 item 1): the real kubectl finds the
`kubectl-lagpilot` executable on PATH (here a shim that runs this checkout's lagpilot.kubectl_plugin,
as the console script of an installed package would) and the plugin reads the real API server with
the kubeconfig kubectl was given. A group with a backlog reconciled by the operator, its consumers
run where the `pods` fixture says (tests/fixtures/node.py: containers on
the real node): top, status, why, drains, simulate, pause and resume (the operator then scales
the consumers to 0 and back). The transcript is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.operator_process import checkout_pythonpath
from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.real.test_crd import crd  # noqa: F401 - fixture
from tests.real.test_operator_e2e import Operator, apply_cr, condition, cr, get_cr, produce, start_operator  # noqa: F401

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]


def test_kubectl_lagpilot_on_the_real_stack(
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
    tmp_path: Path,
) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_api)
    ns = pods.namespace("plugin")
    start_operator(ns)
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, per_partition=2000, partitions=2)
    apply_cr(
        crd,
        ns,
        cr(
            "orders",
            {
                "kafka": {"bootstrapServers": pods.kafka_bootstrap},
                "topic": topic,
                "groupId": f"plugin-{uuid.uuid4().hex[:6]}",
                "processing": {"sink": "log"},
                "catchUpSLASeconds": 30,
                "drain": {"enabled": False},
                "scaling": {"minReplicas": 1, "maxReplicas": 2, "pollIntervalSeconds": 2},
                "template": pods.template(),
            },
        ),
    )
    wait_until(
        lambda: (get_cr(custom, ns, "orders").get("status") or {}).get("capacityPerReplica") is not None,
        "a measured capacity (the consumers' commit metadata)",
        240,
        interval=2,
    )

    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "kubectl-lagpilot"
    shim.write_text(
        f'#!/bin/sh\nPYTHONPATH={checkout_pythonpath(REPO)} exec {sys.executable} -m lagpilot.kubectl_plugin "$@"\n'
    )
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(crd.kubeconfig),
    }
    kubectl = str(crd.kubectl_path)

    def k(*args: str, ok: bool = True) -> str:
        proc = subprocess.run(
            [kubectl, "lagpilot", *args], capture_output=True, text=True, env=env, timeout=180, check=False
        )
        print(f"$ kubectl lagpilot {' '.join(args)}\n{proc.stdout}{proc.stderr}")
        assert (proc.returncode == 0) == ok, (proc.returncode, proc.stderr)
        return proc.stdout + proc.stderr

    plugins = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert str(shim) in plugins.stdout, plugins.stdout + plugins.stderr

    top = k("top", "-n", ns)
    assert top.splitlines()[0].split()[:4] == ["NAME", "MODE", "READY", "HEALTH"]
    assert top.splitlines()[1].split()[:2] == ["orders", "Act"]
    assert ns in k("top", "-A")
    status = k("status", "orders", "-n", ns)
    assert "PARTITIONS" in status and "CONDITIONS" in status
    parts = json.loads(k("status", "orders", "-n", ns, "-o", "json"))["partitions"]
    assert [p["partition"] for p in parts] == [0, 1]
    before = condition(get_cr(custom, ns, "orders"), "Scaling")["reason"]
    why = json.loads(k("why", "orders", "-n", ns, "-o", "json"))
    # the decision the CR shows (read just before or after: a cycle may run in between)
    assert why["reason"] in (before, condition(get_cr(custom, ns, "orders"), "Scaling")["reason"])
    assert why["inputs"]["capacityPerReplica"] is not None
    assert "inputs:" in k("why", "orders", "-n", ns)
    assert "no drain recorded" in k("drains", "orders", "-n", ns)
    sim = k("simulate", "bcg/orders", "-n", ns, "--horizon", "600")
    assert "lagpilot" in sim and "static" in sim
    import yaml

    assert yaml.safe_load(k("top", "-n", ns, "-o", "yaml"))[0]["name"] == "orders"

    # pause: spec.paused true, the operator scales the consumers to 0; resume brings them back
    assert "orders paused" in k("pause", "orders", "-n", ns)
    wait_until(
        lambda: (condition(get_cr(custom, ns, "orders"), "Ready") or {}).get("reason") == "Paused",
        "Ready=False/Paused after kubectl lagpilot pause",
        120,
        interval=1,
    )
    apps = client.AppsV1Api(kube_api)
    wait_until(
        lambda: apps.read_namespaced_deployment("orders-consumer", ns).spec.replicas == 0,
        "the consumers scaled to 0",
        120,
        interval=1,
    )
    assert "orders resumed" in k("resume", "orders", "-n", ns)
    wait_until(
        lambda: (apps.read_namespaced_deployment("orders-consumer", ns).spec.replicas or 0) >= 1,
        "the consumers back after kubectl lagpilot resume",
        120,
        interval=1,
    )
    assert get_cr(custom, ns, "orders")["spec"]["paused"] is False

    # kubectl's conventions: an unknown context is a clear error, exit 1
    assert "cannot load the kubeconfig" in k("top", "--context", "no-such-context", ok=False)
    assert "not found" in k("status", "nope", "-n", ns, ok=False)
