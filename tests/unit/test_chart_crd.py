"""The chart ships a copy of the CRD (Helm installs CRDs only from the chart's crds/): it must not drift."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "crds" / "batchconsumergroup.yaml"
COPY = ROOT / "charts" / "lagpilot" / "crds" / "batchconsumergroup.yaml"


def test_chart_crd_is_an_exact_copy_of_the_source_crd() -> None:
    assert SOURCE.is_file(), f"{SOURCE} is missing"
    assert COPY.is_file(), f"{COPY} is missing: cp {SOURCE.relative_to(ROOT)} {COPY.relative_to(ROOT)}"
    assert COPY.read_bytes() == SOURCE.read_bytes(), (
        "charts/lagpilot/crds/batchconsumergroup.yaml differs from crds/batchconsumergroup.yaml; "
        "run: cp crds/batchconsumergroup.yaml charts/lagpilot/crds/ (docs/helm.md, 'Updating the CRD')"
    )


def test_chart_crds_dir_holds_only_the_lagpilot_crd() -> None:
    """Anything else in crds/ would be installed cluster-wide by every `helm install`."""
    files = sorted(p.name for p in COPY.parent.iterdir())
    assert files == ["batchconsumergroup.yaml"]
    docs = [d for d in yaml.safe_load_all(COPY.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("CustomResourceDefinition", "batchconsumergroups.lagpilot.io")
    ]
