"""The SparkApplication launcher (spec.drain.launcher: sparkApplication) on the real API server.

A stand-in SparkApplication CRD (tests/fixtures/crds/sparkapplication-minimal.yaml: the kubeflow
spark-operator's group/version/kind, schema left open) is installed and the test plays the
spark-operator: it reads the SparkApplication the operator created, moves its
`status.applicationState.state` the way the spark-operator does, and runs the application's driver
the only way it can here — `lagpilot drain` as a local process with the driver's environment
resolved from the application (Secret refs read from the Secret, as the kubelet would). What is
proven: the operator creates one SparkApplication per attempt (named like the Job, owned by the CR,
carrying the plan, the handler and the Secret refs), reads its state, retries a FAILED application as
attempt 2, and reaches Verified on a COMPLETED one whose progress covers the ranges, exactly once in
the delivery ledger. Not run here: the spark-operator itself (spark-submit in cluster mode, its pod
webhook), so the driver main file in the image is exercised only through `lagpilot drain`.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import pods_on_the_runner as pods  # noqa: F401 - its pods stay on the runner (docs/node.md step 4)
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


def _driver_env(s: Scenario, app: dict[str, Any]) -> dict[str, str]:
    """The driver container's environment as the kubelet would build it (values and Secret refs)."""
    out: dict[str, str] = {}
    for e in app["spec"]["driver"]["env"]:
        if "value" in e:
            out[e["name"]] = str(e["value"])
            continue
        field = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field is not None:  # the downward API: the driver pod's own name / IP
            out[e["name"]] = {
                "metadata.name": f"{app['metadata']['name']}-driver",
                "status.podIP": "127.0.0.1",
            }.get(field, "")
            continue
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        assert ref, f"only values, fieldRefs and Secret refs expected in the driver env: {e}"
        secret = s.core.read_namespaced_secret(ref["name"], s.ns)
        out[e["name"]] = base64.b64decode(secret.data[ref["key"]]).decode()
    return out


def test_spark_application_launcher_failed_attempt_is_retried_and_completed_one_verified(
    sparkapp_crd: Any, scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str, tmp_path: Path
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

    # attempt 2: RUNNING, its driver runs the plan, COMPLETED
    _play_state(s, "orders-drain-1-2", "RUNNING")
    denv = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
    denv.update(_driver_env(s, second))
    log = tmp_path / "driver.log"
    with log.open("wb") as out:
        rc = subprocess.run(
            [str(Path(sys.executable).parent / "lagpilot"), "drain"],
            env=denv,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            cwd=tmp_path,
        ).returncode
    assert rc == 0, log.read_text(errors="replace")[-4000:]
    _play_state(s, "orders-drain-1-2", "COMPLETED")
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d["attempt"] == 2, d
    listing = sparkapp_crd.kubectl("get", "sparkapp", "-n", s.ns).stdout
    print(listing)
    assert "COMPLETED" in listing and "FAILED" in listing
