"""The images' build storage is pruned after each build (docs/images.md "Disk"): content tags make
every change a new image, and nothing removed the older ones (~11 GB after a few sessions' builds).
The storage here is a fake podman (its image list and what `untag`/`rmi` do to it); the builds are
faked: what is checked is what the storage holds after `build_and_run`."""
from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from lagpilot_dev import images, images_tools
from lagpilot_dev.images_build import IMAGES

DAY = 86400.0


class FakeStorage:
    """`podman images --all --format json`, `podman untag IMAGE NAME`, `podman rmi ID...` over a list
    of images (id, parent, names, created), refusing what podman refuses (an image with children)."""

    def __init__(self, images_: list[dict[str, Any]]) -> None:
        self.images = images_
        self.calls: list[list[str]] = []

    def names(self) -> set[str]:
        return {n for i in self.images for n in i["Names"]}

    def ids(self) -> set[str]:
        return {i["Id"] for i in self.images}

    def run(self, argv: list[str], *a: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        cmd = next((w for w in ("images", "untag", "rmi") if w in argv), None)
        rest = argv[argv.index(cmd) + 1:] if cmd else []
        out, rc = "", 0
        if cmd == "images":
            out = json.dumps([{**i, "Names": i["Names"] or None} for i in self.images])
        elif cmd == "untag":
            ref, name = rest[0], rest[1]
            for i in self.images:
                if i["Id"].startswith(ref) or ref in i["Names"]:
                    i["Names"] = [n for n in i["Names"] if n != name]
        elif cmd == "rmi":
            for ref in [r for r in rest if not r.startswith("-")]:
                img = next((i for i in self.images if i["Id"].startswith(ref) or ref in i["Names"]), None)
                if img is None or any(c["ParentId"] == img["Id"] for c in self.images):
                    rc = 2
                    continue
                self.images.remove(img)
        return subprocess.CompletedProcess(argv, rc, out, "")


def image(id_: str, parent: str, names: list[str], age_s: float) -> dict[str, Any]:
    return {"Id": id_ * 8, "ParentId": parent * 8 if parent else "", "Names": names,
            "Created": int(time.time() - age_s)}


@pytest.fixture
def storage(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeStorage, images_tools.Layout]:
    current = {n: IMAGES[n].content_tag() for n in ("operator", "consumer")}
    old = IMAGES["consumer"].tag + "-c0123456789ab"
    store = FakeStorage([
        image("base0000", "", ["docker.io/library/python:3.11-slim-bookworm",
                               "docker.io/library/python:3.11-slim"], 3 * DAY),
        # an older build of the consumer, two days old: its content tag and its layers
        image("olddeps0", "base0000", [], 2 * DAY),
        image("oldcons0", "olddeps0", [old], 2 * DAY),
        # this checkout's builds (current content tags, and the plain tags)
        image("deps0000", "base0000", [], 60),
        image("cons0000", "deps0000", [IMAGES["consumer"].tag, current["consumer"]], 30),
        image("oper0000", "base0000", [IMAGES["operator"].tag, current["operator"]], 30),
    ])
    layout = images_tools.Layout(tmp_path / "images")
    monkeypatch.setattr(subprocess, "run", store.run)
    monkeypatch.setattr(images, "ensure_tools", lambda layout: {})
    monkeypatch.setattr(images, "ensure_base", lambda layout, force=False: {})
    monkeypatch.setattr(images, "build", lambda layout, img: {"image": img.tag, "content_tag": current[img.name]})
    return store, layout


def test_an_older_content_tag_and_its_layers_are_removed_after_a_build(storage: Any) -> None:
    store, layout = storage
    old = IMAGES["consumer"].tag + "-c0123456789ab"
    assert old in store.names()
    images.build_and_run(("operator", "consumer"), run=False, layout=layout)
    assert old not in store.names()
    assert not {"oldcons0" * 8, "olddeps0" * 8} & store.ids()  # its layers went with it
    # what this checkout's content tags name, the plain tags and the base stay
    assert {IMAGES[n].content_tag() for n in ("operator", "consumer")} <= store.names()
    assert {IMAGES["consumer"].tag, "docker.io/library/python:3.11-slim"} <= store.names()
    assert {"deps0000" * 8, "base0000" * 8} <= store.ids()
