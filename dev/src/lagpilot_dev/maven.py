"""Fetch jars from Maven Central with a throw-away pom and the system `mvn`.

Why Maven and not plain HTTP: the transitive runtime closure (Kafka: ~80 jars) is Maven's job, and
`dependency:copy-dependencies` gives exactly that. The Maven repository lives in `<cache>/m2`, so
everything the stack downloads is under one directory and the user's ~/.m2 is left alone.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from lagpilot_dev.paths import file_lock

log = logging.getLogger("lagpilot_dev.maven")

# pinned: a bare `dependency:` prefix resolves whatever the installed Maven's super POM names
# (2.8 from 2013 for Maven 3.8); 3.8.1 runs on Maven 3.6.3+ (verified with the machine's 3.8.7)
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


@dataclass(frozen=True)
class Dep:
    """One Maven coordinate, with optional exclusions as "group:artifact" (or "group:*")."""

    group: str
    artifact: str
    version: str
    exclusions: tuple[str, ...] = ()

    def xml(self) -> str:
        excl = "".join(
            f"<exclusion><groupId>{escape(e.split(':')[0])}</groupId>"
            f"<artifactId>{escape(e.split(':')[1])}</artifactId></exclusion>"
            for e in self.exclusions
        )
        return (
            f"<dependency><groupId>{escape(self.group)}</groupId><artifactId>{escape(self.artifact)}</artifactId>"
            f"<version>{escape(self.version)}</version>"
            + (f"<exclusions>{excl}</exclusions>" if excl else "")
            + "</dependency>"
        )


def pom(deps: Sequence[Dep]) -> str:
    """A minimal pom whose only purpose is to list `deps`."""
    body = "".join(d.xml() for d in deps)
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>lagpilot.dev</groupId><artifactId>fetch</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{body}</dependencies></project>"
    )


def fetch(deps: Sequence[Dep], dest: Path, cache: Path, what: str) -> list[Path]:
    """Copy the runtime closure of `deps` into `dest` (atomically: a half-done fetch never counts).

    Returns the jar paths. Raises RuntimeError with Maven's output when resolution fails.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (`mvn`) is not installed: apt-get install -y maven")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Maven 3.8 does not lock its local repository: two parts fetching at once could trip over
    # each other's half-written files, so fetches into one cache take turns.
    with file_lock(cache / ".maven.lock"):
        return _fetch_locked(mvn, deps, dest, cache, what)


def _fetch_locked(mvn: str, deps: Sequence[Dep], dest: Path, cache: Path, what: str) -> list[Path]:
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        (work / "pom.xml").write_text(pom(deps))
        out = work / "jars"
        argv = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(work / "pom.xml"),
            f"-Dmaven.repo.local={cache / 'm2'}",
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
        ]
        log.info(
            "downloading jars from Maven Central (first run only)", extra={"what": what, "into": str(dest)}
        )
        t0 = time.monotonic()
        env = dict(os.environ)
        env.setdefault("MAVEN_OPTS", "-Xmx512m")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"mvn failed fetching {what} (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
            )
        if dest.exists():
            shutil.rmtree(dest)
        out.replace(dest)
        jars = sorted(dest.glob("*.jar"))
        log.info(
            "downloaded jars",
            extra={"what": what, "jars": len(jars), "seconds": round(time.monotonic() - t0, 1)},
        )
        return jars
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fetch_artifact(dep: Dep, packaging: str, dest_dir: Path, cache: Path, what: str) -> Path:
    """Copy one artifact of another packaging than jar (a distribution `zip`), no transitive
    dependencies, into `dest_dir` as `<artifact>-<version>.<packaging>`; returns its path.
    The Maven repository is the cache's (`<cache>/m2`), as for `fetch`."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (`mvn`) is not installed: apt-get install -y maven")
    dest_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / ".maven.lock"):
        work = Path(tempfile.mkdtemp(prefix=".fetch.", dir=dest_dir))
        try:
            argv = [
                mvn,
                "-B",
                "-q",
                f"-Dmaven.repo.local={cache / 'm2'}",
                f"{DEPENDENCY_PLUGIN}:copy",
                f"-Dartifact={dep.group}:{dep.artifact}:{dep.version}:{packaging}",
                f"-DoutputDirectory={work}",
            ]
            log.info(
                "downloading from Maven Central (first run only)", extra={"what": what, "into": str(dest_dir)}
            )
            t0 = time.monotonic()
            env = dict(os.environ)
            env.setdefault("MAVEN_OPTS", "-Xmx512m")
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=env,
                timeout=1800,
                check=False,
                cwd=work,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"mvn failed fetching {what} (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
                )
            name = f"{dep.artifact}-{dep.version}.{packaging}"
            out = dest_dir / name
            (work / name).replace(out)
            log.info(
                "downloaded",
                extra={"what": what, "bytes": out.stat().st_size, "seconds": round(time.monotonic() - t0, 1)},
            )
            return out
        finally:
            shutil.rmtree(work, ignore_errors=True)
