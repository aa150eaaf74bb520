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
