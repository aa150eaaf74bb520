"""`lagpilot consume`: the batch consumer process, configured by the pod environment.

Builds the loop (:class:`lagpilot_runtime.batch_consumer.BatchConsumer`: batching, commits,
rebalances, the drain hand-off) with the real confluent-kafka clients, the dead-letter producer and
the metrics server, runs it and shuts everything down.

SIGTERM/SIGINT: stop consuming; a handler call in progress finishes and its batch is committed;
records not yet handed to the handler are abandoned (not processed, not committed); the consumer
closes. A watchdog ends the process if this takes longer than LAGPILOT_SHUTDOWN_GRACE_MS.

Exit codes: 0 clean shutdown, 1 fatal (exit policy, systemic handler failure, dead-lettering
failed, fenced or fatal Kafka error), 2 invalid configuration or handler.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import threading
from typing import Any

from . import handoff_mailbox as mbx
from . import jsonlog
from .batch_consumer import BatchConsumer
from .config import ConfigError, ConsumerConfig
from .consumer_state import log
from .failure import DeadLetterProducer
from .handler import Handler, HandlerLoadError, load_handler
from .jsonlog import fields as _fields
from .metrics import ConsumerMetrics, Health, MetricsServer


def _exit_after(grace_s: float, code: int) -> threading.Timer:
    """A watchdog: exit the process with ``code`` after ``grace_s`` unless it ended by itself (a client
    that blocks in close() after a fatal error, e.g. a fenced static member, must not hang the pod)."""

    def expire() -> None:
        log.error(
            "shutdown grace period expired; exiting without finishing",
            extra=_fields(event="grace_expired", grace_s=grace_s),
        )
        logging.shutdown()
        os._exit(code)

    timer = threading.Timer(grace_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def _install_signals(loop: BatchConsumer, grace_s: float) -> None:
    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if loop.stop_event.is_set():
            return
        loop.request_stop(name)
        _exit_after(grace_s, 1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # `kill -USR1 <pid>` (or the pod's process): every thread's stack to stderr, the pod's log — for a
    # consumer that is stuck (docs/consumer.md "loop_stuck"); frames only, no locals
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def build(
    cfg: ConsumerConfig, handler: Handler
) -> tuple[BatchConsumer, MetricsServer, DeadLetterProducer | None]:
    """The real loop: confluent-kafka consumer, DLQ producer, metrics server (also used by bench/)."""
    from confluent_kafka import Consumer

    metrics = ConsumerMetrics()
    health = Health(stale_after_s=cfg.max_poll_interval_ms / 1000.0)
    server = MetricsServer(metrics, health, cfg.metrics_port).start()
    log.info("metrics endpoint up", extra=_fields(event="metrics_listening", port=server.port))
    dlq: DeadLetterProducer | None = None
    if cfg.failure_policy == "deadLetter":
        dlq = DeadLetterProducer(cfg.producer_conf(), cfg.dlq_topic)
    holder: dict[str, BatchConsumer] = {}
    conf = cfg.consumer_conf()
    conf["statistics.interval.ms"] = 5000  # readiness (broker state) and high watermarks (lag)
    conf["stats_cb"] = lambda s: holder["loop"].on_stats(s)
    conf["error_cb"] = lambda e: holder["loop"].on_error(e)
    consumer = Consumer(conf, logger=logging.getLogger("lagpilot.consumer.librdkafka"))
    loop = BatchConsumer(
        cfg,
        consumer,
        handler,
        dead_letter=dlq.send if dlq else None,
        metrics=metrics,
        health=health,
        # LP_TEST_NO_HANDOFF (tests only): behave like an older image without the mailbox
        mailbox=None if os.environ.get("LP_TEST_NO_HANDOFF") else mailbox_consumer(cfg),
    )
    holder["loop"] = loop
    return loop, server, dlq


def mailbox_consumer(cfg: ConsumerConfig) -> Any:
    """The drain hand-off mailbox reader/writer: a Consumer of the memberless mailbox group that
    never subscribes (only OffsetFetch and "simple" commits; never joins, never fetches records)."""
    from confluent_kafka import Consumer

    conf = {
        k: v
        for k, v in cfg.consumer_conf().items()
        if k
        not in (
            "partition.assignment.strategy",
            "session.timeout.ms",
            "max.poll.interval.ms",
            "queued.min.messages",
        )
    }
    conf.update(
        {
            "group.id": mbx.mailbox_group(cfg.group_id),
            "client.id": f"lagpilot-handoff-{cfg.pod_name or 'consumer'}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    return Consumer(conf, logger=logging.getLogger("lagpilot.consumer.librdkafka"))


def shutdown(loop: BatchConsumer, server: MetricsServer, dlq: DeadLetterProducer | None) -> None:
    """Close the consumer, the DLQ producer, sink connections and the metrics server."""
    loop.close()
    if loop.mailbox is not None:
        try:
            loop.mailbox.close()
        except Exception:  # noqa: BLE001 - closing on the way out
            pass
    if dlq is not None:
        dlq.close()
    try:
        from .sinks import postgres as _pg

        _pg.close()
    except Exception:  # noqa: BLE001 - psycopg may be absent in a custom image
        pass
    server.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `lagpilot consume` (the consumer image's command). Configured by the environment."""
    parser = argparse.ArgumentParser(
        prog="lagpilot consume",
        description=(
            "Run the lagpilot batch consumer. Configuration comes from LAGPILOT_* environment variables; "
            "see docs/consumer.md."
        ),
    )
    parser.parse_args(argv or [])
    jsonlog.setup(os.environ.get("LAGPILOT_LOG_LEVEL", "INFO").strip().upper() or "INFO")
    try:
        cfg = ConsumerConfig.from_env()
        handler = load_handler(cfg.handler_spec)
    except (ConfigError, HandlerLoadError) as exc:
        log.error("invalid configuration", extra=_fields(event="config_error", error=str(exc)))
        return 2
    logging.getLogger().setLevel(cfg.log_level)
    log.info("starting", extra=_fields(event="starting", config=repr(cfg)))

    loop, server, dlq = build(cfg, handler)
    _install_signals(loop, cfg.shutdown_grace_ms / 1000.0)
    code = loop.run()
    if code != 0:  # a fatal error: close cleanly if the client lets us, within the grace period
        _exit_after(cfg.shutdown_grace_ms / 1000.0, code)
    shutdown(loop, server, dlq)
    log.info(
        "stopped", extra=_fields(event="stopped", exit_code=code, processed_records=loop.processed_records)
    )
    return code
