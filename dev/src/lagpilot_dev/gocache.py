"""One Go module cache and one build cache for every Go build of a cold run (docs/node.md "Cold build").

The stack builds from the Go module proxy: the control plane and the node (dev/build-node.sh, which
runs dev/build-kube.sh), the NetworkPolicy agent (dev/build-netpol.sh), helm (dev/install-helm.sh),
kstatus-check and buildah. Each had caches of its own, deleted after it (or Go's user-wide ones, kept
forever), so a cold run downloaded the modules they share once per build and compiled the standard
library and every package they share again. Now the drivers of a cold run (`Stack.up`, the demo's and
`./dev/test`'s builds beside it) point every build at `<cache>/go` (`LAGPILOT_GO_CACHE_DIR`; the
scripts' `go_cache_lease`, dev/build-go-env.sh) and hold a *lease* on it while a build may come:
a shared flock on `<cache>/go.lease`. Whoever releases last (it gets the lock exclusively without
waiting) moves the directory aside and deletes it in the background, so a cold run keeps one
~5-8 GB cache while it builds and nothing after it; `LAGPILOT_KEEP_GO_CACHE=1` keeps it (a rebuild
is then incremental), `LAGPILOT_GO_CACHE_SHARED=1` uses Go's own user-wide caches instead (never
removed).

The lock file sits beside the directory, not in it: moving the directory aside never gives a later
build a different lock than a build still running holds.

This module is the one implementation of the lease: the build scripts (dev/build-go-env.sh, bash)
open the lock file as fd 9 and call `python -m lagpilot_dev.gocache lease|release GO_DIR` (the
venv's python: the scripts only run from the stack's drivers, after ./dev/setup made the venv),
which lock and release that fd; a flock belongs to the open file, so the script holds the lease
until it closes fd 9.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO

log = logging.getLogger("lagpilot_dev.gocache")

ENV_DIR = "LAGPILOT_GO_CACHE_DIR"
ENV_KEEP = "LAGPILOT_KEEP_GO_CACHE"
ENV_SHARED = "LAGPILOT_GO_CACHE_SHARED"
TRASH_PREFIX = ".go-trash."
SCRIPT_FD = 9  # the lock file's descriptor in the build scripts (dev/build-go-env.sh)
IN_USE = "Go caches in use by another build: its release removes them"
REMOVING = "removing the Go caches in the background (LAGPILOT_KEEP_GO_CACHE=1 keeps them)"


def go_cache_dir(cache: Path) -> Path:
    """`<cache>/go`: GOMODCACHE is its `go-mod`, GOCACHE its `go-build` (as the scripts set them)."""
    return Path(cache) / "go"


def lease_file(go_dir: Path) -> Path:
    """The lock beside the directory (`<cache>/go.lease`)."""
    return go_dir.with_name(go_dir.name + ".lease")


def build_env(cache: Path) -> dict[str, str]:
    """What a build script's environment adds: the shared directory (the scripts take their lease)."""
    return {ENV_DIR: str(go_cache_dir(cache))}


def go_env(go_dir: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """GOMODCACHE and GOCACHE in `go_dir` for a `go` run from Python (buildah); nothing when
    LAGPILOT_GO_CACHE_SHARED=1 (Go's own caches)."""
    if _flag(env, ENV_SHARED):
        return {}
    return {"GOMODCACHE": str(go_dir / "go-mod"), "GOCACHE": str(go_dir / "go-build")}


def _flag(env: Mapping[str, str] | None, name: str) -> bool:
    return (os.environ if env is None else env).get(name, "0").strip() == "1"


def removes_at_release(env: Mapping[str, str] | None = None) -> bool:
    """Whether the last lease's release deletes the caches: not with LAGPILOT_KEEP_GO_CACHE=1, nor
    with LAGPILOT_GO_CACHE_SHARED=1 (the builds then never wrote there)."""
    return not _flag(env, ENV_KEEP) and not _flag(env, ENV_SHARED)


def delete_in_background(path: Path) -> None:
    """`rm -rf` in a session of its own at the lowest priority: nothing waits for it (the Go module
    cache is read-only by design: made writable first)."""
    subprocess.Popen(
        [
            "nice",
            "-n",
            "19",
            "sh",
            "-c",
            'chmod -R u+w "$1" 2>/dev/null; rm -rf "$1"',
            "rm-go-cache",
            str(path),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@contextlib.contextmanager
def lease(
    go_dir: Path,
    env: Mapping[str, str] | None = None,
    delete: Callable[[Path], None] = delete_in_background,
) -> Iterator[Path]:
    """Hold a shared lease on `go_dir` (the builds make it) for the duration; on exit, when no other
    lease is held (a non-blocking exclusive lock) and `removes_at_release(env)`, move it aside
    (`<parent>/.go-trash.<random>`) and hand that to `delete` (`release`)."""
    go_dir = Path(go_dir)
    go_dir.parent.mkdir(parents=True, exist_ok=True)
    fh = open(lease_file(go_dir), "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_SH)
        yield go_dir
    finally:
        release(fh, go_dir, env, delete)


def release(
    fh: IO[str], go_dir: Path, env: Mapping[str, str] | None, delete: Callable[[Path], None]
) -> Path | None:
    """Drop a lease: the caches moved aside and handed to `delete` when it was the last one (the
    trash path returned), else None. The lock is converted without waiting: when it fails another
    lease is held, and its holder's release removes them."""
    try:
        if not removes_at_release(env):
            return None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(IN_USE, extra={"dir": str(go_dir)})
            return None
        if not go_dir.exists():
            return None
        # what an earlier removal left (its `rm` killed, e.g. by a reboot) goes too
        for stale in sorted(go_dir.parent.glob(TRASH_PREFIX + "*")):
            delete(stale)
        trash = go_dir.parent / f"{TRASH_PREFIX}{uuid.uuid4().hex[:12]}"
        go_dir.rename(trash)
        log.info(REMOVING, extra={"dir": str(go_dir)})
        delete(trash)
        return trash
    finally:
        fh.close()


def script_lock(fd: int, go_dir: Path) -> IO[str]:
    """The build script's open lock file (descriptor `fd`, left open: the script closes it) as a
    file object; ValueError unless it is `lease_file(go_dir)`."""
    st, want = os.fstat(fd), lease_file(Path(go_dir))
    if not want.exists() or not os.path.samestat(st, want.stat()):
        raise ValueError(f"fd {fd} is not {want} (dev/build-go-env.sh opens it before the lease)")
    return os.fdopen(fd, "a", closefd=False)


def main(argv: list[str] | None = None) -> int:
    """`python -m lagpilot_dev.gocache lease|release GO_DIR [--fd 9]`, the build scripts' lease
    (dev/build-go-env.sh `go_cache_lease`, `cleanup_go_caches`) on the lock file they hold open:
    `lease` takes the shared lock (waiting for a release in progress); `release` is `release` (the
    environment's LAGPILOT_KEEP_GO_CACHE and LAGPILOT_GO_CACHE_SHARED), printing what it did for the
    script's log. The lock stays with the script's descriptor after this process ends."""
    parser = argparse.ArgumentParser(prog="python -m lagpilot_dev.gocache", description=main.__doc__)
    parser.add_argument("action", choices=("lease", "release"))
    parser.add_argument("go_dir", type=Path)
    parser.add_argument("--fd", type=int, default=SCRIPT_FD)
    args = parser.parse_args(argv)
    fh = script_lock(args.fd, args.go_dir)
    if args.action == "lease":
        fcntl.flock(fh, fcntl.LOCK_SH)
        return 0
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    release(fh, args.go_dir, None, delete_in_background)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
