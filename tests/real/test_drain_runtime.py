"""The warm drain runtime through the operator (spec.drain.warmRuntime), on the real stack of
tests/real/test_drain_operator.py (operator subprocess as the docs/rbac.md ServiceAccount,
kube-apiserver + controller-manager + the pods where `pods` runs them: the real node, the runtime's and the Job's logs read through `pod_io`; Kafka, Spark
local mode, PostgreSQL ledger).

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
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from lagpilot.act.deployment import deployment_name
from lagpilot.act.drain_runtime import APP_NAME, runtime_name, runtime_port
from tests.fixtures.kube import wait_until
from tests.fixtures.node import PodIO
from tests.real.test_drain_operator import (  # noqa: F401
    NODE_POD_RESOURCES,
    PARTS,
    Scenario,
    crd,
    finish_and_check,
    scenario,
    wait_phase,
)
from tests.real.test_operator_e2e import events_for

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _log_events(path: Any, event: str, key: str = "event") -> list[dict[str, Any]]:
    """The JSON log records whose ``key`` (``event``, or ``message``) is exactly ``event``; `path` is a
    log file, or a log's text (`pod_io.logs`)."""
    out = []
    text = path if isinstance(path, str) else path.read_text(errors="replace")
    for line in text.splitlines():
        if event not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get(key) == event:
            out.append(rec)
    return out


def _ready_runtime_pod(s: Scenario) -> Any:
    for p in s.core.list_namespaced_pod(s.ns, label_selector=f"app.kubernetes.io/name={APP_NAME}").items:
        conds = {c.type: c.status for c in p.status.conditions or []}
        if conds.get("Ready") == "True" and p.status.pod_ip and p.metadata.deletion_timestamp is None:
            return p
    return None


def test_warm_runtime_serves_the_drain_exactly_once(
    scenario: Callable[..., Scenario], pod_io: PodIO, kafka_admin: Any, postgres_dsn: str
) -> None:
    from kubernetes import client

    t0 = time.monotonic()
    # the group (3 consumers, ~50 records/s each) needs > 20 s (the SLA) for what is left after the
    # runtime's warm-up: a drain is planned once cancel is lifted
    s = scenario(
        {p: 4000 for p in range(PARTS)},
        live_per_s=0,
        sla_s=20,
        cost_ms=2000,
        drain={"warmRuntime": True, "cancel": True},
        operator_env=_worktree_pythonpath(),
    )
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
    rt_log = pod_io.logs(s.ns, pod.metadata.name)
    assert _log_events(rt_log, "drain_runtime_ready"), "Ready before the runtime said warm"

    s.patch_spec({"drain": {"cancel": False}})
    d = wait_phase(s, ("Running", "Succeeded", "Verified", "Failed"), 120)
    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d.get("runtime") == "warm", d
    assert d["attempt"] == 1, d

    # the Job: launched warm, pointed at the runtime pod
    jobs = (
        client.BatchV1Api(s.custom.api_client)
        .list_namespaced_job(s.ns, label_selector="lagpilot.io/drain-job")
        .items
    )
    assert len(jobs) == 1, [j.metadata.name for j in jobs]
    job = jobs[0]
    assert job.metadata.labels["lagpilot.io/drain-runtime"] == "warm"
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    assert env["LAGPILOT_DRAIN_RUNTIME_URL"] == f"http://{pod.status.pod_ip}:{port}"
    started = [e.message for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainStarted"]
    assert started and started[-1].endswith("runtime warm"), started

    # the runtime really ran it: its served event for this drain id, and the Job process used it
    rt_log = pod_io.logs(s.ns, pod.metadata.name)
    served = [e for e in _log_events(rt_log, "drain_runtime_served") if str(e.get("drain")) == str(d["id"])]
    assert len(served) == 1 and served[0]["exit"] == 0 and not served[0]["cancelled"], served
    assert served[0].get("records") == d["recordsTotal"], (served, d["recordsTotal"])
    job_pods = s.core.list_namespaced_pod(s.ns, label_selector=f"job-name={job.metadata.name}").items
    job_log = pod_io.logs(s.ns, job_pods[0].metadata.name)
    used = _log_events(job_log, "drain_runtime_used")
    assert used and used[0]["exit"] == 0 and not _log_events(job_log, "drain_runtime_unreachable"), job_log[
        -2000:
    ]
    print(
        f"warm runtime: Ready {t_ready - t0:.1f} s after the CR, served drain {d['id']} ({served[0]['records']} "
        f"records in {served[0]['seconds']} s), test {time.monotonic() - t0:.1f} s"
    )


def _get_deployment(apps: Any, s: Scenario) -> Any:
    try:
        return apps.read_namespaced_deployment(runtime_name(s.name), s.ns)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise


def _worktree_pythonpath() -> dict[str, str]:
    """The operator subprocess imports this checkout's packages (operator_env puts only the repo root
    on PYTHONPATH; the venv's editable install may point at another checkout)."""
    from tests.real.test_drain_operator import REPO

    return {
        "PYTHONPATH": os.pathsep.join(
            str(REPO / d) for d in ("operator/src", "consumer_image/src", "dev/src", ".")
        )
    }


def test_on_demand_runtime_scales_up_for_the_burst_split_waits_then_scales_to_zero(
    scenario: Callable[..., Scenario], pod_io: PodIO, kafka_admin: Any, postgres_dsn: str
) -> None:
    """spec.drain.warmRuntimeCooldownSeconds: 5. The CR starts with `cancel: true` (no drain may be
    due): the runtime Deployment is created with 0 replicas and stays there although the capped
    group cannot clear the backlog within the SLA; `cancel: false` makes the drain due, which scales
    it to 1 (stamped); the drain waits for it (the Scaling condition says so, and
    status.drain.plannedAt is after the runtime pod's Ready transition), the Job is launched warm,
    the ledger holds every offset once, and once the drain ended and the 5 s passed the Deployment
    is back at 0 (kept). The backlog is produced before the CR (no arrival-rate spike in the
    estimator: the drain is due for the backlog alone)."""
    from kubernetes import client

    from lagpilot.act.drain_runtime import SCALED_UP_ANNOTATION
    from lagpilot.decide.status import parse_time

    t0, t_cr = time.monotonic(), time.time()
    # 3 consumers at ~50 records/s each need far more than the 20 s SLA for 12,000 records, even
    # after the runtime's warm-up
    s = scenario(
        {p: 4000 for p in range(PARTS)},
        live_per_s=0,
        sla_s=20,
        cost_ms=2000,
        drain={"warmRuntime": True, "warmRuntimeCooldownSeconds": 5, "cancel": True},
        operator_env=_worktree_pythonpath(),
    )
    apps = client.AppsV1Api(s.custom.api_client)

    def scaling_message() -> str:
        return next(
            (c.get("message", "") for c in s.status().get("conditions") or [] if c.get("type") == "Scaling"),
            "",
        )

    # the operator knows the group cannot catch up in time, but no drain may be due: the runtime stays at 0
    late = wait_until(
        lambda: "cannot catch up" in scaling_message() and scaling_message(),
        "the operator seeing the SLA missed",
        60,
        interval=0.5,
    )
    dep = _get_deployment(apps, s)
    assert dep is not None and dep.spec.replicas == 0, (late, dep and dep.spec.replicas)
    assert SCALED_UP_ANNOTATION not in (dep.metadata.annotations or {}), dep.metadata.annotations
    assert not s.core.list_namespaced_pod(s.ns, label_selector=f"app.kubernetes.io/name={APP_NAME}").items
    t_due = time.time()
    s.patch_spec({"drain": {"cancel": False}})
    waited: list[str] = []

    def note_wait() -> None:  # the Scaling condition while the due drain waits (written after the scale-up)
        msg = scaling_message()
        if "waits for the warm drain runtime" in msg:
            waited.append(msg)

    def scaled_up() -> Any:
        note_wait()
        d = _get_deployment(apps, s)
        return d if d is not None and d.spec.replicas == 1 else None

    def ready_pod() -> Any:
        note_wait()
        return _ready_runtime_pod(s)

    dep = wait_until(scaled_up, "the runtime scaled 0 -> 1 for the due drain", 90, interval=0.5)
    stamp = parse_time((dep.metadata.annotations or {}).get(SCALED_UP_ANNOTATION))
    assert stamp is not None and stamp >= t_due - 1, (stamp, t_due)
    assert not s.drain().get("plannedAt"), "a drain was planned before the runtime was even asked for"
    pod = wait_until(ready_pod, "the runtime pod Ready (warm)", 150, interval=0.5)
    ready_at = next(c.last_transition_time for c in pod.status.conditions if c.type == "Ready").timestamp()

    d = finish_and_check(s, kafka_admin, postgres_dsn)
    assert d.get("runtime") == "warm", d
    assert d["attempt"] == 1, d
    planned, finished = parse_time(d["plannedAt"]), parse_time(d["finishedAt"])
    assert planned is not None and finished is not None
    # the split waited for the runtime: planned after the pod turned Ready (second precision, rounded down)
    assert planned >= ready_at, (planned, ready_at)
    assert waited, "the Scaling condition never said the drain waits for the runtime"
    jobs = (
        client.BatchV1Api(s.custom.api_client)
        .list_namespaced_job(s.ns, label_selector="lagpilot.io/drain-job")
        .items
    )
    assert [j.metadata.labels["lagpilot.io/drain-runtime"] for j in jobs] == ["warm"], jobs
    rt_log = pod_io.logs(s.ns, pod.metadata.name)
    served = [e for e in _log_events(rt_log, "drain_runtime_served") if str(e.get("drain")) == str(d["id"])]
    assert len(served) == 1 and served[0]["exit"] == 0, served

    # the cooldown (5 s) after the drain ended: back to 0 replicas, the Deployment and its stamp kept
    dep = wait_until(
        lambda: (lambda x: x if x.spec.replicas == 0 else None)(_get_deployment(apps, s)),
        "the runtime scaled back to 0 after the cooldown",
        90,
        interval=0.5,
    )
    t_down = time.time()
    assert (dep.metadata.annotations or {}).get(SCALED_UP_ANNOTATION), "the last scale-up stamp is kept"

    # the operator's own record: created at 0, one scale-up, one scale-down after the cooldown
    def applied_records() -> list[tuple[Any, Any, float | None]]:
        return [
            (r.get("verb"), r.get("replicas"), parse_time(r.get("timestamp")))
            for r in _log_events(s.op.log_path, "drain runtime applied", key="message")
        ]

    # the operator logs the scale-down after its patch returns: the Deployment can be seen at 0 first
    applied = wait_until(
        lambda: (lambda rs: rs if len(rs) >= 3 else None)(applied_records()),
        "the operator's log line for the scale-down (written after the patch the test saw)",
        30,
        interval=0.5,
    )
    assert [a[:2] for a in applied] == [("created", 0), ("scaled 0->1", 1), ("scaled 1->0", 0)], applied
    up, down = applied[1][2], applied[2][2]
    assert up is not None and down is not None and down >= finished + 5, (down, finished)
    print(
        f"on-demand runtime: CR at 0 s, cancel false at {t_due - t_cr:.1f} s, scaled up {up - t_cr:.1f} s "
        f"(stamp {stamp - t_cr:.1f} s), Ready "
        f"{ready_at - t_cr:.1f} s (second precision), drain planned {planned - t_cr:.1f} s, runtime "
        f"{d['runtime']}, finished {finished - t_cr:.1f} s, scaled to 0 {down - t_cr:.1f} s (seen "
        f"{t_down - t_cr:.1f} s); waited: {waited[0][-90:]!r}; test {time.monotonic() - t0:.1f} s"
    )


# the warm runtime's pod takes spec.drain.resources (drain_manifests.drain_pod_spec), the consumers
# keep spec.template.resources. 160 Mi: a consumer (~100 MB, Python) lives within it, the runtime
# (a JVM with its SparkSession beside the Python of `lagpilot drain --serve`) does not. 384 Mi did not kill it within 300 s (2026-11-27, first run)
OOM_LIMIT = "160Mi"
OOM_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": OOM_LIMIT}}


def _runtime_pods(s: Scenario) -> list[Any]:
    return s.core.list_namespaced_pod(s.ns, label_selector=f"app.kubernetes.io/name={APP_NAME}").items


def _oom_killed_runtime(s: Scenario) -> Any:
    """A runtime pod whose container the memory cgroup killed (lastState OOMKilled), or None."""
    for p in _runtime_pods(s):
        for cs in p.status.container_statuses or []:
            last = cs.last_state.terminated if cs.last_state is not None else None
            if last is not None and last.reason == "OOMKilled":
                return p
    return None


def _conditions(s: Scenario) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
        for c in s.status().get("conditions") or []
    }


def _pod_events(s: Scenario, pod: str) -> list[tuple[str, str, str]]:
    return [
        (e.type, e.reason, (e.message or "")[:160])
        for e in s.core.list_namespaced_event(s.ns).items
        if e.involved_object.name == pod
    ]


@pytest.mark.timeout(1800)
def test_runtime_oom_killed_by_its_limit_shows_and_loses_nothing(
    scenario: Callable[..., Scenario], pod_io: PodIO, kafka_admin: Any, postgres_dsn: str
) -> None:
    """The warm runtime at a memory limit it cannot live within (OOM_LIMIT, the CR's
    spec.drain.resources; the consumers have their own template.resources): the memory cgroup kills
    its container (OOMKilled) at each start,
    while a drain is due. What the user sees is asserted and printed: the runtime pod's container
    status and events, and a condition of the CR naming the kill (the pod, OOMKilled, the limit).
    The drain goes cold (the runtime is not Ready); its Job has the same limit: if the attempt fails,
    the user's fix (raising spec.drain.resources) lets the operator's retry finish it without rolling
    the consumers; every offset is in the ledger as finish_and_check checks. Then the runtime, rolled
    with the raised limit, turns Ready and the CR's conditions no longer name the kill."""
    t0 = time.monotonic()
    # 3 consumers at ~50 records/s each need ~160 s for 24,000 records: the backlog outlasts the
    # runtime's kills, and a drain is due (SLA 20 s) once cancel is lifted
    s = scenario(
        {p: 8000 for p in range(PARTS)},
        live_per_s=0,
        sla_s=20,
        cost_ms=2000,
        drain={"warmRuntime": True, "cancel": True, "resources": OOM_RESOURCES},
        operator_env=_worktree_pythonpath(),
    )
    consumers = deployment_name(s.name)
    apps = client.AppsV1Api(s.core.api_client)
    try:
        # the kill of the JVM (a child of the container's Python) ends the container at once, or at
        # the liveness probe's verdict (180 s + 6 x 10 s); the kubelet reports OOMKilled either way
        pod = wait_until(
            lambda: _oom_killed_runtime(s), "the warm runtime OOM-killed by its limit", 420, interval=1
        )
    except AssertionError:
        for p in _runtime_pods(s):
            print(f"runtime pod {p.metadata.name}: {p.status.container_statuses}")
            print(f"its events: {_pod_events(s, p.metadata.name)}")
            print(f"its log: {pod_io.logs(s.ns, p.metadata.name)[-3000:]}")
        raise
    cs = pod.status.container_statuses[0]
    last = cs.last_state.terminated
    # the fault fired: the memory cgroup's kill as the kubelet reports it, at the CR's limit
    assert last.reason == "OOMKilled" and last.exit_code != 0, last
    assert pod.spec.containers[0].resources.limits["memory"] == OOM_LIMIT
    t_killed = time.monotonic()
    name = pod.metadata.name

    # what the user sees on the CR: a condition naming the runtime's kill (its pod, OOMKilled, the limit)
    def naming_the_kill() -> tuple[str, dict[str, tuple[str, str, str]]] | None:
        conds = _conditions(s)
        for ctype, (_st, _reason, message) in conds.items():
            if name in message and "OOMKilled" in message:
                return ctype, conds
        return None

    try:
        ctype, conds = wait_until(
            naming_the_kill, "a condition of the CR naming the runtime's OOM kill", 90, interval=1
        )
    finally:
        print("runtime OOM: the CR's conditions: " + json.dumps(_conditions(s)))
        print(f"runtime OOM: {name}'s events: " + json.dumps(_pod_events(s, name)))
    assert f"memory limit {OOM_LIMIT}" in conds[ctype][2], conds[ctype]
    pod = s.core.read_namespaced_pod(name, s.ns)
    cs = pod.status.container_statuses[0]
    print(
        f"runtime OOM: {name} restarts {cs.restart_count}, lastState {cs.last_state.terminated.reason} exit "
        f"{cs.last_state.terminated.exit_code}, state now {cs.state.waiting.reason if cs.state.waiting else 'running'}; "
        f"killed {t_killed - t0:.0f} s after the CR; the CR's {ctype}: {json.dumps(conds[ctype])}"
    )

    # a drain due while the runtime crash-loops: launched cold; the user raises the limit once an
    # attempt failed (its Job had the same limit)
    raised: list[dict[str, Any]] = []
    consumers_before = apps.read_namespaced_deployment(consumers, s.ns).spec.template

    def raise_limit() -> None:
        s.patch_spec({"drain": {"resources": NODE_POD_RESOURCES}})

    def on_poll(d: dict[str, Any]) -> None:
        if not raised and (d.get("retryAt") or d.get("phase") == "Failed"):
            raised.append(dict(d))
            raise_limit()

    s.patch_spec({"drain": {"cancel": False}})
    wait_phase(s, ("Verified",), 600, on_poll=on_poll)
    job_pods = s.core.list_namespaced_pod(s.ns, label_selector="lagpilot.io/drain-job").items
    jobs_seen = [
        (
            p.metadata.labels.get("lagpilot.io/drain-runtime"),
            p.spec.containers[0].resources.limits.get("memory"),
            [
                (c.state.terminated.reason, c.state.terminated.exit_code)
                for c in p.status.container_statuses or []
                if c.state is not None and c.state.terminated is not None
            ],
        )
        for p in job_pods
    ]
    d = finish_and_check(s, kafka_admin, postgres_dsn, allow_replayed_batches=12)
    started = [e.message for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainStarted"]
    # every attempt cold: the runtime was never Ready (and is not rolled while an attempt runs)
    assert started and all(m.endswith("runtime cold") for m in started), started
    failed = [e.message for e in events_for(s.core, s.ns, s.name) if e.reason == "DrainAttemptFailed"]
    if any(("OOMKilled", 137) in killed for _, _, killed in jobs_seen):
        # an attempt's Job killed by the same limit: its failure names the kill, not a log line
        assert any("OOMKilled" in m and OOM_LIMIT in m for m in failed), failed
    print(
        f"runtime OOM: drain {d['id']} Verified in {d['attempt']} attempt(s), runtime {d.get('runtime')}; "
        f"the Job pods (path, limit, termination): {jobs_seen}; DrainAttemptFailed {failed}; "
        f"limit raised {'after ' + json.dumps(raised[0].get('message')) if raised else 'not needed'}"
    )

    # the runtime itself: rolled with the raised limit once the drain ended, Ready; the CR's
    # conditions no longer name the kill
    if not raised:
        raise_limit()

    def healed() -> dict[str, tuple[str, str, str]] | None:
        if _ready_runtime_pod(s) is None:
            return None
        conds = _conditions(s)
        return None if any("OOMKilled" in m for _, _, m in conds.values()) else conds

    conds = wait_until(healed, "the runtime Ready at the raised limit, the conditions clear", 300, interval=1)
    # the drain's limit is the drain's own: the consumers' pod template never changed (not rolled)
    consumers_after = apps.read_namespaced_deployment(consumers, s.ns).spec.template
    assert consumers_after == consumers_before, (consumers_before, consumers_after)
    assert (
        consumers_after.spec.containers[0].resources.limits["memory"]
        == NODE_POD_RESOURCES["limits"]["memory"]
    )
    print(
        f"runtime OOM: after the limit was raised: runtime {_ready_runtime_pod(s).metadata.name} Ready, "
        f"Ready {json.dumps(conds.get('Ready'))}; test {time.monotonic() - t0:.0f} s"
    )
