"""The builds a run needs besides the stack's parts, started beside `lagpilot dev up` instead of after it.

On a cold cache `./dev/demo` and `./dev/test` ran their builds one after the other: the stack's parts
(control plane and node from the Go module proxy, the NetworkPolicy agent), then the images (buildah
from the Go module proxy, the mmdebstrap base, the images), then helm from the Go module proxy. None
of the images' or helm's builds needs a part up, and much of their wall time is waiting on the network
(mmdebstrap, pip, module downloads), so they now start with the stack (`start`): `lagpilot demo` starts
them before its stage 1 and waits in stage 3, `./dev/test` runs `python -m lagpilot_dev.coldprep` in
the background while `lagpilot dev up` runs. Everything they build is cached by version or content as
before (a warm run finds it all: a few seconds), and the Go builds share the cold run's Go caches
(lagpilot_dev.gocache). docs/node.md "Cold build".
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("lagpilot_dev.coldprep")


@dataclass(frozen=True)
class Plan:
    """What to build: images by name (`lagpilot_dev.images.build.IMAGES`, build only, no run; the
    job's result is None, nothing built, when each is already built from this content), helm
    versions, and kstatus-check."""

    images: tuple[str, ...] = ()
    helm: tuple[str, ...] = ()
    kstatus_check: bool = False

    def jobs(self) -> list[str]:
        """One job per concurrent build: the images (one buildah storage, built in turn under its
        lock), each helm version, kstatus-check. Pure."""
        out = ["images"] if self.images else []
        out += [f"helm {v}" for v in self.helm]
        return out + (["kstatus-check"] if self.kstatus_check else [])


@dataclass
class Running:
    """The builds started by `start`, each in a daemon thread (a run that fails or is interrupted
    before it waits for them exits without waiting; a build's subprocess then finishes or dies on
    its own, and what it finished is cached): wait for them with `result` or `wait_all`."""

    futures: dict[str, Future[Any]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def result(self, job: str) -> Any:
        """The job's result (its exception re-raised); waits for it."""
        return self.futures[job].result()

    def wait_all(self) -> dict[str, BaseException]:
        """Wait for every job; the failures by job (empty: all built)."""
        failed: dict[str, BaseException] = {}
        for job, fut in self.futures.items():
            try:
                fut.result()
            except BaseException as exc:  # noqa: BLE001 - every failed build reported, not the first
                failed[job] = exc
        return failed


def _runner(job: str, plan: Plan) -> Callable[[], Any]:
    if job == "images":

        def images() -> Any:
            from lagpilot_dev.images.build import IMAGES
            from lagpilot_dev.images.command import build_and_run
            from lagpilot_dev.images.tools import default_layout, image_exists

            layout = default_layout()
            if layout.buildah.is_file() and all(
                image_exists(layout, IMAGES[n].content_tag()) for n in plan.images
            ):
                return None  # warm: every one already built from this content (no buildah run)
            return build_and_run(plan.images, run=False)

        return images
    if job.startswith("helm "):
        version = job.split(" ", 1)[1]

        def helm() -> Any:
            from lagpilot_dev.helm import ensure_helm

            return ensure_helm(version=version)

        return helm
    if job == "kstatus-check":

        def kstatus() -> Any:
            from lagpilot_dev.kstatus import ensure_kstatus_check

            return ensure_kstatus_check()

        return kstatus
    raise ValueError(f"unknown job {job!r}")


def start(plan: Plan, runner: Callable[[str, Plan], Callable[[], Any]] | None = None) -> Running:
    """Start every job of the plan in a daemon thread of its own (each runs its build's
    subprocesses). `runner` maps a job to what it runs (tests)."""
    running = Running()
    for job in plan.jobs():
        running.futures[job] = _spawn(job, (runner or _runner)(job, plan))
    return running


def _spawn(job: str, fn: Callable[[], Any]) -> Future[Any]:
    fut: Future[Any] = Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(_timed(job, fn))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            fut.set_exception(exc)

    threading.Thread(target=run, name=f"coldprep-{job}", daemon=True).start()
    return fut


def _timed(job: str, fn: Callable[[], Any]) -> Any:
    t0 = time.monotonic()
    out = fn()
    secs = round(time.monotonic() - t0, 1)
    log.info("%s: done beside the stack in %s s", job, secs, extra={"job": job, "seconds": secs})
    return out


def parse_plan(argv: Sequence[str]) -> Plan:
    p = argparse.ArgumentParser(prog="python -m lagpilot_dev.coldprep", description=__doc__.splitlines()[0])
    p.add_argument("--images", default="", help="comma-separated images to build (no run)")
    p.add_argument("--helm", default="", help="comma-separated helm versions")
    p.add_argument("--kstatus-check", action="store_true")
    a = p.parse_args(list(argv))

    def names(text: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in text.split(",") if x.strip())

    return Plan(images=names(a.images), helm=names(a.helm), kstatus_check=a.kstatus_check)


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse_plan(sys.argv[1:] if argv is None else argv)
    running = start(plan)
    failed = running.wait_all()
    secs = time.monotonic() - running.started
    for job in plan.jobs():
        state = f"FAILED: {str(failed[job])[-1500:]}" if job in failed else "ok"
        print(f"[coldprep] {job}: {state}", file=sys.stderr)
    print(f"[coldprep] {len(plan.jobs())} build(s) in {secs:.0f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="[coldprep] %(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)  # each build's time; the builds' own progress stays quiet
    sys.exit(main())
