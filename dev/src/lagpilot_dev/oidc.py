"""A real OIDC provider for the dev stack: Keycloak (the maintained server, not one written here).

Why Keycloak: it is the token endpoint managed Kafka services and Strimzi's OAuth listener are
tested against, it speaks the OAuth 2.0 client-credentials grant and publishes its signing keys as
a JWKS, which is all Kafka's built-in `OAuthBearerValidatorCallbackHandler` needs.

Where it comes from: Maven Central's `org.keycloak:keycloak-quarkus-dist` zip (the machines reach
package registries only), cached by version under `<cache>/keycloak-<version>/`. Its first start
(`kc.sh start-dev`) writes into the distribution (the Quarkus build output under `lib/quarkus`, the
H2 database under `data/`), so every state dir gets its own copy (`<state>/oidc/keycloak`) and the
cache stays untouched. That copy is taken from a baked distribution, `<cache>/keycloak-<version>/baked`:
the zip unpacked and started once in dev mode with the same build-time options (so the Quarkus
augmentation is done and persisted in `lib/quarkus`) and stopped again, its H2 database initialised
(schema migrated, master realm only). A state dir's start then neither re-augments nor migrates the
schema: it imports the realm and serves (the cold start of a private copy took 397-570 s on the
loaded 2-core machine, most of it the augmentation and the schema migration).

What it serves: one realm `lagpilot` imported at start from a JSON file (`--import-realm`), with
one confidential client (`lagpilot-kafka`, client-credentials grant only) whose access tokens carry
the audience `kafka` (an audience mapper) and live `TOKEN_LIFESPAN_S` seconds. The client secret is
random per state dir, kept in a 0600 file (`client_credentials()`), never logged. The issuer is
pinned with `--hostname` so it does not depend on how a client reaches the server.

Where it serves: on the real node's pod-bridge gateway when the node made it (pods fetch their
tokens there; their 127.0.0.1 is their own), else on loopback; chosen at start and kept in the
state dir (`http_host`), so the issuer, the token endpoint and the JWKS URL are one address for
the host's clients, the broker's validator and the pods alike.

The Kafka part adds an OAUTHBEARER listener when this part is up in the same state dir
(`oauth_broker_settings`); see `lagpilot_dev.kafka.server_properties`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from lagpilot_dev import maven
from lagpilot_dev.paths import LOOPBACK, Ports, Process, file_lock, tcp_open, wait_for

log = logging.getLogger("lagpilot_dev.oidc")

KEYCLOAK_VERSION = "26.7.3"
REALM = "lagpilot"
CLIENT_ID = "lagpilot-kafka"
AUDIENCE = "kafka"
OTHER_AUDIENCE_CLIENT_ID = "lagpilot-other-audience"  # its tokens are for another audience
OTHER_AUDIENCE = "another-service"
TOKEN_LIFESPAN_S = 300
MIN_JAVA = 17  # Keycloak 26.7.3 starts and serves on the machine's Java 17 (seen)


def realm_json(client_secret: str) -> dict[str, Any]:
    """The realm Keycloak imports at its first start: the confidential client-credentials client
    whose tokens the broker accepts, and one (`OTHER_AUDIENCE_CLIENT_ID`, the same secret) whose
    tokens carry another audience, so the broker refuses a token the endpoint issued (a test tells
    that refusal from the endpoint's own)."""
    return {
        "realm": REALM,
        "enabled": True,
        "accessTokenLifespan": TOKEN_LIFESPAN_S,
        "clients": [
            _client(CLIENT_ID, client_secret, AUDIENCE),
            _client(OTHER_AUDIENCE_CLIENT_ID, client_secret, OTHER_AUDIENCE),
        ],
    }


def _client(client_id: str, client_secret: str, audience: str) -> dict[str, Any]:
    return {
        "clientId": client_id,
        "enabled": True,
        "protocol": "openid-connect",
        "publicClient": False,
        "clientAuthenticatorType": "client-secret",
        "secret": client_secret,
        "serviceAccountsEnabled": True,  # the client-credentials grant
        "standardFlowEnabled": False,
        "implicitFlowEnabled": False,
        "directAccessGrantsEnabled": False,
        "protocolMappers": [
            {
                "name": f"audience-{audience}",
                "protocol": "openid-connect",
                "protocolMapper": "oidc-audience-mapper",
                "config": {
                    "included.custom.audience": audience,
                    "access.token.claim": "true",
                    "id.token.claim": "false",
                },
            }
        ],
    }


def _java_major(java: str) -> int:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r'version "(\d+)', out)
    return int(m.group(1)) if m else 0


def find_java_home(minimum: int = MIN_JAVA) -> str:
    """A JDK of at least `minimum`: $LAGPILOT_OIDC_JAVA_HOME, the default `java`, or one under
    /usr/lib/jvm (the machines have Java 17 as default and a Temurin 25 beside it)."""
    env = os.environ.get("LAGPILOT_OIDC_JAVA_HOME")
    candidates = [Path(env)] if env else []
    default = shutil.which("java")
    if default:
        candidates.append(Path(os.path.realpath(default)).parent.parent)
    candidates += sorted(Path("/usr/lib/jvm").glob("*"), reverse=True)
    for home in candidates:
        java = home / "bin" / "java"
        if java.exists() and _java_major(str(java)) >= minimum:
            return str(home)
    raise RuntimeError(
        f"Keycloak {KEYCLOAK_VERSION} needs Java {minimum}+; none found "
        "(set LAGPILOT_OIDC_JAVA_HOME to a JDK home)"
    )


class OidcPart:
    """Install (the Keycloak zip), start, stop and describe the local OIDC provider."""

    name = "oidc"

    def __init__(self, cache_dir: Path, state_dir: Path, version: str = KEYCLOAK_VERSION) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.version = version
        self.cache = self.cache_dir / f"keycloak-{version}"
        self.zip = self.cache / f"keycloak-quarkus-dist-{version}.zip"
        self.dir = self.state_dir / "oidc"
        self.home = self.dir / "keycloak"
        self.ports = Ports(self.state_dir)
        self.process = Process(
            name="oidc",
            argv=[],  # filled in by start()
            log_file=self.dir / "keycloak.out",
            pid_file=self.dir / "keycloak.pid",
            marker=f"-Dlagpilot.part=oidc:{self.dir}",
        )

    # ---- install -------------------------------------------------------------------------------
    def installed(self) -> bool:
        return (self.cache / ".complete").exists() and (self.baked / ".complete").exists()

    @property
    def baked(self) -> Path:
        """The cached, already augmented and initialised distribution every state dir copies."""
        return self.cache / "baked"

    def install(self) -> None:
        """Fetch the distribution zip from Maven Central into the cache and bake it (first run only)."""
        if self.installed():
            return
        with file_lock(self.cache_dir / f".keycloak-{self.version}.lock"):
            if self.installed():
                return
            if not (self.cache / ".complete").exists():
                maven.fetch_artifact(
                    maven.Dep("org.keycloak", "keycloak-quarkus-dist", self.version),
                    "zip",
                    self.cache,
                    self.cache_dir,
                    what=f"keycloak {self.version}",
                )
                with zipfile.ZipFile(self.zip) as zf:  # a broken download fails here, not at start
                    bad = zf.testzip()
                if bad is not None:
                    raise RuntimeError(f"{self.zip}: corrupt member {bad}")
                (self.cache / ".complete").write_text(self.version + "\n")
            self._bake()

    def _extract(self, dest: Path) -> None:
        """The zip's distribution unpacked as `dest` (a fresh directory)."""
        tmp = dest.parent / f".{dest.name}.unpack"
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(self.zip) as zf:
            zf.extractall(tmp)
        (top,) = list(tmp.iterdir())
        for script in (top / "bin").glob("*.sh"):
            script.chmod(0o755)
        top.replace(dest)
        shutil.rmtree(tmp, ignore_errors=True)

    def _bake(self) -> None:
        """Unpack the zip and start it once in dev mode with the build-time options every state
        dir's start uses (`_argv`), so Keycloak augments itself (lib/quarkus) and creates its H2
        schema and master realm; stop it gracefully and keep that home as `baked`. A later
        `start-dev` with the same build-time options finds the persisted build and starts without
        re-augmenting. Called under the install lock."""
        work = self.cache / ".bake"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        home = work / "keycloak"
        self._extract(home)
        ports = Ports(work)
        port = ports.ensure("oidc.http", must_be_free=True)
        mgmt = ports.ensure("oidc.management", must_be_free=True)
        marker = f"-Dlagpilot.part=oidc-bake:{work}"
        proc = Process(
            name="oidc-bake",
            argv=self._argv(home, port, mgmt, marker=marker, import_realm=False),
            log_file=work / "bake.out",
            pid_file=work / "bake.pid",
            marker=marker,
        )
        proc.env, proc.cwd = self._env(), home
        master = f"http://{LOOPBACK}:{port}/realms/master/.well-known/openid-configuration"

        def ready() -> bool:
            try:
                with urllib.request.urlopen(master, timeout=10) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        log.info(
            "baking keycloak (one augmentation and schema creation per version)",
            extra={"part": "oidc", "version": self.version},
        )
        proc.start()
        try:
            wait_for(
                ready,
                f"keycloak {self.version} bake at {master}",
                timeout=1800.0,
                interval=2.0,
                alive=proc.is_running,
            )
        except (RuntimeError, TimeoutError) as exc:
            proc.stop(grace=30.0)
            raise RuntimeError(f"{exc}\n--- {proc.log_file} (tail) ---\n{proc.log_tail()}") from exc
        # a graceful stop closes the H2 database cleanly; the copies start from it
        proc.stop(grace=300.0)
        shutil.rmtree(home / "data" / "tmp", ignore_errors=True)
        (home / ".complete").write_text(self.version + "\n")
        shutil.rmtree(self.baked, ignore_errors=True)
        home.replace(self.baked)
        (self.baked / ".complete").write_text(self.version + "\n")
        shutil.rmtree(work, ignore_errors=True)

    def _unpack(self) -> None:
        """This state dir's own copy of the baked distribution (Keycloak writes into its home)."""
        if (self.home / ".complete").exists():
            return
        shutil.rmtree(self.home, ignore_errors=True)
        tmp = self.dir / ".unpack"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(self.baked, tmp, symlinks=True)
        tmp.replace(self.home)

    # ---- addresses and credentials -------------------------------------------------------------
    def http_port(self) -> int:
        return self.ports.ensure("oidc.http")

    def http_host(self) -> str:
        """The address Keycloak serves on, chosen at its start (`serve_host`) and kept in the state
        dir: the pod-bridge gateway when the real node made it, else loopback."""
        try:
            return (self.dir / "http-host").read_text().strip() or LOOPBACK
        except FileNotFoundError:
            return LOOPBACK

    @staticmethod
    def serve_host() -> str:
        """Where a starting Keycloak listens: the real node's pod-bridge gateway when it exists on
        this host (pods fetch tokens there: their 127.0.0.1 is their own), else loopback."""
        from lagpilot_dev.node import pod_gateway_on_host

        return pod_gateway_on_host() or LOOPBACK

    def base_url(self) -> str:
        return f"http://{self.http_host()}:{self.http_port()}"

    def issuer(self) -> str:
        return f"{self.base_url()}/realms/{REALM}"

    def token_endpoint_url(self) -> str:
        return f"{self.issuer()}/protocol/openid-connect/token"

    def jwks_url(self) -> str:
        return f"{self.issuer()}/protocol/openid-connect/certs"

    def client_credentials(self) -> dict[str, str]:
        """{"clientId", "clientSecret"} of the realm's client: random secret per state dir, 0600."""
        path = self.dir / "client-credentials.json"
        with file_lock(self.dir / "client-credentials.lock"):
            if path.exists():
                return dict(json.loads(path.read_text()))
            creds = {"clientId": CLIENT_ID, "clientSecret": secrets.token_urlsafe(24)}
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(creds))
            tmp.chmod(0o600)
            tmp.replace(path)
            return creds

    def fetch_token(
        self, client_id: str | None = None, client_secret: str | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """One client-credentials grant at the token endpoint (the answer's JSON); raises
        urllib.error.HTTPError when the server refuses the client (401 for a wrong secret)."""
        creds = self.client_credentials()
        body = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": client_id or creds["clientId"],
                "client_secret": client_secret if client_secret is not None else creds["clientSecret"],
            }
        ).encode()
        req = urllib.request.Request(
            self.token_endpoint_url(),
            data=body,
            method="POST",  # our own token endpoint (loopback or the pod bridge)
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return dict(json.loads(resp.read()))

    # ---- run -----------------------------------------------------------------------------------
    def is_running(self) -> bool:
        return self.process.is_running()

    def start(self, timeout: float = 600.0) -> None:
        """Start Keycloak (dev mode, H2 file database in this state dir) on its persisted port;
        wait until the realm's discovery document answers and a client-credentials grant succeeds."""
        self.install()
        with file_lock(self.dir / "start.lock"):
            if not self.process.is_running():
                port = self.ports.ensure("oidc.http", must_be_free=True)
                mgmt = self.ports.ensure("oidc.management", must_be_free=True)
                host = self.serve_host()
                self.dir.mkdir(parents=True, exist_ok=True)
                (self.dir / "http-host").write_text(host + "\n")
                self._unpack()
                imports = self.home / "data" / "import"
                imports.mkdir(parents=True, exist_ok=True)
                realm = imports / f"{REALM}-realm.json"
                realm.write_text(json.dumps(realm_json(self.client_credentials()["clientSecret"])))
                realm.chmod(0o600)
                self.process.env = self._env()
                self.process.cwd = self.home
                self.process.argv = self._argv(
                    self.home, port, mgmt, marker=self.process.marker, import_realm=True, host=host
                )
                self.process.start()
        self.wait_ready(timeout)

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "JAVA_HOME": find_java_home(),
                # kc.sh's default heap is 70% of the machine's RAM: cap it like the other parts
                "JAVA_OPTS_KC_HEAP": "-Xms128m -Xmx512m",
            }
        )
        return env

    @staticmethod
    def _argv(
        home: Path, port: int, mgmt: int, marker: str, import_realm: bool, host: str = LOOPBACK
    ) -> list[str]:
        """`kc.sh start-dev` on `host`'s port (loopback, or the pod-bridge gateway: `serve_host`),
        the issuer pinned to that address. The bake and every state dir's start use the same
        build-time options (`--health-enabled`, `--cache`): a difference would make the start
        re-augment (slow, and it writes into the copy's lib/quarkus)."""
        # kc.sh passes -D arguments to the JVM: the marker is in the command line of kc.sh and,
        # after its re-exec, of the java process (pid file stays right)
        return [
            str(home / "bin" / "kc.sh"),
            marker,
            "start-dev",
            *(["--import-realm"] if import_realm else []),
            f"--http-host={host}",
            f"--http-port={port}",
            f"--http-management-port={mgmt}",
            f"--hostname=http://{host}:{port}",
            "--health-enabled=true",
            "--cache=local",
            "--log-level=info",
        ]

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Wait until the realm's discovery document names our issuer and a grant succeeds."""

        def ready() -> bool:
            if not tcp_open(self.http_port(), self.http_host()):
                return False
            try:
                with urllib.request.urlopen(
                    f"{self.issuer()}/.well-known/openid-configuration", timeout=10
                ) as r:
                    doc = json.loads(r.read())
            except (urllib.error.URLError, OSError, ValueError):
                return False
            if doc.get("issuer") != self.issuer():
                raise RuntimeError(
                    f"keycloak announces issuer {doc.get('issuer')!r}, expected {self.issuer()!r}"
                )
            try:
                return bool(self.fetch_token().get("access_token"))
            except (urllib.error.URLError, OSError, ValueError):
                return False

        try:
            wait_for(
                ready,
                f"keycloak at {self.base_url()}",
                timeout=timeout,
                interval=2.0,
                alive=self.process.is_running,
            )
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(
                f"{exc}\n--- {self.process.log_file} (tail) ---\n{self.process.log_tail()}"
            ) from exc

    def stop(self) -> None:
        self.process.stop(grace=30.0)

    def purge(self) -> None:
        """Stop and delete this state dir's Keycloak (its copy, database, realm, secret)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def info(self) -> dict[str, Any]:
        # the client secret stays in oidc/client-credentials.json (OidcPart.client_credentials())
        return {
            "oidc_issuer": self.issuer(),
            "oidc_token_endpoint_url": self.token_endpoint_url(),
            "oidc_jwks_url": self.jwks_url(),
            "oidc_client_id": CLIENT_ID,
            "oidc_audience": AUDIENCE,
            "keycloak_version": self.version,
            "keycloak_log": str(self.process.log_file),
        }


def oauth_broker_settings(state_dir: Path, cache_dir: Path) -> dict[str, str] | None:
    """What the broker in `state_dir` needs to validate this stack's tokens (issuer, audience, JWKS
    URL), when the oidc part of the same state dir is running; else None (no OAUTHBEARER listener)."""
    part = OidcPart(cache_dir, state_dir)
    if not part.is_running():
        return None
    return {
        "issuer": part.issuer(),
        "audience": AUDIENCE,
        "jwks_url": part.jwks_url(),
        "token_endpoint_url": part.token_endpoint_url(),
    }
