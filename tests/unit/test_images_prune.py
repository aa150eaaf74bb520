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

from lagpilot_dev.images import command as images
from lagpilot_dev.images import tools as images_tools
from lagpilot_dev.images.build import IMAGES

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
        rest = argv[argv.index(cmd) + 1 :] if cmd else []
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
    return {
        "Id": id_ * 8,
        "ParentId": parent * 8 if parent else "",
        "Names": names,
        "Created": int(time.time() - age_s),
    }


@pytest.fixture
def storage(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeStorage, images_tools.Layout]:
    current = {n: IMAGES[n].content_tag() for n in ("operator", "consumer")}
    old = IMAGES["consumer"].tag + "-c0123456789ab"
    store = FakeStorage(
        [
            image(
                "base0000",
                "",
                ["docker.io/library/python:3.11-slim-bookworm", "docker.io/library/python:3.11-slim"],
                3 * DAY,
            ),
            # an older build of the consumer, two days old: its content tag and its layers
            image("olddeps0", "base0000", [], 2 * DAY),
            image("oldcons0", "olddeps0", [old], 2 * DAY),
            # this checkout's builds (current content tags, and the plain tags)
            image("deps0000", "base0000", [], 60),
            image("cons0000", "deps0000", [IMAGES["consumer"].tag, current["consumer"]], 30),
            image("oper0000", "base0000", [IMAGES["operator"].tag, current["operator"]], 30),
        ]
    )
    layout = images_tools.Layout(tmp_path / "images")
    monkeypatch.setattr(subprocess, "run", store.run)
    monkeypatch.setattr(images, "ensure_tools", lambda layout: {})
    monkeypatch.setattr(images, "ensure_base", lambda layout, force=False: {})
    monkeypatch.setattr(
        images, "build", lambda layout, img: {"image": img.tag, "content_tag": current[img.name]}
    )
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


def test_a_failed_listing_leaves_the_builds_standing_and_says_so(
    storage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, layout = storage

    def broken(argv: list[str], *a: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
        store.calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 125, "", "Error: database is locked")

    monkeypatch.setattr(subprocess, "run", broken)
    report = images.build_and_run(("operator", "consumer"), run=False, layout=layout)
    assert set(report.builds) == {"operator", "consumer"}
    assert "database is locked" in report.prune["error"]
    assert any("images" in c for c in store.calls)
    assert not any("rmi" in c or "untag" in c for c in store.calls)


# ---------------------------------------------------------------- the choice, pure (images.prune.plan)

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lagpilot_dev.images.prune import Built, StoredImage, build_steps, is_content_tag, plan  # noqa: E402

PLAIN = "localhost/lagpilot/consumer:0.1.0"
OPER = "localhost/lagpilot/operator:0.1.0"
PLAINS = (PLAIN, OPER)
NOW = 1_800_000_000.0
HOUR = 3600.0
CUR, OLD, OTHER = PLAIN + "-c" + "a" * 12, PLAIN + "-c" + "b" * 12, PLAIN + "-c" + "c" * 12
BASE = "docker.io/library/python:3.11-slim-bookworm"


def img(id_: str, parent: str = "", *names: str, age: float = 2 * DAY) -> StoredImage:
    return StoredImage(id_, parent, names, NOW - age)


@pytest.mark.parametrize(
    "name, ours",
    [
        (PLAIN + "-c0123456789ab", True),
        (OPER + "-c0123456789ab", True),
        (PLAIN, False),  # a plain tag
        (PLAIN + "-c0123456789a", False),  # 11 hex
        (PLAIN + "-c0123456789AB", False),  # not our digest's form
        ("localhost/other:0.1.0-c0123456789ab", False),  # not one of IMAGES
        (BASE, False),
    ],
)
def test_only_our_content_tags_are_candidates(name: str, ours: bool) -> None:
    assert is_content_tag(name, PLAINS) is ours


# (images, built record, expected untagged names, expected removed ids); every image not removed is kept
CASES = {
    "an older content tag goes, with the layers only it used": (
        [
            img("base", "", BASE),
            img("deps", "base"),
            img("cur", "deps", PLAIN, CUR),
            img("olddeps", "base"),
            img("old", "olddeps", OLD),
        ],
        {},
        {OLD},
        ("old", "olddeps"),
    ),
    "an older content tag built within the hour by another checkout stays": (
        [img("base", "", BASE), img("old", "base", OLD)],
        {OLD: Built(NOW - 0.5 * HOUR)},
        set(),
        (),
    ),
    "the record's time counts, not the image's (a cache hit keeps an old Created)": (
        [img("base", "", BASE), img("old", "base", OLD, age=DAY)],
        {OLD: Built(NOW - 60)},
        set(),
        (),
    ),
    "without a record the image's creation time counts": (
        [img("base", "", BASE), img("new", "base", OLD, age=600), img("old", "base", OTHER, age=2 * HOUR)],
        {},
        {OTHER},
        ("old",),
    ),
    "the content tag of the image the plain tag names stays (the machine's last build)": (
        [img("base", "", BASE), img("other", "base", PLAIN, OTHER), img("cur", "base", CUR, age=60)],
        {},
        set(),
        (),
    ),
    "a kept build's recorded steps stay (the operator's build stage), a dropped one's go": (
        [
            img("base", "", BASE),
            img("stage1", "base"),
            img("stage2", "stage1"),
            img("cur", "base", CUR),
            img("ostage", "base"),
            img("old", "base", OLD),
        ],
        {CUR: Built(NOW - DAY, ("stage2", "cur")), OLD: Built(NOW - DAY, ("ostage", "old"))},
        {OLD},
        ("old", "ostage"),
    ),
    "an overwritten plain tag's dangling image goes, children before parents": (
        [img("base", "", BASE), img("a", "base"), img("b", "a"), img("c", "b"), img("cur", "base", PLAIN)],
        {},
        set(),
        ("c", "b", "a"),
    ),
    "names that are not our content tags are never touched": (
        [img("x", "", "localhost/other:0.1.0-c0123456789ab"), img("y", "x", "localhost/mine:1")],
        {},
        set(),
        (),
    ),
    "two content tags on one image: the old one untagged, the image stays": (
        [img("base", "", BASE), img("cur", "base", CUR, OLD)],
        {},
        {OLD},
        (),
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_plan_keeps_and_removes(case: str) -> None:
    images_, built, untagged, removed = CASES[case]
    p = plan(images_, current={CUR}, plain_tags=PLAINS, built=built, now=NOW)
    assert {n for _i, n in p.untag} == untagged
    assert p.remove == removed
    assert set(p.keep) == {i.id for i in images_} - set(removed)


@st.composite
def storages(draw: st.DrawFn) -> list[StoredImage]:
    n = draw(st.integers(1, 12))
    names = st.sampled_from([PLAIN, OPER, CUR, OLD, OTHER, BASE, "localhost/x:1"])
    out = []
    for k in range(n):
        parent = f"i{draw(st.integers(0, k - 1))}" if k and draw(st.booleans()) else ""
        out.append(
            StoredImage(
                f"i{k}", parent, tuple(draw(st.sets(names, max_size=2))), NOW - draw(st.floats(0, 3 * DAY))
            )
        )
    return out


STEPS = st.lists(st.sampled_from([f"i{k}" for k in range(12)]), max_size=3).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    storages(),
    st.dictionaries(
        st.sampled_from([CUR, OLD, OTHER]), st.builds(Built, st.floats(NOW - 3 * DAY, NOW), STEPS)
    ),
)
def test_plan_never_removes_a_kept_images_layers_and_removes_children_first(
    images_: list[StoredImage], built: dict[str, Built]
) -> None:
    p = plan(images_, current={CUR}, plain_tags=PLAINS, built=built, now=NOW)
    by_id = {i.id: i for i in images_}
    assert set(p.keep) | set(p.remove) == set(by_id) and not set(p.keep) & set(p.remove)
    untagged = set(p.untag)
    for i in images_:
        if any((i.id, n) not in untagged for n in i.names):
            assert i.id in p.keep  # a name left means the image stays
        for n in i.names:
            if (i.id, n) in untagged:
                assert is_content_tag(n, PLAINS) and n != CUR and PLAIN not in i.names and OPER not in i.names
    for k in p.keep:
        assert by_id[k].parent in p.keep or by_id[k].parent not in by_id  # the layer cache under it stays
    order = {r: pos for pos, r in enumerate(p.remove)}
    for r in p.remove:
        parent = by_id[r].parent
        assert parent not in order or order[parent] > order[r]  # a child is removed before its parent


def test_build_steps_are_the_ids_buildah_prints_per_step() -> None:
    full = "1b46224d773b50d9075039e17dbca2651759b768e9659140b6c07c43b2c6245c"
    log = (
        f"[1/2] STEP 2/4: RUN echo\n--> Using cache {full}\n--> 1b46224d773\n[1/2] STEP 3/4: COPY f /f\n"
        "--> 4b5f4d96012\n[2/2] COMMIT localhost/p/x:1\n--> 4fe9980d1ba\n"
        "Successfully tagged localhost/p/x:1\n"
        "4fe9980d1ba5b54ca84473f1bff2e71883f335a04dff5ebf7dbb5aadb53c019d\n"
    )
    assert build_steps(log) == (full, "1b46224d773", "4b5f4d96012", "4fe9980d1ba")
