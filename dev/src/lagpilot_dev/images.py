"""`lagpilot dev images`: build the two container images from the real Dockerfiles and run them.

No Docker engine runs here and public base images cannot be pulled, so:

- tools: Debian's `podman` (runs the images, with the `runc` runtime) and `mmdebstrap` are installed
  with apt-get (podman needs conmon, its config under /etc/containers and a runtime at fixed paths;
  an extracted tree would need all of those re-pointed, which apt does for us on this root machine).
  Debian's buildah (1.28) cannot parse `ADD --checksum=...` (consumer_image/Dockerfile), so buildah
  BUILDAH_VERSION is built from the Go module proxy into the cache (once; ~minutes on 2 cores), against
  Debian's libsqlite3 (tag `libsqlite3`) rather than compiling the sqlite amalgamation with cgo.
- base: `FROM python:3.11-slim-bookworm` (consumer) and `python:3.11-slim` (operator's ARG default)
  name an image that cannot be pulled. A stand-in is made once from an `mmdebstrap --variant=minbase`
  of Debian bookworm (apt downloads, pipelined: several times faster than debootstrap here) with Debian's python3.11 + python3.11-venv, a virtualenv at /usr/local (so
  `python`/`pip` are /usr/local/bin/{python,pip} as in the official image) and the host's apt
  sources, committed under both names. Differences from the official image are listed in docs/images.md.
- build: `buildah bud --layers --pull=never --isolation chroot --network host` with the UNCHANGED
  Dockerfile and its `<Dockerfile>.dockerignore`; layers are cached in the storage under the cache.
  The RUN steps see (read-only bind mounts, never in a layer) the host's CA bundle and a pip.conf whose
  `find-links` is a flat directory of the pure-Python wheels pip already built on the host (pyspark's
  ~430 MB sdist, built into a wheel by `dev/setup`): the same version from the index would be the
  sdist, and pip prefers a wheel of the same version, so the image's pip skips that download + build.
- run: `podman run --network host` of each image: the operator's `lagpilot operator --help`, `id`
  in each (the image's USER), and the consumer's default command (`consume`) against the dev
  stack's Kafka into its PostgreSQL, stopped with SIGTERM once every record landed.

State lives in $LAGPILOT_IMAGES_CACHE, else $LAGPILOT_CACHE/images (default ~/.cache/lagpilot/images):
bin/ (buildah), storage/ (containers-storage, overlay driver), base/ (mmdebstrap work dir, removed after
the commit), wheels/ (links to the host's built wheels). buildah's Go build uses Go's own (user-wide) caches.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from lagpilot_dev.paths import cache_dir, file_lock, free_port

log = logging.getLogger("lagpilot_dev.images")

BUILDAH_MODULE = "github.com/containers/buildah"
BUILDAH_VERSION = "v1.41.5"  # ADD --checksum needs >= 1.32; this one builds with the machine's Go
# no gpgme, btrfs or devicemapper headers needed: pure-Go OpenPGP, no such graph drivers
# libsqlite3: link Debian's libsqlite3 (libsqlite3-dev) instead of compiling go-sqlite3's 8 MB C amalgamation
BUILDAH_TAGS = "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper libsqlite3"
# netavark: buildah 1.41 sets up its network backend even for --network host and looks for it
# mmdebstrap: the base (apt's pipelined downloads and resolver; debootstrap took 7-8 min here, network-bound)
# libsqlite3-dev: buildah's sqlite blob-info cache links against it (BUILDAH_TAGS)
APT_PACKAGES = ("podman", "runc", "netavark", "mmdebstrap", "libsqlite3-dev")
SUITE = "bookworm"
# python3-distutils (+ lib2to3): python3.11-venv needs them (debootstrap, used before, did not resolve the virtual package)
BASE_PACKAGES = ("ca-certificates", "netbase", "tzdata", "python3.11", "python3.11-venv", "python3-distutils", "python3",
                 "python3-lib2to3")
BASE_NAMES = ("docker.io/library/python:3.11-slim-bookworm", "docker.io/library/python:3.11-slim")
# bump to remake the base when its recipe changes. Not bumped for the move from debootstrap (bookworm
# only) to mmdebstrap (bookworm + -updates + -security): the same packages and layout, so an existing
# base stays a valid stand-in and a machine's cached layers are kept (a bump costs a cold rebuild)
BASE_VERSION = "1"
STORAGE_DRIVER = "overlay"
RUNTIME = "runc"
HOST_APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


@dataclass(frozen=True)
class ImageDef:
    name: str
    dockerfile: str  # relative to the repository root (the build context)
    tag: str

    @property
    def ignorefile(self) -> str:
        return f"{self.dockerfile}.dockerignore"


IMAGES: dict[str, ImageDef] = {
    "operator": ImageDef("operator", "operator/Dockerfile", "localhost/lagpilot/operator:0.1.0"),
    "consumer": ImageDef("consumer", "consumer_image/Dockerfile", "localhost/lagpilot/consumer:0.1.0"),
}


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
        return ["--root", str(self.storage), "--runroot", str(self.runroot), "--storage-driver", STORAGE_DRIVER]

    def buildah_argv(self, *args: str) -> list[str]:
        return [str(self.buildah), *self.storage_flags(), *args]

    def podman_argv(self, *args: str) -> list[str]:
        return ["podman", *self.storage_flags(), "--cgroup-manager", "cgroupfs", "--events-backend", "file",
                "--runtime", RUNTIME, "--tmpdir", str(self.tmp), *args]


def default_layout() -> Layout:
    """$LAGPILOT_IMAGES_CACHE, else $LAGPILOT_CACHE/images: the override moves only this tool's state
    (e.g. a fresh directory to measure the cold path) and leaves the rest of the cache where it is."""
    override = os.environ.get("LAGPILOT_IMAGES_CACHE")
    return Layout(Path(override).expanduser() if override else cache_dir() / "images")


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


def bud_argv(layout: Layout, image: ImageDef, context: Path) -> list[str]:
    """The build command: the unchanged Dockerfile, its .dockerignore, cached layers, no pull."""
    return layout.buildah_argv(
        "bud", "--layers", "--pull=never", "--isolation", "chroot", "--network", "host", *ulimit_flags(RUN_NPROC_CAP),
        *build_mounts(layout),
        "-f", str(context / image.dockerfile), "--ignorefile", str(context / image.ignorefile),
        "-t", image.tag, str(context))


def _run(argv: Sequence[str], *, check: bool = True, capture: bool = True, timeout: float | None = None,
         env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    log.debug("run", extra={"argv": " ".join(argv)[:300]})
    proc = subprocess.run(list(argv), capture_output=capture, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and proc.returncode != 0:
        tail = ((proc.stderr or "") + (proc.stdout or ""))[-3000:] if capture else ""
        raise RuntimeError(f"command failed (exit {proc.returncode}): {' '.join(argv)[:400]}\n{tail}")
    return proc


# ---------------------------------------------------------------- tools


def dpkg_installed(package: str) -> bool:
    p = _run(["dpkg-query", "-W", "-f", "${Status}", package], check=False)
    return p.returncode == 0 and p.stdout.strip() == "install ok installed"


def ensure_apt_packages(packages: Sequence[str] = APT_PACKAGES) -> list[str]:
    """apt-get install the packages not installed yet; returns what was installed."""
    missing = [p for p in packages if not dpkg_installed(p)]
    if not missing:
        return []
    if os.geteuid() != 0:
        raise RuntimeError(f"{', '.join(missing)} missing and not root: apt-get install {' '.join(missing)}")
    lock_wait = ["-o", "DPkg::Lock::Timeout=600"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log.info("installing Debian packages", extra={"packages": missing})
    _run(["apt-get", "update", "-q", *lock_wait], env=env)
    _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *lock_wait, *missing], env=env)
    return missing


def ensure_buildah(layout: Layout) -> Path:
    """Build buildah BUILDAH_VERSION from the Go module proxy into the cache (once)."""
    if layout.buildah.is_file():
        return layout.buildah
    go = go_toolchain()
    if go is None:
        raise RuntimeError("no Go toolchain: buildah is built from the Go module proxy")
    # `go install module@version` asks the proxy for the module's version list (deprecation check),
    # which the proxy here refuses; downloading the one version and building inside it does not.
    dl = _run([go, "mod", "download", "-json", f"{BUILDAH_MODULE}@{BUILDAH_VERSION}"], timeout=900)
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
    _run(["nice", go, "build", "-mod=mod", "-tags", BUILDAH_TAGS, "-o", str(out), "./cmd/buildah"],
         cwd=work, env={**os.environ, "CGO_ENABLED": "1"}, timeout=3600)
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
        problems.append(f"Debian packages {', '.join(missing)} missing and not root: apt-get install {' '.join(missing)}")
    if missing and os.geteuid() == 0 and shutil.which("apt-get") is None:
        problems.append(f"Debian packages {', '.join(missing)} missing and no apt-get")
    if not layout.buildah.is_file() and go_toolchain() is None:
        problems.append("no Go toolchain (`go`) to build buildah from the Go module proxy")
    return problems


def tool_versions(layout: Layout) -> dict[str, str]:
    """`buildah --version` and `podman --version` as installed: proof the tools exist after ensure_tools."""
    return {"buildah": _run([str(layout.buildah), "--version"]).stdout.strip(),
            "podman": _run(["podman", "--version"]).stdout.strip()}


def ensure_tools(layout: Layout) -> dict[str, Any]:
    t0 = time.monotonic()
    installed = ensure_apt_packages()
    ensure_buildah(layout)
    for d in (layout.storage, layout.runroot, layout.tmp):
        d.mkdir(parents=True, exist_ok=True)
    return {"apt_installed": installed, "buildah": str(layout.buildah), "versions": tool_versions(layout),
            "seconds": round(time.monotonic() - t0, 1)}


# ---------------------------------------------------------------- base


def image_exists(layout: Layout, name: str) -> bool:
    return _run(layout.buildah_argv("inspect", "--type", "image", "--format", "{{.FromImageID}}", name),
                check=False).returncode == 0


def base_label_ok(layout: Layout) -> bool:
    p = _run(layout.buildah_argv("inspect", "--type", "image", "--format",
                                 '{{index .ImageAnnotations "org.lagpilot.base.version"}}', BASE_NAMES[0]), check=False)
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
    return ["mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory",
            f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), sources]


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
        _run(["nice", *mmdebstrap_argv(rootfs)], timeout=1800)
        done.write_text(f"{SUITE} {' '.join(BASE_PACKAGES)}\n")
    # python/pip as in the official image: /usr/local/bin/{python,python3,pip,pip3}, site-packages
    # under /usr/local/lib/python3.11 (a virtualenv over Debian's interpreter; pip from ensurepip)
    _run(["chroot", str(rootfs), "/usr/bin/python3.11", "-m", "venv", "/usr/local"], timeout=600)
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
    ctr = _run(layout.buildah_argv("from", "--pull=never", "scratch")).stdout.strip()
    try:
        _run(layout.buildah_argv("add", ctr, str(tar_path), "/"), timeout=900)
        _run(layout.buildah_argv(
            "config", "--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--env", "LANG=C.UTF-8", "--env", "PYTHON_VERSION=3.11 (Debian python3.11)",
            "--cmd", '["python3"]', "--os", "linux", "--arch", "amd64",
            "--annotation", f"org.lagpilot.base.version={BASE_VERSION}",
            "--label", "org.lagpilot.base=mmdebstrap bookworm minbase + Debian python3.11 (stand-in for python:3.11-slim-bookworm)",
            ctr))
        _run(layout.buildah_argv("commit", "--rm", ctr, BASE_NAMES[0]), timeout=900)
    except Exception:
        _run(layout.buildah_argv("rm", ctr), check=False)
        raise
    for extra in BASE_NAMES[1:]:
        _run(layout.buildah_argv("tag", BASE_NAMES[0], extra))
    shutil.rmtree(work, ignore_errors=True)
    return {"made": True, "seconds": round(time.monotonic() - t0, 1), "size_bytes": image_size(layout, BASE_NAMES[0])}


# ---------------------------------------------------------------- build and run


def image_size(layout: Layout, name: str) -> int:
    p = _run(layout.podman_argv("image", "inspect", "--format", "{{.Size}}", name))
    return int(p.stdout.strip())


def image_user(layout: Layout, name: str) -> str:
    return _run(layout.podman_argv("image", "inspect", "--format", "{{.Config.User}}", name)).stdout.strip()


def build(layout: Layout, image: ImageDef, context: Path | None = None) -> dict[str, Any]:
    context = context or repo_root()
    t0 = time.monotonic()
    log.info("building image", extra={"image": image.tag, "dockerfile": image.dockerfile})
    log_file = layout.root / f"build-{image.name}.log"
    with open(log_file, "w") as out:
        proc = subprocess.run(bud_argv(layout, image, context), stdout=out, stderr=subprocess.STDOUT, text=True)
    seconds = round(time.monotonic() - t0, 1)
    text = log_file.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"build of {image.tag} failed (exit {proc.returncode}); log {log_file}:\n{text[-3000:]}")
    steps = sum(1 for line in text.splitlines() if line.startswith("STEP ") or (line.startswith("[") and "] STEP " in line))
    cached = sum(1 for line in text.splitlines() if line.startswith("--> Using cache"))
    return {"image": image.tag, "seconds": seconds, "size_bytes": image_size(layout, image.tag),
            "user": image_user(layout, image.tag), "steps": steps, "cached_steps": cached, "log": str(log_file)}


def run_id(layout: Layout, image: ImageDef) -> str:
    """`id` inside the image, as whatever user the image says (its USER)."""
    return _run(layout.podman_argv("run", "--rm", "--network", "host", *ulimit_flags(RUN_NPROC_CAP), "--entrypoint", "id", image.tag),
                timeout=300).stdout.strip()


def run_operator_help(layout: Layout) -> dict[str, Any]:
    img = IMAGES["operator"]
    t0 = time.monotonic()
    p = _run(layout.podman_argv("run", "--rm", "--network", "host", *ulimit_flags(RUN_NPROC_CAP), img.tag, "--help"), timeout=300)
    return {"exit": p.returncode, "help_head": p.stdout.strip().splitlines()[:2],
            "id": run_id(layout, img), "seconds": round(time.monotonic() - t0, 1)}


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        fut.result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            break
        time.sleep(0.2)
    prod = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        prod.produce(topic, key=b"k%d" % i, value=b"image-record-%d" % i, partition=i % partitions)
    if prod.flush(60) != 0:
        raise RuntimeError("records not delivered")


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def pg_count(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
        if exists is None:
            return 0
        return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def pg_summary(dsn: str, table: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        n, distinct, parts = conn.execute(
            f'SELECT count(*), count(DISTINCT (topic, partition, "offset")), count(DISTINCT partition) FROM "{table}"').fetchone()
    return {"rows": n, "distinct_offsets": distinct, "partitions": parts}


def run_consumer(layout: Layout, bootstrap: str, dsn: str, count: int = 2000, partitions: int = 2,
                 timeout: float = 240.0) -> dict[str, Any]:
    """The consumer image's default command (`consume`) on host network: `count` records produced
    to a new topic must all land in a new PostgreSQL table; then SIGTERM (podman stop) and the
    group's committed offsets read back from Kafka."""
    img = IMAGES["consumer"]
    suffix = uuid.uuid4().hex[:8]
    topic, group, table, name = f"images-{suffix}", f"images-{suffix}", f"images_{suffix}", f"lagpilot-consumer-{suffix}"
    produce(bootstrap, topic, count, partitions)
    env = {"LAGPILOT_BOOTSTRAP_SERVERS": bootstrap, "LAGPILOT_TOPIC": topic, "LAGPILOT_GROUP_ID": group,
           "LAGPILOT_SINK": "postgres", "LAGPILOT_POSTGRES_DSN": dsn, "LAGPILOT_POSTGRES_TABLE": table,
           "LAGPILOT_METRICS_PORT": str(free_port()), "LAGPILOT_POD_NAME": name, "LAGPILOT_BATCH_MAX_RECORDS": "500"}
    env_flags = [a for k in env for a in ("--env", k)]  # values come from our environment, not argv
    t0 = time.monotonic()
    _run(layout.podman_argv("run", "--detach", "--name", name, "--network", "host", *ulimit_flags(RUN_NPROC_CAP), *env_flags, img.tag),
         env={**os.environ, **env}, timeout=300)
    try:
        uid_line = ""
        landed = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            landed = pg_count(dsn, table)
            if landed >= count:
                break
            state = _run(layout.podman_argv("inspect", "--format", "{{.State.Status}}", name), check=False).stdout.strip()
            if state not in ("running", "created", "configured"):
                break
            time.sleep(1.0)
        seconds_to_land = round(time.monotonic() - t0, 1)
        top = _run(layout.podman_argv("top", name, "user", "huser", "args"), check=False)
        uid_line = top.stdout.strip()
        _run(layout.podman_argv("stop", "--time", "30", name), timeout=120)
        exit_code = int(_run(layout.podman_argv("inspect", "--format", "{{.State.ExitCode}}", name)).stdout.strip())
        logs = _run(layout.podman_argv("logs", name), check=False)
        log_text = (logs.stdout or "") + (logs.stderr or "")
    finally:
        _run(layout.podman_argv("rm", "--force", name), check=False)
    offsets = committed_offsets(bootstrap, group, topic, partitions)
    return {"topic": topic, "group": group, "table": table, "produced": count,
            "postgres": pg_summary(dsn, table), "committed": offsets, "exit_code": exit_code,
            "seconds_to_land": seconds_to_land, "top": uid_line, "log_lines": len(log_text.splitlines()),
            "log_tail": log_text.strip().splitlines()[-3:]}


# ---------------------------------------------------------------- whole flow


@dataclass
class Report:
    tools: dict[str, Any] = field(default_factory=dict)
    base: dict[str, Any] = field(default_factory=dict)
    builds: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"tools": self.tools, "base": self.base, "builds": self.builds, "runs": self.runs,
                "seconds": self.seconds}


def build_and_run(names: Sequence[str] = ("operator", "consumer"), run: bool = True, rebuild_base: bool = False,
                  bootstrap: str | None = None, dsn: str | None = None, layout: Layout | None = None) -> Report:
    layout = layout or default_layout()
    layout.root.mkdir(parents=True, exist_ok=True)
    report = Report()
    t0 = time.monotonic()
    with file_lock(layout.lock):  # one build at a time on this machine
        report.tools = ensure_tools(layout)
        report.base = ensure_base(layout, force=rebuild_base)
        for n in names:
            report.builds[n] = build(layout, IMAGES[n])
        if run:
            if "operator" in names:
                report.runs["operator"] = run_operator_help(layout)
            if "consumer" in names:
                if not bootstrap or not dsn:
                    raise RuntimeError("the consumer run needs Kafka and PostgreSQL: lagpilot dev up --parts kafka,postgres")
                report.runs["consumer"] = {"id": run_id(layout, IMAGES["consumer"]),
                                           **run_consumer(layout, bootstrap, dsn)}
    report.seconds = round(time.monotonic() - t0, 1)
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", default="operator,consumer", help="comma-separated images (default: %(default)s)")
    p.add_argument("--no-run", action="store_true", help="build only")
    p.add_argument("--rebuild-base", action="store_true", help="remake the mmdebstrap base image")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress logs on stderr")


def main(args: argparse.Namespace, stack: Any) -> int:
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise ValueError(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    bootstrap = dsn = None
    if not args.no_run and "consumer" in names:
        info = stack.status()
        bootstrap, dsn = info.bootstrap_servers, info.postgres_dsn
    report = build_and_run(names, run=not args.no_run, rebuild_base=args.rebuild_base, bootstrap=bootstrap, dsn=dsn)
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
        return 0
    for n, b in report.builds.items():
        print(f"# {n}: {b['image']} built in {b['seconds']} s ({b['cached_steps']}/{b['steps']} steps cached), "
              f"{b['size_bytes'] / 1e6:.0f} MB, USER {b['user']}")
    if report.base.get("made"):
        print(f"# base {BASE_NAMES[0]} made in {report.base['seconds']} s, {report.base['size_bytes'] / 1e6:.0f} MB")
    for n, r in report.runs.items():
        print(f"# {n} run: id -> {r['id']}")
        if n == "operator":
            print(f"#   lagpilot operator --help -> exit {r['exit']}: {' '.join(r['help_head'])[:100]}")
        else:
            print(f"#   consumed {r['postgres']['rows']}/{r['produced']} records into {r['table']} "
                  f"({r['postgres']['distinct_offsets']} distinct offsets) in {r['seconds_to_land']} s; "
                  f"committed {r['committed']}; exit {r['exit_code']} after SIGTERM")
    print(f"# total {report.seconds} s")
    return 0
