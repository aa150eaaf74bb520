"""The pod runner's kubelet decisions: command resolution, restart policy, back-off, exit codes,
conditions, probes (pure functions, no cluster)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev.podrunner import (
    StartError,
    build_argv,
    crash_backoff,
    exit_code_of,
    exit_outcome,
    image_repository,
    node_selector_matches,
    pod_conditions,
    probe_target,
    terminated_state,
)


@pytest.mark.parametrize(
    ("policy", "code", "restart", "phase"),
    [
        ("Always", 0, True, None),
        ("Always", 1, True, None),
        (None, 0, True, None),
        ("OnFailure", 0, False, "Succeeded"),
        ("OnFailure", 2, True, None),
        ("OnFailure", 137, True, None),
        ("Never", 0, False, "Succeeded"),
        ("Never", 1, False, "Failed"),
        ("Never", 143, False, "Failed"),
    ],
    ids=[
        "always-ok",
        "always-fail",
        "default-is-always",
        "onfailure-ok",
        "onfailure-fail",
        "onfailure-killed",
        "never-ok",
        "never-fail",
        "never-sigterm",
    ],
)
def test_exit_outcome(policy: str | None, code: int, restart: bool, phase: str | None) -> None:
    out = exit_outcome(policy, code)
    assert (out.restart, out.phase) == (restart, phase)


@pytest.mark.parametrize(
    ("returncode", "expected"),
    [
        (0, (0, None)),
        (3, (3, None)),
        (-9, (137, 9)),
        (-15, (143, 15)),
    ],
    ids=["ok", "error", "sigkill", "sigterm"],
)
def test_exit_code_of(returncode: int, expected: tuple[int, int | None]) -> None:
    assert exit_code_of(returncode) == expected


@given(
    st.integers(min_value=0, max_value=60),
    st.floats(min_value=0.1, max_value=10),
    st.floats(min_value=1, max_value=300),
)
def test_crash_backoff_is_monotonic_and_capped(restarts: int, initial: float, cap: float) -> None:
    a, b = crash_backoff(restarts, initial, cap), crash_backoff(restarts + 1, initial, cap)
    assert a <= b <= cap
    assert a >= min(initial, cap)


def test_terminated_state_reasons() -> None:
    assert terminated_state(0, None, "t0", "t1")["reason"] == "Completed"
    killed = terminated_state(137, 9, None, "t1")
    assert killed["reason"] == "Error" and killed["signal"] == 9 and killed["startedAt"] == "t1"


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    tool = d / "lagpilot"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return d


@pytest.mark.parametrize(
    ("container", "env", "expected_tail"),
    [
        ({"command": ["lagpilot", "consume"]}, {}, ["consume"]),
        (
            {"command": ["lagpilot"], "args": ["drain", "--port=$(PORT)"]},
            {"PORT": "4242"},
            ["drain", "--port=4242"],
        ),
        ({"image": "lagpilot/operator:0.1.0", "args": ["--once"]}, {}, ["operator", "--once"]),
    ],
    ids=["command", "args-expanded", "image-entrypoint"],
)
def test_build_argv_resolves_in_the_venv_first(
    bin_dir: Path, container: dict[str, Any], env: dict[str, str], expected_tail: list[str]
) -> None:
    argv = build_argv(
        container, env, bin_dirs=[str(bin_dir)], python=sys.executable, search_path="/usr/bin:/bin"
    )
    assert argv[0] == str(bin_dir / "lagpilot")
    assert argv[1:] == expected_tail


@pytest.mark.parametrize(
    ("container", "expected_tail"),
    [
        ({"image": "lagpilot/consumer:0.1.0", "args": ["executor"]}, ["executor"]),  # Spark's executor pods
        ({"image": "registry.local:5000/lagpilot/consumer@sha256:abc"}, ["consume"]),  # the image's CMD
        ({"image": "ghcr.io/acme/lagpilot/consumer:1", "args": ["drain"]}, ["drain"]),  # args replace CMD
    ],
    ids=["spark-executor", "registry-image-cmd", "org-prefixed-args"],
)
def test_consumer_image_entrypoint_as_in_a_container(
    bin_dir: Path, container: dict[str, Any], expected_tail: list[str]
) -> None:
    argv = build_argv(
        container, {}, bin_dirs=[str(bin_dir)], python="/venv/bin/python", search_path="/usr/bin:/bin"
    )
    assert argv == ["/venv/bin/python", "-m", "lagpilot_runtime.image_entrypoint", *expected_tail]


@pytest.mark.parametrize("prog", ["python", "python3", "python3.11"])
def test_python_is_the_projects_interpreter(bin_dir: Path, prog: str) -> None:
    argv = build_argv(
        {"command": [prog, "-c", "pass"]}, {}, bin_dirs=[str(bin_dir)], python="/venv/bin/python"
    )
    assert argv == ["/venv/bin/python", "-c", "pass"]


def test_system_programs_are_found_on_the_path(bin_dir: Path) -> None:
    argv = build_argv(
        {"command": ["sh", "-c", "true"]},
        {},
        bin_dirs=[str(bin_dir)],
        python="p",
        search_path=os.environ.get("PATH", "/usr/bin:/bin"),
    )
    assert Path(argv[0]).name == "sh" and argv[1:] == ["-c", "true"]


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"command": ["definitely-not-a-program-xyz"]}, "executable file not found"),
        ({"image": "busybox", "args": ["x"]}, "no command"),
        ({"command": ["/nonexistent/abs/tool"]}, "executable file not found"),
    ],
    ids=["unknown", "unknown-image-entrypoint", "absolute-missing"],
)
def test_unstartable_commands(bin_dir: Path, container: dict[str, Any], message: str) -> None:
    with pytest.raises(StartError, match=message):
        build_argv(container, {}, bin_dirs=[str(bin_dir)], python="p", search_path="/usr/bin:/bin")


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("lagpilot/consumer:0.1.0", "lagpilot/consumer"),
        ("docker.io/library/busybox:1.36", "busybox"),
        ("localhost:5000/lagpilot/consumer", "lagpilot/consumer"),
        ("ghcr.io/acme/lagpilot/consumer@sha256:00", "acme/lagpilot/consumer"),
        ("python", "python"),
    ],
    ids=["tagged", "docker-hub-library", "local-registry", "digest", "bare"],
)
def test_image_repository(image: str, repo: str) -> None:
    assert image_repository(image) == repo


METRICS_CONTAINER = {
    "env": [{"name": "LAGPILOT_METRICS_PORT", "value": "8080"}],
    "ports": [{"name": "http", "containerPort": 8080}, {"name": "health", "containerPort": 9000}],
}


@pytest.mark.parametrize(
    ("probe", "container", "expected"),
    [
        (
            {"httpGet": {"path": "/metrics", "port": 8080}},
            METRICS_CONTAINER,
            {"kind": "http", "url": "http://127.0.0.1:5555/metrics", "headers": {}},
        ),
        (
            {
                "httpGet": {
                    "path": "healthz",
                    "port": "http",
                    "scheme": "HTTPS",
                    "httpHeaders": [{"name": "X", "value": "1"}],
                }
            },
            METRICS_CONTAINER,
            {"kind": "http", "url": "https://127.0.0.1:5555/healthz", "headers": {"X": "1"}},
        ),
        (
            {"httpGet": {"path": "/healthz", "port": "health"}},
            METRICS_CONTAINER,
            {"kind": "http", "url": "http://127.0.0.1:9000/healthz", "headers": {}},
        ),
        (
            {"httpGet": {"path": "/", "port": 8080}},
            {"env": [{"name": "PORT", "value": "8080"}]},
            {"kind": "http", "url": "http://127.0.0.1:5555/", "headers": {}},
        ),
        (
            {"httpGet": {"path": "/", "port": 8080}},
            {},
            {"kind": "http", "url": "http://127.0.0.1:8080/", "headers": {}},
        ),
        (
            {"httpGet": {"path": "/", "port": "nosuchname"}},
            {},
            {"kind": "http", "url": "http://127.0.0.1:5555/", "headers": {}},
        ),
        ({"tcpSocket": {"port": 8080}}, METRICS_CONTAINER, {"kind": "tcp", "port": 5555}),
        ({"tcpSocket": {"port": 9092}}, METRICS_CONTAINER, {"kind": "tcp", "port": 9092}),
        ({"exec": {"command": ["true"]}}, {}, {"kind": "exec", "command": ["true"]}),
    ],
    ids=[
        "metrics-port-mapped",
        "named-metrics-port-https-headers",
        "other-named-port-as-written",
        "PORT-mapped",
        "undeclared-port-as-written",
        "unknown-name-to-own-port",
        "tcp-mapped",
        "tcp-as-written",
        "exec",
    ],
)
def test_probe_targets(probe: dict[str, Any], container: dict[str, Any], expected: dict[str, Any]) -> None:
    assert probe_target(probe, 5555, container) == expected


def test_conditions_keep_transition_time_until_status_changes() -> None:
    transitions: dict[str, tuple[str, str]] = {}
    first = {
        c["type"]: c
        for c in pod_conditions(
            phase="Running", ready=False, started_at="t0", transitions=transitions, now="t1"
        )
    }
    assert first["Ready"]["status"] == "False" and first["Ready"]["lastTransitionTime"] == "t0"
    assert first["PodScheduled"]["status"] == first["Initialized"]["status"] == "True"
    same = {
        c["type"]: c
        for c in pod_conditions(
            phase="Running", ready=False, started_at="t0", transitions=transitions, now="t2"
        )
    }
    assert same["Ready"]["lastTransitionTime"] == "t0"
    ready = {
        c["type"]: c
        for c in pod_conditions(
            phase="Running", ready=True, started_at="t0", transitions=transitions, now="t3"
        )
    }
    assert ready["Ready"]["status"] == ready["ContainersReady"]["status"] == "True"
    assert ready["Ready"]["lastTransitionTime"] == "t3" and ready["Initialized"]["lastTransitionTime"] == "t0"
    done = {
        c["type"]: c
        for c in pod_conditions(
            phase="Succeeded", ready=True, started_at="t0", transitions=transitions, now="t4"
        )
    }
    assert done["Ready"]["status"] == "False" and done["Ready"]["reason"] == "PodCompleted"


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, True),
        ({}, True),
        ({"kubernetes.io/os": "linux"}, True),
        ({"kubernetes.io/os": "windows"}, False),
        ({"disk": "ssd"}, False),
    ],
    ids=["none", "empty", "match", "mismatch", "missing-label"],
)
def test_node_selector(selector: dict[str, str] | None, matches: bool) -> None:
    pod = {"spec": {"nodeSelector": selector} if selector is not None else {}}
    assert node_selector_matches(pod, {"kubernetes.io/os": "linux", "kubernetes.io/hostname": "n"}) is matches


def test_termination_message_file_first_then_the_log_tail_on_error(tmp_path):
    from lagpilot_dev.podrunner.lifecycle import termination_message

    f = tmp_path / "termination-log"
    f.write_text("drain failed: boom")
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    assert termination_message(fallback, 1, f, "a\nb") == "drain failed: boom"
    f.write_text("")
    assert termination_message(fallback, 1, f, "x\n" * 100 + "last").endswith("x\nlast")
    assert len(termination_message(fallback, 1, f, "y" * 5000)) == 2048
    assert termination_message(fallback, 0, f, "tail") is None  # a success never falls back
    assert termination_message({}, 1, f, "tail") is None  # policy File: only the file
    assert termination_message(fallback, 1, tmp_path / "absent", "") is None
