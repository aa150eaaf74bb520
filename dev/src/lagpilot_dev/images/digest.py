"""Content tags for the images `lagpilot dev images` builds: a tag derived from what goes into the
image, so a build from another checkout (or an older tree) sharing the machine's build storage or the
node's containerd can never be taken for this checkout's.

The plain tags (`localhost/lagpilot/consumer:0.1.0`, IMAGES) are one per machine: two checkouts
building in turn overwrite each other's, and a session that builds, then loads the tag a moment later,
may load the other checkout's image. The content tag adds `-c<12 hex>` to it
(`localhost/lagpilot/consumer:0.1.0-c1f2e3d4c5b6a`), the sha256 of

- the Dockerfile and its `.dockerignore` (the instructions and what the context holds),
- every file of the build context the `.dockerignore` admits (path and bytes), and
- for an image built FROM another of IMAGES (`FROM lagpilot/consumer:0.1.0`: the demo and the test
  images), that image's content digest: a change to the consumer's sources changes theirs too.

What is not in it: the base images (`python:3.11-slim-bookworm`, built here once and never pulled) and
the packages pip resolves during the build; the same content builds the same image from the cache.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

DIGEST_CHARS = 12
TAG_MARK = "-c"


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`, relative to the context root) as a
    regular expression on a slash-separated relative path."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/": any number of leading directories, none included
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """The rules of a .dockerignore, in order: (is an exception `!`, the pattern). Comments and blank
    lines skipped; patterns cleaned as Docker does (leading `/` and `./` dropped)."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:].strip()
        line = os.path.normpath(line).replace(os.sep, "/").lstrip("/")
        if line in ("", "."):
            continue
        rules.append((negate, _pattern_regex(line)))
    return rules


def excluded(rel: str, rules: Iterable[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path, or one of its parent directories, decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    out = False
    for negate, rx in rules:
        if any(rx.match(p) for p in prefixes):
            out = not negate
    return out


def context_files(context: Path, ignorefile: str) -> list[str]:
    """The files of the build context `ignorefile` lets into the build, as sorted relative paths
    (`.git` never: not part of any image here)."""
    path = context / ignorefile
    rules = ignore_rules(path.read_text()) if path.is_file() else []
    out = []
    for root, dirs, files in os.walk(context):
        rel_root = os.path.relpath(root, context).replace(os.sep, "/")
        rel_root = "" if rel_root == "." else rel_root + "/"
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for f in files:
            rel = rel_root + f
            if not excluded(rel, rules):
                out.append(rel)
    return sorted(out)


FROM_LINE = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)


def base_names(dockerfile_text: str) -> list[str]:
    """The images the Dockerfile's FROM lines name (build args unexpanded)."""
    return FROM_LINE.findall(dockerfile_text)


def content_digest(name: str, context: Path, images: Mapping[str, Any]) -> str:
    """The sha256 (hex) of image `name`'s content (module docstring). `images`: IMAGES (name →
    ImageDef with `dockerfile`, `ignorefile`, `reference`)."""
    return _digest(name, str(context), _key(images))


Defs = tuple[tuple[str, str, str, str], ...]  # (name, dockerfile, ignorefile, reference) per image


def _key(images: Mapping[str, Any]) -> Defs:
    return tuple(
        (n, str(d.dockerfile), str(d.ignorefile), str(d.reference)) for n, d in sorted(images.items())
    )


def _digest(name: str, context_s: str, images: Defs, seen: tuple[str, ...] = ()) -> str:
    if name in seen:
        raise ValueError(f"image {name}: its FROM lines loop through {' -> '.join(seen)}")
    context = Path(context_s)
    by_name = {n: (dockerfile, ignorefile, ref) for n, dockerfile, ignorefile, ref in images}
    dockerfile, ignorefile, _ref = by_name[name]
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    text = (context / dockerfile).read_bytes()
    add("dockerfile", text)
    ignore = context / ignorefile
    add("dockerignore", ignore.read_bytes() if ignore.is_file() else b"")
    for rel in context_files(context, ignorefile):
        add("file:" + rel, (context / rel).read_bytes())
    refs = {ref: n for n, (_d, _i, ref) in by_name.items()}
    for base in base_names(text.decode(errors="replace")):
        if base in refs:
            add("from:" + base, _digest(refs[base], context_s, images, (*seen, name)).encode())
    return h.hexdigest()


def content_tag(tag: str, digest: str) -> str:
    """`tag` with the content mark: `localhost/lagpilot/consumer:0.1.0` -> `...:0.1.0-c<12 hex>`."""
    return f"{tag}{TAG_MARK}{digest[:DIGEST_CHARS]}"
