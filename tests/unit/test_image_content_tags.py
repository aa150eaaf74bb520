"""Item 3 (node images per machine): the images `lagpilot dev images` builds carry a tag derived from
their content, so a build of other content (another checkout sharing the machine's build storage or
the node, an older tree) is never taken for this checkout's. Builds are run with a fake buildah: only
the argv is checked."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.images import build as images_build
from lagpilot_dev.images import tools as images_tools

REPO = Path(__file__).resolve().parents[2]
# what the consumer and test images read from the repository (their Dockerfiles + ignore files, real)
COPIED = (
    "consumer_image/Dockerfile",
    "consumer_image/Dockerfile.dockerignore",
    "tests/real/image/Dockerfile",
    "tests/real/image/Dockerfile.dockerignore",
)


@pytest.fixture
def context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    for rel in COPIED:
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, ctx / rel)
    files = {
        "pyproject.toml": "[project]\nname='x'\n",
        "README.md": "r\n",
        "operator/src/lagpilot/__init__.py": "",
        "consumer_image/src/lagpilot_runtime/__init__.py": "v = 1\n",
        "tests/__init__.py": "",
        "tests/real/__init__.py": "",
        "tests/real/operator_handlers.py": "h = 1\n",
        "tests/real/drain_handlers.py": "d = 1\n",
        "tests/real/secret_handlers.py": "s = 1\n",
        "docs/notes.md": "not in any image\n",
    }
    for rel, text in files.items():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        (ctx / rel).write_text(text)
    return ctx


@pytest.fixture
def builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[images_tools.Layout, list[list[str]]]:
    layout = images_tools.Layout(tmp_path / "images")
    layout.root.mkdir()
    argvs: list[list[str]] = []

    def fake_run(argv: list[str], *a: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
        argvs.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(images_build.subprocess, "run", fake_run)
    monkeypatch.setattr(images_build, "image_size", lambda layout, name: 1)
    monkeypatch.setattr(images_build, "image_user", lambda layout, name: "10001")
    monkeypatch.setattr(images_build, "build_mounts", lambda layout: [])
    return layout, argvs


def tags(argv: list[str]) -> set[str]:
    return {argv[i + 1] for i, a in enumerate(argv) if a in ("-t", "--tag")}


def build_tags(
    layout: images_tools.Layout, argvs: list[list[str]], name: str, ctx: Path
) -> tuple[set[str], list[str]]:
    images_build.build(layout, images_build.IMAGES[name], ctx)
    return tags(argvs[-1]), argvs[-1]


def test_other_sources_build_under_another_tag_and_the_same_sources_under_the_same(
    context: Path, builds: Any
) -> None:
    layout, argvs = builds
    plain = images_build.IMAGES["consumer"].tag
    first, _ = build_tags(layout, argvs, "consumer", context)
    again, _ = build_tags(layout, argvs, "consumer", context)
    assert first == again  # same content, same tags: the cache is reused, nothing to import again
    content = first - {plain}
    assert len(content) == 1 and next(iter(content)).startswith(plain + "-c"), first

    (context / "docs" / "notes.md").write_text("changed, but not in the image\n")
    assert build_tags(layout, argvs, "consumer", context)[0] == first

    (context / "consumer_image/src/lagpilot_runtime/__init__.py").write_text("v = 2\n")
    changed, _ = build_tags(layout, argvs, "consumer", context)
    assert changed - {plain} and (changed - {plain}).isdisjoint(content), (first, changed)


def test_a_derived_image_is_built_from_its_bases_content_tag_and_follows_its_changes(
    context: Path, builds: Any
) -> None:
    layout, argvs = builds
    consumer, _ = build_tags(layout, argvs, "consumer", context)
    test, argv = build_tags(layout, argvs, "test", context)
    consumer_content = consumer - {images_build.IMAGES["consumer"].tag}
    # FROM lagpilot/consumer:0.1.0 is this checkout's consumer build, not what the plain tag names now
    assert "--from" in argv and argv[argv.index("--from") + 1] in consumer_content, argv
    (context / "consumer_image/src/lagpilot_runtime/__init__.py").write_text("v = 3\n")
    test2, _ = build_tags(layout, argvs, "test", context)
    assert test2 != test  # the base changed: so did the derived image


def test_the_real_ignore_files_admit_what_the_dockerfiles_copy() -> None:
    from lagpilot_dev.images.digest import context_files

    test_files = context_files(REPO, images_build.IMAGES["test"].ignorefile)
    assert test_files == [
        # the chaos bench's eos handler, for its pods on the real node (docs/chaos.md)
        "bench/chaos/__init__.py",
        "bench/chaos/handler.py",
        "tests/__init__.py",
        "tests/real/__init__.py",
        "tests/real/drain_handlers.py",
        "tests/real/operator_handlers.py",
        "tests/real/secret_handlers.py",
    ]
    consumer = context_files(REPO, images_build.IMAGES["consumer"].ignorefile)
    assert {
        "pyproject.toml",
        "README.md",
        "consumer_image/src/lagpilot_runtime/consumer.py",
        "operator/src/lagpilot/spec.py",
    } <= set(consumer)
    assert not [
        f
        for f in consumer
        if not f.startswith(("operator/src/", "consumer_image/src/"))
        and f not in ("pyproject.toml", "README.md")
    ], consumer
    assert not [f for f in consumer if "__pycache__" in f or f.endswith(".pyc")]


@pytest.mark.parametrize(
    ("rules", "path", "out"),
    [
        ("*\n!a.py\n", "a.py", False),
        ("*\n!a.py\n", "b.py", True),
        ("**\n!src/**\n**/__pycache__\n", "src/p/__pycache__/x.pyc", True),
        ("**\n!src/**\n**/__pycache__\n", "src/p/x.py", False),
        ("**\n!src/**\n", "docs/x.md", True),
        ("# comment\n\n/docs\n", "docs/a/b.md", True),
        ("docs\n!docs/keep.md\n", "docs/keep.md", False),
        ("*.md\n", "a/b.md", False),  # `*` does not cross a directory
    ],
)
def test_dockerignore_rules_as_docker_reads_them(rules: str, path: str, out: bool) -> None:
    from lagpilot_dev.images.digest import excluded, ignore_rules

    assert excluded(path, ignore_rules(rules)) is out


def test_content_tag_keeps_the_plain_tag_in_front() -> None:
    from lagpilot_dev.images.digest import content_tag

    assert (
        content_tag("localhost/lagpilot/consumer:0.1.0", "ab" * 32)
        == "localhost/lagpilot/consumer:0.1.0-cababababab" + "ab"
    )
