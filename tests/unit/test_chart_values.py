"""values.yaml and values.schema.json: every value documented, every value covered by the strict schema.

Pure file checks (no helm): they run everywhere. Rendering and schema enforcement by helm itself
are in test_chart_render.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot_dev.chart_readme import key_lines

CHART = Path(__file__).resolve().parents[2] / "charts" / "lagpilot"
VALUES_TEXT = (CHART / "values.yaml").read_text()
VALUES = yaml.safe_load(VALUES_TEXT)
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _documented_keys(text: str) -> Iterator[tuple[str, bool]]:
    """(dotted key, documented) for every value in values.yaml; groups of values are skipped.

    The keys and their `# --` blocks come from the README generator's own walk
    (lagpilot_dev.chart_readme.key_lines). A value is documented when it has such a block, or when
    an ancestor is documented as a whole and holds a Kubernetes object passed through unchanged
    (podSecurityContext, securityContext, resources), or is a free-form map in the schema (the
    entries of `grafanaDashboard.labels`). A group (a key whose children are values
    of the chart, like `image:`) needs no comment of its own.
    """
    entries = key_lines(text)
    documented: set[str] = set()
    for i, e in enumerate(entries):
        parent = e.key.rsplit(".", 1)[0] if "." in e.key else None
        whole = (
            parent is not None
            and parent in documented
            and (e.key.split(".")[0] in PASSTHROUGH or _free_form(parent))
        )
        if e.doc is not None or whole:
            documented.add(e.key)
        is_group = (
            not e.inline
            and i + 1 < len(entries)
            and entries[i + 1].indent > e.indent
            and e.key.split(".")[0] not in PASSTHROUGH
        )
        if not is_group:
            yield e.key, e.key in documented


PASSTHROUGH = {"podSecurityContext", "securityContext", "resources"}


def _leaves(d: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def _schema_for(path: str) -> dict[str, Any] | None:
    node: dict[str, Any] = SCHEMA
    for part in path.split("."):
        if "$ref" in node:
            node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
        props = node.get("properties", {})
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict) or (
            node.get("type") == "object" and "properties" not in node
        ):
            return node  # a map or a pass-through object: its inner keys are free-form by design
        else:
            return None
    return node


def _free_form(path: str) -> bool:
    node = _schema_for(path)
    if node is not None and "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node is not None and node.get("type") == "object" and "properties" not in node


def test_every_value_has_a_doc_comment() -> None:
    undocumented = [k for k, ok in _documented_keys(VALUES_TEXT) if not ok]
    assert undocumented == [], f"values without a '# --' comment: {undocumented}"


def test_doc_comment_parser_notices_a_missing_comment() -> None:
    """The check above must be able to fail."""
    text = "# -- documented\na: 1\nb:\n  # -- inner\n  c: 2\n  d: 3\n# plain comment\ne: []\n"
    assert dict(_documented_keys(text)) == {"a": True, "b.c": True, "b.d": False, "e": False}


@pytest.mark.parametrize("leaf", sorted(_leaves(VALUES)))
def test_every_value_is_in_the_schema(leaf: str) -> None:
    assert _schema_for(leaf) is not None, f"{leaf} is in values.yaml but not in values.schema.json"


def _objects_with_properties(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "properties" in node:
            yield path, node
        for k, v in node.items():
            yield from _objects_with_properties(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _objects_with_properties(v, f"{path}[{i}]")


def test_schema_is_strict_everywhere_it_lists_properties() -> None:
    loose = [
        p
        for p, n in _objects_with_properties(SCHEMA)
        if n.get("additionalProperties") is not False
        # core/v1 EnvVar (value / valueFrom are Kubernetes'), and the if/then refinement of a
        # strict object (a condition, not a shape)
        and not p.endswith((".extraEnv.items", ".if", ".then"))
    ]
    assert loose == [], f"objects in values.schema.json that accept unknown keys: {loose}"


def test_schema_requires_the_values_templates_rely_on() -> None:
    for key in ("image", "watchNamespaces", "serviceAccount", "rbac", "drain", "securityContext"):
        assert key in SCHEMA["required"]


def test_defaults_are_secure() -> None:
    c = VALUES["securityContext"]
    assert c["runAsNonRoot"] is True
    assert c["readOnlyRootFilesystem"] is True
    assert c["allowPrivilegeEscalation"] is False
    assert c["capabilities"]["drop"] == ["ALL"]
    assert c["seccompProfile"]["type"] == "RuntimeDefault"
    assert VALUES["podSecurityContext"]["runAsNonRoot"] is True
    assert VALUES["rbac"]["create"] is True
    assert VALUES["serviceMonitor"]["enabled"] is False  # needs prometheus-operator's CRDs
