"""The variants the drain's start-up A/B (bench/drain/ab.py) compares and how it compares them (all
pure): `--startup-ab NAME=ENVJSON`, `--executors 1,2,4` (local-cluster or, with --k8s, Spark's
Kubernetes backend), the round order, per-round differences and ratios against the base variant."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any


def parse_variants(items: list[str]) -> dict[str, dict[str, str]]:
    """``NAME=ENVJSON`` (e.g. ``old={"LAGPILOT_DRAIN_WARM_WORKERS":"0"}``) -> {name: env} (pure)."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--startup-ab wants NAME=ENVJSON, got {item!r}")
        env = json.loads(value or "{}")
        if not isinstance(env, dict):
            raise ValueError(f"--startup-ab {name}: the environment must be a JSON object")
        out[name] = {str(k): str(v) for k, v in env.items()}
    return out


def round_order(names: list[str], rnd: int) -> list[str]:
    """Alternate which variant runs first (pure): even rounds as given, odd rounds reversed."""
    return list(names) if rnd % 2 == 0 else list(reversed(names))


def median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    """The median of ``key`` over one variant's rounds, those without it left out (pure)."""
    got = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(got), 2) if got else None


def median_diffs(rows: dict[str, list[dict[str, Any]]], key: str, base: str) -> dict[str, float | None]:
    """Per variant, the median over rounds of (variant - base) for ``key`` (pure; same round pairs)."""
    out: dict[str, float | None] = {}
    for name, rs in rows.items():
        if name == base:
            continue
        d = [
            b[key] - a[key]
            for a, b in zip(rows[base], rs, strict=False)
            if a.get(key) is not None and b.get(key) is not None
        ]
        out[name] = round(statistics.median(d), 2) if d else None
    return out


def median_ratios(rows: dict[str, list[dict[str, Any]]], key: str, base: str) -> dict[str, float | None]:
    """Per variant, the median over rounds of (variant / base) for ``key`` (pure; same round pairs)."""
    out: dict[str, float | None] = {}
    for name, rs in rows.items():
        if name == base:
            continue
        q = [
            b[key] / a[key]
            for a, b in zip(rows[base], rs, strict=False)
            if a.get(key) and b.get(key) is not None
        ]
        out[name] = round(statistics.median(q), 2) if q else None
    return out


def executor_variants(counts: list[int], slots: int, memory_mb: int = 1024) -> dict[str, dict[str, str]]:
    """``--executors 1,2,4``: the same drain on Spark's local-cluster (separate executor JVMs, each
    with its own Python worker daemon) with the same total task slots split over N executors (pure)."""
    out = {}
    for n in counts:
        if n < 1:
            raise ValueError("--executors wants counts >= 1")
        cores = max(1, math.ceil(slots / n))
        out[f"{n}x{cores}"] = {"LAGPILOT_SPARK_MASTER": f"local-cluster[{n},{cores},{memory_mb}]"}
    return out


K8S_EXECUTORS_ENV, K8S_CORES_ENV = "LAGPILOT_BENCH_K8S_EXECUTORS", "LAGPILOT_BENCH_K8S_CORES"


def k8s_executor_variants(counts: list[int], slots: int) -> dict[str, dict[str, str]]:
    """``--executors 1,2,4 --k8s``: a ``local`` variant (the drain's own default master,
    ``local[<slots>,4]``) and, per count N, the same drain on Spark's Kubernetes backend with N
    executor pods of ceil(slots / N) task slots each (pure; the bench fills in the master and conf
    per round, these two keys only name the shape)."""
    out: dict[str, dict[str, str]] = {"local": {}}
    for n in counts:
        if n < 1:
            raise ValueError("--executors wants counts >= 1")
        cores = max(1, math.ceil(slots / n))
        out[f"k8s-{n}x{cores}"] = {K8S_EXECUTORS_ENV: str(n), K8S_CORES_ENV: str(cores)}
    return out


# the executors' Python (the consumer image's): the driver names it in every task it sends
IMAGE_PYTHON = "/usr/local/bin/python3"
CPU_PER_TASK_M = 50  # each executor pod requests its slots times this (2 CPUs shared by every pod)
# the executor pod's memory beyond the JVM heap: Spark's floor plus one Python worker per slot. With
# Spark's default (384 MiB) a 1 x 12 executor was OOMKilled by its cgroup (exit 137) on the real node
# once its 12 workers ran (the pod runner enforced no limit)
OVERHEAD_BASE_MB, OVERHEAD_PER_SLOT_MB = 384, 160


def executor_memory_overhead(cores: int) -> str:
    """spark.executor.memoryOverhead for an executor of `cores` task slots (pure)."""
    return f"{OVERHEAD_BASE_MB + cores * OVERHEAD_PER_SLOT_MB}m"


def k8s_drain_env(
    env: dict[str, str],
    k8s: Any,
    executors: int,
    cores: int,
    pod_prefix: str,
    run_label: str,
    image: str,
    memory: str = "512m",
) -> dict[str, str]:
    """The drain process's environment for Spark's Kubernetes backend in client mode (pure but for
    ``k8s``'s names): the driver is this host process, acting as the chart's drain ServiceAccount,
    reached by its executor containers on the real node at ``k8s.driver_host`` (the bridge gateway;
    it binds there). Executors run ``image`` (the consumer image: its own PYTHONPATH and Python,
    which the driver names in PYSPARK_PYTHON) from the operator's executor pod template (Pod
    Security `restricted`, read-only root, /tmp an emptyDir); they get the plain LAGPILOT_* settings
    through spark.executorEnv and the DSN through the Secret (never literal)."""
    from lagpilot.act.drain_manifests import EXECUTOR_POD_TEMPLATE_ENV, executor_pod_template
    from lagpilot_dev.spark_k8s import client_mode_conf

    plain = {
        k: v
        for k, v in env.items()
        if k.startswith("LAGPILOT_")
        and k != "LAGPILOT_POSTGRES_DSN"
        and not k.startswith(("LAGPILOT_SPARK_", "LAGPILOT_BENCH_"))
    }
    conf = client_mode_conf(
        k8s.namespace,
        executors,
        cores,
        memory,
        pod_prefix,
        plain,
        {"LAGPILOT_POSTGRES_DSN": ("drain-env", "dsn")},
        labels={"lagpilot.io/bench-run": run_label},
        image=image,
        driver_host=k8s.driver_host,
        request_cores=f"{cores * CPU_PER_TASK_M}m",
        memory_overhead=executor_memory_overhead(cores),
    )
    return dict(
        env,
        LAGPILOT_SPARK_MASTER=k8s.master,
        LAGPILOT_SPARK_CONF=json.dumps(conf, sort_keys=True),
        KUBECONFIG=str(k8s.driver_kubeconfig),
        PYSPARK_PYTHON=IMAGE_PYTHON,
        **{EXECUTOR_POD_TEMPLATE_ENV: json.dumps(executor_pod_template(), sort_keys=True)},
    )
