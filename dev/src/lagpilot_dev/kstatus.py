"""kstatus' verdict on objects, from the real library: dev/kstatus-check (Go; cli-utils v0.37.2's
pkg/kstatus/status.Compute, and Argo CD-style Lua health checks run with gopher-lua), built from the
Go module proxy into the cache on first use by dev/build-kstatus-check.sh (docs/gitops.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lagpilot_dev import gocache
from lagpilot_dev.paths import cache_dir, file_lock

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "dev" / "build-kstatus-check.sh"


def ensure_kstatus_check(cache: Path | None = None, timeout: float = 1800.0) -> Path:
    """The kstatus-check binary (built, or rebuilt when its source changed; serialized by a lock)."""
    base = (cache or cache_dir()) / "kstatus-check"
    if shutil.which("go") is None and not (base / "bin" / "kstatus-check").is_file():
        raise FileNotFoundError(
            "kstatus-check is not built and `go` is not on PATH (dev/build-kstatus-check.sh)"
        )
    with file_lock(base / ".build.lock"):
        subprocess.run(
            ["bash", str(BUILD_SCRIPT), str(base)],
            check=True,
            timeout=timeout,
            env={**os.environ, **gocache.build_env(cache or cache_dir())},
        )
    return base / "bin" / "kstatus-check"


def verdicts(
    objects_json: str, *, argocd_health: Path | None = None, binary: Path | None = None
) -> list[dict[str, Any]]:
    """kstatus' verdict (and the Argo CD check's) on `kubectl get ... -o json` output, one dict per
    object: name, namespace, status, message (argocdStatus, argocdMessage)."""
    exe = binary or ensure_kstatus_check()
    args = [str(exe)] + (["-argocd-health", str(argocd_health)] if argocd_health else [])
    proc = subprocess.run(args, input=objects_json, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"kstatus-check exited {proc.returncode}: {proc.stderr.strip()}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def by_name(rows: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str(r["name"]): r for r in rows}
