"""run.py: the `lagpilot operator` command line."""

from __future__ import annotations

import pytest

from lagpilot.run import parse_args


@pytest.mark.parametrize(
    "argv, namespaces, standalone, port",
    [
        ([], [], False, 9090),
        (["--namespace", "a", "-n", "b", "--standalone"], ["a", "b"], True, 9090),
        (["--all-namespaces", "--metrics-port", "0"], [], False, 0),
    ],
    ids=["defaults", "two-namespaces", "cluster-no-metrics"],
)
def test_parse(
    argv: list[str], namespaces: list[str], standalone: bool, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAGPILOT_OPERATOR_METRICS_PORT", raising=False)
    a = parse_args(argv)
    assert (a.namespace, a.standalone, a.metrics_port) == (namespaces, standalone, port)


def test_metrics_port_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAGPILOT_OPERATOR_METRICS_PORT", "9191")
    assert parse_args([]).metrics_port == 9191


@pytest.mark.parametrize("argv", [["-n", "a", "-A"], ["--metrics-port", "70000"]])
def test_rejects(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_the_deployment_watch_successes_are_not_logged() -> None:
    import logging

    from lagpilot.run import quiet_watch_successes

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, msg, None, None)

    assert not quiet_watch_successes(rec("Handler 'deployment_seen' succeeded."))
    assert quiet_watch_successes(rec("Handler 'deployment_seen' failed with an exception. Will ignore."))
    assert quiet_watch_successes(rec("Handler 'apply' succeeded."))
