"""The demo's objects on the embedded stack: the stack lease, the CRD, the namespace, the topic, the
PostgreSQL Secret and tables, the BatchConsumerGroup; and their removal (what a previous run left,
and this run's at the end)."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lagpilot.model.crd import GROUP, PLURAL, VERSION
from lagpilot_dev.demo.config import (
    CRD_FILE,
    CRD_NAME,
    DEMO_LABEL,
    PG_SECRET,
    REPO,
    RunNames,
)
from lagpilot_dev.demo.console import Console, DemoError
from lagpilot_dev.demo.traffic import Profile

log = logging.getLogger("lagpilot_dev.demo")


@dataclass
class Cluster:
    """The stack lease, the clients on it, and what this run created there (what cleanup undoes)."""

    console: Console
    names: RunNames
    parts: tuple[str, ...]
    node: bool = False  # --node: pods on the real node (lagpilot_dev.demo.node)
    stack: Any = None
    lease: str | None = None
    info: Any = None  # the stack's connection details (StackInfo)
    api: Any = None  # kubernetes ApiClient
    admin: Any = None  # confluent_kafka AdminClient
    pg: Any = None  # psycopg connection
    created_ns: bool = False
    created_topic: bool = False
    leftovers: list[tuple[str, list[str]]] = field(
        default_factory=list
    )  # (topic, tables) of a kept previous run

    # ---- the stack ---------------------------------------------------------------------------------
    def acquire_stack(self) -> None:
        """Stage 1: every part installed (first run only) and healthy, under this run's lease."""
        from lagpilot_dev.stack import Stack

        console = self.console
        t0 = console.begin(
            1,
            "Embedded stack: Kafka, Kubernetes API server + controller-manager, PostgreSQL, Spark jars"
            + (", the real node (kubelet, containerd, CNI, kube-proxy, CoreDNS)" if self.node else "")
            + (
                ", its NetworkPolicy agent (kube-router's policy controller)"
                if "netpol" in self.parts
                else ""
            ),
            "every part to be installed (first run only) and healthy",
        )
        self.stack = Stack()
        for name in self.parts:
            try:
                part = self.stack.part(name)
            except ImportError as exc:
                raise DemoError(f"the dev stack has no '{name}' part in this checkout ({exc})") from exc
            installed = getattr(part, "installed", None)
            if callable(installed) and not installed():
                hint = {
                    "kube": " — Kubernetes is built from the Go module proxy: 20-30 min on 2 cores",
                    "node": " — kubelet, containerd, CoreDNS from the Go module proxy, with the control plane "
                    'and beside the other parts: tens of minutes on 2 cores (docs/node.md "The cold run")',
                }.get(name, "")
                console.say(f"{name}: not in the cache yet, installing (first run only){hint}", indent=True)
        # one call for every part, the node's too: Stack.up makes the node's bridge before any part
        # starts (Kafka's and PostgreSQL's listeners for pods are on its gateway; docs/node.md), then
        # installs and starts them side by side, so on a cold cache the other parts and the
        # NetworkPolicy agent build beside the node's build (docs/node.md "The cold run")
        self.info, self.lease = self.stack.acquire(self.parts)
        i = self.info
        if not (i.bootstrap_servers and i.kubeconfig and i.postgres_dsn and i.kubectl):
            raise DemoError(f"the stack came up without all connection details: running={i.running}")
        console.done(
            "stack_up",
            t0,
            f"Kafka {i.bootstrap_servers} · API server {i.kube_server} · "
            f"PostgreSQL 127.0.0.1:{i.parts.get('postgres', {}).get('postgres_port', '?')} · "
            f"{len(i.spark_jars)} Spark jars",
        )

    def kubectl(
        self, *args: str, input_text: str | None = None, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.info.kubectl), f"--kubeconfig={self.info.kubeconfig}", *args]
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            input=input_text,
            timeout=timeout,
            check=False,
        )
        log.info("kubectl", extra={"kubectl_args": " ".join(args), "rc": proc.returncode})
        if check and proc.returncode != 0:
            raise DemoError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}"
            )
        return proc

    def prometheus_url(self) -> str | None:
        """The dev stack's Prometheus, when that part runs (`lagpilot dev up --parts ...,prometheus`)."""
        if self.stack is None:
            return None
        try:
            st = self.stack.status(["prometheus"])
        except Exception:  # noqa: BLE001 - no prometheus part in this checkout, or not set up
            return None
        if not st.running.get("prometheus"):
            return None
        return (st.parts.get("prometheus") or {}).get("prometheus_url")

    def release_stack(self, keep: bool) -> None:
        if self.stack is None or self.lease is None:
            return
        if keep:
            self.stack.up(self.parts)  # a person's stack now: no test session's release will stop it
        stopped = self.stack.release(self.lease, stop=not keep)
        self.lease = None
        if stopped:
            print(f"      stopped the parts the demo started: {', '.join(stopped)}", flush=True)
        if self.api is not None:
            self.api.close()

    # ---- stage 2: CRD, namespace, topic, Secret ----------------------------------------------------
    def apply_crd(self) -> None:
        from kubernetes import config

        self.api = config.new_client_from_config(config_file=str(self.info.kubeconfig))
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=lagpilot-demo",
            "-f",
            str(CRD_FILE),
        )
        self.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=90s", timeout=120)
        self.console.say(
            f"✓ kubectl apply --server-side -f {CRD_FILE.relative_to(REPO)}: Established", indent=True
        )

    def create_resources(self, profile: Profile) -> None:
        """A fresh namespace (a previous run's removed first), the topic with a leader on every
        partition, the DSN Secret, and the PostgreSQL connection."""
        import psycopg
        from confluent_kafka.admin import AdminClient, NewTopic
        from kubernetes import client

        console, n = self.console, self.names
        core = client.CoreV1Api(self.api)
        self._remove_namespace(core, wait=True)
        console.say(f"waiting for: namespace {n.ns} and its default ServiceAccount", indent=True)
        labels = {DEMO_LABEL: "true"}
        if self.node:  # its pods go to the real node's scheduler; Pod Security `restricted` enforced
            from lagpilot_dev.demo.node import namespace_labels

            labels.update(namespace_labels())
        core.create_namespace(
            {"metadata": {"name": n.ns, "labels": labels, "annotations": {"lagpilot.io/demo-run": n.run_id}}}
        )
        self.created_ns = True
        console.wait(
            lambda: core.read_namespaced_service_account("default", n.ns), "the default ServiceAccount", 90
        )

        console.say(
            f"waiting for: topic {n.topic} with {profile.partitions} partitions, each with a leader",
            indent=True,
        )
        self.admin = AdminClient(
            {
                "bootstrap.servers": self.info.bootstrap_servers,
                "logger": logging.getLogger("lagpilot_dev.demo.kafka"),
            }
        )
        fut = self.admin.create_topics(
            [NewTopic(n.topic, num_partitions=profile.partitions, replication_factor=1)], operation_timeout=30
        )[n.topic]
        fut.result(timeout=90)
        self.created_topic = True

        def topic_ready() -> bool:
            t = self.admin.list_topics(topic=n.topic, timeout=10).topics.get(n.topic)
            return bool(
                t is not None
                and t.error is None
                and len(t.partitions) == profile.partitions
                and all(p.leader >= 0 for p in t.partitions.values())
            )

        console.wait(topic_ready, f"topic {n.topic} leaders", 60, interval=0.3)

        core.create_namespaced_secret(
            n.ns, {"metadata": {"name": PG_SECRET}, "type": "Opaque", "stringData": {"dsn": self.pods_dsn()}}
        )
        self.pg = psycopg.connect(
            self.info.postgres_dsn, autocommit=True, connect_timeout=10, application_name="lagpilot-demo"
        )
        self._drop_leftovers()

    def pods_bootstrap_servers(self) -> str:
        """Kafka as the consumer pods reach it: the host's address, or on the node the PODS listener."""
        if not self.node:
            return str(self.info.bootstrap_servers)
        from lagpilot_dev.demo.node import pods_bootstrap

        return pods_bootstrap(self.info)

    def pods_dsn(self) -> str:
        """PostgreSQL as the pods reach it (the Secret's DSN; never printed)."""
        if not self.node:
            return str(self.info.postgres_dsn)
        from lagpilot_dev.demo.node import pods_dsn

        return pods_dsn(self.info)

    def _remove_namespace(self, core: Any, wait: bool) -> None:
        """Delete the namespace (a previous run's, or ours at the end). CRs whose operator is gone
        keep kopf's finalizer: it is removed first, or the namespace would never go away."""
        from kubernetes import client

        ns = self.names.ns
        try:
            core.read_namespace(ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        if wait:
            self.console.say(f"waiting for: the previous demo namespace {ns} to be deleted", indent=True)
        co = client.CustomObjectsApi(self.api)
        with contextlib.suppress(client.ApiException):
            for item in co.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL).get("items", []):
                spec = item.get("spec") or {}
                cfg = (spec.get("processing") or {}).get("config") or {}
                self.leftovers.append(
                    (
                        str(spec.get("topic") or ""),
                        [str(cfg.get(k) or "") for k in ("postgres.table", "ledgerTable", "auditTable")],
                    )
                )
                with contextlib.suppress(client.ApiException):
                    co.patch_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        ns,
                        PLURAL,
                        item["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(ns, propagation_policy="Background")
        if wait:

            def gone() -> bool:
                try:
                    core.read_namespace(ns)
                except client.ApiException as exc:
                    return exc.status == 404
                return False

            self.console.wait(gone, f"namespace {ns} to be deleted", 180)

    def _drop_leftovers(self) -> None:
        """The topic and tables of a previous run's CR in this namespace (a --keep run), demo names only."""
        for topic, tables in self.leftovers:
            if topic.startswith("demo-orders-"):
                with contextlib.suppress(Exception):
                    for fut in self.admin.delete_topics([topic], operation_timeout=30).values():
                        fut.result(timeout=60)
            for table in tables:
                if (
                    table.startswith(("demo_orders_", "demo_audit_", "demo_ledger_"))
                    and table.replace("_", "").isalnum()
                ):
                    with contextlib.suppress(Exception):
                        self.pg.execute(f'DROP TABLE IF EXISTS "{table}"')
        self.leftovers.clear()

    # ---- the BatchConsumerGroup --------------------------------------------------------------------
    def cr(self) -> dict[str, Any]:
        from kubernetes import client

        n = self.names
        return client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            GROUP, VERSION, n.ns, PLURAL, n.name
        )

    def status(self) -> dict[str, Any]:
        return dict(self.cr().get("status") or {})

    def delete_cr(self, operator_running: Callable[[], bool]) -> None:
        """Delete the CR; while the operator runs, wait (30 s at most) for it to remove its finalizer."""
        from kubernetes import client

        if self.api is None or not self.created_ns:
            return
        n = self.names
        co = client.CustomObjectsApi(self.api)
        try:
            co.delete_namespaced_custom_object(GROUP, VERSION, n.ns, PLURAL, n.name)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        if operator_running():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    co.get_namespaced_custom_object(GROUP, VERSION, n.ns, PLURAL, n.name)
                except client.ApiException as exc:
                    if exc.status == 404:
                        return
                time.sleep(0.5)

    # ---- cleanup -----------------------------------------------------------------------------------
    def delete_resources(self) -> None:
        """This run's namespace, topic and tables."""
        from kubernetes import client

        if self.api is not None and self.created_ns:
            self._remove_namespace(client.CoreV1Api(self.api), wait=False)
        if self.admin is not None and self.created_topic:
            with contextlib.suppress(Exception):
                for fut in self.admin.delete_topics([self.names.topic], operation_timeout=30).values():
                    fut.result(timeout=60)
        if self.pg is not None:
            import psycopg

            with contextlib.suppress(Exception):
                self.pg.close()
            # a fresh connection: an interrupt may have left the old one mid-query
            with psycopg.connect(self.info.postgres_dsn, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SET lock_timeout = '20s'")
                conn.execute(f'DROP TABLE IF EXISTS "{self.names.table}", "{self.names.ledger_table}"')
