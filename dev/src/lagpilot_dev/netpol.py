"""The real node's NetworkPolicy agent, a part of its own: `lagpilot dev up --parts node,netpol`.

kube-router's policy controller alone (no routing, no service proxy: the CNI bridge and kube-proxy do
those), a host process enforcing NetworkPolicies for the node's pods with iptables and ipsets
(docs/node.md "NetworkPolicy"). The binary, `kube-router-netpol`, is kube-router's
`pkg/controllers/netpol` at the release `dev/netpol-agent/go.mod` pins, behind a main that links
nothing else of kube-router (`dev/netpol-agent/main.go`): kube-router's own binary links GoBGP, its
service proxy and the AWS SDK whatever runs (46 MB of Go source, 41 min of cold build on the loaded 2
cores); the controller alone built cold in 11.4 min wall / 3.6 CPU-min at load 17-19.

A part and not a component of `node`, so that the node alone starts without it; `./dev/test` and
`./dev/demo` ask for both. A node without this part admits what a policy refuses: a test about
policies asks for this part, whose `up` fails unless the agent answers its health check.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

from lagpilot_dev import gocache
from lagpilot_dev.node import NODE_NAME, SERVICE_CLUSTER_IP_RANGE, NodePart
from lagpilot_dev.paths import LOOPBACK, Process, file_lock, http_ok, wait_started

log = logging.getLogger("lagpilot_dev.netpol")

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "build-netpol.sh"
AGENT_MODULE = BUILD_SCRIPT.parent / "netpol-agent" / "go.mod"
BINARY = "kube-router-netpol"
KUBE_ROUTER_MODULE = "github.com/cloudnativelabs/kube-router/v2"


def kube_router_version(go_mod: Path = AGENT_MODULE) -> str:
    """The kube-router release the agent's module pins (its go.mod: the one place it is written)."""
    for line in go_mod.read_text().splitlines():
        words = line.split()
        if KUBE_ROUTER_MODULE in words[:-1]:
            return words[words.index(KUBE_ROUTER_MODULE) + 1]
    raise ValueError(f"{go_mod}: no {KUBE_ROUTER_MODULE} requirement")


APT_PACKAGES = ("ipset", "iptables")
KUBE_ROUTER_RBAC = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "lagpilot:kube-router"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "lagpilot:kube-router"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "lagpilot:kube-router",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-router"}
            ],
        },
    ],
}


def build_command(node_cache: Path) -> list[str]:
    """dev/build-netpol.sh's command line, under `nice -n 10` (as the node's build)."""
    return ["nice", "-n", "10", "bash", str(BUILD_SCRIPT), str(node_cache)]


class NetpolPart:
    """Install (build kube-router once), start, stop and describe the node's NetworkPolicy agent."""

    name = "netpol"

    def __init__(self, cache_dir: Path, state_dir: Path) -> None:
        self.node = NodePart(cache_dir, state_dir)
        self.binary = self.node.bin / BINARY
        # the same pid file and log as when the agent was a component of the node part: an agent
        # started by the older code is found, not started twice
        self.process = Process(
            name="node-netpol",
            argv=[],
            log_file=self.node.dir / "netpol.log",
            pid_file=self.node.dir / "netpol.pid",
            marker=str(self.binary),
        )

    def installed(self) -> bool:
        return os.access(self.binary, os.X_OK)

    def install(self) -> None:
        """Debian's ipset and iptables (every time: a cached binary does not bring them), then
        dev/build-netpol.sh (first use only), under a build lock of its own: in a cold `dev up` it
        builds beside the node's build, in the cold run's Go caches (lagpilot_dev.gocache: modules
        and standard library compiled once for both), not after it."""
        from lagpilot_dev.images.tools import ensure_apt_packages

        # the binary may come from a restored cache; the Debian tools it runs never do
        ensure_apt_packages(APT_PACKAGES)
        if self.installed():
            return
        with file_lock(self.node.node_cache / ".build-netpol.lock"):
            if self.installed():
                return
            build_log = self.node.node_cache / "build-netpol.log"
            build_log.parent.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            log.info("building the NetworkPolicy agent (first use only)", extra={"log": str(build_log)})
            env = {**os.environ, **gocache.build_env(self.node.cache_dir)}
            with open(build_log, "ab") as out:
                rc = subprocess.run(
                    build_command(self.node.node_cache),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                    env=env,
                ).returncode
            if rc != 0 or not self.installed():
                tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"dev/build-netpol.sh failed (exit {rc}); log {build_log}:\n{tail}")
            log.info("NetworkPolicy agent built", extra={"seconds": round(time.monotonic() - started)})

    def health_url(self) -> str:
        return f"http://{LOOPBACK}:{self.node.ports.ensure('node.netpol-health')}/healthz"

    def is_running(self) -> bool:
        return self.process.is_running() and http_ok(self.health_url())

    def start(self, timeout: float = 180.0) -> None:
        """The node first (started, or found running: its start is idempotent and takes its start
        lock, so a `dev up` starting both waits for the node), then the agent."""
        self.install()
        self.node.start()
        if not self.process.is_running():
            rbac = self.node.kube.kubectl(
                "apply", "-f", "-", input_text=json.dumps(KUBE_ROUTER_RBAC), timeout=60
            )
            if rbac.returncode != 0:
                raise RuntimeError(f"kube-router RBAC: {rbac.stderr.strip()[-1000:]}")
            self.process.argv = [
                str(self.binary),
                f"--kubeconfig={self.node.kubeconfig('kube-router')}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--enable-cni=false",
                "--enable-ipv4=true",
                "--enable-ipv6=false",
                f"--hostname-override={NODE_NAME}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--health-port={self.node.ports.ensure('node.netpol-health', must_be_free=True)}",
                "--metrics-port=0",
                "--v=1",
            ]
            self.process.env = self.node._env()  # the node's PATH (its bin dir)
            self.process.start()
        wait_started(self.process, lambda: http_ok(self.health_url()), "kube-router /healthz", timeout)

    def stop(self) -> None:
        """Stop the agent. Its iptables chains and ipsets stay (they match only this node's pod IPs;
        the next start resyncs them)."""
        self.process.stop(grace=10.0)

    def info(self) -> dict[str, object]:
        return {
            "agent": f"kube-router {kube_router_version()} policy controller ({BINARY})",
            "node_name": NODE_NAME,
            "health": self.health_url(),
            "log": str(self.process.log_file),
        }
