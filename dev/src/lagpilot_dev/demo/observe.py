"""One observation a second while the demo runs (a Sample): Kafka's end and committed offsets, the
rows in PostgreSQL, the CR's status, the Deployment, and every few seconds `kubectl get bcg`."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lagpilot_dev.demo.cluster import Cluster
from lagpilot_dev.demo.report import Sample
from lagpilot_dev.demo.traffic import Producer, Profile, phase_at

log = logging.getLogger("lagpilot_dev.demo")

KUBECTL_EVERY_S = 3.0
PROBE_LOG_EVERY_S = 60.0


def sql_rows(conn: Any, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The query's rows; none while its table does not exist yet."""
    import psycopg

    try:
        return list(conn.execute(query, params).fetchall())
    except psycopg.errors.UndefinedTable:
        return []


def ready_since(pods: list[Any], now: float) -> float | None:
    """The earliest Ready transition (epoch s) of the pods that are Ready and not being deleted;
    ``now`` for a Ready pod whose condition has no transition time; None when none is Ready."""
    out: float | None = None
    for pod in pods:
        if pod.metadata.deletion_timestamp is not None or (pod.status.phase or "") != "Running":
            continue
        for c in pod.status.conditions or []:
            if c.type == "Ready" and c.status == "True":
                at = c.last_transition_time.timestamp() if c.last_transition_time is not None else now
                out = at if out is None else min(out, at)
    return out


@dataclass
class Observer:
    """Takes the samples (all kept, in order) and the latest `kubectl get bcg` lines."""

    cluster: Cluster
    profile: Profile
    samples: list[Sample] = field(default_factory=list)
    kubectl_lines: list[str] = field(default_factory=list)
    _kubectl_at: float = 0.0
    _probe_logged: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def _probe(self, what: str) -> Iterator[None]:
        """One observation of the sample: a failure leaves that part empty and is logged (once a minute)."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - the view shows what it could read
            now = time.monotonic()
            if now - self._probe_logged.get(what, -1e9) >= PROBE_LOG_EVERY_S:
                self._probe_logged[what] = now
                log.warning("observation failed", extra={"probe": what, "error": repr(exc)[:500]})

    def group_has_members(self) -> bool:
        group_id = self.cluster.names.group_id
        futs = self.cluster.admin.describe_consumer_groups([group_id], request_timeout=10)
        desc = futs[group_id].result(timeout=15)
        return len(desc.members) > 0

    def sample(self, prod: Producer | None) -> Sample:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import OffsetSpec
        from kubernetes import client

        cluster, n = self.cluster, self.cluster.names
        t = prod.elapsed() if prod is not None and prod.t0 is not None else -1.0
        ph = phase_at(self.profile.phases, t) if t >= 0 else None
        s = Sample(t=t, produce_rate=ph[1].rate if ph else 0.0, produced=prod.acked if prod else 0)
        parts = list(range(self.profile.partitions))
        with self._probe("kafka end offsets"):
            res = cluster.admin.list_offsets(
                {TopicPartition(n.topic, p): OffsetSpec.latest() for p in parts}, request_timeout=10
            )
            for tp, fut in res.items():
                s.end[tp.partition] = int(fut.result(timeout=10).offset)
        with self._probe("kafka committed offsets"):
            futs = cluster.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(n.group_id, [TopicPartition(n.topic, p) for p in parts])],
                request_timeout=10,
            )
            for tp in futs[n.group_id].result(timeout=10).topic_partitions:
                s.committed[tp.partition] = int(tp.offset) if tp.offset >= 0 else None
        with self._probe("postgres row counts"):
            rows = sql_rows(cluster.pg, f'SELECT partition, count(*) FROM "{n.table}" GROUP BY partition')
            s.in_sink = {int(p): int(c) for p, c in rows}
        for p in parts:
            s.end.setdefault(p, 0)
            s.in_sink.setdefault(p, 0)
        with self._probe("CR status"):
            st = cluster.status()
            s.replicas = st.get("replicas")
            s.desired = st.get("desiredReplicas")
            s.capacity = st.get("capacityPerReplica")
            s.observed_rate = st.get("produceRate")
            pc = st.get("projectedCatchUpSeconds")
            s.projected_s = float(pc) if pc is not None else None
            s.sla_s = self.profile.sla_s  # the spec's catchUpSLASeconds (the status does not repeat it)
            scaling = next((c for c in st.get("conditions") or [] if c.get("type") == "Scaling"), {})
            s.decision = str(scaling.get("message") or "")  # the last decision and its reason
            s.conditions = [
                (c.get("type", ""), c.get("status", ""), c.get("reason", ""))
                for c in st.get("conditions") or []
            ]
            s.drain = st.get("drain") or None
            if s.projected_s is None and any(
                c[0] == "CatchUpAtRisk" and c[1] == "True" for c in s.conditions
            ):
                s.projected_s = math.inf  # the status omits an infinite projection ("never")
        if s.drain and s.drain.get("ranges"):
            with self._probe("drain rows in PostgreSQL"):
                s.drain_in_sink = self._rows_in_ranges(s.drain["ranges"])
        with self._probe("Deployment"):
            dep = client.AppsV1Api(cluster.api).read_namespaced_deployment(n.deployment, n.ns)
            s.ready = dep.status.ready_replicas or 0
            s.pods = dep.spec.replicas
            if s.replicas is None:
                s.replicas = dep.spec.replicas
        if self.profile.runtime_on_demand:
            with self._probe("drain runtime"):
                self._sample_runtime(s)
        now = time.monotonic()
        if now - self._kubectl_at >= KUBECTL_EVERY_S:
            self._kubectl_at = now
            with self._probe("kubectl get bcg"):
                proc = cluster.kubectl("get", "bcg", "-n", n.ns, check=False, timeout=15)
                self.kubectl_lines = [f"$ kubectl get bcg -n {n.ns}", *proc.stdout.rstrip().splitlines()]
        self.samples.append(s)
        return s

    def _sample_runtime(self, s: Sample) -> None:
        """The warm drain runtime on demand: its Deployment's replicas and scale-up stamp (the
        operator's annotation), and since when a runtime pod (not being deleted) is Ready: the
        Ready condition's transition time, or now when the condition carries none."""
        from kubernetes import client

        from lagpilot.act.drain_runtime import runtime_name, scaled_up_at, selector

        n = self.cluster.names
        try:
            dep = client.AppsV1Api(self.cluster.api).read_namespaced_deployment(runtime_name(n.name), n.ns)
        except client.ApiException as exc:
            if exc.status == 404:  # not created yet
                s.runtime_replicas = 0
                return
            raise
        s.runtime_replicas = int(dep.spec.replicas or 0)
        s.runtime_scaled_up_at = scaled_up_at({"metadata": {"annotations": dep.metadata.annotations or {}}})
        if s.runtime_replicas <= 0:
            return
        pods = (
            client.CoreV1Api(self.cluster.api)
            .list_namespaced_pod(n.ns, label_selector=selector(n.name))
            .items
        )
        s.runtime_ready_since = ready_since(pods, time.time())

    def _rows_in_ranges(self, ranges: list[dict[str, Any]]) -> int | None:
        """Rows of the drain's offset ranges already in PostgreSQL: its progress as the sink sees it."""
        clauses, params = [], []
        for r in ranges:
            if r.get("start") is None:
                return None
            clauses.append('(partition = %s AND "offset" >= %s AND "offset" < %s)')
            params += [int(r["partition"]), int(r["start"]), int(r["end"])]
        n = self.cluster.names
        rows = sql_rows(
            self.cluster.pg,
            f'SELECT count(*) FROM "{n.table}" WHERE topic = %s AND ({" OR ".join(clauses)})',
            (n.topic, *params),
        )
        return int(rows[0][0]) if rows else 0
