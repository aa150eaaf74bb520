"""KEDA beside the local control plane: keda-operator and keda-metrics-apiserver as local processes.

The `keda` part of the dev stack (`lagpilot dev up --parts kube,kafka,keda`): the real KEDA, built
from the Go module proxy at a released version (KEDA_VERSION, CGO_ENABLED=0, `dev/build-keda.sh`,
cached by version in `<cache>/keda/<version>`), run against the stack's API server with a kubeconfig
of KEDA's own ServiceAccount and the RBAC KEDA ships with. It needs the `kube` part. What it sets up
(docs/keda-comparison.md, "The real KEDA in the dev stack"):

- KEDA's CRDs (the release's config/crd), namespace `keda`, ServiceAccount `keda-operator` and its
  RBAC (config/rbac, config/metrics-server's role and bindings: the auth delegator, the
  extension-apiserver-authentication reader, and the HPA controller's external-metrics reader);
- certificates in `<state>/keda/pki/certs` (ca.crt, tls.crt, tls.key), what KEDA's cert rotation
  would put in its `kedaorg-certs` Secret: one CA, one leaf for serverAuth and clientAuth, used for
  the operator <-> metrics server gRPC (mTLS) and as the metrics server's serving certificate;
- keda-operator (its gRPC metrics service, health and Prometheus endpoints on loopback ports);
- keda-metrics-apiserver (KEDA's `adapter`) serving external.metrics.k8s.io on 127.0.0.1;
- the APIService v1beta1.external.metrics.k8s.io with the CA as its caBundle, and the Service it
  names: type ExternalName `localhost`. Without kube-proxy no ClusterIP reaches a host process, and
  an Endpoints/EndpointSlice address may not be loopback; the aggregator resolves an ExternalName
  service to `https://<externalName>:<APIService port>` and checks the serving certificate against
  the caBundle for `keda-metrics-apiserver.keda.svc`, which the leaf names.

kube-apiserver must present a client certificate when it proxies to the metrics server (its
--proxy-client-cert-file, lagpilot_dev.kube): a control plane started by an older checkout without
it has its apiserver restarted once (same etcd, port and certificates).

While the APIService is registered, every discovery call includes external.metrics.k8s.io: if the
metrics server is down, discovery reports that group as unavailable and the namespace controller
keeps namespaces in Terminating. So `stop()` deletes the APIService, and `start()` registers it
again only once the metrics server answers.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

from lagpilot_dev.kube import KubePart, _openssl
from lagpilot_dev.paths import LOOPBACK, Ports, Process, file_lock, http_ok, wait_for, wait_started

log = logging.getLogger("lagpilot_dev.keda")

KEDA_VERSION = "v2.20.2"
NAMESPACE = "keda"
SERVICE_ACCOUNT = "keda-operator"
METRICS_SERVICE = "keda-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"
BINARIES = ("keda-operator", "keda-metrics-apiserver")
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "build-keda.sh"
COMPONENTS = ("operator", "metrics-apiserver")
PART_LABEL = ("lagpilot.io/dev-part", "keda")


class KedaPart:
    """Install (build), start, stop and describe KEDA on the local control plane."""

    name = "keda"

    def __init__(self, cache_dir: Path, state_dir: Path, version: str = KEDA_VERSION) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.version = version
        self.keda_cache = self.cache_dir / "keda" / version
        self.bin = self.keda_cache / "bin"
        self.config = self.keda_cache / "config"
        self.dir = self.state_dir / "keda"
        self.pki = self.dir / "pki"
        self.certs = self.pki / "certs"
        self.ports = Ports(self.state_dir)
        self.kube = KubePart(self.cache_dir, self.state_dir)
        self.processes: dict[str, Process] = {
            comp: Process(
                name=f"keda-{comp}",
                argv=[],
                log_file=self.dir / f"{comp}.log",
                pid_file=self.dir / f"{comp}.pid",
                marker=str(self.bin / f"keda-{comp}"),
            )
            for comp in COMPONENTS
        }

    # ---- install -------------------------------------------------------------------------------
    def installed(self) -> bool:
        return (
            all(os.access(self.bin / b, os.X_OK) for b in BINARIES) and (self.config / ".complete").exists()
        )

    def install(self) -> None:
        """Build keda-operator and keda-metrics-apiserver with dev/build-keda.sh (first run only)."""
        self.kube.install()
        if self.installed():
            return
        with file_lock(self.keda_cache / ".build.lock"):
            if self.installed():
                return
            build_log = self.keda_cache / "build.log"
            build_log.parent.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            log.info(
                "building KEDA (first run only)", extra={"keda_version": self.version, "log": str(build_log)}
            )
            with open(build_log, "ab") as out:
                rc = subprocess.run(
                    ["nice", "-n", "10", "bash", str(BUILD_SCRIPT), str(self.keda_cache)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                    env={**os.environ, "LAGPILOT_KEDA_VERSION": self.version},
                ).returncode
            if rc != 0 or not self.installed():
                tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"dev/build-keda.sh failed (exit {rc}); log {build_log}:\n{tail}")
            log.info("KEDA built", extra={"seconds": round(time.monotonic() - started)})

    # ---- certificates --------------------------------------------------------------------------
    def _ensure_pki(self) -> None:
        """KEDA's CA and one leaf (serverAuth + clientAuth) for the gRPC mTLS and the metrics server."""
        if (self.certs / "tls.crt").exists():
            return
        self.certs.mkdir(parents=True, exist_ok=True)
        os.chmod(self.pki, 0o700)
        c = self.certs
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
            "/O=KEDAORG/CN=KEDA",
            cwd=c,
        )
        names = [
            f"{svc}.{NAMESPACE}.svc{suffix}"
            for svc in ("keda-operator", METRICS_SERVICE)
            for suffix in ("", ".cluster.local")
        ]
        sans = ",".join([f"IP:{LOOPBACK}", "DNS:localhost", *(f"DNS:{n}" for n in names)])
        (c / "tls.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={sans}\n"
        )
        _openssl(
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "tls.key.tmp",
            "-out",
            "tls.csr",
            "-subj",
            "/O=KEDAORG/CN=keda-operator",
            cwd=c,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "0x" + secrets.token_hex(8),
            "-days",
            "3650",
            "-out",
            "tls.crt.tmp",
            "-extfile",
            "tls.ext",
            cwd=c,
        )
        # the CA's key is not needed again: KEDA's processes watch certDir and must not see it
        (c / "ca.key").replace(self.pki / "ca.key")
        for f in ("ca.key",):
            os.chmod(self.pki / f, 0o600)
        os.chmod(c / "tls.key.tmp", 0o600)
        (c / "tls.key.tmp").replace(c / "tls.key")
        (c / "tls.crt.tmp").replace(c / "tls.crt")
        for f in ("tls.csr", "tls.ext"):
            (c / f).unlink(missing_ok=True)
        log.info("generated KEDA certificates", extra={"pki": str(self.pki)})

    # ---- run -----------------------------------------------------------------------------------
    def operator_probe_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.ensure('keda.operator-probe')}/healthz"

    def is_running(self) -> bool:
        """Both processes run and the external metrics API answers through the aggregator."""
        if not all(p.is_running() for p in self.processes.values()):
            return False
        try:
            return self.kube.is_running() and self.external_metrics_answer() is not None
        except Exception:  # noqa: BLE001 - a health probe
            return False

    def external_metrics_answer(self) -> dict[str, Any] | None:
        """`kubectl get --raw /apis/external.metrics.k8s.io/v1beta1` as admin (None when it fails)."""
        proc = self.kube.kubectl("get", "--raw", "/apis/external.metrics.k8s.io/v1beta1", timeout=30)
        if proc.returncode != 0:
            return None
        try:
            return dict(json.loads(proc.stdout))
        except ValueError:
            return None

    def start(self, timeout: float = 180.0) -> None:
        """Start what is not running; register the APIService; wait until the metrics API answers."""
        self.install()
        self.kube.start()
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / "start.lock"):
            if not self.kube.apiserver_aggregates():
                log.warning(
                    "kube-apiserver runs without the aggregator's client certificate (started by an older "
                    "checkout): restarting it once with --proxy-client-cert-file"
                )
                self.kube.restart_apiserver()
            self._ensure_pki()
            self._apply_manifests()
            kubeconfig = self.kube.kubeconfig_for_service_account(
                NAMESPACE, SERVICE_ACCOUNT, create=False, expiration_seconds=7 * 86400
            )
            self._start_operator(kubeconfig, timeout)
            self._start_metrics_apiserver(kubeconfig, timeout)
            self._register_apiservice()
            wait_for(
                lambda: self.external_metrics_answer() is not None,
                "GET /apis/external.metrics.k8s.io/v1beta1 through the aggregator",
                timeout=timeout,
                interval=1.0,
            )

    def _kubectl_ok(self, *args: str, input_text: str | None = None) -> str:
        proc = self.kube.kubectl(*args, input_text=input_text)
        if proc.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}"
            )
        return proc.stdout

    def _apply_manifests(self) -> None:
        """The release's namespace, ServiceAccount, RBAC and CRDs (server-side apply, idempotent)."""
        rbac = self.config / "rbac"
        self._kubectl_ok(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=lagpilot-dev-keda",
            "-f",
            str(rbac / "namespace.yaml"),
        )
        files = sorted(str(p) for p in rbac.glob("*.yaml") if p.name != "namespace.yaml")
        crds = sorted(str(p) for p in (self.config / "crd").glob("*.yaml"))
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=lagpilot-dev-keda"]
        for f in files + crds:
            args += ["-f", f]
        self._kubectl_ok(*args)
        # `kubectl wait --for=condition=Established` fails at once (".status.conditions accessor
        # error") while a CRD just created has no status yet: read the status until it says so
        wait_for(
            lambda: self._crd_established("scaledobjects.keda.sh"),
            "KEDA's CRDs Established",
            timeout=90.0,
            interval=0.5,
        )

    def _crd_established(self, name: str) -> bool:
        proc = self.kube.kubectl("get", f"crd/{name}", "-o", "json")
        if proc.returncode != 0:
            return False
        conditions = (json.loads(proc.stdout).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def _env(self, kubeconfig: Path) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "POD_NAMESPACE": NAMESPACE,
            "WATCH_NAMESPACE": "",
            "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
            "KEDA_HTTP_DEFAULT_TIMEOUT": "3000",
        }

    def _start_operator(self, kubeconfig: Path, timeout: float) -> None:
        proc = self.processes["operator"]
        if not proc.is_running():
            (self.dir / "custom-ca").mkdir(exist_ok=True)
            proc.argv = [
                str(self.bin / "keda-operator"),
                "--leader-elect=false",
                "--zap-log-level=info",
                "--zap-encoder=json",
                "--zap-time-encoding=rfc3339",
                f"--metrics-bind-address={LOOPBACK}:{self.ports.ensure('keda.operator-metrics', must_be_free=True)}",
                f"--health-probe-bind-address={LOOPBACK}:{self.ports.ensure('keda.operator-probe', must_be_free=True)}",
                f"--metrics-service-bind-address={LOOPBACK}:{self.ports.ensure('keda.operator-grpc', must_be_free=True)}",
                # certificates made here (what cert rotation would write to its Secret); nothing to patch
                "--enable-cert-rotation=false",
                f"--cert-dir={self.certs}",
                f"--ca-dir={self.dir / 'custom-ca'}",
            ]
            proc.env = self._env(kubeconfig)
            proc.start()
        wait_started(proc, lambda: http_ok(self.operator_probe_url()), "keda-operator /healthz", timeout)

    def metrics_apiserver_port(self) -> int:
        return self.ports.ensure("keda.metrics-apiserver")

    def _start_metrics_apiserver(self, kubeconfig: Path, timeout: float) -> None:
        proc = self.processes["metrics-apiserver"]
        if not proc.is_running():
            port = self.ports.ensure("keda.metrics-apiserver", must_be_free=True)
            c = self.certs
            proc.argv = [
                str(self.bin / "keda-metrics-apiserver"),
                f"--secure-port={port}",
                f"--bind-address={LOOPBACK}",
                f"--cert-dir={c}",
                f"--tls-cert-file={c / 'tls.crt'}",
                f"--tls-private-key-file={c / 'tls.key'}",
                f"--client-ca-file={c / 'ca.crt'}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--lister-kubeconfig={kubeconfig}",
                f"--metrics-service-address={LOOPBACK}:{self.ports.ensure('keda.operator-grpc')}",
                # its own Prometheus endpoint (it binds every address: the flag takes a port only)
                f"--port={self.ports.ensure('keda.metrics-apiserver-prom', must_be_free=True)}",
                "--zap-log-level=info",
                "--zap-encoder=json",
            ]
            proc.env = self._env(kubeconfig)
            proc.start()
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        ctx.check_hostname = False  # the leaf names 127.0.0.1 too; /healthz needs no client identity here
        url = f"https://{LOOPBACK}:{self.metrics_apiserver_port()}/healthz"
        wait_started(
            proc,
            lambda: http_ok(url, context=ctx) or _answers_401(url, ctx),
            "keda-metrics-apiserver /healthz",
            timeout,
        )

    def apiservice_manifest(self) -> dict[str, Any]:
        ca = base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()
        labels = {PART_LABEL[0]: PART_LABEL[1], "app.kubernetes.io/part-of": "keda-operator"}
        return {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": METRICS_SERVICE, "namespace": NAMESPACE, "labels": labels},
                    "spec": {"type": "ExternalName", "externalName": "localhost"},
                },
                {
                    "apiVersion": "apiregistration.k8s.io/v1",
                    "kind": "APIService",
                    "metadata": {"name": APISERVICE, "labels": labels},
                    "spec": {
                        "service": {
                            "name": METRICS_SERVICE,
                            "namespace": NAMESPACE,
                            "port": self.metrics_apiserver_port(),
                        },
                        "group": "external.metrics.k8s.io",
                        "version": "v1beta1",
                        "caBundle": ca,
                        "groupPriorityMinimum": 100,
                        "versionPriority": 100,
                    },
                },
            ],
        }

    def _register_apiservice(self) -> None:
        # a ClusterIP Service of the same name (e.g. KEDA's own manifests applied by hand) cannot
        # change type in place: delete it first
        cur = self.kube.kubectl(
            "get", "service", METRICS_SERVICE, "-n", NAMESPACE, "-o", "jsonpath={.spec.type}"
        )
        if cur.returncode == 0 and cur.stdout.strip() not in ("", "ExternalName"):
            self._kubectl_ok("delete", "service", METRICS_SERVICE, "-n", NAMESPACE)
        self._kubectl_ok(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=lagpilot-dev-keda",
            "-f",
            "-",
            input_text=json.dumps(self.apiservice_manifest()),
        )

    def stop(self) -> None:
        """Unregister the APIService (see the module's docstring), then stop both processes."""
        if self.kube.is_running():
            self.kube.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", "--wait=false")
        for comp in reversed(COMPONENTS):
            self.processes[comp].stop(grace=15.0)

    def info(self) -> dict[str, Any]:
        return {
            "keda_version": self.version,
            "keda_operator_log": str(self.processes["operator"].log_file),
            "keda_metrics_apiserver_log": str(self.processes["metrics-apiserver"].log_file),
            "metrics_apiserver": f"https://{LOOPBACK}:{self.metrics_apiserver_port()}",
            "apiservice": APISERVICE,
            "keda_bin": str(self.bin),
        }


def _answers_401(url: str, ctx: ssl.SSLContext) -> bool:
    """The metrics server's /healthz may ask for credentials (delegated authorization): any HTTP
    answer means it serves."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, context=ctx, timeout=2)  # loopback
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
