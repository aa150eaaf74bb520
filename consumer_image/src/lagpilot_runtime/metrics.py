"""Prometheus metrics, capacity estimation and the probe endpoints of the consumer.

One HTTP server on LAGPILOT_METRICS_PORT serves ``/metrics`` (Prometheus text format), ``/healthz``
(liveness: the loop came back to Kafka recently) and ``/readyz`` (readiness: a member of the group
with an assignment and a reachable broker).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from .jsonlog import fields as _fields

BATCH_SIZE_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000)
FIT_Z = 2.0  # the fitted busy time of a full batch is taken this many standard errors high (~97.5 %)
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ConsumerMetrics:
    """The ``lagpilot_consumer_*`` metrics, in a registry of their own (tests create many)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.records = Counter(
            "lagpilot_consumer_records_processed_total",
            "Records whose batch the handler processed successfully (dead-lettered records excluded)",
            registry=r,
        )
        self.batches = Counter(
            "lagpilot_consumer_batches_total",
            "Batches handed to the handler, by outcome",
            ["outcome"],
            registry=r,
        )
        self.batch_size = Histogram(
            "lagpilot_consumer_batch_size_records",
            "Records per batch",
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.batch_duration = Histogram(
            "lagpilot_consumer_batch_duration_seconds",
            "Busy time per batch: handler (with retries) + dead-lettering + commit",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.handler_errors = Counter(
            "lagpilot_consumer_handler_errors_total",
            "Handler calls that raised (each retry counts)",
            registry=r,
        )
        self.retries = Counter(
            "lagpilot_consumer_retries_total", "Handler calls that were retries", registry=r
        )
        self.dlq_records = Counter(
            "lagpilot_consumer_dlq_records_total", "Records sent to the dead-letter topic", registry=r
        )
        self.failed_records = Counter(
            "lagpilot_consumer_failed_records_total",
            "Records that still failed after retries, by policy applied",
            ["policy"],
            registry=r,
        )
        self.commits = Counter(
            "lagpilot_consumer_commits_total", "Offset commits, by outcome", ["outcome"], registry=r
        )
        self.rebalances = Counter(
            "lagpilot_consumer_rebalances_total", "Rebalance callbacks, by kind", ["kind"], registry=r
        )
        self.committed_offset = Gauge(
            "lagpilot_consumer_committed_offset",
            "Last offset committed by this consumer per assigned partition",
            ["topic", "partition"],
            registry=r,
        )
        self.lag = Gauge(
            "lagpilot_consumer_lag_records",
            "High watermark minus committed offset per assigned partition",
            ["topic", "partition"],
            registry=r,
        )
        self.assigned = Gauge(
            "lagpilot_consumer_assigned_partitions", "Partitions currently assigned", registry=r
        )
        self.paused = Gauge(
            "lagpilot_consumer_paused_partitions", "Partitions paused by the pause failure policy", registry=r
        )
        self.capacity = Gauge(
            "lagpilot_consumer_capacity_records_per_second",
            "Records per busy second (estimated at a full batch)",
            registry=r,
        )
        self.last_progress = Gauge(
            "lagpilot_consumer_last_progress_timestamp_seconds",
            "Unix time the loop last came back to Kafka",
            registry=r,
        )

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop per-partition series of a partition that is no longer ours."""
        for g in (self.committed_offset, self.lag):
            try:
                g.remove(topic, str(partition))
            except KeyError:
                pass


@dataclass
class CapacityEstimator:
    """Records per busy second, estimated for a *full* batch from recent batches.

    Busy time = handler (with retries) + dead-lettering + commit. Consume rate is useless to the
    operator (it equals the produce rate while the consumer keeps up); busy-time capacity is what
    one replica could do if it never waited. Small batches (the consumer is idle, batches close on
    the timeout) under-state it when the handler has a fixed cost per call, so when recent batches
    were not full, ``busy = fixed + per_record * n`` is fitted by least squares and evaluated at
    ``max_records``, taking the upper end (``FIT_Z`` standard errors) of the fitted busy time there:
    extrapolating from batches of a few records to a full one magnifies the noise of the busy times
    into the slope, and over-estimating is the operator's SLA risk. Exact costs are extrapolated
    exactly; never below the plain ratio (a lower bound when the fixed cost is >= 0). With full
    batches the plain ratio is used.

    The first batch observed (``first_is_setup``) is the handler's first call, which pays its one-off
    set-up (imports, connections, DDL): it is the estimate only until a second batch is observed
    (the demo's first report was 29.4/s for a 52/s consumer; a real one committed -8 % after 24
    full batches with it in the window).
    """

    max_records: int
    window: int = 50
    samples: deque[tuple[int, float]] = field(default_factory=deque)  # (records, busy seconds)
    first_is_setup: bool = True
    _first: tuple[int, float] | None = field(default=None, repr=False)
    _observed: int = field(default=0, repr=False)

    def observe(self, n: int, busy_s: float) -> None:
        if n <= 0 or busy_s <= 0:
            return
        self._observed += 1
        if self.first_is_setup and self._observed == 1:
            self._first = (n, busy_s)
            return
        self.samples.append((n, busy_s))
        while len(self.samples) > self.window:
            self.samples.popleft()

    def capacity(self) -> float | None:
        samples = list(self.samples) or ([self._first] if self._first is not None else [])
        if not samples:
            return None
        full = [(n, b) for n, b in samples if n >= 0.9 * self.max_records]
        if len(full) >= 3 or len(full) == len(samples):
            return _ratio(full)
        ratio = _ratio(samples)
        projected = _projected_at(samples, self.max_records)
        # with a fixed cost per call (intercept >= 0) bigger batches only amortise it further
        return ratio if projected is None else max(ratio, projected)


def _ratio(samples: list[tuple[int, float]]) -> float:
    """Records per second of handler time over the samples: (records, seconds) pairs."""
    return sum(n for n, _ in samples) / sum(b for _, b in samples)


def _projected_at(samples: list[tuple[int, float]], m: int) -> float | None:
    """Records per second at batches of ``m`` records from a least-squares line through the samples'
    (records, seconds), made cautious by FIT_Z standard errors of the fit at ``m``; None when the
    samples cannot carry a line (fewer than 3, sizes too alike, a negative slope or intercept)."""
    xs = [n for n, _ in samples]
    ys = [b for _, b in samples]
    k = len(xs)
    mx, my = sum(xs) / k, sum(ys) / k
    sxx = sum((x - mx) ** 2 for x in xs)
    if k < 3 or sxx <= 0 or max(xs) < 2 * min(xs):
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    if slope <= 0 or intercept < 0:
        return None
    residual_var = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True)) / (k - 2)
    se_at_m = math.sqrt(residual_var * (1 / k + (m - mx) ** 2 / sxx))
    return m / (intercept + slope * m + FIT_Z * se_at_m)


OUTSIDE_HANDLER_S = 120.0  # Health.outside_handler_s
STUCK_STACK_FRAMES = 16  # innermost frames of the loop's stack logged when it is found stuck

log = logging.getLogger("lagpilot.consumer")


def thread_stack(ident: int | None, frames: int = STUCK_STACK_FRAMES) -> list[str]:
    """``file:line function`` of the innermost ``frames`` frames of thread ``ident`` (no locals, no
    source lines: nothing of the data it holds); [] when the thread is gone or unknown."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return []
    # the standard library's walk, innermost first; no source lines read
    summary = traceback.StackSummary.extract(traceback.walk_stack(frame), limit=frames, lookup_lines=False)
    return [f"{f.filename}:{f.lineno} {f.name}" for f in summary]


@dataclass
class Health:
    """Probe state, written by the consuming thread, read by the HTTP thread."""

    stale_after_s: float
    clock: Callable[[], float] = time.monotonic
    last_progress: float = field(default=0.0)
    member: bool = False
    assigned: int = 0
    connected: bool = False
    paused: list[str] = field(default_factory=list)
    stopping: bool = False
    fatal: str = ""  # a fatal client error (e.g. a fenced static member): not live, restart the pod
    # the loop outside its handler (polls, commits, the hand-off's and the sink's progress reads) is
    # not live after this long without progress: those calls return within seconds, except one
    # that hangs — the client's synchronous commit has no timeout (confluent-kafka-python#1801);
    # only a batch's handler may run up to ``stale_after_s`` (max.poll.interval)
    outside_handler_s: float = OUTSIDE_HANDLER_S
    handler_since: float | None = None
    loop_thread: int | None = None  # the consuming thread (its stack is logged once when found stuck)
    _stuck_logged: bool = False

    def __post_init__(self) -> None:
        self.last_progress = self.clock()

    def progress(self) -> None:
        self.last_progress = self.clock()
        self._stuck_logged = False

    def handler_started(self) -> None:
        self.handler_since = self.clock()

    def handler_done(self) -> None:
        """The handler returned (or raised): progress; the loop is outside it again."""
        self.handler_since = None
        self.progress()

    def live(self) -> tuple[bool, dict[str, Any]]:
        age = self.clock() - self.last_progress
        detail: dict[str, Any] = {"last_progress_age_s": round(age, 3), "stale_after_s": self.stale_after_s}
        if self.fatal:
            detail["fatal"] = self.fatal
        if self.handler_since is None and age > min(self.stale_after_s, self.outside_handler_s):
            detail["stuck"] = (
                f"no progress for {age:.0f} s outside the handler (a Kafka or sink call that did not return)"
            )
            if not self._stuck_logged:  # where it hangs, once per episode (the probe asks every 10 s)
                self._stuck_logged = True
                log.error(
                    "the consuming loop is stuck outside its handler",
                    extra=_fields(
                        event="loop_stuck", seconds=round(age, 1), stack=thread_stack(self.loop_thread)
                    ),
                )
            return False, detail
        return age <= self.stale_after_s and not self.fatal, detail

    def ready(self) -> tuple[bool, dict[str, Any]]:
        ok = self.member and self.connected and not self.stopping
        return ok, {
            "member": self.member,
            "assigned_partitions": self.assigned,
            "connected": self.connected,
            "paused_partitions": self.paused,
            "stopping": self.stopping,
        }


class MetricsServer:
    """``/metrics``, ``/healthz``, ``/readyz`` on one port, in a daemon thread."""

    def __init__(self, metrics: ConsumerMetrics, health: Health, port: int, host: str = "0.0.0.0") -> None:
        registry = metrics.registry

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server API
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
                elif path in ("/healthz", "/readyz"):
                    ok, detail = health.live() if path == "/healthz" else health.ready()
                    body = json.dumps({"ok": ok, **detail}).encode()
                    ctype, code = "application/json", 200 if ok else 503
                else:
                    body, ctype, code = b"not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # probes every few seconds: keep logs quiet
                pass

        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="lagpilot-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
