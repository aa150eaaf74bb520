"""`lagpilot dev images`, the builds: `buildah bud --layers --pull=never --isolation chroot --network host`
with the UNCHANGED Dockerfile and its `<Dockerfile>.dockerignore`; layers are cached in the storage
under the cache. The RUN steps see (read-only bind mounts, never in a layer) the host's CA bundle and a
pip.conf whose `find-links` is a flat directory of the pure-Python wheels pip already built on the
host (pyspark's ~430 MB sdist, built into a wheel by `dev/setup`): the same version from the index
would be the sdist, and pip prefers a wheel of the same version, so the image's pip skips that
download + build.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagpilot_dev.images.prune import record_build
from lagpilot_dev.images.tools import RUN_NPROC_CAP, Layout, image_size, image_user, ulimit_flags

log = logging.getLogger("lagpilot_dev.images")


@dataclass(frozen=True)
class ImageDef:
    name: str
    dockerfile: str  # relative to the repository root (the build context)
    tag: str

    @property
    def ignorefile(self) -> str:
        return f"{self.dockerfile}.dockerignore"

    @property
    def reference(self) -> str:
        """The name users give the image (`docker build -t lagpilot/operator:0.1.0`, docs/kind.md; the
        chart's `image.repository`:appVersion, the CRD's `spec.template.image` default). buildah
        stores a short name under `localhost/`; the real node also knows the image by this name
        (lagpilot_dev.node.NodePart.load_built_image), as `kind load docker-image` would."""
        return self.tag.removeprefix("localhost/")

    def content_tag(self, context: Path | None = None) -> str:
        """The build's tag with the digest of what goes into it (`images.digest`: the Dockerfile, its
        .dockerignore, the context files it admits, the FROM image's own digest), e.g.
        `localhost/lagpilot/consumer:0.1.0-c1f2e3d4c5b6a`: a build of other content (another
        checkout, an older tree) never carries it, where the plain `tag` is one per machine."""
        from lagpilot_dev.images.digest import content_digest, content_tag

        return content_tag(self.tag, content_digest(self.name, context or repo_root(), IMAGES))

    def content_reference(self, context: Path | None = None) -> str:
        """`content_tag` as users name it (without buildah's `localhost/`)."""
        return self.content_tag(context).removeprefix("localhost/")

    def base(self, context: Path | None = None) -> ImageDef | None:
        """The image of IMAGES this one is built FROM (the demo and test images: the consumer), if any."""
        from lagpilot_dev.images.digest import base_names

        names = base_names(((context or repo_root()) / self.dockerfile).read_text())
        return next((d for d in IMAGES.values() if d.reference in names), None)


IMAGES: dict[str, ImageDef] = {
    "operator": ImageDef("operator", "operator/Dockerfile", "localhost/lagpilot/operator:0.1.0"),
    "consumer": ImageDef("consumer", "consumer_image/Dockerfile", "localhost/lagpilot/consumer:0.1.0"),
    # `lagpilot demo` (on the node): the consumer image plus the demo's handler (a derived image, as users
    # add theirs); built after "consumer" (its FROM)
    "demo": ImageDef("demo", "dev/demo_image/Dockerfile", "localhost/lagpilot/demo-consumer:0.1.0"),
    # the real tests on the node (tests/fixtures/node.py): the consumer image plus the tests' handler
    # modules (tests/real/operator_handlers.py, drain_handlers.py, secret_handlers.py); built after
    # "consumer" (its FROM)
    "test": ImageDef("test", "tests/real/image/Dockerfile", "localhost/lagpilot/test-consumer:0.1.0"),
}


def repo_root() -> Path:
    """The repository root (the build context): the directory holding pyproject.toml and both Dockerfiles.
    $LAGPILOT_IMAGES_CONTEXT overrides it (e.g. a `git archive` export, to build a fixed tree)."""
    if os.environ.get("LAGPILOT_IMAGES_CONTEXT"):
        return Path(os.environ["LAGPILOT_IMAGES_CONTEXT"])
    here = Path(__file__).resolve()
    for p in here.parents:
        if (p / "pyproject.toml").is_file() and (p / "consumer_image" / "Dockerfile").is_file():
            return p
    raise RuntimeError(f"no repository root above {here}")


HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CA_PATH = "/etc/lagpilot-build-ca.pem"


BUILD_WHEELS_PATH = "/lagpilot-wheels"


def host_pip_cache() -> Path:
    return Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip").expanduser()


def link_host_wheels(layout: Layout, pip_cache: Path | None = None) -> Path | None:
    """A flat directory (pip's `find-links` needs one) of the pure-Python wheels (`*-none-any.whl`)
    pip built from sdists on the host (<pip cache>/wheels/**), hard-linked (copied across devices).
    None when there are none. Only pure wheels: they install on the image's interpreter as on the host."""
    src = (pip_cache or host_pip_cache()) / "wheels"
    wheels = sorted(src.rglob("*-none-any.whl")) if src.is_dir() else []
    out = layout.root / "wheels"
    shutil.rmtree(out, ignore_errors=True)
    if not wheels:
        return None
    out.mkdir(parents=True)
    for w in wheels:
        dest = out / w.name
        if dest.exists():
            continue
        try:
            os.link(w, dest)
        except OSError:
            shutil.copy2(w, dest)
    return out


def build_mounts(layout: Layout, pip_cache: Path | None = None) -> list[str]:
    """Bind mounts for the RUN steps only (never in a layer; the Dockerfiles are unchanged):
    - the host's CA bundle, and pip.conf's `cert` pointing at it: this machine's egress re-signs TLS with
      its own CA (in the host's bundle, not in Debian's ca-certificates), so pip inside the build would
      otherwise fail with CERTIFICATE_VERIFY_FAILED. The built images keep the stock trust store.
    - the host's built wheels (link_host_wheels) as pip.conf's `find-links`: pip still asks the index,
      and takes a wheel from here only where it is the best candidate (same version: wheel over sdist)."""
    flags, conf_lines = [], ["[global]"]
    if HOST_CA_BUNDLE.is_file():
        flags += ["--volume", f"{HOST_CA_BUNDLE}:{BUILD_CA_PATH}:ro"]
        conf_lines.append(f"cert = {BUILD_CA_PATH}")
    wheels = link_host_wheels(layout, pip_cache)
    if wheels is not None:
        flags += ["--volume", f"{wheels}:{BUILD_WHEELS_PATH}:ro"]
        conf_lines.append(f"find-links = {BUILD_WHEELS_PATH}")
    if not flags:
        return []
    conf = layout.root / "pip-build.conf"
    conf.write_text("\n".join(conf_lines) + "\n")
    return [*flags, "--volume", f"{conf}:/etc/pip.conf:ro"]


def bud_argv(
    layout: Layout, image: ImageDef, context: Path, extra_tags: Sequence[str] = (), base: str | None = None
) -> list[str]:
    """The build command: the unchanged Dockerfile, its .dockerignore, cached layers, no pull; tagged
    `image.tag` and `extra_tags` (`build`: the content tag). `base`: the image its first FROM names
    is replaced with (`--from`; `build`: the content tag of the image of IMAGES it is built FROM,
    this checkout's build of it, not whatever the plain tag names now)."""
    tags = [f for t in (image.tag, *extra_tags) for f in ("-t", t)]
    return layout.buildah_argv(
        "bud",
        "--layers",
        "--pull=never",
        "--isolation",
        "chroot",
        "--network",
        "host",
        *ulimit_flags(RUN_NPROC_CAP),
        *build_mounts(layout),
        *(["--from", base] if base is not None else []),
        "-f",
        str(context / image.dockerfile),
        "--ignorefile",
        str(context / image.ignorefile),
        *tags,
        str(context),
    )


def build(layout: Layout, image: ImageDef, context: Path | None = None) -> dict[str, Any]:
    context = context or repo_root()
    t0 = time.monotonic()
    ctag = image.content_tag(context)  # before the build: the content it reads
    base = image.base(context)
    base_tag = base.content_tag(context) if base is not None else None
    log.info(
        "building image", extra={"image": image.tag, "content_tag": ctag, "dockerfile": image.dockerfile}
    )
    log_file = layout.root / f"build-{image.name}.log"
    with open(log_file, "w") as out:
        proc = subprocess.run(
            bud_argv(layout, image, context, (ctag,), base_tag),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    seconds = round(time.monotonic() - t0, 1)
    text = log_file.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(
            f"build of {image.tag} failed (exit {proc.returncode}); log {log_file}:\n{text[-3000:]}"
        )
    record_build(layout, ctag, text)  # when, and its steps' images: what images.prune keeps for it
    steps = sum(
        1
        for line in text.splitlines()
        if line.startswith("STEP ") or (line.startswith("[") and "] STEP " in line)
    )
    cached = sum(1 for line in text.splitlines() if line.startswith("--> Using cache"))
    return {
        "image": image.tag,
        "content_tag": ctag,
        "seconds": seconds,
        "size_bytes": image_size(layout, ctag),
        "user": image_user(layout, ctag),
        "steps": steps,
        "cached_steps": cached,
        "log": str(log_file),
    }
