"""A real Kubernetes node beside the local control plane: containerd + runc, kubelet, kube-scheduler.

The `node` part of the dev stack (`lagpilot dev up --parts kube,node`): pods bound to it run as
containers. It needs the `kube` part (its apiserver and CA) and root. What runs (docs/node.md):

- containerd (2.x, built from the Go module proxy, CGO_ENABLED=0) with Debian's runc, its CRI plugin
  serving the kubelet; pod networking by Debian's CNI `bridge` + `host-local` plugins (/usr/lib/cni):
  bridge `lagpilot0`, pod subnet POD_SUBNET, gateway POD_GATEWAY (= the host as pods see it);
- kubelet (the stack's Kubernetes version, CGO_ENABLED=0) registering Node NODE_NAME;
- kube-scheduler (binds pods to the node), the cluster's `default-scheduler`: every pod goes there;
- kube-proxy (iptables) and CoreDNS on the bridge gateway.

The NetworkPolicy agent (kube-router's policy controller) is a part of its own, `netpol`
(lagpilot_dev.netpol): built and started only for what needs policies enforced (docs/node.md).

Binaries are built once by `dev/build-node.sh` into `<cache>/node/bin`; two images no registry can
serve here are written by `lagpilot_dev.node_oci` and imported into containerd's `k8s.io`
namespace at start: the sandbox image (pause compiled from Kubernetes' pause.c) and a busybox test
image. Mutable state lives in `<state>/node` (kubelet root, containerd root, certificates, logs);
containerd's runtime state and sockets live in a short /run dir (unix socket paths are limited to
108 bytes, and containerd's shim sockets sit below its state dir).

Host settings made at start (each needed and why: docs/node.md): `/` made a shared mount
(kubelet's volume mounts must propagate into containers), net.ipv4.ip_forward=1 (pods' traffic
routed through the bridge).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lagpilot_dev import gocache, node_oci
from lagpilot_dev.kube import ETCD_VERSION, KUBE_VERSION, KubePart, _openssl, _write_private, kubeconfig_yaml
from lagpilot_dev.paths import LOOPBACK, Ports, Process, cmdline, file_lock, host_ip, http_ok, wait_started

log = logging.getLogger("lagpilot_dev.node")

CONTAINERD_VERSION = "v2.2.9"
CRICTL_VERSION = "v1.34.0"
# kube-router (the NetworkPolicy agent) is not here: lagpilot_dev.netpol builds it on first use
BINARIES = (
    "kubelet",
    "kube-scheduler",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "crictl",
    "pause",
    "coredns",
)
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "build-node.sh"
APT_PACKAGES = (
    "runc",
    "containernetworking-plugins",
    "iptables",
    "busybox-static",
)  # ipset: lagpilot_dev.netpol
CNI_BIN_DIR = Path("/usr/lib/cni")
RUNC = Path("/usr/sbin/runc")
BUSYBOX = Path("/bin/busybox")
# kind names its nodes <cluster>-control-plane, <cluster>-worker, <cluster>-worker2 (kind-config.yaml)
NODE_NAME = "lagpilot-worker"
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
BRIDGE = "lagpilot0"
CRI_NAMESPACE = "k8s.io"
PAUSE_IMAGE = f"lagpilot.local/pause:{KUBE_VERSION}"
TEST_IMAGE = "lagpilot.local/busybox:3"  # bump with node_oci.BUSYBOX_APPLETS
# The real scheduler is the cluster's default one: every pod that names no scheduler runs on the
# node. (While the pod runner served other tests on the same control plane it answered to
# "lagpilot-node", only for Nodes labelled node.lagpilot.io/real=true, and a MutatingAdmissionPolicy
# sent the pods of labelled namespaces to it; both retired with the runner, issue 24 step 6.)
SCHEDULER_NAME = "default-scheduler"
# The CPU weight of all the node's pods together (docs/node.md "CPU"). The kubelet gives its
# `kubepods` cgroup cpu.shares = the node's allocatable CPU (2 cores: 2048); on this machine that
# group competes with every host session (autogroups, 1024 each: Kafka, the apiserver, each test
# run ...), so under a load of 20 the pods together got ~10 % of the 2 cores. The node part sets
# DEFAULT_PODS_CPU_SHARES when it starts: the weight of eight host sessions, what ~8 pods weighed
# under the pod runner (one session per pod process); LAGPILOT_NODE_CPU_SHARES overrides it
# (2..262144), `kubelet` leaves the kubelet's own value.
CPU_SHARES_ENV = "LAGPILOT_NODE_CPU_SHARES"
DEFAULT_PODS_CPU_SHARES = 8192
KUBEPODS_CPU_SHARES = Path("/sys/fs/cgroup/cpu/kubepods/cpu.shares")


def pods_cpu_shares_setting(env: Mapping[str, str] | None = None) -> int | None:
    """The weight the node part gives kubepods: LAGPILOT_NODE_CPU_SHARES, DEFAULT_PODS_CPU_SHARES when
    unset, None for `kubelet` (leave the kubelet's). ValueError naming the variable otherwise."""
    e = os.environ if env is None else env
    raw = (e.get(CPU_SHARES_ENV) or "").strip()
    if not raw:
        return DEFAULT_PODS_CPU_SHARES
    if raw == "kubelet":
        return None
    if not raw.isdigit() or not 2 <= int(raw) <= 262144:
        raise ValueError(
            f"{CPU_SHARES_ENV} must be a cpu.shares weight, 2..262144, or 'kubelet' (got {raw!r})"
        )
    return int(raw)


def read_pods_cpu_shares(path: Path = KUBEPODS_CPU_SHARES) -> int | None:
    """The kubepods weight in force; None without the cgroup."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def pods_cpu_shares(env: Mapping[str, str] | None = None, path: Path = KUBEPODS_CPU_SHARES) -> int | None:
    """Apply pods_cpu_shares_setting to the kubepods cgroup (when it exists); the weight in force,
    None without the cgroup."""
    shares = pods_cpu_shares_setting(env)
    if shares is not None and path.exists():
        path.write_text(str(shares))
        log.info("node pods' CPU weight set", extra={"cpu_shares": shares, "env": CPU_SHARES_ENV})
    return read_pods_cpu_shares(path)


# The runtime's test fault hooks (LP_TEST_*: crash points, the older-image switch) for the pods of a
# test namespace, the way a real cluster lets a test set them: a MutatingAdmissionPolicy adds the
# LP_TEST_* keys of the ConfigMap TEST_HOOKS_CONFIGMAP (its params, in the pod's own namespace) to
# every container's env of every pod created in a namespace labelled TEST_HOOKS_LABEL. Never through
# the CR: the CRD refuses LP_TEST_* in template.env (CEL). The label is the gate: setting it takes
# `patch namespaces` (cluster scope, an admin's or a test's), so a CR author who may write ConfigMaps
# in the namespace cannot turn the hooks on; the policy takes only LP_TEST_* names (not PATH, not
# LAGPILOT_*). The pods of the Deployment and the Jobs the operator owns are mutated at creation, so
# the operator has nothing to revert.
TEST_HOOKS_POLICY = "lagpilot-test-hooks"
TEST_HOOKS_LABEL = ("lagpilot.io/test-hooks", "true")
TEST_HOOKS_CONFIGMAP = "lagpilot-test-hooks"
TEST_HOOK_PREFIX = "LP_TEST_"


def test_hooks_policy() -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding for the tests' LP_TEST_* hooks (TEST_HOOKS_POLICY)."""
    key, value = TEST_HOOKS_LABEL
    api = "admissionregistration.k8s.io/v1beta1"
    hooks = f"has(params.data) ? params.data.filter(k, k.startsWith('{TEST_HOOK_PREFIX}')) : []"
    return [
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": TEST_HOOKS_POLICY},
            "spec": {
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "variables": [{"name": "hooks", "expression": hooks}],
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {
                            "expression": "Object{spec: Object.spec{containers: object.spec.containers.map(c, "
                            "Object.spec.containers{name: c.name, env: variables.hooks.map(k, "
                            "Object.spec.containers.env{name: k, value: params.data[k]})})}}"
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": TEST_HOOKS_POLICY},
            "spec": {
                "policyName": TEST_HOOKS_POLICY,
                # the ConfigMap of the pod's own namespace (paramRef without a namespace); a labelled
                # namespace without it admits its pods unchanged
                "paramRef": {"name": TEST_HOOKS_CONFIGMAP, "parameterNotFoundAction": "Allow"},
                "matchResources": {"namespaceSelector": {"matchLabels": {key: value}}},
            },
        },
    ]


COMPONENTS = ("containerd", "kubelet", "scheduler", "proxy", "dns")
COREDNS_VERSION = "v1.14.7"
CLUSTER_DOMAIN = "cluster.local"
# CoreDNS runs as a host process answering on the bridge gateway: pods reach the host there, and the
# kubelet writes it into every ClusterFirst pod's resolv.conf (clusterDNS)
CLUSTER_DNS = POD_GATEWAY
COREDNS_RBAC = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:coredns"}],
        },
    ],
}
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"  # = lagpilot_dev.kube.SERVICE_CLUSTER_IP_RANGE


def cri_image_name(reference: str) -> str:
    """The fully qualified name containerd's CRI looks an image up by, for the name a pod gives
    (Docker's normalization, which the kubelet and containerd apply): a first path component that is
    not a registry (no "." or ":", not "localhost") means Docker Hub, a single name its `library/`,
    no tag `:latest`. `lagpilot/consumer:0.1.0` -> `docker.io/lagpilot/consumer:0.1.0`."""
    name, digest = ([*reference.split("@", 1), ""])[:2]
    first, _, rest = name.partition("/")
    if not rest:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if digest:
        return f"{name}@{digest}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def container_pids(
    crictl_ps: Mapping[str, Any],
    inspect: Callable[[str], Mapping[str, Any]],
    known: dict[str, int] | None = None,
) -> dict[str, int]:
    """pod name -> host pid of its running container's init process, from `crictl ps -o json`'s
    listing and `inspect(container id) -> crictl inspect's JSON` (pure but for `inspect`). A pod
    with several running containers keeps the last one listed. `known`: container id -> pid of
    earlier calls, read first and filled in, so a caller that keeps it inspects each container once
    (a container's init pid never changes; one with no pid yet is asked again next time)."""
    out: dict[str, int] = {}
    for c in crictl_ps.get("containers", []):
        if c.get("state") != "CONTAINER_RUNNING":
            continue
        cid = str(c["id"])
        pid = known.get(cid) if known is not None else None
        if pid is None:
            pid = (inspect(cid).get("info") or {}).get("pid")
            if pid and known is not None:
                known[cid] = int(pid)
        pod = (c.get("labels") or {}).get("io.kubernetes.pod.name")
        if pid and pod:
            out[pod] = int(pid)
    return out


MOUNTS_FILE = Path("/proc/self/mounts")


def mounts_under(root: Path, mounts: str) -> list[str]:
    """The mount points strictly under `root` in a mounts table (/proc/self/mounts' text; octal
    escapes such as `\\040` for a space decoded), deepest first: the order to unmount them in."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=lambda m: (-m.count("/"), m))


def pod_gateway_on_host() -> str | None:
    """POD_GATEWAY when it is an address of this host (the node part made the bridge), else None.
    Host parts (Kafka, PostgreSQL) add a listener there for pods when it exists at their start."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((POD_GATEWAY, 0))  # binds only to an address of this host
        return POD_GATEWAY
    except OSError:
        return None


# the node's own processes (argv[0] `<cache>/node/bin/<name>`) and the flags that name a file of
# `<state>/node/`: how a node of any state dir is found from /proc (one node per machine)
_NODE_PROCESS_CONFIG_FLAGS = {
    "containerd": ("--config",),
    "kubelet": ("--config", "--root-dir"),
    "kube-scheduler": ("--config",),
    "kube-proxy": ("--config",),
    "coredns": ("-conf",),
}


def node_state_dirs(cmdlines: Iterable[Sequence[str]]) -> set[Path]:
    """The state dirs of the node parts whose processes these command lines are (from their config
    paths: `<state>/node/<file>`). Pure; `running_cmdlines()` reads the machine's."""
    found: set[Path] = set()
    for argv in cmdlines:
        if not argv:
            continue
        exe = Path(argv[0])
        flags = _NODE_PROCESS_CONFIG_FLAGS.get(exe.name)
        if flags is None or exe.parent.name != "bin" or exe.parent.parent.name != "node":
            continue
        for i, arg in enumerate(argv[1:], start=1):
            flag, eq, value = arg.partition("=")
            if flag not in flags:
                continue
            if not eq:
                value = argv[i + 1] if i + 1 < len(argv) else ""
            path = Path(value)
            for parent in (path.parent, path.parent.parent):  # <state>/node/<file>, or <state>/node/kubelet
                if parent.name == "node":
                    found.add(parent.parent)
                    break
    return found


def running_cmdlines() -> list[list[str]]:
    """Every process's argv on this machine (`paths.cmdline`; those that vanish read empty)."""
    return [cmdline(int(d.name)) for d in Path("/proc").iterdir() if d.name.isdigit()]


def default_node_ip() -> str:
    """The Node's InternalIP: the host's address on its default route (lagpilot_dev.paths.host_ip)."""
    return host_ip()


def build_command(node_cache: Path, kube_cache: Path | None = None) -> list[str]:
    """dev/build-node.sh's command line, under `nice -n 10`; with `kube_cache` the control plane's
    missing binaries are built in the same run (into `<kube_cache>/bin`)."""
    argv = ["nice", "-n", "10", "bash", str(BUILD_SCRIPT), str(node_cache)]
    return [*argv, str(kube_cache)] if kube_cache is not None else argv


def build_env() -> dict[str, str]:
    """The versions dev/build-node.sh (and the dev/build-kube.sh it runs) build."""
    return {
        "LAGPILOT_KUBE_VERSION": KUBE_VERSION,
        "LAGPILOT_ETCD_VERSION": ETCD_VERSION,
        "LAGPILOT_CONTAINERD_VERSION": CONTAINERD_VERSION,
        "LAGPILOT_CRICTL_VERSION": CRICTL_VERSION,
        "LAGPILOT_COREDNS_VERSION": COREDNS_VERSION,
    }


class NodePart:
    """Install (build + apt), start, stop and describe one real worker node."""

    name = "node"

    def __init__(self, cache_dir: Path, state_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.node_cache = self.cache_dir / "node"
        self.bin = self.node_cache / "bin"
        self.images_dir = self.node_cache / "images"
        self.dir = self.state_dir / "node"
        self.pki = self.dir / "pki"
        tag = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:8]
        self.run_dir = Path("/run") / f"lagpilot-node-{tag}"
        self.containerd_sock = self.run_dir / "containerd.sock"
        self.kubelet_root = self.dir / "kubelet"
        self.cni_conf_dir = self.dir / "cni" / "net.d"
        self.ports = Ports(self.state_dir)
        self.kube = KubePart(self.cache_dir, self.state_dir)
        markers = {
            "containerd": "containerd",
            "kubelet": "kubelet",
            "scheduler": "kube-scheduler",
            "proxy": "kube-proxy",
            "dns": "coredns",
        }
        self.processes: dict[str, Process] = {
            comp: Process(
                name=f"node-{comp}",
                argv=[],
                log_file=self.dir / f"{comp}.log",
                pid_file=self.dir / f"{comp}.pid",
                marker=str(self.bin / markers[comp]),
            )
            for comp in COMPONENTS
        }

    # ---- install -------------------------------------------------------------------------------
    def installed(self) -> bool:
        return all(os.access(self.bin / b, os.X_OK) for b in BINARIES) and all(
            p.exists() for p in (RUNC, CNI_BIN_DIR / "bridge", CNI_BIN_DIR / "host-local", BUSYBOX)
        )

    def install(self) -> None:
        """Debian's runc/CNI plugins/busybox (apt-get), then dev/build-node.sh (first run only).

        When the control plane's binaries are missing too, the same run builds them (one `go build`
        of every k8s.io/kubernetes command, one Go module and build cache: docs/node.md "Cold
        build"). Holds the kube part's build lock, then the node's (always in that order).
        """
        if self.installed() and self.kube.installed():
            self._write_images()
            return
        from lagpilot_dev.images.tools import ensure_apt_packages

        with file_lock(self.kube.kube_cache / ".build.lock"), file_lock(self.node_cache / ".build.lock"):
            ensure_apt_packages(APT_PACKAGES)
            with_kube = not self.kube.installed()
            if with_kube or not all(os.access(self.bin / b, os.X_OK) for b in BINARIES):
                build_log = self.node_cache / "build.log"
                build_log.parent.mkdir(parents=True, exist_ok=True)
                started = time.monotonic()
                log.info(
                    "building node binaries (first run only)",
                    extra={"log": str(build_log), "with_control_plane": with_kube},
                )
                with open(build_log, "ab") as out:
                    argv = build_command(self.node_cache, self.kube.kube_cache if with_kube else None)
                    rc = subprocess.run(
                        argv,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        check=False,
                        env={**os.environ, **build_env(), **gocache.build_env(self.cache_dir)},
                    ).returncode
                if rc != 0 or not self.installed() or not self.kube.installed():
                    tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-30:])
                    raise RuntimeError(f"dev/build-node.sh failed (exit {rc}); log {build_log}:\n{tail}")
                log.info("node binaries built", extra={"seconds": round(time.monotonic() - started)})
        self._write_images()

    def image_archives(self) -> dict[str, Path]:
        # named after the image: a new tag writes a new archive
        return {
            name: self.images_dir / (name.replace("/", "_").replace(":", "_") + ".oci.tar")
            for name in (PAUSE_IMAGE, TEST_IMAGE)
        }

    def _write_images(self) -> None:
        archives = self.image_archives()
        if all(p.exists() for p in archives.values()):
            return
        self.images_dir.mkdir(parents=True, exist_ok=True)
        specs = {
            PAUSE_IMAGE: node_oci.pause_image(self.bin / "pause", PAUSE_IMAGE),
            TEST_IMAGE: node_oci.busybox_image(BUSYBOX, TEST_IMAGE),
        }
        for name, path in archives.items():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(node_oci.oci_archive(specs[name]))
            tmp.replace(path)

    # ---- host ----------------------------------------------------------------------------------
    @staticmethod
    def _prepare_host() -> None:
        """The host settings a node needs (docs/node.md says why), and the pod bridge with its gateway
        address made before the first pod (the CNI bridge plugin takes it as it finds it): so the
        address exists for the Kafka part's PODS listener whatever starts first."""
        subprocess.run(["mount", "--make-rshared", "/"], check=True, capture_output=True)
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
        if not Path(f"/sys/class/net/{BRIDGE}").exists():
            subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True, capture_output=True)
        prefix = POD_SUBNET.split("/", 1)[1]
        addrs = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "dev", BRIDGE],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if f" {POD_GATEWAY}/" not in addrs:
            subprocess.run(
                ["ip", "addr", "add", f"{POD_GATEWAY}/{prefix}", "dev", BRIDGE],
                check=True,
                capture_output=True,
            )
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True, capture_output=True)
        # Service IPs are private addresses: a packet to one that kube-proxy did not translate must
        # stay on this machine (the bridge), never leave by the default route
        routes = subprocess.run(
            ["ip", "-4", "route", "show", SERVICE_CLUSTER_IP_RANGE],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if not routes.strip():
            subprocess.run(
                ["ip", "route", "add", SERVICE_CLUSTER_IP_RANGE, "dev", BRIDGE],
                check=True,
                capture_output=True,
            )

    # ---- certificates and config ---------------------------------------------------------------
    def _ensure_pki(self) -> None:
        """Client certificates for the kubelet and the scheduler, signed by the control plane's CA."""
        if (self.pki / ".complete").exists() and (self.pki / "kube-router.crt").exists():
            return
        self.pki.mkdir(parents=True, exist_ok=True)
        os.chmod(self.pki, 0o700)
        ca = self.kube.pki
        leaves = {
            "kubelet": f"/O=system:nodes/CN=system:node:{NODE_NAME}",
            "scheduler": "/CN=system:kube-scheduler",
            "kube-proxy": "/CN=system:kube-proxy",
            "coredns": "/CN=system:coredns",
            "kube-router": "/CN=system:kube-router",
        }
        for name, subj in leaves.items():
            if (self.pki / f"{name}.crt").exists():
                continue  # a PKI made before a leaf was added keeps what it has
            (self.pki / f"{name}.ext").write_text(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=clientAuth\n"
            )
            _openssl(
                "req",
                "-new",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                f"{name}.key",
                "-out",
                f"{name}.csr",
                "-subj",
                subj,
                cwd=self.pki,
            )
            _openssl(
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                str(ca / "ca.crt"),
                "-CAkey",
                str(ca / "ca.key"),
                "-set_serial",
                "0x" + os.urandom(8).hex(),
                "-days",
                "3650",
                "-out",
                f"{name}.crt",
                "-extfile",
                f"{name}.ext",
                cwd=self.pki,
            )
        for f in self.pki.glob("*.key"):
            os.chmod(f, 0o600)
        (self.pki / ".complete").write_text("ok\n")

    def kubeconfig(self, who: str) -> Path:
        return self.dir / f"{who}.kubeconfig"

    def _write_kubeconfigs(self) -> None:
        server = self.kube.server()
        users = {
            "kubelet": f"system:node:{NODE_NAME}",
            "scheduler": "system:kube-scheduler",
            "kube-proxy": "system:kube-proxy",
            "coredns": "system:coredns",
            "kube-router": "system:kube-router",
        }
        for who, user in users.items():
            _write_private(
                self.kubeconfig(who),
                kubeconfig_yaml(
                    server,
                    self.kube.ca_file(),
                    user,
                    client_cert=self.pki / f"{who}.crt",
                    client_key=self.pki / f"{who}.key",
                    namespace="kube-system",
                ),
            )

    def containerd_config(self) -> str:
        """containerd's config (version 3). Non-default settings, each explained in docs/node.md."""
        root = self.dir / "containerd"
        return f"""version = 3
root = "{root}"
state = "{self.run_dir / "containerd"}"

[grpc]
  address = "{self.containerd_sock}"

[ttrpc]
  address = "{self.run_dir / "containerd.sock.ttrpc"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{self.cni_conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "{LOOPBACK}"
  stream_server_port = "0"
"""

    def cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "lagpilot",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def kubelet_config(self) -> dict[str, Any]:
        """The KubeletConfiguration. Non-default settings, each explained in docs/node.md."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # cgroup v1 here; deprecated in 1.35, refused unless allowed
            "cgroupDriver": "cgroupfs",  # no systemd on these machines
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "address": self.node_ip(),
            "port": self.ports.ensure("node.kubelet"),
            "readOnlyPort": 0,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": self.ports.ensure("node.kubelet-healthz"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.kube.ca_file())},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDomain": CLUSTER_DOMAIN,
            "clusterDNS": [CLUSTER_DNS],
            "resolvConf": "/etc/resolv.conf",
            "podLogsDir": str(self.dir / "pod-logs"),
            "volumePluginDir": str(self.dir / "volume-plugins"),
            "rotateCertificates": False,
            "serializeImagePulls": False,
            # the imported images have no registry to come back from: never garbage-collect them
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            # a shared development machine: evict pods only when really short
            "evictionHard": {
                "memory.available": "200Mi",
                "nodefs.available": "2%",
                "imagefs.available": "2%",
                "nodefs.inodesFree": "2%",
            },
            "maxPods": 110,
        }

    def scheduler_config(self) -> dict[str, Any]:
        """One profile, SCHEDULER_NAME (the cluster's default scheduler), every Node a candidate."""
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig("scheduler"))},
            "leaderElection": {"leaderElect": False},
            "enableProfiling": False,
            "profiles": [{"schedulerName": SCHEDULER_NAME}],
        }

    def _write_configs(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "containerd.toml").write_text(self.containerd_config())
        self.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        (self.cni_conf_dir / "10-lagpilot.conflist").write_text(json.dumps(self.cni_config(), indent=1))
        (self.dir / "kubelet-config.json").write_text(json.dumps(self.kubelet_config(), indent=1))
        (self.dir / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.containerd_sock}\nimage-endpoint: unix://{self.containerd_sock}\n"
            "timeout: 30\n"
        )

    def node_ip(self) -> str:
        return default_node_ip()

    # ---- run -----------------------------------------------------------------------------------
    def is_running(self) -> bool:
        if not all(p.is_running() for p in self.processes.values()):
            return False
        return http_ok(f"http://{LOOPBACK}:{self.ports.ensure('node.kubelet-healthz')}/healthz")

    def refuse_other_node(self, cmdlines: Iterable[Sequence[str]] | None = None) -> None:
        """One node per machine (fixed node name, bridge, pod subnet, CoreDNS on the gateway:
        docs/node.md "Stand-ins"): raise, naming the other state dir, when a node part of another
        state dir has processes running here. `cmdlines`: the machine's (default) or a test's."""
        mine = self.state_dir.resolve()
        others = sorted(
            str(d)
            for d in node_state_dirs(running_cmdlines() if cmdlines is None else cmdlines)
            if d.resolve() != mine
        )
        if others:
            other = others[0]
            raise RuntimeError(
                f"the real node of state dir {other} runs on this machine, and there is one node per "
                f"machine (node {NODE_NAME}, bridge {BRIDGE}, subnet {POD_SUBNET}: docs/node.md "
                f"'Stand-ins'); this stack's state dir is {self.state_dir}. Run in that stack "
                f"(LAGPILOT_STATE={other}), stop its node (LAGPILOT_STATE={other} lagpilot dev down "
                f"--parts node), or run without a node (LAGPILOT_NODE=0)"
            )

    def prepare_host(self) -> None:
        """Before the stack starts anything with the node (Stack.up): refuse another state dir's node
        (`refuse_other_node`), then the host settings and the pod bridge with its gateway address,
        which Kafka and PostgreSQL listen on for pods only when it exists at their start."""
        self.refuse_other_node()
        self._prepare_host()

    def start(self, timeout: float = 180.0) -> None:
        self.refuse_other_node()
        self.install()
        self.kube.start()
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / "start.lock"):
            self._prepare_host()
            self._ensure_pki()
            self._write_kubeconfigs()
            self._write_configs()
            self._start_containerd(timeout)
            self._import_images()
            self._start_kubelet(timeout)
            self._start_scheduler(timeout)
            self._wait_node_ready(timeout)
            pods_cpu_shares()  # the kubelet made kubepods while it started
            self._start_proxy(timeout)
            self._start_dns(timeout)

    def _env(self) -> dict[str, str]:
        # containerd finds its shim on PATH
        return {
            **os.environ,
            "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        }

    def _start_containerd(self, timeout: float) -> None:
        proc = self.processes["containerd"]
        if not proc.is_running():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            proc.argv = [str(self.bin / "containerd"), "--config", str(self.dir / "containerd.toml")]
            proc.env = self._env()
            proc.start()
        wait_started(proc, lambda: self.ctr("version", timeout=10).returncode == 0, "containerd", timeout)

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run `ctr` in containerd's k8s.io namespace (the CRI's)."""
        argv = [str(self.bin / "ctr"), "--address", str(self.containerd_sock), "-n", CRI_NAMESPACE, *args]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, env=self._env()
        )

    def crictl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run crictl against this node's containerd."""
        argv = [str(self.bin / "crictl"), "--config", str(self.dir / "crictl.yaml"), *args]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, env=self._env()
        )

    def running_pids(
        self, namespace: str | None = None, known: dict[str, int] | None = None, timeout: float = 30.0
    ) -> dict[str, int]:
        """pod name -> host pid of each running container's init process in `namespace` (every
        namespace when None), as the runtime reports them (`crictl ps` and `crictl inspect`'s pid:
        `container_pids`, with `known` its per-caller memory of containers already inspected)."""
        args = ["ps", "-o", "json", "--state", "Running"]
        if namespace:
            args += ["--namespace", namespace]
        listed = json.loads(self.crictl(*args, timeout=timeout).stdout or "{}")

        def inspect(cid: str) -> Any:
            return json.loads(self.crictl("inspect", cid, timeout=timeout).stdout or "{}")

        return container_pids(listed, inspect, known)

    def import_image(self, archive: Path) -> None:
        """Import an OCI/docker archive into the CRI's namespace (no registry: imagePullPolicy Never)."""
        proc = self.ctr("images", "import", "--platform", "linux/amd64", str(archive), timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed: {proc.stderr.strip()[-2000:]}")

    def load_built_image(self, tag: str, reference: str | None = None) -> float:
        """Load an image built by `lagpilot dev images` (buildah, its private containers-storage)
        into the node: `podman save` as a docker archive, `ctr images import`; then name it also as
        users do (`reference`, default: the build's tag without buildah's `localhost/`, e.g.
        `lagpilot/consumer:0.1.0`, which the CRI resolves to `docker.io/lagpilot/consumer:0.1.0`):
        the chart's and the CRD's image names run with `imagePullPolicy: Never`. Returns seconds."""
        import tempfile

        from lagpilot_dev.images.tools import default_layout, run_cmd

        t0 = time.monotonic()
        layout = default_layout()
        built_id = f"sha256:{run_cmd(layout.podman_argv('image', 'inspect', '--format', '{{.Id}}', tag)).stdout.strip()}"
        imported = cri_image_name(tag)
        user_name = cri_image_name(reference or tag.removeprefix("localhost/"))
        if self.image_id(imported) != built_id:
            with tempfile.TemporaryDirectory(dir=self.node_cache) as tmp:
                archive = Path(tmp) / "image.tar"
                run_cmd(
                    layout.podman_argv("save", "--format", "docker-archive", "-o", str(archive), tag),
                    timeout=1800,
                )
                self.import_image(archive)
            if self.image_id(imported) != built_id:
                raise RuntimeError(
                    f"{tag} imported, but the node has {imported} as {self.image_id(imported)}, "
                    f"not the built {built_id}"
                )
        if user_name != imported and self.image_id(user_name) != built_id:
            proc = self.ctr("images", "tag", "--force", imported, user_name, timeout=60)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"ctr images tag {imported} {user_name} failed: {proc.stderr.strip()[-1000:]}"
                )
        seconds = round(time.monotonic() - t0, 1)
        log.info(
            "image on the node",
            extra={"image": tag, "image_name": user_name, "id": built_id[:19], "seconds": seconds},
        )
        return seconds

    def image_id(self, tag: str) -> str | None:
        """The image's id (its config digest) as the CRI sees it, or None when not on the node."""
        proc = self.crictl("inspecti", "-o", "json", tag)
        if proc.returncode != 0:
            return None
        return str(json.loads(proc.stdout)["status"]["id"])

    def images(self) -> set[str]:
        proc = self.ctr("images", "ls", "-q")
        return set(proc.stdout.split()) if proc.returncode == 0 else set()

    def _import_images(self) -> None:
        have = self.images()
        for name, archive in self.image_archives().items():
            if name not in have:
                self.import_image(archive)
                log.info("imported image", extra={"image": name})

    def _start_kubelet(self, timeout: float) -> None:
        proc = self.processes["kubelet"]
        if not proc.is_running():
            proc.argv = [
                str(self.bin / "kubelet"),
                f"--config={self.dir / 'kubelet-config.json'}",
                f"--kubeconfig={self.kubeconfig('kubelet')}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.node_ip()}",
                "--v=1",
            ]
            proc.env = self._env()
            proc.start()
        url = f"http://{LOOPBACK}:{self.ports.ensure('node.kubelet-healthz')}/healthz"
        wait_started(proc, lambda: http_ok(url), "kubelet /healthz", timeout)

    def _start_scheduler(self, timeout: float) -> None:
        proc = self.processes["scheduler"]
        if not proc.is_running():
            port = self.ports.ensure("node.scheduler", must_be_free=True)
            kc = str(self.kubeconfig("scheduler"))
            (self.dir / "scheduler-config.json").write_text(json.dumps(self.scheduler_config(), indent=1))
            proc.argv = [
                str(self.bin / "kube-scheduler"),
                f"--config={self.dir / 'scheduler-config.json'}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                "--v=1",
            ]
            proc.start()
        port = self.ports.ensure("node.scheduler")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed; loopback only
        wait_started(
            proc,
            lambda: http_ok(f"https://{LOOPBACK}:{port}/healthz", context=ctx),
            "kube-scheduler /healthz",
            timeout,
        )

    def proxy_config(self) -> dict[str, Any]:
        """kube-proxy in iptables mode; it changes no sysctl it can leave alone (docs/node.md)."""
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig("kube-proxy"))},
            "hostnameOverride": NODE_NAME,
            "mode": "iptables",
            "clusterCIDR": POD_SUBNET,
            "healthzBindAddress": f"{LOOPBACK}:{self.ports.ensure('node.proxy-healthz')}",
            "metricsBindAddress": f"{LOOPBACK}:{self.ports.ensure('node.proxy-metrics')}",
            # keep the machine's conntrack table size and timeouts as they are
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            # no NodePorts on 127.0.0.1: that needs route_localnet=1 for the whole machine
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": ["primary"],
        }

    def _start_proxy(self, timeout: float) -> None:
        proc = self.processes["proxy"]
        if not proc.is_running():
            (self.dir / "proxy-config.json").write_text(json.dumps(self.proxy_config(), indent=1))
            proc.argv = [str(self.bin / "kube-proxy"), f"--config={self.dir / 'proxy-config.json'}", "--v=1"]
            proc.env = self._env()
            proc.start()
        url = f"http://{LOOPBACK}:{self.ports.ensure('node.proxy-healthz')}/healthz"
        wait_started(proc, lambda: http_ok(url), "kube-proxy /healthz", timeout)

    def corefile(self) -> str:
        """Cluster names from the API (kubernetes plugin); everything else as the host resolves it."""
        return f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{
    bind {CLUSTER_DNS}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {self.kubeconfig("coredns")} system:coredns@lagpilot
        pods insecure
    }}
    cache 5
}}
.:53 {{
    bind {CLUSTER_DNS}
    errors
    health {LOOPBACK}:{self.ports.ensure("node.dns-health")}
    forward . /etc/resolv.conf
    cache 30
}}
"""

    def _start_dns(self, timeout: float) -> None:
        proc = self.processes["dns"]
        if not proc.is_running():
            rbac = self.kube.kubectl("apply", "-f", "-", input_text=json.dumps(COREDNS_RBAC), timeout=60)
            if rbac.returncode != 0:
                raise RuntimeError(f"CoreDNS RBAC: {rbac.stderr.strip()[-1000:]}")
            (self.dir / "Corefile").write_text(self.corefile())
            proc.argv = [str(self.bin / "coredns"), "-conf", str(self.dir / "Corefile")]
            proc.start()
        url = f"http://{LOOPBACK}:{self.ports.ensure('node.dns-health')}/health"
        wait_started(proc, lambda: http_ok(url), "coredns /health", timeout)

    def node_ready(self) -> bool:
        proc = self.kube.kubectl(
            "get",
            "node",
            NODE_NAME,
            "-o",
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
            timeout=20,
        )
        return proc.returncode == 0 and proc.stdout.strip() == "True"

    def _wait_node_ready(self, timeout: float) -> None:
        wait_started(self.processes["kubelet"], self.node_ready, f"node {NODE_NAME} Ready", timeout)

    def stop(self) -> None:
        """Stop the scheduler and the kubelet, remove every pod's containers and sandbox (their shims
        outlive containerd otherwise), then containerd. The Node object stays (NotReady). The
        NetworkPolicy agent (the `netpol` part) goes first when it runs: it serves this node only."""
        from lagpilot_dev.netpol import NetpolPart

        NetpolPart(self.cache_dir, self.state_dir).stop()
        self.processes["dns"].stop(grace=10.0)
        self.processes["proxy"].stop(grace=10.0)
        self.processes["scheduler"].stop(grace=10.0)
        self.processes["kubelet"].stop(grace=20.0)
        if self.processes["containerd"].is_running():
            pods = self.crictl("pods", "-q").stdout.split()
            for pod in pods:
                self.crictl("stopp", pod, timeout=60)
                self.crictl("rmp", pod, timeout=60)
        self.processes["containerd"].stop(grace=20.0)

    def purge(self) -> None:
        """Delete the node's state (containerd's images and containers, kubelet's root); caches stay."""
        self.stop()
        # what the kubelet left mounted (a kept pod's volumes: its projected token is a tmpfs); the
        # kubelet's root itself is no mount point, so `umount -R` on it would unmount nothing
        for point in mounts_under(self.kubelet_root, MOUNTS_FILE.read_text()):
            subprocess.run(["umount", point], capture_output=True, check=False)
        # the bridge and the Service route go too (stop() keeps them: host parts may listen on the gateway)
        subprocess.run(
            ["ip", "route", "del", SERVICE_CLUSTER_IP_RANGE, "dev", BRIDGE], capture_output=True, check=False
        )
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def info(self) -> dict[str, object]:
        return {
            "node_name": NODE_NAME,
            "node_ip": self.node_ip(),
            "pod_subnet": POD_SUBNET,
            "host_from_pods": POD_GATEWAY,
            "containerd_socket": str(self.containerd_sock),
            "crictl": f"{self.bin / 'crictl'} --config {self.dir / 'crictl.yaml'}",
            "ctr": f"{self.bin / 'ctr'} --address {self.containerd_sock} -n {CRI_NAMESPACE}",
            "pause_image": PAUSE_IMAGE,
            "test_image": TEST_IMAGE,
            "scheduler_name": SCHEDULER_NAME,
            "cluster_dns": CLUSTER_DNS,
            "kube_version": KUBE_VERSION,
            "containerd_version": CONTAINERD_VERSION,
            "node_logs": str(self.dir),
            "pods_cpu_shares": read_pods_cpu_shares(),
        }
