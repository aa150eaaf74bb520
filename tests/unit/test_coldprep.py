"""The builds started beside the stack's (lagpilot_dev.coldprep): what runs, and that every result and
every failure reaches whoever waits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from lagpilot_dev import coldprep


@pytest.mark.parametrize(
    ("plan", "jobs"),
    [
        (coldprep.Plan(), []),
        (coldprep.Plan(images=("operator", "demo")), ["images"]),
        (
            coldprep.Plan(images=("operator",), helm=("v3.22.0", "v4.3.1"), kstatus_check=True),
            ["images", "helm v3.22.0", "helm v4.3.1", "kstatus-check"],
        ),
        (coldprep.Plan(helm=("v3.22.0",)), ["helm v3.22.0"]),
    ],
)
def test_one_job_per_concurrent_build(plan: coldprep.Plan, jobs: list[str]) -> None:
    assert plan.jobs() == jobs


def test_parse_plan_reads_dev_tests_command_line() -> None:
    assert coldprep.parse_plan(
        ["--images", "operator,consumer,test", "--helm", "v3.22.0,v4.3.1", "--kstatus-check"]
    ) == coldprep.Plan(
        images=("operator", "consumer", "test"), helm=("v3.22.0", "v4.3.1"), kstatus_check=True
    )
    # LAGPILOT_NODE=0 in dev/test: no images, an empty --images
    assert coldprep.parse_plan(["--images", "", "--helm", "v3.22.0"]).jobs() == ["helm v3.22.0"]


def test_the_jobs_run_at_once_and_each_result_or_failure_is_handed_over() -> None:
    plan = coldprep.Plan(images=("operator",), helm=("v3.22.0",), kstatus_check=True)
    everyone = threading.Barrier(3, timeout=60)  # passes only when the three run at the same time

    def runner(job: str, p: coldprep.Plan) -> Callable[[], Any]:
        def fn() -> Any:
            everyone.wait()
            if job == "kstatus-check":
                raise RuntimeError("go build failed")
            return (job, p.images)

        return fn

    running = coldprep.start(plan, runner)
    assert running.result("images") == ("images", ("operator",))
    assert running.result("helm v3.22.0") == ("helm v3.22.0", ("operator",))
    with pytest.raises(RuntimeError, match="go build failed"):
        running.result("kstatus-check")
    failed = running.wait_all()
    assert list(failed) == ["kstatus-check"]


def test_the_builds_do_not_hold_the_process_at_exit() -> None:
    """Daemon threads: a demo that fails in stage 1 exits without waiting for the images' build."""
    release = threading.Event()
    running = coldprep.start(coldprep.Plan(helm=("v3.22.0",)), lambda job, p: release.wait)
    threads = [t for t in threading.enumerate() if t.name == "coldprep-helm v3.22.0"]
    assert threads and all(t.daemon for t in threads)
    release.set()
    assert running.result("helm v3.22.0") is True


def test_unknown_jobs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown job"):
        coldprep._runner("kafka", coldprep.Plan())


@pytest.mark.parametrize(
    ("buildah", "on_storage", "builds"),
    [
        (False, set(), True),  # cold: no buildah yet (nor podman to ask): build
        (True, {"operator", "consumer"}, False),  # warm: each built from this content: nothing run
        (True, {"operator"}, True),  # a change to the consumer's content: build (cached layers)
    ],
)
def test_the_images_job_builds_only_what_this_content_lacks(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, buildah: bool, on_storage: set[str], builds: bool
) -> None:
    from lagpilot_dev.images import command, tools
    from lagpilot_dev.images.build import IMAGES

    layout = tools.Layout(tmp_path)
    if buildah:
        layout.buildah.parent.mkdir(parents=True)
        layout.buildah.touch()
    tags = {IMAGES[n].content_tag(): n for n in ("operator", "consumer")}
    monkeypatch.setattr(tools, "default_layout", lambda: layout)
    monkeypatch.setattr(
        tools, "image_exists", lambda lay, tag: tags[tag] in on_storage if buildah else pytest.fail("asked")
    )
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(command, "build_and_run", lambda names, run: calls.append((names, run)) or "report")
    out = coldprep._runner("images", coldprep.Plan(images=("operator", "consumer")))()
    assert (out, calls) == (("report", [(("operator", "consumer"), False)]) if builds else (None, []))
