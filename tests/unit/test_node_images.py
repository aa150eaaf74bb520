"""The real node's pure pieces: the names it knows the project's images by (lagpilot_dev.node,
images.build) and its scheduler, the cluster's default one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lagpilot.spec import DEFAULT_IMAGE
from lagpilot_dev.images.build import IMAGES
from lagpilot_dev.node import cri_image_name

CHART = Path(__file__).resolve().parents[2] / "charts" / "lagpilot"


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("lagpilot/consumer:0.1.0", "docker.io/lagpilot/consumer:0.1.0"),
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1", "docker.io/library/busybox:1"),
        ("localhost/lagpilot/operator:0.1.0", "localhost/lagpilot/operator:0.1.0"),
        ("lagpilot.local/pause:v1.35.4", "lagpilot.local/pause:v1.35.4"),
        ("registry:5000/a/b", "registry:5000/a/b:latest"),
        ("ghcr.io/acme/x@sha256:00", "ghcr.io/acme/x@sha256:00"),
        ("acme/x@sha256:00", "docker.io/acme/x@sha256:00"),
    ],
)
def test_cri_image_name_normalizes_as_docker(reference: str, expected: str) -> None:
    assert cri_image_name(reference) == expected


def test_built_images_carry_the_names_the_chart_and_the_crd_use() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert (
        IMAGES["operator"].reference
        == f"{values['image']['repository']}:{values['image']['tag'] or app_version}"
    )
    assert IMAGES["consumer"].reference == DEFAULT_IMAGE


def test_the_real_scheduler_is_the_default_one_for_every_node(tmp_path: Path) -> None:
    """Issue 24 step 6: with the pod runner gone the node's kube-scheduler is the cluster's
    `default-scheduler`, with no added node affinity."""
    from lagpilot_dev.node import SCHEDULER_NAME, NodePart

    part = NodePart.__new__(NodePart)
    part.kubeconfig = lambda who: tmp_path / f"{who}.kubeconfig"  # type: ignore[method-assign]
    cfg = part.scheduler_config()
    assert SCHEDULER_NAME == "default-scheduler"
    assert cfg["profiles"] == [{"schedulerName": "default-scheduler"}]


def test_load_built_image_logs_under_info_without_breaking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`lagpilot demo` (on the node) logs at INFO: loading an image (here one the node already has) must
    log its record, not raise from the logging call."""
    import logging
    import subprocess

    from lagpilot_dev.images import tools as images_tools
    from lagpilot_dev.node import NodePart

    part = NodePart(tmp_path / "cache", tmp_path / "state")
    built = "sha256:" + "ab" * 32
    monkeypatch.setattr(
        images_tools,
        "run_cmd",
        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, stdout=built.removeprefix("sha256:")),
    )
    monkeypatch.setattr(NodePart, "image_id", lambda self, tag: built)
    caplog.set_level(logging.INFO, logger="lagpilot_dev.node")
    assert part.load_built_image("localhost/lagpilot/demo-consumer:0.1.0") >= 0
    rec = [r for r in caplog.records if r.getMessage() == "image on the node"]
    assert rec and rec[0].image == "localhost/lagpilot/demo-consumer:0.1.0"


def test_test_image_adds_the_tests_handler_modules_to_the_consumer_image() -> None:
    """tests/real/image/Dockerfile (tests/fixtures/node.py's "test" image): FROM the consumer image,
    the handler modules the real tests name (`tests.real.operator_handlers:...`) under the image's
    PYTHONPATH dir, each in the build context."""
    repo = CHART.parents[1]
    img = IMAGES["test"]
    assert list(IMAGES).index("test") > list(IMAGES).index("consumer")  # built after its FROM
    steps = [ln for ln in (repo / img.dockerfile).read_text().splitlines() if ln and not ln.startswith("#")]
    assert steps[0] == f"FROM {IMAGES['consumer'].reference}"
    copied: dict[str, str] = {}
    for step in steps[1:]:
        verb, *srcs, dest = step.split()
        assert verb == "COPY" and dest.startswith("/opt/lagpilot/handlers/"), step
        for src in srcs:
            assert (repo / src).is_file(), src
            assert f"!{src}" in (repo / img.ignorefile).read_text()  # in the build context
            copied[src] = dest + Path(src).name
    # importable as the tests name them: /opt/lagpilot/handlers/<module path>
    for module in ("tests", "tests/real", "tests/real/operator_handlers", "tests/real/drain_handlers"):
        src = f"{module}/__init__.py" if not module.endswith("handlers") else f"{module}.py"
        assert copied[src] == f"/opt/lagpilot/handlers/{src}", (src, copied.get(src))
