"""`lagpilot operator`: run kopf with lagpilot's handlers.

    lagpilot operator [--namespace NS ...] [--all-namespaces] [--standalone]
                      [--metrics-port N] [--liveness URL] [--verbose]

Without --namespace the operator watches all namespaces (needs the ClusterRole of the chart).
--standalone disables kopf's peering (no KopfPeering objects): run exactly one operator replica.
The metrics endpoint (`lagpilot_*`, Prometheus text format) listens on --metrics-port, default
$LAGPILOT_OPERATOR_METRICS_PORT or 9090; 0 disables it. Logs are JSON lines on stderr.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
import logging
import os
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lagpilot operator", description=__doc__.split("\n\n")[0])
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="namespace (or kopf glob pattern) to watch; repeatable")
    p.add_argument("--all-namespaces", "-A", action="store_true",
                   help="watch every namespace (the default when no --namespace is given)")
    p.add_argument("--standalone", action="store_true", help="no peering: a single operator replica")
    p.add_argument("--metrics-port", type=int,
                   default=int(os.environ.get("LAGPILOT_OPERATOR_METRICS_PORT") or 9090),
                   help="Prometheus metrics port; 0 disables (default %(default)s)")
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument("--liveness", default=None, help="kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    if args.namespace and args.all_namespaces:
        p.error("--namespace and --all-namespaces are mutually exclusive")
    if not 0 <= args.metrics_port < 65536:
        p.error("--metrics-port must be in 0..65535")
    return args


def count_kube_requests(count: "Callable[[str], None]") -> None:
    """Count every request the kubernetes client makes (KubeApi, the drain executor): wraps
    `RESTClientObject.request` once. kopf's own watch streams and event posts are not included."""
    from kubernetes.client import rest

    orig = rest.RESTClientObject.request
    if getattr(orig, "_lagpilot_counted", False):
        return

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        try:
            count(str(method).upper())
        except Exception:  # noqa: BLE001 - counting never fails a request
            pass
        return orig(self, method, url, *args, **kwargs)

    request._lagpilot_counted = True  # type: ignore[attr-defined]
    rest.RESTClientObject.request = request  # type: ignore[method-assign]


def quiet_watch_successes(record: logging.LogRecord) -> bool:
    """logging filter: drop kopf's "Handler 'deployment_seen' succeeded." lines."""
    msg = record.getMessage()
    return not (msg.startswith("Handler 'deployment_seen'") and msg.endswith("succeeded."))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    # a native crash (SIGSEGV in a C extension) or a SIGABRT from a supervisor prints every Python
    # thread's stack on stderr. Not for crashes inside librdkafka's own threads: librdkafka blocks
    # all signals there, so the kernel kills the process without running any handler.
    import faulthandler
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    import kopf  # heavy imports only for this subcommand

    level = os.environ.get("LAGPILOT_LOG_LEVEL", "INFO").upper()
    kopf.configure(verbose=args.verbose or level == "DEBUG", quiet=level in ("WARNING", "ERROR"),
                   log_format=kopf.LogFormat.JSON, log_refkey="object")
    from lagpilot_runtime import redaction
    redaction.filter_log_handlers()  # kopf's JSON handler: secret values and DSN patterns masked (redaction.py)
    log = logging.getLogger("lagpilot.run")
    # the Deployment watch's handler runs for every event of every consumer Deployment: its
    # successes are not news (its failures still are)
    logging.getLogger("kopf.objects").addFilter(quiet_watch_successes)
    if args.metrics_port:
        from prometheus_client import start_http_server
        start_http_server(args.metrics_port, addr=args.metrics_host)
        log.info("metrics endpoint started", extra={"port": args.metrics_port})

    import lagpilot.handlers  # noqa: F401  registers the handlers and the startup settings
    from lagpilot.observe.kafka_observe import set_request_counter
    from lagpilot.metrics import default_metrics
    set_request_counter(default_metrics().count_kafka_request)  # lagpilot_kafka_requests_total{kind}
    count_kube_requests(default_metrics().count_kube_request)  # lagpilot_kube_requests_total{verb}

    kopf.run(
        standalone=args.standalone,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
