"""Parse a CR's `spec` into the model, with the API server's verdict and field paths.

Order as in the API server: null values dropped, types, bounds, enums and patterns (pydantic, from
the same declarations the CRD is generated from), defaults applied, then the CEL rules evaluated
on the defaulted object (`lagpilot.model.cel`). Every problem names its field path
(`spec.scaling.maxReplicas`, `spec.template.env[0].name`), so a condition or event can say which
field to fix.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from lagpilot.model import cel
from lagpilot.model.crd import spec_schema
from lagpilot.model.spec import BatchConsumerGroupSpec


class SpecError(ValueError):
    """The spec is unusable as written; `problems` lists (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in self.problems))


# pydantic's wording for the errors a reader meets most, in the words the parser always used
_MESSAGES = {
    "missing": "is required",
    "int_type": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be a boolean",
    "float_type": "must be a number",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "list_type": "must be a list",
}


def field_path(loc: Sequence[int | str], root: str = "spec") -> str:
    """pydantic's error location as the API server's field path."""
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _schema_of(loc: Sequence[int | str]) -> Mapping[str, Any]:
    """The generated schema of the field at a pydantic location ({} if it has none)."""
    node: Mapping[str, Any] = spec_schema()
    for part in loc:
        if isinstance(part, int):
            node = node.get("items", {})
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            node = node.get("additionalProperties") or {}
    return node


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    schema = _schema_of(error["loc"])
    if kind in ("greater_than_equal", "less_than_equal") and "minimum" in schema:
        lo, hi = schema["minimum"], schema.get("maximum")
        return f"must be in {lo}..{hi}" if hi is not None else f"must be >= {lo}"
    if kind == "string_pattern_mismatch" and "pattern" in schema:
        return f"should match '{schema['pattern']}'"
    if kind == "literal_error" and "enum" in schema:
        return f"must be one of {', '.join(map(str, schema['enum']))}"
    msg = str(error["msg"]).removeprefix("Value error, ")
    return msg.removeprefix("Input ")  # e.g. "should match pattern ...", as the API server says


def _without_nulls(value: Any) -> Any:
    """The API server drops null values of fields that are not nullable (none in the spec)."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def parse(raw: object) -> BatchConsumerGroupSpec:
    """The typed spec; SpecError naming every bad field.

    The operator parses the same spec every cycle: a valid one is remembered (the model is
    immutable), so the CEL rules run once per distinct spec.
    """
    if not isinstance(raw, Mapping):
        raise SpecError([("spec", "must be an object")])
    try:
        # plain data first: kopf hands the spec over as a read-only Mapping view
        key = json.dumps(_without_nulls(raw), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):  # not JSON data: no cache, the model names the bad field
        return _parse(raw)
    return _parse_cached(key)


@functools.lru_cache(maxsize=256)
def _parse_cached(key: str) -> BatchConsumerGroupSpec:
    return _parse(json.loads(key))


def _parse(raw: Mapping[str, Any]) -> BatchConsumerGroupSpec:
    try:
        spec = BatchConsumerGroupSpec.model_validate(_without_nulls(raw))
    except ValidationError as exc:
        raise SpecError([(field_path(e["loc"]), _message(e)) for e in exc.errors()]) from None
    problems = cel.problems(spec_schema(), stored(spec), "spec")
    if problems:
        raise SpecError(problems)
    return spec


def stored(spec: BatchConsumerGroupSpec) -> dict[str, Any]:
    """The spec as the API server stores it: CRD names, defaults applied, unset fields absent."""
    out: dict[str, Any] = spec.model_dump(by_alias=True, exclude_none=True)
    return out
