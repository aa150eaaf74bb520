"""The chart rendered by the real helm (no cluster): lint, schema enforcement, objects, security, RBAC shape.

helm comes from `lagpilot_dev.helm.ensure_helm()`: the cached pinned build, built from the Go module
proxy on first use (dev/install-helm.sh).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev import helm as h

NS = "lagpilot-system"
RELEASE = "lp"
FULL = "lp-lagpilot"

# every rendering the tests below check for security and RBAC invariants
PROFILES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "watch-two-namespaces": {"watchNamespaces": ["team-a", "team-b"]},
    "namespaced-with-scanning": {
        "watchNamespaces": ["team-a"],
        "rbac": {"create": True, "clusterScanning": True},
    },
    "everything-on": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "drain": {
            "serviceAccount": {"create": True},
            "namespaces": ["jobs-1", "jobs-2"],
            "sparkMaster": "k8s://https://kubernetes.default.svc",
            "rbac": {"create": True, "persistentVolumeClaims": True},
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "priorityClassName": "high",
    },
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return h.ensure_helm()


@pytest.fixture(scope="module")
def rendered(helm: Path) -> dict[str, h.Rendered]:
    return {
        name: h.template(values, release=RELEASE, namespace=NS, helm=helm)
        for name, values in PROFILES.items()
    }


def _rules(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj.get("rules") or [])


def _pod_specs(r: h.Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in r.objects:
        spec = o.get("spec", {})
        if "template" in spec and "spec" in spec["template"]:
            yield f"{o['kind']}/{o['metadata']['name']}", spec["template"]["spec"]


def _can(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


# ---- helm lint / schema ------------------------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES), ids=str)
def test_helm_lint_strict_passes(helm: Path, profile: str) -> None:
    out = h.lint(PROFILES[profile], helm=helm)
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize(
    ("set_value", "complaint"),
    [
        ("operator.logLevel=LOUD", "/operator/logLevel"),
        ("watchNamespaces={Bad_NS}", "/watchNamespaces/0"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("metrics.port=70000", "/metrics/port"),
        ("rbac.craete=true", "craete"),
        ("unknownTopLevel=1", "unknownTopLevel"),
        ("serviceAccount.create=false", "/serviceAccount/name"),
        ("serviceMonitor.interval=often", "/serviceMonitor/interval"),
        ("drain.namespaces={UPPER}", "/drain/namespaces/0"),
        ("drain.sparkMaster=yarn", "/drain/sparkMaster"),
    ],
    ids=[
        "enum",
        "namespace-pattern",
        "pull-policy",
        "port-range",
        "typo-key",
        "unknown-key",
        "sa-name-required",
        "duration",
        "drain-ns",
        "spark-master",
    ],
)
def test_schema_rejects_bad_values(helm: Path, set_value: str, complaint: str) -> None:
    for run in (
        lambda: h.lint(set_values=[set_value], helm=helm),
        lambda: h.template(release=RELEASE, namespace=NS, set_values=[set_value], helm=helm),
    ):
        with pytest.raises(h.HelmError) as exc:
            run()
        assert "schema" in exc.value.output
        assert complaint in exc.value.output


def test_schema_accepts_an_existing_service_account_by_name(helm: Path) -> None:
    r = h.template(
        release=RELEASE,
        namespace=NS,
        helm=helm,
        set_values=["serviceAccount.create=false", "serviceAccount.name=ops-sa"],
    )
    assert r.of_kind("Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "ops-sa"
    assert [o["metadata"]["name"] for o in r.of_kind("ServiceAccount")] == [f"{FULL}-drain"]


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        (["metrics.port=8080"], "metrics.port and health.port must differ"),
        (
            ["serviceMonitor.enabled=true", "metrics.enabled=false"],
            "serviceMonitor.enabled needs metrics.enabled",
        ),
    ],
    ids=["port-clash", "monitor-without-metrics"],
)
def test_template_refuses_inconsistent_values(helm: Path, set_values: list[str], message: str) -> None:
    with pytest.raises(h.HelmError) as exc:
        h.template(release=RELEASE, namespace=NS, set_values=set_values, helm=helm)
    assert message in exc.value.output


# ---- what gets rendered -----------------------------------------------------------------------


def test_defaults_render_the_cluster_wide_install(rendered: dict[str, h.Rendered]) -> None:
    r = rendered["defaults"]
    kinds = sorted((o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in r.objects)
    assert kinds == sorted(
        [
            ("CustomResourceDefinition", "batchconsumergroups.lagpilot.io", None),
            ("ServiceAccount", FULL, NS),
            ("ClusterRole", FULL, None),
            ("ClusterRoleBinding", FULL, None),
            # get on the one CRD, by name: the installed CRD's check (docs/rbac.md)
            ("ClusterRole", f"{FULL}-crd", None),
            ("ClusterRoleBinding", f"{FULL}-crd", None),
            ("Role", f"{FULL}-leader-election", NS),
            ("RoleBinding", f"{FULL}-leader-election", NS),
            ("ServiceAccount", f"{FULL}-drain", NS),
            ("Role", f"{FULL}-drain", NS),
            ("RoleBinding", f"{FULL}-drain", NS),
            ("ValidatingAdmissionPolicy", f"{FULL}-drain-pods", None),
            ("ValidatingAdmissionPolicyBinding", f"{FULL}-drain-pods", None),
            ("Deployment", FULL, NS),
            ("Service", f"{FULL}-metrics", NS),
            # the `helm test` hook (helm.sh/hook: test; not applied by `helm install`)
            ("Pod", f"{FULL}-test-metrics", NS),
        ]
    )
    args = r.get("Deployment", FULL)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" in args and "--standalone" in args
    assert not any(a.startswith("--namespace") for a in args)


def test_watch_namespaces_gives_roles_there_and_nothing_cluster_wide_but_the_crds_get(
    rendered: dict[str, h.Rendered],
) -> None:
    r = rendered["watch-two-namespaces"]
    roles = {(o["metadata"]["name"], o["metadata"]["namespace"]) for o in r.of_kind("Role")}
    assert roles == {
        (FULL, "team-a"),
        (FULL, "team-b"),
        (f"{FULL}-drain", "team-a"),
        (f"{FULL}-drain", "team-b"),
    }
    bindings = {(o["metadata"]["name"], o["metadata"]["namespace"]) for o in r.of_kind("RoleBinding")}
    assert bindings == roles
    # cluster-wide only the get of the one CRD by name (tests/unit/test_chart_rbac.py)
    assert sorted(
        (o["kind"], o["metadata"]["name"])
        for o in r.objects
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ) == [("ClusterRole", f"{FULL}-crd"), ("ClusterRoleBinding", f"{FULL}-crd")]
    container = r.get("Deployment", FULL)["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args
    assert "LAGPILOT_KOPF_SCANNING" not in {
        e["name"] for e in container["env"]
    }  # the operator's default: off
    drain_sas = {(o["metadata"]["name"], o["metadata"]["namespace"]) for o in r.of_kind("ServiceAccount")}
    assert drain_sas == {(FULL, NS), (f"{FULL}-drain", "team-a"), (f"{FULL}-drain", "team-b")}


def test_cluster_scanning_is_read_only_and_switches_the_operator_on(rendered: dict[str, h.Rendered]) -> None:
    r = rendered["namespaced-with-scanning"]
    cluster_role = r.get("ClusterRole", f"{FULL}-scanning")
    assert {v for rule in _rules(cluster_role) for v in rule["verbs"]} == {"list", "watch"}
    assert {res for rule in _rules(cluster_role) for res in rule["resources"]} == {
        "customresourcedefinitions",
        "namespaces",
    }
    binding = r.get("ClusterRoleBinding", f"{FULL}-scanning")
    assert binding["roleRef"]["name"] == f"{FULL}-scanning"
    env = {
        e["name"]: e.get("value")
        for e in r.get("Deployment", FULL)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["LAGPILOT_KOPF_SCANNING"] == "true"


def test_role_bindings_point_at_the_operator_service_account(rendered: dict[str, h.Rendered]) -> None:
    for name, r in rendered.items():
        for b in r.of_kind("ClusterRoleBinding") + [
            b for b in r.of_kind("RoleBinding") if not b["metadata"]["name"].endswith("-drain")
        ]:
            assert b["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}], name
            assert b["roleRef"]["name"] == b["metadata"]["name"], name


def test_drain_driver_gets_a_role_in_its_namespace_only(rendered: dict[str, h.Rendered]) -> None:
    r = rendered["everything-on"]
    drain_roles = [o for o in r.of_kind("Role") if o["metadata"]["name"] == f"{FULL}-drain"]
    assert sorted(o["metadata"]["namespace"] for o in drain_roles) == ["jobs-1", "jobs-2"]
    for role in drain_roles:
        assert {g for rule in _rules(role) for g in rule["apiGroups"]} == {""}
        # no services, no configmaps: the client-mode driver makes neither (H4, docs/rbac.md)
        assert {res for rule in _rules(role) for res in rule["resources"]} == {
            "pods",
            "persistentvolumeclaims",
        }
        assert not _can(_rules(role), "", "pods", "deletecollection")
        assert _can(_rules(role), "", "pods", "create") and _can(_rules(role), "", "pods", "watch")
        assert not _can(_rules(role), "", "secrets", "get")
    for b in r.of_kind("RoleBinding"):
        if b["metadata"]["name"] == f"{FULL}-drain":
            assert b["subjects"] == [
                {"kind": "ServiceAccount", "name": f"{FULL}-drain", "namespace": b["metadata"]["namespace"]}
            ]
    defaults = [o for o in rendered["defaults"].of_kind("Role") if o["metadata"]["name"] == f"{FULL}-drain"]
    assert not _can(_rules(defaults[0]), "", "persistentvolumeclaims", "create")  # only behind the flag
    env = {
        e["name"]: e.get("value")
        for e in r.get("Deployment", FULL)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["LAGPILOT_DRAIN_SERVICE_ACCOUNT"] == f"{FULL}-drain"
    assert env["LAGPILOT_DRAIN_SPARK_MASTER"] == "k8s://https://kubernetes.default.svc"
    default_env = [
        e["name"]
        for e in rendered["defaults"].get("Deployment", FULL)["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    ]
    assert "LAGPILOT_DRAIN_SPARK_MASTER" not in default_env  # local mode unless asked


def test_operator_deployment_shape(rendered: dict[str, h.Rendered]) -> None:
    dep = rendered["defaults"].get("Deployment", FULL)
    assert dep["spec"]["replicas"] == 1
    # leader election (a Lease): a rolling upgrade's new pod stands by until the old one releases it
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert (
        "--leader-election-name=lagpilot-operator" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "lagpilot/operator:0.1.0"  # the chart's appVersion
    assert c["command"] == ["lagpilot", "operator"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"health": 8080, "metrics": 9090}
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    assert pod["serviceAccountName"] == FULL
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    svc = rendered["defaults"].get("Service", f"{FULL}-metrics")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_optional_parts_follow_their_flags(rendered: dict[str, h.Rendered]) -> None:
    assert rendered["defaults"].of_kind("ServiceMonitor") == []
    (sm,) = rendered["everything-on"].of_kind("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    pod = rendered["everything-on"].get("Deployment", FULL)["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == "high"


def test_extra_args_env_and_metrics_off(helm: Path) -> None:
    values = {
        "operator": {
            "logLevel": "DEBUG",
            "extraArgs": ["--verbose"],
            "extraEnv": [{"name": "FOO", "value": "bar"}],
        },
        "metrics": {"enabled": False, "port": 9090},
    }
    r = h.template(values, release=RELEASE, namespace=NS, helm=helm)
    c = r.of_kind("Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][-1] == "--verbose"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FOO"] == "bar" and env["LAGPILOT_LOG_LEVEL"] == "DEBUG"
    assert env["LAGPILOT_OPERATOR_METRICS_PORT"] == "0"
    assert r.of_kind("Service") == []
    assert [p["name"] for p in c["ports"]] == ["health"]


def test_without_leader_election_one_replica_and_recreate(helm: Path) -> None:
    r = h.template(release=RELEASE, namespace=NS, set_values=["leaderElection.enabled=false"], helm=helm)
    dep = r.get("Deployment", FULL)
    assert dep["spec"]["strategy"] == {"type": "Recreate"} and dep["spec"]["replicas"] == 1
    assert "--no-leader-election" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [o for o in r.of_kind("Role") if "leader" in o["metadata"]["name"]]
    with pytest.raises(h.HelmError) as exc:
        h.template(
            release=RELEASE,
            namespace=NS,
            set_values=["leaderElection.enabled=false", "replicas=2"],
            helm=helm,
        )
    assert "replicas > 1 needs leaderElection.enabled" in exc.value.output
    with pytest.raises(h.HelmError) as exc:
        h.template(
            release=RELEASE, namespace=NS, set_values=["leaderElection.renewDeadlineSeconds=15"], helm=helm
        )
    assert "renewDeadlineSeconds < leaseDurationSeconds" in exc.value.output


def test_rbac_create_false_renders_no_operator_rbac(helm: Path) -> None:
    r = h.template(release=RELEASE, namespace=NS, set_values=["rbac.create=false"], helm=helm)
    assert r.of_kind("ClusterRole") == [] and r.of_kind("ClusterRoleBinding") == []
    assert [o["metadata"]["name"] for o in r.of_kind("Role")] == [f"{FULL}-drain"]


# ---- security invariants over every rendering ---------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES), ids=str)
def test_every_container_is_locked_down(rendered: dict[str, h.Rendered], profile: str) -> None:
    pods = list(_pod_specs(rendered[profile]))
    assert pods, "no pod template rendered"
    for where, pod in pods:
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True, where
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for c in pod.get("initContainers", []) + pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc.get("privileged", False) is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in sc["capabilities"], where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), where


DANGEROUS_VERBS = {"*", "escalate", "bind", "impersonate"}


@pytest.mark.parametrize("profile", sorted(PROFILES), ids=str)
def test_no_rbac_rule_uses_a_wildcard_or_a_privilege_verb(
    rendered: dict[str, h.Rendered], profile: str
) -> None:
    roles = rendered[profile].of_kind("ClusterRole") + rendered[profile].of_kind("Role")
    assert roles
    for role in roles:
        where = f"{role['kind']}/{role['metadata']['name']}"
        assert "aggregationRule" not in role, where
        for rule in _rules(role):
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"{where}: '*' in {field}"
                assert not any("*" in str(x) for x in rule.get(field, [])), f"{where}: wildcard in {field}"
            assert not DANGEROUS_VERBS & set(rule["verbs"]), where
            # RBAC objects themselves are never writable by the operator or the drain driver
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], where


@pytest.mark.parametrize("profile", sorted(PROFILES), ids=str)
def test_secrets_are_get_and_create_only_and_pods_untouched_by_the_operator(
    rendered: dict[str, h.Rendered], profile: str
) -> None:
    """Secrets: `get` (the Kafka credentials) and `create` (the warm drain runtime's per-CR key
    Secret, issue 23 C1: docs/rbac.md); never list/watch (no bulk read of a namespace's Secrets),
    never update/patch/delete (nobody's Secret is changed; its own go with their CR)."""
    r = rendered[profile]
    operator_roles = [
        o
        for o in r.of_kind("ClusterRole") + r.of_kind("Role")
        if not o["metadata"]["name"].endswith("-drain")
    ]
    for role in operator_roles:
        for verb in ("list", "watch", "update", "patch", "delete", "deletecollection"):
            assert not _can(_rules(role), "", "secrets", verb), (role["metadata"]["name"], verb)
        assert not _can(_rules(role), "", "pods", "create")


def test_schema_is_valid_against_the_draft_07_metaschema(helm: Path, tmp_path: Path) -> None:
    """helm compiles values.schema.json against its metaschema on every lint/template: the real
    schema passes (every test above), a schema with an invalid keyword value is refused."""
    assert (
        '"$schema": "http://json-schema.org/draft-07/schema#"'
        in (h.CHART_DIR / "values.schema.json").read_text()
    )
    broken = tmp_path / "lagpilot"
    shutil.copytree(h.CHART_DIR, broken)
    schema = broken / "values.schema.json"
    schema.write_text(schema.read_text().replace('"type": "boolean"', '"type": "bool"', 1))
    with pytest.raises(h.HelmError) as exc:
        h.template(helm=helm, chart=broken)
    assert "not valid against metaschema" in exc.value.output
