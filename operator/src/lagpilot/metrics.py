"""The operator's Prometheus metrics (`lagpilot_*`), one label set per BatchConsumerGroup.

Gauges describe the last observation of each group; counters count decisions and failures. Label
sets of a deleted group are removed (`forget`) so a long-running operator does not export stale
series. A registry is injected so unit tests never share global state.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterable, Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from lagpilot import __version__

GROUP = ("namespace", "name")
# the statuses a condition can have (API conventions): each condition type of a group exports one
# series per status, 1 for the current one and 0 for the others (kube-state-metrics' convention),
# so a status flip changes a value, not the series set
CONDITION_STATUSES = ("True", "False", "Unknown")


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY):
        def g(n: str, d: str, extra: Iterable[str] = ()) -> Gauge:
            return Gauge(n, d, GROUP + tuple(extra), registry=registry)

        self.partition_lag = g(
            "lagpilot_partition_lag_records",
            "Records not yet committed by the group, per partition.",
            ("partition",),
        )
        self.partition_rate = g(
            "lagpilot_partition_produce_rate_records_per_second",
            "Smoothed produce rate per partition.",
            ("partition",),
        )
        self.total_lag = g("lagpilot_lag_records", "Records not yet committed, all partitions.")
        self.projected = g(
            "lagpilot_projected_catch_up_seconds",
            "Projected catch-up time at the current replica count (+Inf: never).",
        )
        self.sla = g("lagpilot_sla_seconds", "The group's catch-up SLA.")
        self.desired = g("lagpilot_desired_replicas", "Replicas the last decision asked for.")
        self.replicas = g("lagpilot_replicas", "Replicas of the consumer Deployment.")
        self.partitions = g("lagpilot_partitions", "Partition count of the topic.")
        self.produce_rate = g(
            "lagpilot_produce_rate_records_per_second", "Smoothed produce rate of the whole topic."
        )
        self.capacity = g(
            "lagpilot_capacity_records_per_second",
            "Records one consumer processes per busy second (from commit metadata).",
        )
        self.data_loss = g(
            "lagpilot_data_loss_records",
            "Records deleted by retention before the group consumed them (cumulative).",
        )
        self.decisions = Counter(
            "lagpilot_scale_decisions_total",
            "Scale decisions applied, by direction.",
            (*GROUP, "direction"),
            registry=registry,
        )
        self.errors = Counter(
            "lagpilot_observe_errors_total",
            "Failed observation cycles, by reason.",
            (*GROUP, "reason"),
            registry=registry,
        )
        self.cycle_seconds = Histogram(
            "lagpilot_cycle_duration_seconds",
            "Duration of one observe-decide-act cycle.",
            registry=registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 5, 10, 30),
        )
        # operator-wide (no group labels): Kafka requests by kind, to show they do not grow with the
        # number of CRs on a cluster (cluster_view: one shared view per interval); see docs/operator.md "Scale"
        self.kafka_requests = Counter(
            "lagpilot_kafka_requests_total",
            "Kafka requests the operator issued, by kind (describe_topics, "
            "list_offsets, offset_fetch, admin_other).",
            ("kind",),
            registry=registry,
        )
        self.kube_requests = Counter(
            "lagpilot_kube_requests_total",
            "Kubernetes API requests made through the kubernetes client "
            "(not kopf's own watches and event posts), by HTTP verb.",
            ("verb",),
            registry=registry,
        )
        # leader election (run.py, docs/operator.md "Two instances"): 1 while this instance holds its
        # Lease(s) and reconciles, 0 while it stands by
        self.leader = Gauge(
            "lagpilot_operator_leader",
            "1 when this operator instance holds its leader Lease(s) and reconciles, 0 on standby.",
            registry=registry,
        )
        # status as metrics, for alert rules and dashboards (charts/lagpilot, docs/observability.md)
        self.max_replicas = g("lagpilot_max_replicas", "spec.scaling.maxReplicas of the group.")
        self.oldest_age = g(
            "lagpilot_partition_oldest_record_age_seconds",
            "Age of the oldest record not yet processed, per lagging partition.",
            ("partition",),
        )
        self.condition = g(
            "lagpilot_status_condition",
            "Status of each condition type of the group: 1 for its current status "
            "(True, False or Unknown), 0 for the other two.",
            ("type", "status"),
        )
        self.condition_reason = g(
            "lagpilot_status_condition_reason",
            "1 for the current reason of each condition type of the group (the "
            "series of a former reason is removed).",
            ("type", "reason"),
        )
        # per-partition offsets as the operator last read them, so users can rate() them (produce
        # rate: log end; consume rate: committed); a partition without a committed offset has no
        # committed series
        self.log_end_offset = g(
            "lagpilot_partition_log_end_offset",
            "Log-end offset (next offset to be written) of the partition.",
            ("partition",),
        )
        self.committed_offset = g(
            "lagpilot_partition_committed_offset",
            "Offset the group has committed on the partition.",
            ("partition",),
        )
        # operator-wide: which build runs (value 1; the labels carry the information)
        self.build_info = Gauge(
            "lagpilot_build_info",
            "lagpilot operator build information (value 1).",
            ("version", "python_version"),
            registry=registry,
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.recommend_only = g(
            "lagpilot_recommend_only",
            "1 when the group is in spec.mode Recommend (lagpilot_desired_replicas is then "
            "a recommendation, not applied), 0 in mode Act.",
        )
        self.drain_tasks = g(
            "lagpilot_drain_tasks",
            "Sub-ranges (Spark tasks) of the current drain, by state (done, remaining).",
            ("state",),
        )
        self._lock = threading.Lock()
        self._partitions_seen: dict[tuple[str, str], set[str]] = {}
        self._conditions_seen: dict[tuple[str, str], set[str]] = {}
        self._reasons_seen: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._committed_seen: dict[tuple[str, str], set[str]] = {}
        self._aged_seen: dict[tuple[str, str], set[str]] = {}

    def observe_group(
        self,
        namespace: str,
        name: str,
        *,
        partition_lag: Mapping[int, int],
        partition_rate: Mapping[int, float],
        total_lag: int,
        projected_s: float | None,
        sla_s: float,
        desired: int,
        replicas: int,
        produce_rate: float,
        capacity: float | None,
        data_loss: int,
        log_end: Mapping[int, int] | None = None,
        committed: Mapping[int, int | None] | None = None,
    ) -> None:
        """`log_end`/`committed`: per-partition offsets (None: not known this cycle; a partition the
        group never committed on has committed None and no series)."""
        key = (namespace, name)
        parts = {str(p) for p in partition_lag}
        done = {str(p) for p, c in (committed or {}).items() if c is not None}
        with self._lock:
            for gone in self._partitions_seen.get(key, set()) - parts:
                self._remove(self.partition_lag, namespace, name, gone)
                self._remove(self.partition_rate, namespace, name, gone)
                self._remove(self.log_end_offset, namespace, name, gone)
            self._partitions_seen[key] = parts
            if committed is not None:
                for gone in self._committed_seen.get(key, set()) - done:
                    self._remove(self.committed_offset, namespace, name, gone)
                self._committed_seen[key] = done
        for p, lag in partition_lag.items():
            self.partition_lag.labels(namespace, name, str(p)).set(lag)
            self.partition_rate.labels(namespace, name, str(p)).set(partition_rate.get(p, 0.0))
        for p, end in (log_end or {}).items():
            self.log_end_offset.labels(namespace, name, str(p)).set(end)
        for p, c in (committed or {}).items():
            if c is not None:
                self.committed_offset.labels(namespace, name, str(p)).set(c)
        self.total_lag.labels(namespace, name).set(total_lag)
        self.projected.labels(namespace, name).set(float("inf") if projected_s is None else projected_s)
        self.sla.labels(namespace, name).set(sla_s)
        self.desired.labels(namespace, name).set(desired)
        self.replicas.labels(namespace, name).set(replicas)
        self.partitions.labels(namespace, name).set(len(partition_lag))
        self.produce_rate.labels(namespace, name).set(produce_rate)
        if capacity is not None:
            self.capacity.labels(namespace, name).set(capacity)
        self.data_loss.labels(namespace, name).set(data_loss)

    def observe_status(
        self,
        namespace: str,
        name: str,
        *,
        conditions: Iterable[Mapping[str, object]],
        max_replicas: int | None = None,
        oldest_age_s: Mapping[int, float] | None = None,
        drain_done: int | None = None,
        drain_remaining: int | None = None,
    ) -> None:
        """The group's status conditions (per type: its status as three 0/1 series, its reason as one
        series), its replica cap, the oldest unprocessed record's age per partition and the current
        drain's tasks."""
        key = (namespace, name)
        status_of = {str(c.get("type")): str(c.get("status")) for c in conditions}
        reasons = {(str(c.get("type")), str(c.get("reason") or "")) for c in conditions}
        ages = {str(p): a for p, a in (oldest_age_s or {}).items()}
        with self._lock:
            types_gone = self._conditions_seen.get(key, set()) - set(status_of)
            self._conditions_seen[key] = set(status_of)
            reasons_gone = self._reasons_seen.get(key, set()) - reasons
            self._reasons_seen[key] = reasons
            aged_gone = self._aged_seen.get(key, set()) - set(ages) if oldest_age_s is not None else set()
            if oldest_age_s is not None:
                self._aged_seen[key] = set(ages)
        for t in types_gone:
            for st in CONDITION_STATUSES:
                self._remove(self.condition, namespace, name, t, st)
        for labels in reasons_gone:
            self._remove(self.condition_reason, namespace, name, *labels)
        for t, cur in status_of.items():
            for st in CONDITION_STATUSES:
                self.condition.labels(namespace, name, t, st).set(1 if st == cur else 0)
        for labels in reasons:
            self.condition_reason.labels(namespace, name, *labels).set(1)
        for p in aged_gone:
            self._remove(self.oldest_age, namespace, name, p)
        for p, a in ages.items():
            self.oldest_age.labels(namespace, name, p).set(a)
        if max_replicas is not None:
            self.max_replicas.labels(namespace, name).set(max_replicas)
        if drain_done is not None and drain_remaining is not None:
            self.drain_tasks.labels(namespace, name, "done").set(drain_done)
            self.drain_tasks.labels(namespace, name, "remaining").set(drain_remaining)

    def observe_mode(self, namespace: str, name: str, *, recommend_only: bool) -> None:
        self.recommend_only.labels(namespace, name).set(1 if recommend_only else 0)

    def count_decision(self, namespace: str, name: str, direction: str) -> None:
        self.decisions.labels(namespace, name, direction).inc()

    def count_kafka_request(self, kind: str, n: int = 1) -> None:
        self.kafka_requests.labels(kind).inc(n)

    def count_kube_request(self, verb: str) -> None:
        self.kube_requests.labels(verb).inc()

    def count_error(self, namespace: str, name: str, reason: str) -> None:
        self.errors.labels(namespace, name, reason).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted group."""
        with self._lock:
            parts = self._partitions_seen.pop((namespace, name), set())
            conds = self._conditions_seen.pop((namespace, name), set())
            reasons = self._reasons_seen.pop((namespace, name), set())
            committed = self._committed_seen.pop((namespace, name), set())
            aged = self._aged_seen.pop((namespace, name), set())
        for p in parts:
            self._remove(self.partition_lag, namespace, name, p)
            self._remove(self.partition_rate, namespace, name, p)
            self._remove(self.log_end_offset, namespace, name, p)
        for p in committed:
            self._remove(self.committed_offset, namespace, name, p)
        for p in aged:
            self._remove(self.oldest_age, namespace, name, p)
        for t in conds:
            for st in CONDITION_STATUSES:
                self._remove(self.condition, namespace, name, t, st)
        for labels in reasons:
            self._remove(self.condition_reason, namespace, name, *labels)
        for state in ("done", "remaining"):
            self._remove(self.drain_tasks, namespace, name, state)
        for gauge in (
            self.total_lag,
            self.projected,
            self.sla,
            self.desired,
            self.replicas,
            self.partitions,
            self.produce_rate,
            self.capacity,
            self.data_loss,
            self.max_replicas,
            self.recommend_only,
        ):
            self._remove(gauge, namespace, name)
        for counter in (self.decisions, self.errors):
            for counted in _label_sets(counter):
                if counted[:2] == (namespace, name):
                    self._remove(counter, *counted)

    @staticmethod
    def _remove(metric: Gauge | Counter, *labels: str) -> None:
        try:
            metric.remove(*labels)
        except KeyError:
            pass


def _label_sets(metric: Counter) -> Iterable[tuple[str, ...]]:
    # prometheus_client keeps children in `_metrics`; copy the keys under its lock-free read
    return list(getattr(metric, "_metrics", {}).keys())


_default: OperatorMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> OperatorMetrics:
    """The process-wide metrics on the default registry (created once)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = OperatorMetrics()
        return _default
