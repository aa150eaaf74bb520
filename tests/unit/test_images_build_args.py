"""lagpilot_dev.images_*: the build's argv and bind mounts, without building (docs/images.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lagpilot_dev.images import base as images_base
from lagpilot_dev.images import build as images_build
from lagpilot_dev.images import tools as images_tools


@pytest.fixture
def layout(tmp_path: Path) -> images_tools.Layout:
    lay = images_tools.Layout(tmp_path / "images")
    lay.root.mkdir()
    return lay


def _wheel(cache: Path, sub: str, name: str, body: bytes = b"w") -> Path:
    p = cache / "wheels" / sub / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(body)
    return p


def test_only_pure_wheels_built_on_the_host_are_linked_flat(layout, tmp_path):
    cache = tmp_path / "pip"
    _wheel(cache, "61/69", "pyspark-4.2.0-py2.py3-none-any.whl", b"spark")
    _wheel(cache, "aa/bb", "native-1.0-cp311-cp311-linux_x86_64.whl")
    (cache / "http-v2").mkdir(parents=True)
    (cache / "http-v2" / "x-1.0-py3-none-any.whl").write_bytes(b"not a built wheel")
    out = images_build.link_host_wheels(layout, cache)
    assert out == layout.root / "wheels"
    assert sorted(p.name for p in out.iterdir()) == ["pyspark-4.2.0-py2.py3-none-any.whl"]
    assert (out / "pyspark-4.2.0-py2.py3-none-any.whl").read_bytes() == b"spark"


def test_no_built_wheels_means_no_wheel_mount_and_stale_links_go(layout, tmp_path):
    (layout.root / "wheels").mkdir()
    (layout.root / "wheels" / "old-1-py3-none-any.whl").write_bytes(b"old")
    assert images_build.link_host_wheels(layout, tmp_path / "empty") is None
    assert not (layout.root / "wheels").exists()
    flags = images_build.build_mounts(layout, tmp_path / "empty")
    assert not any(images_build.BUILD_WHEELS_PATH in f for f in flags)


def test_build_mounts_are_read_only_and_pip_conf_names_them(layout, tmp_path):
    cache = tmp_path / "pip"
    _wheel(cache, "61/69", "pyspark-4.2.0-py2.py3-none-any.whl")
    flags = images_build.build_mounts(layout, cache)
    volumes = [flags[i + 1] for i, f in enumerate(flags) if f == "--volume"]
    assert volumes and all(v.endswith(":ro") for v in volumes), volumes
    assert f"{layout.root / 'wheels'}:{images_build.BUILD_WHEELS_PATH}:ro" in volumes
    conf = (layout.root / "pip-build.conf").read_text()
    assert f"find-links = {images_build.BUILD_WHEELS_PATH}" in conf
    assert f"{layout.root / 'pip-build.conf'}:/etc/pip.conf:ro" in volumes
    if images_build.HOST_CA_BUNDLE.is_file():
        assert f"cert = {images_build.BUILD_CA_PATH}" in conf


def test_bud_builds_the_real_dockerfile_with_its_ignorefile(layout, tmp_path):
    argv = images_build.bud_argv(layout, images_build.IMAGES["consumer"], tmp_path)
    assert argv[0] == str(layout.buildah) and "bud" in argv
    assert argv[argv.index("-f") + 1] == str(tmp_path / "consumer_image/Dockerfile")
    assert argv[argv.index("--ignorefile") + 1] == str(tmp_path / "consumer_image/Dockerfile.dockerignore")
    assert "--pull=never" in argv and "--layers" in argv and argv[-1] == str(tmp_path)


def test_the_base_is_minbase_bookworm_with_python311(tmp_path):
    argv = images_base.mmdebstrap_argv(tmp_path / "rootfs")
    assert argv[0] == "mmdebstrap" and "--variant=minbase" in argv
    include = next(a for a in argv if a.startswith("--include=")).split("=", 1)[1].split(",")
    assert {"python3.11", "python3.11-venv", "ca-certificates"} <= set(include)
    assert images_base.SUITE in argv and str(tmp_path / "rootfs") in argv


def test_images_cache_override_moves_only_the_images_state(monkeypatch, tmp_path):
    monkeypatch.setenv("LAGPILOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LAGPILOT_IMAGES_CACHE", raising=False)
    assert images_tools.default_layout().root == tmp_path / "cache" / "images"
    monkeypatch.setenv("LAGPILOT_IMAGES_CACHE", str(tmp_path / "fresh"))
    assert images_tools.default_layout().root == tmp_path / "fresh"


def test_preconditions_name_what_is_missing(monkeypatch, layout):
    monkeypatch.setattr(images_tools, "dpkg_installed", lambda p: p != "podman")
    monkeypatch.setattr(images_tools.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(images_tools, "go_toolchain", lambda: None)
    problems = images_tools.missing_preconditions(layout)
    assert any("podman" in p and "not root" in p for p in problems), problems
    assert any("Go toolchain" in p for p in problems), problems
    monkeypatch.setattr(images_tools, "dpkg_installed", lambda p: True)
    monkeypatch.setattr(images_tools, "go_toolchain", lambda: "/usr/bin/go")
    assert images_tools.missing_preconditions(layout) == []


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "dockerfile, extras", [("operator/Dockerfile", ()), ("consumer_image/Dockerfile", ("spark",))]
)
def test_dependency_layer_comes_before_the_sources_and_lists_pyprojects_requirements(
    dockerfile, extras, tmp_path
):
    """A code change must not reinstall every dependency: pyproject.toml alone is copied, its
    requirements installed, and only then the sources (installed with --no-deps, then `pip check`)."""
    import re
    import subprocess
    import sys
    import tomllib

    text = (ROOT / dockerfile).read_text()
    lines = re.sub(r"\\\n\s*", " ", text).splitlines()
    copies = [i for i, ln in enumerate(lines) if ln.startswith("COPY ") and "--from" not in ln]
    dep_run = next(
        i for i, ln in enumerate(lines) if ln.startswith("RUN ") and "-r " in ln and "requirements.txt" in ln
    )
    src_copies = [
        i for i in copies if "src" in lines[i] or "operator/" in lines[i] or "consumer_image/" in lines[i]
    ]
    assert lines[copies[0]].split()[1:-1] == ["pyproject.toml"], lines[copies[0]]
    assert copies[0] < dep_run < min(src_copies), (copies, dep_run, src_copies)
    final = next(ln for ln in lines[min(src_copies) :] if ln.startswith("RUN ") and "pip install" in ln)
    assert "--no-deps" in final and "pip check" in final, final
    # the one-liner that writes requirements.txt, run on the real pyproject.toml
    (snippet,) = re.findall(r"python -c '([^']+)'", lines[dep_run])
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    got = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
    assert got.stdout.split("\n")[:-1] == want
