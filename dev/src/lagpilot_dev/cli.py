"""`lagpilot dev up|status|down`: the local real-parts stack for people and scripts.

    lagpilot dev up [--parts oidc,kafka,kube,postgres,spark,prometheus,node,netpol,keda] [--json]
    lagpilot dev status [--json]
    lagpilot dev down [--parts ...]

Human output goes to stdout as shell lines (`export KUBECONFIG=...`), so `eval "$(lagpilot dev up)"`
works; progress logs go to stderr as JSON lines. `--json` prints one JSON object on stdout instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from lagpilot_dev.images import command as images
from lagpilot_dev.stack import ALL_PARTS, DEFAULT_PARTS, Stack, StackInfo, parse_parts
from lagpilot_runtime import jsonlog


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lagpilot dev", description="the local real-parts stack")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="install and start what is missing, print connection details")
    up.add_argument(
        "--parts",
        default=",".join(DEFAULT_PARTS),
        help=f"comma-separated subset of {','.join(ALL_PARTS)} or 'all' (default: %(default)s)",
    )
    up.add_argument("--json", action="store_true", help="print one JSON object")
    st = sub.add_parser("status", help="show what is running (starts nothing)")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    down = sub.add_parser("down", help="stop the running parts")
    down.add_argument("--parts", default="all", help="comma-separated parts to stop (default: all)")
    down.add_argument("--json", action="store_true", help="print one JSON object")
    down.add_argument("--purge", action="store_true", help="also delete the parts' data (caches stay)")
    for s in (up, st, down):
        s.add_argument("-q", "--quiet", action="store_true", help="no progress logs on stderr")
    images.add_arguments(
        sub.add_parser(
            "images", help="build both images from the real Dockerfiles and run them (docs/images.md)"
        )
    )
    return p


def render_human(info: StackInfo) -> str:
    """Shell-friendly lines: exports first (eval-able), details as comments."""
    lines = list(info.shell_exports())
    for name, running in info.running.items():
        lines.append(f"# {name}: {'running' if running else 'not running'}")
    if info.bootstrap_servers:
        lines.append(f"# kafka bootstrap servers: {info.bootstrap_servers}")
    if info.kafka_home:
        lines.append(f"# kafka CLI classpath: {info.kafka_home}/*")
    if info.postgres_dsn:
        lines.append(f"# postgres DSN: {info.postgres_dsn}")
    if info.kubectl:
        lines.append(f"# kubectl: {info.kubectl}")
    if prom := info.parts.get("prometheus"):
        lines.append(f"# prometheus: {prom['prometheus_url']} (promtool: {prom['promtool']})")
    if keda := info.parts.get("keda"):
        lines.append(
            f"# keda: {keda['keda_version']} (APIService {keda['apiservice']}, logs {keda['keda_operator_log']})"
        )
    if oidc := info.parts.get("oidc"):
        lines.append(
            f"# oidc: {oidc['oidc_issuer']} (Keycloak {oidc['keycloak_version']}, client {oidc['oidc_client_id']}, "
            f"token endpoint {oidc['oidc_token_endpoint_url']})"
        )
    if (kafka := info.parts.get("kafka")) and kafka.get("oauth_bootstrap_servers"):
        lines.append(f"# kafka OAUTHBEARER listener: {kafka['oauth_bootstrap_servers']}")
    if info.spark_jars:
        lines.append(f"# spark jars: {','.join(info.spark_jars)}")
    lines.append(f"# state: {info.state_dir}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not args.quiet:
        jsonlog.setup("INFO", logger="lagpilot_dev")
    stack = Stack()
    try:
        if args.cmd == "up":
            t0 = time.monotonic()
            info = stack.up(parse_parts(args.parts))
            if args.json:
                print(
                    json.dumps({**info.to_dict(), "seconds": round(time.monotonic() - t0, 1)}, sort_keys=True)
                )
            else:
                print(render_human(info))
        elif args.cmd == "status":
            info = stack.status()
            print(info.to_json() if args.json else render_human(info))
            return 0
        elif args.cmd == "images":
            return images.main(args, stack)
        elif args.cmd == "down":
            names = parse_parts(args.parts, default=ALL_PARTS)
            stopped = stack.down(names)
            purged = stack.purge(names) if args.purge else []
            if args.json:
                print(json.dumps({"stopped": stopped, **({"purged": purged} if args.purge else {})}))
            else:
                print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
                if purged:
                    print(f"purged data of: {', '.join(purged)}")
    except (RuntimeError, ValueError, TimeoutError) as exc:
        print(f"lagpilot dev {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
