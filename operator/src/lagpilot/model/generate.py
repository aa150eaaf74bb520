"""Write (or check) what is generated from the model.

    python -m lagpilot.model.generate          # rewrite the files below
    python -m lagpilot.model.generate --check  # exit 1 and name the stale files (tests do this)

Generated: crds/batchconsumergroup.yaml, its chart copy charts/lagpilot/crds/batchconsumergroup.yaml
(identical bytes: Helm installs CRDs only from the chart), and the field tables of
docs/crd-reference.md (between its `<!-- generated: ... -->` markers; the prose is kept).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from lagpilot.model import docs
from lagpilot.model.crd import HEADER, crd

CRD_PATHS = ("crds/batchconsumergroup.yaml", "charts/lagpilot/crds/batchconsumergroup.yaml")
REFERENCE = "docs/crd-reference.md"


def repo_root() -> Path:
    """The checkout this module lives in (operator/src/lagpilot/model/ -> the top)."""
    return Path(__file__).resolve().parents[4]


class _Dumper(yaml.SafeDumper):
    """Block style, long text folded at 100 columns, keys in the order the model gives them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if len(value) > 80 and "\n" not in value and value == value.strip() and "  " not in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=">")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def crd_yaml() -> str:
    body = yaml.dump(
        crd(), Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True, default_flow_style=False
    )
    return HEADER + body


def expected(root: Path) -> dict[Path, str]:
    """Each generated file and the text it must have."""
    text = crd_yaml()
    out = {root / p: text for p in CRD_PATHS}
    reference = root / REFERENCE
    out[reference] = docs.render(reference.read_text())
    return out


def stale(root: Path) -> list[Path]:
    return [p for p, text in expected(root).items() if not p.is_file() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagpilot.model.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    parser.add_argument("--root", type=Path, default=None, help="the checkout (default: this module's)")
    args = parser.parse_args(argv)
    root = args.root or repo_root()
    if args.check:
        bad = stale(root)
        for p in bad:
            print(f"stale: {p.relative_to(root)} (run ./dev/gen-crd)", file=sys.stderr)
        return 1 if bad else 0
    for path, text in expected(root).items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
