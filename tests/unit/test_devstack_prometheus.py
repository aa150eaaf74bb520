"""The dev Prometheus part's pure pieces (config, file-SD targets of the real node's pods; no
Prometheus needed)."""

from __future__ import annotations

import json
from pathlib import Path

from lagpilot_dev import prometheus as prom


def test_config_scrapes_both_jobs_from_file_sd_on_loopback(tmp_path: Path) -> None:
    cfg = json.loads(prom.config_yaml(9999, tmp_path / "sd", tmp_path / "rules"))
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {prom.OPERATOR_JOB, prom.CONSUMER_JOB, "prometheus"}
    assert jobs[prom.CONSUMER_JOB]["file_sd_configs"][0]["files"] == [
        str(tmp_path / "sd" / "pods" / "*.json")
    ]
    assert jobs[prom.OPERATOR_JOB]["honor_labels"] is True  # each group's own namespace label wins
    assert jobs["prometheus"]["static_configs"][0]["targets"] == ["127.0.0.1:9999"]
    assert cfg["rule_files"] == [str(tmp_path / "rules" / "*.yml")]


def test_pod_target_file_round_trip(tmp_path: Path) -> None:
    path = prom.write_pod_target(tmp_path, "ns", "orders-consumer-1", 4321, {"group": "orders"}, "10.244.0.7")
    assert path == tmp_path / "pods" / "ns_orders-consumer-1.json"
    assert json.loads(path.read_text()) == [
        {
            "targets": ["10.244.0.7:4321"],
            "labels": {"namespace": "ns", "pod": "orders-consumer-1", "group": "orders"},
        }
    ]
    assert not list((tmp_path / "pods").glob(".*"))  # no temp file left behind
    prom.remove_pod_target(tmp_path, "ns", "orders-consumer-1")
    assert not path.exists()


def _api_pod(name: str, phase: str, ip: str | None, env: dict[str, str], group: str = "orders") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {"lagpilot.io/group": group}},
        "spec": {"containers": [{"name": "c", "env": [{"name": k, "value": v} for k, v in env.items()]}]},
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


def test_node_pod_targets_are_the_running_pods_with_a_metrics_port_at_their_ip() -> None:
    """On the real node the targets come from the API's pods (their IP, which the host reaches through the bridge, and their own
    LAGPILOT_METRICS_PORT); a pending pod, one without an IP or without a metrics port is none."""
    pods = [
        _api_pod("orders-consumer-a", "Running", "10.244.0.7", {"LAGPILOT_METRICS_PORT": "8080"}),
        _api_pod("orders-consumer-b", "Pending", None, {"LAGPILOT_METRICS_PORT": "8080"}),
        _api_pod("orders-drain-1-x", "Running", "10.244.0.8", {"LAGPILOT_TOPIC": "t"}),
        _api_pod("billing-consumer-c", "Running", "10.244.0.9", {"LAGPILOT_METRICS_PORT": "9000"}, "billing"),
    ]
    assert prom.node_pod_targets(pods) == [
        ("ns", "orders-consumer-a", "10.244.0.7:8080", {"group": "orders"}),
        ("ns", "billing-consumer-c", "10.244.0.9:9000", {"group": "billing"}),
    ]


def test_a_pod_target_names_the_host_it_is_scraped_at(tmp_path: Path) -> None:
    path = prom.write_pod_target(tmp_path, "ns", "p", 8080, {"group": "g"}, host="10.244.0.7")
    assert json.loads(path.read_text())[0]["targets"] == ["10.244.0.7:8080"]


# ---- consumer pods on the real node: Prometheus's own Kubernetes discovery (role: pod) ------------


def _relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's relabelling (keep, drop, replace; fully anchored regex) on one target's labels,
    enough to read the generated rules against discovered pods; None when the target is dropped."""
    import re

    out = dict(labels)
    for r in rules:
        value = r.get("separator", ";").join(out.get(s, "") for s in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        action = r.get("action", "replace")
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            out[r["target_label"]] = m.expand(r.get("replacement", "$1").replace("$", "\\"))
    return {k: v for k, v in out.items() if not k.startswith("__meta_")}


def _discovered(
    port_name: str,
    *,
    ip: str = "10.244.0.7",
    phase: str = "Running",
    component: str = "consumer",
    container: str = "consumer",
) -> dict[str, str]:
    """One target as role: pod discovers it (one per declared container port)."""
    return {
        "__address__": f"{ip}:8080",
        "__meta_kubernetes_namespace": "shop",
        "__meta_kubernetes_pod_name": "orders-consumer-abc",
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_label_app_kubernetes_io_component": component,
        "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by": "lagpilot",
        "__meta_kubernetes_pod_label_lagpilot_io_group": "orders",
    }


def test_consumer_pods_are_discovered_by_prometheus_itself_with_the_given_kubeconfig(tmp_path: Path) -> None:
    kc = tmp_path / "prometheus.kubeconfig"
    cfg = json.loads(prom.config_yaml(9999, tmp_path / "sd", tmp_path / "rules", pods_kubeconfig=kc))
    (job,) = [j for j in cfg["scrape_configs"] if j.get("kubernetes_sd_configs")]
    assert job["job_name"] == prom.CONSUMER_JOB
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "kubeconfig_file": str(kc)}]
    assert "file_sd_configs" not in job


def test_the_pod_relabelling_keeps_what_the_charts_podmonitor_keeps(tmp_path: Path) -> None:
    """The consumer pods the operator makes (labels component=consumer, managed-by=lagpilot; container
    port `http`, as the chart's PodMonitor selects them), running, at a pod IP: one target labelled
    namespace/pod/group. A drain runtime's port, another component, a finished pod and the pod runner's
    pods (podIP 127.0.0.1, scraped through file-SD at their own port) are none."""
    cfg = json.loads(prom.config_yaml(1, tmp_path, tmp_path, pods_kubeconfig=tmp_path / "k"))
    (job,) = [j for j in cfg["scrape_configs"] if j.get("kubernetes_sd_configs")]
    rules = job["relabel_configs"]
    kept = _relabel(rules, _discovered("http"))
    assert kept is not None
    assert {k: kept[k] for k in ("__address__", "namespace", "pod", "group")} == {
        "__address__": "10.244.0.7:8080",
        "namespace": "shop",
        "pod": "orders-consumer-abc",
        "group": "orders",
    }
    for dropped in (
        _discovered("drain-api"),
        _discovered("http", component="drain"),
        _discovered("http", phase="Succeeded"),
        _discovered("http", phase="Pending"),
        _discovered("http", ip="127.0.0.1"),
    ):
        assert _relabel(rules, dropped) is None, dropped


def test_without_a_kubeconfig_only_the_runners_file_sd_feeds_the_consumer_job(tmp_path: Path) -> None:
    cfg = json.loads(prom.config_yaml(1, tmp_path / "sd", tmp_path / "r"))
    assert not any(j.get("kubernetes_sd_configs") for j in cfg["scrape_configs"])
    with_kc = json.loads(prom.config_yaml(1, tmp_path / "sd", tmp_path / "r", pods_kubeconfig=tmp_path / "k"))
    runner = [j for j in with_kc["scrape_configs"] if j.get("file_sd_configs") and "pods" in str(j)]
    (runner_job,) = runner
    # its targets carry the consumer job's name either way (the alerts and the test select on it)
    assert {"target_label": "job", "replacement": prom.CONSUMER_JOB} in [
        {k: r[k] for k in ("target_label", "replacement") if k in r} for r in runner_job["relabel_configs"]
    ]
