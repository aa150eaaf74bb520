"""`lagpilot dev images`, the tools: buildah, podman and mmdebstrap, and the private storage they share.

Debian's `podman` (runs the images, with the `runc` runtime) and `mmdebstrap` are installed with
apt-get (podman needs conmon, its config under /etc/containers and a runtime at fixed paths; an
extracted tree would need all of those re-pointed, which apt does for us on this root machine).
Debian's buildah (1.28) cannot parse `ADD --checksum=...` (consumer_image/Dockerfile), so buildah
BUILDAH_VERSION is built from the Go module proxy into the cache (once; ~minutes on 2 cores), against
Debian's libsqlite3 (tag `libsqlite3`) rather than compiling the sqlite amalgamation with cgo.
`Layout` is the cache's layout and the argv of both tools over one private containers-storage.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagpilot_dev import gocache
from lagpilot_dev.paths import cache_dir, file_lock

log = logging.getLogger("lagpilot_dev.images")

BUILDAH_MODULE = "github.com/containers/buildah"
BUILDAH_VERSION = "v1.41.5"  # ADD --checksum needs >= 1.32; this one builds with the machine's Go
# no gpgme, btrfs or devicemapper headers needed: pure-Go OpenPGP, no such graph drivers
# libsqlite3: link Debian's libsqlite3 (libsqlite3-dev) instead of compiling go-sqlite3's 8 MB C amalgamation
BUILDAH_TAGS = (
    "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper libsqlite3"
)
# netavark: buildah 1.41 sets up its network backend even for --network host and looks for it
# mmdebstrap: the base (apt's pipelined downloads and resolver; debootstrap took 7-8 min here, network-bound)
# libsqlite3-dev: buildah's sqlite blob-info cache links against it (BUILDAH_TAGS)
APT_PACKAGES = ("podman", "runc", "netavark", "mmdebstrap", "libsqlite3-dev")
STORAGE_DRIVER = "overlay"
RUNTIME = "runc"


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def buildah(self) -> Path:
        return self.root / "bin" / f"buildah-{BUILDAH_VERSION}"

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def runroot(self) -> Path:
        return self.root / "run"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def base_work(self) -> Path:
        return self.root / "base"

    @property
    def lock(self) -> Path:
        return self.root / "images.lock"

    def storage_flags(self) -> list[str]:
        """Global flags shared by buildah and podman: one private containers-storage."""
        return [
            "--root",
            str(self.storage),
            "--runroot",
            str(self.runroot),
            "--storage-driver",
            STORAGE_DRIVER,
        ]

    def buildah_argv(self, *args: str) -> list[str]:
        return [str(self.buildah), *self.storage_flags(), *args]

    def podman_argv(self, *args: str) -> list[str]:
        return [
            "podman",
            *self.storage_flags(),
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
            "--runtime",
            RUNTIME,
            "--tmpdir",
            str(self.tmp),
            *args,
        ]


def default_layout() -> Layout:
    """$LAGPILOT_IMAGES_CACHE, else $LAGPILOT_CACHE/images: the override moves only this tool's state
    (e.g. a fresh directory to measure the cold path) and leaves the rest of the cache where it is."""
    override = os.environ.get("LAGPILOT_IMAGES_CACHE")
    return Layout(Path(override).expanduser() if override else cache_dir() / "images")


def ulimit_flags(nproc_cap: int | None = None) -> list[str]:
    """buildah and podman raise RLIMIT_NOFILE and RLIMIT_NPROC to 1048576 for their containers; here
    the hard limits are lower (20000, 96364) and raising them is refused (EPERM): ask for what the
    hard limits allow. runc (podman run) was still refused nproc=96364 (its hard limit) and accepts
    32768, hence `nproc_cap` for runs."""
    flags = []
    for name, res in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        _soft, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY and hard < 1048576:
            if name == "nproc" and nproc_cap is not None:
                hard = min(hard, nproc_cap)
            flags += ["--ulimit", f"{name}={hard}:{hard}"]
    return flags


RUN_NPROC_CAP = 32768


def run_cmd(
    argv: Sequence[str],
    *,
    check: bool = True,
    capture: bool = True,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    log.debug("run", extra={"argv": " ".join(argv)[:300]})
    proc = subprocess.run(list(argv), capture_output=capture, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and proc.returncode != 0:
        tail = ((proc.stderr or "") + (proc.stdout or ""))[-3000:] if capture else ""
        raise RuntimeError(f"command failed (exit {proc.returncode}): {' '.join(argv)[:400]}\n{tail}")
    return proc


def dpkg_installed(package: str) -> bool:
    p = run_cmd(["dpkg-query", "-W", "-f", "${Status}", package], check=False)
    return p.returncode == 0 and p.stdout.strip() == "install ok installed"


def ensure_apt_packages(packages: Sequence[str] = APT_PACKAGES) -> list[str]:
    """apt-get install the packages not installed yet; returns what was installed."""
    missing = [p for p in packages if not dpkg_installed(p)]
    if not missing:
        return []
    if os.geteuid() != 0:
        raise RuntimeError(f"{', '.join(missing)} missing and not root: apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log.info("installing Debian packages", extra={"packages": missing})
    run_apt_commands(
        [
            ["apt-get", "update", "-q", *APT_LOCK_WAIT],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_LOCK_WAIT, *missing],
        ],
        env,
    )
    return missing


# One lock for every apt-get run of the stack, machine-wide as apt's own locks are (a cold run
# installs the node's, the policy agent's, the images' and PostgreSQL's packages side by side), and
# retries while an apt run not ours holds apt's lists lock: `apt-get update` does not wait for it
# (DPkg::Lock::Timeout covers dpkg's lock only; seen: exit 100 at once, "Could not get lock
# .../lists/lock. It is held by process ...").
APT_LOCK = Path("/run/lock/lagpilot-apt.lock")
APT_LOCK_WAIT = ("-o", "DPkg::Lock::Timeout=600")
APT_BUSY_RETRIES = 60
APT_BUSY_RETRY_S = 10.0


def run_apt_commands(argvs: Iterable[Sequence[str]], env: dict[str, str]) -> None:
    """apt-get runs one after the other under the stack's one apt lock (APT_LOCK), each by `run_apt`
    (again while another apt run holds apt's locks): every apt run of the stack goes through here
    (`ensure_apt_packages`: the node's, the policy agent's, the images'; PostgreSQL's install)."""
    with file_lock(APT_LOCK):
        for argv in argvs:
            run_apt(argv, env=env)


def run_apt(argv: Sequence[str], env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    """One apt-get run (the caller holds APT_LOCK: `run_apt_commands`), again every APT_BUSY_RETRY_S while apt says another
    apt run holds one of its locks; RuntimeError with apt's output otherwise."""
    for _ in range(APT_BUSY_RETRIES):
        proc = run_cmd(argv, check=False, env=env, timeout=timeout)
        if proc.returncode == 0:
            return proc
        output = (proc.stderr or "") + (proc.stdout or "")
        if "Could not get lock" not in output:
            break
        log.info(
            "apt busy (another apt run holds its lock): trying again", extra={"argv": " ".join(argv)[:200]}
        )
        time.sleep(APT_BUSY_RETRY_S)
    raise RuntimeError(f"command failed (exit {proc.returncode}): {' '.join(argv)[:400]}\n{output[-3000:]}")


def ensure_buildah(layout: Layout) -> Path:
    """Build buildah BUILDAH_VERSION from the Go module proxy into the cache (once), in the cold
    run's Go caches (lagpilot_dev.gocache: the modules it shares with the stack's Go builds are
    downloaded once; removed after the run's last build, where Go's user-wide caches stayed)."""
    if layout.buildah.is_file():
        return layout.buildah
    go = go_toolchain()
    if go is None:
        raise RuntimeError("no Go toolchain: buildah is built from the Go module proxy")
    with gocache.lease(gocache.go_cache_dir(cache_dir())) as go_dir:
        return _build_buildah(layout, go, {**os.environ, **gocache.go_env(go_dir)})


def _build_buildah(layout: Layout, go: str, env: dict[str, str]) -> Path:
    # `go install module@version` asks the proxy for the module's version list (deprecation check),
    # which the proxy here refuses; downloading the one version and building inside it does not.
    dl = run_cmd(
        [go, "mod", "download", "-json", f"{BUILDAH_MODULE}@{BUILDAH_VERSION}"], env=env, timeout=900
    )
    src_dir = Path(json.loads(dl.stdout)["Dir"])
    work = layout.root / "src" / f"buildah-{BUILDAH_VERSION}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src_dir, work)
    for p in [work, *work.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
    out = layout.buildah.with_suffix(".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    log.info("building buildah from the Go module proxy", extra={"version": BUILDAH_VERSION})
    # all cores (`-p 1` before serialised its ~300 package compiles)
    run_cmd(
        ["nice", go, "build", "-mod=mod", "-tags", BUILDAH_TAGS, "-o", str(out), "./cmd/buildah"],
        cwd=work,
        env={**env, "CGO_ENABLED": "1"},
        timeout=3600,
    )
    out.rename(layout.buildah)
    shutil.rmtree(work, ignore_errors=True)
    log.info("built buildah", extra={"seconds": round(time.monotonic() - t0, 1)})
    return layout.buildah


def go_toolchain() -> str | None:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    return go if Path(go).exists() else None


def missing_preconditions(layout: Layout) -> list[str]:
    """What stops build_and_run before it starts, each as a sentence saying what to do (empty: nothing).
    Checked without installing anything: apt packages need root, buildah needs Go (unless built)."""
    problems = []
    missing = [p for p in APT_PACKAGES if not dpkg_installed(p)]
    if missing and os.geteuid() != 0:
        problems.append(
            f"Debian packages {', '.join(missing)} missing and not root: apt-get install {' '.join(missing)}"
        )
    if missing and os.geteuid() == 0 and shutil.which("apt-get") is None:
        problems.append(f"Debian packages {', '.join(missing)} missing and no apt-get")
    if not layout.buildah.is_file() and go_toolchain() is None:
        problems.append("no Go toolchain (`go`) to build buildah from the Go module proxy")
    return problems


def tool_versions(layout: Layout) -> dict[str, str]:
    """`buildah --version` and `podman --version` as installed: proof the tools exist after ensure_tools."""
    return {
        "buildah": run_cmd([str(layout.buildah), "--version"]).stdout.strip(),
        "podman": run_cmd(["podman", "--version"]).stdout.strip(),
    }


def ensure_tools(layout: Layout) -> dict[str, Any]:
    t0 = time.monotonic()
    installed = ensure_apt_packages()
    ensure_buildah(layout)
    for d in (layout.storage, layout.runroot, layout.tmp):
        d.mkdir(parents=True, exist_ok=True)
    return {
        "apt_installed": installed,
        "buildah": str(layout.buildah),
        "versions": tool_versions(layout),
        "seconds": round(time.monotonic() - t0, 1),
    }


# ---------------------------------------------------------------- queries of the storage


def image_exists(layout: Layout, name: str) -> bool:
    return (
        run_cmd(
            layout.buildah_argv("inspect", "--type", "image", "--format", "{{.FromImageID}}", name),
            check=False,
        ).returncode
        == 0
    )


def image_size(layout: Layout, name: str) -> int:
    p = run_cmd(layout.podman_argv("image", "inspect", "--format", "{{.Size}}", name))
    return int(p.stdout.strip())


def image_user(layout: Layout, name: str) -> str:
    return run_cmd(
        layout.podman_argv("image", "inspect", "--format", "{{.Config.User}}", name)
    ).stdout.strip()
