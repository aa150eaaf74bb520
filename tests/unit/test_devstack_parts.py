"""Pure helpers of the PostgreSQL, Spark and Maven parts (no apt, no JVM, no network)."""

from __future__ import annotations

import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lagpilot_dev import maven
from lagpilot_dev.postgres import dsn, traversable_by
from lagpilot_dev.spark import artifact_of, jars_to_drop, session_conf


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13"),
        ("zstd-jni-1.5.7-7.jar", "zstd-jni"),
        ("scala-parallel-collections_2.13-1.2.0.jar", "scala-parallel-collections_2.13"),
        ("javassist-3.30.2-GA.jar", "javassist"),
        ("commons-pool2-2.13.1.jar", "commons-pool2"),
        ("noversion.jar", "noversion"),
    ],
    ids=lambda v: v,
)
def test_artifact_of(jar: str, artifact: str) -> None:
    assert artifact_of(jar) == artifact


def test_jars_to_drop_keeps_only_what_pyspark_lacks() -> None:
    fetched = [
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "kafka-clients-3.9.2.jar",
        "commons-pool2-2.13.1.jar",
        "lz4-java-1.10.1.jar",
        "scala-library-2.13.15.jar",
        "slf4j-api-1.7.36.jar",
    ]
    shipped = [
        "lz4-java-1.11.0.jar",
        "scala-library-2.13.16.jar",
        "slf4j-api-2.0.17.jar",
        "commons-pool-1.5.4.jar",
    ]
    assert jars_to_drop(fetched, shipped) == {
        "lz4-java-1.10.1.jar",
        "scala-library-2.13.15.jar",
        "slf4j-api-1.7.36.jar",
    }


def test_session_conf_defaults_and_overrides() -> None:
    conf = session_conf("app", ["/a.jar", "/b.jar"], conf={"spark.sql.shuffle.partitions": "8"})
    assert conf["spark.jars"] == "/a.jar,/b.jar"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"


def test_pom_lists_deps_and_exclusions() -> None:
    text = maven.pom([maven.Dep("g", "a", "1.0", exclusions=("x:y",)), maven.Dep("g2", "b<", "2")])
    root = ET.fromstring(text)
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    deps = root.findall("m:dependencies/m:dependency", ns)
    assert [
        (
            d.findtext("m:groupId", namespaces=ns),
            d.findtext("m:artifactId", namespaces=ns),
            d.findtext("m:version", namespaces=ns),
        )
        for d in deps
    ] == [("g", "a", "1.0"), ("g2", "b<", "2")]
    excl = deps[0].find("m:exclusions/m:exclusion", ns)
    assert excl is not None and excl.findtext("m:artifactId", namespaces=ns) == "y"


def test_dsn_shape() -> None:
    assert dsn("lagpilot", "pw", 5433, "lagpilot") == "postgresql://lagpilot:pw@127.0.0.1:5433/lagpilot"


def test_traversable_by(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    inner = closed / "inner"
    inner.mkdir(parents=True)
    closed.chmod(0o700)
    tmp_path.chmod(0o755)
    try:
        stranger = 65534  # nobody
        assert traversable_by(tmp_path, stranger, {65534}) == all(
            os.stat(p).st_mode & stat.S_IXOTH for p in [*reversed(tmp_path.parents), tmp_path]
        )
        assert not traversable_by(inner, stranger, {65534})
        assert traversable_by(inner, os.stat(closed).st_uid, set())  # the owner may enter
        assert traversable_by(inner / "not-yet-created", os.stat(closed).st_uid, set())
    finally:
        closed.chmod(0o755)


def test_install_runs_apt_and_disables_debians_main_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh machine has only the psql client: install() must apt-get the server, without letting
    Debian create (and start) its own cluster on 5432."""
    import subprocess

    from lagpilot_dev import postgres

    bindir = tmp_path / "usr/lib/postgresql/15/bin"
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if "install" in argv:
            bindir.mkdir(parents=True)
            (bindir / "initdb").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    conf = tmp_path / "etc/postgresql-common/createcluster.conf"
    monkeypatch.setattr(postgres, "CREATECLUSTER_CONF", conf)
    monkeypatch.setattr(postgres, "find_bindir", lambda: bindir if (bindir / "initdb").exists() else None)
    monkeypatch.setattr(postgres.subprocess, "run", fake_run)
    monkeypatch.setattr(postgres.os, "geteuid", lambda: 0)
    part = postgres.PostgresPart(tmp_path / "cache", tmp_path / "state")
    assert not part.installed()
    part.install()
    assert part.installed()
    assert [c[:2] for c in calls] == [["apt-get", "update"], ["apt-get", "install"]]
    assert calls[1][-1] == "postgresql" and "-y" in calls[1]
    assert "create_main_cluster = false" in conf.read_text()
    part.install()  # installed: no second apt run
    assert len(calls) == 2


def test_install_without_root_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagpilot_dev import postgres

    monkeypatch.setattr(postgres, "find_bindir", lambda: None)
    monkeypatch.setattr(postgres.os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match="apt-get install -y postgresql"):
        postgres.PostgresPart(tmp_path / "cache", tmp_path / "state").install()
