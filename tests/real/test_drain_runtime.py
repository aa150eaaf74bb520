"""The warm drain runtime through the operator (spec.drain.warmRuntime), on the real stack of
tests/real/test_drain_operator.py (operator subprocess as the docs/rbac.md ServiceAccount,
kube-apiserver + controller-manager + pod runner, Kafka, Spark local mode, PostgreSQL ledger).

The CR starts with `warmRuntime: true` and `cancel: true` (no drain yet): the operator creates the
runtime Deployment, its pod (`lagpilot drain --serve`) becomes Ready; then `cancel: false` lets the
planner drain the backlog the capped group cannot clear within the SLA. Proven: the drain Job was
launched warm (its label, its URL env, status.drain.runtime, the DrainStarted event), the runtime
really ran the plan (its `drain_runtime_served` log event for that drain id with exit 0 and the
records, the Job process's `drain_runtime_used`), and the ledger (no key: every delivery a row)
holds every offset once, the drain exactly its recorded ranges (test_drain_operator.finish_and_check).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot.act.drain_runtime import APP_NAME, runtime_name, runtime_port
from tests.fixtures.kube import wait_until
from tests.real.test_drain_operator import PARTS, Scenario, crd, finish_and_check, scenario, wait_phase  # noqa: F401
from tests.real.test_operator_e2e import events_for

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _log_events(path: Any, event: str) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if f'"{event}"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == event:
            out.append(rec)
    return out


def _ready_runtime_pod(s: Scenario) -> Any:
    for p in s.core.list_namespaced_pod(s.ns, label_selector=f"app.kubernetes.io/name={APP_NAME}").items:
        conds = {c.type: c.status for c in p.status.conditions or []}
        if conds.get("Ready") == "True" and p.status.pod_ip and p.metadata.deletion_timestamp is None:
            return p
    return None


def test_warm_runtime_serves_the_drain_exactly_once(scenario: Callable[..., Scenario], pod_runner: Any,
                                                   kafka_admin: Any, postgres_dsn: str) -> None:
    from kubernetes import client

    t0 = time.monotonic()
    # the group (3 consumers, ~50 records/s each) needs > 20 s (the SLA) for what is left after the
    # runtime's warm-up: a drain is planned once cancel is lifted
    s = scenario({p: 4000 for p in range(PARTS)}, live_per_s=0, sla_s=20, cost_ms=2000,
                 drain={"warmRuntime": True, "cancel": True})
    apps = client.AppsV1Api(s.custom.api_client)
    dep = wait_until(lambda: _get_deployment(apps, s), "the runtime Deployment", 60, interval=1)
    owner = dep.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("BatchConsumerGroup", s.name, True)
    container = dep.spec.template.spec.containers[0]
    assert container.command == ["lagpilot", "drain", "--serve"]
    port = runtime_port(s.ns, s.name)
    assert [(p.name, p.container_port) for p in container.ports] == [("drain-api", port)]
    pod = wait_until(lambda: _ready_runtime_pod(s), "the runtime pod Ready (warm)", 150, interval=1)
    t_ready = time.monotonic()
    rt_log = pod_runner.log_path(s.ns, pod.metadata.name)
    assert rt_log is not None and _log_events(rt_log, "drain_runtime_ready"), "Ready before the runtime said warm"

    s.custom.patch_namespaced_custom_object("lagpilot.io", "v1alpha1", s.ns, "batchconsumergroups", s.name,
                                            {"spec": {"drain": {"cancel": False}}})
    d = wait_phase(s, ("Running", "Succeeded", "Verified", "Failed"), 120)
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d.get("runtime") == "warm", d
    assert d["attempt"] == 1, d

    # the Job: launched warm, pointed at the runtime pod
    jobs = client.BatchV1Api(s.custom.api_client).list_namespaced_job(s.ns, label_selector="lagpilot.io/drain-job").items
    assert len(jobs) == 1, [j.metadata.name for j in jobs]
    job = jobs[0]
    assert job.metadata.labels["lagpilot.io/drain-runtime"] == "warm"
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    assert env["LAGPILOT_DRAIN_RUNTIME_URL"] == f"http://{pod.status.pod_ip}:{port}"
    started = [e.message for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainStarted"]
    assert started and started[-1].endswith("runtime warm"), started

    # the runtime really ran it: its served event for this drain id, and the Job process used it
    served = [e for e in _log_events(rt_log, "drain_runtime_served") if str(e.get("drain")) == str(d["id"])]
    assert len(served) == 1 and served[0]["exit"] == 0 and not served[0]["cancelled"], served
    assert served[0].get("records") == d["recordsTotal"], (served, d["recordsTotal"])
    job_pods = s.core.list_namespaced_pod(s.ns, label_selector=f"job-name={job.metadata.name}").items
    job_log = pod_runner.log_path(s.ns, job_pods[0].metadata.name)
    used = _log_events(job_log, "drain_runtime_used")
    assert used and used[0]["exit"] == 0 and not _log_events(job_log, "drain_runtime_unreachable"), job_log.read_text()[-2000:]
    print(f"warm runtime: Ready {t_ready - t0:.1f} s after the CR, served drain {d['id']} ({served[0]['records']} "
          f"records in {served[0]['seconds']} s), test {time.monotonic() - t0:.1f} s")


def _get_deployment(apps: Any, s: Scenario) -> Any:
    try:
        return apps.read_namespaced_deployment(runtime_name(s.name), s.ns)
    except Exception as exc:  # noqa: BLE001
        if getattr(exc, "status", None) == 404:
            return None
        raise
