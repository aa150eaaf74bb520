"""`lagpilot demo`: lagpilot doing its job on the embedded stack, live in the terminal.

    lagpilot demo [--profile default|fast] [--keep] [--cold-drains] [--namespace NS] [--out DIR] [--plain]

Stages (each prints what it waits for):
 1. the embedded stack: Kafka, the Kubernetes control plane, PostgreSQL, Spark's Kafka connector
    (installed into the cache on first use; the first run builds Kubernetes, 20-30 min);
 2. the CRD, a namespace, a 3-partition topic and the PostgreSQL DSN Secret;
 3. the operator (`lagpilot operator`, a subprocess logging to <out>/operator.log) and the test-side
    pod runner (threads in this process: it plays the kubelet, consumer pods become local processes);
 4. a BatchConsumerGroup (<out>/bcg.yaml, applied with the real kubectl) whose handler writes to
    PostgreSQL through the built-in sink behind an artificial per-record cost (demo_handler);
 5. the replay of a scaled-down seed backfill (quiet → a peak the group cannot absorb → quiet)
    with a live view: per-partition lag and backlog, projection vs SLA, replicas, the drain and
    its progress, the conditions and `kubectl get bcg`;
 6. waiting for every record to reach PostgreSQL;
 7. the summary table, the PNG plot, the JSON summary, the trace it replayed (trace.csv) and the
    proof: produced = distinct records in PostgreSQL, and the delivery ledger (one row per delivery,
    no key) shows nothing lost and nothing delivered twice; then what the calibrated simulator says
    of the same trace (static replicas, KEDA, and lagpilot predicted vs measured). Exit status 1
    when the proof fails.

Everything the demo starts is stopped on exit or Ctrl-C (the stack parts only if the demo started
them and --keep is not given). With --keep the stack, the namespace and the CR stay, and so do the
operator and the pod runner (handed over to a background process `python -m lagpilot_dev.podrunner`
on the same node, which adopts the consumer pods): a CR applied or edited afterwards is reconciled.
The demo then prints their pids and how to stop them (also in <out>/kept.json), the
`export KUBECONFIG=...` line, the Prometheus URL when the dev stack's prometheus part runs, and
kubectl lines to try.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lagpilot_dev import demo_measure, demo_report, demo_traffic, demo_view
from lagpilot_dev.demo_report import Proof, Sample
from lagpilot_dev.demo_traffic import PROFILES, Producer, Profile, phase_at
from lagpilot_dev.paths import cache_dir, free_port, http_ok
from lagpilot.decide.handoff import ranges_of

log = logging.getLogger("lagpilot_dev.demo")

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "batchconsumergroup.yaml"
CRD_NAME = "batchconsumergroups.lagpilot.io"
GROUP, VERSION, PLURAL = "lagpilot.io", "v1alpha1", "batchconsumergroups"
PARTS = ("kafka", "kube", "postgres", "spark")
HANDLER = "lagpilot_dev.demo_handler:process"
DEMO_LABEL = "lagpilot.io/demo"
MAX_OPERATOR_RESTARTS = 3


class DemoError(Exception):
    """A stage could not complete; the message says which and why (the demo exits 2)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lagpilot demo", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--profile", choices=sorted(PROFILES), default="default",
                   help="default: the README demo (< 10 min warm); fast: shorter spike, used by the test")
    p.add_argument("--keep", action="store_true",
                   help="leave the stack, namespace and CR up at the end, with the operator and the pod runner "
                        "still running (a CR applied or edited afterwards is reconciled); prints how to stop them")
    p.add_argument("--cold-drains", action="store_true",
                   help="spec.drain.warmRuntime false: every drain starts its own Spark (no warm runtime pod)")
    p.add_argument("--namespace", default="lagpilot-demo", help="namespace for the demo (default %(default)s)")
    p.add_argument("--out", default=None,
                   help="directory for logs, plot and summary (default: <cache>/demo/<timestamp>)")
    p.add_argument("--plain", action="store_true",
                   help="no live redraw: one progress line every few seconds (the default when stdout is not a terminal)")
    # development aid until the operator lands: run one consumer process directly, no CR, no Spark
    p.add_argument("--no-operator", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- small helpers ---------------------------------------------------------------------------------

class _WaitPrinter(logging.Handler):
    """Shows the stack's own "waiting for ..." log records as stage progress lines."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        what = getattr(record, "for", None)
        msg = record.getMessage()
        if msg == "waiting" and what:
            self.say(f"waiting for: {what}")
        elif msg == "still waiting" and what:
            self.say(f"still waiting for: {what} ({getattr(record, 'elapsed_s', '?')} s)")
        elif msg in ("bringing up part", "part is up"):
            part = getattr(record, "part", "?")
            secs = getattr(record, "seconds", None)
            self.say(f"{part}: starting" if msg == "bringing up part" else f"{part}: up in {secs} s")
        elif "building kubernetes" in msg or msg == "build progress":
            self.say(getattr(record, "line", None) or msg)
        elif record.levelno >= logging.WARNING:
            self.say(f"{record.levelname.lower()}: {msg}")


def _sql_count(conn: Any, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    try:
        return list(conn.execute(query, params).fetchall())
    except psycopg.errors.UndefinedTable:
        return []


class Demo:
    """One run of the demo; `run()` does the stages, `cleanup()` undoes what it started."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.profile: Profile = PROFILES[args.profile]
        if args.cold_drains:
            self.profile = dataclasses.replace(self.profile, warm_runtime=False)
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
        self.out = Path(args.out) if args.out else cache_dir() / "demo" / self.run_id
        self.out.mkdir(parents=True, exist_ok=True)
        self.live = sys.stdout.isatty() and not args.plain
        self.ns = args.namespace
        suffix = uuid.uuid4().hex[:6]
        self.name = "orders-demo"
        self.deployment = f"{self.name}-consumer"  # the operator's naming (docs/CONTRACTS.md)
        self.topic = f"demo-orders-{suffix}"
        self.group_id = f"orders-demo-{suffix}"
        self.table = f"demo_orders_{suffix}"
        self.ledger_table = f"demo_ledger_{suffix}"  # one row per delivery, no key (demo_handler)
        self.t_start = time.monotonic()
        self.timings: dict[str, float] = {}
        self.samples: list[Sample] = []
        self.kubectl_lines: list[str] = []
        self._kubectl_at = 0.0
        self.stage = "starting"
        self.waiting = ""
        # what cleanup must undo
        self.stack: Any = None
        self.lease: str | None = None
        self.info: Any = None
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_log: Any = None
        self.runner: Any = None
        self.kept_runner: subprocess.Popen[bytes] | None = None  # --keep: the background pod runner
        self.producer: Producer | None = None
        self.api: Any = None
        self.admin: Any = None
        self.pg: Any = None
        self.created_ns = False
        self.created_topic = False
        self.parts = PARTS if not args.no_operator else ("kafka", "kube", "postgres")
        self.consumer: subprocess.Popen[bytes] | None = None
        self._probe_logged: dict[str, float] = {}
        self.operator_restarts = 0
        self.operator_exits: list[int] = []
        self._leftovers: list[tuple[str, list[str]]] = []  # (topic, tables) of a kept previous run
        self._setup_logging()

    # ---- output ------------------------------------------------------------------------------------
    def _setup_logging(self) -> None:
        from lagpilot_runtime.jsonlog import JsonFormatter

        fh = logging.FileHandler(self.out / "demo.log")
        fh.setFormatter(JsonFormatter())
        root = logging.getLogger()
        root.addHandler(fh)
        root.setLevel(logging.INFO)
        dev = logging.getLogger("lagpilot_dev")
        dev.setLevel(logging.INFO)
        dev.addHandler(fh)  # directly: jsonlog.setup(logger="lagpilot_dev") may have turned its propagation off
        dev.propagate = False
        for noisy in ("kubernetes", "urllib3"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self._wait_printer = _WaitPrinter(lambda m: self.say(m, indent=True))
        logging.getLogger("lagpilot_dev").addHandler(self._wait_printer)
        self._wait_printer.addFilter(lambda r: not r.name.startswith(("lagpilot_dev.podrunner", "lagpilot_dev.demo")))

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start

    def say(self, text: str, indent: bool = False) -> None:
        print(("      " if indent else "") + text, flush=True)

    def begin(self, n: int, title: str, waiting: str) -> float:
        self.stage = title
        self.waiting = waiting
        self.say(f"\n[{n}/7] {title}")
        self.say(f"waiting for: {waiting}", indent=True)
        log.info("stage", extra={"stage": title, "waiting_for": waiting})
        return time.monotonic()

    def done(self, key: str, t0: float, detail: str = "") -> None:
        secs = time.monotonic() - t0
        self.timings[key] = secs
        self.say(f"✓ {detail or 'done'} ({secs:.1f} s)", indent=True)

    def wait(self, check: Callable[[], Any], what: str, timeout: float, interval: float = 1.0,
             alive: Callable[[], str | None] | None = None) -> Any:
        """Poll ``check`` until truthy; print what we wait for every 15 s; DemoError on timeout or
        when ``alive`` names a dead process."""
        t0 = time.monotonic()
        last = t0
        err: str | None = None
        while True:
            try:
                result = check()
                if result:
                    return result
                err = None
            except Exception as exc:  # noqa: BLE001 - a failing probe means "not yet"
                err = repr(exc)[:300]
            if alive is not None and (dead := alive()):
                raise DemoError(f"gave up waiting for {what}: {dead}")
            now = time.monotonic()
            if now - t0 > timeout:
                raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last error: {err})" if err else ""))
            if now - last >= 15:
                self.say(f"still waiting for: {what} ({now - t0:.0f} s)", indent=True)
                last = now
            time.sleep(interval)

    # ---- the stages --------------------------------------------------------------------------------
    def run(self) -> int:
        print(f"lagpilot demo · profile {self.profile.name} · output in {self.out}", flush=True)
        self.stage_stack()
        self.stage_resources()
        self.stage_operator()
        self.stage_group()
        self.stage_replay()
        self.stage_catch_up()
        return self.stage_report()

    def stage_stack(self) -> None:
        from lagpilot_dev.stack import Stack

        t0 = self.begin(1, "Embedded stack: Kafka, Kubernetes API server + controller-manager, PostgreSQL, Spark jars",
                        "every part to be installed (first run only) and healthy")
        self.stack = Stack()
        for name in self.parts:
            try:
                part = self.stack.part(name)
            except ImportError as exc:
                raise DemoError(f"the dev stack has no '{name}' part in this checkout ({exc})") from exc
            installed = getattr(part, "installed", None)
            if callable(installed) and not installed():
                hint = " — Kubernetes is built from the Go module proxy: 20-30 min on 2 cores" if name == "kube" else ""
                self.say(f"{name}: not in the cache yet, installing (first run only){hint}", indent=True)
        self.info, self.lease = self.stack.acquire(self.parts)
        i = self.info
        if not (i.bootstrap_servers and i.kubeconfig and i.postgres_dsn and i.kubectl):
            raise DemoError(f"the stack came up without all connection details: running={i.running}")
        self.done("stack_up", t0, f"Kafka {i.bootstrap_servers} · API server {i.kube_server} · "
                                  f"PostgreSQL 127.0.0.1:{i.parts.get('postgres', {}).get('postgres_port', '?')} · "
                                  f"{len(i.spark_jars)} Spark jars")

    def kubectl(self, *args: str, input_text: str | None = None, timeout: float = 60.0,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.info.kubectl), f"--kubeconfig={self.info.kubeconfig}", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, input=input_text, timeout=timeout,  # noqa: S603
                              check=False)
        log.info("kubectl", extra={"kubectl_args": " ".join(args), "rc": proc.returncode})
        if check and proc.returncode != 0:
            raise DemoError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
        return proc

    def stage_resources(self) -> None:
        import psycopg
        from confluent_kafka.admin import AdminClient, NewTopic
        from kubernetes import client, config

        t0 = self.begin(2, f"CRD, namespace {self.ns}, topic {self.topic} (3 partitions), PostgreSQL Secret",
                        f"CRD {CRD_NAME} to be Established")
        self.api = config.new_client_from_config(config_file=str(self.info.kubeconfig))
        core = client.CoreV1Api(self.api)
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=lagpilot-demo", "-f", str(CRD_FILE))
        self.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=90s", timeout=120)
        self.say(f"✓ kubectl apply --server-side -f {CRD_FILE.relative_to(REPO)}: Established", indent=True)

        self._stop_kept()
        self._remove_namespace(core, wait=True)
        self.say(f"waiting for: namespace {self.ns} and its default ServiceAccount", indent=True)
        core.create_namespace({"metadata": {"name": self.ns, "labels": {DEMO_LABEL: "true"},
                                            "annotations": {"lagpilot.io/demo-run": self.run_id}}})
        self.created_ns = True
        self.wait(lambda: core.read_namespaced_service_account("default", self.ns), "the default ServiceAccount", 90)

        self.say(f"waiting for: topic {self.topic} with {self.profile.partitions} partitions, each with a leader",
                 indent=True)
        self.admin = AdminClient({"bootstrap.servers": self.info.bootstrap_servers,
                                  "logger": logging.getLogger("lagpilot_dev.demo.kafka")})
        fut = self.admin.create_topics([NewTopic(self.topic, num_partitions=self.profile.partitions,
                                                 replication_factor=1)], operation_timeout=30)[self.topic]
        fut.result(timeout=90)
        self.created_topic = True

        def topic_ready() -> bool:
            t = self.admin.list_topics(topic=self.topic, timeout=10).topics.get(self.topic)
            return bool(t is not None and t.error is None and len(t.partitions) == self.profile.partitions
                        and all(p.leader >= 0 for p in t.partitions.values()))

        self.wait(topic_ready, f"topic {self.topic} leaders", 60, interval=0.3)

        core.create_namespaced_secret(self.ns, {"metadata": {"name": "demo-pg"}, "type": "Opaque",
                                                "stringData": {"dsn": self.info.postgres_dsn}})
        self.pg = psycopg.connect(self.info.postgres_dsn, autocommit=True, connect_timeout=10,
                                  application_name="lagpilot-demo")
        self._drop_leftovers()
        self.done("resources", t0, f"namespace {self.ns}, topic {self.topic}, Secret demo-pg (the DSN; never printed)")

    def _remove_namespace(self, core: Any, wait: bool) -> None:
        """Delete the namespace (a previous run's, or ours at the end). CRs whose operator is gone
        keep kopf's finalizer: it is removed first, or the namespace would never go away."""
        from kubernetes import client

        try:
            core.read_namespace(self.ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        if wait:
            self.say(f"waiting for: the previous demo namespace {self.ns} to be deleted", indent=True)
        co = client.CustomObjectsApi(self.api)
        with contextlib.suppress(client.ApiException):
            for item in co.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL).get("items", []):
                spec = item.get("spec") or {}
                cfg = (spec.get("processing") or {}).get("config") or {}
                self._leftovers.append((str(spec.get("topic") or ""),
                                        [str(cfg.get(k) or "") for k in ("postgres.table", "ledgerTable", "auditTable")]))
                with contextlib.suppress(client.ApiException):
                    co.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, item["metadata"]["name"],
                                                      {"metadata": {"finalizers": None}})
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(self.ns, propagation_policy="Background")
        # pods on a pod-runner Node that is gone (a --keep run) would wait forever for a kubelet
        # to confirm their deletion: remove them at once, as `kubectl delete --force` does
        with contextlib.suppress(client.ApiException):
            core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)
        if wait:
            def gone() -> bool:
                try:
                    core.read_namespace(self.ns)
                except client.ApiException as exc:
                    return exc.status == 404
                return False

            self.wait(gone, f"namespace {self.ns} to be deleted", 180)
            self._remove_stale_nodes(core)

    def _drop_leftovers(self) -> None:
        """The topic and tables of a previous run's CR in this namespace (a --keep run), demo names only."""
        for topic, tables in self._leftovers:
            if topic.startswith("demo-orders-"):
                with contextlib.suppress(Exception):
                    for fut in self.admin.delete_topics([topic], operation_timeout=30).values():
                        fut.result(timeout=60)
            for table in tables:
                if table.startswith(("demo_orders_", "demo_audit_", "demo_ledger_")) and table.replace("_", "").isalnum():
                    with contextlib.suppress(Exception):
                        self.pg.execute(f'DROP TABLE IF EXISTS "{table}"')
        self._leftovers.clear()

    def _remove_stale_nodes(self, core: Any) -> None:
        """Nodes of earlier demo pod runners (kept with --keep, or left by a crash) that are NotReady."""
        from kubernetes import client

        with contextlib.suppress(client.ApiException):
            for node in core.list_node().items:
                name = node.metadata.name
                ready = [c.status for c in (node.status.conditions or []) if c.type == "Ready"]
                if name.startswith("lagpilot-demo-") and ready != ["True"]:
                    with contextlib.suppress(client.ApiException):
                        core.delete_node(name)

    def stage_operator(self) -> None:
        from lagpilot_dev.podrunner import PodRunner

        t0 = self.begin(3, "The operator (lagpilot operator) and the pod runner (the kubelet stand-in)",
                        "the operator's metrics endpoint to answer")
        if self.args.no_operator:
            self._start_bare_consumer()
            self.done("operator_up", t0, "--no-operator: one bare consumer process instead")
            return
        self._start_operator()
        self.say(f"$ lagpilot operator --namespace {self.ns} --standalone   (pid {self.operator.pid}, "
                 f"log {self.out / 'operator.log'})", indent=True)
        url = f"http://127.0.0.1:{self._operator_port}/metrics"
        self.wait(lambda: http_ok(url), url, 120, alive=self._operator_dead)

        self.say("waiting for: the pod runner to register its Node", indent=True)
        self.runner = PodRunner(self.info.kubeconfig, node_name=f"lagpilot-demo-{self.run_id[-4:]}",
                                workdir=self.out / "pods", namespaces=[self.ns])
        self.runner.start()
        self.done("operator_up", t0, f"operator pid {self.operator.pid}, pod runner node {self.runner.node_name}")

    def _start_bare_consumer(self) -> None:
        """--no-operator: the env the operator would render, one `lagpilot consume` process."""
        p = self.profile
        env = dict(os.environ, LAGPILOT_BOOTSTRAP_SERVERS=self.info.bootstrap_servers, LAGPILOT_TOPIC=self.topic,
                   LAGPILOT_GROUP_ID=self.group_id, LAGPILOT_BATCH_MAX_RECORDS=str(p.batch_max_records),
                   LAGPILOT_BATCH_TIMEOUT_MS=str(p.batch_timeout_ms), LAGPILOT_HANDLER=HANDLER,
                   LAGPILOT_HANDLER_CONFIG=json.dumps(self.manifest()["spec"]["processing"]["config"]),
                   DEMO_POSTGRES_DSN=self.info.postgres_dsn,
                   LAGPILOT_METRICS_PORT=str(free_port()), LAGPILOT_POD_NAME="bare-consumer-0")
        exe = Path(sys.executable).parent / "lagpilot"
        self.consumer_log = open(self.out / "consumer.log", "ab")  # noqa: SIM115 - closed in cleanup
        self.consumer = subprocess.Popen([str(exe), "consume"], stdin=subprocess.DEVNULL, stdout=self.consumer_log,  # noqa: S603
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _start_operator(self) -> None:
        """`lagpilot operator` for the demo namespace, in its own session, logging to <out>/operator.log."""
        self._operator_port = free_port()
        if self.operator_log is None:
            self.operator_log = open(self.out / "operator.log", "ab")  # noqa: SIM115 - closed in cleanup
        env = dict(os.environ, KUBECONFIG=str(self.info.kubeconfig), LAGPILOT_LOG_LEVEL="INFO",
                   PYTHONFAULTHANDLER="1",  # a crash in native code leaves a Python traceback in the log
                   # the drain Job's pod runs here, not in the image: point it at the cached connector jars
                   LAGPILOT_DRAIN_SPARK_JARS=",".join(self.info.spark_jars))
        exe = Path(sys.executable).parent / "lagpilot"
        argv = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "lagpilot.cli"]),
                "operator", "--namespace", self.ns, "--standalone", "--metrics-port", str(self._operator_port),
                "--metrics-host", "127.0.0.1"]
        self.operator = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.operator_log,  # noqa: S603
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _operator_dead(self) -> str | None:
        """None while the operator runs. A crashed operator is restarted (as its Deployment would
        be, up to MAX_OPERATOR_RESTARTS times, each restart shown and counted in the summary);
        after that, the reason to give up."""
        if self.operator is None or self.operator.poll() is None:
            return None
        code = self.operator.returncode
        tail = ""
        with contextlib.suppress(OSError):
            tail = "\n".join((self.out / "operator.log").read_text(errors="replace").splitlines()[-15:])
        log.warning("operator exited", extra={"exit_code": code, "restarts": self.operator_restarts})
        if self.operator_restarts >= MAX_OPERATOR_RESTARTS:
            return f"the operator exited with {code} (restarted {self.operator_restarts}x already); last lines of operator.log:\n{tail}"
        self.operator_restarts += 1
        self.operator_exits.append(code)
        if not self.live:
            self.say(f"the operator exited with {code}: restarting it, as its Deployment would "
                     f"(restart {self.operator_restarts}/{MAX_OPERATOR_RESTARTS}; see operator.log)", indent=True)
        self._start_operator()
        return None

    def manifest(self) -> dict[str, Any]:
        """The BatchConsumerGroup the demo applies (also written to <out>/bcg.yaml)."""
        p = self.profile
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "BatchConsumerGroup",
            "metadata": {"name": self.name, "namespace": self.ns},
            "spec": {
                "kafka": {"bootstrapServers": self.info.bootstrap_servers},
                "topic": self.topic,
                "groupId": self.group_id,
                "batch": {"maxRecords": p.batch_max_records, "timeoutMs": p.batch_timeout_ms},
                "processing": {
                    # the built-in PostgreSQL sink behind an artificial downstream cost (see demo_handler)
                    "handler": HANDLER,
                    "config": {"recordDelayMs": str(p.record_delay_ms), "batchDelayMs": str(p.batch_delay_ms),
                               "postgres.table": self.table, "ledgerTable": self.ledger_table},
                },
                "failure": {"maxRetries": 5, "backoffMs": 200, "policy": "deadLetter"},
                "scaling": {"minReplicas": 1, "maxReplicas": p.partitions, "tolerance": 0.1,
                            "pollIntervalSeconds": p.poll_interval_s,
                            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                                         "scaleDown": {"stabilizationWindowSeconds": p.scale_down_window_s}}},
                "catchUpSLASeconds": p.sla_s,
                "drain": {"enabled": True, "splitFactor": p.split_factor, "maxTasks": p.max_tasks,
                          "minBacklogRecords": p.min_backlog_records, "warmRuntime": p.warm_runtime},
                "template": {
                    # the DSN reaches the pods only as a secretKeyRef (LAGPILOT_* names are the runtime's)
                    "env": [{"name": "DEMO_POSTGRES_DSN", "valueFrom": {"secretKeyRef": {"name": "demo-pg", "key": "dsn"}}}],
                },
            },
        }

    def stage_group(self) -> None:
        import yaml
        from kubernetes import client

        t0 = self.begin(4, f"BatchConsumerGroup {self.ns}/{self.name} → PostgreSQL table {self.table}",
                        "the operator to create the consumer Deployment")
        if self.args.no_operator:
            self.wait(self._group_has_members, f"a member in consumer group {self.group_id}", 120)
            self.done("group_ready", t0, "--no-operator: bare consumer joined")
            return
        path = self.out / "bcg.yaml"
        path.write_text("# applied by `lagpilot demo`\n" + yaml.safe_dump(self.manifest(), sort_keys=False))
        self.kubectl("apply", "-f", str(path))
        self.say(f"$ kubectl apply -f {path}", indent=True)
        apps = client.AppsV1Api(self.api)
        core = client.CoreV1Api(self.api)
        self.wait(lambda: apps.read_namespaced_deployment(self.deployment, self.ns), f"Deployment {self.ns}/{self.deployment}",
                  120, alive=self._operator_dead)
        self.say("✓ Deployment created; waiting for: a consumer pod to run (pod runner)", indent=True)

        def pod_running() -> bool:
            pods = core.list_namespaced_pod(self.ns).items
            return any(p.status.phase == "Running" for p in pods)

        self.wait(pod_running, "a consumer pod in phase Running", 120, alive=self._operator_dead)
        self.say(f"✓ consumer pod running; waiting for: consumer group {self.group_id} to have a member", indent=True)
        self.wait(self._group_has_members, f"a member in consumer group {self.group_id}", 120,
                  alive=self._operator_dead)
        self.say("waiting for: the operator's first status (partitions observed)", indent=True)
        self.wait(lambda: (self._status().get("partitions") or 0) >= 1, "status.partitions", 120,
                  alive=self._operator_dead)
        self.done("group_ready", t0, "consumer running, status reported")

    def _group_has_members(self) -> bool:
        futs = self.admin.describe_consumer_groups([self.group_id], request_timeout=10)
        desc = futs[self.group_id].result(timeout=15)
        return len(desc.members) > 0

    def _cr(self) -> dict[str, Any]:
        from kubernetes import client

        return client.CustomObjectsApi(self.api).get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name)

    def _status(self) -> dict[str, Any]:
        return dict(self._cr().get("status") or {})

    # ---- sampling ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _probe(self, what: str) -> Any:
        """One observation of the sample: a failure leaves that part empty and is logged (once a minute)."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - the view shows what it could read
            now = time.monotonic()
            if now - self._probe_logged.get(what, -1e9) >= 60:
                self._probe_logged[what] = now
                log.warning("observation failed", extra={"probe": what, "error": repr(exc)[:500]})

    def sample(self) -> Sample:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import OffsetSpec
        from kubernetes import client

        prod = self.producer
        t = prod.elapsed() if prod is not None and prod.t0 is not None else -1.0
        ph = phase_at(self.profile.phases, t) if t >= 0 else None
        s = Sample(t=t, produce_rate=ph[1].rate if ph else 0.0, produced=prod.acked if prod else 0)
        parts = list(range(self.profile.partitions))
        with self._probe("kafka end offsets"):
            res = self.admin.list_offsets({TopicPartition(self.topic, p): OffsetSpec.latest() for p in parts},
                                          request_timeout=10)
            for tp, fut in res.items():
                s.end[tp.partition] = int(fut.result(timeout=10).offset)
        with self._probe("kafka committed offsets"):
            futs = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(self.group_id, [TopicPartition(self.topic, p) for p in parts])],
                request_timeout=10)
            for tp in futs[self.group_id].result(timeout=10).topic_partitions:
                s.committed[tp.partition] = int(tp.offset) if tp.offset >= 0 else None
        with self._probe("postgres row counts"):
            rows = _sql_count(self.pg, f'SELECT partition, count(*) FROM "{self.table}" GROUP BY partition')
            s.in_sink = {int(p): int(n) for p, n in rows}
        for p in parts:
            s.end.setdefault(p, 0)
            s.in_sink.setdefault(p, 0)
        with self._probe("CR status"):
            st = self._status()
            s.replicas = st.get("replicas")
            s.desired = st.get("desiredReplicas")
            s.capacity = st.get("capacityPerReplica")
            s.observed_rate = st.get("produceRate")
            pc = st.get("projectedCatchUpSeconds")
            s.projected_s = float(pc) if pc is not None else None
            s.sla_s = st.get("slaSeconds") or self.profile.sla_s
            s.decision = str(st.get("lastDecision") or "")
            s.conditions = [(c.get("type", ""), c.get("status", ""), c.get("reason", "")) for c in st.get("conditions") or []]
            s.drain = st.get("drain") or None
            if s.projected_s is None and any(c[0] == "CatchUpAtRisk" and c[1] == "True" for c in s.conditions):
                s.projected_s = math.inf  # the status omits an infinite projection ("never")
        if s.drain and s.drain.get("ranges"):
            with self._probe("drain rows in PostgreSQL"):
                s.drain_in_sink = self._rows_in_ranges(ranges_of(s.drain))
        with self._probe("Deployment"):
            dep = client.AppsV1Api(self.api).read_namespaced_deployment(self.deployment, self.ns)
            s.ready = dep.status.ready_replicas or 0
            s.pods = dep.spec.replicas
            if s.replicas is None:
                s.replicas = dep.spec.replicas
        now = time.monotonic()
        if now - self._kubectl_at >= 3.0:
            self._kubectl_at = now
            with self._probe("kubectl get bcg"):
                proc = self.kubectl("get", "bcg", "-n", self.ns, check=False, timeout=15)
                self.kubectl_lines = [f"$ kubectl get bcg -n {self.ns}", *proc.stdout.rstrip().splitlines()]
        self.samples.append(s)
        return s

    def _rows_in_ranges(self, ranges: list[dict[str, Any]]) -> int | None:
        """Rows of the drain's offset ranges already in PostgreSQL: its progress as the sink sees it."""
        clauses, params = [], []
        for r in ranges:
            if r.get("start") is None or r.get("split") is None:
                return None
            clauses.append('(partition = %s AND "offset" >= %s AND "offset" < %s)')
            params += [int(r["partition"]), int(r["start"]), int(r["split"])]
        rows = _sql_count(self.pg, f'SELECT count(*) FROM "{self.table}" WHERE topic = %s AND ({" OR ".join(clauses)})',
                          (self.topic, *params))
        return int(rows[0][0]) if rows else 0

    def show(self, s: Sample | None, phase: str = "") -> None:
        stage = self.stage + (f" · operator restarted {self.operator_restarts}x" if self.operator_restarts else "")
        header = demo_view.Header(profile=self.profile.name, elapsed_s=self.elapsed(), stage=stage,
                                  waiting_for=self.waiting, phase=phase, namespace=self.ns, name=self.name)
        if self.live:
            cols, rows = shutil.get_terminal_size((120, 50))
            frame = [demo_view.clip(line, cols - 1) for line in demo_view.render(header, s, self.kubectl_lines)]
            sys.stdout.write(demo_view.HOME_CLEAR + "\n".join(frame[:max(10, rows - 1)]) + "\n")
            sys.stdout.flush()
        elif not hasattr(self, "_last_line") or time.monotonic() - self._last_line >= 10:
            self._last_line = time.monotonic()
            print(demo_view.one_line(header, s), flush=True)

    def _phase_text(self) -> str:
        prod = self.producer
        if prod is None or prod.t0 is None:
            return ""
        ph = phase_at(self.profile.phases, prod.elapsed())
        names = " → ".join(f"{p.name} {p.rate:g}/s×{p.seconds:g}s" for p in self.profile.phases)
        if ph is None:
            return f"replay done ({names})"
        i, p, left = ph
        return f"phase {i + 1}/{len(self.profile.phases)}: {p.name} at {p.rate:g} rec/s, {left:.0f} s left   ({names})"

    def stage_replay(self) -> None:
        p = self.profile
        t0 = self.begin(5, f"Replay: a scaled-down seed backfill, {p.replay_seconds:.0f} s, ~{p.expected_records:,} records",
                        "the replay to finish")
        self.say(f"one consumer manages ~{p.consumer_capacity:.0f} records/s (handler cost {p.record_delay_ms:g} ms/record"
                 f" + {p.batch_delay_ms:g} ms/batch); peak {max(ph.rate for ph in p.phases):g} records/s; "
                 f"SLA {p.sla_s} s", indent=True)
        time.sleep(2 if self.live else 0)
        self.producer = Producer(self.info.bootstrap_servers, self.topic, p.phases, p.partitions).start()
        while not self.producer.done.is_set():
            tick = time.monotonic()
            ph = phase_at(p.phases, self.producer.elapsed())
            self.waiting = (f"the replay: {ph[1].name} at {ph[1].rate:g} rec/s, {ph[2]:.0f} s left in this phase"
                            if ph else "the producer to flush")
            s = self.sample()
            self.show(s, self._phase_text())
            if (dead := self._operator_dead()) is not None:
                raise DemoError(dead)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        if self.producer.error:
            self.say(f"producer error: {self.producer.error}", indent=True)
        self.timings["replay"] = time.monotonic() - t0

    def _caught_up(self, s: Sample) -> str | None:
        """None when every record is in PostgreSQL, the group's lag is 0 and no drain is active;
        otherwise what is still missing (what the demo waits for)."""
        waits = []
        if s.total_backlog > 0:
            waits.append(f"{s.total_backlog:,} records to reach PostgreSQL")
        if s.total_group_lag > 0:
            waits.append(f"group lag {s.total_group_lag:,} → 0")
        if s.drain_active:
            done, total = s.drain_progress()
            waits.append(f"drain #{(s.drain or {}).get('id')} ({s.drain_phase}, {done:,}/{total:,}) to be verified")
        if s.produced != sum(s.end.values()):
            waits.append("the end offsets to show every produced record")
        return "; ".join(waits) or None

    def stage_catch_up(self) -> None:
        p = self.profile
        if self.live:
            self.stage = "Catching up"
        else:
            self.begin(6, "Catching up", "every record to reach PostgreSQL")
        t0 = time.monotonic()
        deadline = t0 + p.catch_up_timeout_s
        linger_until: float | None = None
        while True:
            tick = time.monotonic()
            s = self.sample()
            missing = self._caught_up(s)
            if missing is None and linger_until is None:
                self.timings["catch_up_after_replay"] = tick - t0
                linger_until = tick + p.linger_s
            if linger_until is not None:
                if tick >= linger_until:
                    break
                self.waiting = f"nothing: caught up; watching {linger_until - tick:.0f} s more"
            else:
                self.waiting = f"{missing} (gives up in {deadline - tick:.0f} s)"
            self.show(s, self._phase_text())
            if tick > deadline:
                self.say(f"\ngave up waiting after {p.catch_up_timeout_s:.0f} s: {missing}")
                break
            if (dead := self._operator_dead()) is not None:
                raise DemoError(dead)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        if self.live:
            self.show(self.samples[-1], self._phase_text())

    # ---- proof and report --------------------------------------------------------------------------
    def proof(self) -> Proof:
        q = f'"{self.table}"'
        rows, distinct = 0, 0
        r = _sql_count(self.pg, f'SELECT count(*), count(DISTINCT (topic, partition, "offset")) FROM {q} WHERE topic = %s',
                       (self.topic,))
        if r:
            rows, distinct = int(r[0][0]), int(r[0][1])
        per: dict[int, dict[str, int]] = {}
        end = self.samples[-1].end if self.samples else {}
        for p in range(self.profile.partitions):
            per[p] = {"end": int(end.get(p, 0)), "rows": 0, "distinct": 0, "min": -1, "max": -1}
        for part, n, nd, lo, hi in _sql_count(
                self.pg, f'SELECT partition, count(*), count(DISTINCT "offset"), min("offset"), max("offset") FROM {q} '
                         "WHERE topic = %s GROUP BY partition", (self.topic,)):
            per.setdefault(int(part), {"end": 0})
            per[int(part)].update(rows=int(n), distinct=int(nd), min=int(lo), max=int(hi))
        proof = Proof(produced=self.producer.acked if self.producer else 0,
                      end_offsets_total=sum(int(v) for v in end.values()),
                      rows_in_sink=rows, distinct_in_sink=distinct, per_partition=per)
        ledger = f'"{self.ledger_table}"'
        ends = {p: int(v) for p, v in end.items()}
        counts: dict[int, tuple[int, int, int]] = {}
        rows_ok = _sql_count(self.pg, "SELECT to_regclass(%s) IS NOT NULL", (self.ledger_table,))
        if rows_ok and rows_ok[0][0]:
            for part, n, ndist, hi_ in _sql_count(
                    self.pg, f'SELECT partition, count(*), count(DISTINCT "offset"), max("offset") FROM {ledger} '
                             "WHERE topic = %s GROUP BY partition", (self.topic,)):
                counts[int(part)] = (int(n), int(ndist), 0)
            for part, nout in _sql_count(
                    self.pg, f'SELECT l.partition, count(DISTINCT l."offset") FROM {ledger} l '
                             f'JOIN (SELECT unnest(%s::int[]) AS partition, unnest(%s::bigint[]) AS "end") e '
                             'ON e.partition = l.partition WHERE l.topic = %s AND (l."offset" >= e."end" OR l."offset" < 0) '
                             "GROUP BY l.partition", (list(ends), list(ends.values()), self.topic)):
                n, ndist, _ = counts.get(int(part), (0, 0, 0))
                counts[int(part)] = (n, ndist - int(nout), int(nout))
            for part in set(counts) - set(ends):  # a partition the topic does not have: all outside
                n, ndist, _ = counts[part]
                counts[part] = (n, 0, ndist)
            proof.ledger = demo_measure.ledger_report(counts, ends)
            proof.by_source = {str(src): int(n) for src, n in _sql_count(
                self.pg, f'SELECT source, count(DISTINCT (partition, "offset")) FROM {ledger} WHERE topic = %s GROUP BY source',
                (self.topic,))}
        lat = _sql_count(self.pg, (
            "SELECT max(l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l), avg((l <= %s)::int) FROM ("
            f"SELECT extract(epoch FROM written_at) - timestamp_ms / 1000.0 AS l FROM {q} "
            "WHERE topic = %s AND timestamp_ms IS NOT NULL) x"), (self.profile.sla_s, self.topic))
        if lat and lat[0][0] is not None:
            proof.latency = {"max_s": round(float(lat[0][0]), 1), "p99_s": round(float(lat[0][1]), 1),
                             "within_sla_fraction": round(float(lat[0][2]), 4)}
        return proof

    def ledger_batches(self) -> list[demo_measure.Batch]:
        """The ledger's rows grouped by delivery (worker + commit time), in replay time."""
        wall0 = self.producer.wall0 if self.producer is not None else None
        if wall0 is None:
            return []
        rows = _sql_count(self.pg, (
            'SELECT source, worker, extract(epoch FROM delivered_at), count(*), array_agg(DISTINCT partition) '
            f'FROM "{self.ledger_table}" WHERE topic = %s GROUP BY source, worker, delivered_at'), (self.topic,))
        return [demo_measure.Batch(str(w or ""), str(src), float(ts) - wall0, int(n), tuple(sorted(int(x) for x in parts)))
                for src, w, ts, n, parts in rows]

    def spec_settings(self) -> dict[str, Any]:
        """The run's settings the simulator needs (what the manifest says)."""
        p = self.profile
        return {"split_factor": p.split_factor, "max_tasks": p.max_tasks, "min_backlog_records": p.min_backlog_records,
                "poll_interval_s": p.poll_interval_s, "min_replicas": 1, "max_replicas": p.partitions,
                "scale_down_window_s": p.scale_down_window_s, "batch_timeout_s": p.batch_timeout_ms / 1000.0}

    def simulate(self, trace_path: Path, summary: dict[str, Any]) -> None:
        """What the calibrated simulator says about this run's trace: static replicas and KEDA (the
        load needs drains when they stay low) and lagpilot's prediction next to the measurement."""
        from lagpilot.sim import compare as sim_compare
        from lagpilot.sim import trace as sim_trace

        trace = sim_trace.load_trace(str(trace_path))
        summary["baselines"] = sim_compare.baselines(trace, summary)
        params, _, unknown = sim_compare.params_from_summary(summary)
        pred = sim_compare.predict(trace, params, ("lagpilot",))["lagpilot"].to_dict()
        rows = sim_compare.compare(pred, sim_compare.measured_from_summary(summary))
        summary["sim_to_real"] = {"comparison": {r["metric"]: r for r in rows}, "agrees": sim_compare.agrees(rows),
                                  "not_modelled": unknown}

    def stage_report(self) -> int:
        t0 = self.begin(7, "Summary, plot and proof", "the SQL checks")
        proof = self.proof()
        png = self.out / "demo.png"
        js = self.out / "summary.json"
        trace_path = self.out / "trace.csv"
        self.timings["total"] = self.elapsed()
        summary = demo_report.summarize(
            self.samples, proof, profile=self.profile.name, sla_s=self.profile.sla_s,
            batch_max_records=self.profile.batch_max_records, partitions=self.profile.partitions,
            timings=self.timings,
            paths={"plot": str(png), "summary": str(js), "samples": str(self.out / "samples.jsonl"),
                   "trace": str(trace_path), "operator_log": str(self.out / "operator.log"),
                   "demo_log": str(self.out / "demo.log"), "manifest": str(self.out / "bcg.yaml")},
            batches=self.ledger_batches(), wall0=self.producer.wall0 if self.producer else None,
            spec=self.spec_settings())
        summary.update(namespace=self.ns, name=self.name, topic=self.topic, table=self.table,
                       ledger_table=self.ledger_table,
                       operator_restarts=self.operator_restarts, operator_exit_codes=self.operator_exits,
                       producer_error=self.producer.error if self.producer else None,
                       load_average=list(os.getloadavg()))
        # the exact trace replayed, one row a second from the replay's start to the last observation
        demo_traffic.write_trace(trace_path, demo_traffic.trace_rows(
            self.producer.sent_per_second if self.producer else {}, summary["observed_seconds"]))
        summary["sim_command"] = f".venv/bin/lagpilot simulate --trace {trace_path} --from-demo {js}"
        try:
            self.simulate(trace_path, summary)
        except Exception as exc:  # noqa: BLE001 - the simulator's view is extra; the proof stands alone
            summary["baselines"] = None
            self.say(f"simulator comparison skipped: {exc!r}", indent=True)
            log.warning("simulator comparison failed", extra={"error": repr(exc)[:500]})
        try:
            demo_report.plot(self.samples, str(png), sla_s=self.profile.sla_s,
                             title=f"lagpilot demo ({self.profile.name}): {self.topic}, SLA {self.profile.sla_s} s",
                             drains=summary["drains"])
        except Exception as exc:  # noqa: BLE001 - a missing matplotlib must not hide the proof
            summary["paths"]["plot"] = None
            self.say(f"plot skipped: {exc!r}", indent=True)
        js.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        with open(self.out / "samples.jsonl", "w") as fh:  # every observation, for a post-mortem or a re-plot
            for smp in self.samples:
                fh.write(json.dumps(dataclasses.asdict(smp), default=str) + "\n")
        self.timings["report"] = time.monotonic() - t0
        print()
        print(demo_report.format_summary(summary))
        print()
        print(f"  SQL: SELECT count(*), count(DISTINCT (topic, partition, \"offset\")) FROM {self.table}"
              f"  →  {proof.rows_in_sink:,} rows, {proof.distinct_in_sink:,} distinct")
        if proof.ledger is not None:
            print(f"  SQL: SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM {self.ledger_table}"
                  f"  →  {proof.ledger['delivered']:,} deliveries, {proof.ledger['distinct']:,} distinct records "
                  f"(ledger: no key, one row per delivery)")
        s2r = summary.get("sim_to_real") or {}
        if s2r.get("comparison"):
            from lagpilot.sim.compare import format_comparison

            print("\n  the calibrated simulator on this run's trace (lagpilot predicted vs measured):")
            print("\n".join("    " + line for line in format_comparison(list(s2r["comparison"].values())).splitlines()))
            print(f"    {summary['sim_command']}")
        verdict = ("PROOF OK: produced = distinct records in PostgreSQL "
                   f"({proof.produced:,}), every partition holds offsets 0..end-1, and the delivery ledger shows "
                   f"each delivered exactly once (lost {proof.lost}, delivered more than once {proof.delivered_twice})")
        if not proof.ok:
            verdict = "PROOF FAILED: " + "; ".join(proof.failures())
        print(f"\n  {verdict}\n")
        if summary["paths"].get("plot"):
            print(f"  plot:    {png}")
        print(f"  summary: {js}")
        print(f"  logs:    {self.out}/operator.log, {self.out}/demo.log, pods in {self.out}/pods")
        print(f"  demo wall time {self.elapsed():.0f} s (stack up {self.timings.get('stack_up', 0):.0f} s)")
        return 0 if proof.ok else 1

    # ---- cleanup -----------------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Undo what this run started, in dependency order; never raises."""
        keep = self.args.keep
        steps: list[tuple[str, Callable[[], None]]] = [("stop the producer", self._stop_producer)]
        if not keep:
            steps.append(("delete the BatchConsumerGroup (the operator removes its finalizer)", self._delete_cr))
        if keep and self.runner is not None and self.operator is not None:
            steps += [("hand the pod runner over to a background process (its pods restart once)", self._detach_runner),
                      ("leave the operator running", self._leave_operator)]
        else:
            steps += [("stop the pod runner and its processes", self._stop_runner),
                      ("stop the operator", self._stop_operator)]
        if not keep:
            steps += [("delete the namespace, topic and tables", self._delete_resources)]
        steps.append(("release the stack", lambda: self._release_stack(keep)))
        print("\ncleaning up:", flush=True)
        for what, fn in steps:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - clean up as much as possible
                log.warning("cleanup step failed", extra={"step": what, "error": repr(exc)[:500]})
                print(f"      {what}: failed ({exc!r:.200})", flush=True)
        if keep and self.info is not None:
            kept = {"operator_pid": self.operator.pid if self.operator is not None else None,
                    "podrunner_pid": self.kept_runner.pid if self.kept_runner is not None else None,
                    "operator_metrics": f"http://127.0.0.1:{self._operator_port}/metrics" if self.operator else None,
                    "operator_log": str(self.out / "operator.log"), "podrunner_log": str(self.out / "podrunner.log"),
                    "prometheus_url": self._prometheus_url()}
            with contextlib.suppress(OSError):
                (self.out / "kept.json").write_text(json.dumps(kept, indent=2) + "\n")
                self._kept_file().parent.mkdir(parents=True, exist_ok=True)
                self._kept_file().write_text(json.dumps({**kept, "out": str(self.out)}, indent=2) + "\n")
            print()
            print("\n".join(kept_lines(
                ns=self.ns, name=self.name, exports=self.info.shell_exports()[:1], kubectl=self.info.kubectl,
                **{k: v for k, v in kept.items()})))

    def _stop_producer(self) -> None:
        if self.producer is not None:
            self.producer.stop()

    def _delete_cr(self) -> None:
        from kubernetes import client

        if self.api is None or not self.created_ns:
            return
        co = client.CustomObjectsApi(self.api)
        try:
            co.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        if self.operator is not None and self.operator.poll() is None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    co.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name)
                except client.ApiException as exc:
                    if exc.status == 404:
                        return
                time.sleep(0.5)

    def _stop_runner(self) -> None:
        from kubernetes import client

        if self.runner is not None:
            self.runner.stop()
            if not self.args.keep and self.api is not None:  # its Node object would stay behind, NotReady
                with contextlib.suppress(client.ApiException):
                    client.CoreV1Api(self.api).delete_node(self.runner.node_name)
            self.runner = None

    def _stop_operator(self) -> None:
        if self.consumer is not None and self.consumer.poll() is None:
            os.killpg(self.consumer.pid, signal.SIGTERM)
            try:
                self.consumer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.consumer.pid, signal.SIGKILL)
        proc = self.operator
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # its own session: pgid == its pid
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self.operator_log is not None:
            self.operator_log.close()
        self.operator = None

    def _detach_runner(self) -> None:
        """--keep: the in-process pod runner (threads of this process) cannot outlive the demo, so
        it stops (its processes end, as on a node restart) and `python -m lagpilot_dev.podrunner`
        takes over the same node in its own session: it adopts the pods bound there (their restart
        counts go up by one) and keeps running them after the demo exits."""
        node = self.runner.node_name
        before = self._restart_counts()
        self.runner.stop()
        self.runner = None
        with open(self.out / "podrunner.log", "ab") as fh:
            argv = [sys.executable, "-m", "lagpilot_dev.podrunner", "--kubeconfig", str(self.info.kubeconfig),
                    "--node-name", node, "--workdir", str(self.out / "pods"), "--namespace", self.ns]
            self.kept_runner = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh,  # noqa: S603
                                                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        ready = None
        while time.monotonic() < deadline:
            if self.kept_runner.poll() is not None:
                raise DemoError(f"the background pod runner exited with {self.kept_runner.returncode} "
                                f"(see {self.out / 'podrunner.log'})")
            with contextlib.suppress(Exception):
                ready = sum(1 for n, c in self._restart_counts(ready_only=True).items() if c > before.get(n, -1))
            if ready:
                break
            time.sleep(1)
        print(f"      pod runner pid {self.kept_runner.pid} (node {node}): "
              f"{ready or 0} pod(s) running and ready again under it", flush=True)

    def _restart_counts(self, ready_only: bool = False) -> dict[str, int]:
        """Pod name -> its container's restartCount (ready_only: only pods running and ready)."""
        from kubernetes import client

        out = {}
        for pod in client.CoreV1Api(self.api).list_namespaced_pod(self.ns).items:
            for cs in pod.status.container_statuses or []:
                if not ready_only or (cs.ready and cs.state is not None and cs.state.running is not None):
                    out[pod.metadata.name] = int(cs.restart_count or 0)
        return out

    def _leave_operator(self) -> None:
        """--keep: the operator runs on in its own session (not stopped, not restarted any more)."""
        if self.operator_log is not None:
            self.operator_log.close()  # the operator has its own copy of the descriptor
            self.operator_log = None
        if self.operator is not None and self.operator.poll() is not None:
            raise DemoError(f"the operator had already exited with {self.operator.returncode}")

    def _kept_file(self) -> Path:
        return cache_dir() / "demo" / f"kept-{self.ns}.json"

    def _stop_kept(self) -> None:
        """The operator and pod runner a previous `--keep` run left for this namespace: stopped
        before the namespace is recreated (two operators must not reconcile one CR). Only pids whose
        command line is still that operator / pod runner are signalled."""
        path = self._kept_file()
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        for key, marker, what in (("podrunner_pid", "lagpilot_dev.podrunner", "pod runner"),
                                  ("operator_pid", "operator", "operator")):
            pid = kept.get(key)
            try:
                cmd = Path(f"/proc/{int(pid)}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, TypeError, ValueError):
                continue
            if marker not in cmd or "lagpilot" not in cmd or self.ns not in cmd:
                continue
            self.say(f"stopping the {what} (pid {pid}) a previous --keep run left", indent=True)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGTERM)  # its own session: pgid == pid
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and Path(f"/proc/{int(pid)}").exists():
                time.sleep(0.5)
            if Path(f"/proc/{int(pid)}").exists():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid), signal.SIGKILL)
        with contextlib.suppress(OSError):
            path.unlink()

    def _prometheus_url(self) -> str | None:
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

    def _delete_resources(self) -> None:
        from kubernetes import client

        if self.api is not None and self.created_ns:
            self._remove_namespace(client.CoreV1Api(self.api), wait=False)
        if self.admin is not None and self.created_topic:
            with contextlib.suppress(Exception):
                for fut in self.admin.delete_topics([self.topic], operation_timeout=30).values():
                    fut.result(timeout=60)
        if self.pg is not None:
            import psycopg

            with contextlib.suppress(Exception):
                self.pg.close()
            # a fresh connection: an interrupt may have left the old one mid-query
            with psycopg.connect(self.info.postgres_dsn, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SET lock_timeout = '20s'")
                conn.execute(f'DROP TABLE IF EXISTS "{self.table}", "{self.ledger_table}"')

    def _release_stack(self, keep: bool) -> None:
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


def kept_lines(*, ns: str, name: str, exports: list[str], kubectl: str | None, operator_pid: int | None,
               podrunner_pid: int | None, operator_metrics: str | None, operator_log: str, podrunner_log: str,
               prometheus_url: str | None) -> list[str]:
    """What `lagpilot demo --keep` prints at the end: what still runs, how to stop it, what to try."""
    out = ["The stack, the namespace and the BatchConsumerGroup stay up."]
    pids = [p for p in (operator_pid, podrunner_pid) if p is not None]
    if pids:
        out.append("The operator and the pod runner keep running: a CR you apply or edit there is reconciled.")
        if operator_pid is not None:
            out.append(f"  operator:   pid {operator_pid}, log {operator_log}"
                       + (f", metrics {operator_metrics}" if operator_metrics else ""))
        if podrunner_pid is not None:
            out.append(f"  pod runner: pid {podrunner_pid}, log {podrunner_log} (runs the consumer and drain pods)")
        out.append(f"  stop them:  kill -TERM -- {' '.join(f'-{p}' for p in pids)}   # their process groups")
    else:
        out.append("The operator and the pod runner stopped with the demo (they were not running).")
    if prometheus_url:
        out.append(f"  Prometheus: {prometheus_url}")
    out.append("Try:")
    out += [f"  {line}" for line in exports]
    if kubectl:
        out.append(f"  export PATH={Path(kubectl).parent}:$PATH   # the version-matched kubectl")
    out += [f"  kubectl get bcg -n {ns} -o wide",
            f"  kubectl describe bcg -n {ns} {name}",
            f"  kubectl get pods -n {ns} -w",
            f"  kubectl patch bcg -n {ns} {name} --type merge -p '{{\"spec\":{{\"scaling\":{{\"maxReplicas\":2}}}}}}'",
            f"  kubectl get events -n {ns} --sort-by=.lastTimestamp | tail",
            f"  kubectl delete bcg -n {ns} {name}   # with the operator running: its finalizer lets it go",
            "  .venv/bin/lagpilot dev down    # stops the stack"]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    demo = Demo(args)

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    rc = 2
    try:
        rc = demo.run()
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
        rc = 130
    except DemoError as exc:
        print(f"\ndemo failed at stage '{demo.stage}': {exc}", file=sys.stderr, flush=True)
        rc = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        demo.cleanup()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
