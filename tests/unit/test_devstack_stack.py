"""Stack orchestration with fake parts: up/status/down, ownership, leases, the CLI's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev import cli
from lagpilot_dev.stack import ALL_PARTS, Stack, StackInfo, parse_parts


class FakePart:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name = name
        self.running = False
        self.fail = fail
        self.calls: list[str] = []

    def install(self) -> None:
        self.calls.append("install")

    def start(self) -> None:
        self.calls.append("start")
        if self.fail:
            raise RuntimeError(f"{self.name} exploded")
        self.running = True

    def stop(self) -> None:
        self.calls.append("stop")
        self.running = False

    def is_running(self) -> bool:
        return self.running

    def info(self) -> dict[str, Any]:
        return {
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "kafka_home": "/k/libs"},
            "postgres": {"postgres_dsn": "postgresql://u:p@127.0.0.1:2/d"},
            "spark": {"spark_jars": ["/a.jar"]},
            "kube": {"kubeconfig": "/kc", "kubectl": "/bin/kubectl", "server": "https://127.0.0.1:3"},
        }[self.name]


def fake_stack(tmp_path: Path, fail: set[str] = frozenset()) -> tuple[Stack, dict[str, FakePart]]:
    s = Stack(cache_dir=tmp_path / "cache", state_dir=tmp_path / "state")
    parts = {n: FakePart(n, fail=n in fail) for n in ALL_PARTS}
    s._parts.update(parts)  # inject fakes
    return s, parts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kafka", ("kafka",)),
        ("postgres,kafka", ("kafka", "postgres")),
        (" kafka , spark ,", ("kafka", "spark")),
        ("all", ALL_PARTS),
        (None, ("kafka", "kube", "postgres")),
        (["spark", "kube"], ("kube", "spark")),
    ],
    ids=["one", "canonical-order", "spaces-and-trailing-comma", "all", "default", "list"],
)
def test_parse_parts(text: Any, expected: tuple[str, ...]) -> None:
    assert parse_parts(text) == expected


def test_parse_parts_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="zookeeper"):
        parse_parts("kafka,zookeeper")


def test_up_starts_only_what_is_missing_and_reports(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path)
    parts["postgres"].running = True
    info = s.up(["kafka", "postgres"])
    assert parts["kafka"].calls == ["install", "start"]
    assert parts["postgres"].calls == []  # already running: untouched
    assert parts["kube"].calls == []  # not asked for
    assert info.bootstrap_servers == "127.0.0.1:1"
    assert info.kafka_home == "/k/libs"
    assert info.postgres_dsn == "postgresql://u:p@127.0.0.1:2/d"
    assert info.kubeconfig is None
    assert info.running == {"kafka": True, "postgres": True}


def test_up_reports_every_failed_part(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path, fail={"kafka", "postgres"})
    with pytest.raises(RuntimeError) as err:
        s.up(["kafka", "postgres", "spark"])
    assert "kafka exploded" in str(err.value) and "postgres exploded" in str(err.value)
    assert parts["spark"].running  # the healthy part still came up


def test_status_starts_nothing_and_down_stops_running(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path)
    parts["kube"].running = True
    info = s.status()
    assert info.running == {
        "kafka": False,
        "kube": True,
        "postgres": False,
        "spark": False,
        "prometheus": False,
        "node": False,
        "netpol": False,
        "keda": False,
        "oidc": False,
    }
    assert (
        info.kubeconfig == "/kc"
        and info.kubectl == "/bin/kubectl"
        and info.kube_server == "https://127.0.0.1:3"
    )
    assert all(p.calls == [] for p in parts.values())
    assert s.down() == ["kube"]
    assert not parts["kube"].running


def test_last_lease_stops_only_test_owned_parts(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path)
    parts["postgres"].running = True  # a person's stack: must survive the test sessions
    _, lease_a = s.acquire(())
    _, lease_b = s.acquire(())
    s.up(["kafka", "postgres"], by_tests=True)
    assert s.release(lease_a) == []  # session B still holds a lease
    assert parts["kafka"].running
    assert s.release(lease_b) == ["kafka"]
    assert not parts["kafka"].running
    assert parts["postgres"].running


def test_person_dev_up_takes_ownership_from_tests(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path)
    _, lease = s.acquire(())
    s.up(["kafka"], by_tests=True)
    s.up(["kafka"])  # `lagpilot dev up` while the tests run: the person wants it kept
    assert s.release(lease) == []
    assert parts["kafka"].running


def test_lease_of_a_dead_session_does_not_block_the_stop(tmp_path: Path) -> None:
    s, _parts = fake_stack(tmp_path)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / "state" / "leases").mkdir(parents=True)
    (tmp_path / "state" / "leases" / "crashed").write_text(dead.stdout)
    _, lease = s.acquire(())
    s.up(["kafka"], by_tests=True)
    assert s.release(lease) == ["kafka"]
    assert not (tmp_path / "state" / "leases" / "crashed").exists()


def test_release_with_keep_leaves_parts_running(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path)
    _, lease = s.acquire(())
    s.up(["kafka"], by_tests=True)
    assert s.release(lease, stop=False) == []
    assert parts["kafka"].running


def test_shell_exports_only_for_running_parts() -> None:
    info = StackInfo(bootstrap_servers="127.0.0.1:9", kubeconfig="/kc")
    assert info.shell_exports() == ["export KUBECONFIG=/kc", "export LAGPILOT_BOOTSTRAP_SERVERS=127.0.0.1:9"]


def test_cli_up_json_is_one_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s, _parts = fake_stack(tmp_path)
    monkeypatch.setattr(cli, "Stack", lambda: s)
    assert cli.main(["up", "--parts", "kafka,postgres", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bootstrap_servers"] == "127.0.0.1:1"
    assert out["postgres_dsn"].startswith("postgresql://")
    assert out["running"] == {"kafka": True, "postgres": True}


def test_cli_up_human_prints_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s, _parts = fake_stack(tmp_path)
    monkeypatch.setattr(cli, "Stack", lambda: s)
    assert cli.main(["up", "--parts", "kafka,kube,postgres", "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "export KUBECONFIG=/kc" in out
    assert "export LAGPILOT_BOOTSTRAP_SERVERS=127.0.0.1:1" in out
    assert any(line.startswith("export LAGPILOT_POSTGRES_DSN=") for line in out)


def test_cli_failure_is_exit_1_with_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s, _parts = fake_stack(tmp_path, fail={"kafka"})
    monkeypatch.setattr(cli, "Stack", lambda: s)
    assert cli.main(["up", "--parts", "kafka", "-q"]) == 1
    assert "kafka exploded" in capsys.readouterr().err


def test_cli_bad_parts_is_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _parts = fake_stack(tmp_path)
    monkeypatch.setattr(cli, "Stack", lambda: s)
    assert cli.main(["up", "--parts", "nope", "-q"]) == 1


def test_cli_down_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s, parts = fake_stack(tmp_path)
    parts["kafka"].running = True
    monkeypatch.setattr(cli, "Stack", lambda: s)
    assert cli.main(["down", "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == {"stopped": ["kafka"]}


def test_importing_the_stack_does_not_import_parts() -> None:
    code = (
        "import sys, lagpilot_dev.stack, lagpilot_dev.cli; "
        "print(sorted(m for m in sys.modules if m.startswith(('lagpilot_dev.kube','pyspark','confluent_kafka','psycopg'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ}
    ).stdout.strip()
    assert out == "[]"


def test_purge_stops_then_deletes_data_of_parts_that_can(tmp_path: Path) -> None:
    s, parts = fake_stack(tmp_path)
    purged: list[str] = []
    parts["kafka"].purge = lambda: purged.append("kafka")  # type: ignore[attr-defined]
    parts["kafka"].running = True
    assert s.purge(["kafka", "spark"]) == ["kafka"]  # spark has no data to purge
    assert purged == ["kafka"]
    assert not parts["kafka"].running


def test_up_asks_again_when_a_health_probe_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # under load the apiserver's /readyz probe can time out right after a successful start: the
    # answer must still carry the kubeconfig (it was None once: the kube fixture then had no file)
    from lagpilot_dev import stack as mod

    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    s, parts = fake_stack(tmp_path)
    kube = parts["kube"]
    misses = {"n": 2}

    def flaky() -> bool:
        if kube.running and misses["n"] > 0:
            misses["n"] -= 1
            return False
        return kube.running

    kube.is_running = flaky  # type: ignore[method-assign]
    kube.running = True
    info = s.up(["kube"])
    assert info.kubeconfig == "/kc" and misses["n"] == 0


def test_up_names_a_part_that_never_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagpilot_dev import stack as mod

    monkeypatch.setattr(mod, "UP_STATUS_GRACE_S", 0.0)
    s, parts = fake_stack(tmp_path)
    parts["kube"].is_running = lambda: False  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="not answering its health check: kube"):
        s.up(["kube"])
