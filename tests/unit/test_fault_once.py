"""The runtime's LP_TEST_* crash points fire once across processes that share no directory: pods of a
real node under Pod Security `restricted` claim the marker as a row in the test's PostgreSQL table
(lagpilot_runtime.fault_once; docs/node.md "Retiring the pod runner")."""

from __future__ import annotations

import pytest


class FakeDb:
    """psycopg.connect's stand-in: a table of claimed names, shared by every connection."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.dsns: list[str] = []

    def connect(self, dsn: str) -> FakeDb.Conn:
        self.dsns.append(dsn)
        return FakeDb.Conn(self)

    class Conn:
        def __init__(self, db: FakeDb) -> None:
            self.db = db

        def __enter__(self) -> FakeDb.Conn:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def execute(self, sql: str, args: tuple[str, str, float]) -> object:
            assert "ON CONFLICT (name) DO NOTHING" in sql and "lp_once_t1" in sql
            name, detail, _at = args
            won = name not in self.db.rows
            if won:
                self.db.rows[name] = detail
            return type("Cur", (), {"rowcount": 1 if won else 0})()

        def commit(self) -> None:
            return None


class Exited(Exception):
    pass


def _exit(code: int) -> None:
    raise Exited(code)


def test_handoff_crash_point_fires_once_through_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    from lagpilot_runtime import handoff_owner as mod

    db = FakeDb()
    monkeypatch.setattr(psycopg, "connect", db.connect)
    monkeypatch.setattr(mod.os, "_exit", _exit)
    monkeypatch.setenv("LP_TEST_HANDOFF_CRASH_AT", "after_ack")
    monkeypatch.delenv("LP_TEST_HANDOFF_CRASH_DIR", raising=False)
    monkeypatch.setenv("LP_TEST_ONCE_TABLE", "lp_once_t1")
    monkeypatch.setenv("LP_TEST_ONCE_DSN_FROM", "LEDGER_DSN")
    monkeypatch.setenv("LEDGER_DSN", "postgresql://u:secret@10.0.0.1:5432/db")
    monkeypatch.setenv("HOSTNAME", "orders-consumer-abc")
    mod._test_crash_point("after_commit")  # another point: no claim, no exit
    assert db.rows == {}
    with pytest.raises(Exited) as got:
        mod._test_crash_point("after_ack")
    assert got.value.args == (137,)
    assert list(db.rows) == ["handoff-after_ack"] and db.rows["handoff-after_ack"].endswith(
        " orders-consumer-abc"
    )
    mod._test_crash_point("after_ack")  # the restarted container, another pod: claimed already
    assert db.dsns == ["postgresql://u:secret@10.0.0.1:5432/db"] * 2


def test_the_marker_directory_still_serves_one_host(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from lagpilot_runtime import handoff_owner as mod

    monkeypatch.setattr(mod.os, "_exit", _exit)
    monkeypatch.delenv("LP_TEST_ONCE_TABLE", raising=False)
    monkeypatch.setenv("LP_TEST_HANDOFF_CRASH_AT", "after_commit")
    monkeypatch.setenv("LP_TEST_HANDOFF_CRASH_DIR", str(tmp_path))
    with pytest.raises(Exited):
        mod._test_crash_point("after_commit")
    mod._test_crash_point("after_commit")
    assert [p.name for p in tmp_path.iterdir()] == ["handoff-after_commit"]


@pytest.mark.parametrize("table", ["Bad-Name", "x; DROP TABLE y", "1abc"])
def test_a_table_name_that_is_not_an_identifier_is_refused(table: str) -> None:
    from lagpilot_runtime import fault_once

    env = {"LP_TEST_ONCE_TABLE": table, "LP_TEST_ONCE_DSN_FROM": "D", "D": "postgresql://x"}
    with pytest.raises(ValueError, match="LP_TEST_ONCE_TABLE"):
        fault_once.claim("handoff-after_ack", None, "1 2 pod", env=env, connect=FakeDb().connect)
