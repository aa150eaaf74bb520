"""Prometheus from Debian, run as a private instance: loopback only, own port, own data dir.

Not a default part: `lagpilot dev up --parts kafka,kube,postgres,prometheus`.

Install without root and without touching the system: `apt-get download prometheus` (the .deb only,
from the apt lists the machine already has) into `<cache>/prometheus/debs`, then `dpkg-deb -x` into
`<cache>/prometheus/root`. The package's `prometheus` and `promtool` are static Go binaries (their
only dependency, libc, is already there); the web UI's JavaScript dependencies are not needed for
the HTTP API, so they are not fetched.

What it scrapes (config generated at start in `<state>/prometheus/prometheus.yml`, every 2 s):
- job `lagpilot-operator`: file-based service discovery from `<state>/prometheus/file_sd/operator/*.json`
  (`add_target("operator", ...)` writes one file per operator process a test or the demo runs);
- job `lagpilot-consumers`: `<state>/prometheus/file_sd/pods/*.json`, one file per running pod of the
  real node whose container exposes a metrics port, at its pod IP (`node_pod_targets` reads them
  from the API; `write_pod_target` / `remove_pod_target`: tests/real/test_prometheus.py feeds them);
- itself (job `prometheus`).
Alert and recording rules: every `<state>/prometheus/rules/*.yml` (`load_rules` writes one, reloads
and waits until Prometheus lists its groups). Rule evaluation every 2 s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lagpilot_dev.paths import LOOPBACK, Ports, Process, file_lock, http_ok, wait_for

log = logging.getLogger("lagpilot_dev.prometheus")

PACKAGE = "prometheus"
OPERATOR_JOB = "lagpilot-operator"
CONSUMER_JOB = "lagpilot-consumers"
SCRAPE_INTERVAL = "2s"
EVALUATION_INTERVAL = "2s"
_SD_KIND = {"operator": OPERATOR_JOB, "pods": CONSUMER_JOB}


# the consumer pods the operator makes, as the chart's PodMonitor selects them (charts/lagpilot/
# templates/podmonitor.yaml): these two pod labels and the container port named `http`
# (operator/src/lagpilot/act/deployment.py, LAGPILOT_METRICS_PORT)
CONSUMER_POD_SELECTOR = {
    "__meta_kubernetes_pod_label_app_kubernetes_io_component": "consumer",
    "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by": "lagpilot",
    "__meta_kubernetes_pod_container_port_name": "http",
}
# the read-only identity Prometheus discovers pods with (pods get/list/watch, cluster-wide)
SD_IDENTITY = ("kube-system", "lagpilot-dev-prometheus")
SD_TOKEN_SECONDS = 365 * 86400  # read once at config load: Prometheus never re-reads the file


def consumer_pod_relabelling() -> list[dict[str, Any]]:
    """relabel_configs for `kubernetes_sd_configs` role pod (one target per declared container port):
    the running consumer pods' `http` port at their pod IP, labelled namespace/pod/group as the
    PodMonitor does. The pod runner's pods (podIP 127.0.0.1; each listens on a port of its own) are
    dropped here: its workers publish them through file-SD."""
    return [
        {
            "action": "keep",
            "source_labels": list(CONSUMER_POD_SELECTOR),
            "regex": ";".join(CONSUMER_POD_SELECTOR.values()),
        },
        {"action": "keep", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_ip"], "regex": r"127\..*"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_label_lagpilot_io_group"], "target_label": "group"},
    ]


def config_yaml(port: int, sd_dir: Path, rules_dir: Path, pods_kubeconfig: Path | None = None) -> str:
    """The generated prometheus.yml (JSON is valid YAML: no YAML library needed here).

    With `pods_kubeconfig` (the kube part runs) job lagpilot-consumers discovers the consumer pods
    itself (`kubernetes_sd_configs` role pod, `consumer_pod_relabelling`), and the pod runner's
    file-SD targets get the same job name from a job of their own; without it, file-SD only."""

    # honor_labels: the operator's series carry each group's own `namespace` label (as the chart's
    # ServiceMonitor keeps it with honorLabels); a target label never overrides it
    def file_sd(job: str, kind: str) -> dict[str, Any]:
        return {
            "job_name": job,
            "honor_labels": True,
            "file_sd_configs": [{"files": [str(sd_dir / kind / "*.json")], "refresh_interval": "5s"}],
        }

    consumers: list[dict[str, Any]] = [file_sd(CONSUMER_JOB, "pods")]
    if pods_kubeconfig is not None:
        runner = file_sd(f"{CONSUMER_JOB}-runner", "pods")
        runner["relabel_configs"] = [{"target_label": "job", "replacement": CONSUMER_JOB}]
        consumers = [
            {
                "job_name": CONSUMER_JOB,
                "honor_labels": True,
                "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(pods_kubeconfig)}],
                "relabel_configs": consumer_pod_relabelling(),
            },
            runner,
        ]
    cfg = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": EVALUATION_INTERVAL,
        },
        "rule_files": [str(rules_dir / "*.yml")],
        "scrape_configs": [
            file_sd(OPERATOR_JOB, "operator"),
            *consumers,
            {"job_name": "prometheus", "static_configs": [{"targets": [f"{LOOPBACK}:{port}"]}]},
        ],
    }
    return json.dumps(cfg, indent=1) + "\n"


def _write_json_atomic(path: Path, obj: Any) -> None:
    """Prometheus watches the directory: never let it read a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj))
    tmp.replace(path)


def _target_file(sd_dir: Path, kind: str, key: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in key)
    return sd_dir / kind / f"{safe}.json"


def write_pod_target(
    sd_dir: Path, namespace: str, pod: str, port: int, labels: Mapping[str, str], host: str
) -> Path:
    """One consumer pod's metrics endpoint as a file-SD target: a real node's pod at its IP
    (`node_pod_targets`)."""
    path = _target_file(sd_dir, "pods", f"{namespace}_{pod}")
    _write_json_atomic(
        path, [{"targets": [f"{host}:{port}"], "labels": {"namespace": namespace, "pod": pod, **labels}}]
    )
    return path


def node_pod_targets(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, dict[str, str]]]:
    """(namespace, pod, "ip:port", labels) for each running pod (the API's pod dicts) whose container
    sets LAGPILOT_METRICS_PORT, on the real node (the host reaches pod IPs through the bridge). Labels:
    the pod's `lagpilot.io/group`. A test-side stand-in, only while this Prometheus has no Kubernetes
    discovery (`kubernetes_sd`)."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip:
            continue
        ports = [
            str(e.get("value"))
            for c in (pod.get("spec") or {}).get("containers") or []
            for e in c.get("env") or []
            if e.get("name") == "LAGPILOT_METRICS_PORT" and e.get("value")
        ]
        if ports:
            group = (meta.get("labels") or {}).get("lagpilot.io/group", "")
            out.append((meta.get("namespace", ""), meta["name"], f"{ip}:{ports[0]}", {"group": group}))
    return out


def remove_pod_target(sd_dir: Path, namespace: str, pod: str) -> None:
    _target_file(sd_dir, "pods", f"{namespace}_{pod}").unlink(missing_ok=True)


class PrometheusPart:
    """Install (apt-get download + dpkg-deb -x), start, stop and query the private Prometheus."""

    name = "prometheus"

    def __init__(self, cache_dir: Path, state_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.home = self.cache_dir / "prometheus"
        self.root = self.home / "root"
        self.dir = self.state_dir / "prometheus"
        self.sd_dir = self.dir / "file_sd"
        self.rules_dir = self.dir / "rules"
        self.ports = Ports(self.state_dir)
        self._process: Process | None = None
        self._kubernetes_sd: bool | None = None

    # ---- install -------------------------------------------------------------------------------
    def binary(self, name: str = "prometheus") -> Path:
        return self.root / "usr" / "bin" / name

    def promtool(self) -> Path:
        """`promtool` from the same package (`promtool test rules`, `check rules`)."""
        self.install()
        return self.binary("promtool")

    def promtool_check(self, what: str, path: Path) -> subprocess.CompletedProcess[str]:
        """`promtool check <what> <path>` (config, rules): its result, never raising on a refusal."""
        return subprocess.run(
            [str(self.promtool()), "check", what, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def installed(self) -> bool:
        return (
            (self.home / ".complete").exists() and self.binary().exists() and self.binary("promtool").exists()
        )

    def install(self) -> None:
        """Download Debian's .deb and unpack it into the cache (no root, no dpkg database)."""
        if self.installed():
            return
        with file_lock(self.cache_dir / ".prometheus-install.lock"):
            if self.installed():
                return
            debs = self.home / "debs"
            shutil.rmtree(debs, ignore_errors=True)
            debs.mkdir(parents=True)
            log.info("downloading Debian's prometheus package (first run only)")
            download = ["apt-get", "download", "-q", PACKAGE]
            proc = subprocess.run(
                download, cwd=debs, capture_output=True, text=True, timeout=1800, check=False
            )
            if proc.returncode != 0 and os.geteuid() == 0:
                # a fresh machine may have no package lists yet: fetch them once (root only) and retry
                subprocess.run(
                    ["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=600"],
                    capture_output=True,
                    text=True,
                    timeout=1800,
                    check=False,
                )
                proc = subprocess.run(
                    download, cwd=debs, capture_output=True, text=True, timeout=1800, check=False
                )
            found = sorted(debs.glob(f"{PACKAGE}_*.deb"))
            if proc.returncode != 0 or not found:
                raise RuntimeError(
                    f"apt-get download {PACKAGE} failed (exit {proc.returncode}; run `apt-get update` "
                    f"once if the lists are missing):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
                )
            tmp = self.home / "root.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            proc = subprocess.run(
                ["dpkg-deb", "-x", str(found[-1]), str(tmp)],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"dpkg-deb -x failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
            shutil.rmtree(self.root, ignore_errors=True)
            tmp.rename(self.root)
            (self.home / ".complete").write_text(found[-1].name + "\n")
            log.info("installed prometheus", extra={"deb": found[-1].name, "root": str(self.root)})

    def version(self) -> str:
        proc = subprocess.run(
            [str(self.binary()), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        return (proc.stdout or proc.stderr).splitlines()[0] if (proc.stdout or proc.stderr) else ""

    # ---- run -----------------------------------------------------------------------------------
    def port(self) -> int:
        return self.ports.ensure("prometheus")

    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port()}"

    def process(self) -> Process:
        if self._process is None:
            data = self.dir / "data"
            self._process = Process(
                name="prometheus",
                argv=[
                    str(self.binary()),
                    f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={data}",
                    "--storage.tsdb.retention.time=1d",
                    f"--web.listen-address={LOOPBACK}:{self.port()}",
                    "--web.enable-lifecycle",
                    "--log.format=json",
                    "--log.level=warn",
                ],
                log_file=self.dir / "prometheus.log",
                pid_file=self.dir / "prometheus.pid",
                marker=f"--storage.tsdb.path={data}",
                cwd=self.dir,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir)},
            )
        return self._process

    def is_running(self) -> bool:
        return self.process().is_running()

    def start(self, timeout: float = 60.0) -> None:
        """Write the config (on the persisted port) and start; wait until /-/ready answers."""
        self.install()
        with file_lock(self.dir / "start.lock"):
            if not self.process().is_running():
                self.ports.ensure("prometheus", must_be_free=True)
                self._process = None  # the port may have moved: rebuild argv
                self._write_config()
                self.process().start()
        try:
            wait_for(
                lambda: http_ok(f"{self.url()}/-/ready"),
                f"prometheus at {self.url()}",
                timeout=timeout,
                interval=0.3,
                alive=self.process().is_running,
            )
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(
                f"{exc}\n--- {self.process().log_file} (tail) ---\n{self.process().log_tail()}"
            ) from exc

    def _write_config(self) -> bool:
        """Write prometheus.yml (with the pods' discovery when the kube part runs); True if it changed."""
        for kind in _SD_KIND:
            (self.sd_dir / kind).mkdir(parents=True, exist_ok=True)
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "prometheus.yml"
        text = config_yaml(self.port(), self.sd_dir, self.rules_dir, self.pods_kubeconfig())
        if path.exists() and path.read_text() == text:
            return False
        path.write_text(text)
        return True

    def configure(self) -> None:
        """Bring a running Prometheus's config up to date (a kube part started after it, a config
        from an older checkout): rewrite and reload when it changed. `Stack.up` calls this."""
        with file_lock(self.dir / "start.lock"):
            changed = self._write_config()
        if changed and self.is_running():
            self.reload()
            log.info("prometheus config reloaded", extra={"config": str(self.dir / "prometheus.yml")})

    def kubernetes_sd(self) -> bool:
        """Whether this Prometheus build has Kubernetes discovery (`promtool check config` on a probe).
        Debian's package is built without it (its discovery/ has no kubernetes): then the consumer
        job stays on file-SD."""
        if self._kubernetes_sd is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".kubernetes-sd-probe.yml"
            probe.write_text(
                json.dumps(
                    {
                        "scrape_configs": [
                            {
                                "job_name": "probe",
                                "kubernetes_sd_configs": [
                                    {"role": "pod", "api_server": "https://127.0.0.1:1"}
                                ],
                            }
                        ]
                    }
                )
            )
            self._kubernetes_sd = self.promtool_check("config", probe).returncode == 0
        return self._kubernetes_sd

    def pods_kubeconfig(self) -> Path | None:
        """The kubeconfig Prometheus discovers pods with, or None when this build has no Kubernetes
        discovery or the kube part of this state dir is not running. Least privilege: ServiceAccount kube-system/lagpilot-dev-prometheus,
        bound to a ClusterRole that may get/list/watch pods and nothing else (applied each time,
        idempotent); its token (TokenRequest, one year) is requested once, when the file is missing."""
        from lagpilot_dev.kube import KubePart

        kube = KubePart(self.cache_dir, self.state_dir)
        if not self.kubernetes_sd() or not kube.is_running():
            return None
        ns, name = SD_IDENTITY
        rbac = [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "namespace": ns, "name": name}],
            },
        ]
        proc = kube.kubectl(
            "apply", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
        )
        if proc.returncode != 0:
            raise RuntimeError(f"prometheus pod discovery RBAC: kubectl apply failed: {proc.stderr[-2000:]}")
        path = kube.dir / "sa-kubeconfigs" / f"{ns}.{name}.kubeconfig"
        if path.exists():
            return path
        return kube.kubeconfig_for_service_account(ns, name, expiration_seconds=SD_TOKEN_SECONDS)

    def stop(self) -> None:
        self.process().stop(grace=30.0)

    def kill(self) -> None:
        self.process().kill()

    def purge(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self._process = None

    def info(self) -> dict[str, Any]:
        return {
            "prometheus_url": self.url(),
            "prometheus_port": self.port(),
            "promtool": str(self.binary("promtool")),
            "prometheus_file_sd": str(self.sd_dir),
            "prometheus_rules_dir": str(self.rules_dir),
            "prometheus_log": str(self.dir / "prometheus.log"),
        }

    # ---- targets, rules, API ---------------------------------------------------------------------
    def add_target(self, kind: str, key: str, address: str, labels: Mapping[str, str] | None = None) -> Path:
        """A file-SD target: kind "operator" (job lagpilot-operator) or "pods" (job lagpilot-consumers)."""
        if kind not in _SD_KIND:
            raise ValueError(f"kind must be one of {sorted(_SD_KIND)}")
        path = _target_file(self.sd_dir, kind, key)
        _write_json_atomic(path, [{"targets": [address], "labels": dict(labels or {})}])
        return path

    def remove_target(self, kind: str, key: str) -> None:
        _target_file(self.sd_dir, kind, key).unlink(missing_ok=True)

    def load_rules(self, name: str, text: str, timeout: float = 30.0) -> Path:
        """Write `rules/<name>.yml`, reload, and wait until every group in it is loaded.

        The file is checked with `promtool check rules` first: Prometheus keeps its old rules on a
        bad file and only logs the error, which would make a test wait for nothing."""
        import yaml

        path = self.rules_dir / f"{name}.yml"
        tmp = self.rules_dir / f".{name}.check"
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        try:
            chk = self.promtool_check("rules", tmp)
            if chk.returncode != 0:
                raise RuntimeError(f"promtool check rules failed:\n{chk.stdout}\n{chk.stderr}")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        groups = {g["name"] for g in (yaml.safe_load(text) or {}).get("groups") or []}
        self.reload()
        wait_for(
            lambda: groups <= {g["name"] for g in self.api("rules")["groups"]},
            f"rule groups {sorted(groups)} loaded",
            timeout=timeout,
            interval=0.3,
        )
        return path

    def remove_rules(self, name: str) -> None:
        (self.rules_dir / f"{name}.yml").unlink(missing_ok=True)
        self.reload()

    def reload(self) -> None:
        req = urllib.request.Request(f"{self.url()}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:  # loopback
            if resp.status != 200:
                raise RuntimeError(f"prometheus reload answered {resp.status}")

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path> and return its `data` (raises on status != success)."""
        qs = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url()}/api/v1/{path}{qs}", timeout=30) as resp:  # loopback
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus /api/v1/{path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def targets(self, job: str | None = None) -> list[dict[str, Any]]:
        active = self.api("targets", state="active")["activeTargets"]
        return [t for t in active if job is None or t.get("labels", {}).get("job") == job]


def wait_target_up(
    part: PrometheusPart, job: str, match: Mapping[str, str], timeout: float = 60.0
) -> dict[str, Any]:
    """Wait until a target of `job` with labels `match` was scraped successfully; return it."""
    found: dict[str, Any] = {}

    def up() -> bool:
        for t in part.targets(job):
            if all(t.get("labels", {}).get(k) == v for k, v in match.items()) and t.get("health") == "up":
                found.update(t)
                return True
        return False

    wait_for(up, f"{job} target {dict(match)} up", timeout=timeout, interval=0.5)
    return found


def rules_from_chart(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "lagpilot",
    namespace: str = "lagpilot-system",
    helm: Path | None = None,
) -> str:
    """The alert rules exactly as charts/lagpilot ships them: `helm template` with
    `prometheusRule.enabled` (plus `values`), the PrometheusRule's `spec` as a Prometheus rule file."""
    import yaml

    from lagpilot_dev import helm as h

    merged: dict[str, Any] = {"prometheusRule": {"enabled": True}}
    for k, v in (values or {}).items():
        merged[k] = (
            {**merged.get(k, {}), **v} if isinstance(v, Mapping) and isinstance(merged.get(k), dict) else v
        )
    rendered = h.template(merged, release=release, namespace=namespace, helm=helm or h.ensure_helm())
    (rule,) = rendered.of_kind("PrometheusRule")
    return yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False, width=10_000)
