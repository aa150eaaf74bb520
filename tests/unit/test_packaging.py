"""The dev tooling is a distribution of its own (issue 15): the `lagpilot` distribution and both
images hold no dev code, and `lagpilot dev` / `lagpilot demo` come from lagpilot-dev's entry points."""

from __future__ import annotations

import tomllib
from pathlib import Path

from lagpilot import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_lagpilot_distribution_packages_no_dev_code() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert not [p for p in conf["packages"] if p.startswith("lagpilot_dev")]
    assert "lagpilot_dev" not in conf["package-dir"]
    dev = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text())
    assert dev["tool"]["setuptools"]["packages"] == [
        "lagpilot_dev",
        "lagpilot_dev.demo",
        "lagpilot_dev.images",
    ]
    # every subpackage of lagpilot_dev is listed (a missing one would be absent from a wheel)
    src = ROOT / "dev" / "src"
    found = sorted(
        ".".join(d.relative_to(src).parts)
        for d in (src / "lagpilot_dev").rglob("*")
        if d.is_dir() and (d / "__init__.py").exists()
    )
    assert sorted(dev["tool"]["setuptools"]["packages"]) == sorted(["lagpilot_dev", *found])


def test_the_wheel_lists_every_package_of_the_operator_and_the_runtime() -> None:
    """setuptools puts only the listed packages into the wheel: every folder with an __init__.py
    under lagpilot/ (the layers decide, observe, act, sim) and lagpilot_runtime/ is listed."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    for src, top in (
        (ROOT / "operator" / "src", "lagpilot"),
        (ROOT / "consumer_image" / "src", "lagpilot_runtime"),
    ):
        found = sorted(
            ".".join(d.relative_to(src).parts)
            for d in [src / top, *(src / top).rglob("*")]
            if d.is_dir() and (d / "__init__.py").exists()
        )
        assert sorted(p for p in packages if p == top or p.startswith(top + ".")) == found
    assert {"lagpilot.decide", "lagpilot.observe", "lagpilot.act", "lagpilot.sim"} <= set(packages)


def test_the_images_copy_no_dev_code() -> None:
    for dockerfile in (ROOT / "operator" / "Dockerfile", ROOT / "consumer_image" / "Dockerfile"):
        copies = [ln for ln in dockerfile.read_text().splitlines() if ln.startswith("COPY ")]
        assert copies and not [ln for ln in copies if " dev" in ln], (dockerfile, copies)
        ignore = Path(f"{dockerfile}.dockerignore").read_text()
        assert "dev/" not in ignore, f"{dockerfile}.dockerignore lets dev code into the build context"


def test_the_cli_names_no_dev_module_and_finds_the_dev_subcommands() -> None:
    assert not [v for v in cli.SUBCOMMANDS.values() if v.startswith("lagpilot_dev")]
    # installed by dev/setup (lagpilot-dev, editable): its entry points add dev and demo
    got = cli.subcommands()
    assert got["dev"] == "lagpilot_dev.cli:main" and got["demo"] == "lagpilot_dev.demo:main"
    assert cli.main(["no-such-command"]) == 2
