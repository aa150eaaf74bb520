"""Helm for the chart tests and the demo: the pinned binary, rendering, and the chart's permissions.

Helm is not on Debian and nothing but package registries is reachable, so `dev/install-helm.sh`
builds a pinned release from the Go module proxy into the cache (`<cache>/helm/bin/helm`). This
module finds or installs it, renders `charts/lagpilot`, and gives the e2e tests a kubeconfig that
carries exactly the chart's ServiceAccount permissions (so the operator is proven to work with the
chart's RBAC, not as admin).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from lagpilot_dev import gocache
from lagpilot_dev.paths import cache_dir, file_lock

log = logging.getLogger("lagpilot_dev.helm")

HELM_VERSION = "v3.22.0"  # keep in step with dev/install-helm.sh
# Helm 4 (helm.sh/helm/v4, built by the same script): the chart must install and upgrade under both
HELM4_VERSION = "v4.3.1"
REPO_ROOT = Path(__file__).resolve().parents[3]
INSTALL_SCRIPT = REPO_ROOT / "dev" / "install-helm.sh"
CHART_DIR = REPO_ROOT / "charts" / "lagpilot"


class HelmError(RuntimeError):
    """A helm command failed; carries what it printed (`helm lint` reports on stdout, the rest on
    stderr; the chart holds no secrets, so neither does the output)."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        super().__init__(f"helm {' '.join(argv[1:3])} ... exited {returncode}: {output.strip()[-3000:]}")
        self.returncode = returncode
        self.output = output


def _subdir(version: str) -> str:
    return "helm" if version.startswith("v3.") else f"helm{version[1:].split('.')[0]}"


def helm_path(cache: Path | None = None, version: str = HELM_VERSION) -> Path:
    """Where the pinned helm lives in the cache (it may not exist yet): `helm/` for Helm 3,
    `helm4/` for Helm 4."""
    return (cache or cache_dir()) / _subdir(version) / "bin" / "helm"


def find_helm(cache: Path | None = None, version: str = HELM_VERSION) -> Path | None:
    """The cached helm, or None. `LAGPILOT_HELM` (Helm 3) / `LAGPILOT_HELM4` override (a helm you
    already have)."""
    env = os.environ.get("LAGPILOT_HELM" if version.startswith("v3.") else "LAGPILOT_HELM4")
    if env:
        return Path(env)
    path = helm_path(cache, version)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def ensure_helm(cache: Path | None = None, timeout: float = 1800.0, version: str = HELM_VERSION) -> Path:
    """The helm binary, building it on first use (cold: 5-10 min on 2 cores; then instant).
    `version`: HELM_VERSION (Helm 3, the default) or HELM4_VERSION.

    Serialized with a file lock so that two test sessions never build it twice at once.
    """
    found = find_helm(cache, version)
    if found is not None:
        return found
    base = (cache or cache_dir()) / _subdir(version)
    with file_lock(base / ".install.lock"):
        found = find_helm(cache, version)
        if found is not None:
            return found
        if not INSTALL_SCRIPT.is_file():
            raise FileNotFoundError(
                f"{INSTALL_SCRIPT} is missing: helm can only be installed from a source checkout"
            )
        if shutil.which("go") is None:
            raise FileNotFoundError(
                "helm is not installed and `go` is not on PATH to build it (dev/install-helm.sh)"
            )
        log.info(
            "installing helm (first use: builds from the Go module proxy, 5-10 min)",
            extra={"version": version, "dir": str(base)},
        )
        subprocess.run(
            ["bash", str(INSTALL_SCRIPT), str(base)],
            check=True,
            timeout=timeout,
            env={
                **os.environ,
                "LAGPILOT_HELM_VERSION": version,
                **gocache.build_env(cache or cache_dir()),
            },
        )
    found = find_helm(cache, version)
    if found is None:
        raise FileNotFoundError(f"dev/install-helm.sh finished but {helm_path(cache, version)} is missing")
    return found


def run_helm(helm: Path, args: Sequence[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run helm with its config/cache dirs in a temp dir; HelmError when it fails."""
    # helm wants writable config/cache dirs; keep them out of $HOME and out of the repo
    home = Path(tempfile.gettempdir()) / "lagpilot-helm-home"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    argv = [str(helm), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0:
        raise HelmError(argv, proc.returncode, proc.stdout + proc.stderr)
    return proc


def _value_args(values: Mapping[str, Any] | None, set_values: Sequence[str], tmp: Path) -> list[str]:
    args: list[str] = []
    if values:
        f = tmp / "values.json"  # JSON is YAML: keeps types exact (no "true" vs true surprises)
        f.write_text(json.dumps(values))
        args += ["-f", str(f)]
    for s in set_values:
        args += ["--set", s]
    return args


@dataclass(frozen=True)
class Rendered:
    """The chart rendered by `helm template`: the objects (CRDs included) and NOTES.txt."""

    objects: list[dict[str, Any]]
    manifest: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Every rendered object of `kind`."""
        return [o for o in self.objects if o.get("kind") == kind]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The one object with this kind/name (and namespace); KeyError when absent."""
        for o in self.of_kind(kind):
            meta = o.get("metadata", {})
            if meta.get("name") == name and (namespace is None or meta.get("namespace") == namespace):
                return o
        raise KeyError(f"{kind}/{name} (namespace {namespace}) not rendered")


def template(
    values: Mapping[str, Any] | None = None,
    set_values: Sequence[str] = (),
    *,
    release: str = "lagpilot",
    namespace: str = "lagpilot-system",
    include_crds: bool = True,
    helm: Path | None = None,
    chart: Path = CHART_DIR,
) -> Rendered:
    """`helm template` the chart; values are validated against values.schema.json by helm itself."""
    helm = helm or ensure_helm()
    with tempfile.TemporaryDirectory(prefix="lagpilot-helm-") as d:
        args = [
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            *(["--include-crds"] if include_crds else []),
            *_value_args(values, set_values, Path(d)),
        ]
        out = run_helm(helm, args).stdout
    objects = [doc for doc in yaml.safe_load_all(out) if doc]
    return Rendered(objects=objects, manifest=out)


def lint(
    values: Mapping[str, Any] | None = None,
    set_values: Sequence[str] = (),
    *,
    strict: bool = True,
    namespace: str = "lagpilot-system",
    helm: Path | None = None,
    chart: Path = CHART_DIR,
) -> str:
    """`helm lint [--strict]`; returns its output, raises HelmError on any lint error."""
    helm = helm or ensure_helm()
    with tempfile.TemporaryDirectory(prefix="lagpilot-helm-") as d:
        args = [
            "lint",
            str(chart),
            "--namespace",
            namespace,
            *(["--strict"] if strict else []),
            *_value_args(values, set_values, Path(d)),
        ]
        proc = run_helm(helm, args)
    return proc.stdout + proc.stderr


def service_account_subject(rendered: Rendered) -> tuple[str, str]:
    """(namespace, name) of the operator's ServiceAccount in a rendering."""
    dep = rendered.of_kind("Deployment")[0]
    return dep["metadata"]["namespace"], dep["spec"]["template"]["spec"]["serviceAccountName"]


def chart_rbac_objects(rendered: Rendered) -> list[dict[str, Any]]:
    """The objects that give the operator (and the drain driver) their identity and permissions."""
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return [o for o in rendered.objects if o.get("kind") in kinds]


class _Kube(Protocol):
    """What this module needs of `lagpilot_dev.kube.KubePart` (structural: tests may pass a fake)."""

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        timeout: float = 120.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]: ...

    def kubeconfig_for_service_account(
        self, namespace: str, name: str, *, create: bool = True, expiration_seconds: int = 86400
    ) -> Path: ...


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """A multi-document YAML stream of `objects` (what kubectl apply -f - reads)."""
    return "\n---\n".join(yaml.safe_dump(dict(o), sort_keys=False) for o in objects)


def kubectl_apply(
    kube: _Kube,
    objects: Sequence[Mapping[str, Any]],
    *,
    dry_run_server: bool = False,
    kubeconfig: Path | None = None,
    timeout: float = 180.0,
) -> str:
    """`kubectl apply` the objects as admin (or `kubeconfig`); `--dry-run=server` runs admission
    and schema validation on the real API server without persisting anything."""
    args = ["apply", "-f", "-", *(["--dry-run=server"] if dry_run_server else [])]
    proc = kube.kubectl(*args, kubeconfig=kubeconfig, timeout=timeout, input_text=to_yaml(objects))
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl apply failed ({proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return proc.stdout


def operator_kubeconfig(
    kube: _Kube,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "lagpilot",
    namespace: str = "lagpilot-system",
) -> Path:
    """A kubeconfig that authenticates as the chart's operator ServiceAccount.

    Renders the chart with `values`, applies its ServiceAccounts and RBAC as admin, and returns a
    kubeconfig (TokenRequest token) for the operator's ServiceAccount. Running the operator with it
    proves the chart's RBAC is sufficient: a missing verb shows up as a 403 in the operator's log.
    The release namespace and every watched namespace must already exist.
    """
    rendered = template(values, release=release, namespace=namespace, include_crds=False)
    kubectl_apply(kube, chart_rbac_objects(rendered))
    sa_ns, sa_name = service_account_subject(rendered)
    return kube.kubeconfig_for_service_account(sa_ns, sa_name, create=False)
