"""The import-layer contracts in pyproject.toml ([tool.importlinter]) hold, and they can fail."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def lint(extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:  # a copy of a package placed before the installed one
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    exe = Path(sys.executable).parent / "lint-imports"
    return subprocess.run([str(exe), "--no-cache", "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_layers_hold() -> None:
    out = lint()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "broken" in out.stdout and "0 broken" in out.stdout


def test_a_decision_module_importing_a_kubernetes_client_breaks_the_pure_contract(tmp_path: Path) -> None:
    # the real contracts over a copy of the operator package whose step.py imports the kube client
    pkg = tmp_path / "lagpilot"
    shutil.copytree(ROOT / "operator" / "src" / "lagpilot", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    step = pkg / "step.py"
    step.write_text(step.read_text().replace("from __future__ import annotations\n",
                                             "from __future__ import annotations\n\nimport kubernetes  # noqa\n", 1))
    out = lint(tmp_path)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "decisions are pure" in out.stdout and "lagpilot.step -> kubernetes" in out.stdout, out.stdout[-3000:]
