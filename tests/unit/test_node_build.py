"""The node's cold build (docs/node.md "Cold build"): when the control plane's binaries are missing
too, ONE run of dev/build-node.sh builds both (one `go build` of every k8s.io/kubernetes command,
one Go cache), and `dev up` with kube and node installs the control plane through it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev import kube, node
from lagpilot_dev.images import tools as images_tools
from lagpilot_dev.stack import Stack


@pytest.fixture
def fake_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """subprocess.run of the build script stands in for it: makes the binaries it was asked for."""
    for name, path in (("RUNC", "runc"), ("CNI_BIN_DIR", "cni"), ("BUSYBOX", "busybox")):
        p = tmp_path / "host" / path
        p.parent.mkdir(parents=True, exist_ok=True)
        if name == "CNI_BIN_DIR":
            p.mkdir()
            for plugin in ("bridge", "host-local"):
                (p / plugin).touch()
        else:
            p.touch()
        monkeypatch.setattr(node, name, p)
    monkeypatch.setattr(images_tools, "ensure_apt_packages", lambda *a, **k: [])
    monkeypatch.setattr(node.NodePart, "_write_images", lambda self: None)
    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append((list(argv), dict(kw["env"])))
        script = argv.index(str(node.BUILD_SCRIPT))
        outs = argv[script + 1 :]
        made = [(Path(outs[0]) / "bin", node.BINARIES)]
        if len(outs) > 1:
            made.append((Path(outs[1]) / "bin", kube.BINARIES))
        for bin_dir, names in made:
            bin_dir.mkdir(parents=True, exist_ok=True)
            for b in names:
                (bin_dir / b).touch(mode=0o755)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(node.subprocess, "run", run)
    return calls


def _kube_built(cache: Path) -> None:
    (cache / "kube" / "bin").mkdir(parents=True)
    for b in kube.BINARIES:
        (cache / "kube" / "bin" / b).touch(mode=0o755)


def test_a_cold_machine_builds_control_plane_and_node_in_one_run(
    tmp_path: Path, fake_build: list[Any]
) -> None:
    cache = tmp_path / "cache"
    part = node.NodePart(cache, tmp_path / "state")
    part.install()
    assert len(fake_build) == 1
    argv, env = fake_build[0]
    assert argv[-2:] == [str(cache / "node"), str(cache / "kube")]
    assert argv[:3] == ["nice", "-n", "10"]
    assert env["LAGPILOT_KUBE_VERSION"] == kube.KUBE_VERSION
    assert env["LAGPILOT_ETCD_VERSION"] == kube.ETCD_VERSION
    assert env["LAGPILOT_GO_CACHE_DIR"] == str(cache / "go")  # the cold run's one Go cache (gocache)
    assert part.installed() and part.kube.installed()
    part.install()  # everything there: no second build
    assert len(fake_build) == 1


def test_a_built_control_plane_is_not_asked_for(tmp_path: Path, fake_build: list[Any]) -> None:
    cache = tmp_path / "cache"
    _kube_built(cache)
    node.NodePart(cache, tmp_path / "state").install()
    assert [argv[-1] for argv, _ in fake_build] == [str(cache / "node")]
    assert str(cache / "kube") not in fake_build[0][0]


class _FakePart:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.up = name, log, False

    def install(self) -> None:
        self.log.append(f"{self.name}.install")

    def start(self) -> None:
        self.up = True

    def is_running(self) -> bool:
        return self.up

    def info(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(
    ("parts", "installs"),
    [
        (["kube", "node"], ["node.install", "node.install"]),  # kube's thread too: one build, under its locks
        (["kube"], ["kube.install"]),
    ],
)
def test_up_installs_the_control_plane_through_the_node_build(
    tmp_path: Path, parts: list[str], installs: list[str]
) -> None:
    stack = Stack(tmp_path / "cache", tmp_path / "state")
    log: list[str] = []
    stack._parts = {n: _FakePart(n, log) for n in parts}  # type: ignore[dict-item]
    stack.up(parts)
    assert sorted(log) == installs


# ---- the NetworkPolicy agent, a part of its own (docs/node.md "Cold build") --------------------


def test_the_node_builds_and_installs_without_the_policy_agent(tmp_path: Path, fake_build: list[Any]) -> None:
    from lagpilot_dev import netpol

    cache = tmp_path / "cache"
    part = node.NodePart(cache, tmp_path / "state")
    part.install()
    assert "kube-router" not in node.BINARIES and "netpol" not in node.COMPONENTS
    assert part.installed() and not (cache / "node" / "bin" / "kube-router").exists()
    assert not netpol.NetpolPart(cache, tmp_path / "state").installed()
    # the scripts: the node's build has no kube-router step, the agent's build is its own
    assert "cmd/kube-router" not in node.BUILD_SCRIPT.read_text()
    assert "netpol-agent" in netpol.BUILD_SCRIPT.read_text()


def test_the_policy_agent_links_kube_routers_policy_controller_and_nothing_else_of_it() -> None:
    """dev/netpol-agent: its main imports kube-router's netpol, healthcheck and options packages
    only (not pkg/cmd, which links GoBGP, the service proxy and the AWS SDK), and its go.mod pins the
    release `kube_router_version` reports."""
    import re

    from lagpilot_dev import netpol

    main = (netpol.AGENT_MODULE.parent / "main.go").read_text()
    used = sorted(set(re.findall(r'"github.com/cloudnativelabs/kube-router/v2/([^"]+)"', main)))
    assert used == ["pkg/controllers/netpol", "pkg/healthcheck", "pkg/options"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", netpol.kube_router_version())
    go_sum = (netpol.AGENT_MODULE.parent / "go.sum").read_text()
    assert f"{netpol.KUBE_ROUTER_MODULE} {netpol.kube_router_version()} h1:" in go_sum


def test_the_policy_agent_is_built_once_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagpilot_dev import netpol

    monkeypatch.setattr(images_tools, "ensure_apt_packages", lambda *a, **k: [])
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(list(argv))
        out = Path(argv[-1]) / "bin"
        out.mkdir(parents=True, exist_ok=True)
        (out / netpol.BINARY).touch(mode=0o755)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(netpol.subprocess, "run", run)
    part = netpol.NetpolPart(tmp_path / "cache", tmp_path / "state")
    part.install()
    part.install()
    assert calls == [["nice", "-n", "10", "bash", str(netpol.BUILD_SCRIPT), str(tmp_path / "cache" / "node")]]
    assert part.installed()


def test_netpol_is_a_part_asked_for_and_stopped_before_the_node(tmp_path: Path) -> None:
    from lagpilot_dev import stack as st
    from lagpilot_dev.netpol import NetpolPart

    assert "netpol" in st.ALL_PARTS and "netpol" not in st.DEFAULT_PARTS
    assert st._STOP_ORDER.index("netpol") < st._STOP_ORDER.index("node")
    assert st.parse_parts("netpol,node") == ("node", "netpol")
    assert isinstance(Stack(tmp_path / "cache", tmp_path / "state").part("netpol"), NetpolPart)


def test_the_node_demo_always_enforces_policies() -> None:
    """The demo asks for the policy agent whether or not it is built (its cold build is minutes
    now: dev/netpol-agent), so the operator's NetworkPolicies are enforced in every demo."""
    from lagpilot_dev.demo.node import NODE_PARTS

    assert NODE_PARTS[-2:] == ("node", "netpol")


def test_a_cached_policy_agent_still_gets_its_debian_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The binary comes from the cache (~/.cache/lagpilot/node/bin, restored by CI), ipset and
    iptables from Debian: a machine with the cached binary and no ipset got `ipset utility not found`
    from the agent at start (seen 2026-11-27), because install() returned before the apt step."""
    from lagpilot_dev import netpol

    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(
        images_tools, "ensure_apt_packages", lambda pkgs, *a, **k: asked.append(tuple(pkgs)) or []
    )
    monkeypatch.setattr(netpol.subprocess, "run", lambda *a, **k: pytest.fail("built again"))
    part = netpol.NetpolPart(tmp_path / "cache", tmp_path / "state")
    part.binary.parent.mkdir(parents=True)
    part.binary.touch(mode=0o755)
    part.install()
    assert asked == [netpol.APT_PACKAGES]


def test_the_policy_agent_builds_beside_the_node_in_the_cold_runs_go_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not under the node's build lock (it waited for the node's whole build before): a lock of its
    own, and the Go caches of the cold run (lagpilot_dev.gocache), which the node's build uses too."""
    import contextlib

    from lagpilot_dev import netpol

    monkeypatch.setattr(images_tools, "ensure_apt_packages", lambda *a, **k: [])
    locked: list[Path] = []

    @contextlib.contextmanager
    def lock(path: Path) -> Any:
        locked.append(path)
        yield

    envs: list[dict[str, str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        envs.append(dict(kw["env"]))
        out = Path(argv[-1]) / "bin"
        out.mkdir(parents=True, exist_ok=True)
        (out / netpol.BINARY).touch(mode=0o755)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(netpol, "file_lock", lock)
    monkeypatch.setattr(netpol.subprocess, "run", run)
    cache = tmp_path / "cache"
    netpol.NetpolPart(cache, tmp_path / "state").install()
    assert locked == [cache / "node" / ".build-netpol.lock"]
    assert envs[0]["LAGPILOT_GO_CACHE_DIR"] == str(cache / "go")
