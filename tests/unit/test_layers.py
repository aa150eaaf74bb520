"""The import-layer contracts in pyproject.toml ([tool.importlinter]) hold, and they can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "src" / "lagpilot"


def lint(extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:  # a copy of a package placed before the installed one
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    exe = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(exe), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def lint_with(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """The real contracts over a copy of the operator package where ``module`` (a path under
    lagpilot/) imports ``line`` as well."""
    pkg = tmp_path / "lagpilot"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    f = pkg / module
    text = f.read_text()
    assert "from __future__ import annotations\n" in text
    f.write_text(
        text.replace(
            "from __future__ import annotations\n",
            f"from __future__ import annotations\n\n{line}  # noqa\n",
            1,
        )
    )
    return lint(tmp_path)


def test_the_layers_hold() -> None:
    out = lint()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "broken" in out.stdout and "0 broken" in out.stdout
    # every contract was checked, the layers one included
    for name in (
        "the operator's layers",
        "decisions are pure",
        "the simulator runs on the decisions alone",
        "the manifest builders are pure",
        "the consumer image's runtime imports nothing",
        "the operator imports nothing of the dev tooling",
    ):
        assert name in out.stdout, (name, out.stdout[-3000:])


def test_a_decision_module_importing_a_kubernetes_client_breaks_the_pure_contract(tmp_path: Path) -> None:
    out = lint_with(tmp_path, "decide/step.py", "import kubernetes")
    assert out.returncode != 0, out.stdout[-3000:]
    assert "decisions are pure" in out.stdout and "lagpilot.decide.step -> kubernetes" in out.stdout, (
        out.stdout[-3000:]
    )


def test_a_decision_module_importing_the_kafka_side_breaks_the_layers(tmp_path: Path) -> None:
    out = lint_with(tmp_path, "decide/lag.py", "import lagpilot.observe.kafka_common")
    assert out.returncode != 0, out.stdout[-3000:]
    assert (
        "Broken contracts" in out.stdout
        and "the operator's layers" in out.stdout.split("Broken contracts")[1]
    )
    assert "lagpilot.decide is not allowed to import lagpilot.observe" in out.stdout, out.stdout[-3000:]
    assert "lagpilot.decide.lag -> lagpilot.observe.kafka_common" in out.stdout, out.stdout[-3000:]
    # the simulator, which uses lag, would now reach the Kafka side too
    assert "the simulator runs on the decisions alone" in out.stdout.split("Broken contracts")[1]
