"""`lagpilot dev images`, the pruning of the build storage after each build (docs/images.md "Disk").

Content tags (images.digest) make every change of an image's sources a new image; the older ones,
their layers and the dangling images of overwritten plain tags stayed in the storage (~11 GB after a
few sessions' builds). After the builds, under the build lock, `prune` removes every image of the
storage except what `plan` keeps:

- every name that is not one of our content tags (`<IMAGES tag>-c<12 hex>`): the plain tags
  (`localhost/lagpilot/consumer:0.1.0`, what the runs use), the base (`python:3.11-slim-bookworm`,
  made here once), anything we did not name;
- the content tags of this checkout's current content (all of IMAGES, built in this run or not),
  and those of the image a plain tag names (the machine's last build of that image, whichever
  checkout built it);
- a content tag built (by any checkout sharing the machine) within `KEEP_BUILT_WITHIN_S`: another
  session may be between its build and its load into the node (`podman save`, outside the lock);
- the build steps' images recorded for each kept content tag (`record_build`: the `--> <id>` lines of
  its build log): the cached layers of a multi-stage build's earlier stage (the operator's), which no
  tag's parent chain reaches;
- the parents (layer cache) of everything kept.

What is removed: older content tags (untagged), then every image nothing above keeps, children before
parents. The choice (`plan`) is pure; `prune` lists the storage, applies it and says what it did.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagpilot_dev.images.digest import DIGEST_CHARS, TAG_MARK
from lagpilot_dev.images.tools import Layout, run_cmd

log = logging.getLogger("lagpilot_dev.images")

KEEP_BUILT_WITHIN_S = 3600.0
RECORD_FILE = "content-tags.json"
STEP_ID = re.compile(r"^--> (?:Using cache )?([0-9a-f]{11,64})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class StoredImage:
    id: str
    parent: str  # "" for a base layer's image
    names: tuple[str, ...]
    created: float  # epoch seconds


@dataclass(frozen=True)
class Built:
    """What `record_build` wrote for a content tag: when it was last built, its steps' image ids."""

    at: float
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrunePlan:
    untag: tuple[tuple[str, str], ...]  # (image id, content tag) to remove from it
    remove: tuple[str, ...]  # image ids, every child before its parent
    keep: tuple[str, ...]  # image ids kept


def is_content_tag(name: str, plain_tags: Iterable[str]) -> bool:
    """`name` is `<plain tag>-c<12 hex>` for one of `plain_tags`."""
    for plain in plain_tags:
        rest = name.removeprefix(plain + TAG_MARK)
        if rest != name and len(rest) == DIGEST_CHARS and all(c in "0123456789abcdef" for c in rest):
            return True
    return False


def plan(
    images: Iterable[StoredImage],
    *,
    current: Iterable[str],
    plain_tags: Iterable[str],
    built: Mapping[str, Built],
    now: float,
    within_s: float = KEEP_BUILT_WITHIN_S,
) -> PrunePlan:
    """What to untag and remove (module docstring). `current`: this checkout's content tags;
    `plain_tags`: IMAGES' tags (what marks a content tag as ours); `built`: the record of builds."""
    imgs = {i.id: i for i in images}
    plains, cur = tuple(plain_tags), set(current)

    def kept_tag(name: str, img: StoredImage) -> bool:
        if not is_content_tag(name, plains) or name in cur or any(n in plains for n in img.names):
            return True
        b = built.get(name)
        return (b.at if b is not None else img.created) >= now - within_s

    untag = tuple(sorted((i.id, n) for i in imgs.values() for n in i.names if not kept_tag(n, i)))
    staying = {(i.id, n) for i in imgs.values() for n in i.names} - set(untag)
    roots = {i for i, _n in staying}
    for name in {n for _i, n in staying} & built.keys():
        roots |= {i for i in imgs for s in built[name].steps if i.startswith(s)}
    keep: set[str] = set()
    for r in roots:
        while r and r in imgs and r not in keep:
            keep.add(r)
            r = imgs[r].parent

    def depth(i: str) -> int:
        d, seen = 0, set()
        while imgs[i].parent in imgs and i not in seen:
            seen.add(i)
            i, d = imgs[i].parent, d + 1
        return d

    remove = tuple(sorted((i for i in imgs if i not in keep), key=lambda i: (-depth(i), i)))
    return PrunePlan(untag=untag, remove=remove, keep=tuple(sorted(keep)))


# ---------------------------------------------------------------- the record of builds


def read_record(layout: Layout) -> dict[str, Built]:
    try:
        raw = json.loads((layout.root / RECORD_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {k: Built(float(v["at"]), tuple(v.get("steps", ()))) for k, v in raw.items()}


def write_record(layout: Layout, record: Mapping[str, Built]) -> None:
    path = layout.root / RECORD_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({k: {"at": b.at, "steps": list(b.steps)} for k, b in sorted(record.items())}, indent=1)
    )
    tmp.replace(path)


def build_steps(build_log: str) -> tuple[str, ...]:
    """The image ids a `buildah bud --layers` log names, one per step (`--> Using cache <id>`, `--> <id>`)."""
    return tuple(dict.fromkeys(STEP_ID.findall(build_log)))


def record_build(layout: Layout, content_tag: str, build_log: str, now: float | None = None) -> None:
    """Note that `content_tag` was built now, with its steps' image ids (called under the build lock)."""
    record = read_record(layout)
    record[content_tag] = Built(time.time() if now is None else now, build_steps(build_log))
    write_record(layout, record)


# ---------------------------------------------------------------- the storage


def parse_images(podman_json: str) -> list[StoredImage]:
    """`podman images --all --format json` (an image with two names is listed twice)."""
    out: dict[str, StoredImage] = {}
    for i in json.loads(podman_json or "[]"):
        out[i["Id"]] = StoredImage(
            i["Id"], i.get("ParentId") or "", tuple(i.get("Names") or ()), float(i.get("Created") or 0)
        )
    return list(out.values())


def list_images(layout: Layout) -> list[StoredImage]:
    return parse_images(run_cmd(layout.podman_argv("images", "--all", "--format", "json")).stdout)


def dir_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def prune(
    layout: Layout,
    current: Iterable[str],
    plain_tags: Iterable[str],
    now: float | None = None,
    within_s: float = KEEP_BUILT_WITHIN_S,
) -> dict[str, Any]:
    """Apply `plan` to the storage (under the build lock); what it untagged, removed and could not."""
    t0 = time.monotonic()
    now = time.time() if now is None else now
    record = read_record(layout)
    p = plan(
        list_images(layout), current=current, plain_tags=plain_tags, built=record, now=now, within_s=within_s
    )
    by_image: dict[str, list[str]] = {}
    for img, name in p.untag:
        by_image.setdefault(img, []).append(name)
    for img, tags in by_image.items():
        run_cmd(layout.podman_argv("untag", img, *tags), check=False)
    if p.remove:
        run_cmd(layout.podman_argv("rmi", *p.remove), check=False)  # one call: children come first
    after = list_images(layout)
    left, names = {i.id for i in after}, {n for i in after for n in i.names}
    not_removed = [i for i in p.remove if i in left]
    write_record(layout, {k: b for k, b in record.items() if k in names})  # forget what is gone
    out = {
        "untagged": [n for _i, n in p.untag],
        "removed": len(p.remove) - len(not_removed),
        "not_removed": not_removed,
        "kept": len(p.keep),
        "seconds": round(time.monotonic() - t0, 1),
    }
    log.info(
        "pruned the build storage",
        extra={k: v for k, v in out.items() if k != "not_removed"} | {"not_removed": len(not_removed)},
    )
    return out
