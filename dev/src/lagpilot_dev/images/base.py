"""`lagpilot dev images`, the base: a stand-in for the python images the Dockerfiles name.

`FROM python:3.11-slim-bookworm` (consumer) and `python:3.11-slim` (operator's ARG default) name an
image that cannot be pulled. A stand-in is made once from an `mmdebstrap --variant=minbase` of Debian
bookworm (apt downloads, pipelined: several times faster than debootstrap here) with Debian's
python3.11 + python3.11-venv, a virtualenv at /usr/local (so `python`/`pip` are
/usr/local/bin/{python,pip} as in the official image) and the host's apt sources, committed under
both names. Differences from the official image are listed in docs/images.md.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from lagpilot_dev.images.tools import Layout, image_exists, image_size, run_cmd

log = logging.getLogger("lagpilot_dev.images")

SUITE = "bookworm"
# python3-distutils (+ lib2to3): python3.11-venv needs them (debootstrap, used before, did not resolve the virtual package)
BASE_PACKAGES = (
    "ca-certificates",
    "netbase",
    "tzdata",
    "python3.11",
    "python3.11-venv",
    "python3-distutils",
    "python3",
    "python3-lib2to3",
)
BASE_NAMES = ("docker.io/library/python:3.11-slim-bookworm", "docker.io/library/python:3.11-slim")
# bump to remake the base when its recipe changes. Not bumped for the move from debootstrap (bookworm
# only) to mmdebstrap (bookworm + -updates + -security): the same packages and layout, so an existing
# base stays a valid stand-in and a machine's cached layers are kept (a bump costs a cold rebuild)
BASE_VERSION = "1"
HOST_APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


# ---------------------------------------------------------------- base


def base_label_ok(layout: Layout) -> bool:
    p = run_cmd(
        layout.buildah_argv(
            "inspect",
            "--type",
            "image",
            "--format",
            '{{index .ImageAnnotations "org.lagpilot.base.version"}}',
            BASE_NAMES[0],
        ),
        check=False,
    )
    return p.returncode == 0 and p.stdout.strip() == BASE_VERSION


def apt_mirror() -> str:
    """The Debian mirror the host's apt uses (so the base's apt reaches the same registry)."""
    for path in (HOST_APT_SOURCES, Path("/etc/apt/sources.list")):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2 and "security" not in words[1]:
                return words[1] if not words[1].startswith("[") else words[2]
    raise RuntimeError("no Debian mirror in the host's apt sources")


def mmdebstrap_argv(rootfs: Path) -> list[str]:
    """minbase bookworm + BASE_PACKAGES into the directory `rootfs`, from the host's apt sources (the
    deb822 file: bookworm, -updates, -security, as the official image is built) or else its mirror."""
    sources = str(HOST_APT_SOURCES) if HOST_APT_SOURCES.is_file() else apt_mirror()
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=minbase",
        "--format=directory",
        f"--include={','.join(BASE_PACKAGES)}",
        SUITE,
        str(rootfs),
        sources,
    ]


def ensure_base(layout: Layout, force: bool = False) -> dict[str, Any]:
    """Make the python:3.11-slim-bookworm stand-in once (mmdebstrap + Debian's python3.11)."""
    if not force and all(image_exists(layout, n) for n in BASE_NAMES) and base_label_ok(layout):
        return {"made": False}
    t0 = time.monotonic()
    work = layout.base_work
    rootfs, done = work / "rootfs", work / "mmdebstrap.done"
    if force or not done.is_file():  # a finished mmdebstrap of an interrupted run is reused
        shutil.rmtree(work, ignore_errors=True)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        log.info("mmdebstrap", extra={"suite": SUITE, "packages": list(BASE_PACKAGES)})
        run_cmd(["nice", *mmdebstrap_argv(rootfs)], timeout=1800)
        done.write_text(f"{SUITE} {' '.join(BASE_PACKAGES)}\n")
    # python/pip as in the official image: /usr/local/bin/{python,python3,pip,pip3}, site-packages
    # under /usr/local/lib/python3.11 (a virtualenv over Debian's interpreter; pip from ensurepip)
    run_cmd(["chroot", str(rootfs), "/usr/bin/python3.11", "-m", "venv", "/usr/local"], timeout=600)
    if HOST_APT_SOURCES.is_file():  # bookworm, -updates and -security, as the host has them
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        shutil.copy(HOST_APT_SOURCES, rootfs / "etc/apt/sources.list.d/debian.sources")
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "var/log", "tmp"):
        d = rootfs / sub
        for child in d.glob("*"):
            if child.is_file() or child.is_symlink():
                child.unlink()
            elif child.is_dir() and child.name != "partial":
                shutil.rmtree(child)
    tar_path = work / "rootfs.tar"

    def skip_pseudo(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        top = info.name.split("/")[1] if info.name.count("/") >= 1 else ""
        if top in ("dev", "proc", "sys") and info.name.count("/") >= 2:
            return None  # empty mount points only, as in any image
        return info

    with tarfile.open(tar_path, "w") as tar:
        tar.add(rootfs, arcname=".", filter=skip_pseudo)
    ctr = run_cmd(layout.buildah_argv("from", "--pull=never", "scratch")).stdout.strip()
    try:
        run_cmd(layout.buildah_argv("add", ctr, str(tar_path), "/"), timeout=900)
        run_cmd(
            layout.buildah_argv(
                "config",
                "--env",
                "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env",
                "LANG=C.UTF-8",
                "--env",
                "PYTHON_VERSION=3.11 (Debian python3.11)",
                "--cmd",
                '["python3"]',
                "--os",
                "linux",
                "--arch",
                "amd64",
                "--annotation",
                f"org.lagpilot.base.version={BASE_VERSION}",
                "--label",
                "org.lagpilot.base=mmdebstrap bookworm minbase + Debian python3.11 (stand-in for python:3.11-slim-bookworm)",
                ctr,
            )
        )
        run_cmd(layout.buildah_argv("commit", "--rm", ctr, BASE_NAMES[0]), timeout=900)
    except Exception:
        run_cmd(layout.buildah_argv("rm", ctr), check=False)
        raise
    for extra in BASE_NAMES[1:]:
        run_cmd(layout.buildah_argv("tag", BASE_NAMES[0], extra))
    shutil.rmtree(work, ignore_errors=True)
    return {
        "made": True,
        "seconds": round(time.monotonic() - t0, 1),
        "size_bytes": image_size(layout, BASE_NAMES[0]),
    }
