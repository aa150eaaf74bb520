"""A single-node Apache Kafka broker (KRaft, combined broker+controller) from Maven Central jars.

Why jars and not the release tarball: the machines reach package registries only. Maven Central has
`kafka_2.13` (broker, StorageTool) and `kafka-tools` (the CLI tools: consumer groups, perf tests).

Version pin: 4.3.1, the newest release for which Maven Central serves *both* `kafka_2.13` and
`kafka-tools` (4.2.2 and 4.4.0 have no `kafka-tools` artifact there). Its classes are Java 17
bytecode (major 61), so it runs on the machine's Java 17.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lagpilot_dev import maven
from lagpilot_dev.paths import LOOPBACK, Ports, Process, file_lock, tcp_open, wait_for

log = logging.getLogger("lagpilot_dev.kafka")

KAFKA_VERSION = "4.3.1"
# Kafka 4.x ships log4j-api/core 2.24.3 but no slf4j binding: without one the broker logs nothing.
# Kafka's own code logs through slf4j 1.7 (slf4j-api 1.7.36), hence log4j-slf4j-impl, not -slf4j2-.
LOG4J_VERSION = "2.24.3"

CONSUMER_GROUPS_CLASS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSUMER_PERF_CLASS = "org.apache.kafka.tools.ConsumerPerformance"
PRODUCER_PERF_CLASS = "org.apache.kafka.tools.ProducerPerformance"
TOPICS_CLASS = "org.apache.kafka.tools.TopicCommand"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"

BROKER_LOG4J = """\
status = warn
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.orgkafka.name = org.apache.kafka
logger.orgkafka.level = INFO
"""

# the CLI tools print their results on stdout; their own logging goes to stderr, warnings only
TOOLS_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka's `Uuid.randomUuid().toString()` makes it (22-char url-safe base64,
    never starting with '-'), so formatting needs no extra JVM start for `StorageTool random-uuid`."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USERNAME = "lagpilot"
SCRAM_ITERATIONS = 4096


OAUTH_LISTENER = "OAUTH"
OAUTH_VALIDATOR_CLASS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Kafka 4 refuses to fetch from a JWKS or token URL not listed in this JVM system property
OAUTH_ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


@dataclass(frozen=True)
class Listener:
    """A client listener beside PLAINTEXT and CONTROLLER, and what its SASL mechanism needs: the one
    writer of listener and JAAS properties (SCRAM, OAUTHBEARER, the pods' PLAINTEXT)."""

    name: str
    host: str
    port: int
    protocol: str  # PLAINTEXT or SASL_PLAINTEXT
    mechanism: str | None = None  # the only SASL mechanism it enables
    login_module: str | None = None  # its JAAS login module (`... required;`)
    mechanism_props: tuple[tuple[str, str], ...] = ()  # listener.name.<l>.<mechanism>.<key>
    broker_props: tuple[tuple[str, str], ...] = ()  # broker-wide keys it needs

    def properties(self) -> dict[str, str]:
        if self.mechanism is None:
            return dict(self.broker_props)
        prefix = f"listener.name.{self.name.lower()}"
        mech = self.mechanism.lower()
        return {
            **dict(self.broker_props),
            f"{prefix}.sasl.enabled.mechanisms": self.mechanism,
            f"{prefix}.{mech}.sasl.jaas.config": f"{self.login_module} required;",
            **{f"{prefix}.{mech}.{k}": v for k, v in self.mechanism_props},
        }


def scram_listener(port: int, name: str = "SASL_PLAINTEXT", host: str = LOOPBACK) -> Listener:
    """SASL_PLAINTEXT with SCRAM-SHA-512 (users in the KRaft metadata log)."""
    return Listener(
        name,
        host,
        port,
        "SASL_PLAINTEXT",
        SASL_MECHANISM,
        "org.apache.kafka.common.security.scram.ScramLoginModule",
        broker_props=(("sasl.enabled.mechanisms", SASL_MECHANISM),),
    )


def oauth_listener(
    port: int, settings: dict[str, str], name: str = OAUTH_LISTENER, host: str = LOOPBACK
) -> Listener:
    """SASL_PLAINTEXT with OAUTHBEARER: Kafka's validator against the provider's JWKS, issuer, audience."""
    return Listener(
        name,
        host,
        port,
        "SASL_PLAINTEXT",
        "OAUTHBEARER",
        OAUTH_LOGIN_MODULE,
        mechanism_props=(("sasl.server.callback.handler.class", OAUTH_VALIDATOR_CLASS),),
        broker_props=(
            ("sasl.oauthbearer.jwks.endpoint.url", settings["jwks_url"]),
            ("sasl.oauthbearer.expected.issuer", settings["issuer"]),
            ("sasl.oauthbearer.expected.audience", settings["audience"]),
        ),
    )


PODS_LISTENER = "PODS"
SASL_PODS_LISTENER = "SASL_PODS"
OAUTH_PODS_LISTENER = "OAUTH_PODS"


@dataclass(frozen=True)
class PodsListeners:
    """The broker's listeners on the real node's pod-bridge gateway (`host`): pods reach the host
    there, not at 127.0.0.1 (their own loopback). `plaintext`: PODS; `sasl`: SASL_PODS, SCRAM as the
    loopback SASL_PLAINTEXT listener (only with it); `oauth`: OAUTH_PODS, OAUTHBEARER as OAUTH (only
    when the broker has the provider's settings). Each advertises its own gateway address."""

    host: str
    plaintext: int
    sasl: int | None = None
    oauth: int | None = None


def client_listeners(
    sasl_port: int | None = None,
    pods: PodsListeners | None = None,
    oauth: tuple[int, dict[str, str]] | None = None,
) -> list[Listener]:
    """The client listeners beside PLAINTEXT and CONTROLLER, in the order the config lists them:
    SASL_PLAINTEXT (loopback), PODS, SASL_PODS (gateway), OAUTH (loopback), OAUTH_PODS (gateway).
    A bridge counterpart exists only with its loopback listener: the same mechanism, the same
    users or validator."""
    out: list[Listener] = []
    if sasl_port is not None:
        out.append(scram_listener(sasl_port))
    if pods is not None:
        out.append(Listener(PODS_LISTENER, pods.host, pods.plaintext, "PLAINTEXT"))
        if sasl_port is not None and pods.sasl is not None:
            out.append(scram_listener(pods.sasl, SASL_PODS_LISTENER, pods.host))
    if oauth is not None:
        out.append(oauth_listener(*oauth))
        if pods is not None and pods.oauth is not None:
            out.append(oauth_listener(pods.oauth, oauth[1], OAUTH_PODS_LISTENER, pods.host))
    return out


def listener_lines(
    broker_port: int,
    controller_port: int,
    sasl_port: int | None = None,
    pods: PodsListeners | None = None,
    oauth: tuple[int, dict[str, str]] | None = None,
) -> dict[str, str]:
    """`listeners`, `advertised.listeners` and `listener.security.protocol.map`: PLAINTEXT and
    CONTROLLER on loopback, then `client_listeners`; every client listener advertises the address
    it listens on (a client bootstrapped on one stays on it: its metadata names only that one)."""
    extra = client_listeners(sasl_port, pods, oauth)
    listeners = [f"PLAINTEXT://{LOOPBACK}:{broker_port}", f"CONTROLLER://{LOOPBACK}:{controller_port}"]
    advertised = [f"PLAINTEXT://{LOOPBACK}:{broker_port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    for x in extra:
        listeners.append(f"{x.name}://{x.host}:{x.port}")
        advertised.append(f"{x.name}://{x.host}:{x.port}")
        protocols.append(f"{x.name}:{x.protocol}")
    return {
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocols),
    }


def advertised_addresses(properties_text: str) -> dict[str, str]:
    """listener name -> host:port of `advertised.listeners` in a server.properties text ({} without)."""
    for line in properties_text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "advertised.listeners":
            return {
                name: address
                for name, _, address in (x.strip().partition("://") for x in value.split(","))
                if address
            }
    return {}


def server_properties(
    data_dir: Path,
    broker_port: int,
    controller_port: int,
    sasl_port: int | None = None,
    pods_listener: PodsListeners | None = None,
    oauth: tuple[int, dict[str, str]] | None = None,
) -> str:
    """The broker config: one combined node on loopback, replication factors 1, fast group joins.

    With `sasl_port`, a second client listener SASL_PLAINTEXT (SCRAM-SHA-512 only) on that loopback
    port; the inter-broker and controller listeners stay PLAINTEXT, so SASL is only what clients
    see. SCRAM users live in the KRaft metadata log (created by `KafkaPart.ensure_scram_user`).

    With `pods_listener` (PodsListeners), client listeners on the real node's pod-bridge gateway
    address, advertised as such: pods reach the host there, not at 127.0.0.1 (their own loopback).
    PODS (PLAINTEXT), and the counterparts of the SASL listeners: SASL_PODS (SCRAM, the same users)
    and OAUTH_PODS (OAUTHBEARER, the same validator). The loopback listeners, and so every client
    on loopback, are unchanged.

    With `oauth` (port, settings of `lagpilot_dev.oidc.oauth_broker_settings`), a client listener
    OAUTH (SASL_PLAINTEXT, OAUTHBEARER only) on that loopback port: Kafka's built-in
    `OAuthBearerValidatorCallbackHandler` checks each token's signature against the OIDC
    provider's JWKS, its issuer, audience and expiry (no token is accepted unseen)."""
    extra = client_listeners(sasl_port, pods_listener, oauth)
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        **listener_lines(broker_port, controller_port, sasl_port, pods_listener, oauth),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        # 50 offsets partitions by default: their creation on first group use is slow on 2 cores
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # consumers join at once instead of waiting 3 s for more members
        "group.initial.rebalance.delay.ms": "0",
        # tests and the operator must create topics explicitly: a typo must not create a topic
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "log.retention.hours": "-1",
        "log.segment.bytes": str(64 * 1024 * 1024),
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    for x in extra:
        props.update(x.properties())
    return "".join(f"{k}={v}\n" for k, v in props.items())


class KafkaPart:
    """Install (jars), format (once), start, stop, kill and inspect the local broker."""

    name = "kafka"

    def __init__(self, cache_dir: Path, state_dir: Path, version: str = KAFKA_VERSION) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.version = version
        self.home = self.cache_dir / f"kafka-{version}"
        self.libs = self.home / "libs"
        self.dir = self.state_dir / "kafka"
        self.data_dir = self.dir / "data"
        self.ports = Ports(self.state_dir)
        self.process = Process(
            name="kafka",
            argv=[],  # filled in by start(): the ports may change
            log_file=self.dir / "kafka.out",
            pid_file=self.dir / "kafka.pid",
            marker=f"-Dlagpilot.part=kafka:{self.dir}",
        )

    # ---- install -------------------------------------------------------------------------------
    def installed(self) -> bool:
        """True when the jars and logging configs are in the cache."""
        return (self.home / ".complete").exists()

    def install(self) -> None:
        """Fetch the broker, the CLI tools and a log4j2 slf4j binding (first run only)."""
        if self.installed():
            return
        with file_lock(self.cache_dir / f".kafka-{self.version}.lock"):
            if self.installed():
                return
            deps = [
                maven.Dep("org.apache.kafka", "kafka_2.13", self.version),
                maven.Dep("org.apache.kafka", "kafka-tools", self.version),
                maven.Dep("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
            ]
            maven.fetch(deps, self.libs, self.cache_dir, what=f"kafka {self.version}")
            (self.home / "config").mkdir(parents=True, exist_ok=True)
            (self.home / "config" / "log4j2.properties").write_text(BROKER_LOG4J)
            (self.home / "config" / "tools-log4j2.properties").write_text(TOOLS_LOG4J)
            (self.home / ".complete").write_text(self.version + "\n")

    # ---- run -----------------------------------------------------------------------------------
    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("Java is not installed (Kafka 4.x brokers need Java 17+)")
        return java

    def _classpath(self) -> str:
        return str(self.libs / "*")

    def bootstrap_servers(self) -> str:
        """host:port of the PLAINTEXT listener (stable across restarts)."""
        return f"{LOOPBACK}:{self.ports.ensure('kafka.broker')}"

    def sasl_bootstrap_servers(self) -> str:
        """host:port of the SASL_PLAINTEXT (SCRAM-SHA-512) listener (stable across restarts)."""
        return f"{LOOPBACK}:{self.ports.ensure('kafka.sasl')}"

    def sasl_credentials(self) -> dict[str, str]:
        """The dev SCRAM user: {"username", "password", "mechanism"}. The password is random per
        state dir, kept in a 0600 file next to the broker's config (never logged)."""
        path = self.dir / "sasl-credentials.json"
        with file_lock(self.dir / "sasl-credentials.lock"):
            if path.exists():
                return json.loads(path.read_text())
            creds = {
                "username": SASL_USERNAME,
                "password": secrets.token_urlsafe(18),
                "mechanism": SASL_MECHANISM,
            }
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(creds))
            tmp.chmod(0o600)
            tmp.replace(path)
            return creds

    @staticmethod
    def pods_listener_host() -> str | None:
        """The real node's pod-bridge gateway address when it exists on this host (the node part
        creates the bridge at its start), else None: the broker then gets no PODS listener."""
        from lagpilot_dev.node import pod_gateway_on_host

        return pod_gateway_on_host()

    def _advertised(self, listener: str) -> str | None:
        """host:port the running broker's config advertises for `listener`, None without it."""
        props = self.dir / "server.properties"
        if not props.exists():
            return None
        return advertised_addresses(props.read_text()).get(listener)

    def pods_bootstrap_servers(self) -> str | None:
        """host:port of the PODS listener for pods on the real node, when the running broker has it
        (a broker started before the node's bridge existed needs one restart to get it)."""
        return self._advertised(PODS_LISTENER)

    def sasl_pods_bootstrap_servers(self) -> str | None:
        """host:port of SASL_PODS (SCRAM-SHA-512, the dev user of `sasl_credentials`) on the bridge
        gateway, for pods on the real node, when the running broker has it (one restart after the
        node's bridge, or after this listener's addition, gives it)."""
        return self._advertised(SASL_PODS_LISTENER)

    def oauth_pods_bootstrap_servers(self) -> str | None:
        """host:port of OAUTH_PODS (OAUTHBEARER, the oidc part's tokens) on the bridge gateway, when
        the running broker has it (the oidc part up and the bridge there at the broker's start)."""
        return self._advertised(OAUTH_PODS_LISTENER)

    def sasl_listener_configured(self) -> bool:
        """True when the running broker's config has the SASL listener (a broker started before
        the listener existed needs one restart to get it)."""
        props = self.dir / "server.properties"
        return props.exists() and "SASL_PLAINTEXT://" in props.read_text()

    def oauth_settings(self) -> dict[str, str] | None:
        """The OIDC provider's issuer/audience/JWKS when the oidc part of this state dir is up
        (`lagpilot dev up --parts oidc,kafka` starts it first), else None: no OAUTH listener."""
        from lagpilot_dev.oidc import oauth_broker_settings

        return oauth_broker_settings(self.state_dir, self.cache_dir)

    def oauth_listener_configured(self) -> bool:
        """True when the running broker's config has the OAUTHBEARER listener (it gets one when the
        oidc part was up at the broker's start; a running broker needs one restart to get it)."""
        props = self.dir / "server.properties"
        return props.exists() and f"{OAUTH_LISTENER}://" in props.read_text()

    def oauth_bootstrap_servers(self) -> str | None:
        """host:port of the OAUTH (SASL_PLAINTEXT, OAUTHBEARER) listener, when the broker has it."""
        return f"{LOOPBACK}:{self.ports.ensure('kafka.oauth')}" if self.oauth_listener_configured() else None

    def ensure_scram_user(self, timeout: float = 60.0) -> None:
        """Create (or update) the dev SCRAM-SHA-512 user through the PLAINTEXT listener
        (AlterUserScramCredentials; no authorizer is configured). Idempotent; skipped when the
        marker says this password is already stored in the metadata log."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        creds = self.sasl_credentials()
        marker = self.dir / "sasl-user.done"
        tag = f"{creds['username']}:{len(creds['password'])}:{hash_password_tag(creds['password'])}"
        if marker.exists() and marker.read_text() == tag:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers(), "socket.timeout.ms": 10000})
        upsert = UserScramCredentialUpsertion(
            creds["username"],
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            creds["password"].encode(),
        )
        for fut in admin.alter_user_scram_credentials([upsert], request_timeout=timeout).values():
            fut.result(timeout=timeout)
        marker.write_text(tag)
        log.info("kafka SCRAM user ready", extra={"username": creds["username"], "mechanism": SASL_MECHANISM})

    def _format_if_needed(self, props_file: Path) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            self._java(),
            "-Xmx256m",
            f"-Dlog4j2.configurationFile={self.home / 'config' / 'tools-log4j2.properties'}",
            "-cp",
            self._classpath(),
            STORAGE_TOOL_CLASS,
            "format",
            "-t",
            new_cluster_id(),
            "-c",
            str(props_file),
            "--ignore-formatted",
        ]
        log.info("formatting kafka storage", extra={"data_dir": str(self.data_dir)})
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"kafka StorageTool format failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )

    def is_running(self) -> bool:
        return self.process.is_running()

    def start(self, timeout: float = 180.0) -> None:
        """Start the broker on its persisted ports and data dir; wait until an AdminClient lists topics."""
        self.install()
        with file_lock(self.dir / "start.lock"):
            if not self.process.is_running():
                # a port taken by a stranger while we were down: move rather than fail (logged)
                broker_port = self.ports.ensure("kafka.broker", must_be_free=True)
                controller_port = self.ports.ensure("kafka.controller", must_be_free=True)
                sasl_port = self.ports.ensure("kafka.sasl", must_be_free=True)
                self.dir.mkdir(parents=True, exist_ok=True)
                props_file = self.dir / "server.properties"
                pods_host = self.pods_listener_host()
                oauth_settings = self.oauth_settings()
                pods = (
                    PodsListeners(
                        pods_host,
                        self.ports.ensure("kafka.pods", must_be_free=True),
                        sasl=self.ports.ensure("kafka.sasl-pods", must_be_free=True),
                        oauth=self.ports.ensure("kafka.oauth-pods", must_be_free=True)
                        if oauth_settings
                        else None,
                    )
                    if pods_host
                    else None
                )
                oauth = (
                    (self.ports.ensure("kafka.oauth", must_be_free=True), oauth_settings)
                    if oauth_settings
                    else None
                )
                props_file.write_text(
                    server_properties(self.data_dir, broker_port, controller_port, sasl_port, pods, oauth)
                )
                self._format_if_needed(props_file)
                (self.dir / "logs").mkdir(exist_ok=True)
                self.process.argv = [
                    self._java(),
                    "-Xms256m",
                    "-Xmx512m",
                    "-XX:+UseG1GC",
                    "-XX:MaxGCPauseMillis=20",
                    "-Djava.awt.headless=true",
                    self.process.marker,
                    *(
                        [
                            f"-D{OAUTH_ALLOWED_URLS_PROPERTY}={oauth_settings['jwks_url']},"
                            f"{oauth_settings['token_endpoint_url']}"
                        ]
                        if oauth_settings
                        else []
                    ),
                    f"-Dkafka.logs.dir={self.dir / 'logs'}",
                    f"-Dlog4j2.configurationFile={self.home / 'config' / 'log4j2.properties'}",
                    "-cp",
                    self._classpath(),
                    "kafka.Kafka",
                    str(props_file),
                ]
                self.process.start()
        self.wait_ready(timeout)
        if self.sasl_listener_configured():
            self.ensure_scram_user()

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the broker answers a metadata request (AdminClient.list_topics)."""
        from confluent_kafka.admin import AdminClient

        bootstrap = self.bootstrap_servers()

        host, port = bootstrap.rsplit(":", 1)

        def ready() -> bool:
            # TCP first: librdkafka logs every refused connection to stderr, which buries real errors
            if not tcp_open(int(port), host):
                return False
            if self.sasl_listener_configured() and not tcp_open(
                int(self.sasl_bootstrap_servers().rsplit(":", 1)[1]), host
            ):
                return False
            admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
            md = admin.list_topics(timeout=10)
            # after a crash the broker recovers its logs before it leads their partitions again:
            # ready means every existing partition has a leader (single node: this broker)
            leaderless = [
                f"{t}/{p}" for t, tm in md.topics.items() for p, pm in tm.partitions.items() if pm.leader < 0
            ]
            return bool(md.brokers) and not leaderless

        try:
            wait_for(
                ready,
                f"kafka broker at {bootstrap}",
                timeout=timeout,
                interval=1.0,
                alive=self.process.is_running,
            )
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(
                f"{exc}\n--- {self.process.log_file} (tail) ---\n{self.process.log_tail()}\n"
                f"--- server.log (tail) ---\n{self._server_log_tail()}"
            ) from exc

    def _server_log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(
                (self.dir / "logs" / "server.log").read_text(errors="replace").splitlines()[-lines:]
            )
        except FileNotFoundError:
            return "(no server.log)"

    def stop(self) -> None:
        """Controlled shutdown (SIGTERM), SIGKILL after 60 s."""
        self.process.stop(grace=60.0)

    def kill(self) -> None:
        """SIGKILL the broker (fault tests); `start()` brings it back on the same data dir and ports."""
        self.process.kill()

    def purge(self) -> None:
        """Stop and delete the broker's data, logs and config (the jar cache stays)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def info(self) -> dict[str, object]:
        return {
            "bootstrap_servers": self.bootstrap_servers(),
            # the password stays in kafka/sasl-credentials.json (KafkaPart.sasl_credentials())
            "sasl_bootstrap_servers": self.sasl_bootstrap_servers()
            if self.sasl_listener_configured()
            else None,
            "sasl_mechanism": SASL_MECHANISM,
            # SASL_PLAINTEXT + OAUTHBEARER, tokens of the oidc part; None unless it was up at start
            "oauth_bootstrap_servers": self.oauth_bootstrap_servers(),
            # for pods on the real node (lagpilot_dev.node); None until the broker has the listener
            "pods_bootstrap_servers": self.pods_bootstrap_servers(),
            # SCRAM and OAUTHBEARER for pods on the real node: the bridge gateway's counterparts
            "sasl_pods_bootstrap_servers": self.sasl_pods_bootstrap_servers(),
            "oauth_pods_bootstrap_servers": self.oauth_pods_bootstrap_servers(),
            "sasl_username": SASL_USERNAME,
            "kafka_home": str(self.libs),
            "kafka_version": self.version,
            "kafka_log": str(self.dir / "logs" / "server.log"),
            "kafka_data_dir": str(self.data_dir),
        }

    # ---- Kafka's own CLI tools ------------------------------------------------------------------
    def run_cli_tool(
        self,
        tool_class: str,
        args: Sequence[str],
        timeout: float = 300.0,
        heap: str = "256m",
        jvm_props: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's CLI tools (e.g. CONSUMER_GROUPS_CLASS) from the cached jars.

        Returns the CompletedProcess (text mode); the caller checks `returncode`.
        """
        self.install()
        return run_cli_tool(
            self.libs,
            self.home / "config" / "tools-log4j2.properties",
            tool_class,
            args,
            timeout=timeout,
            heap=heap,
            jvm_props=jvm_props,
        )

    def consumer_groups(
        self, args: Sequence[str], timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """`kafka-consumer-groups.sh --bootstrap-server <ours> <args>`."""
        return self.run_cli_tool(
            CONSUMER_GROUPS_CLASS, ["--bootstrap-server", self.bootstrap_servers(), *args], timeout=timeout
        )


def oauth_client_properties(
    token_endpoint_url: str, client_id: str, client_secret: str, scope: str | None = None
) -> str:
    """A Kafka Java client config (`--command-config`) for SASL_PLAINTEXT + OAUTHBEARER with OIDC
    client credentials (kafka-clients' own login handler fetches and refreshes the token). Holds
    the client secret: write it to a 0600 file."""

    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    jaas = f"{OAUTH_LOGIN_MODULE} required clientId={q(client_id)} clientSecret={q(client_secret)}"
    if scope:
        jaas += f" scope={q(scope)}"
    return (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        f"sasl.oauthbearer.token.endpoint.url={token_endpoint_url}\n"
        # a properties file reads a backslash as an escape: double the JAAS quoting's ones
        "sasl.jaas.config=" + (jaas + ";").replace("\\", "\\\\") + "\n"
    )


def hash_password_tag(password: str) -> str:
    """A short non-reversible tag of the password for the 'user created' marker."""
    import hashlib

    return hashlib.sha256(password.encode()).hexdigest()[:16]


def run_cli_tool(
    libs: Path,
    log4j_config: Path | None,
    tool_class: str,
    args: Sequence[str],
    timeout: float = 300.0,
    heap: str = "256m",
    jvm_props: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka CLI tool class with the jars in `libs` (usable from `StackInfo.kafka_home`).
    `jvm_props`: extra `-D` system properties (e.g. OAUTH_ALLOWED_URLS_PROPERTY for a client that
    fetches OIDC tokens)."""
    java = shutil.which("java") or "java"
    argv = [java, f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
    argv += [f"-D{k}={v}" for k, v in (jvm_props or {}).items()]
    if log4j_config is not None:
        argv.append(f"-Dlog4j2.configurationFile={log4j_config}")
    argv += ["-cp", str(Path(libs) / "*"), tool_class, *args]
    env = dict(os.environ)
    env.pop("KAFKA_OPTS", None)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env)


_HEADER = re.compile(r"^\s*GROUP\s+TOPIC\s+PARTITION\b")


def parse_consumer_groups_describe(text: str) -> list[dict[str, str]]:
    """Parse the table `kafka-consumer-groups --describe --group G` prints into one dict per row.

    Keys are the header words (GROUP, TOPIC, PARTITION, CURRENT-OFFSET, LOG-END-OFFSET, LAG,
    CONSUMER-ID, HOST, CLIENT-ID); a "-" cell stays "-". Other lines (warnings, blank lines,
    "Consumer group 'g' has no active members.") are skipped.
    """
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if _HEADER.match(line):
            header = line.split()
            continue
        if header is None or not line.strip():
            continue
        cells = line.split()
        if len(cells) < len(header):
            continue
        # CLIENT-ID is last and the only column that may contain spaces: join the overflow into it
        if len(cells) > len(header):
            cells = [*cells[: len(header) - 1], " ".join(cells[len(header) - 1 :])]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows
