"""Every lagpilot pod starts through `lagpilot.cli` (the images' `lagpilot consume | drain`): its
built-in subcommands must not pay for `importlib.metadata` (the plugin lookup, for `dev`/`demo`
only): ~0.19 s of imports at load 20 in the consumer image (`python -X importtime -m lagpilot.cli
drain --help`, 2026-11-26; docs/node.md "Plan → first record on the node")."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    # -S: no site (nothing but lagpilot.cli and what it imports), the checkout's sources only
    out = subprocess.run([sys.executable, "-S", "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=120,
                         env={"PYTHONPATH": str(REPO / "operator" / "src")})
    return set(out.stdout.split())


def test_importing_the_cli_does_not_import_importlib_metadata() -> None:
    assert "importlib.metadata" not in _modules_after("import lagpilot.cli")


def test_the_plugin_lookup_still_finds_entry_points() -> None:
    from lagpilot import cli

    found = cli.subcommands()
    assert {"consume", "drain", "operator", "simulate"} <= set(found)
