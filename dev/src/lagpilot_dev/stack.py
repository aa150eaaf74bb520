"""The local stack: one object over all real parts (see docs/CONTRACTS.md, "Dev stack").

Every part has the same small shape (`Part` below), so the stack can install, start, stop and
describe them without knowing what they are:

    install()     fetch/build what is missing into the cache (idempotent, fast when cached)
    start()       start on the persisted ports and data dir if not running; wait until healthy
    stop()        graceful stop
    is_running()  True when the part's process is alive (Spark: when its jars are cached)
    info()        dict of connection details (keys below)

Parts are imported lazily: `lagpilot_dev.kube` is only imported when the kube part is asked for.

Several pytest sessions on one machine may share one stack. They take *leases*
(`acquire`/`release`); a part started by a test session is stopped when the last lease is released,
a part started by a person (`lagpilot dev up`) is left running.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lagpilot_dev import gocache
from lagpilot_dev.paths import cache_dir as default_cache_dir
from lagpilot_dev.paths import file_lock, pid_alive
from lagpilot_dev.paths import state_dir as default_state_dir

log = logging.getLogger("lagpilot_dev.stack")

ALL_PARTS: tuple[str, ...] = (
    "kafka",
    "kube",
    "postgres",
    "spark",
    "prometheus",
    "node",
    "netpol",
    "keda",
    "oidc",
)
# prometheus, node, netpol (the node's NetworkPolicy agent), keda and oidc only when asked for
DEFAULT_PARTS: tuple[str, ...] = ("kafka", "kube", "postgres")
# stop in this order: dependants first (the node's policy agent serves the node; the node and KEDA run
# on the kube control plane; the broker fetches the OIDC provider's keys)
_STOP_ORDER: tuple[str, ...] = (
    "keda",
    "netpol",
    "node",
    "prometheus",
    "spark",
    "postgres",
    "kube",
    "kafka",
    "oidc",
)
# parts that must be up before the others start: the broker gets its OAUTHBEARER listener only
# when the oidc part of its state dir is up at its start
_FIRST: tuple[str, ...] = ("oidc",)


class Part(Protocol):
    """The shape every part implements (KafkaPart, PostgresPart, SparkPart, kube.KubePart)."""

    def install(self) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def is_running(self) -> bool: ...
    def info(self) -> dict[str, Any]: ...


UP_STATUS_GRACE_S = 60.0


@dataclass
class StackInfo:
    """Connection details of the running parts; None/[] for a part that is not up."""

    bootstrap_servers: str | None = None
    kubeconfig: str | None = None
    postgres_dsn: str | None = None
    spark_jars: list[str] = field(default_factory=list)
    kafka_home: str | None = None
    kubectl: str | None = None
    kube_server: str | None = None
    cache_dir: str = ""
    state_dir: str = ""
    running: dict[str, bool] = field(default_factory=dict)
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)  # full info() of each running part

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=None, sort_keys=True)

    def shell_exports(self) -> list[str]:
        """`export ...` lines a person can paste (only for parts that are up)."""
        lines = []
        if self.kubeconfig:
            lines.append(f"export KUBECONFIG={self.kubeconfig}")
        if self.bootstrap_servers:
            lines.append(f"export LAGPILOT_BOOTSTRAP_SERVERS={self.bootstrap_servers}")
        if self.postgres_dsn:
            lines.append(f"export LAGPILOT_POSTGRES_DSN='{self.postgres_dsn}'")
        return lines


def parse_parts(text: str | Iterable[str] | None, default: Sequence[str] = DEFAULT_PARTS) -> tuple[str, ...]:
    """ "kafka,postgres" → ("kafka", "postgres"), in canonical order, validated; "all" → every part."""
    if text is None:
        return tuple(default)
    items = [p.strip().lower() for p in (text.split(",") if isinstance(text, str) else text)]
    items = [p for p in items if p]
    if items == ["all"]:
        return ALL_PARTS
    unknown = sorted(set(items) - set(ALL_PARTS))
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(ALL_PARTS)}")
    return tuple(p for p in ALL_PARTS if p in items)


class Stack:
    """Install, start, describe and stop the local real parts."""

    def __init__(self, cache_dir: Path | str | None = None, state_dir: Path | str | None = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir(self.cache_dir)
        self._parts: dict[str, Part] = {}

    # ---- parts ---------------------------------------------------------------------------------
    def part(self, name: str) -> Part:
        """The part object for `name` (imported on first use)."""
        if name not in self._parts:
            if name == "kafka":
                from lagpilot_dev.kafka import KafkaPart

                self._parts[name] = KafkaPart(self.cache_dir, self.state_dir)
            elif name == "postgres":
                from lagpilot_dev.postgres import PostgresPart

                self._parts[name] = PostgresPart(self.cache_dir, self.state_dir)
            elif name == "spark":
                from lagpilot_dev.spark import SparkPart

                self._parts[name] = SparkPart(self.cache_dir, self.state_dir)
            elif name == "kube":
                from lagpilot_dev.kube import KubePart

                self._parts[name] = KubePart(self.cache_dir, self.state_dir)
            elif name == "prometheus":
                from lagpilot_dev.prometheus import PrometheusPart

                self._parts[name] = PrometheusPart(self.cache_dir, self.state_dir)
            elif name == "node":
                from lagpilot_dev.node import NodePart

                self._parts[name] = NodePart(self.cache_dir, self.state_dir)
            elif name == "netpol":
                from lagpilot_dev.netpol import NetpolPart

                self._parts[name] = NetpolPart(self.cache_dir, self.state_dir)
            elif name == "oidc":
                from lagpilot_dev.oidc import OidcPart

                self._parts[name] = OidcPart(self.cache_dir, self.state_dir)
            elif name == "keda":
                from lagpilot_dev.keda import KedaPart

                self._parts[name] = KedaPart(self.cache_dir, self.state_dir)
            else:
                raise ValueError(f"unknown part {name!r}; known: {', '.join(ALL_PARTS)}")
        return self._parts[name]

    def kafka(self) -> Any:
        """The KafkaPart (for run_cli_tool, kill/start in fault tests)."""
        return self.part("kafka")

    # ---- up / status / down --------------------------------------------------------------------
    def up(self, parts: Iterable[str] = DEFAULT_PARTS, by_tests: bool = False) -> StackInfo:
        """Install and start every part in `parts` that is not running; return their details.

        Parts start in parallel (the kube control plane takes longest). `by_tests` marks parts this
        call starts as test-owned (stopped when the last test lease is released).
        """
        names = parse_parts(list(parts))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        errors: dict[str, BaseException] = {}

        def bring_up(name: str) -> None:
            part = self.part(name)
            t0 = time.monotonic()
            was_running = part.is_running()
            if not was_running:
                log.info("bringing up part", extra={"part": name})
                # with the node in the same call, the control plane's binaries come from the node's
                # build (one `go build` for both, docs/node.md "Cold build"): both threads run it,
                # under its locks, and the second finds everything built
                installer = self.part("node") if name == "kube" and "node" in names else part
                installer.install()
                part.start()
                log.info("part is up", extra={"part": name, "seconds": round(time.monotonic() - t0, 1)})
            self._mark_owner(name, started_now=not was_running, by_tests=by_tests)

        if "node" in names:
            node = self.part("node")
            prepare = getattr(node, "prepare_host", None)
            if prepare is not None and not node.is_running():
                # before anything starts: one node per machine (raises, naming another state dir's
                # node), and the pod bridge, so Kafka and PostgreSQL starting beside the node's
                # build listen on its gateway for pods (docs/node.md)
                prepare()
        first = [n for n in names if n in _FIRST]
        rest = [n for n in names if n not in _FIRST]
        # one Go module cache and build cache for every part's Go build of this call (the control
        # plane and node, the NetworkPolicy agent), kept while any of them builds and removed after
        # the last (lagpilot_dev.gocache; nothing when every part is built)
        with gocache.lease(gocache.go_cache_dir(self.cache_dir)):
            for batch in (first, rest):
                if not batch or errors:
                    continue
                with ThreadPoolExecutor(
                    max_workers=max(1, len(batch)), thread_name_prefix="lagpilot-up"
                ) as pool:
                    futures = {name: pool.submit(bring_up, name) for name in batch}
                    for name, fut in futures.items():
                        try:
                            fut.result()
                        except BaseException as exc:  # noqa: BLE001 - report every failed part, not just the first
                            errors[name] = exc
                            log.error("part failed to start", extra={"part": name, "error": str(exc)[:2000]})
        if errors:
            details = "\n".join(f"[{n}] {e}" for n, e in errors.items())
            raise RuntimeError(f"dev stack: {len(errors)} part(s) failed: {', '.join(errors)}\n{details}")
        if "prometheus" in names:
            # its pod discovery needs the kube part (started beside it, or after it in an older run)
            getattr(self.part("prometheus"), "configure", lambda: None)()
        # a health probe can miss under load (the apiserver's /readyz has 2 s): a part just started or
        # found running is asked again for a while before it is reported as not running (its
        # details, e.g. the kubeconfig, would be missing from the answer)
        info = self.status(names)
        deadline = time.monotonic() + UP_STATUS_GRACE_S
        while any(not info.running.get(n) for n in names) and time.monotonic() < deadline:
            time.sleep(1.0)
            info = self.status(names)
        silent = [n for n in names if not info.running.get(n)]
        if silent:
            raise RuntimeError(f"dev stack: started but not answering its health check: {', '.join(silent)}")
        return info

    def status(self, parts: Iterable[str] | None = None) -> StackInfo:
        """Details of the parts in `parts` (default: all); starts and installs nothing."""
        names = parse_parts(None if parts is None else list(parts), default=ALL_PARTS)
        info = StackInfo(cache_dir=str(self.cache_dir), state_dir=str(self.state_dir))
        for name in names:
            try:
                part = self.part(name)
            except ImportError as exc:  # e.g. kube.py not written yet
                log.debug("part not available", extra={"part": name, "error": str(exc)})
                info.running[name] = False
                continue
            running = part.is_running()
            info.running[name] = running
            if not running:
                continue
            details = part.info()
            info.parts[name] = details
            if name == "kafka":
                info.bootstrap_servers = details.get("bootstrap_servers")
                info.kafka_home = details.get("kafka_home")
            elif name == "postgres":
                info.postgres_dsn = details.get("postgres_dsn")
            elif name == "spark":
                info.spark_jars = list(details.get("spark_jars", []))
            elif name == "kube":
                info.kubeconfig = details.get("kubeconfig")
                info.kubectl = details.get("kubectl")
                info.kube_server = details.get("server")
        return info

    def down(self, parts: Iterable[str] | None = None) -> list[str]:
        """Stop the parts in `parts` (default: all) that are running; return the names stopped."""
        names = parse_parts(None if parts is None else list(parts), default=ALL_PARTS)
        stopped = []
        for name in _STOP_ORDER:
            if name not in names:
                continue
            try:
                part = self.part(name)
            except ImportError:
                continue
            if part.is_running() and name != "spark":
                part.stop()
                stopped.append(name)
            self._owner_file(name).unlink(missing_ok=True)
        return stopped

    def purge(self, parts: Iterable[str] | None = None) -> list[str]:
        """Stop the parts and delete their data (a fresh start next `up`); caches stay."""
        names = parse_parts(None if parts is None else list(parts), default=ALL_PARTS)
        self.down(names)
        purged = []
        for name in names:
            try:
                part = self.part(name)
            except ImportError:
                continue
            purge = getattr(part, "purge", None)
            if purge is not None:
                purge()
                purged.append(name)
        return purged

    # ---- ownership and leases (several test sessions on one machine) ---------------------------
    def _owner_file(self, name: str) -> Path:
        return self.state_dir / "owners" / f"{name}.tests"

    def _mark_owner(self, name: str, started_now: bool, by_tests: bool) -> None:
        """A part a test session started is test-owned; a person's `dev up` takes ownership away."""
        f = self._owner_file(name)
        if by_tests and started_now:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(f"{os.getpid()}\n")
        elif not by_tests:
            f.unlink(missing_ok=True)

    def _lease_dir(self) -> Path:
        return self.state_dir / "leases"

    def acquire(self, parts: Iterable[str]) -> tuple[StackInfo, str]:
        """Take a lease and bring `parts` up (for a test session); returns (info, lease id)."""
        lease = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with file_lock(self.state_dir / "leases.lock"):
            self._lease_dir().mkdir(parents=True, exist_ok=True)
            (self._lease_dir() / lease).write_text(f"{os.getpid()}\n")
        return self.up(parts, by_tests=True), lease

    def release(self, lease: str, stop: bool = True) -> list[str]:
        """Drop the lease; when no live lease is left and `stop`, stop the test-owned parts."""
        with file_lock(self.state_dir / "leases.lock"):
            (self._lease_dir() / lease).unlink(missing_ok=True)
            if self._live_leases() or not stop:
                return []
            owned = [p.stem for p in (self.state_dir / "owners").glob("*.tests")]
            return self.down(owned) if owned else []

    def live_sessions(self) -> int:
        """How many test sessions hold a lease on the stack now (a crashed session's lease is dropped)."""
        with file_lock(self.state_dir / "leases.lock"):
            return self._live_leases()

    def _live_leases(self) -> int:
        """The live leases (the caller holds leases.lock); a crashed session's lease is dropped."""
        return sum(1 for f in self._lease_dir().glob("*") if self._lease_alive(f))

    @staticmethod
    def _lease_alive(f: Path) -> bool:
        try:
            pid = int(f.read_text().strip())
        except (OSError, ValueError):
            return False
        if pid_alive(pid):
            return True
        f.unlink(missing_ok=True)  # a crashed session's lease
        return False
