"""The chart's operator RBAC is exactly the documented list: docs/helm.md's table (the chart's own
documentation) and docs/rbac.md (what the operator's code calls, kept by the operator's authors).

A verb the operator starts using without a chart change fails here (and would fail the e2e run with
the chart's ServiceAccount); a verb the chart grants that nobody documents fails here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lagpilot_dev import helm as h

ROOT = Path(__file__).resolve().parents[2]
Triple = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

# kopf's own cluster-wide, read-only scans: off by default (the operator disables them), granted by
# the separate `-scanning` ClusterRole with rbac.clusterScanning; docs/helm.md's prose, not its table
KOPF_SCANNING: set[Triple] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _names(cell: str) -> list[str]:
    """`"" and events.k8s.io` → ["", "events.k8s.io"]; `core` / `(core)` → ""."""
    out = []
    for part in re.split(r",|\band\b|/(?=\s)", cell):
        p = part.strip().strip("`").strip()
        if p in ('""', "''", "core", "(core)", "core/v1", "v1"):
            p = ""
        elif not p:
            continue
        out.append(p)
    return out


def parse_rbac_tables(markdown: str) -> set[Triple]:
    """Every (group, resource, verb) in markdown tables whose header names a group, a resource and
    verbs column. Table rows may list several groups, resources or verbs separated by commas."""
    triples: set[Triple] = set()
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        header = lines[i]
        if (
            header.lstrip().startswith("|")
            and i + 1 < len(lines)
            and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1])
        ):
            cols = [c.lower() for c in _cells(header)]
            g = next((n for n, c in enumerate(cols) if "group" in c), None)
            r = next((n for n, c in enumerate(cols) if "resource" in c), None)
            v = next((n for n, c in enumerate(cols) if "verb" in c), None)
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                if None not in (g, r, v):
                    row = _cells(lines[i])
                    groups = _names(row[g]) or [""]  # type: ignore[index]
                    resources = [x.strip().strip("`") for x in row[r].split(",") if x.strip()]  # type: ignore[index]
                    verbs = [x.strip().strip("`") for x in row[v].split(",") if x.strip()]  # type: ignore[index]
                    triples |= {(gr, res, vb) for gr in groups for res in resources for vb in verbs}
                i += 1
            continue
        i += 1
    return triples


def _rule_triples(rules: list[dict]) -> set[Triple]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


@pytest.fixture(scope="module")
def operator_rules() -> set[Triple]:
    """The operator's rules when watching all namespaces: its ClusterRole plus the leader-election
    Role in the release namespace (the Lease; docs/operator.md "Two instances") and the `-crd`
    ClusterRole (the installed CRD's check)."""
    rendered = h.template(release="lp", namespace="lagpilot-system")
    return (
        _rule_triples(rendered.get("ClusterRole", "lp-lagpilot")["rules"])
        | _rule_triples(rendered.get("Role", "lp-lagpilot-leader-election")["rules"])
        | _rule_triples(rendered.get("ClusterRole", "lp-lagpilot-crd")["rules"])
    )


@pytest.mark.parametrize(
    "values", [{}, {"watchNamespaces": ["a"]}], ids=["all-namespaces", "watch-namespaces"]
)
def test_the_crd_is_readable_by_its_name_only_in_both_modes(values: dict) -> None:
    rendered = h.template(values, release="lp", namespace="lagpilot-system")
    role = rendered.get("ClusterRole", "lp-lagpilot-crd")
    assert role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": ["batchconsumergroups.lagpilot.io"],
            "verbs": ["get"],
        }
    ]
    binding = rendered.get("ClusterRoleBinding", "lp-lagpilot-crd")
    assert binding["roleRef"]["name"] == "lp-lagpilot-crd"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "lp-lagpilot", "namespace": "lagpilot-system"}
    ]


def test_leases_are_granted_only_in_the_release_namespace_and_only_by_name() -> None:
    rendered = h.template(release="lp", namespace="lagpilot-system")
    cluster = _rule_triples(rendered.get("ClusterRole", "lp-lagpilot")["rules"])
    assert not {t for t in cluster if t[1] == "leases"}  # not cluster-wide
    role = rendered.get("Role", "lp-lagpilot-leader-election")
    assert role["metadata"]["namespace"] == "lagpilot-system"
    by_verb = {v: r.get("resourceNames") for r in role["rules"] for v in r["verbs"]}
    assert by_verb == {"create": None, "get": ["lagpilot-operator"], "update": ["lagpilot-operator"]}
    # watching named namespaces: the Lease lives in each of them, in the operator's Role there
    ns = h.template({"watchNamespaces": ["a"]}, release="lp", namespace="lagpilot-system")
    assert ("coordination.k8s.io", "leases", "update") in _rule_triples(
        ns.get("Role", "lp-lagpilot")["rules"]
    )
    assert not [o for o in ns.of_kind("Role") if o["metadata"]["name"] == "lp-lagpilot-leader-election"]


@pytest.fixture(scope="module")
def scanning_rules() -> set[Triple]:
    rendered = h.template(
        {"watchNamespaces": ["a"], "rbac": {"create": True, "clusterScanning": True}},
        release="lp",
        namespace="lagpilot-system",
    )
    return _rule_triples(rendered.get("ClusterRole", "lp-lagpilot-scanning")["rules"])


def test_parser_reads_multi_value_cells() -> None:
    md = (
        "| API group | resource | verbs | why |\n|---|---|---|---|\n"
        '| "" and events.k8s.io | events | create, patch | x |\n| apps | `deployments` | get | y |\n'
        "\n| other | table |\n|---|---|\n| a | b |\n"
    )
    assert parse_rbac_tables(md) == {
        ("", "events", "create"),
        ("", "events", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        ("apps", "deployments", "get"),
    }


def test_chart_rules_equal_the_table_in_docs_helm_md(operator_rules: set[Triple]) -> None:
    documented = parse_rbac_tables((ROOT / "docs" / "helm.md").read_text())
    assert documented, "no RBAC table found in docs/helm.md"
    assert operator_rules - documented == set(), "granted by the chart but not documented in docs/helm.md"
    assert documented - operator_rules == set(), "documented in docs/helm.md but not granted by the chart"


def test_scanning_role_is_exactly_kopfs_read_only_scans(scanning_rules: set[Triple]) -> None:
    assert scanning_rules == KOPF_SCANNING


def test_chart_rules_cover_docs_rbac_md(operator_rules: set[Triple], scanning_rules: set[Triple]) -> None:
    path = ROOT / "docs" / "rbac.md"
    if not path.is_file():
        pytest.skip("docs/rbac.md (the operator's own list of API calls) is not written yet")
    needed = parse_rbac_tables(path.read_text())
    assert needed, "docs/rbac.md has no table with group / resource / verbs columns"
    granted = operator_rules | scanning_rules
    assert needed - granted == set(), (
        "the operator needs these (docs/rbac.md) but the chart does not grant them"
    )
    assert operator_rules - needed == set(), "the chart grants these but docs/rbac.md does not list them"


def test_spark_applications_are_granted_only_when_asked() -> None:
    rendered = h.template(
        {"rbac": {"create": True, "sparkApplications": True}}, release="lp", namespace="lagpilot-system"
    )
    granted = _rule_triples(rendered.get("ClusterRole", "lp-lagpilot")["rules"])
    wanted = {("sparkoperator.k8s.io", "sparkapplications", v) for v in ("get", "create", "delete")}
    assert wanted <= granted
    default = _rule_triples(
        h.template(release="lp", namespace="lagpilot-system").get("ClusterRole", "lp-lagpilot")["rules"]
    )
    assert not wanted & default  # least privilege: the default launcher (a Job) needs none of it
