"""`python -m lagpilot_dev.podrunner`: the pod runner in the foreground."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from lagpilot_dev import podrunner

from .base import DEFAULT_NODE_NAME
from .runner import PodRunner


def main(argv: list[str] | None = None) -> int:
    """`python -m lagpilot_dev.podrunner`: run the pod runner in the foreground until SIGINT/SIGTERM."""
    import argparse

    from lagpilot_dev import paths
    from lagpilot_runtime import jsonlog

    jsonlog.setup("INFO", logger="lagpilot_dev")
    default_state = paths.state_dir(paths.cache_dir())
    ap = argparse.ArgumentParser(
        prog="python -m lagpilot_dev.podrunner", description=podrunner.__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or str(default_state / "kube" / "admin.kubeconfig"),
    )
    ap.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    ap.add_argument("--workdir", default=str(default_state / "podrunner"))
    ap.add_argument(
        "--namespace", action="append", dest="namespaces", help="only these namespaces (repeatable)"
    )
    ap.add_argument("--no-bind", action="store_true", help="do not bind unscheduled pods to this node")
    args = ap.parse_args(argv)
    runner = PodRunner(
        args.kubeconfig,
        node_name=args.node_name,
        workdir=Path(args.workdir),
        namespaces=args.namespaces,
        bind=not args.no_bind,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    runner.start()
    done.wait()
    runner.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
