"""The SparkApplication launcher (spec.drain.launcher: sparkApplication) on the real API server.

A stand-in SparkApplication CRD (tests/fixtures/crds/sparkapplication-minimal.yaml: the kubeflow
spark-operator's group/version/kind, schema left open) is installed and the test plays the
spark-operator: it reads the SparkApplication the operator created, moves its
`status.applicationState.state` the way the spark-operator does, and starts the application's
driver as a pod where `pods` runs them (the real node: a container of the test image, admitted
under Pod Security `restricted`): the driver's image,
environment (Secret refs and fieldRefs resolved by the kubelet), labels and security contexts from
the application, running the image's `lagpilot drain` (what spark-submit's DRIVER_MAIN ends in).
What is proven: the operator creates one SparkApplication per attempt (named like the Job, owned by the CR,
carrying the plan, the handler and the Secret refs), reads its state, retries a FAILED application as
attempt 2, and reaches Verified on a COMPLETED one whose progress covers the ranges, exactly once in
the delivery ledger. Not run here: the spark-operator itself (spark-submit in cluster mode, its pod
webhook), so the driver main file in the image is exercised only through `lagpilot drain`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.real.test_drain_operator import PARTS, REPO, Scenario, finish_and_check, scenario, wait_phase  # noqa: F401
from tests.real.test_operator_e2e import crd, events_for  # noqa: F401  (fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]

GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"
CRD_FILE = REPO / "tests" / "fixtures" / "crds" / "sparkapplication-minimal.yaml"
RULES = [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "create", "delete"]}]


@pytest.fixture(scope="module")
def sparkapp_crd(kube: Any) -> Iterator[Any]:
    kube.kubectl("apply", "--server-side", "--field-manager=lagpilot-tests", "-f", str(CRD_FILE))
    kube.kubectl(
        "wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=120s", timeout=150
    )
    wait_until(
        lambda: kube.kubectl("get", "sparkapp", "-A", check=False).returncode == 0,
        "the sparkapp resource in discovery",
        timeout=120,
    )
    yield kube


def _app(s: Scenario, name: str) -> dict[str, Any] | None:
    try:
        return s.custom.get_namespaced_custom_object(GROUP, VERSION, s.ns, PLURAL, name)
    except Exception as err:
        if getattr(err, "status", None) == 404:
            return None
        raise


def _play_state(s: Scenario, name: str, state: str, error: str = "") -> None:
    """What the spark-operator writes into the application's status."""
    st: dict[str, Any] = {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}}
    if state in ("RUNNING", "COMPLETED", "FAILED"):
        st["driverInfo"] = {"podName": f"{name}-driver"}
    s.custom.patch_namespaced_custom_object_status(GROUP, VERSION, s.ns, PLURAL, name, {"status": st})


def _driver_pod(app: dict[str, Any]) -> dict[str, Any]:
    """The driver pod the spark-operator would start for `app` (named as its driverInfo says), from
    the application's driver spec: image, env (values, Secret refs, fieldRefs: the kubelet resolves
    them), labels, pod and container security contexts, the /tmp volume. It runs `lagpilot drain`,
    what spark-submit's DRIVER_MAIN ends in; Spark runs in local mode inside it (no master in the
    plan's env), so the RPC key the spark-operator would mount (`driver.secrets`) is not mounted.
    Not taken from the application: spark-submit itself and the driver's cores/memory (no requests:
    the scheduler places it on the node whatever the other sessions' pods asked for)."""
    spec, driver = app["spec"], app["spec"]["driver"]
    assert all(
        ("value" in e) or (e.get("valueFrom") or {}).keys() <= {"fieldRef", "secretKeyRef"}
        for e in driver["env"]
    ), driver["env"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app['metadata']['name']}-driver", "labels": dict(driver.get("labels") or {})},
        "spec": {
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "securityContext": dict(driver["podSecurityContext"]),
            "volumes": list(spec["volumes"]),
            "containers": [
                {
                    "name": "spark-kubernetes-driver",
                    "image": spec["image"],
                    "imagePullPolicy": spec["imagePullPolicy"],
                    "command": ["lagpilot", "drain"],
                    "env": list(driver["env"]),
                    "securityContext": dict(driver["securityContext"]),
                    "volumeMounts": list(driver["volumeMounts"]),
                }
            ],
        },
    }


def test_spark_application_launcher_failed_attempt_is_retried_and_completed_one_verified(
    sparkapp_crd: Any, scenario: Callable[..., Scenario], pods: Pods, kafka_admin: Any, postgres_dsn: str
) -> None:
    s = scenario(
        {p: 4000 for p in range(PARTS)}, sla_s=30, drain={"launcher": "sparkApplication"}, extra_rules=RULES
    )

    # attempt 1: the operator's SparkApplication, as the spark-operator would receive it
    first = wait_until(lambda: _app(s, "orders-drain-1-1"), "the first SparkApplication", 300, 1.0)
    spec, meta = first["spec"], first["metadata"]
    assert (spec["type"], spec["mode"], spec["restartPolicy"]) == ("Python", "cluster", {"type": "Never"})
    assert [(o["kind"], o["name"]) for o in meta["ownerReferences"]] == [("BatchConsumerGroup", s.name)]
    env = {e["name"]: e for e in spec["driver"]["env"]}
    assert env["LEDGER_DSN"]["valueFrom"]["secretKeyRef"] == {
        "name": "pg",
        "key": "dsn",
    }  # a ref, never the value
    plan = json.loads(env["LAGPILOT_DRAIN_PLAN"]["value"])
    assert plan["topic"] == s.topic and plan["groupId"] == s.group, plan
    assert not s.core.list_namespaced_pod(
        s.ns, label_selector="lagpilot.io/drain-job"
    ).items  # no Job pod: no Job
    d = wait_phase(s, ("Running",), 120)
    assert d["attempt"] == 1

    # the spark-operator reports a failed driver: the operator records it and launches attempt 2
    _play_state(s, "orders-drain-1-1", "SUBMITTED")
    _play_state(
        s, "orders-drain-1-1", "FAILED", "driver container failed with ExitCode: 137, Reason: OOMKilled"
    )
    second = wait_until(lambda: _app(s, "orders-drain-1-2"), "the retry's SparkApplication", 180, 1.0)
    reasons = [e.reason for e in events_for(s.core, s.ns, s.name)]
    assert "DrainAttemptFailed" in reasons, reasons
    print("attempt 1 failed as played; attempt 2:", second["metadata"]["name"])

    # attempt 2: RUNNING, its driver pod runs the plan, COMPLETED
    _play_state(s, "orders-drain-1-2", "RUNNING")
    pod = s.core.create_namespaced_pod(s.ns, _driver_pod(second)).metadata.name
    ended = wait_until(
        lambda: (lambda p: p if p.status.phase in ("Succeeded", "Failed") else None)(
            s.core.read_namespaced_pod(pod, s.ns)
        ),
        "the driver pod to end",
        600,
        1.0,
    )
    assert s.io is not None
    assert ended.status.phase == "Succeeded", s.io.logs(s.ns, pod)[-4000:]
    assert ended.spec.node_name == pods.node_name, ended.spec.node_name  # where `pods` runs them
    _play_state(s, "orders-drain-1-2", "COMPLETED")
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d["attempt"] == 2, d
    listing = sparkapp_crd.kubectl("get", "sparkapp", "-n", s.ns).stdout
    print(listing)
    assert "COMPLETED" in listing and "FAILED" in listing
