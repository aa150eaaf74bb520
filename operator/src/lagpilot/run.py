"""`lagpilot operator`: run kopf with lagpilot's handlers.

    lagpilot operator [--namespace NS ...] [--all-namespaces] [--standalone]
                      [--no-leader-election] [--leader-election-namespace NS] [--leader-election-name NAME]
                      [--metrics-port N] [--liveness URL] [--verbose]

Without --namespace the operator watches all namespaces (needs the ClusterRole of the chart).
--standalone disables kopf's peering (no KopfPeering objects); lagpilot coordinates its instances
with a Lease instead (leader election, on by default): an instance starts reconciling only once it
holds the Lease `--leader-election-name` (default lagpilot-operator) in every namespace it watches
(watching all namespaces: in --leader-election-namespace, default $LAGPILOT_OPERATOR_NAMESPACE);
the others stand by and take over when the holder stops renewing (docs/operator.md "Two instances").
Its identity is $LAGPILOT_POD_NAME (the chart sets the pod name), else host name and process id.
The metrics endpoint (`lagpilot_*`, Prometheus text format) listens on --metrics-port, default
$LAGPILOT_OPERATOR_METRICS_PORT or 9090; 0 disables it. Logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from lagpilot.config import OperatorConfig


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lagpilot operator", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="namespace (or kopf glob pattern) to watch; repeatable",
    )
    p.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        help="watch every namespace (the default when no --namespace is given)",
    )
    p.add_argument(
        "--standalone", action="store_true", help="no kopf peering objects (lagpilot elects with a Lease)"
    )
    p.add_argument(
        "--no-leader-election",
        dest="leader_election",
        action="store_false",
        help="reconcile at once without holding the Lease (only where no other instance can run)",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease when watching all namespaces (default $LAGPILOT_OPERATOR_NAMESPACE)",
    )
    p.add_argument(
        "--leader-election-name", default="lagpilot-operator", help="name of the Lease (default %(default)s)"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=OperatorConfig.from_env().metrics_port,
        help="Prometheus metrics port; 0 disables (default %(default)s)",
    )
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument(
        "--liveness", default=None, help="kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz"
    )
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    if args.namespace and args.all_namespaces:
        p.error("--namespace and --all-namespaces are mutually exclusive")
    if not 0 <= args.metrics_port < 65536:
        p.error("--metrics-port must be in 0..65535")
    return args


def count_kube_requests(count: Callable[[str], None]) -> None:
    """Count every request the kubernetes client makes (KubeApi, the drain executor): wraps
    `RESTClientObject.request` once. kopf's own watch streams and event posts are not included."""
    from kubernetes.client import rest

    orig: Callable[..., Any] = rest.RESTClientObject.request
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


def identity() -> str:
    """This instance's holder identity: the pod name (stable across container restarts, so a
    restarted leader takes its own Lease back at once), else host name and process id."""
    import socket

    return OperatorConfig.from_env().pod_name or f"{socket.gethostname()}-{os.getpid()}"


class StandbyHealth:
    """While standing by, kopf (and its liveness endpoint) is not running: answer the liveness and
    readiness probes here (a standby is healthy), on the same address, until the instance leads."""

    def __init__(self, url: str) -> None:
        import http.server
        import urllib.parse

        u = urllib.parse.urlsplit(url)
        path = u.path or "/"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = 200 if self.path.split("?")[0] == path else 404
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"standby": true}' if code == 200 else b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer((u.hostname or "0.0.0.0", int(u.port or 80)), Handler)
        import threading

        threading.Thread(
            target=self.server.serve_forever, name="lagpilot-standby-health", daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def lead(args: argparse.Namespace, log: logging.Logger) -> Any:
    """Stand by until this instance holds its Lease(s), then renew them in a thread; returns the
    elector (to release on a graceful stop), or None when SIGTERM/SIGINT came first."""
    import signal
    import threading

    from lagpilot.act.kubeapi import load_api_client
    from lagpilot.act.leader_lease import LeaseElector
    from lagpilot.decide.leader import LeaseTiming, lease_namespaces
    from lagpilot.metrics import default_metrics

    namespaces = lease_namespaces(
        list(args.namespace),
        args.leader_election_namespace or OperatorConfig.from_env().operator_namespace or None,
    )
    me = identity()
    elector = LeaseElector(
        load_api_client(pool_size=2), namespaces, args.leader_election_name, me, LeaseTiming.from_env()
    )
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    health = StandbyHealth(args.liveness) if args.liveness else None
    leader = default_metrics().leader
    leader.set(0)

    def waiting(ns: str, holder: str) -> None:
        log.info(
            "standing by for the leader lease",
            extra={"namespace": ns, "lease": args.leader_election_name, "holder": holder, "identity": me},
        )

    try:
        if not elector.acquire(stop, waiting):
            return None
    finally:
        if health is not None:
            health.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    leader.set(1)
    log.info(
        "became the leader",
        extra={"namespaces": namespaces, "lease": args.leader_election_name, "identity": me},
    )

    def lost(ns: str, why: str) -> None:
        # stop acting at once: a standby may take the Lease after its duration; the container's
        # restart makes this instance a standby (client-go's leaderelection does the same)
        log.error("leader lease lost; exiting", extra={"namespace": ns, "why": why, "identity": me})
        logging.shutdown()
        os._exit(1)

    threading.Thread(
        target=elector.renew_forever, args=(stop, lost), name="lagpilot-lease", daemon=True
    ).start()
    elector.stop = stop  # type: ignore[attr-defined]
    return elector


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    # a native crash (SIGSEGV in a C extension) or a SIGABRT from a supervisor prints every Python
    # thread's stack on stderr. Not for crashes inside librdkafka's own threads: librdkafka blocks
    # all signals there, so the kernel kills the process without running any handler.
    import faulthandler

    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    import kopf  # heavy imports only for this subcommand

    level = OperatorConfig.from_env().log_level
    kopf.configure(
        verbose=args.verbose or level == "DEBUG",
        quiet=level in ("WARNING", "ERROR"),
        log_format=kopf.LogFormat.JSON,
        log_refkey="object",
    )
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
    from lagpilot.metrics import default_metrics
    from lagpilot.observe.kafka_observe import set_request_counter

    set_request_counter(default_metrics().count_kafka_request)  # lagpilot_kafka_requests_total{kind}
    count_kube_requests(default_metrics().count_kube_request)  # lagpilot_kube_requests_total{verb}

    elector = None
    if args.leader_election:
        elector = lead(args, log)
        if elector is None:
            log.info("stopped while standing by")
            return 0
    try:
        kopf.run(
            standalone=args.standalone,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
        )
    finally:
        if elector is not None:
            elector.stop.set()
            elector.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
