"""The chart's PrometheusRule and Grafana dashboard, rendered by the real helm (no cluster).

Their behaviour is tested by `promtool test rules` and on a real Prometheus (tests/real/test_prometheus.py);
here: switches, schema, and that every metric they name is one the operator or the consumer exports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from lagpilot.metrics import OperatorMetrics
from lagpilot_dev import helm as h
from lagpilot_runtime.metrics import ConsumerMetrics

NS = "lagpilot-system"
RELEASE = "lp"
FULL = "lp-lagpilot"
ON = {"prometheusRule": {"enabled": True}, "grafanaDashboard": {"enabled": True}}
# the five panels the dashboard must have (docs/observability.md describes them)
REQUIRED_PANELS = (
    "Lag per partition",
    "Projected catch-up vs SLA",
    "Replicas",
    "Drain tasks",
    "Records within SLA",
)
METRIC = re.compile(r"\blagpilot_[a-z0-9_]+\b")


@pytest.fixture(scope="module")
def helm() -> Path:
    return h.ensure_helm()


@pytest.fixture(scope="module")
def on(helm: Path) -> h.Rendered:
    return h.template(ON, release=RELEASE, namespace=NS, helm=helm)


def exported_names() -> set[str]:
    """Every sample name the operator's and the consumer's registries expose (histogram and counter
    suffixes included), from the real metric classes."""
    names: set[str] = set()
    regs = [CollectorRegistry(), CollectorRegistry()]
    OperatorMetrics(regs[0])
    ConsumerMetrics(regs[1])
    for reg in regs:
        for family in reg.collect():
            names.add(family.name)
            names.update({f"{family.name}{s}" for s in ("_total", "_count", "_sum", "_bucket", "_created")})
    return names


def unknown_metrics(exprs: Iterable[str]) -> set[str]:
    known = exported_names()
    return {m for e in exprs for m in METRIC.findall(e) if m not in known}


def _rules(r: h.Rendered) -> list[dict[str, Any]]:
    (rule,) = r.of_kind("PrometheusRule")
    return [x for g in rule["spec"]["groups"] for x in g["rules"]]


def _dashboard(r: h.Rendered) -> dict[str, Any]:
    (cm,) = [o for o in r.of_kind("ConfigMap") if o["metadata"]["name"] == f"{FULL}-dashboard"]
    return json.loads(cm["data"]["lagpilot.json"])


def _dashboard_exprs(d: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in d["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_lint_strict_with_both_on(helm: Path) -> None:
    assert "0 chart(s) failed" in h.lint(ON, helm=helm)


def test_both_are_off_by_default(helm: Path) -> None:
    r = h.template(release=RELEASE, namespace=NS, helm=helm)
    assert r.of_kind("PrometheusRule") == []
    assert [o for o in r.of_kind("ConfigMap") if o["metadata"]["name"].endswith("-dashboard")] == []


def test_the_alerts_and_their_labels(on: h.Rendered) -> None:
    rules = {x["alert"]: x for x in _rules(on)}
    assert set(rules) == {
        "LagpilotCatchUpOverSLA",
        "LagpilotLagGrowingAtMaxReplicas",
        "LagpilotDrainFailed",
        "LagpilotDrainCancelled",
        "LagpilotDataLoss",
        "LagpilotGroupDegraded",
        "LagpilotConsumerStuck",
        "LagpilotOperatorDown",
        "LagpilotOperatorNotReconciling",
        "LagpilotDrainStalled",
    }
    assert all(x["labels"]["severity"] in ("info", "warning", "critical") for x in rules.values())
    assert all(x["annotations"]["summary"] and x["annotations"]["description"] for x in rules.values())
    assert rules["LagpilotCatchUpOverSLA"]["for"] == "10m"
    # H3: a drain attempt the operator stopped for lack of progress (or of a running pod)
    # the condition's series carry type and status only; the reason series adds the reason label
    assert " ".join(rules["LagpilotDrainStalled"]["expr"].split()) == (
        'lagpilot_status_condition{type="DrainStalled", status="True"} * on (namespace, name, type) '
        'group_left (reason) lagpilot_status_condition_reason{type="DrainStalled"} == 1'
    )
    assert rules["LagpilotDrainStalled"]["labels"]["severity"] == "warning"
    # the operator-down job is the metrics Service's name: the job a ServiceMonitor scrape gets
    svc = on.get("Service", f"{FULL}-metrics")
    assert f'up{{job="{svc["metadata"]["name"]}"}}' in rules["LagpilotOperatorDown"]["expr"]


def test_every_metric_the_rules_and_dashboard_name_is_exported(on: h.Rendered) -> None:
    exprs = [x["expr"] for x in _rules(on)] + _dashboard_exprs(_dashboard(on))
    named = {m for e in exprs for m in METRIC.findall(e)}
    assert len(named) >= 15, named
    assert unknown_metrics(exprs) == set()


def test_the_name_check_notices_an_invented_metric() -> None:
    """The check above must be able to fail."""
    assert unknown_metrics(["rate(lagpilot_drains_failed_total[5m]) > 0 and lagpilot_lag_records > 0"]) == {
        "lagpilot_drains_failed_total"
    }


def test_values_switch_the_rules(helm: Path) -> None:
    r = h.template(
        {
            "prometheusRule": {
                "enabled": True,
                "operatorJob": "lagpilot-operator",
                "disabled": ["LagpilotDrainCancelled"],
                "additionalAlertLabels": {"team": "data"},
                "labels": {"release": "prom"},
                "for": {"catchUpOverSLA": "4s"},
            }
        },
        release=RELEASE,
        namespace=NS,
        helm=helm,
    )
    rules = {x["alert"]: x for x in _rules(r)}
    assert "LagpilotDrainCancelled" not in rules
    assert rules["LagpilotCatchUpOverSLA"]["for"] == "4s"
    assert rules["LagpilotLagGrowingAtMaxReplicas"]["for"] == "15m"  # the other defaults stay
    assert all(x["labels"]["team"] == "data" for x in rules.values())
    assert 'up{job="lagpilot-operator"}' in rules["LagpilotOperatorDown"]["expr"]
    assert r.of_kind("PrometheusRule")[0]["metadata"]["labels"]["release"] == "prom"


@pytest.mark.parametrize(
    ("set_value", "complaint"),
    [
        ("prometheusRule.for.catchUpOverSLA=soon", "/prometheusRule/for/catchUpOverSLA"),
        ("prometheusRule.for.catchUpOverSLa=5m", "catchUpOverSLa"),
        ("prometheusRule.disabled={LagpilotNoSuchAlert}", "/prometheusRule/disabled/0"),
        ('prometheusRule.operatorJob=a"b', "/prometheusRule/operatorJob"),
        ("prometheusRule.consumerStuckSeconds=0", "/prometheusRule/consumerStuckSeconds"),
        ("grafanaDashboard.enabled=yes", "/grafanaDashboard/enabled"),
        ("grafanaDashboard.folder=x", "folder"),
    ],
    ids=["duration", "typo-key", "unknown-alert", "job-quote", "stuck-seconds", "bool", "unknown-key"],
)
def test_schema_rejects_bad_values(helm: Path, set_value: str, complaint: str) -> None:
    with pytest.raises(h.HelmError) as exc:
        h.template(release=RELEASE, namespace=NS, set_values=[set_value], helm=helm)
    assert "schema" in exc.value.output and complaint in exc.value.output


def test_dashboard_panels(on: h.Rendered) -> None:
    (cm,) = [o for o in on.of_kind("ConfigMap") if o["metadata"]["name"] == f"{FULL}-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    d = _dashboard(on)
    titles = [p["title"] for p in d["panels"]]
    assert all(t in titles for t in REQUIRED_PANELS), titles
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    assert all(p["targets"] and p["description"] for p in d["panels"])
    assert all(t["datasource"]["uid"] == "${datasource}" for p in d["panels"] for t in p["targets"])
    # the file in the chart is what the ConfigMap carries
    chart_file = Path(h.CHART_DIR) / "dashboards" / "lagpilot.json"
    assert json.loads(chart_file.read_text()) == d


def test_pod_monitor_scrapes_the_consumer_pods_the_operator_creates(helm: Path) -> None:
    from lagpilot.act.deployment import GROUP_LABEL, HTTP_PORT, labels

    assert h.template(release=RELEASE, namespace=NS, helm=helm).of_kind("PodMonitor") == []
    r = h.template(
        {"podMonitor": {"enabled": True}, "watchNamespaces": ["team-a"]},
        release=RELEASE,
        namespace=NS,
        helm=helm,
    )
    (pm,) = r.of_kind("PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    # its selector matches the labels the operator puts on consumer pods, its port is theirs
    pod_labels = labels("orders", "1.0")
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    # the port name is the consumer container's (operator/src/lagpilot/act/deployment.py)
    src = (Path(h.REPO_ROOT) / "operator" / "src" / "lagpilot" / "act" / "deployment.py").read_text()
    assert ep["port"] == "http" and '"name": "http", "containerPort": HTTP_PORT' in src and HTTP_PORT == 8080
    label = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", GROUP_LABEL)
    assert ep["relabelings"][0]["sourceLabels"] == [label]
    r_all = h.template({"podMonitor": {"enabled": True}}, release=RELEASE, namespace=NS, helm=helm)
    assert r_all.of_kind("PodMonitor")[0]["spec"]["namespaceSelector"] == {"any": True}


def test_service_monitor_keeps_the_groups_namespace_label(helm: Path) -> None:
    """Without honorLabels the target's namespace (the operator's) would replace each group's."""
    r = h.template({"serviceMonitor": {"enabled": True}}, release=RELEASE, namespace=NS, helm=helm)
    assert r.of_kind("ServiceMonitor")[0]["spec"]["endpoints"][0]["honorLabels"] is True
