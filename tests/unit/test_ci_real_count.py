"""dev/count_real_passed.py: CI (dev/test with CI=true) fails a run in which no real-part test passed."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("count_real_passed", REPO / "dev" / "count_real_passed.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)  # type: ignore[union-attr]

XML = """<testsuites><testsuite>
<testcase classname="tests.unit.test_x" name="a"/>
{real}
</testsuite></testsuites>"""


def write(tmp_path: Path, real: str) -> str:
    p = tmp_path / "j.xml"
    p.write_text(XML.format(real=real))
    return str(p)


def test_counts_only_passed_real_tests(tmp_path: Path) -> None:
    assert mod.count_real_passed(write(tmp_path, "")) == 0
    assert (
        mod.count_real_passed(
            write(tmp_path, '<testcase classname="tests.real.test_y" name="b"><skipped/></testcase>')
        )
        == 0
    )
    assert (
        mod.count_real_passed(
            write(tmp_path, '<testcase classname="tests.real.test_y" name="b"><failure/></testcase>')
        )
        == 0
    )
    assert (
        mod.count_real_passed(
            write(
                tmp_path,
                '<testcase classname="tests.real.test_y" name="b"/>'
                '<testcase classname="tests.real.test_z" name="c"/>',
            )
        )
        == 2
    )


def test_dev_test_refuses_skip_real_under_ci() -> None:
    r = subprocess.run(
        ["bash", str(REPO / "dev" / "test")],
        env={"CI": "true", "LAGPILOT_SKIP_REAL": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "refusing" in r.stderr


def test_ci_run_unsets_skip_real() -> None:
    text = (REPO / ".ci" / "run").read_text()
    assert "unset LAGPILOT_SKIP_REAL" in text and "export CI=true" in text
