"""The chart in its ecosystem (issue 28 item 5): `global` values (subchart use), Artifact Hub
annotations, the generated README, the `helm test` hook, the LICENSE, runbook links on every alert.

Rendered by the real helm (no cluster); the hook and the subchart install on the real API server are
in tests/real/test_chart.py, the runbook links under promtool in tests/real/test_prometheus.py.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot_dev import chart_readme
from lagpilot_dev import helm as h

REPO = Path(h.REPO_ROOT)
CHART = Path(h.CHART_DIR)
NS = "lagpilot-system"


@pytest.fixture(scope="module")
def helm() -> Path:
    return h.ensure_helm()


def runbook_sections(text: str) -> set[str]:
    """GitHub's anchors of the markdown headings (lower case, spaces to '-', punctuation dropped)."""
    out = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            out.add(re.sub(r"[^a-z0-9 _-]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def broken_runbook_links(rules: list[dict[str, Any]], base: str, runbook: str) -> list[str]:
    """Alerts whose runbook_url is missing, not under `base`, or names no section of `runbook`."""
    sections = runbook_sections(runbook)
    bad = []
    for r in rules:
        url = r.get("annotations", {}).get("runbook_url", "")
        page, _, anchor = url.partition("#")
        if page != base or anchor not in sections or anchor != r["alert"].lower():
            bad.append(f"{r['alert']}: {url!r}")
    return bad


def _rules(r: h.Rendered) -> list[dict[str, Any]]:
    (rule,) = r.of_kind("PrometheusRule")
    return [x for g in rule["spec"]["groups"] for x in g["rules"]]


# ------------------------------------------------------------------ global values / subchart


def test_global_values_are_accepted(helm: Path) -> None:
    r = h.template(
        {"global": {"imageRegistry": "registry.example.com", "anything": {"nested": True}}},
        release="lp",
        namespace=NS,
        helm=helm,
    )
    assert r.of_kind("Deployment")
    # the strict schema still rejects a typo next to it
    with pytest.raises(h.HelmError) as exc:
        h.template({"global": {}, "replica": 2}, release="lp", namespace=NS, helm=helm)
    assert "replica" in exc.value.output


def _parent_chart(tmp: Path) -> Path:
    parent = tmp / "platform"
    (parent / "charts").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [
                    {"name": "lagpilot", "version": "0.1.0", "repository": "file://../lagpilot"}
                ],
            }
        )
    )
    (parent / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "registry.example.com", "storageClass": "fast"},
                "lagpilot": {"watchNamespaces": ["team-a"]},
            }
        )
    )
    shutil.copytree(CHART, parent / "charts" / "lagpilot")
    return parent


def test_subchart_with_global_values_renders(helm: Path, tmp_path: Path) -> None:
    """helm/helm#10392: a parent's `global` reaches the subchart's values; a strict schema without
    `global` fails the parent's install. Rendered as the parent chart."""
    parent = _parent_chart(tmp_path)
    r = h.template(release="plat", namespace=NS, helm=helm, chart=parent)
    dep = r.get("Deployment", "plat-lagpilot")
    assert "--namespace=team-a" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert h.lint(helm=helm, chart=parent)


def test_subchart_without_global_in_the_schema_fails(helm: Path, tmp_path: Path) -> None:
    """The check above can fail: the schema as it was (no `global`) rejects the parent's globals."""
    import json

    parent = _parent_chart(tmp_path)
    schema_path = parent / "charts" / "lagpilot" / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    del schema["properties"]["global"]
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(h.HelmError) as exc:
        h.template(release="plat", namespace=NS, helm=helm, chart=parent)
    assert "global" in exc.value.output


# ------------------------------------------------------------------ Artifact Hub, LICENSE, README


def test_artifact_hub_annotations_match_the_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    ann = chart["annotations"]
    crd = yaml.safe_load((CHART / "crds" / "batchconsumergroup.yaml").read_text())
    (card,) = yaml.safe_load(ann["artifacthub.io/crds"])
    assert (card["kind"], card["name"]) == (crd["spec"]["names"]["kind"], crd["metadata"]["name"])
    assert card["version"] in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    assert card["displayName"] and card["description"]
    (example,) = yaml.safe_load(ann["artifacthub.io/crdsExamples"])
    assert (
        example["kind"] == card["kind"]
        and example["apiVersion"] == f"{crd['spec']['group']}/{card['version']}"
    )
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert ann["artifacthub.io/license"] == pyproject["project"]["license"] == "Apache-2.0"
    assert ann["artifacthub.io/operator"] == "true"
    assert ann["artifacthub.io/operatorCapabilities"].lower() in (
        "basic install",
        "seamless upgrades",
        "full lifecycle",
        "deep insights",
        "auto pilot",
    )
    assert ann["artifacthub.io/category"] in (
        "streaming-messaging",
        "monitoring-logging",
        "integration-delivery",
    )
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    (image,) = yaml.safe_load(ann["artifacthub.io/images"])
    assert image["image"] == f"{values['image']['repository']}:{chart['appVersion']}"
    links = yaml.safe_load(ann["artifacthub.io/links"])
    assert all(link["name"] and link["url"].startswith("https://") for link in links)
    # the runbook link is where the alerts point
    assert any(link["url"] == values["prometheusRule"]["runbookURL"] for link in links)


def test_the_example_cr_is_valid_for_the_crd_schema() -> None:
    """The crdsExamples CR against the CRD's structural schema (required fields, types)."""
    from tests.unit.test_crd_schema import SCHEMA, validate  # the repo's structural checker of the CRD

    ann = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]
    (example,) = yaml.safe_load(ann["artifacthub.io/crdsExamples"])
    assert validate(SCHEMA, example) == []
    assert validate(SCHEMA, {**example, "spec": {**example["spec"], "topic": 7}}) != []


def test_license_file_is_apache_2_and_ships_with_the_chart() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert (CHART / "LICENSE").read_text() == text


def test_chart_readme_is_generated_from_values() -> None:
    readme = (CHART / "README.md").read_text()
    assert readme == chart_readme.render(CHART), (
        "charts/lagpilot/README.md is stale: python -m lagpilot_dev.chart_readme"
    )
    values = chart_readme.documented_values((CHART / "values.yaml").read_text())
    keys = {v.key for v in values}
    assert {"image.repository", "helmTest.enabled", "prometheusRule.runbookURL", "watchNamespaces"} <= keys
    for v in values:
        assert f"| {v.key} |" in readme


def test_readme_check_notices_a_stale_readme(tmp_path: Path) -> None:
    chart = tmp_path / "lagpilot"
    shutil.copytree(CHART, chart)
    assert chart_readme.main(["--check", "--chart", str(chart)]) == 0
    (chart / "values.yaml").write_text(
        (chart / "values.yaml")
        .read_text()
        .replace("# -- Override the chart name used in resource names.", "# -- A changed description.")
    )
    assert chart_readme.main(["--check", "--chart", str(chart)]) == 1


# ------------------------------------------------------------------ helm test hook


def test_helm_test_hook_checks_the_metrics_service(helm: Path) -> None:
    r = h.template(release="lp", namespace=NS, helm=helm)
    pod = r.get("Pod", "lp-lagpilot-test-metrics")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    svc = r.get("Service", "lp-lagpilot-metrics")
    assert env["LAGPILOT_TEST_METRICS_URL"] == f"http://{svc['metadata']['name']}.{NS}.svc:9090/metrics"
    assert env["LAGPILOT_TEST_EXPECT_LEADER"] == "true"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # no metrics Service, no test; or switched off
    assert not h.template({"metrics": {"enabled": False}}, release="lp", namespace=NS, helm=helm).of_kind(
        "Pod"
    )
    assert not h.template({"helmTest": {"enabled": False}}, release="lp", namespace=NS, helm=helm).of_kind(
        "Pod"
    )


# ------------------------------------------------------------------ runbook links


def test_every_alert_links_to_a_runbook_section(helm: Path) -> None:
    r = h.template({"prometheusRule": {"enabled": True}}, release="lp", namespace=NS, helm=helm)
    rules = _rules(r)
    base = yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]["runbookURL"]
    runbook = (REPO / "docs" / "runbook.md").read_text()
    assert base.endswith("/docs/runbook.md")
    assert len(rules) == 10 and broken_runbook_links(rules, base, runbook) == []
    # the link check can fail: a section missing from the runbook is reported
    assert broken_runbook_links(
        rules, base, runbook.replace("## LagpilotDrainStalled", "## Stalled drains")
    ) == [f"LagpilotDrainStalled: '{base}#lagpilotdrainstalled'"]


def test_runbook_url_is_a_value(helm: Path) -> None:
    r = h.template(
        {"prometheusRule": {"enabled": True, "runbookURL": "https://wiki.example.com/lagpilot/"}},
        release="lp",
        namespace=NS,
        helm=helm,
    )
    urls = {x["annotations"]["runbook_url"] for x in _rules(r)}
    assert "https://wiki.example.com/lagpilot#lagpilotdataloss" in urls
    with pytest.raises(h.HelmError) as exc:
        h.template(
            set_values=["prometheusRule.runbookURL=https://x/y#z"], release="lp", namespace=NS, helm=helm
        )
    assert "/prometheusRule/runbookURL" in exc.value.output
