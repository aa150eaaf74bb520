"""The demo's paths point into this checkout (a package move once left REPO one level short:
`./dev/demo` failed applying <repo>/dev/crds/batchconsumergroup.yaml)."""

from __future__ import annotations

from pathlib import Path

from lagpilot_dev.demo import config

ROOT = Path(__file__).resolve().parents[2]


def test_repo_is_the_repository_root() -> None:
    assert config.REPO == ROOT
    assert (config.REPO / "pyproject.toml").is_file()


def test_crd_file_is_the_generated_crd() -> None:
    assert config.CRD_FILE.is_file(), config.CRD_FILE
    assert config.CRD_FILE == ROOT / "crds" / "batchconsumergroup.yaml"
