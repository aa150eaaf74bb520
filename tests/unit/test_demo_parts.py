"""Unit tests for the demo's run settings and loop decisions (demo.config, demo.loop, demo.summary's
paths, demo.keep's record): the pure parts the split out of demo.py made testable."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lagpilot.spec import parse_spec
from lagpilot_dev.demo import keep as demo_keep
from lagpilot_dev.demo.config import HANDLER, PG_SECRET, RunNames, manifest, profile_for, spec_settings
from lagpilot_dev.demo.loop import caught_up, phase_text
from lagpilot_dev.demo.report import Sample
from lagpilot_dev.demo.summary import OutputPaths
from lagpilot_dev.demo.traffic import PROFILES


def _names(tmp_path: Path) -> RunNames:
    return RunNames.new("ns-a", str(tmp_path))


def test_run_names_share_one_suffix_and_follow_the_operators_naming(tmp_path: Path) -> None:
    n = _names(tmp_path)
    suffix = n.topic.removeprefix("demo-orders-")
    assert len(suffix) == 6 and n.group_id == f"orders-demo-{suffix}"
    assert (n.table, n.ledger_table) == (f"demo_orders_{suffix}", f"demo_ledger_{suffix}")
    assert n.deployment == f"{n.name}-consumer" and n.out == tmp_path and n.ns == "ns-a"
    other = _names(tmp_path)
    assert other.topic != n.topic and other.table != n.table  # runs never share a topic or a table


def test_default_out_is_under_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("lagpilot_dev.demo.config.cache_dir", lambda: tmp_path)
    n = RunNames.new("ns", None)
    assert n.out == tmp_path / "demo" / n.run_id


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold-drains"])
def test_manifest_is_a_valid_spec_with_the_profiles_settings(tmp_path: Path, name: str, cold: bool) -> None:
    p = profile_for(name, cold)
    assert p.warm_runtime is not cold and p.phases == PROFILES[name].phases
    n = _names(tmp_path)
    m = manifest(n, p, "127.0.0.1:9092")
    assert m["metadata"] == {"name": n.name, "namespace": n.ns}
    spec = m["spec"]
    parse_spec(spec)  # the operator accepts it (raises on an invalid spec)
    assert spec["drain"]["warmRuntime"] is not cold
    assert spec["processing"]["handler"] == HANDLER
    cfg = spec["processing"]["config"]
    assert cfg["postgres.table"] == n.table and cfg["ledgerTable"] == n.ledger_table
    assert all(isinstance(v, str) for v in cfg.values())  # handler config is string to string
    # the DSN only ever as a secretKeyRef, never inline
    assert spec["template"]["env"] == [
        {"name": "DEMO_POSTGRES_DSN", "valueFrom": {"secretKeyRef": {"name": PG_SECRET, "key": "dsn"}}}
    ]
    s = spec_settings(p)
    assert s["max_replicas"] == spec["scaling"]["maxReplicas"] == p.partitions
    assert s["batch_timeout_s"] * 1000 == spec["batch"]["timeoutMs"]
    assert s["split_factor"] == spec["drain"]["splitFactor"] and s["max_tasks"] == spec["drain"]["maxTasks"]


def _s(
    end: dict[int, int],
    sink: dict[int, int],
    committed: dict[int, int | None] | None = None,
    produced: int | None = None,
    drain: dict | None = None,
) -> Sample:
    return Sample(
        t=0,
        end=end,
        in_sink=sink,
        committed=committed if committed is not None else dict(end),
        produced=sum(end.values()) if produced is None else produced,
        drain=drain,
    )


@pytest.mark.parametrize(
    "sample,expected",
    [
        (_s({0: 10, 1: 5}, {0: 10, 1: 5}), None),
        (_s({0: 10}, {0: 7}), "3 records to reach PostgreSQL"),
        (_s({0: 10}, {0: 10}, committed={0: 4}), "group lag 6 → 0"),
        (_s({0: 10}, {0: 10}, produced=12), "the end offsets to show every produced record"),
        (
            _s({0: 10}, {0: 10}, drain={"id": 3, "phase": "Running", "recordsTotal": 8, "recordsDone": 2}),
            "drain #3 (Running, 2/8) to be verified",
        ),
        (_s({0: 10}, {0: 10}, drain={"id": 3, "phase": "Verified"}), None),
        (_s({0: 10}, {0: 9}, committed={0: 8}), "1 records to reach PostgreSQL; group lag 2 → 0"),
    ],
    ids=["caught-up", "backlog", "group-lag", "end-offsets-behind", "drain-active", "drain-verified", "both"],
)
def test_caught_up_says_what_is_missing(sample: Sample, expected: str | None) -> None:
    assert caught_up(sample) == expected


def test_phase_text() -> None:
    p = PROFILES["fast"]
    assert phase_text(p, None) == ""
    assert phase_text(p, SimpleNamespace(t0=None)) == ""
    at = lambda t: SimpleNamespace(t0=0.0, elapsed=lambda: t)  # noqa: E731
    assert phase_text(p, at(20)).startswith("phase 2/3: peak at 400 rec/s, 45 s left   (quiet 6/s×15s → peak")
    assert phase_text(p, at(1000)).startswith("replay done (quiet 6/s×15s")


def test_output_paths_are_the_summarys_paths(tmp_path: Path) -> None:
    paths = OutputPaths(tmp_path)
    got = paths.as_summary()
    assert set(got) == {"plot", "summary", "samples", "trace", "operator_log", "demo_log", "manifest"}
    assert got["plot"] == str(tmp_path / "demo.png") and got["summary"] == str(tmp_path / "summary.json")
    assert got["trace"] == str(tmp_path / "trace.csv") and got["manifest"] == str(tmp_path / "bcg.yaml")


def test_kept_record_is_written_to_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    kept = {"operator_release": "lagpilot-demo", "namespace": "ns-b"}
    demo_keep.write_kept(out, kept)
    assert json.loads((out / "kept.json").read_text()) == kept


def test_operator_env_runs_the_checkouts_own_code(tmp_path: Path) -> None:
    """The real tests' operator subprocess imports the tree that launched it: the package source dirs
    precede the repo root on PYTHONPATH (the root alone leaves `lagpilot` to the venv's editable
    install: another checkout when this one is a git worktree); a path that is no checkout stays as given."""
    import subprocess
    import sys

    import lagpilot_dev
    from lagpilot_dev.operator_process import operator_env

    repo = Path(lagpilot_dev.__file__).resolve().parents[3]
    env = operator_env("/k", repo, base={"PATH": "/usr/bin", "LAGPILOT_X": "1"})
    assert env["PYTHONPATH"].split(":") == [
        str(repo / "operator/src"),
        str(repo / "consumer_image/src"),
        str(repo / "dev/src"),
        str(repo),
    ]
    assert "LAGPILOT_X" not in env and env["KUBECONFIG"] == "/k"
    assert operator_env("/k", tmp_path, base={})["PYTHONPATH"] == str(tmp_path)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import lagpilot, lagpilot_runtime, lagpilot_dev as d; "
            "print(lagpilot.__file__); print(lagpilot_runtime.__file__); print(d.__file__)",
        ],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    for line in out.stdout.split():
        assert Path(line).resolve().is_relative_to(repo), out.stdout


def test_a_stage_that_fails_with_any_error_exits_2_after_cleaning_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 is "a stage failed" (docs/demo.md), 1 "the proof failed". Seen on the node: the demo
    image's build failed in stage 3 (buildah: the consumer's content tag "image not known") with a
    RuntimeError, which escaped main() as a traceback and exit status 1: a proof failure to a script."""
    from lagpilot_dev.demo import run as demo_run

    cleaned = []

    class FailingDemo:
        def __init__(self, args: object) -> None:
            self.console = SimpleNamespace(stage="operator_up")

        def run(self) -> int:
            raise RuntimeError("build of localhost/lagpilot/demo-consumer:0.1.0 failed (exit 125)")

        def cleanup(self) -> None:
            cleaned.append(True)

    monkeypatch.setattr(demo_run, "Demo", FailingDemo)
    assert demo_run.main(["--plain"]) == 2
    assert cleaned == [True]
    err = capsys.readouterr().err
    assert "demo failed at stage 'operator_up'" in err and "demo-consumer:0.1.0 failed" in err


def test_the_images_and_helm_start_building_before_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cold cache the images (buildah, base, images) and helm used to build after stage 1 had
    built every part: now they start first and build beside it (lagpilot_dev.coldprep)."""
    from lagpilot_dev.demo import run as demo_run

    order: list[str] = []

    class Stop(Exception):
        pass

    def acquire_stack() -> None:
        order.append("stage 1")
        raise Stop

    monkeypatch.setattr(demo_run, "start_builds", lambda: order.append("builds") or "started")
    demo = demo_run.Demo.__new__(demo_run.Demo)
    demo.args = SimpleNamespace(node=True)
    demo.profile = SimpleNamespace(name="fast", runtime_on_demand=False)
    demo.names = SimpleNamespace(out="out")
    demo.cluster = SimpleNamespace(acquire_stack=acquire_stack)
    with pytest.raises(Stop):
        demo.run()
    assert order == ["builds", "stage 1"] and demo.builds == "started"


def test_stage_3_loads_the_images_built_beside_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    from lagpilot_dev.demo import node as demo_node
    from lagpilot_dev.images import command as images_command
    from lagpilot_dev.images import tools as images_tools
    from lagpilot_dev.images.build import IMAGES

    monkeypatch.setattr(images_tools, "missing_preconditions", lambda layout: [])
    monkeypatch.setattr(images_command, "build_and_run", lambda *a, **k: pytest.fail("built again"))
    loaded: list[tuple[str, str]] = []
    node = SimpleNamespace(load_built_image=lambda tag, reference: loaded.append((tag, reference)) or 1.5)
    said: list[str] = []
    run = demo_node.NodeRun(
        console=SimpleNamespace(say=lambda text, indent=False: said.append(text)),  # type: ignore[arg-type]
        names=None,  # type: ignore[arg-type]
        info=None,
        kubectl=None,
        api=None,
    )
    builds = {
        n: {"image": n, "seconds": 1, "cached_steps": 1, "steps": 1, "content_tag": f"localhost/{n}-c1"}
        for n in demo_node.DEMO_IMAGES
    }
    run.prepare_images(SimpleNamespace(part=lambda name: node), built=lambda: SimpleNamespace(builds=builds))
    assert loaded == [
        ("localhost/operator-c1", IMAGES["operator"].reference),
        ("localhost/demo-c1", IMAGES["demo"].reference),
    ]
    assert any("started beside stage 1" in s for s in said)


def test_stage_1_brings_every_part_up_in_one_call_so_they_install_beside_the_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`Stack.up` makes the node's bridge before any part starts (`NodePart.prepare_host`), then
    installs and starts the parts in parallel. Stage 1 brought up kube and node alone first, then the
    rest: on a cold cache Kafka's and Spark's jars, PostgreSQL and the NetworkPolicy agent's build
    waited for the whole of the node's build (tens of minutes) instead of running beside it."""
    from lagpilot_dev import stack as stack_mod
    from lagpilot_dev.demo.cluster import Cluster
    from lagpilot_dev.demo.node import NODE_PARTS

    calls: list[tuple[str, tuple[str, ...]]] = []
    info = SimpleNamespace(
        bootstrap_servers="b:1",
        kubeconfig="k",
        postgres_dsn="d",
        kubectl="kubectl",
        kube_server="s",
        parts={},
        spark_jars=[],
        running={},
    )

    class FakeStack:
        def part(self, name: str) -> object:
            return SimpleNamespace(installed=lambda: True)

        def acquire(self, parts: tuple[str, ...]) -> tuple[object, str]:
            calls.append(("acquire", tuple(parts)))
            return info, "lease"

        def up(self, parts: tuple[str, ...], by_tests: bool = False) -> object:
            calls.append(("up", tuple(parts)))
            return info

    monkeypatch.setattr(stack_mod, "Stack", FakeStack)
    console = SimpleNamespace(begin=lambda *a: 0.0, done=lambda *a, **k: None, say=lambda *a, **k: None)
    cluster = Cluster(console, _names(tmp_path), NODE_PARTS, node=True)  # type: ignore[arg-type]
    cluster.acquire_stack()
    assert calls == [("acquire", NODE_PARTS)]
    assert cluster.info is info and cluster.lease == "lease"
