"""The chart on the real API server: server-side dry-run, a real apply, and the ServiceAccounts'
effective permissions (`kubectl auth can-i --as=system:serviceaccount:...`): allowed exactly what
docs/helm.md / docs/rbac.md list, denied the rest.

Then the operator itself with the chart's permissions, twice: as a local process with the chart's
command line, environment and a token of its ServiceAccount (`lagpilot_dev.helm.operator_kubeconfig`),
and through a real `helm install` whose Deployment's pod runs where the `pods` fixture says
(tests/fixtures/node.py): on the real node (the default) a container of this checkout's operator
image (`node_images`, never pulled) in a namespace under Pod Security `restricted`, reaching the
apiserver through the `kubernetes` Service with its ServiceAccount's token and the chart's RBAC. Both serve only their own test namespace
(`watchNamespaces`); the plain applies above use replicas 0, since an operator watching every
namespace of the shared test cluster would act on other tests' objects.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from lagpilot_dev import helm as h
from lagpilot_dev.operator_process import checkout_pythonpath
from lagpilot_dev.paths import http_ok
from tests.fixtures.kube import KubeEnv, wait_until
from tests.fixtures.node import PodIO, Pods

pytestmark = pytest.mark.real

CRD = "batchconsumergroups.lagpilot.io"
# an API call the operator's RBAC refused (a uid or a timestamp never holds a standalone 403)
DENIED_LINE = re.compile(r"(?i)forbidden|\b403\b")


@pytest.fixture(scope="module")
def helm_bin() -> Any:
    return h.ensure_helm()


@pytest.fixture
def release(kube: KubeEnv) -> Iterator[str]:
    """A unique release name (cluster-scoped RBAC names derive from it); its cluster objects are
    deleted afterwards (namespaced ones go with the test namespaces)."""
    name = f"lpt-{uuid.uuid4().hex[:6]}"
    yield name
    for kind in ("clusterrolebinding", "clusterrole"):
        for suffix in ("", "-scanning", "-crd"):
            kube.kubectl("delete", kind, f"{name}-lagpilot{suffix}", "--ignore-not-found", check=False)


def _render(helm_bin: Any, release: str, namespace: str, values: dict[str, Any]) -> h.Rendered:
    return h.template(values, release=release, namespace=namespace, helm=helm_bin)


def _without_live_operator(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for o in out:
        if o["kind"] == "Deployment":
            o["spec"]["replicas"] = 0
    return out


def _can_i(
    kube: KubeEnv, who: str, verb: str, resource: str, namespace: str | None, subresource: str | None = None
) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={who}"]
    if namespace:
        args += ["-n", namespace]
    if subresource:
        args.append(f"--subresource={subresource}")
    proc = kube.kubectl(*args, check=False)
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {proc.stdout!r} {proc.stderr!r}"
    return answer == "yes"


LEASES = "leases.coordination.k8s.io"
CRDS = "customresourcedefinitions.apiextensions.k8s.io"
# cluster-wide, in both modes: get on the one CRD by name (the installed CRD's check), nothing else
CRD_ALLOWED = [("get", f"{CRDS}/{CRD}", None)]
CRD_DENIED = [
    ("get", f"{CRDS}/sparkapplications.sparkoperator.k8s.io", None),
    ("get", CRDS, None),
    ("list", CRDS, None),
    ("update", f"{CRDS}/{CRD}", None),
    ("patch", f"{CRDS}/{CRD}", None),
    ("delete", f"{CRDS}/{CRD}", None),
]
# (verb, resource, subresource) the operator's ServiceAccount must be allowed in a served namespace:
# docs/rbac.md's tables
OPERATOR_ALLOWED = [
    *[(v, CRD, None) for v in ("list", "watch", "patch")],
    ("patch", CRD, "status"),
    ("get", CRD, "status"),  # get: the resourceVersion-guarded status.drain writes
    ("update", CRD, "finalizers"),
    ("get", "deployments.apps", None),
    ("create", "deployments.apps", None),
    ("patch", "deployments.apps", None),
    # the watch-fed Deployment cache (list, watch); the warm drain runtime's Deployment deleted when turned off
    ("list", "deployments.apps", None),
    ("watch", "deployments.apps", None),
    ("delete", "deployments.apps", None),
    *[(v, "jobs.batch", None) for v in ("get", "create", "delete")],
    ("list", "pods", None),
    ("create", "events", None),
    # get + create: the Kafka Secret read; the per-CR key Secrets made (warm runtime C1, hand-off M8)
    ("get", "secrets", None),
    ("create", "secrets", None),
    ("list", "replicasets.apps", None),  # the warm runtime's pod taken only when owned by its Deployment
    ("get", "networkpolicies.networking.k8s.io", None),
    ("create", "networkpolicies.networking.k8s.io", None),
    # the controller's memory ConfigMap <cr>-lagpilot-state, server-side applied (docs/operator.md "Memory")
    *[(v, "configmaps", None) for v in ("get", "create", "patch")],
]
# ... and denied there: everything docs/rbac.md says is not needed, and the usual escalation paths
OPERATOR_DENIED = [
    ("list", "secrets", None),
    ("watch", "secrets", None),
    ("update", "secrets", None),
    ("delete", "secrets", None),
    ("delete", "networkpolicies.networking.k8s.io", None),
    ("patch", "networkpolicies.networking.k8s.io", None),
    ("get", CRD, None),
    ("delete", CRD, None),
    ("create", CRD, None),
    ("update", CRD, None),
    ("update", CRD, "status"),
    ("update", "deployments.apps", None),
    ("patch", "deployments.apps", "scale"),
    ("list", "jobs.batch", None),
    ("patch", "jobs.batch", None),
    ("get", "pods", None),
    ("create", "pods", None),
    ("delete", "pods", None),
    ("create", "pods", "exec"),
    ("patch", "events", None),
    ("create", "events.events.k8s.io", None),
    ("list", "configmaps", None),
    ("delete", "configmaps", None),
    ("create", "roles.rbac.authorization.k8s.io", None),
    ("create", "rolebindings.rbac.authorization.k8s.io", None),
    ("create", "serviceaccounts", None),
    ("create", "serviceaccounts", "token"),
]
# H4: what Spark's client-mode driver calls with the operator's Spark conf (docs/rbac.md): executor pods
# created, read and labelled inactive; no delete, no services, no ConfigMaps
DRAIN_ALLOWED = [(v, "pods", None) for v in ("get", "list", "watch", "create", "patch")]
DRAIN_DENIED = [
    ("delete", "pods", None),
    ("deletecollection", "pods", None),
    ("get", "services", None),
    ("create", "services", None),
    ("delete", "services", None),
    ("deletecollection", "services", None),
    ("get", "configmaps", None),
    ("create", "configmaps", None),
    ("delete", "configmaps", None),
    ("get", "secrets", None),
    ("create", "jobs.batch", None),
    ("create", "deployments.apps", None),
    ("get", CRD, None),
    ("create", "persistentvolumeclaims", None),
    ("create", "pods", "exec"),
    ("create", "roles.rbac.authorization.k8s.io", None),
]


def _check(
    kube: KubeEnv, who: str, namespace: str | None, rows: list[tuple[str, str, str | None]], expected: bool
) -> list[str]:
    wrong = []
    for verb, resource, sub in rows:
        if _can_i(kube, who, verb, resource, namespace, sub) != expected:
            wrong.append(f"{verb} {resource}{'/' + sub if sub else ''} in {namespace or '(cluster)'}")
    return wrong


def _sa(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


@pytest.mark.parametrize("mode", ["all-namespaces", "watch-namespaces"])
def test_rendered_chart_passes_server_side_dry_run(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str], mode: str
) -> None:
    rel_ns, team = namespace("lp-sys"), namespace("lp-team")
    values: dict[str, Any] = {"watchNamespaces": [team]} if mode == "watch-namespaces" else {}
    rendered = _render(helm_bin, release, rel_ns, values)
    out = h.kubectl_apply(kube.part, rendered.objects, dry_run_server=True)
    # every rendered object was accepted by admission and the structural schemas (none persisted)
    for o in rendered.objects:
        assert f"{o['kind'].lower()}" in out.lower()
        assert o["metadata"]["name"] in out
    assert kube.kubectl("get", "deployment", "-n", rel_ns, "-o", "name").stdout.strip() == ""


def test_helm_install_dry_run_on_the_server_prints_next_commands(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str]
) -> None:
    rel_ns = namespace("lp-sys")
    proc = h.run_helm(
        helm_bin,
        [
            "install",
            release,
            str(h.CHART_DIR),
            "-n",
            rel_ns,
            "--dry-run=server",
            "--kubeconfig",
            str(kube.kubeconfig),
        ],
    )
    assert "NOTES:" in proc.stdout
    assert f"kubectl -n {rel_ns} rollout status deployment/{release}-lagpilot" in proc.stdout
    assert "kubectl get bcg -A -w" in proc.stdout


def test_watch_namespaces_install_grants_exactly_the_documented_permissions(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str]
) -> None:
    rel_ns, team, other = namespace("lp-sys"), namespace("lp-team"), namespace("lp-other")
    rendered = _render(helm_bin, release, rel_ns, {"watchNamespaces": [team]})
    h.kubectl_apply(kube.part, _without_live_operator(rendered.objects))
    full = f"{release}-lagpilot"
    operator, drain = _sa(rel_ns, full), _sa(team, f"{full}-drain")

    # RBAC is cached by the authorizer: wait for the first grant to be visible, then check them all
    wait_until(lambda: _can_i(kube, operator, "patch", "deployments.apps", team), "the operator's Role", 60)
    wait_until(lambda: _can_i(kube, drain, "create", "pods", team), "the drain driver's Role", 60)

    wrong = (
        _check(kube, operator, team, OPERATOR_ALLOWED, True)
        + _check(kube, operator, team, OPERATOR_DENIED, False)
        # a namespace it does not serve: nothing at all
        + _check(kube, operator, other, OPERATOR_ALLOWED, False)
        + _check(
            kube, operator, rel_ns, [("patch", "deployments.apps", None), ("get", "secrets", None)], False
        )
        # cluster-wide: nothing (kopf's scans are off unless rbac.clusterScanning)
        + _check(
            kube,
            operator,
            None,
            [
                ("list", "customresourcedefinitions.apiextensions.k8s.io", None),
                ("list", "namespaces", None),
                ("create", "namespaces", None),
                ("list", "nodes", None),
                ("create", "clusterroles.rbac.authorization.k8s.io", None),
                ("patch", "customresourcedefinitions.apiextensions.k8s.io", None),
            ],
            False,
        )
        + _check(kube, drain, team, DRAIN_ALLOWED, True)
        + _check(kube, drain, team, DRAIN_DENIED, False)
        + _check(kube, drain, other, [("create", "pods", None), ("list", "pods", None)], False)
        # leader election: the Lease in each watched namespace (get/update only by its name)
        + _check(kube, operator, team, [("create", LEASES, None)], True)
        + _check(kube, operator, team, [("list", LEASES, None), ("delete", LEASES, None)], False)
        + _check(kube, operator, other, [("create", LEASES, None)], False)
        + _check(kube, operator, None, CRD_ALLOWED, True)
        + _check(kube, operator, None, CRD_DENIED, False)
    )
    assert wrong == [], "permissions differ from docs/helm.md:\n" + "\n".join(wrong)


def test_cluster_scanning_grants_only_read_only_cluster_scans(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str]
) -> None:
    rel_ns, team = namespace("lp-sys"), namespace("lp-team")
    rendered = _render(
        helm_bin,
        release,
        rel_ns,
        {"watchNamespaces": [team], "rbac": {"create": True, "clusterScanning": True}},
    )
    h.kubectl_apply(kube.part, _without_live_operator(rendered.objects))
    operator = _sa(rel_ns, f"{release}-lagpilot")
    crds = "customresourcedefinitions.apiextensions.k8s.io"
    wait_until(lambda: _can_i(kube, operator, "list", crds, None), "the scanning ClusterRole", 60)
    wrong = _check(
        kube,
        operator,
        None,
        [
            ("list", crds, None),
            ("watch", crds, None),
            ("list", "namespaces", None),
            ("watch", "namespaces", None),
        ],
        True,
    ) + _check(
        kube,
        operator,
        None,
        [
            ("get", crds, None),
            ("patch", crds, None),
            ("create", "namespaces", None),
            ("get", "namespaces", None),
            ("list", "nodes", None),
        ],
        False,
    )
    assert wrong == [], "permissions differ from docs/helm.md:\n" + "\n".join(wrong)


def test_all_namespaces_install_serves_every_namespace_but_nothing_more(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str]
) -> None:
    rel_ns, anywhere = namespace("lp-sys"), namespace("lp-any")
    rendered = _render(helm_bin, release, rel_ns, {})
    h.kubectl_apply(kube.part, _without_live_operator(rendered.objects))
    operator = _sa(rel_ns, f"{release}-lagpilot")
    wait_until(
        lambda: _can_i(kube, operator, "patch", "deployments.apps", anywhere),
        "the operator's ClusterRole",
        60,
    )
    wrong = (
        _check(kube, operator, anywhere, OPERATOR_ALLOWED, True)
        + _check(kube, operator, anywhere, OPERATOR_DENIED, False)
        + _check(
            kube,
            operator,
            None,
            [("list", "namespaces", None), ("create", "namespaces", None), ("list", "nodes", None)],
            False,
        )
        # leader election: the Lease in the release namespace only
        + _check(kube, operator, rel_ns, [("create", LEASES, None)], True)
        + _check(kube, operator, anywhere, [("create", LEASES, None)], False)
        + _check(kube, operator, None, CRD_ALLOWED, True)
        + _check(kube, operator, None, CRD_DENIED, False)
    )
    assert wrong == [], "permissions differ from docs/helm.md:\n" + "\n".join(wrong)
    # the drain ServiceAccount exists in the release namespace only (drain.namespaces default)
    sas = kube.kubectl(
        "get",
        "serviceaccounts",
        "-A",
        "-o",
        "json",
        "-l",
        f"app.kubernetes.io/component=drain,app.kubernetes.io/instance={release}",
    ).stdout
    assert {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in json.loads(sas)["items"]} == {
        (rel_ns, f"{release}-lagpilot-drain")
    }


def _example_bcg() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((h.REPO_ROOT / "examples" / "bcg-postgres.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} >= {"BatchConsumerGroup"}
    return docs


def test_operator_kubeconfig_acts_with_the_charts_permissions_only(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str]
) -> None:
    """The helper the operator e2e uses: a real token for the chart's ServiceAccount, and real
    API calls with it (not only `can-i`): status writes work, anything else is Forbidden."""
    rel_ns, team, other = namespace("lp-sys"), namespace("lp-team"), namespace("lp-other")
    crd = [
        o for o in _render(helm_bin, release, rel_ns, {}).objects if o["kind"] == "CustomResourceDefinition"
    ]
    h.kubectl_apply(kube.part, crd)
    kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    sa_kubeconfig = h.operator_kubeconfig(
        kube.part, {"watchNamespaces": [team]}, release=release, namespace=rel_ns
    )
    for obj in _example_bcg():
        kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(obj))
    name = next(d for d in _example_bcg() if d["kind"] == "BatchConsumerGroup")["metadata"]["name"]

    def as_operator(*args: str) -> Any:
        return kube.kubectl(*args, kubeconfig=sa_kubeconfig, check=False)

    wait_until(
        lambda: name in as_operator("get", "bcg", "-n", team, "-o", "name").stdout,
        "RBAC for the operator SA",
        60,
    )
    # the status write exactly as the operator issues it (kubeapi.patch_status: a bare PATCH; kubectl
    # patch would GET first, which the operator never does and is not granted)
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(sa_kubeconfig))
    try:
        client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            "lagpilot.io",
            "v1alpha1",
            team,
            "batchconsumergroups",
            name,
            {"status": {"observedGeneration": 1}},
        )
        with pytest.raises(client.ApiException) as denied:
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                "lagpilot.io", "v1alpha1", team, "batchconsumergroups", name
            )
        assert denied.value.status == 403
    finally:
        api.close()
    status = json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout)["status"]
    assert status["observedGeneration"] == 1
    assert as_operator("get", "secret", "orders-pg", "-n", team).returncode == 0
    for forbidden in (
        ("delete", "bcg", name, "-n", team),
        ("get", "bcg", name, "-n", team),
        ("get", "secrets", "-n", team),
        ("get", "bcg", "-n", other),
        ("get", "configmaps", "-n", team),
        ("create", "namespace", f"{release}-nope"),
    ):
        proc = as_operator(*forbidden)
        assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), (forbidden, proc.stderr)
    whoami = json.loads(as_operator("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == _sa(rel_ns, f"{release}-lagpilot")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_operator_reconciles_with_only_the_charts_service_account(
    kube: KubeEnv,
    helm_bin: Any,
    release: str,
    namespace: Callable[..., str],
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Any,
) -> None:
    """The operator, started with the chart's own command line and environment and authenticated as
    the chart's ServiceAccount, reconciles a CR: creates the consumer Deployment, writes status, posts
    no 403 anywhere in its log. Proves the chart's RBAC sufficient for the control loop."""
    rel_ns, team = namespace("lp-sys"), namespace("lp-team")
    values = {"watchNamespaces": [team]}
    rendered = _render(helm_bin, release, rel_ns, values)
    h.kubectl_apply(kube.part, rendered.of_kind("CustomResourceDefinition"))
    kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=120s", timeout=150)
    sa_kubeconfig = h.operator_kubeconfig(kube.part, values, release=release, namespace=rel_ns)
    # the authorizer caches RBAC: start the operator only once its grants are visible, so that a 403
    # in its log below means a missing verb, not a race
    wait_until(
        lambda: (
            kube.kubectl("get", "bcg", "-n", team, kubeconfig=sa_kubeconfig, check=False).returncode == 0
            and _can_i(kube, _sa(rel_ns, f"{release}-lagpilot"), "create", "deployments.apps", team)
            # the -crd ClusterRole: the CRD is read at start-up (act/crd_check.py)
            and _can_i(kube, _sa(rel_ns, f"{release}-lagpilot"), "get", f"{CRDS}/{CRD}", None)
        ),
        "the chart's RBAC to take effect",
        60,
    )

    # the chart's container, run as a local process: same args (liveness moved to a free loopback
    # port), same environment (fieldRefs resolved by hand), metrics off (port clashes between tests)
    (container,) = rendered.get("Deployment", f"{release}-lagpilot")["spec"]["template"]["spec"]["containers"]
    health = _free_port()
    args = [
        a if not a.startswith("--liveness=") else f"--liveness=http://127.0.0.1:{health}/healthz"
        for a in container["args"]
    ]
    assert container["command"] == ["lagpilot", "operator"] and f"--namespace={team}" in args
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
    env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    env.update(
        {
            "LAGPILOT_OPERATOR_NAMESPACE": rel_ns,
            "LAGPILOT_POD_NAME": "chart-test",
            "LAGPILOT_OPERATOR_METRICS_PORT": "0",
            "KUBECONFIG": str(sa_kubeconfig),
            # the checkout's source dirs first: this tree's operator, not the venv's editable install
            "PYTHONPATH": checkout_pythonpath(h.REPO_ROOT),
            "LAGPILOT_KAFKA_TIMEOUT_SECONDS": "5",
            "LAGPILOT_MAX_BACKOFF_SECONDS": "15",
        }
    )
    log_path = tmp_path / "operator.log"
    topic = new_topic(partitions=2)
    name = "chart-rbac"
    bcg = {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": kafka_bootstrap},
            "topic": topic,
            "groupId": f"{topic}-g",
            "processing": {"sink": "log"},
            "scaling": {"minReplicas": 1, "maxReplicas": 2},
            "catchUpSLASeconds": 60,
        },
    }
    with open(log_path, "ab") as log_fh:
        # -X faulthandler: on a stall the test sends SIGABRT and the log gets every thread's stack
        proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "lagpilot.cli", *container["command"][1:], *args],
            env=env,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: proc.poll() is None and http_ok(f"http://127.0.0.1:{health}/healthz"),
            "the operator's liveness endpoint",
            120,
        )
        kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))
        dep = wait_until(
            lambda: (
                kube.kubectl(
                    "get", "deployment", f"{name}-consumer", "-n", team, "-o", "json", check=False
                ).stdout
            ),
            "the consumer Deployment",
            180,
        )
        owner = json.loads(dep)["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("BatchConsumerGroup", name, True)

        def status() -> dict[str, Any]:
            obj = json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout)
            return obj.get("status") or {}

        try:
            # proc.poll(): an operator that died (e.g. SIGSEGV, exit -11) fails at once, not as a stall
            st = wait_until(
                lambda: (
                    {"operatorExitCode": proc.returncode}
                    if proc.poll() is not None
                    else status().get("conditions") and status()
                ),
                "status written by the operator",
                180,
            )
        except AssertionError as exc:
            died = proc.poll()
            if died is None:
                proc.send_signal(signal.SIGABRT)  # dump the stuck operator's stacks into its log
                proc.wait(30)
            raise AssertionError(
                f"{exc}; operator exit code before SIGABRT: {died}; CR status now: {json.dumps(status())}"
            ) from None
        assert "operatorExitCode" not in st, (
            f"the operator died (exit code {proc.returncode}) before writing status"
        )
        assert st.get("partitions") in (None, 2)
        # deleting works while it runs (kopf removes its finalizer: the patch verb)
        kube.kubectl("delete", "bcg", name, "-n", team, "--wait=true", "--timeout=120s", timeout=150)
        assert proc.poll() is None, "the operator died"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log = log_path.read_text(errors="replace")
        print(f"--- operator log (tail) ---\n{chr(10).join(log.splitlines()[-200:])}")
    denied = [line for line in log.splitlines() if DENIED_LINE.search(line)]
    assert denied == [], "the chart's RBAC is missing something:\n" + "\n".join(denied[:20])
    # leader election with the chart's rights: the Lease in the watched namespace was taken and
    # released on SIGTERM
    assert '"became the leader"' in log and '"leader lease released"' in log


@pytest.mark.slow
def test_helm_install_runs_the_operator_pod_as_the_charts_service_account(
    kube: KubeEnv,
    helm_bin: Any,
    release: str,
    pods: Pods,
    pod_io: PodIO,
    node_images: Any,
    new_topic: Callable[..., str],
    tmp_path: Any,
) -> None:
    """A real `helm install`: the controller-manager turns the chart's Deployment into a Pod, which
    runs on the real node: a container of this checkout's operator image (the chart's command, env,
    securityContext and probes, a token of the chart's ServiceAccount mounted by the kubelet). That
    operator reconciles a CR end to end (its consumer pods on the node too); `helm uninstall` removes the operator again
    (and its cluster-scoped RBAC)."""
    rel_ns, team = pods.namespace("lp-sys"), pods.namespace("lp-team")
    values: dict[str, Any] = {
        "watchNamespaces": [team],
        "metrics": {"enabled": True},
        "operator": {
            "extraEnv": [
                {"name": "LAGPILOT_MAX_BACKOFF_SECONDS", "value": "15"},
                {"name": "LAGPILOT_POD_START_SECONDS", "value": "3"},
            ]
        },
    }
    # this checkout's operator image, loaded into the node (the chart's name; never pulled)
    operator_image = node_images.get("operator")
    repository, tag = operator_image.rsplit(":", 1)
    values["image"] = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    helm_args = ["--kubeconfig", str(kube.kubeconfig), "-n", rel_ns]
    out = h.run_helm(
        helm_bin, ["install", release, str(h.CHART_DIR), "-f", str(values_file), *helm_args]
    ).stdout
    assert "STATUS: deployed" in out and "NOTES:" in out
    full = f"{release}-lagpilot"
    name = "via-helm"
    try:

        def operator_pod() -> dict[str, Any] | None:
            pods = json.loads(
                kube.kubectl(
                    "get", "pods", "-n", rel_ns, "-o", "json", "-l", f"app.kubernetes.io/instance={release}"
                ).stdout
            )["items"]
            ready = [
                p
                for p in pods
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions", [])
                )
            ]
            return ready[0] if ready else None

        pod = wait_until(operator_pod, "the operator pod Ready (kopf /healthz)", 300)
        assert pod["spec"]["serviceAccountName"] == full
        assert pod["spec"]["nodeName"] == pods.node_name
        assert pod["spec"]["containers"][0]["image"] == operator_image
        # the runtime's own listing: the operator is a container of the node
        listed = {
            c["labels"]["io.kubernetes.pod.name"]
            for c in json.loads(pods.node.crictl("ps", "-o", "json").stdout)["containers"]
            if c["labels"].get("io.kubernetes.pod.namespace") == rel_ns
        }
        assert pod["metadata"]["name"] in listed, listed
        topic = new_topic(partitions=2)
        bcg = {
            "apiVersion": "lagpilot.io/v1alpha1",
            "kind": "BatchConsumerGroup",
            "metadata": {"name": name},
            "spec": {
                "kafka": {"bootstrapServers": pods.kafka_bootstrap},
                "topic": topic,
                "groupId": f"{topic}-g",
                "processing": {"sink": "log"},
                "scaling": {"minReplicas": 1, "maxReplicas": 2},
                "catchUpSLASeconds": 60,
                "template": pods.template(),
            },
        }
        kube.kubectl("apply", "-n", team, "-f", "-", input_text=yaml.safe_dump(bcg))

        def cr_status() -> dict[str, Any]:
            return (
                json.loads(kube.kubectl("get", "bcg", name, "-n", team, "-o", "json").stdout).get("status")
                or {}
            )

        wait_until(
            lambda: (
                kube.kubectl("get", "deployment", f"{name}-consumer", "-n", team, check=False).returncode == 0
            ),
            "the consumer Deployment created by the helm-installed operator",
            180,
        )
        st = wait_until(
            lambda: cr_status().get("conditions") and cr_status(), "status from that operator", 180
        )
        assert st.get("observedGeneration") == 1
        kube.kubectl("delete", "bcg", name, "-n", team, "--wait=true", "--timeout=120s", timeout=150)
        log = pod_io.logs(rel_ns, pod["metadata"]["name"])
        assert log, "no operator log"
        denied = [line for line in log.splitlines() if DENIED_LINE.search(line)]
        assert denied == [], "the chart's RBAC is missing something:\n" + "\n".join(denied[:20])
    finally:
        kube.kubectl("delete", "bcg", name, "-n", team, "--ignore-not-found", "--wait=false", check=False)
        h.run_helm(helm_bin, ["uninstall", release, "--wait", "--timeout", "120s", *helm_args], timeout=180)
    assert kube.kubectl("get", "deployment", full, "-n", rel_ns, check=False).returncode != 0
    assert kube.kubectl("get", "clusterrole", f"{full}-scanning", check=False).returncode != 0


def test_dashboard_configmap_passes_server_side_dry_run(
    kube: KubeEnv, helm_bin: Any, release: str, namespace: Callable[..., str]
) -> None:
    """The Grafana dashboard ConfigMap (grafanaDashboard.enabled) is accepted by the API server.
    The PrometheusRule and PodMonitor need prometheus-operator's CRDs, which the local cluster does
    not have: their rules are checked by promtool and on a real Prometheus (test_prometheus.py)."""
    rel_ns = namespace("lp-sys")
    rendered = _render(helm_bin, release, rel_ns, {"grafanaDashboard": {"enabled": True}})
    cm = rendered.get("ConfigMap", f"{release}-lagpilot-dashboard")
    assert json.loads(cm["data"]["lagpilot.json"])["uid"] == "lagpilot-overview"
    out = h.kubectl_apply(kube.part, [cm], dry_run_server=True)
    assert f"configmap/{release}-lagpilot-dashboard" in out and "server dry run" in out, out


@pytest.fixture(scope="module", params=["helm3", "helm4"])
def any_helm(request: pytest.FixtureRequest) -> Any:
    """Helm 3 and Helm 4 (both built from the Go module proxy by dev/install-helm.sh)."""
    return h.ensure_helm(version=h.HELM_VERSION if request.param == "helm3" else h.HELM4_VERSION)


@pytest.mark.slow
def test_subchart_with_global_values_installs_upgrades_and_passes_helm_test(
    kube: KubeEnv,
    any_helm: Any,
    pods: Pods,
    pod_io: PodIO,
    node_images: Any,
    tmp_path: Any,
) -> None:
    """Issue 28 item 5, under Helm 3 and Helm 4: lagpilot as a subchart of a parent chart whose
    `global` values reach it (helm/helm#10392: the strict schema used to reject them), a real
    `helm install`, `helm test` (the hook pod fetches the operator's /metrics and checks
    lagpilot_build_info and the leader gauge), `helm upgrade`, `helm test` again; then with the
    operator scaled to 0 `helm test` fails (the hook can fail). On the real node (the default) the
    operator and the hook are containers of this checkout's operator image and the hook reaches the
    operator through the chart's metrics Service by its DNS name (CoreDNS, kube-proxy): the chart's
    default `helmTest.url`."""
    version = h.run_helm(any_helm, ["version", "--template", "{{.Version}}"]).stdout.strip()
    assert version.startswith(("v3.", "v4.")), version
    rel_ns, team = pods.namespace("lp-sys"), pods.namespace("lp-team")
    release = f"plat-{uuid.uuid4().hex[:5]}"
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [{"name": "lagpilot", "version": "0.1.0"}],
            }
        )
    )
    shutil.copytree(h.CHART_DIR, parent / "charts" / "lagpilot")
    full = f"{release}-lagpilot"
    sub: dict[str, Any] = {"watchNamespaces": [team], "helmTest": {"attempts": 20}}
    # this checkout's operator image on the node (the chart's name; never pulled); the hook's URL
    # is the chart's default, the metrics Service's DNS name
    repository, tag = node_images.get("operator").rsplit(":", 1)
    sub["image"] = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
    sub["metrics"] = {"enabled": True}
    metrics_url = f"http://{full}-metrics.{rel_ns}.svc:9090/metrics"  # values.yaml metrics.servicePort
    values = {
        "global": {"imageRegistry": "registry.example.com", "labels": {"team": "platform"}},
        "lagpilot": sub,
    }
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    helm_args = ["--kubeconfig", str(kube.kubeconfig), "-n", rel_ns]
    # Helm 4 applies crds/ server-side (field manager "helm") even when the CRD exists: on this
    # shared cluster the CRD belongs to the test sessions' manager, and the apply conflicts
    # (seen: "Apply failed with 2 conflicts: conflicts with \"lagpilot-tests\": .spec.versions");
    # Helm 3 skips an existing CRD. The CRD is the session's here: --skip-crds (docs/helm.md)
    crd_args = ["--skip-crds"] if version.startswith("v4.") else []
    out = h.run_helm(
        any_helm,
        ["install", release, str(parent), "-f", str(values_file), *crd_args, *helm_args],
        timeout=300,
    ).stdout
    assert "STATUS: deployed" in out, out
    try:

        def ready_operator() -> dict[str, Any] | None:
            pods = json.loads(
                kube.kubectl(
                    "get",
                    "pods",
                    "-n",
                    rel_ns,
                    "-o",
                    "json",
                    "-l",
                    f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator",
                ).stdout
            )["items"]
            return next(
                (
                    p
                    for p in pods
                    if p["metadata"].get("deletionTimestamp") is None
                    and any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in p.get("status", {}).get("conditions", [])
                    )
                ),
                None,
            )

        def hook_log() -> str:
            # the hook pod's log: the API's (through the kubelet)
            return pod_io.logs(rel_ns, f"{full}-test-metrics")

        wait_until(ready_operator, f"the operator pod Ready ({version})", 180)
        tested = h.run_helm(any_helm, ["test", release, "--timeout", "180s", *helm_args], timeout=240).stdout
        print(tested, hook_log())
        assert f"{full}-test-metrics" in tested and "Succeeded" in tested, tested
        assert f"ok: {metrics_url}" in hook_log() and "lagpilot_operator_leader 1" in hook_log()

        # upgrade (a changed value rolls the operator; leader election hands the Lease over)
        up = h.run_helm(
            any_helm,
            [
                "upgrade",
                release,
                str(parent),
                "-f",
                str(values_file),
                *crd_args,
                "--set",
                "lagpilot.operator.logLevel=DEBUG",
                "--wait",
                "--timeout",
                "240s",
                *helm_args,
            ],
            timeout=300,
        ).stdout
        assert "has been upgraded" in up and "REVISION: 2" in up, up
        dep = json.loads(kube.kubectl("get", "deployment", full, "-n", rel_ns, "-o", "json").stdout)
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env.get("LAGPILOT_LOG_LEVEL") == "DEBUG", env
        wait_until(ready_operator, "the upgraded operator pod Ready", 180)
        tested = h.run_helm(any_helm, ["test", release, "--timeout", "180s", *helm_args], timeout=240).stdout
        assert "Succeeded" in tested and f"ok: {metrics_url}" in hook_log(), (tested, hook_log())

        # the hook can fail: no operator, no metrics
        kube.kubectl("scale", "deployment", full, "-n", rel_ns, "--replicas=0")
        wait_until(
            lambda: (
                kube.kubectl(
                    "get",
                    "pods",
                    "-n",
                    rel_ns,
                    "-o",
                    "name",
                    "-l",
                    f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator",
                ).stdout.strip()
                == ""
            ),
            "the operator pods gone",
            120,
        )
        with pytest.raises(h.HelmError) as failed:
            h.run_helm(any_helm, ["test", release, "--timeout", "180s", *helm_args], timeout=240)
        print(failed.value.output, hook_log())
        assert f"{full}-test-metrics" in failed.value.output and "failed" in failed.value.output.lower()
        assert f"FAILED: GET {metrics_url}" in hook_log()
    finally:
        h.run_helm(any_helm, ["uninstall", release, "--wait", "--timeout", "120s", *helm_args], timeout=180)
    assert kube.kubectl("get", "deployment", full, "-n", rel_ns, check=False).returncode != 0
