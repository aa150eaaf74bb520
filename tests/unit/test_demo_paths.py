"""The demo's paths point into the checkout its code is in (a package move once left REPO one level
short: `./dev/demo` failed applying <repo>/dev/crds/batchconsumergroup.yaml). Checked against the
module's own file, not this test's: a worktree sharing another checkout's venv imports that one's."""

from __future__ import annotations

from pathlib import Path

from lagpilot_dev.demo import config


def test_repo_is_the_root_of_the_checkout_the_demo_runs_from() -> None:
    assert (
        config.REPO / "dev" / "src" / "lagpilot_dev" / "demo" / "config.py" == Path(config.__file__).resolve()
    )
    assert (config.REPO / "pyproject.toml").is_file()


def test_crd_file_is_the_generated_crd() -> None:
    assert config.CRD_FILE == config.REPO / "crds" / "batchconsumergroup.yaml"
    assert config.CRD_FILE.is_file(), config.CRD_FILE
