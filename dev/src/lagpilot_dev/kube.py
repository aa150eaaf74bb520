"""The local Kubernetes control plane: etcd + kube-apiserver + kube-controller-manager, and kubectl.

Why these three and not envtest's two: with only etcd and an apiserver there is no garbage
collection of owned objects, no Deployment -> ReplicaSet -> Pod chain, no Job bookkeeping, no
default ServiceAccounts and namespace deletion hangs. The controller-manager makes all of that real.
This part runs no scheduler and no kubelet: the `node` part (`lagpilot_dev.node`, docs/node.md)
adds a real kubelet, containerd and kube-scheduler. (The test-side pod runner that played the
kubelet before retired in issue 24 step 6.)

Binaries are built once from the Go module proxy by `dev/build-kube.sh` into `<cache>/kube/bin`.
Everything mutable (certificates, etcd data, kubeconfigs, logs, pids) lives in `<state>/kube`;
ports are persisted in `<state>/ports.json` so a killed and restarted part comes back on the same
address and existing kubeconfigs stay valid.

Identities (all client certificates signed by one self-signed CA, generated once with openssl):
- `lagpilot-admin` in group `system:masters`: the admin kubeconfig for kubectl, tests and the dev tools;
- `system:kube-controller-manager`: the controller-manager (bound by the bootstrap RBAC policy), which
  with `--use-service-account-credentials` runs each controller as its own ServiceAccount, as on a
  real cluster.
ServiceAccount kubeconfigs (a bearer token from the TokenRequest API) are written on request, so
the operator can be run with exactly its Helm chart's RBAC.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import ssl
import subprocess
import threading
import time
from pathlib import Path

from lagpilot_dev import gocache
from lagpilot_dev.paths import LOOPBACK, Ports, Process, file_lock, host_ip, http_ok, wait_started

log = logging.getLogger("lagpilot_dev.kube")

KUBE_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.16"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "lagpilot-admin"
CLUSTER_NAME = "lagpilot"
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "build-kube.sh"
COMPONENTS = ("etcd", "apiserver", "controller-manager")
# the apiserver listens on every address (clients still need a certificate or a token: anonymous
# requests get the public discovery paths only, as on any cluster); docs/node.md says why
APISERVER_BIND = "0.0.0.0"


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"openssl {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )


def _b64(path: Path) -> str:
    import base64

    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_yaml(
    server: str,
    ca_file: Path,
    user: str,
    *,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> str:
    """A one-cluster, one-user kubeconfig with everything embedded (no paths to go stale).

    JSON is valid YAML, and needs no YAML library here.
    """
    user_entry: dict[str, str] = {}
    if client_cert is not None and client_key is not None:
        user_entry["client-certificate-data"] = _b64(client_cert)
        user_entry["client-key-data"] = _b64(client_key)
    if token is not None:
        user_entry["token"] = token
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": _b64(ca_file)}}
        ],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [
            {
                "name": f"{user}@{CLUSTER_NAME}",
                "context": {"cluster": CLUSTER_NAME, "user": user, "namespace": namespace},
            }
        ],
        "current-context": f"{user}@{CLUSTER_NAME}",
        "preferences": {},
    }
    return json.dumps(cfg, indent=1) + "\n"


def _write_private(path: Path, text: str) -> None:
    """Write a credential file readable by its owner only (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)


class KubePart:
    """Install (build binaries), start, stop, kill and describe the local control plane."""

    name = "kube"

    def __init__(self, cache_dir: Path, state_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.kube_cache = self.cache_dir / "kube"
        self.bin = self.kube_cache / "bin"
        self.dir = self.state_dir / "kube"
        self.pki = self.dir / "pki"
        self.etcd_data = self.dir / "etcd-data"
        self.admin_kubeconfig = self.dir / "admin.kubeconfig"
        self.kcm_kubeconfig = self.dir / "controller-manager.kubeconfig"
        self.ports = Ports(self.state_dir)
        self.processes: dict[str, Process] = {
            comp: Process(
                name=f"kube-{comp}" if comp != "etcd" else "etcd",
                argv=[],  # built in start(): ports may change
                log_file=self.dir / f"{comp}.log",
                pid_file=self.dir / f"{comp}.pid",
                marker=str(self.bin / ("etcd" if comp == "etcd" else f"kube-{comp}")),
            )
            for comp in COMPONENTS
        }

    # ---- install -------------------------------------------------------------------------------
    def installed(self) -> bool:
        """True when all four binaries are in the cache."""
        return all(os.access(self.bin / b, os.X_OK) for b in BINARIES)

    def install(self) -> None:
        """Build the binaries with dev/build-kube.sh (first run only: 5 min 16 s measured cold on 2 cores)."""
        if self.installed():
            return
        with file_lock(self.kube_cache / ".build.lock"):
            if self.installed():
                return
            build_log = self.kube_cache / "build.log"
            build_log.parent.mkdir(parents=True, exist_ok=True)
            log.info(
                "building kubernetes binaries (first run only: ~5 min cold on 2 cores, measured)",
                extra={"kube_version": KUBE_VERSION, "etcd_version": ETCD_VERSION, "log": str(build_log)},
            )
            env = dict(
                os.environ,
                LAGPILOT_KUBE_VERSION=KUBE_VERSION,
                LAGPILOT_ETCD_VERSION=ETCD_VERSION,
                **gocache.build_env(self.cache_dir),
            )
            started = time.monotonic()
            with open(build_log, "ab") as out:
                proc = subprocess.Popen(
                    ["bash", str(BUILD_SCRIPT), str(self.kube_cache)],
                    stdout=out,
                    stderr=subprocess.PIPE,
                    env=env,
                )
                assert proc.stderr is not None
                for raw in proc.stderr:  # progress lines from the script, plus go's own output
                    out.write(raw)
                    out.flush()
                    line = raw.decode(errors="replace").rstrip()
                    if line.startswith("[build-kube"):
                        log.info("build progress", extra={"line": line})
                rc = proc.wait()
            if rc != 0 or not self.installed():
                tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"dev/build-kube.sh failed (exit {rc}); log {build_log}:\n{tail}")
            log.info("kubernetes binaries built", extra={"seconds": round(time.monotonic() - started)})

    # ---- certificates --------------------------------------------------------------------------
    def _ensure_pki(self) -> None:
        """CA, apiserver serving cert, admin and controller-manager client certs, SA key pair (once)."""
        if (self.pki / ".complete").exists():
            return
        p = self.pki
        p.mkdir(parents=True, exist_ok=True)
        os.chmod(p, 0o700)
        _openssl(
            "req",
            "-x509",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=lagpilot-dev-ca",
            cwd=p,
        )
        sans = ",".join(
            [
                f"IP:{LOOPBACK}",
                f"IP:{KUBERNETES_SERVICE_IP}",
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
            ]
        )
        leaves = {
            "apiserver": ("/CN=kube-apiserver", "serverAuth", sans),
            "admin": (f"/O=system:masters/CN={ADMIN_USER}", "clientAuth", None),
            "controller-manager": ("/CN=system:kube-controller-manager", "clientAuth", None),
        }
        for name, (subj, usage, san) in leaves.items():
            ext = [
                "basicConstraints=CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                f"extendedKeyUsage={usage}",
            ]
            if san:
                ext.append(f"subjectAltName={san}")
            (p / f"{name}.ext").write_text("\n".join(ext) + "\n")
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
                cwd=p,
            )
            _openssl(
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "0x" + secrets.token_hex(8),
                "-days",
                "3650",
                "-out",
                f"{name}.crt",
                "-extfile",
                f"{name}.ext",
                cwd=p,
            )
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=p)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=p)
        for f in p.glob("*.key"):
            os.chmod(f, 0o600)
        (p / ".complete").write_text("ok\n")
        log.info("generated control-plane certificates", extra={"pki": str(p)})

    def _ensure_kubelet_client_cert(self) -> None:
        """The apiserver's client certificate towards kubelets (`kubectl logs/exec/port-forward` on
        the real node, lagpilot_dev.node): made once, also for a PKI generated before it existed."""
        p = self.pki
        if (p / "apiserver-kubelet-client.crt").exists():
            return
        (p / "apiserver-kubelet-client.ext").write_text(
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
            "apiserver-kubelet-client.key",
            "-out",
            "apiserver-kubelet-client.csr",
            "-subj",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            cwd=p,
        )
        os.chmod(p / "apiserver-kubelet-client.key", 0o600)
        _openssl(
            "x509",
            "-req",
            "-in",
            "apiserver-kubelet-client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "0x" + secrets.token_hex(8),
            "-days",
            "3650",
            "-out",
            "apiserver-kubelet-client.crt.tmp",
            "-extfile",
            "apiserver-kubelet-client.ext",
            cwd=p,
        )
        (p / "apiserver-kubelet-client.crt.tmp").replace(p / "apiserver-kubelet-client.crt")

    def _ensure_front_proxy_client_cert(self) -> None:
        """The aggregator's client certificate (CN front-proxy-client, the one name
        --requestheader-allowed-names accepts): kube-apiserver presents it when it proxies a request
        to an aggregated API server (KEDA's metrics server for external.metrics.k8s.io, lagpilot_dev.keda),
        which then trusts the X-Remote-User/Group headers it sets. Made once, also for an older PKI."""
        p = self.pki
        if (p / "front-proxy-client.crt").exists():
            return
        (p / "front-proxy-client.ext").write_text(
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
            "front-proxy-client.key",
            "-out",
            "front-proxy-client.csr",
            "-subj",
            "/CN=front-proxy-client",
            cwd=p,
        )
        os.chmod(p / "front-proxy-client.key", 0o600)
        _openssl(
            "x509",
            "-req",
            "-in",
            "front-proxy-client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "0x" + secrets.token_hex(8),
            "-days",
            "3650",
            "-out",
            "front-proxy-client.crt.tmp",
            "-extfile",
            "front-proxy-client.ext",
            cwd=p,
        )
        (p / "front-proxy-client.crt.tmp").replace(p / "front-proxy-client.crt")

    def apiserver_aggregates(self) -> bool:
        """True when the running kube-apiserver was started with the aggregator's client certificate
        (an apiserver started by an older checkout was not: aggregated APIs then get no identity)."""
        from lagpilot_dev.paths import cmdline

        pid = self.processes["apiserver"].pid()
        return pid is not None and any(a.startswith("--proxy-client-cert-file=") for a in cmdline(pid))

    def restart_apiserver(self, timeout: float = 180.0) -> None:
        """Stop and start kube-apiserver alone (same etcd, port and certificates: its state is all in
        etcd; clients reconnect). Used once to pick up new flags on a shared stack."""
        self.processes["apiserver"].stop(grace=5.0)
        self.start(timeout)

    # ---- addresses -----------------------------------------------------------------------------
    def server(self) -> str:
        """The apiserver URL (stable across restarts unless its port was taken meanwhile)."""
        return f"https://{LOOPBACK}:{self.ports.ensure('kube.apiserver')}"

    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file()))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    # ---- run -----------------------------------------------------------------------------------
    def is_running(self) -> bool:
        """True when all three processes run and the apiserver answers /readyz."""
        if not all(p.is_running() for p in self.processes.values()):
            return False
        return (self.pki / ".complete").exists() and http_ok(
            f"{self.server()}/readyz", context=self._ssl_context()
        )

    def component_running(self, component: str) -> bool:
        return self.processes[component].is_running()

    def start(self, timeout: float = 180.0) -> None:
        """Start whatever of etcd / apiserver / controller-manager is not running; wait for health.

        Idempotent, and restartable on the same data dir and ports after `stop()` or `kill()`.
        """
        self.install()
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / "start.lock"):
            self._ensure_pki()
            self._ensure_kubelet_client_cert()
            self._ensure_front_proxy_client_cert()
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            self._start_controller_manager(timeout)
            self._drop_stale_aggregated_apis()

    def _drop_stale_aggregated_apis(self) -> None:
        """An APIService the keda part registered (label lagpilot.io/dev-part=keda) whose metrics
        server is not running (a session ended, a machine restarted): deleted. Left registered, every
        discovery call reports its group unavailable and the namespace controller keeps namespaces
        in Terminating; the keda part registers it again when it starts."""
        from lagpilot_dev.keda import KedaPart

        if KedaPart(self.cache_dir, self.state_dir).processes["metrics-apiserver"].is_running():
            return
        proc = self.kubectl(
            "delete",
            "apiservice",
            "-l",
            "lagpilot.io/dev-part=keda",
            "--ignore-not-found",
            "--wait=false",
            timeout=60,
        )
        if proc.returncode != 0:
            log.warning(
                "could not remove a stale KEDA APIService", extra={"error": proc.stderr.strip()[-500:]}
            )
        elif "deleted" in proc.stdout:
            log.info(
                "removed a stale KEDA APIService (its metrics server is not running)",
                extra={"deleted": proc.stdout.strip()},
            )

    def _start_etcd(self, timeout: float) -> None:
        proc = self.processes["etcd"]
        if not proc.is_running():
            client = self.ports.ensure("kube.etcd", must_be_free=True)
            peer = self.ports.ensure("kube.etcd-peer", must_be_free=True)
            peer_url = f"http://{LOOPBACK}:{peer}"
            proc.argv = [
                str(self.bin / "etcd"),
                "--name=lagpilot",
                f"--data-dir={self.etcd_data}",
                f"--listen-client-urls=http://{LOOPBACK}:{client}",
                f"--advertise-client-urls=http://{LOOPBACK}:{client}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=lagpilot={peer_url}",
                "--initial-cluster-state=new",
                # tests need no durability across power loss: skipping fsync makes writes ~10x cheaper
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ]
            proc.start()
        client = self.ports.ensure("kube.etcd")
        wait_started(
            proc, lambda: http_ok(f"http://{LOOPBACK}:{client}/health"), "etcd /health", timeout, interval=0.3
        )

    def _start_apiserver(self, timeout: float) -> None:
        proc = self.processes["apiserver"]
        if not proc.is_running():
            port = self.ports.ensure("kube.apiserver", must_be_free=True)
            etcd = self.ports.ensure("kube.etcd")
            p = self.pki
            proc.argv = [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers=http://{LOOPBACK}:{etcd}",
                # every address, advertised on the host's own (the `kubernetes` Service's endpoint):
                # pods on the real node (lagpilot_dev.node) reach it through the Service, which a
                # loopback address cannot serve (the API refuses one in Endpoints; it is each pod's
                # own loopback anyway). Clients on this host keep https://127.0.0.1:<port>.
                f"--bind-address={APISERVER_BIND}",
                f"--advertise-address={host_ip()}",
                f"--secure-port={port}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--client-ca-file={p / 'ca.crt'}",
                # towards kubelets (the real node's): logs, exec, port-forward authenticate as system:masters
                f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
                # ... at the Node's InternalIP: its Hostname (kind's name, lagpilot-worker) resolves
                # nowhere here, and the default order tries it first
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                # a request-header CA (as every real cluster has): the controller-manager's delegated
                # authentication reads it and logs an error every second while it is missing
                f"--requestheader-client-ca-file={p / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                # the aggregator's identity towards aggregated API servers (KEDA's metrics server):
                # signed by the request-header CA above, CN front-proxy-client
                f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
                "--authorization-mode=RBAC,Node",
                # MutatingAdmissionPolicy (beta in 1.35, off by default): the tests' LP_TEST_* hooks
                # for a test namespace's pods (lagpilot_dev.node.test_hooks_policy)
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ]
            proc.start()
        ctx = self._ssl_context()
        url = f"https://{LOOPBACK}:{self.ports.ensure('kube.apiserver')}/readyz"
        wait_started(proc, lambda: http_ok(url, context=ctx), "kube-apiserver /readyz", timeout, interval=0.3)
        self._write_kubeconfigs()

    def _write_kubeconfigs(self) -> None:
        server = self.server()
        p = self.pki
        _write_private(
            self.admin_kubeconfig,
            kubeconfig_yaml(
                server, p / "ca.crt", ADMIN_USER, client_cert=p / "admin.crt", client_key=p / "admin.key"
            ),
        )
        _write_private(
            self.kcm_kubeconfig,
            kubeconfig_yaml(
                server,
                p / "ca.crt",
                "system:kube-controller-manager",
                client_cert=p / "controller-manager.crt",
                client_key=p / "controller-manager.key",
                namespace="kube-system",
            ),
        )

    def _start_controller_manager(self, timeout: float) -> None:
        proc = self.processes["controller-manager"]
        if not proc.is_running():
            port = self.ports.ensure("kube.controller-manager", must_be_free=True)
            p = self.pki
            kc = str(self.kcm_kubeconfig)
            proc.argv = [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'kcm-certs'}",
                "--leader-elect=false",
                "--controllers=*",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--profiling=false",
                "--v=1",
            ]
            proc.start()
        port = self.ports.ensure("kube.controller-manager")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed by itself; loopback only
        wait_started(
            proc,
            lambda: http_ok(f"https://{LOOPBACK}:{port}/healthz", context=ctx),
            "kube-controller-manager /healthz",
            timeout,
            interval=0.3,
        )

    def stop(self) -> None:
        """Stop controller-manager, apiserver, etcd (reverse start order); data and ports are kept."""
        # kube-apiserver's graceful shutdown waits (up to 60 s) for connections with an open watch
        # (an operator, a kubelet) to go idle, which they never do; its state is all in etcd, so a
        # short grace loses nothing. etcd gets a real one.
        grace = {"controller-manager": 10.0, "apiserver": 5.0, "etcd": 30.0}
        for comp in reversed(COMPONENTS):
            self.processes[comp].stop(grace=grace[comp])

    def kill(self, component: str = "apiserver") -> None:
        """SIGKILL one component (fault tests); `start()` brings it back on the same data dir and port."""
        self.processes[component].kill()

    def info(self) -> dict[str, object]:
        return {
            "kubeconfig": str(self.admin_kubeconfig),
            "kubectl": str(self.bin / "kubectl"),
            "server": self.server(),
            "ca_file": str(self.ca_file()),
            "kube_version": KUBE_VERSION,
            "etcd_endpoint": f"http://{LOOPBACK}:{self.ports.ensure('kube.etcd')}",
            "kube_logs": str(self.dir),
        }

    # ---- helpers for tests and the operator ---------------------------------------------------
    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        timeout: float = 120.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the version-matched kubectl against this cluster (admin unless `kubeconfig` given)."""
        argv = [str(self.bin / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            input=input_text,
        )

    def kubeconfig_for_service_account(
        self, namespace: str, name: str, *, create: bool = True, expiration_seconds: int = 86400
    ) -> Path:
        """A kubeconfig that authenticates as ServiceAccount `namespace/name` (TokenRequest token).

        The ServiceAccount is created when missing (and `create`). The file lives under the state dir,
        mode 0600; the token is never logged.
        """
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(self.admin_kubeconfig))
        try:
            core = client.CoreV1Api(api_client)
            if create:
                try:
                    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
                except client.ApiException as exc:
                    if exc.status != 409:
                        raise
            req = core.create_namespaced_service_account_token(
                name, namespace, {"spec": {"audiences": [SA_ISSUER], "expirationSeconds": expiration_seconds}}
            )
            token = req.status.token
        finally:
            api_client.close()
        path = self.dir / "sa-kubeconfigs" / f"{namespace}.{name}.kubeconfig"
        _write_private(
            path,
            kubeconfig_yaml(
                self.server(),
                self.ca_file(),
                f"system:serviceaccount:{namespace}:{name}",
                token=token,
                namespace=namespace,
            ),
        )
        log.info(
            "wrote service-account kubeconfig",
            extra={"namespace": namespace, "service_account": name, "path": str(path)},
        )
        return path


def main(argv: list[str] | None = None) -> int:
    """`python -m lagpilot_dev.kube [up|down|status]`: the control plane alone (the stack CLI covers all)."""
    import argparse

    from lagpilot_dev import paths
    from lagpilot_runtime import jsonlog

    jsonlog.setup("INFO", logger="lagpilot_dev")
    ap = argparse.ArgumentParser(prog="python -m lagpilot_dev.kube")
    ap.add_argument("action", choices=["up", "down", "status"])
    args = ap.parse_args(argv)
    cache = paths.cache_dir()
    part = KubePart(cache, paths.state_dir(cache))
    if args.action == "up":
        t0 = time.monotonic()
        part.start()
        print(json.dumps({**part.info(), "start_seconds": round(time.monotonic() - t0, 1)}, indent=1))
    elif args.action == "down":
        part.stop()
    else:
        print(json.dumps({"running": part.is_running(), **part.info()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
