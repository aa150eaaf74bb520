"""What is generated from the model (lagpilot.model) is up to date: the CRD, its chart copy and the
field tables of docs/crd-reference.md. Fix a failure with ./dev/gen-crd, never by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from lagpilot.model import generate
from lagpilot.model.crd import crd

ROOT = Path(__file__).resolve().parents[2]


def test_generated_files_are_not_stale() -> None:
    stale = [str(p.relative_to(ROOT)) for p in generate.stale(ROOT)]
    assert stale == [], f"stale (run ./dev/gen-crd): {stale}"


def _copy(tmp_path: Path) -> Path:
    for rel in (*generate.CRD_PATHS, generate.REFERENCE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_the_check_names_each_file_edited_by_hand(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert generate.stale(root) == []  # positive control
    chart = root / generate.CRD_PATHS[1]
    chart.write_text(chart.read_text().replace("maximum: 100000", "maximum: 100001"))
    ref = root / generate.REFERENCE
    old = "| `spec.batch.maxRecords` | integer | `500`"
    ref.write_text(ref.read_text().replace(old, old.replace("500", "50")))
    assert generate.stale(root) == [chart, ref]
    assert generate.main(["--check", "--root", str(root)]) == 1
    assert generate.main(["--root", str(root)]) == 0  # rewrites them
    assert generate.stale(root) == []


def test_a_missing_table_marker_is_an_error(tmp_path: Path) -> None:
    import pytest

    root = _copy(tmp_path)
    ref = root / generate.REFERENCE
    ref.write_text(ref.read_text().replace("<!-- generated: drain -->", ""))
    with pytest.raises(ValueError, match="drain"):
        generate.stale(root)


def test_the_written_crd_is_the_model_s() -> None:
    assert yaml.safe_load((ROOT / generate.CRD_PATHS[0]).read_text()) == crd()
