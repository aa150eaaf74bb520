"""The test-side pod runner against the real apiserver + controller-manager: pods become local
processes with the spec's env, report kubelet-like status, honour restart policies, and die as
Kubernetes says (SIGTERM, SIGKILL after the grace period)."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.paths import pid_alive
from tests.fixtures.kube import wait_until

pytestmark = pytest.mark.real

# A container that records its pid and env, answers HTTP on $PORT (200 once <dir>/ready exists),
# and on SIGTERM writes <dir>/<pod>.term and exits 0 (or ignores it with --ignore-term).
WORKER = textwrap.dedent("""
    import http.server, json, os, signal, sys, threading, time
    out = sys.argv[1]
    me = os.environ["HOSTNAME"]
    ignore_term = "--ignore-term" in sys.argv
    def on_term(signum, frame):
        with open(os.path.join(out, me + ".term"), "w") as f:
            f.write(str(os.getpid()))
        print("got SIGTERM", "(ignoring)" if ignore_term else "", flush=True)
        if not ignore_term:
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = os.path.exists(os.path.join(out, "ready"))
            self.send_response(200 if ok else 503)
            self.end_headers()
        def log_message(self, *a):
            pass
    srv = http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with open(os.path.join(out, me + ".json.tmp"), "w") as f:
        json.dump({"pid": os.getpid(), "env": dict(os.environ), "argv": sys.argv}, f)
    os.replace(os.path.join(out, me + ".json.tmp"), os.path.join(out, me + ".json"))  # atomic for the test
    print("worker up", me, flush=True)
    while True:
        time.sleep(0.2)
""")


@pytest.fixture
def worker_script(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    return script, out


def _pod(
    name: str,
    command: list[str],
    *,
    restart: str = "Always",
    grace: int | None = None,
    env: list[dict[str, Any]] | None = None,
    env_from: list[dict[str, Any]] | None = None,
    readiness: dict[str, Any] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "lagpilot/test:0", "command": command}
    if env:
        container["env"] = env
    if env_from:
        container["envFrom"] = env_from
    if readiness:
        container["readinessProbe"] = readiness
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": restart}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _core(kube_api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube_api)


def _container_status(core: Any, ns: str, name: str) -> Any:
    pod = core.read_namespaced_pod(name, ns)
    return (pod.status.container_statuses or [None])[0]


def _gone(core: Any, ns: str, name: str) -> bool:
    from kubernetes import client

    try:
        core.read_namespaced_pod(name, ns)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_pod_runs_with_env_from_secrets_configmaps_and_field_refs(
    kube_api: Any, namespace: Any, pod_runner: Any, worker_script: tuple[Path, Path]
) -> None:
    script, out = worker_script
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_secret(ns, {"metadata": {"name": "creds"}, "stringData": {"password": "s3cr3t"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"TOPIC": "orders"}})
    env = [
        {
            "name": "LAGPILOT_SASL_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
        },
        {"name": "GROUP", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "TOPIC"}}},
        {"name": "LAGPILOT_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "DERIVED", "value": "$(GROUP)-batch"},
        {"name": "LAGPILOT_METRICS_PORT", "value": "8080"},
        {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
    ]
    core.create_namespaced_pod(
        ns,
        _pod(
            "envpod",
            ["python", str(script), str(out), "--port=$(PORT)"],
            env=env,
            env_from=[{"configMapRef": {"name": "cfg"}, "prefix": "CM_"}],
        ),
    )
    dump = out / "envpod.json"
    wait_until(dump.exists, "the pod's process to start", timeout=120)
    got = json.loads(dump.read_text())
    e = got["env"]
    assert e["LAGPILOT_SASL_PASSWORD"] == "s3cr3t"
    assert e["GROUP"] == "orders" and e["DERIVED"] == "orders-batch" and e["CM_TOPIC"] == "orders"
    assert "OPTIONAL" not in e
    assert e["LAGPILOT_POD_NAME"] == "envpod" and e["MY_NS"] == ns
    # each local pod gets its own port, overriding the fixed in-cluster 8080
    assert e["LAGPILOT_METRICS_PORT"] == e["PORT"] != "8080"
    assert got["argv"][-1] == f"--port={e['PORT']}"
    assert got["pid"] == pod_runner.pid_of(ns, "envpod")

    def running_and_ready() -> bool:
        pod = core.read_namespaced_pod("envpod", ns)
        conds = {c.type: c.status for c in pod.status.conditions or []}
        cs = pod.status.container_statuses[0]
        return (
            pod.status.phase == "Running"
            and pod.status.pod_ip == "127.0.0.1"
            and cs.ready
            and cs.state.running is not None
            and conds.get("Ready") == "True"
            and pod.status.start_time is not None
        )

    wait_until(running_and_ready, "status Running/Ready", timeout=60)
    log_path = pod_runner.log_path(ns, "envpod")
    wait_until(lambda: "worker up envpod" in log_path.read_text(), "the pod log", timeout=30)
    assert "s3cr3t" not in log_path.read_text()


def test_missing_secret_is_a_config_error_until_it_exists(
    kube_api: Any, namespace: Any, pod_runner: Any, worker_script: tuple[Path, Path]
) -> None:
    script, out = worker_script
    core = _core(kube_api)
    ns = namespace()
    env = [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "later", "key": "pw"}}}]
    core.create_namespaced_pod(ns, _pod("waits", ["python", str(script), str(out)], env=env))

    def config_error() -> bool:
        cs = _container_status(core, ns, "waits")
        return (
            cs is not None
            and cs.state.waiting is not None
            and cs.state.waiting.reason == "CreateContainerConfigError"
        )

    wait_until(config_error, "CreateContainerConfigError", timeout=60)
    assert core.read_namespaced_pod("waits", ns).status.phase == "Pending"
    core.create_namespaced_secret(ns, {"metadata": {"name": "later"}, "stringData": {"pw": "ok"}})
    wait_until((out / "waits.json").exists, "the container to start once the Secret exists", timeout=60)
    assert json.loads((out / "waits.json").read_text())["env"]["PW"] == "ok"


def test_readiness_probe_goes_to_the_pods_own_port(
    kube_api: Any, namespace: Any, pod_runner: Any, worker_script: tuple[Path, Path]
) -> None:
    script, out = worker_script
    core = _core(kube_api)
    ns = namespace()
    # as the operator renders consumer pods: LAGPILOT_METRICS_PORT=8080 and the probe on 8080
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 1}
    core.create_namespaced_pod(
        ns,
        _pod(
            "probed",
            ["python", str(script), str(out)],
            readiness=probe,
            env=[{"name": "LAGPILOT_METRICS_PORT", "value": "8080"}],
        ),
    )
    wait_until((out / "probed.json").exists, "the process to start", timeout=60)
    wait_until(
        lambda: core.read_namespaced_pod("probed", ns).status.phase == "Running", "phase Running", timeout=30
    )
    # the endpoint answers 503 until <out>/ready exists: the pod must not be Ready yet
    cs = _container_status(core, ns, "probed")
    assert cs.state.running is not None and cs.ready is False
    (out / "ready").write_text("")
    wait_until(lambda: _container_status(core, ns, "probed").ready, "the pod to become Ready", timeout=60)
    (out / "ready").unlink()
    wait_until(
        lambda: not _container_status(core, ns, "probed").ready, "the pod to become unready", timeout=60
    )


def test_deleting_a_pod_sigterms_its_process(
    kube_api: Any, namespace: Any, pod_runner: Any, worker_script: tuple[Path, Path]
) -> None:
    script, out = worker_script
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_pod(ns, _pod("victim", ["python", str(script), str(out)], grace=60))
    wait_until((out / "victim.json").exists, "the process to start", timeout=60)
    pid = json.loads((out / "victim.json").read_text())["pid"]
    core.delete_namespaced_pod("victim", ns)
    wait_until(lambda: _gone(core, ns, "victim"), "the pod object to be removed", timeout=90)
    assert (out / "victim.term").read_text() == str(pid)  # it got SIGTERM, not just SIGKILL
    assert not pid_alive(pid)


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(
    kube_api: Any, namespace: Any, pod_runner: Any, worker_script: tuple[Path, Path]
) -> None:
    script, out = worker_script
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_pod(
        ns, _pod("stubborn", ["python", str(script), str(out), "--ignore-term"], grace=2)
    )
    wait_until((out / "stubborn.json").exists, "the process to start", timeout=60)
    pid = json.loads((out / "stubborn.json").read_text())["pid"]
    core.delete_namespaced_pod("stubborn", ns)
    wait_until(lambda: _gone(core, ns, "stubborn"), "the pod to be removed after SIGKILL", timeout=90)
    assert (out / "stubborn.term").exists()
    assert not pid_alive(pid)


def test_crashing_container_is_restarted_with_restart_count(
    kube_api: Any, namespace: Any, pod_runner: Any
) -> None:
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_pod(
        ns, _pod("crasher", ["python", "-c", "import sys; print('boom'); sys.exit(3)"])
    )

    def restarted() -> bool:
        cs = _container_status(core, ns, "crasher")
        return cs is not None and cs.restart_count >= 2 and cs.last_state.terminated is not None

    wait_until(restarted, "restartCount >= 2", timeout=120)
    cs = _container_status(core, ns, "crasher")
    assert cs.last_state.terminated.exit_code == 3 and cs.last_state.terminated.reason == "Error"
    assert core.read_namespaced_pod("crasher", ns).status.phase == "Running"

    def in_backoff() -> bool:
        waiting = _container_status(core, ns, "crasher").state.waiting
        return waiting is not None and waiting.reason == "CrashLoopBackOff"

    wait_until(in_backoff, "CrashLoopBackOff", timeout=60, interval=0.2)


def test_killed_process_is_a_crashed_container(
    kube_api: Any, namespace: Any, pod_runner: Any, worker_script: tuple[Path, Path]
) -> None:
    script, out = worker_script
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_pod(ns, _pod("killed", ["python", str(script), str(out)]))
    wait_until((out / "killed.json").exists, "the process to start", timeout=60)
    first_pid = json.loads((out / "killed.json").read_text())["pid"]
    (out / "killed.json").unlink()
    os.kill(first_pid, signal.SIGKILL)

    def restarted() -> bool:
        cs = _container_status(core, ns, "killed")
        return cs.restart_count == 1 and cs.last_state.terminated is not None and cs.state.running is not None

    wait_until(restarted, "the killed container to be restarted", timeout=120)
    cs = _container_status(core, ns, "killed")
    assert cs.last_state.terminated.exit_code == 137 and cs.last_state.terminated.signal == 9
    wait_until((out / "killed.json").exists, "the new process", timeout=60)
    assert json.loads((out / "killed.json").read_text())["pid"] != first_pid


@pytest.mark.parametrize(
    ("policy", "code", "phase"),
    [
        ("Never", 3, "Failed"),
        ("Never", 0, "Succeeded"),
        ("OnFailure", 0, "Succeeded"),
    ],
    ids=["never-fails", "never-succeeds", "onfailure-succeeds"],
)
def test_restart_policy_decides_the_terminal_phase(
    kube_api: Any, namespace: Any, pod_runner: Any, policy: str, code: int, phase: str
) -> None:
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_pod(
        ns, _pod("once", ["python", "-c", f"import sys; sys.exit({code})"], restart=policy)
    )
    wait_until(
        lambda: core.read_namespaced_pod("once", ns).status.phase == phase, f"phase {phase}", timeout=120
    )
    cs = _container_status(core, ns, "once")
    assert cs.state.terminated.exit_code == code and cs.restart_count == 0 and cs.ready is False


def test_unknown_command_is_a_start_error(kube_api: Any, namespace: Any, pod_runner: Any) -> None:
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_pod(ns, _pod("nocmd", ["no-such-program-lagpilot"], restart="Never"))
    wait_until(
        lambda: core.read_namespaced_pod("nocmd", ns).status.phase == "Failed", "phase Failed", timeout=60
    )
    term = _container_status(core, ns, "nocmd").state.terminated
    assert term.reason == "StartError" and term.exit_code == 128 and "not found" in term.message


def test_pod_acts_as_its_service_account_not_as_admin(
    kube: Any, kube_api: Any, namespace: Any, pod_runner: Any
) -> None:
    core = _core(kube_api)
    ns = namespace()
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    kubectl = str(kube.kubectl_path)
    whoami = _pod(
        "whoami", [kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], restart="Never"
    )
    whoami["spec"]["serviceAccountName"] = "reader"
    core.create_namespaced_pod(ns, whoami)
    secrets = _pod("secrets", [kubectl, "get", "secrets"], restart="Never")
    secrets["spec"]["serviceAccountName"] = "reader"
    core.create_namespaced_pod(ns, secrets)
    wait_until(
        lambda: core.read_namespaced_pod("whoami", ns).status.phase == "Succeeded", "whoami to succeed", 120
    )
    assert f"system:serviceaccount:{ns}:reader" in pod_runner.log_path(ns, "whoami").read_text()
    wait_until(
        lambda: core.read_namespaced_pod("secrets", ns).status.phase == "Failed", "RBAC to refuse", 120
    )
    assert "forbidden" in pod_runner.log_path(ns, "secrets").read_text().lower()
