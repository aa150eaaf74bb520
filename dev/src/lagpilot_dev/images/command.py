"""`lagpilot dev images`: build the two container images from the real Dockerfiles and run them.

No Docker engine runs here and public base images cannot be pulled, so, a module per step, run in
order here under one lock (`build_and_run`) and reported (`main`):

- tools (images.tools): Debian's podman and mmdebstrap from apt-get; buildah BUILDAH_VERSION built
  from the Go module proxy into the cache (Debian's cannot parse `ADD --checksum=...`).
- base (images.base): a stand-in for the unpullable python:3.11-slim(-bookworm), made once by
  mmdebstrap from Debian bookworm with Debian's python3.11 and a virtualenv at /usr/local.
- build (images.build): `buildah bud` of the UNCHANGED Dockerfiles, layers cached, the host's CA
  bundle and built wheels bind-mounted read-only for the RUN steps.
- run (images.run): `podman run --network host` of each image: the operator's `--help`, `id` in
  each, the consumer's `consume` against the dev stack's Kafka into its PostgreSQL.
- prune (images.prune): the storage keeps this checkout's current content tags, the plain tags, the
  base, content tags built within the last hour, and their layers; older content tags and images
  nothing keeps are removed.

State lives in $LAGPILOT_IMAGES_CACHE, else $LAGPILOT_CACHE/images (default ~/.cache/lagpilot/images):
bin/ (buildah), storage/ (containers-storage, overlay driver), base/ (mmdebstrap work dir, removed after
the commit), wheels/ (links to the host's built wheels). buildah's Go build uses Go's own (user-wide) caches.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lagpilot_dev.images.base import BASE_NAMES, ensure_base
from lagpilot_dev.images.build import IMAGES, build
from lagpilot_dev.images.prune import prune as prune_storage
from lagpilot_dev.images.run import run_consumer, run_id, run_operator_help
from lagpilot_dev.images.tools import Layout, default_layout, ensure_tools
from lagpilot_dev.paths import file_lock

log = logging.getLogger("lagpilot_dev.images")


@dataclass
class Report:
    tools: dict[str, Any] = field(default_factory=dict)
    base: dict[str, Any] = field(default_factory=dict)
    builds: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)
    prune: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tools": self.tools,
            "base": self.base,
            "builds": self.builds,
            "runs": self.runs,
            "prune": self.prune,
            "seconds": self.seconds,
        }


def build_and_run(
    names: Sequence[str] = ("operator", "consumer"),
    run: bool = True,
    rebuild_base: bool = False,
    bootstrap: str | None = None,
    dsn: str | None = None,
    layout: Layout | None = None,
    prune: bool = True,
) -> Report:
    layout = layout or default_layout()
    layout.root.mkdir(parents=True, exist_ok=True)
    report = Report()
    t0 = time.monotonic()
    with file_lock(layout.lock):  # one build at a time on this machine
        report.tools = ensure_tools(layout)
        report.base = ensure_base(layout, force=rebuild_base)
        for n in names:
            report.builds[n] = build(layout, IMAGES[n])
        if run:
            if "operator" in names:
                report.runs["operator"] = run_operator_help(layout)
            if "consumer" in names:
                if not bootstrap or not dsn:
                    raise RuntimeError(
                        "the consumer run needs Kafka and PostgreSQL: lagpilot dev up --parts kafka,postgres"
                    )
                report.runs["consumer"] = {
                    "id": run_id(layout, IMAGES["consumer"]),
                    **run_consumer(layout, bootstrap, dsn),
                }
        if prune:  # under the lock: no build of this machine is between its steps
            try:
                report.prune = prune_storage(
                    layout,
                    current=[d.content_tag() for d in IMAGES.values()],
                    plain_tags=[d.tag for d in IMAGES.values()],
                )
            except Exception as err:  # noqa: BLE001 - the builds stand; the storage is pruned next time
                log.warning("pruning the build storage failed", extra={"error": str(err)[:500]})
                report.prune = {"error": str(err)[:500]}
    report.seconds = round(time.monotonic() - t0, 1)
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only", default="operator,consumer", help="comma-separated images (default: %(default)s)"
    )
    p.add_argument("--no-run", action="store_true", help="build only")
    p.add_argument("--rebuild-base", action="store_true", help="remake the mmdebstrap base image")
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="keep older content tags and unused images in the build storage (docs/images.md)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress logs on stderr")


def main(args: argparse.Namespace, stack: Any) -> int:
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise ValueError(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    bootstrap = dsn = None
    if not args.no_run and "consumer" in names:
        info = stack.status()
        bootstrap, dsn = info.bootstrap_servers, info.postgres_dsn
    report = build_and_run(
        names,
        run=not args.no_run,
        rebuild_base=args.rebuild_base,
        bootstrap=bootstrap,
        dsn=dsn,
        prune=not args.no_prune,
    )
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
        return 0
    for n, b in report.builds.items():
        print(
            f"# {n}: {b['image']} built in {b['seconds']} s ({b['cached_steps']}/{b['steps']} steps cached), "
            f"{b['size_bytes'] / 1e6:.0f} MB, USER {b['user']}"
        )
    if report.base.get("made"):
        print(
            f"# base {BASE_NAMES[0]} made in {report.base['seconds']} s, {report.base['size_bytes'] / 1e6:.0f} MB"
        )
    for n, r in report.runs.items():
        print(f"# {n} run: id -> {r['id']}")
        if n == "operator":
            print(f"#   lagpilot operator --help -> exit {r['exit']}: {' '.join(r['help_head'])[:100]}")
        else:
            print(
                f"#   consumed {r['postgres']['rows']}/{r['produced']} records into {r['table']} "
                f"({r['postgres']['distinct_offsets']} distinct offsets) in {r['seconds_to_land']} s; "
                f"committed {r['committed']}; exit {r['exit_code']} after SIGTERM"
            )
    if report.prune.get("error"):
        print(f"# pruning the build storage failed: {report.prune['error']}")
    elif report.prune:
        print(
            f"# pruned the build storage: {len(report.prune['untagged'])} older content tags, "
            f"{report.prune['removed']} images removed ({len(report.prune['not_removed'])} could not be), "
            f"{report.prune['kept']} kept"
        )
    print(f"# total {report.seconds} s")
    return 0
