"""The real node is a default part of `./dev/test` (docs/node.md "Retiring the pod runner", step 2).

- The `node` and `pods` fixtures give the real node unless LAGPILOT_NODE=0, an explicit opt-out for
  a machine that cannot host one: then the node's tests and every test that runs pods skip, loudly;
  under CI=true the opt-out fails instead (CI must run the node's tests), as dev/test refuses
  CI=true with LAGPILOT_NODE=0 the way it refuses LAGPILOT_SKIP_REAL=1.
- The NetworkPolicy agent (the `netpol` part, kube-router's policy controller) is on with the node;
  LAGPILOT_NETPOL=0 opts out, and fails under CI=true.
- dev/test brings the node up with the other parts
  (`dev up --parts kafka,kube,postgres,spark,node,netpol`), without them when LAGPILOT_NODE=0.
- One node per machine: a node part refuses to start while another state dir's node runs, naming
  that state dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import lagpilot_dev.node as node_part
import tests.fixtures.node as fixtures

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "verdict"),
    [
        ({}, "on"),
        ({"LAGPILOT_NODE": ""}, "on"),
        ({"LAGPILOT_NODE": "1"}, "on"),
        ({"LAGPILOT_NODE": "0"}, "skip"),
        ({"LAGPILOT_NODE": "false"}, "skip"),
        ({"LAGPILOT_NODE": " OFF "}, "skip"),
        ({"LAGPILOT_NODE": "no"}, "skip"),
        ({"LAGPILOT_NODE": "0", "CI": "true"}, "fail"),
        ({"LAGPILOT_NODE": "1", "CI": "true"}, "on"),
        ({"CI": "true"}, "on"),
        ({"LAGPILOT_NODE": "0", "CI": "false"}, "skip"),
    ],
)
def test_node_gate(env: dict[str, str], verdict: str) -> None:
    got, why = fixtures.node_gate(env)
    assert got == verdict, (env, got, why)
    if verdict == "on":
        assert why == ""
    else:
        assert "LAGPILOT_NODE=0" in why and "docs/node.md" in why, why
    if verdict == "fail":
        assert "CI=true" in why, why


def test_the_node_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from this process's environment, so not under CI's CI=true (the opt-out fails there)."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("LAGPILOT_NODE", raising=False)
    assert fixtures.node_gate(os.environ)[0] == "on"
    monkeypatch.setenv("LAGPILOT_NODE", "0")
    assert fixtures.node_gate(os.environ)[0] == "skip"


@pytest.mark.parametrize(
    ("env", "verdict"),
    [
        ({}, "on"),  # with the node, by default (its agent's cold build is minutes: docs/node.md)
        ({"LAGPILOT_NETPOL": "1"}, "on"),
        ({"CI": "true"}, "on"),
        ({"LAGPILOT_NETPOL": "0"}, "skip"),
        ({"LAGPILOT_NETPOL": "off"}, "skip"),
        ({"LAGPILOT_NETPOL": "0", "CI": "true"}, "fail"),  # CI runs the policy tests
    ],
)
def test_netpol_gate(env: dict[str, str], verdict: str) -> None:
    got, why = fixtures.netpol_gate(env)
    assert got == verdict, (env, got, why)
    assert (why == "") == (verdict == "on")
    if verdict != "on":
        assert "LAGPILOT_NETPOL=0" in why, why


# ---- dev/test, run against stubs (no setup, no stack, no pytest) --------------------------------
def _stub_checkout(tmp_path: Path) -> Path:
    """A copy of dev/test beside stub dev/setup, dev/lint and .venv/bin/{lagpilot,python}
    that record their arguments to calls.txt."""
    root = tmp_path / "repo"
    (root / "dev").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO / "dev" / "test", root / "dev" / "test")
    rec = 'echo "$(basename "$0") $*" >> "$(dirname "$0")/../../calls.txt"\n'
    for stub in ("dev/setup", "dev/lint", ".venv/bin/lagpilot", ".venv/bin/python"):
        p = root / stub
        p.write_text("#!/usr/bin/env bash\n" + ("" if stub.startswith("dev/") else rec) + "exit 0\n")
        p.chmod(0o755)
    return root


def _run_dev_test(root: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    r = subprocess.run(
        ["bash", str(root / "dev" / "test")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(root), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = root / "calls.txt"
    return r, (calls.read_text().splitlines() if calls.exists() else [])


def test_dev_test_brings_the_node_up_with_the_other_parts(tmp_path: Path) -> None:
    r, calls = _run_dev_test(_stub_checkout(tmp_path), {"LAGPILOT_KEEP_STACK": "1"})
    assert r.returncode == 0, r.stderr
    assert "lagpilot dev up --parts kafka,kube,postgres,spark,node,netpol" in calls, calls


def test_dev_test_without_the_policy_agent_says_so_and_leaves_it_out(tmp_path: Path) -> None:
    r, calls = _run_dev_test(_stub_checkout(tmp_path), {"LAGPILOT_NETPOL": "0", "LAGPILOT_KEEP_STACK": "1"})
    assert r.returncode == 0, r.stderr
    assert "lagpilot dev up --parts kafka,kube,postgres,spark,node" in calls, calls
    assert "LAGPILOT_NETPOL=0" in r.stderr, r.stderr


def test_dev_test_refuses_the_policy_agent_off_under_ci(tmp_path: Path) -> None:
    r, calls = _run_dev_test(_stub_checkout(tmp_path), {"CI": "true", "LAGPILOT_NETPOL": "0"})
    assert r.returncode == 2 and "refusing" in r.stderr and "LAGPILOT_NETPOL=0" in r.stderr, r.stderr
    assert calls == []


def test_dev_test_without_the_node_says_so_and_leaves_it_out(tmp_path: Path) -> None:
    r, calls = _run_dev_test(_stub_checkout(tmp_path), {"LAGPILOT_NODE": "0", "LAGPILOT_KEEP_STACK": "1"})
    assert r.returncode == 0, r.stderr
    assert "lagpilot dev up --parts kafka,kube,postgres,spark" in calls, calls
    assert "LAGPILOT_NODE=0" in r.stderr and "WITHOUT the real node" in r.stderr, r.stderr


def test_dev_test_refuses_the_node_off_under_ci(tmp_path: Path) -> None:
    r, calls = _run_dev_test(_stub_checkout(tmp_path), {"CI": "true", "LAGPILOT_NODE": "0"})
    assert r.returncode == 2 and "refusing" in r.stderr and "LAGPILOT_NODE=0" in r.stderr, r.stderr
    assert calls == []  # before anything is installed or started


def test_ci_run_unsets_the_node_opt_out() -> None:
    text = (REPO / ".ci" / "run").read_text()
    assert "unset LAGPILOT_SKIP_REAL LAGPILOT_NODE LAGPILOT_NETPOL" in text


# ---- one node per machine ----------------------------------------------------------------------
SHARED = "/root/.cache/lagpilot/state/default"
CMDLINES = [
    ["/root/.cache/lagpilot/node/bin/containerd", "--config", f"{SHARED}/node/containerd.toml"],
    [
        "/root/.cache/lagpilot/node/bin/kubelet",
        f"--config={SHARED}/node/kubelet-config.json",
        f"--root-dir={SHARED}/node/kubelet",
    ],
    ["/root/.cache/lagpilot/node/bin/coredns", "-conf", "/tmp/ci-state/node/Corefile"],
    ["/root/.cache/lagpilot/node/bin/kube-proxy", "--config=/tmp/other/node/proxy-config.json", "--v=1"],
    # not a node's: another containerd, the control plane, a shell naming the path, an empty cmdline
    ["/usr/bin/containerd", "--config", "/etc/containerd/config.toml"],
    ["/root/.cache/lagpilot/kube/bin/kube-apiserver", "--config=/x/node/kubelet-config.json"],
    ["bash", "-c", f"cat {SHARED}/node/containerd.toml"],
    [],
]


def test_node_state_dirs_are_read_from_the_node_processes_config_paths() -> None:
    assert node_part.node_state_dirs(CMDLINES) == {Path(SHARED), Path("/tmp/ci-state"), Path("/tmp/other")}
    assert node_part.node_state_dirs([]) == set()


def test_a_node_part_refuses_to_start_beside_another_state_dirs_node(tmp_path: Path) -> None:
    part = node_part.NodePart(tmp_path / "cache", tmp_path / "state")
    running = [["/c/node/bin/containerd", "--config", f"{SHARED}/node/containerd.toml"]]
    with pytest.raises(RuntimeError) as err:
        part.refuse_other_node(running)
    msg = str(err.value)
    assert SHARED in msg and "one node per machine" in msg and "LAGPILOT_NODE=0" in msg, msg
    assert f"LAGPILOT_STATE={SHARED}" in msg, msg  # how to stop it, or to use it


def test_a_node_part_starts_beside_its_own_state_dirs_node(tmp_path: Path) -> None:
    state = tmp_path / "state"
    part = node_part.NodePart(tmp_path / "cache", state)
    own = [["/c/node/bin/containerd", "--config", f"{state}/node/containerd.toml"]]
    part.refuse_other_node(own)  # its own processes (a restart of one component): no error
    part.refuse_other_node([])
    # the same state dir reached through a symlink is the same node
    link = tmp_path / "link"
    os.symlink(state, link)
    part.refuse_other_node([["/c/node/bin/kubelet", f"--config={link}/node/kubelet-config.json"]])


# ---- the pod bridge before the host parts: the broker's PODS listener --------------------------
class _Part:
    def __init__(self, name: str, events: list[str], running: bool = False) -> None:
        self.name, self.events, self.running = name, events, running

    def install(self) -> None:
        pass

    def start(self) -> None:
        self.events.append(f"{self.name}.start")
        self.running = True

    def stop(self) -> None:
        self.running = False

    def is_running(self) -> bool:
        return self.running

    def info(self) -> dict[str, object]:
        return {}


class _Node(_Part):
    def __init__(self, events: list[str], running: bool = False, refuse: bool = False) -> None:
        super().__init__("node", events, running)
        self.refuse = refuse

    def prepare_host(self) -> None:
        if self.refuse:
            raise RuntimeError("the real node of state dir /other runs on this machine")
        self.events.append("node.prepare_host")


def _stack(tmp_path: Path, node: _Node, events: list[str]) -> object:
    from lagpilot_dev.stack import Stack

    s = Stack(cache_dir=tmp_path / "cache", state_dir=tmp_path / "state")
    s._parts.update({n: _Part(n, events) for n in ("kafka", "kube", "postgres", "spark")})
    s._parts["node"] = node
    return s


def test_stack_up_makes_the_pod_bridge_before_any_part_starts(tmp_path: Path) -> None:
    """Kafka and PostgreSQL listen on the bridge gateway for pods only when it exists at their start
    (KafkaPart.pods_listener_host): with the node in the same `dev up` (./dev/test) the bridge comes
    first, whatever the node's own start waits for (its build on a cold cache)."""
    events: list[str] = []
    s = _stack(tmp_path, _Node(events), events)
    s.up(["kafka", "kube", "postgres", "spark", "node"])  # type: ignore[attr-defined]
    assert events[0] == "node.prepare_host", events
    assert sorted(events[1:]) == ["kafka.start", "kube.start", "node.start", "postgres.start", "spark.start"]


def test_stack_up_without_the_node_or_with_it_running_prepares_nothing(tmp_path: Path) -> None:
    events: list[str] = []
    _stack(tmp_path, _Node(events), events).up(["kafka", "postgres"])  # type: ignore[attr-defined]
    assert "node.prepare_host" not in events
    events.clear()
    _stack(tmp_path, _Node(events, running=True), events).up(["kafka", "node"])  # type: ignore[attr-defined]
    assert events == ["kafka.start"]


def test_stack_up_refused_by_another_node_starts_nothing(tmp_path: Path) -> None:
    events: list[str] = []
    with pytest.raises(RuntimeError, match="/other"):
        _stack(tmp_path, _Node(events, refuse=True), events).up(["kafka", "kube", "node"])  # type: ignore[attr-defined]
    assert events == []


def test_node_prepare_host_refuses_another_state_dirs_node_before_touching_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touched: list[str] = []
    monkeypatch.setattr(node_part.NodePart, "_prepare_host", staticmethod(lambda: touched.append("host")))
    monkeypatch.setattr(
        node_part,
        "running_cmdlines",
        lambda: [["/c/node/bin/containerd", "--config", "/other/node/containerd.toml"]],
    )
    part = node_part.NodePart(tmp_path / "cache", tmp_path / "state")
    with pytest.raises(RuntimeError, match="/other"):
        part.prepare_host()
    assert touched == []
    monkeypatch.setattr(node_part, "running_cmdlines", lambda: [])
    part.prepare_host()
    assert touched == ["host"]


def test_dev_test_loads_the_images_once_before_the_workers(tmp_path: Path) -> None:
    r, calls = _run_dev_test(_stub_checkout(tmp_path), {"LAGPILOT_KEEP_STACK": "1"})
    assert r.returncode == 0, r.stderr
    assert "python -m tests.fixtures.node prebuild" in calls, calls
    r, calls = _run_dev_test(
        _stub_checkout(tmp_path / "off"), {"LAGPILOT_NODE": "0", "LAGPILOT_KEEP_STACK": "1"}
    )
    assert not any("prebuild" in c for c in calls), calls


class _FakeNode:
    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids

    def image_id(self, tag: str) -> str | None:
        return self.ids.get(tag)


@pytest.mark.parametrize(
    ("ids", "on_node"),
    [
        (
            {
                "localhost/lagpilot/consumer:0.1.0-cabc": "sha256:1",
                "docker.io/lagpilot/consumer:0.1.0": "sha256:1",
            },
            True,
        ),
        # the plain name holds another checkout's build: load (re-tag) it
        (
            {
                "localhost/lagpilot/consumer:0.1.0-cabc": "sha256:1",
                "docker.io/lagpilot/consumer:0.1.0": "sha256:2",
            },
            False,
        ),
        ({"docker.io/lagpilot/consumer:0.1.0": "sha256:1"}, False),
        ({}, False),
    ],
)
def test_an_image_already_on_the_node_is_not_built_again(ids: dict[str, str], on_node: bool) -> None:
    node = _FakeNode(ids)
    assert (
        fixtures.already_on_node(node, "localhost/lagpilot/consumer:0.1.0-cabc", "lagpilot/consumer:0.1.0")
        is on_node
    )
