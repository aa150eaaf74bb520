"""The chart's alert rules on Debian's Prometheus (the dev stack's `prometheus` part).

- `promtool test rules` on the rules rendered from charts/lagpilot (what ships, not a copy): each
  alert fires after its `for:` and not before, and not for the look-alike that must not page; a
  wrong expectation makes promtool fail (so the passing run proves something);
- on the real Prometheus, scraping the operator (file-based discovery) and the consumer pods on the
  real node: Prometheus's own Kubernetes discovery (role pod) when its build has it, read back from
  /api/v1/targets; else (Debian's package has none) file-SD fed from the API's running pods at their
  IP (`prometheus.node_pod_targets`): a group that cannot catch up (slow handler, maxReplicas 1, drain off) fires
  LagpilotCatchUpOverSLA, read from /api/v1/alerts; every dashboard query parses and runs; the
  operator SIGKILLed fires LagpilotOperatorDown.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot_dev import prometheus as prom
from tests.fixtures.kube import wait_until
from tests.fixtures.node import Pods
from tests.real.test_operator_e2e import Operator, apply_cr, cr, crd, produce, start_operator  # noqa: F401 - fixtures

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
OP_JOB = "lp-lagpilot-metrics"  # the chart's default operator job for release "lp" (the metrics Service)
BASE = {"job": OP_JOB, "instance": "10.0.0.7:9090", "namespace": "shop", "name": "orders"}


@pytest.fixture(scope="session")
def prometheus(stack: Any) -> prom.PrometheusPart:
    """Debian's Prometheus from the dev stack (started or reused; a test-started one stops with the session)."""
    stack.up(["prometheus"], by_tests=True)
    return stack.part("prometheus")


# --------------------------------------------------------------------------- promtool test rules


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    lab = {**BASE, **labels}
    return {
        "series": metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(lab.items())) + "}",
        "values": values,
    }


def _subst(text: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)


def _alert(
    rules: dict[str, dict[str, Any]],
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An expected alert: the rule's labels + the series' labels; annotations with $labels filled in
    (the ones that print $value are given literally by the caller)."""
    rule = rules[name]
    exp = {k: _subst(v, labels) for k, v in rule["annotations"].items()}
    exp.update(annotations or {})
    return {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": exp}


def promtool_tests(rules: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One promtool test case per alert (1-minute samples)."""
    g = dict(BASE)
    return [
        {
            "name": "catch-up over SLA for 10m; a group within its SLA stays quiet",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_projected_catch_up_seconds", "100x20"),
                _series("lagpilot_sla_seconds", "60x20"),
                _series("lagpilot_projected_catch_up_seconds", "30x20", name="billing"),
                _series("lagpilot_sla_seconds", "60x20", name="billing"),
            ],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": "LagpilotCatchUpOverSLA", "exp_alerts": []},
                {
                    "eval_time": "11m",
                    "alertname": "LagpilotCatchUpOverSLA",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "LagpilotCatchUpOverSLA",
                            g,
                            {
                                "description": "At its current replicas the group is projected to catch up in 1m 40s, longer than its "
                                "catchUpSLASeconds. lagpilot scales up when it can; see kubectl describe bcg orders -n shop "
                                "(CatchUpAtRisk)."
                            },
                        )
                    ],
                },
            ],
        },
        {
            "name": "lag grows at the replica cap; a group below its cap does not page",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_lag_records", "0+100x40"),
                _series("lagpilot_replicas", "3x40"),
                _series("lagpilot_max_replicas", "3x40"),
                _series("lagpilot_partitions", "6x40"),
                _series("lagpilot_lag_records", "0+100x40", name="billing"),
                _series("lagpilot_replicas", "1x40", name="billing"),
                _series("lagpilot_max_replicas", "3x40", name="billing"),
                _series("lagpilot_partitions", "6x40", name="billing"),
            ],
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": "LagpilotLagGrowingAtMaxReplicas", "exp_alerts": []},
                {
                    "eval_time": "30m",
                    "alertname": "LagpilotLagGrowingAtMaxReplicas",
                    "exp_alerts": [_alert(rules, "LagpilotLagGrowingAtMaxReplicas", g)],
                },
            ],
        },
        {
            "name": "drain failed and drain cancelled",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_status_condition", "1x5", type="Draining", status="False"),
                _series("lagpilot_status_condition_reason", "1x5", type="Draining", reason="DrainFailed"),
                _series("lagpilot_status_condition", "1x5", type="Draining", status="True", name="billing"),
                _series(
                    "lagpilot_status_condition_reason",
                    "1x5",
                    type="Draining",
                    reason="DrainRunning",
                    name="billing",
                ),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "2m",
                    "alertname": "LagpilotDrainFailed",
                    "exp_alerts": [
                        _alert(
                            rules, "LagpilotDrainFailed", {**g, "type": "Draining", "reason": "DrainFailed"}
                        )
                    ],
                },
                {"eval_time": "2m", "alertname": "LagpilotDrainCancelled", "exp_alerts": []},
            ],
        },
        {
            "name": "a stalled drain attempt (H3); a drain that moves again stays quiet",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_status_condition", "1x5", type="DrainStalled", status="True"),
                _series("lagpilot_status_condition", "0x5", type="DrainStalled", status="False"),
                _series("lagpilot_status_condition_reason", "1x5", type="DrainStalled", reason="NoProgress"),
                _series(
                    "lagpilot_status_condition", "0x5", type="DrainStalled", status="True", name="billing"
                ),
                _series(
                    "lagpilot_status_condition", "1x5", type="DrainStalled", status="False", name="billing"
                ),
                _series(
                    "lagpilot_status_condition_reason",
                    "1x5",
                    type="DrainStalled",
                    reason="Progressing",
                    name="billing",
                ),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "2m",
                    "alertname": "LagpilotDrainStalled",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "LagpilotDrainStalled",
                            {**g, "type": "DrainStalled", "status": "True", "reason": "NoProgress"},
                        )
                    ],
                }
            ],
        },
        {
            "name": "data lost to retention",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_data_loss_records", "0 0 0 5 5 5 5"),
                _series("lagpilot_data_loss_records", "7x6", name="billing"),
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "LagpilotDataLoss", "exp_alerts": []},
                {
                    "eval_time": "4m",
                    "alertname": "LagpilotDataLoss",
                    "exp_alerts": [_alert(rules, "LagpilotDataLoss", g)],
                },
            ],
        },
        {
            "name": "degraded for 10m, but not for data loss (its own alert)",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_status_condition", "1x15", type="Degraded", status="True"),
                _series(
                    "lagpilot_status_condition_reason", "1x15", type="Degraded", reason="KafkaUnreachable"
                ),
                _series("lagpilot_status_condition", "1x15", type="Degraded", status="True", name="billing"),
                _series(
                    "lagpilot_status_condition_reason",
                    "1x15",
                    type="Degraded",
                    reason="DataLoss",
                    name="billing",
                ),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "11m",
                    "alertname": "LagpilotGroupDegraded",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "LagpilotGroupDegraded",
                            {**g, "type": "Degraded", "status": "True", "reason": "KafkaUnreachable"},
                        )
                    ],
                }
            ],
        },
        {
            "name": "a consumer that stopped coming back to Kafka",
            "interval": "1m",
            "input_series": [
                {
                    "series": 'lagpilot_consumer_last_progress_timestamp_seconds{job="lagpilot-consumers",namespace="shop",pod="orders-consumer-0"}',
                    "values": "0x15",
                },
                {
                    "series": 'lagpilot_consumer_last_progress_timestamp_seconds{job="lagpilot-consumers",namespace="shop",pod="orders-consumer-1"}',
                    "values": "0+60x15",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": "LagpilotConsumerStuck", "exp_alerts": []},
                {
                    "eval_time": "11m",
                    "alertname": "LagpilotConsumerStuck",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "LagpilotConsumerStuck",
                            {"job": "lagpilot-consumers", "namespace": "shop", "pod": "orders-consumer-0"},
                            {
                                "description": "The consumer's loop has not come back to Kafka for 11m 0s (a handler stuck in one batch?). "
                                "Its liveness probe restarts it when this exceeds LAGPILOT_LIVENESS_STALE_SECONDS."
                            },
                        )
                    ],
                },
            ],
        },
        {
            "name": "operator down: failed scrapes, then no target at all",
            "interval": "1m",
            "input_series": [
                {
                    "series": f'up{{job="{OP_JOB}",instance="10.0.0.7:9090"}}',
                    "values": "1 1 1 0 0 0 0 0 0 0 0 _x20",
                }
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "LagpilotOperatorDown", "exp_alerts": []},
                {
                    "eval_time": "9m",
                    "alertname": "LagpilotOperatorDown",
                    "exp_alerts": [
                        _alert(rules, "LagpilotOperatorDown", {"job": OP_JOB, "instance": "10.0.0.7:9090"})
                    ],
                },
                {
                    "eval_time": "25m",
                    "alertname": "LagpilotOperatorDown",
                    "exp_alerts": [_alert(rules, "LagpilotOperatorDown", {"job": OP_JOB})],
                },
            ],
        },
        {
            "name": "operator up, serving groups, running no cycles",
            "interval": "1m",
            "input_series": [
                _series("lagpilot_cycle_duration_seconds_count", "0+10x5 50x20", name="", namespace=""),
                _series("lagpilot_sla_seconds", "60x25"),
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "LagpilotOperatorNotReconciling", "exp_alerts": []},
                {
                    "eval_time": "22m",
                    "alertname": "LagpilotOperatorNotReconciling",
                    "exp_alerts": [_alert(rules, "LagpilotOperatorNotReconciling", {"job": OP_JOB})],
                },
            ],
        },
    ]


def run_promtool(
    prometheus: prom.PrometheusPart, tmp_path: Path, tests: list[dict[str, Any]], rules_text: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yml").write_text(rules_text)
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
            width=10_000,
        )
    )
    return subprocess.run(
        [str(prometheus.promtool()), "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def shipped_rules() -> tuple[str, dict[str, dict[str, Any]]]:
    """The chart's rules for release "lp" with the default values."""
    text = prom.rules_from_chart(release="lp")
    rules = {r["alert"]: r for g in yaml.safe_load(text)["groups"] for r in g["rules"]}
    return text, rules


def test_promtool_unit_tests_of_the_shipped_rules(
    prometheus: prom.PrometheusPart, tmp_path: Path, shipped_rules: tuple[str, dict[str, Any]]
) -> None:
    text, rules = shipped_rules
    tests = promtool_tests(rules)
    tested = {t["alertname"] for case in tests for t in case["alert_rule_test"]}
    assert tested == set(rules), f"alerts without a promtool test: {set(rules) - tested}"
    # every alert links to its section of docs/runbook.md (promtool compares the annotation too)
    from tests.unit.test_chart_ecosystem import broken_runbook_links

    base = yaml.safe_load((REPO / "charts" / "lagpilot" / "values.yaml").read_text())["prometheusRule"][
        "runbookURL"
    ]
    assert broken_runbook_links(list(rules.values()), base, (REPO / "docs" / "runbook.md").read_text()) == []
    assert all(
        t["exp_annotations"]["runbook_url"].startswith(base + "#")
        for case in tests
        for t in case["alert_rule_test"]
        for t in t["exp_alerts"]
    )
    proc = run_promtool(prometheus, tmp_path, tests, text)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout


@pytest.mark.parametrize("mutation", ["early", "wrong-label"])
def test_promtool_fails_on_a_wrong_expectation(
    prometheus: prom.PrometheusPart, tmp_path: Path, shipped_rules: tuple[str, dict[str, Any]], mutation: str
) -> None:
    """The passing run above proves something: expecting the catch-up alert before its `for:` (or
    with another severity) makes promtool fail."""
    text, rules = shipped_rules
    tests = promtool_tests(rules)
    case = tests[0]["alert_rule_test"]
    if mutation == "early":
        case[0]["exp_alerts"] = case[1]["exp_alerts"]  # firing at 9m: before the 10m `for:`
    else:
        case[1]["exp_alerts"][0]["exp_labels"]["severity"] = "critical"
    proc = run_promtool(prometheus, tmp_path, tests, text)
    print(proc.stdout, proc.stderr)
    assert proc.returncode != 0 and "FAILED" in (proc.stdout + proc.stderr)
    assert "LagpilotCatchUpOverSLA" in (proc.stdout + proc.stderr)


# --------------------------------------------------------------------------- the real Prometheus


def test_catch_up_alert_fires_on_the_real_prometheus(
    prometheus: prom.PrometheusPart,
    crd: Any,
    kube_api: Any,
    pods: Pods,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    start_operator: Callable[[str], Operator],
) -> None:
    # the chart's rules with a short `for:` and the dev Prometheus's operator job
    rules_name = f"test-{uuid.uuid4().hex[:6]}"
    prometheus.load_rules(
        rules_name,
        prom.rules_from_chart(
            {
                "prometheusRule": {
                    "operatorJob": prom.OPERATOR_JOB,
                    "for": {"catchUpOverSLA": "4s", "operatorDown": "2s"},
                }
            },
            release="lp",
        ),
    )
    ns = pods.namespace("prom")
    stop_sd = threading.Event()
    if not prometheus.kubernetes_sd():
        # Prometheus discovers the node's pods itself when it can (kubernetes_sd_configs); Debian's
        # build cannot: the namespace's running pods at their IP, from the API (node_pod_targets)
        threading.Thread(
            target=_feed_node_targets, args=(crd, prometheus, ns, stop_sd), daemon=True, name=f"sd-{ns}"
        ).start()
    # a group that cannot catch up: 6,000 records, a consumer does ~100 records/s (10 ms each),
    # one replica at most, no drain: ~60 s of work against a 10 s SLA
    topic = new_topic(partitions=2, prefix="prom")
    produce(kafka_bootstrap, topic, 3000, 2)
    op = start_operator(ns)
    prometheus.add_target("operator", f"{ns}", f"127.0.0.1:{op.metrics_port}", {"namespace_served": ns})
    name = "late"
    try:
        apply_cr(
            crd,
            ns,
            cr(
                name,
                {
                    "kafka": {"bootstrapServers": pods.kafka_bootstrap},
                    "topic": topic,
                    "groupId": f"prom-{uuid.uuid4().hex[:6]}",
                    "batch": {"maxRecords": 50, "timeoutMs": 500},
                    "processing": {
                        "handler": "tests.real.operator_handlers:slow",
                        "config": {"ms_per_record": "10"},
                    },
                    "scaling": {"minReplicas": 1, "maxReplicas": 1, "pollIntervalSeconds": 2},
                    "catchUpSLASeconds": 10,
                    "drain": {"enabled": False},
                    "template": pods.template(),
                },
            ),
        )
        t0 = time.monotonic()
        # both jobs are scraped: the operator, and the group's consumer pod (file-SD: the node's pod
        # IP)
        prom.wait_target_up(prometheus, prom.OPERATOR_JOB, {"namespace_served": ns}, timeout=60)
        pod_target = prom.wait_target_up(
            prometheus, prom.CONSUMER_JOB, {"namespace": ns, "group": name}, timeout=90
        )
        print("consumer pod target:", pod_target["labels"], pod_target["scrapeUrl"])
        if prometheus.kubernetes_sd():
            items = json.loads(crd.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
            pod = {p["metadata"]["name"]: p for p in items}[pod_target["labels"]["pod"]]
            assert pod_target["discoveredLabels"]["__meta_kubernetes_pod_name"] == pod["metadata"]["name"]
            assert pod_target["scrapeUrl"] == f"http://{pod['status']['podIP']}:8080/metrics"

        def firing() -> dict[str, Any] | None:
            for a in prometheus.alerts():
                lab = a["labels"]
                if (
                    lab.get("alertname") == "LagpilotCatchUpOverSLA"
                    and lab.get("namespace") == ns
                    and lab.get("name") == name
                    and a["state"] == "firing"
                ):
                    return a
            return None

        alert = wait_until(firing, "LagpilotCatchUpOverSLA firing", timeout=90, interval=1)
        print(f"fired {time.monotonic() - t0:.0f}s after the CR was applied:", json.dumps(alert))
        assert alert["labels"]["severity"] == "warning"
        assert float(alert["value"]) > 10  # the projected catch-up, above the 10 s SLA (+Inf: never)
        assert f"{ns}/{name}" in alert["annotations"]["summary"]
        # what Prometheus scraped agrees with the CR: the same SLA, one replica at most
        (sla,) = prometheus.query(f'lagpilot_sla_seconds{{namespace="{ns}",name="{name}"}}')
        assert float(sla["value"][1]) == 10
        (cap,) = prometheus.query(f'lagpilot_max_replicas{{namespace="{ns}",name="{name}"}}')
        assert float(cap["value"][1]) == 1
        # the status as metrics: the CatchUpAtRisk condition the CR shows, and no drain
        risk = prometheus.query(
            f'lagpilot_status_condition{{namespace="{ns}",name="{name}",type="CatchUpAtRisk"}} == 1'
        )
        assert [r["metric"]["status"] for r in risk] == ["True"] and "reason" not in risk[0]["metric"], risk
        why = prometheus.query(
            f'lagpilot_status_condition_reason{{namespace="{ns}",name="{name}",type="CatchUpAtRisk"}}'
        )
        assert [r["metric"]["reason"] for r in why] in (["ProjectedAboveSLA"], ["SLAUnreachable"]), why
        # the per-partition offsets are gauges users can rate(); the build is identified
        assert prometheus.query(f'lagpilot_partition_log_end_offset{{namespace="{ns}",name="{name}"}}')
        assert prometheus.query('lagpilot_build_info{job="lagpilot-operator"}') or prometheus.query(
            "lagpilot_build_info"
        )
        tasks = prometheus.query(f'lagpilot_drain_tasks{{namespace="{ns}",name="{name}"}}')
        assert {r["metric"]["state"]: float(r["value"][1]) for r in tasks} == {"done": 0, "remaining": 0}
        assert prometheus.query(f'lagpilot_consumer_records_processed_total{{namespace="{ns}"}}'), (
            "the consumer pod's own metrics reached Prometheus"
        )
        # every dashboard query parses and runs on this Prometheus
        dash = json.loads((REPO / "charts" / "lagpilot" / "dashboards" / "lagpilot.json").read_text())
        for panel in dash["panels"]:
            for t in panel["targets"]:
                expr = t["expr"].replace("$namespace", ns).replace("$name", name)
                prometheus.query(expr)  # raises on a parse error
        lag = prometheus.query(f'lagpilot_partition_lag_records{{namespace="{ns}",name="{name}"}}')
        assert {s["metric"]["partition"] for s in lag} == {"0", "1"}

        # the operator dies (SIGKILL): its scrape fails and LagpilotOperatorDown fires for it
        instance = f"127.0.0.1:{op.metrics_port}"
        op.kill()
        assert not op.alive()

        def down() -> dict[str, Any] | None:
            return next(
                (
                    a
                    for a in prometheus.alerts()
                    if a["labels"].get("alertname") == "LagpilotOperatorDown"
                    and a["labels"].get("instance") == instance
                    and a["state"] == "firing"
                ),
                None,
            )

        alert = wait_until(down, "LagpilotOperatorDown firing", timeout=60, interval=1)
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["job"] == prom.OPERATOR_JOB
        start_operator(ns)  # a live operator again, for the teardown (the CR's finalizer)
    finally:
        stop_sd.set()
        prometheus.remove_target("operator", ns)
        prometheus.remove_rules(rules_name)


def _feed_node_targets(crd: Any, prometheus: prom.PrometheusPart, ns: str, stop: threading.Event) -> None:
    """Every 2 s until `stop`: a file-SD target for each running pod of `ns` with a metrics port, at
    its pod IP (the host reaches it through the bridge);
    the targets of pods gone are removed, and all of them at the end."""
    written: set[str] = set()
    while True:
        try:
            items = json.loads(crd.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
            now = {}
            for _ns, pod, address, labels in prom.node_pod_targets(items):
                now[pod] = (address, {"namespace": ns, "pod": pod, **labels})
            for pod, (address, labels) in now.items():
                prometheus.add_target("pods", f"{ns}_{pod}", address, labels)
            for pod in written - set(now):
                prometheus.remove_target("pods", f"{ns}_{pod}")
            written = set(now)
        except Exception as exc:  # noqa: BLE001 - an apiserver hiccup: read again next time
            print(f"file-SD for {ns}: {exc!r}")
        if stop.wait(2.0):
            break
    for pod in written:
        prometheus.remove_target("pods", f"{ns}_{pod}")
