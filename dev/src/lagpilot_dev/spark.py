"""pyspark in local mode with the spark-sql-kafka-0-10 connector, its jars pre-fetched from Maven.

Why pre-fetch: `spark.jars.packages` would resolve with Ivy at every session start (slow, and it
needs the network at run time). The connector must be *exactly* the installed Spark's version:
pyproject pins pyspark==4.2.0 because Maven Central serves `spark-sql-kafka-0-10_2.13:4.2.0`
(and not 4.2.1 or later at the time of pinning).

Jars pyspark already ships (scala-library, lz4, snappy, slf4j, hadoop client, spark-tags, ...) are
left out: two versions of one library on the classpath is the classic Spark "NoSuchMethodError".
What remains is the connector, spark-token-provider-kafka, kafka-clients and commons-pool2.

"Running" for this part means "the jars are cached" (and the drain's class-data-sharing archive
was attempted): Spark is a library, each job starts its own local session.

The CDS archive (`lagpilot-drain.jsa` next to the jars, written once by `lagpilot drain
--train-cds`): the drain's JVM maps Spark's classes pre-parsed and pre-verified from it instead of
loading ~15,000 classes from jars, which cuts the drain's JVM start-up CPU by about half
(docs/drain.md, "Measured"). The consumer image writes the same archive at build time. A failed
attempt is remembered (`.cds-attempted`) so it is not retried on every start; the drain works
without the archive, only slower to start.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lagpilot_dev import maven
from lagpilot_dev.paths import LOOPBACK, file_lock

log = logging.getLogger("lagpilot_dev.spark")

SCALA_BINARY = "2.13"
CDS_ARCHIVE_NAME = "lagpilot-drain.jsa"  # = lagpilot_runtime.drain.spark.CDS_ARCHIVE_NAME
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^_/]*)\.jar$")


def pyspark_version() -> str:
    """The installed pyspark's version (the connector must match it exactly)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError as exc:
        raise RuntimeError("pyspark is not installed: `bash dev/setup` installs the [spark] extra") from exc


def pyspark_jars_dir() -> Path:
    """pyspark's bundled jars directory (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def artifact_of(jar_name: str) -> str:
    """ "kafka-clients-3.9.2.jar" → "kafka-clients"; "spark-sql-kafka-0-10_2.13-4.2.0.jar" →
    "spark-sql-kafka-0-10_2.13" (the version is the last '-<digit>…' part with no '_' in it)."""
    m = _JAR_NAME.match(jar_name)
    return m.group("artifact") if m else jar_name.removesuffix(".jar")


def jars_to_drop(fetched: Sequence[str], shipped: Sequence[str]) -> set[str]:
    """Fetched jar names whose artifact pyspark already ships (any version)."""
    have = {artifact_of(n) for n in shipped}
    return {n for n in fetched if artifact_of(n) in have}


class SparkPart:
    """Fetch and cache the Kafka connector jars for the installed pyspark."""

    name = "spark"

    def __init__(self, cache_dir: Path, state_dir: Path, version: str | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self._version = version

    @property
    def version(self) -> str:
        if self._version is None:
            self._version = pyspark_version()
        return self._version

    @property
    def jars_dir(self) -> Path:
        return self.cache_dir / f"spark-jars-{self.version}"

    def installed(self) -> bool:
        return (self.jars_dir / ".complete").exists()

    def install(self) -> None:
        """Fetch spark-sql-kafka-0-10 (= pyspark's version) and its runtime deps, minus pyspark's own jars."""
        if self.installed():
            return
        with file_lock(self.cache_dir / f".spark-jars-{self.version}.lock"):
            if self.installed():
                return
            dep = maven.Dep("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", self.version)
            jars = maven.fetch([dep], self.jars_dir, self.cache_dir, what=f"spark-sql-kafka {self.version}")
            shipped = [p.name for p in pyspark_jars_dir().glob("*.jar")]
            drop = jars_to_drop([j.name for j in jars], shipped)
            for name in sorted(drop):
                (self.jars_dir / name).unlink()
            kept = sorted(p.name for p in self.jars_dir.glob("*.jar"))
            log.info(
                "spark connector jars cached",
                extra={"kept": ",".join(kept), "dropped": ",".join(sorted(drop))},
            )
            if not any(artifact_of(k) == "kafka-clients" for k in kept):
                raise RuntimeError(f"kafka-clients missing from the fetched connector jars: {kept}")
            (self.jars_dir / ".complete").write_text(self.version + "\n")

    @property
    def cds_archive(self) -> Path:
        return self.jars_dir / CDS_ARCHIVE_NAME

    def cds_attempted(self) -> bool:
        return self.cds_archive.exists() or (self.jars_dir / ".cds-attempted").exists()

    def train_cds(self, timeout_s: float = 900.0) -> bool:
        """Write the drain's CDS archive with `lagpilot drain --train-cds` (a JVM run, ~1-2 min)."""
        with file_lock(self.cache_dir / f".spark-cds-{self.version}.lock"):
            if self.cds_attempted():
                return self.cds_archive.exists()
            env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
            try:
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "lagpilot_runtime.drain.job",
                        "--train-cds",
                        str(self.cds_archive),
                        "--jars",
                        ",".join(self.jars()),
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                )
                ok = proc.returncode == 0 and self.cds_archive.exists()
                detail = "" if ok else (proc.stderr or proc.stdout)[-500:]
            except (OSError, subprocess.TimeoutExpired) as exc:
                ok, detail = False, str(exc)
            (self.jars_dir / ".cds-attempted").write_text("ok\n" if ok else "failed\n")
            log.info(
                "spark drain CDS archive",
                extra={"written": ok, "path": str(self.cds_archive), "detail": detail},
            )
            return ok

    def start(self) -> None:
        self.install()
        if not self.cds_attempted():
            self.train_cds()

    def stop(self) -> None:
        """Nothing runs between jobs."""

    def is_running(self) -> bool:
        return self.installed() and self.cds_attempted()

    def jars(self) -> list[str]:
        return [str(p) for p in sorted(self.jars_dir.glob("*.jar"))]

    def info(self) -> dict[str, Any]:
        return {
            "spark_jars": self.jars(),
            "spark_version": self.version,
            "spark_jars_dir": str(self.jars_dir),
        }


def spark_jars(cache_dir: Path | None = None) -> list[str]:
    """Paths for `spark.jars` (fetched on first use)."""
    from lagpilot_dev.paths import cache_dir as default_cache
    from lagpilot_dev.paths import state_dir

    cache = Path(cache_dir) if cache_dir is not None else default_cache()
    part = SparkPart(cache, state_dir(cache))
    part.install()
    return part.jars()


def session_conf(
    app: str, jars: Sequence[str], master: str = "local[2]", conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The SparkSession settings `local_session` uses (pure, so it is unit-testable)."""
    out = {
        "spark.app.name": app,
        "spark.master": master,
        "spark.jars": ",".join(jars),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.driver.memory": "1g",
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": str(Path(tempfile.gettempdir()) / "lagpilot-spark-warehouse"),
    }
    out.update(conf or {})
    return out


def local_session(
    app: str = "lagpilot",
    jars: Sequence[str] | None = None,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    **more_conf: str,
) -> Any:
    """A local SparkSession with the Kafka connector on the classpath, UI off, few shuffle partitions.

    Extra settings by `conf={"spark.x": "y"}` or `**{"spark.x": "y"}`. Stop it with `.stop()`.
    """
    from pyspark.sql import SparkSession

    settings = session_conf(
        app, spark_jars() if jars is None else jars, master, {**(conf or {}), **more_conf}
    )
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
