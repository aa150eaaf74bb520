"""The field tables of docs/crd-reference.md, from the model.

Each table sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->` and lists, in
declaration order, every field under its roots that has a `Doc`: path, type and default (from the
schema unless the `Doc` says otherwise), bounds and what the operator does with it (the `Doc`'s
words). The prose around the tables is the reference's own.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from lagpilot.model.crd import spec_schema
from lagpilot.model.spec import BatchConsumerGroupSpec, Doc

# table name -> the fields whose rows it holds (each with the fields below it)
TABLES: dict[str, list[str]] = {
    "kafka": ["spec.kafka"],
    "topic": ["spec.topic", "spec.groupId"],
    "batch": ["spec.batch"],
    "processing": ["spec.processing"],
    "failure": ["spec.failure"],
    "scaling": ["spec.scaling"],
    "sla": ["spec.catchUpSLASeconds"],
    "drain": ["spec.drain"],
    "paused": ["spec.paused"],
    "mode": ["spec.mode"],
    "template": ["spec.template"],
}
HEAD = "| field | type | default | bounds | what the operator does with it |\n|---|---|---|---|---|\n"
_BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated: \2 -->)", re.S)


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model class inside `X`, `X | None` or `list[X]`, whether it is a list)."""
    many = False
    while True:
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        elif origin is list:
            annotation, many = typing.get_args(annotation)[0], True
        else:
            break
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, many
    return None, many


def fields(
    model: type[BaseModel] = BatchConsumerGroupSpec, path: str = "spec"
) -> Iterator[tuple[str, FieldInfo]]:
    """(path, field) of every field of the model, depth first, in declaration order."""
    for name, info in model.model_fields.items():
        sub_path = f"{path}.{info.alias or name}"
        yield sub_path, info
        sub, many = _model_of(info.annotation)
        if sub is not None:
            yield from fields(sub, sub_path + ("[]" if many else ""))


def doc_of(info: FieldInfo) -> Doc | None:
    return next((m for m in info.metadata if isinstance(m, Doc)), None)


def _schema_at(path: str) -> tuple[dict[str, Any], bool]:
    """(the schema of `spec.a.b[]...`, whether the field is required)."""
    node = spec_schema()
    required = True
    for part in path.split(".")[1:]:
        name = part.removesuffix("[]")
        required = name in node.get("required", [])
        node = node["properties"][name]
        if part.endswith("[]"):
            node = node["items"]
    return node, required


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == {}:
        return "{}"
    return str(value)


def row(path: str, doc: Doc) -> str:
    schema, required = _schema_at(path)
    kind = doc.type or ("enum" if "enum" in schema else str(schema.get("type")))
    if doc.default is not None:
        default = doc.default
    elif required:
        default = "— (required)"
    elif "default" in schema:
        default = f"`{_fmt(schema['default'])}`"
    else:
        default = "—"
    return f"| `{path}` | {kind} | {default} | {doc.bounds} | {doc.use} |"


def table(name: str) -> str:
    roots = TABLES[name]
    rows = []
    for path, info in fields():
        doc = doc_of(info)
        if doc is not None and any(path == r or path.startswith((r + ".", r + "[")) for r in roots):
            rows.append(row(path, doc))
    return HEAD + "\n".join(rows) + "\n"


def render(reference: str) -> str:
    """docs/crd-reference.md with every generated table rewritten from the model."""
    seen: set[str] = set()

    def replace(m: re.Match[str]) -> str:
        seen.add(m.group(2))
        return m.group(1) + table(m.group(2)) + m.group(4)

    out = _BLOCK.sub(replace, reference)
    missing = set(TABLES) - seen
    if missing:
        raise ValueError(f"docs/crd-reference.md lacks the markers of the tables {sorted(missing)}")
    return out
