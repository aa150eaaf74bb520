"""The fault campaign's state, its private stack and CRs (setup, teardown) and how it observes the
system (CR status, the ledgers' last deliveries, health after a fault, repairs). The fault rounds
(bench/chaos/steady.py, bench/chaos/drain_faults.py) and the ledger checks (bench/chaos/ledger.py) build on
it; bench/chaos.py drives them."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.chaos import faults as cf
from bench.chaos.faults import Fault
from bench.chaos.pods import CRASH_TABLE_KEY
from bench.chaos.procs import (
    BATCH,
    CRD_FILE,
    PARTS,
    REPO,
    Operator,
    Producer,
    say,
    tcp_open,
)
from lagpilot.model.crd import GROUP, PLURAL, VERSION
from lagpilot_dev.operator_process import DEV_SESSION_TIMEOUT_MS, operator_env
from lagpilot_dev.paths import free_port


def node_test_image(node: Any) -> str:
    """The consumer image with the bench's handler (tests/real/image/Dockerfile) built from this
    checkout and loaded into the node (cached layers; the import skipped when the node has that
    image id), named by its content tag: what the CRs' template runs, never pulled."""
    from lagpilot_dev.images.command import build_and_run

    report = build_and_run(("consumer", "test"), run=False)
    built = str(report.builds["test"]["content_tag"])
    reference = built.removeprefix("localhost/")
    node.load_built_image(built, reference=reference)
    return reference


class CampaignBase:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run_id = uuid.uuid4().hex[:6]
        self.ns = f"chaos-{self.run_id}"
        self.topic = f"chaos-{self.run_id}"
        self.eos_table = f"chaos_eos_{self.run_id}"
        self.alo_table = f"chaos_alo_{self.run_id}"
        self.groups = {"eos": f"chaos-eos-{self.run_id}", "alo": f"chaos-alo-{self.run_id}"}
        self.workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"lagpilot-chaos-{self.run_id}"
        self.workdir.mkdir(parents=True)
        self.crash_dir = self.workdir / "crash"
        self.crash_dir.mkdir()
        self.faults: list[Fault] = []
        self.timeout = args.fault_timeout
        self.present = {"eos": True, "alo": True}
        self.timeout_ms = 500
        self.repairs: list[dict[str, Any]] = []
        self.warm = bool(getattr(args, "warm_runtime", False)) and not args.quick
        self.kinds: frozenset[str] = frozenset(cf.KINDS)  # set by main(): the kinds this run injects
        self.runtime_waits: list[dict[str, Any]] = []
        self.hold_operator = (
            False  # second_operator, delete_while_planned: the dead operator stays down for a while
        )
        # the pods run on the default state's real node (bench/chaos/pods.py)
        self.crash_table = f"chaos_crash_{self.run_id}"  # the eos handler's crash hook on the node

    # -- setup -------------------------------------------------------------------------------------
    def setup(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        from kubernetes import client, config

        from lagpilot_dev.stack import Stack
        from lagpilot_runtime.sinks import ledger
        from lagpilot_runtime.sinks import postgres as pg_sink

        self.stack = Stack(state_dir=self.args.state_dir)
        say(
            f"stack in {self.stack.state_dir} "
            + (
                "(the shared stack: no kind of this run restarts a part)"
                if getattr(self.args, "shared_stack", False)
                else "(private: its restarts do not touch the shared stack)"
            )
            + "; pods on the real node, with the default state's control plane (never restarted)"
        )
        # one node per machine, the default state's, registered with that state's control plane:
        # the bench's pods go there and its own state keeps Kafka and PostgreSQL (restartable)
        self.kube_stack = Stack(state_dir=getattr(self.args, "node_state", None))
        if not self.kube_stack.part("node").is_running():
            raise RuntimeError(
                f"the real node of the default state ({self.kube_stack.state_dir}) is not running; a "
                "bench cannot start a second node (one per machine): start it with "
                "`lagpilot dev up --parts node` (there is no other place for the pods: the pod runner "
                "retired, issue 24 step 6)"
            )
        kinfo, self.kube_lease = self.kube_stack.acquire(["kube", "node"])
        self.info, self.lease = self.stack.acquire(["kafka", "postgres", "spark"])
        i = self.info
        self.bootstrap, self.dsn = str(i.bootstrap_servers), str(i.postgres_dsn)
        self.kafka, self.kube, self.pg = (
            self.stack.part("kafka"),
            self.kube_stack.part("kube"),
            self.stack.part("postgres"),
        )
        # what the pods reach: the listeners on the node's bridge
        self.pods_bootstrap = self.kafka.pods_bootstrap_servers() or ""
        self.pods_dsn = self.pg.pods_dsn() or ""
        if not (self.pods_bootstrap and self.pods_dsn):
            raise RuntimeError(
                f"the bench's Kafka ({self.pods_bootstrap or 'no PODS listener'}) or "
                f"PostgreSQL ({'listens' if self.pods_dsn else 'no bridge listener'}) in "
                f"{self.stack.state_dir} started before the node's bridge: stop that stack "
                "(`lagpilot dev down --state-dir ...`) and run again"
            )
        self.kafka_port = int(self.bootstrap.rsplit(":", 1)[1])
        self.pg_port = int(i.parts["postgres"]["postgres_port"])
        self.kubeconfig, self.kubectl_bin = kinfo.kubeconfig, kinfo.kubectl
        self.api_port = int(str(kinfo.kube_server).rsplit(":", 1)[1])
        self.etcd_port = int(kinfo.parts["kube"]["etcd_endpoint"].rsplit(":", 1)[1])
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        self.kubectl(
            "wait", "--for=condition=Established", "crd/batchconsumergroups.lagpilot.io", "--timeout=90s"
        )
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        # Pod Security `restricted`, as the tests' namespaces on the node (tests/fixtures/node.py
        # `pods`); its pods go to the node's scheduler, the cluster's default
        meta: dict[str, Any] = {
            "name": self.ns,
            "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            },
        }
        self.core.create_namespace({"metadata": meta})
        self.until(lambda: self.core.read_namespaced_service_account("default", self.ns), "default SA", 120)
        self.core.create_namespaced_secret(
            self.ns, {"metadata": {"name": "pg"}, "stringData": {"dsn": self.pods_dsn}}
        )
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self.admin.create_topics([NewTopic(self.topic, PARTS, 1)])[self.topic].result(60)
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=30) as conn:
            pg_sink.ensure_table(conn, self.eos_table, "insert", "none")
            n_idx = conn.execute(
                "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", (self.eos_table,)
            ).fetchone()[0]
        self.eos_keyless = n_idx == 0
        if not self.eos_keyless:
            raise RuntimeError(f"{self.eos_table} has an index: duplicates would be hidden")
        ledger.create_table(self.dsn, self.alo_table)
        # the eos handler's crash hook on the node (bench/chaos/handler.py), disarmed
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=30) as conn:
            conn.execute(
                f'CREATE TABLE "{self.crash_table}" (id int PRIMARY KEY, armed bool NOT NULL, '
                "fired text, fired_at timestamptz)"
            )
            conn.execute(f'INSERT INTO "{self.crash_table}" VALUES (1, false, NULL, NULL)')
        for point in cf.OPERATOR_POINTS:  # disarmed: fires only once its marker is removed
            (self.crash_dir / point.replace(":", "-")).write_text("disarmed")
        op_env = {
            "LAGPILOT_MAX_BACKOFF_SECONDS": "10",
            "LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": "5",
            "LAGPILOT_TEST_CRASH_AT": ",".join(cf.OPERATOR_POINTS),
            "LAGPILOT_TEST_CRASH_DIR": str(self.crash_dir),
            "LAGPILOT_LOG_LEVEL": "INFO",
        }
        # the drain's Spark jars are the image's (/opt/lagpilot/spark-jars); 50m per task, the node
        # demo's figure (at the default 250m a drain's tasks ask more CPU than the node has)
        op_env["LAGPILOT_DRAIN_CPU_PER_TASK_M"] = "50"
        env = operator_env(self.kubeconfig, REPO, op_env)
        self.op = Operator(env, self.ns, self.workdir / "operator.log", free_port())
        from bench.chaos.pods import NodePods

        node = self.kube_stack.part("node")
        self.image = node_test_image(node)
        say(f"pods on the real node {node.info()['node_name']}, image {self.image}")
        # the pods' pids and logs through the node's runtime and the API (the fault rounds' "runner")
        self.runner: Any = NodePods(node, self.core, self.workdir / "pods")
        self.producer = Producer(self.bootstrap, self.topic, self.args.rate)
        self.producer.start()
        self.producer.burst(self.args.warmup)
        self.apply("eos")
        self.apply("alo")
        say(
            f"namespace {self.ns}, topic {self.topic}, tables {self.eos_table} (no key) / {self.alo_table}; work dir {self.workdir}"
        )
        t0 = time.time()
        self.recover_wait(t0, "the first deliveries", 600)

    def spec(self, which: str) -> dict[str, Any]:
        common = {
            "kafka": {"bootstrapServers": self.pods_bootstrap, "sessionTimeoutMs": DEV_SESSION_TIMEOUT_MS},
            "topic": self.topic,
            "groupId": self.groups[which],
            "batch": {"maxRecords": BATCH, "timeoutMs": self.timeout_ms},
            "failure": {"policy": "exit", "maxRetries": 5, "backoffMs": 500},
            "scaling": {
                "minReplicas": 1,
                "maxReplicas": PARTS,
                "pollIntervalSeconds": 2,
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30}},
            },
            "catchUpSLASeconds": self.args.sla,
        }
        if which == "eos":
            return {
                **common,
                "processing": {
                    "handler": self.args.eos_handler,
                    "config": {
                        "postgres.table": self.eos_table,
                        "postgres.key": "none",
                        "cost_ms": str(self.args.cost_ms),
                        # the handler's crash hook on the node (bench/chaos/handler.py)
                        CRASH_TABLE_KEY: self.crash_table,
                    },
                },
                "drain": {
                    "enabled": True,
                    "splitFactor": 2,
                    "maxTasks": 4,
                    "minBacklogRecords": 1000,
                    **({"warmRuntime": True} if self.warm else {}),
                },
                "template": self.template(
                    {"name": "CHAOS_PG_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}
                ),
            }
        return {
            **common,
            "processing": {
                "handler": "lagpilot_runtime.sinks.ledger:process",
                "config": {"ledger.table": self.alo_table, "ledger.cost_ms": str(self.args.alo_cost_ms)},
            },
            "drain": {"enabled": False},
            "template": self.template(
                {"name": "LEDGER_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}
            ),
        }

    def template(self, *env: dict[str, Any]) -> dict[str, Any]:
        """The CRs' spec.template: the test image (the consumer image with the bench's handler:
        tests/real/image/Dockerfile), never pulled, its own PYTHONPATH."""
        return {"image": self.image, "imagePullPolicy": "Never", "env": list(env)}

    def apply(self, which: str) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "BatchConsumerGroup",
            "metadata": {"name": which},
            "spec": self.spec(which),
        }
        self.retry(
            lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body),
            "create CR",
        )
        self.present[which] = True

    def kubectl(self, *args: str) -> str:
        p = subprocess.run(
            [str(self.kubectl_bin), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr.strip()[-500:]}")
        return p.stdout

    # -- observation -------------------------------------------------------------------------------
    def tick(self) -> None:
        if getattr(self, "op", None) is not None and not self.hold_operator:
            self.op.ensure()

    def until(self, check: Callable[[], Any], what: str, timeout: float, interval: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            self.tick()
            try:
                got = check()
                if got:
                    return got
            except Exception as exc:  # noqa: BLE001 - a probe failing means "not yet"
                last = exc
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last error {last!r})")

    def retry(self, fn: Callable[[], Any], what: str, timeout: float = 120) -> Any:
        return self.until(lambda: fn() or True, what, timeout, 1.0)

    def cr(self, which: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, which)
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return None
            raise

    def committed_offsets(self, group: str, partitions: Any = None) -> list[Any]:
        """The group's commits on the bench's topic (TopicPartitions: offset, metadata; partitions
        default: all), read through a Consumer of that group that never subscribes (OffsetFetch), as
        the operator reads them (lagpilot.observe.kafka_admin) — never through
        ``AdminClient.list_consumer_group_offsets``, whose OffsetFetch librdkafka 2.16.0 mishandles on
        a coordinator error: in the 2026-11-27 campaign (round 2) the bench's long-lived AdminClient
        answered none for 180 s while a new client answered the same read in 0.05 s
        (tests/unit/test_chaos_offsets.py). The read is the runtime's one reader of commits
        (``lagpilot_runtime.drain.progress.read_committed``, 30 s: a moving coordinator retried)."""
        import confluent_kafka

        from lagpilot_runtime.drain.progress import read_committed

        parts = range(PARTS) if partitions is None else partitions
        c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "client.id": "chaos-offsets-reader",
            }
        )
        try:
            return read_committed(c, [confluent_kafka.TopicPartition(self.topic, p) for p in parts], 30.0)
        finally:
            c.close()

    def drain(self, which: str = "eos") -> dict[str, Any]:
        obj = self.cr(which) or {}
        return (obj.get("status") or {}).get("drain") or {}

    def last_delivery(self) -> dict[str, dict[int, float]]:
        import psycopg

        out: dict[str, dict[int, float]] = {}
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            out["eos"] = {
                int(p): float(t)
                for p, t in conn.execute(
                    f'SELECT partition, extract(epoch from max(written_at)) FROM "{self.eos_table}" GROUP BY partition'
                )
            }
            out["alo"] = {
                int(p): float(t)
                for p, t in conn.execute(
                    f'SELECT partition, max(delivered_at) FROM "{self.alo_table}" GROUP BY partition'
                )
            }
        return out

    def health(self, since: float, base: tuple[int, float]) -> str | None:
        """None when the whole system works again after `since`; else what is still missing."""
        if not (tcp_open(self.kafka_port) and tcp_open(self.pg_port) and tcp_open(self.api_port)):
            return "a part's port is closed"
        for which in ("eos", "alo"):
            if self.cr(which) is None:
                return f"CR {which} absent"
        if not self.op.alive():
            return "operator down"
        n = self.op.cycles()
        if n is None:
            return "operator metrics not answering"
        gen, count = base
        done = n if self.op.gen != gen else n - count
        if done < 2:
            return f"operator cycles since the fault {done:.0f} < 2"
        last = self.last_delivery()
        for which in ("eos", "alo"):
            for p in range(PARTS):
                if last[which].get(p, 0.0) <= since:
                    return f"{which} partition {p}: no delivery since the fault"
        return None

    def base(self) -> tuple[int, float]:
        return (self.op.gen, self.op.cycles() or 0.0)

    def recover_wait(
        self,
        since: float,
        what: str,
        timeout: float,
        base: tuple[int, float] | None = None,
        extra: Callable[[], str | None] | None = None,
    ) -> float | None:
        """Seconds from `since` until health (and `extra`) hold, or None on timeout."""
        b = base or (self.op.gen - 1, 0.0)
        missing: list[str | None] = [None]

        def ok() -> bool:
            missing[0] = self.health(since, b) or (extra() if extra else None)
            return missing[0] is None

        try:
            self.until(ok, what, timeout, 1.0)
        except TimeoutError:
            say(f"NOT recovered from {what}: {missing[0]}")
            return None
        return time.time() - since

    def record(self, f: Fault) -> Fault:
        self.faults.append(f)
        state = (
            (
                f"recovered in {f.recover_s:.1f} s"
                if f.recovered and f.recover_s is not None
                else "NOT RECOVERED"
            )
            if f.fired
            else f"not fired ({f.detail})"
        )
        say(f"round {f.round} {f.kind} {f.target}: {state}")
        if f.fired and not f.recovered:
            self.repair(f"after {f.kind} (round {f.round})", f.at or time.time())
        return f

    def repair(self, why: str, since: float) -> None:
        """A fault was not recovered from: so that the next faults are measured on a working system,
        do what an operator on call would do (reported in `repairs`, never counted as a recovery):
        delete the consumer pods of every CR with a partition that delivered nothing since `since`
        (their Deployment recreates them), then wait for health (bounded)."""
        try:
            last = self.last_delivery()
        except Exception as exc:  # noqa: BLE001
            say(f"repair {why}: cannot read the ledgers ({exc!r})")
            return
        for which in ("eos", "alo"):
            if all(last[which].get(p, 0.0) > since for p in range(PARTS)):
                continue
            with contextlib.suppress(Exception):
                pods = self.core.list_namespaced_pod(
                    self.ns,
                    label_selector=f"app.kubernetes.io/component=consumer,app.kubernetes.io/instance={which}",
                ).items
                names = [p.metadata.name for p in pods]
                for n in names:
                    self.core.delete_namespaced_pod(n, self.ns, grace_period_seconds=0)
                self.repairs.append(
                    {"why": why, "cr": which, "deleted_pods": names, "at": round(time.time(), 1)}
                )
                say(
                    f"REPAIR {why}: {which} delivered nothing since the fault; deleted its consumer pods {names}"
                )
        self.recover_wait(time.time(), f"health after the repair {why}", 180)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.producer.stop_evt.set()
        for which in ("eos", "alo"):
            with contextlib.suppress(Exception):
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, which)
        with contextlib.suppress(Exception):
            self.until(
                lambda: (
                    not self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)["items"]
                ),
                "CRs deleted",
                120,
            )
        with contextlib.suppress(Exception):
            self.op.stop()
        with contextlib.suppress(Exception):
            self.runner.stop()
        with contextlib.suppress(Exception):
            self.core.delete_namespace(self.ns, propagation_policy="Background")
        if getattr(self, "evidence_kept", False):  # lost/duplicated offsets: the topic and the tables stay
            say(
                f"kept for a look: topic {self.topic}, tables {self.eos_table}, {self.eos_table}_lagpilot_progress, "
                f"{self.alo_table} (state dir {self.args.state_dir})"
            )
            with contextlib.suppress(Exception):
                self.stack.release(self.lease, stop=not self.args.keep_stack)
            self.release_kube()
            return
        with contextlib.suppress(Exception):
            self.admin.delete_topics([self.topic])[self.topic].result(30)
        with contextlib.suppress(Exception):
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                for t in (
                    self.eos_table,
                    f"{self.eos_table}_lagpilot_progress",
                    self.alo_table,
                    self.crash_table,
                ):
                    conn.execute(f'DROP TABLE IF EXISTS "{t}"')
        with contextlib.suppress(Exception):
            self.stack.release(self.lease, stop=not self.args.keep_stack)
        self.release_kube()

    def release_kube(self) -> None:
        """The default state's control plane and node : the lease dropped, never stopped."""
        if getattr(self, "kube_lease", None):
            with contextlib.suppress(Exception):
                self.kube_stack.release(self.kube_lease, stop=False)
