"""The warm drain runtime: one long-lived Spark driver per BatchConsumerGroup that runs drain plans.

A cold drain spends most of its start-up before it reads a record: spark-submit and the driver JVM,
the SparkSession, the Kafka source's first planning (class loading, its offset reader), the Python
worker daemon and its forks. ``lagpilot drain --serve`` does all of that once, with the drain
Job's own image and environment (the same handler, sink and credentials, as secretKeyRef env), and
then runs drain plans on request with the session and workers already warm.

The drain Job stays the unit the operator launches, observes, retries and cancels. When its
environment names a runtime (``LAGPILOT_DRAIN_RUNTIME_URL``), its ``lagpilot drain`` process sends
its plan there, waits, and exits with the runtime's result (same exit codes, same termination
message); when nothing listens there it drains by itself, cold, as without a runtime.

Exactness is the drain's own (progress.py: progress per sub-range in Kafka and in the sink; a
retry skips what is recorded). The runtime adds two rules so that no two attempts of one drain
ever run at once: it runs one plan at a time (a second request gets 409 and its caller waits), and
when the caller goes away (its Job deleted, its pod killed) it cancels that plan's Spark jobs and
finishes it (tasks interrupted, in-flight sink transactions rolled back) before it takes the next.

Who may send a plan (issue 23, C1; docs/drain.md "Who may send the warm runtime a plan"): only the
operator, through a drain Job. The body is ``{"plan": <plan text>, "auth": <plan_auth.PlanAuth>}``:
the operator's HMAC-SHA256 of the exact plan text with the CR uid, drain id, attempt and an expiry,
under the CR's key (``LAGPILOT_DRAIN_RUNTIME_KEY``, from the Secret the operator owns; the runtime
drops it from its environment before Spark starts). The runtime checks it (constant time), its
own CR uid, the expiry, that the signed drain id is the plan's, and that (drain id, attempt) is
newer than every plan it took before (a replay is refused); a refused plan never reaches the drain.
Signed plans always run ``read_committed``. Bodies (256 KiB), plan counts (drain_plan bounds),
connections (16 at once) and each socket read/write (10 s) are bounded.

HTTP on 0.0.0.0:``LAGPILOT_DRAIN_RUNTIME_PORT``: ``GET /healthz`` 200 once warm (503 before), with
``{"warm", "busy", "running"}`` (``running``: a digest of the running plan's signature, which only
its own caller can recognise; never the drain id); ``POST /drains`` → 200
``{"exit": code, "message": ..., "summary": {...}}`` when the attempt ended, 401 refused (unsigned,
forged, expired, another CR's, a replay), 409 busy, 503 not warm yet, 400 a plan for another
topic/group, 411/413 no or too large a body.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import logging
import os
import select
import signal
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .. import plan_auth
from ..config import ConsumerConfig
from ..jsonlog import fields as _fields
from . import job as drain_job
from . import spark as drain_spark
from .plan import DrainPlan, SubRange, split_ranges
from .progress import progress_consumer
from .task import process_start_time

log = logging.getLogger("lagpilot.drain.runtime")

RUNTIME_URL_ENV = "LAGPILOT_DRAIN_RUNTIME_URL"
PORT_ENV = "LAGPILOT_DRAIN_RUNTIME_PORT"
PARALLELISM_ENV = "LAGPILOT_DRAIN_MAX_PARALLELISM"
DEFAULT_PORT = 8093
BUSY_WAIT_S = 120.0  # a caller waits this long for the runtime to finish (or cancel) another plan
CONNECT_TIMEOUT_S = 5.0
# a drain Job keeps trying to connect this long before it drains by itself: a NetworkPolicy agent
# admits a new pod's IP a moment after the pod started (kube-router on the real node: ~1-2 s;
# docs/drain.md "Warm drain runtime"); a connection that never opened sent no plan, so a retry is safe
CONNECT_WAIT_ENV = "LAGPILOT_DRAIN_RUNTIME_CONNECT_WAIT_SECONDS"
CONNECT_WAIT_S = 20.0
CONNECT_RETRY_S = 0.5
KEEP_WARM_EVERY_S = 40.0  # < Spark's one-minute idle timeout of Python workers
STOP_WAIT_S = 20.0  # a terminated Job process waits this long for the runtime to end its plan
MAX_BODY_BYTES = 256 * 1024  # a plan travels as one env var (<= 128 KiB) plus its signature
REQUEST_TIMEOUT_S = 10.0  # each socket read/write of the runtime's HTTP side (a silent caller is dropped)
MAX_CONNECTIONS = 16  # handler threads at once; more connections get 503 and are closed
# while it waits for the plan's outcome, the Job's process checks the runtime's /healthz every
# HEARTBEAT_S (each check times out after as long) and gives the attempt up after HEARTBEAT_MISSES
# checks in a row that did not show this plan running: a runtime that stopped answering (SIGSTOP,
# its node frozen or lost) fails the attempt in about (misses x 2 x heartbeat) instead of never
HEARTBEAT_ENV = "LAGPILOT_DRAIN_RUNTIME_HEARTBEAT_SECONDS"
HEARTBEAT_S = 10.0
HEARTBEAT_MISSES = 3
ANSWER_TIMEOUT_S = 60.0  # reading the outcome once it started arriving


@dataclass(frozen=True)
class Outcome:
    """One drain attempt's end, as the drain Job reports it (exit code, termination message)."""

    exit: int
    message: str = ""
    summary: Mapping[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps({"exit": self.exit, "message": self.message, "summary": self.summary})

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        d = json.loads(text)
        return cls(int(d["exit"]), str(d.get("message") or ""), d.get("summary"))


def outcome_of(run: Callable[[], Mapping[str, Any]]) -> Outcome:
    """Run one attempt and map its end to the drain Job's exit codes (shared by cold and warm)."""
    try:
        return Outcome(drain_job.EXIT_OK, "", run())
    except drain_job.RetentionError as exc:
        return Outcome(drain_job.EXIT_DATA_LOSS, str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure ends the attempt; the operator retries
        return Outcome(drain_job.EXIT_FAILED, f"drain failed: {drain_job._short_error(exc)}")


def running_token(auth: plan_auth.PlanAuth) -> str:
    """What healthz shows of the running plan: a digest of its signature (only the caller holding
    that signature recognises it; it names no drain)."""
    return hashlib.sha256(auth.signature.encode()).hexdigest()[:16]


def envelope(body: str) -> tuple[str, plan_auth.PlanAuth]:
    """(plan text, signature) of a request body; Refused when it is not a signed plan."""
    try:
        d = json.loads(body)
    except ValueError:
        raise plan_auth.Refused("not a signed plan") from None
    if not isinstance(d, dict) or not isinstance(d.get("plan"), str) or not isinstance(d.get("auth"), dict):
        raise plan_auth.Refused("not a signed plan")
    return d["plan"], plan_auth.PlanAuth.from_dict(d["auth"])


def check_plan(plan: DrainPlan, cfg: ConsumerConfig) -> None:
    if plan.topic != cfg.topic or plan.group_id != cfg.group_id:
        raise ValueError("the plan's topic/groupId differ from LAGPILOT_TOPIC/LAGPILOT_GROUP_ID")


# ---- the runtime (server side) -------------------------------------------------------------------


def _discard(batches: Iterable[Any]) -> Iterator[Any]:
    """The warm-up's map: counts the records it is given (never calls the handler)."""
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pylist([{"n": n}], schema=pa.schema([("n", pa.int64())]))


def peer_closed(sock: socket.socket) -> bool:
    """True once the caller closed its end (EOF) or reset it; it sends nothing after its request."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def warm_up_work(watermarks: Mapping[int, tuple[int, int]], parallelism: int) -> list[tuple[SubRange, int]]:
    """The warm-up's work (pure): the sub-ranges a plan of ``parallelism`` tasks over these
    partitions would have (``split_ranges`` with that split factor), each one record long, so its
    Kafka relations have the shape of a real drain's (``drain_spark.relation_options``: one relation
    per sub-range index, every partition in each). ``watermarks``: partition -> (low, high);
    empty partitions are left out."""
    with_records = {p: (lo, hi) for p, (lo, hi) in watermarks.items() if hi > lo}
    if not with_records:
        return []
    factor = max(1, parallelism // len(with_records))
    ranges = {p: (lo, min(hi, lo + factor)) for p, (lo, hi) in with_records.items()}
    return [(s, s.start) for s in split_ranges(ranges, factor)]


class DrainRuntime:
    """A warm SparkSession for one group, running one drain plan at a time."""

    def __init__(
        self,
        cfg: ConsumerConfig,
        master: str | None,
        jars: Sequence[str],
        extra_conf: Mapping[str, str],
        parallelism: int,
        key: bytes = b"",
        cr_uid: str = "",
        part_key: bytes = b"",
    ) -> None:
        self.cfg, self.jars, self.extra_conf = cfg, list(jars), dict(extra_conf)
        self.master = master or f"local[{max(parallelism, 1)},4]"
        self.parallelism = max(parallelism, 1)
        self.spark: Any = None
        self.ready = threading.Event()
        self._plan_lock = threading.Lock()  # held by a plan only: plans never run beside each other
        self.current: str | None = None
        self.running: str | None = None  # running_token of the running plan (healthz)
        self.served = 0
        self.key, self.cr_uid = key, cr_uid  # the CR's plan key and uid (serve(): from the environment)
        self.part_key = (
            part_key  # the CR's drain part key: a busy drain's next parts (drain_job.wait_for_part)
        )
        self.taken: tuple[int, int] | None = (
            None  # the newest (drain id, attempt) ever taken: older ones are replays
        )
        self.kafka_warm = False  # the warm-up read records (an empty topic at start: tried again, rewarm())

    def warm_up(self) -> dict[str, float]:
        """Start the session, the worker daemon and the Kafka source once; returns the seconds spent."""
        t0 = time.time()
        marks: dict[str, float | None] = {"process_start": process_start_time(), "main_entered": t0}
        plan = DrainPlan("runtime", self.cfg.topic, self.cfg.group_id, (), parallelism=self.parallelism)
        self.spark = drain_spark.build_session(plan, self.master, self.jars, self.extra_conf, marks)
        drain_spark.warm_workers(self.spark, marks).join()
        self._warm_kafka_source()
        marks["kafka_source_warm"] = time.time()
        self.keep_workers()
        marks["workers_forked"] = time.time()
        took = {
            k: round(float(v) - t0, 2) for k, v in marks.items() if v is not None and k != "process_start"
        }
        self.ready.set()
        log.info("drain runtime warm", extra=_fields(event="drain_runtime_ready", master=self.master, **took))
        return took

    def _warm_kafka_source(self) -> None:
        """Run a drain-shaped job before the first real plan arrives: the relations a plan of
        ``parallelism`` tasks over every partition would have (``warm_up_work``: one record per
        sub-range), through the drain's own columns and Arrow path, and the handler imported in the
        driver (``catch_up_to_sink`` loads it for each plan). Read uncommitted (the same reader
        classes; offsets below the high watermark never wait for an open transaction's end).
        Reading one record of partition 0 only (before) left the first drain 3x slower than the next (on the node, load ~20: relations planned 4.6 s vs 2.1 s, first
        record 15.2 s vs 5.5 s after the plan arrived). Best effort: a failure only costs the
        warm-up (the first drain plans cold)."""
        from confluent_kafka import TopicPartition

        try:
            from ..handler import load_handler

            load_handler(self.cfg.handler_spec)
        except Exception as exc:  # noqa: BLE001 - the drain reports a real import error itself
            log.info(
                "loading the handler for the warm-up failed",
                extra=_fields(event="drain_runtime_warm_failed", error=drain_job._short_error(exc)),
            )
        try:
            c = progress_consumer(self.cfg, f"{self.cfg.group_id}.lagpilot-drain-runtime")
            try:
                meta = c.list_topics(self.cfg.topic, timeout=30).topics[self.cfg.topic]
                marks = {
                    p: c.get_watermark_offsets(TopicPartition(self.cfg.topic, p), timeout=30)
                    for p in sorted(meta.partitions)
                }
            finally:
                c.close()
            work = warm_up_work(marks, self.parallelism)
            if not work:
                return
            plan = DrainPlan(
                "warm-up",
                self.cfg.topic,
                self.cfg.group_id,
                tuple(s for s, _ in work),
                parallelism=self.parallelism,
            )
            opts = drain_spark.spark_kafka_options(self.cfg, False)
            frame = drain_spark.build_frame(self.spark, plan, work, opts)
            self.spark.sparkContext.setJobGroup(
                "lagpilot-drain-runtime-warm-up", "warm-up", interruptOnCancel=True
            )
            read = sum(int(r["n"]) for r in frame.drop("topic").mapInArrow(_discard, "n long").collect())
            self.kafka_warm = read > 0
        except Exception as exc:  # noqa: BLE001
            log.info(
                "warming the Kafka source failed",
                extra=_fields(event="drain_runtime_warm_failed", error=drain_job._short_error(exc)),
            )

    def rewarm(self) -> bool:
        """The drain-shaped warm-up again while the topic had no record to read at start (a new
        topic: the executors' Kafka readers were never started), unless a plan runs. True when it
        ran and read records: its tasks used every slot's worker just now, so this round's
        keep-warm job is not needed (seen on the node at load 30: the two back to back, 46 s of
        warm-up and then 12 more tasks, overlapped the first hand-off). Takes the plan lock: a plan
        arriving meanwhile gets 409 and its caller retries."""
        if self.kafka_warm or not self.ready.is_set() or not self._plan_lock.acquire(blocking=False):
            return False
        try:
            t0 = time.time()
            self._warm_kafka_source()
            if self.kafka_warm:
                log.info(
                    "drain runtime: Kafka readers warm",
                    extra=_fields(event="drain_runtime_rewarmed", seconds=round(time.time() - t0, 2)),
                )
            return self.kafka_warm
        finally:
            self._plan_lock.release()

    def keep_workers(self) -> bool:
        """Run one tiny task per slot at once, unless a plan runs: Spark forks a Python worker per
        concurrent task and kills workers idle for a minute, so without this every plan after a quiet
        minute forks its workers again (measured: the first plan's tasks took 4.7 s to their first
        record, the next ones 0.8-1.0 s). Returns False when a plan was running (nothing done).

        It does not take the plan lock: the job reads and writes nothing and runs in its own job
        group (job groups are per thread: PySpark's pinned-thread mode, the default), so a plan that
        arrives meanwhile starts at once beside it, and cancelling that plan never touches it."""
        if self.current is not None:  # a plan's tasks keep the workers alive
            return False
        try:
            self.spark.sparkContext.setJobGroup(
                "lagpilot-drain-runtime-keep-warm", "keep workers", interruptOnCancel=True
            )
            self.spark.range(0, self.parallelism, numPartitions=self.parallelism).mapInArrow(
                _discard, "n long"
            ).collect()
            return True
        except Exception as exc:  # noqa: BLE001 - best effort
            log.info(
                "keeping the workers warm failed",
                extra=_fields(event="drain_runtime_warm_failed", error=drain_job._short_error(exc)),
            )
            return False

    def _refused(self, reason: str) -> tuple[int, Outcome]:
        log.warning("drain plan refused", extra=_fields(event="drain_runtime_refused", reason=reason))
        return 401, Outcome(drain_job.EXIT_FAILED, f"drain runtime refused the plan: {reason}")

    def serve_plan(
        self, body: str, caller_gone: Callable[[], bool], now: Callable[[], float] = time.time
    ) -> tuple[int, Outcome]:
        """Run one signed plan; (HTTP status, outcome). Cancels the plan's Spark jobs if the caller goes away.
        The signature is checked before anything else (an unsigned caller learns nothing, not even
        "busy"); a refused plan never reaches the drain."""
        if not self.ready.is_set():
            return 503, Outcome(drain_job.EXIT_FAILED, "drain runtime not warm yet")
        try:
            text, auth = envelope(body)
            plan_auth.verify(self.key, text, auth, self.cr_uid, now())
        except plan_auth.Refused as exc:
            return self._refused(str(exc))
        try:
            plan = DrainPlan.from_json(text)
            check_plan(plan, self.cfg)
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            return 400, Outcome(drain_job.EXIT_CONFIG, f"bad drain configuration: {exc}")
        if plan.drain_id != auth.drain_id:
            return self._refused("the signed drain id is not the plan's")
        if not plan.drain_id.isdigit():  # the operator's drain ids are numbers: they order attempts
            return self._refused("a drain id is a number")
        order = (int(plan.drain_id), auth.attempt)
        if not self._plan_lock.acquire(blocking=False):
            return 409, Outcome(drain_job.EXIT_FAILED, "drain runtime busy with another plan")
        try:
            if self.taken is not None and order <= self.taken:
                return self._refused(
                    f"replay: drain {order[0]} attempt {order[1]} is not newer than one "
                    "this runtime already took"
                )
            self.taken = order
            # a drain reads committed records only: the split is the read_committed end offset (LSO)
            plan = dataclasses.replace(plan, read_committed=True)
            self.current, self.running = plan.drain_id, running_token(auth)
            received = time.time()
            marks: dict[str, float | None] = {"process_start": received, "main_entered": received}
            result: list[Outcome] = []
            gone = threading.Event()  # a busy drain waiting for its next part stops waiting too
            busy: dict[str, Any] = {"part_key": self.part_key, "stopped": gone.is_set} if plan.busy else {}
            worker = threading.Thread(
                target=lambda: result.append(
                    outcome_of(
                        lambda: drain_job.run(
                            plan,
                            self.cfg,
                            self.master,
                            self.jars,
                            self.extra_conf,
                            marks,
                            warm_session=self.spark,
                            **busy,
                        )
                    )
                ),
                name=f"drain-{plan.drain_id}",
                daemon=True,
            )
            worker.start()
            cancelled = False
            while worker.is_alive():
                worker.join(0.5)
                if not cancelled and worker.is_alive() and caller_gone():
                    cancelled = True
                    gone.set()
                    log.warning(
                        "the drain's caller went away: cancelling its Spark jobs",
                        extra=_fields(event="drain_runtime_cancel", drain=plan.drain_id),
                    )
                    self.spark.sparkContext.cancelJobGroup(drain_job.job_group(plan))
            outcome = result[0] if result else Outcome(drain_job.EXIT_FAILED, "drain failed: no result")
            self.served += 1
            log.info(
                "drain runtime served a plan",
                extra=_fields(
                    event="drain_runtime_served",
                    drain=plan.drain_id,
                    exit=outcome.exit,
                    cancelled=cancelled,
                    seconds=round(time.time() - received, 2),
                    served=self.served,
                    records=(outcome.summary or {}).get("records"),
                ),
            )
            return 200, outcome
        finally:
            self.current = self.running = None
            self._plan_lock.release()


def _handler_class(runtime: DrainRuntime) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = REQUEST_TIMEOUT_S  # every socket read and write: a silent caller is dropped

        def log_message(self, fmt: str, *args: Any) -> None:  # structured logs only
            pass

        def _reply(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # http.server's naming
            if self.path.rstrip("/") == "/healthz":
                ok = runtime.ready.is_set()
                self._reply(
                    200 if ok else 503,
                    json.dumps({"warm": ok, "busy": runtime.running is not None, "running": runtime.running}),
                )
            else:
                self._reply(404, "{}")

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/drains":
                self._reply(404, "{}")
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.strip().isdigit():
                self.close_connection = True
                self._reply(
                    411, json.dumps({"exit": drain_job.EXIT_CONFIG, "message": "Content-Length needed"})
                )
                return
            if int(length) > MAX_BODY_BYTES:  # refused unread
                self.close_connection = True
                self._reply(
                    413,
                    json.dumps(
                        {
                            "exit": drain_job.EXIT_CONFIG,
                            "message": f"a plan has at most {MAX_BODY_BYTES} bytes",
                        }
                    ),
                )
                return
            text = self.rfile.read(int(length)).decode(errors="replace")
            status, outcome = runtime.serve_plan(text, lambda: peer_closed(self.connection))
            try:
                self._reply(status, outcome.to_json())
            except OSError:  # the caller is gone; its outcome is in the log
                pass

    return Handler


class BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most ``max_connections`` handler threads: a connection beyond
    them gets 503 and is closed at once (with the handler's socket timeout, a flood of silent
    connections costs at most that many threads for REQUEST_TIMEOUT_S each)."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int
    ) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max(1, max_connections))

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def make_server(runtime: DrainRuntime, host: str, port: int) -> BoundedServer:
    return BoundedServer((host, port), _handler_class(runtime), MAX_CONNECTIONS)


def runtime_identity(env: Mapping[str, str]) -> tuple[bytes, str]:
    """(key, CR uid) from the runtime pod's environment; ValueError naming what is missing or wrong."""
    raw = env.get(plan_auth.KEY_ENV)
    if not raw:
        raise ValueError(f"{plan_auth.KEY_ENV} is not set (the CR's drain runtime key Secret)")
    try:
        key = plan_auth.parse_key(raw)
    except ValueError:
        raise ValueError(f"{plan_auth.KEY_ENV} is not a {plan_auth.KEY_BYTES}-byte hex key") from None
    want = env.get(plan_auth.KEY_ID_ENV)
    if want and plan_auth.key_id(key) != want:
        raise ValueError(
            f"{plan_auth.KEY_ENV} is not the key the operator signs with ({plan_auth.KEY_ID_ENV})"
        )
    uid = env.get(plan_auth.CR_UID_ENV) or ""
    if not uid:
        raise ValueError(f"{plan_auth.CR_UID_ENV} is not set")
    return key, uid


def serve(
    cfg: ConsumerConfig,
    master: str | None,
    jars: Sequence[str],
    extra_conf: Mapping[str, str],
    env: Mapping[str, str] | None = None,
) -> int:
    """`lagpilot drain --serve`: listen first (healthz says 503), warm up, then serve until killed."""
    e = os.environ if env is None else env
    port = int(e.get(PORT_ENV) or DEFAULT_PORT)
    parallelism = int(e.get(PARALLELISM_ENV) or 16)
    try:
        key, cr_uid = runtime_identity(e)
    except ValueError as exc:
        msg = f"bad drain configuration: {exc}"
        log.error(msg, extra=_fields(event="drain_config_error"))
        drain_job._termination_message(msg)
        return drain_job.EXIT_CONFIG
    # Spark's JVM and its Python workers (the user's handler) start after this: not in their environment
    os.environ.pop(plan_auth.KEY_ENV, None)
    try:  # optional: without it a busy drain's driver here takes no next part (it ends; the operator retries)
        part_key = plan_auth.parse_key(e.get(plan_auth.PART_KEY_ENV) or "")
    except ValueError:
        part_key = b""
    os.environ.pop(plan_auth.PART_KEY_ENV, None)
    runtime = DrainRuntime(
        cfg, master, jars, extra_conf, parallelism, key=key, cr_uid=cr_uid, part_key=part_key
    )
    server = make_server(runtime, "0.0.0.0", port)
    threading.Thread(target=server.serve_forever, name="drain-runtime-http", daemon=True).start()
    log.info(
        "drain runtime listening",
        extra=_fields(event="drain_runtime_listening", port=port, parallelism=parallelism),
    )
    # PID 1 of its container: the kernel ignores a signal left at its default action there, so
    # without this a SIGTERM (scale-down, rollout, the CR deleted) waited out the grace period
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        runtime.warm_up()
        while True:  # Spark kills Python workers idle for a minute: keep them (a few ms of CPU)
            time.sleep(KEEP_WARM_EVERY_S)
            if not runtime.rewarm():
                runtime.keep_workers()
    except (KeyboardInterrupt, Terminated):
        log.info("drain runtime stopping (SIGTERM)", extra=_fields(event="drain_runtime_stopping"))
    finally:
        server.shutdown()
        if runtime.spark is not None:
            runtime.spark.stop()
    return drain_job.EXIT_OK


# ---- the drain Job's side (client) ---------------------------------------------------------------


class Unreachable(Exception):
    """Nothing warm answers at the runtime's address: the Job drains by itself."""


class Terminated(Exception):
    """The process was asked to stop (SIGTERM): the drain Job's (the Job deleted, the attempt
    cancelled) or the warm runtime's (its pod deleted)."""


def raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def _keepalive(sock: socket.socket) -> None:
    """TCP keepalive on the plan's connection: a runtime whose node is gone (no FIN, no RST) is
    noticed by the kernel too, not only by the heartbeat below."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    except OSError:
        pass


def heartbeat_settings(env: Mapping[str, str] | None = None) -> tuple[float, float, int]:
    """(seconds between checks, a check's timeout, unanswered checks before giving up) from
    ``LAGPILOT_DRAIN_RUNTIME_HEARTBEAT_SECONDS`` (default 10; the timeout is the same, 3 misses)."""
    e = os.environ if env is None else env
    try:
        every = float(e.get(HEARTBEAT_ENV) or HEARTBEAT_S)
    except ValueError:
        every = HEARTBEAT_S
    every = max(0.05, every)
    return every, every, HEARTBEAT_MISSES


def connect_wait_setting(env: Mapping[str, str] | None = None) -> float:
    """Seconds a drain Job keeps trying to open the runtime's connection (``CONNECT_WAIT_ENV``,
    default CONNECT_WAIT_S; 0: one try)."""
    e = os.environ if env is None else env
    try:
        return max(0.0, float(e.get(CONNECT_WAIT_ENV) or CONNECT_WAIT_S))
    except ValueError:
        return CONNECT_WAIT_S


def probe(host: str, port: int, timeout_s: float) -> str | None:
    """``running`` of the runtime's ``/healthz`` (the running plan's token; "" when idle); None when it
    does not answer in time."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        running = json.loads(resp.read().decode() or "{}").get("running")
        return "" if running is None else str(running)
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def _await_answer(
    conn: http.client.HTTPConnection,
    host: str,
    port: int,
    token: str,
    heartbeat_s: float,
    probe_timeout_s: float,
    max_misses: int,
) -> bool:
    """Wait until the runtime's answer starts arriving on ``conn`` (True), checking between
    heartbeats that the runtime still runs this plan; False after ``max_misses`` checks in a row
    unanswered (or answered by a runtime that does not run it): the runtime stopped answering."""
    misses = 0
    while True:
        readable, _, _ = select.select([conn.sock], [], [], heartbeat_s)
        if readable:
            return True
        busy = probe(host, port, probe_timeout_s)
        # busy "" (idle): the plan just ended and its answer is on the way, or the runtime lost it
        # (restarted: then the connection is reset and reads fail); one more round decides
        misses = 0 if token and busy == token else misses + 1
        if misses >= max_misses:
            return False


def _heartbeat(
    heartbeat_s: float | None, probe_timeout_s: float | None, max_misses: int | None
) -> tuple[float, float, int]:
    """(seconds between heartbeats, a probe's timeout, misses in a row that end the wait): the
    arguments where given, else the environment's settings (``heartbeat_settings``)."""
    every, check_timeout, misses = heartbeat_settings()
    every = every if heartbeat_s is None else heartbeat_s
    check_timeout = check_timeout if probe_timeout_s is None else probe_timeout_s
    misses = misses if max_misses is None else max(1, max_misses)
    return every, check_timeout, misses


def _connect_wait(connect_wait_s: float | None) -> float:
    return connect_wait_setting() if connect_wait_s is None else max(0.0, connect_wait_s)


def _request_body(plan: DrainPlan, plan_text: str | None, auth: plan_auth.PlanAuth | None) -> tuple[str, str]:
    """The POST's body (the plan as the Job got it, its signature) and the token ``/healthz``
    shows while this plan runs."""
    text = plan_text if plan_text is not None else plan.to_json()
    body = json.dumps({"plan": text, "auth": auth.to_dict() if auth is not None else None})
    token = running_token(auth) if auth is not None else ""
    return body, token


def request(
    url: str,
    plan: DrainPlan,
    busy_wait_s: float = BUSY_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
    stop_wait_s: float = STOP_WAIT_S,
    auth: plan_auth.PlanAuth | None = None,
    plan_text: str | None = None,
    heartbeat_s: float | None = None,
    probe_timeout_s: float | None = None,
    max_misses: int | None = None,
    connect_wait_s: float | None = None,
) -> Outcome:
    """Send the plan to the runtime and wait for the attempt's end. Raises Unreachable when nothing
    listens (or it is not warm yet): no attempt of this drain can be running there then. A
    connection that does not open is tried again for ``connect_wait_s`` (default
    ``connect_wait_setting()``): the pod network may not let a new pod through yet (a NetworkPolicy
    agent admits its IP a moment after it started); nothing was sent, so nothing can be running.

    A connection lost after the plan was sent (the runtime died) ends the attempt as failed (the
    operator retries it), and so does a runtime that stops answering: between heartbeats
    (``heartbeat_s``, default ``LAGPILOT_DRAIN_RUNTIME_HEARTBEAT_SECONDS``) its ``/healthz`` must show
    this plan running; ``max_misses`` checks in a row that do not (unanswered within
    ``probe_timeout_s``) end the wait with a failed attempt. On :class:`Terminated` (raised by the caller's SIGTERM handler while it
    waits) the connection is closed, which makes the runtime cancel the plan, and this process waits
    (up to ``stop_wait_s``) until the runtime no longer runs it: the pod ends only after its plan
    did, so whoever waits for the pod (the operator's retry, the finalizer's hand-back of the
    unfinished ranges) never overlaps the cancelled attempt's last writes.

    ``auth`` is the operator's signature of ``plan_text`` (the Job's LAGPILOT_DRAIN_PLAN as is): a
    refusal (401: expired, a replay, another key) ends the attempt as failed, never cold: a replay
    of this very plan may be running in the runtime."""
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or DEFAULT_PORT
    every, check_timeout, misses = _heartbeat(heartbeat_s, probe_timeout_s, max_misses)
    started = now()
    deadline = started + busy_wait_s
    connect_deadline = started + _connect_wait(connect_wait_s)
    body, token = _request_body(plan, plan_text, auth)
    while True:
        conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
        try:
            try:
                conn.connect()
            except OSError as exc:
                if now() < connect_deadline:
                    sleep(CONNECT_RETRY_S)
                    continue
                raise Unreachable(f"no drain runtime at {host}:{port}: {exc.__class__.__name__}") from exc
            _keepalive(conn.sock)
            try:
                conn.request(
                    "POST", "/drains", body=body.encode(), headers={"Content-Type": "application/json"}
                )
                # a drain takes as long as it takes: wait for its answer as long as the runtime shows
                # it running (heartbeat); the Job's activeDeadlineSeconds bounds the whole attempt
                if not _await_answer(conn, host, port, token, every, check_timeout, misses):
                    conn.close()  # a runtime that resumes sees its caller gone and cancels the plan
                    return Outcome(
                        drain_job.EXIT_FAILED,
                        f"drain failed: the drain runtime at {host}:{port} stopped "
                        f"answering ({misses} heartbeats {every:g} s apart without it running drain "
                        f"{plan.drain_id}); attempt abandoned",
                    )
                conn.sock.settimeout(ANSWER_TIMEOUT_S)
                resp = conn.getresponse()
                answer = resp.read().decode()
            except Terminated:
                conn.close()
                stopped = wait_not_running(host, port, token, stop_wait_s, sleep, now)
                return Outcome(
                    drain_job.EXIT_FAILED,
                    "drain stopped (SIGTERM): the runtime cancelled it"
                    + ("" if stopped else f"; not confirmed within {stop_wait_s:.0f} s"),
                )
            except (OSError, http.client.HTTPException) as exc:
                return Outcome(
                    drain_job.EXIT_FAILED,
                    f"drain failed: the drain runtime connection was lost: {exc.__class__.__name__}",
                )
        finally:
            conn.close()
        if resp.status == 503:
            raise Unreachable("the drain runtime is not warm yet")
        if resp.status == 409 and now() < deadline:
            sleep(1.0)
            continue
        try:
            return Outcome.from_json(answer)
        except (ValueError, KeyError, TypeError):
            return Outcome(
                drain_job.EXIT_FAILED, f"drain failed: the drain runtime answered HTTP {resp.status}"
            )


def wait_not_running(
    host: str,
    port: int,
    token: str,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> bool:
    """True once the runtime at host:port is not running the plan whose ``running_token`` is
    ``token`` (or is gone)."""
    deadline = now() + timeout_s
    while True:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            busy = json.loads(conn.getresponse().read().decode() or "{}").get("running")
        except (OSError, http.client.HTTPException, ValueError):
            return True  # nothing answers: the runtime (and its plan) is gone
        finally:
            conn.close()
        if not token or busy != token:
            return True
        if now() >= deadline:
            return False
        sleep(0.2)
