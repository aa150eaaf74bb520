"""The operator image (operator/Dockerfile) and the chart agree: same uid, same ports, same command.

Docker is not available where the tests run, so the image itself is not built here; these checks
keep the two files from drifting apart (a uid mismatch fails `runAsNonRoot` only on a real cluster).
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "operator" / "Dockerfile").read_text()
IGNORE = (ROOT / "operator" / "Dockerfile.dockerignore").read_text()
VALUES = yaml.safe_load((ROOT / "charts" / "lagpilot" / "values.yaml").read_text())


def _instructions(name: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)  # fold continuation lines
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.upper().startswith(name + " ")]


def test_base_image_is_python_311_slim() -> None:
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in DOCKERFILE
    assert all(f.startswith("${PYTHON_IMAGE}") for f in _instructions("FROM"))


def test_runs_as_the_non_root_uid_the_chart_expects() -> None:
    (user,) = _instructions("USER")
    uid, gid = user.split(":")
    assert (
        uid == str(VALUES["securityContext"]["runAsUser"]) == str(VALUES["podSecurityContext"]["runAsUser"])
    )
    assert gid == str(VALUES["securityContext"]["runAsGroup"])
    assert int(uid) != 0


def test_entrypoint_is_lagpilot_operator() -> None:
    (entry,) = _instructions("ENTRYPOINT")
    assert json.loads(entry) == ["lagpilot", "operator"]


def test_exposes_the_charts_default_ports() -> None:
    exposed = {int(p) for e in _instructions("EXPOSE") for p in e.split()}
    assert exposed == {VALUES["health"]["port"], VALUES["metrics"]["port"]}


def test_installs_the_distribution_without_the_spark_extra() -> None:
    installs = [r for r in _instructions("RUN") if "pip install" in r]
    assert installs and all("[spark" not in r and "pyspark" not in r for r in installs)


def test_dockerignore_keeps_every_copied_path() -> None:
    """BuildKit applies operator/Dockerfile.dockerignore: a COPY source it excludes breaks the build."""
    patterns = [p.strip() for p in IGNORE.splitlines() if p.strip() and not p.startswith("#")]

    def included(path: str) -> bool:
        keep = True
        for p in patterns:
            neg = p.startswith("!")
            pat = p[1:] if neg else p
            if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.removesuffix("/**") + "/*"):
                keep = neg
        return keep

    sources = [s for c in _instructions("COPY") if not c.startswith("--from") for s in c.split()[:-1]]
    assert sources
    for src in sources:
        sample = src if (ROOT / src).is_file() else f"{src.rstrip('/')}/x.py"
        assert included(sample), f"{src} is excluded by operator/Dockerfile.dockerignore"
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    assert not included(".venv/lib/big.so")
