"""The CRD's CEL rules, evaluated in Python as written (cel-python), the way the API server does.

`problems(schema, value, path)` walks an object with the (generated) schema of its type and checks
every `x-kubernetes-validations` rule at the node it is declared on, with `self` bound to that
node's value, defaults applied. What the parser cannot check, and why:

- transition rules (on `oldSelf`: `topic` and `groupId` immutable) compare with the stored object,
  which only the API server has;
- the root rule on `metadata.name` (the operator parses the spec only).

The functions the rules call beyond standard CEL are the ones Kubernetes adds to its CEL
environment (strings `replace`, lists `sum`, the quantity library); they are provided here, so
that the rule strings stay exactly the CRD's.

Besides CEL, a list with `x-kubernetes-list-type: map` must not repeat a key (structural, checked
by the API server's schema; done in the same walk).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

from lagpilot.model.quantity import parse_quantity


class _Quantity:
    """The value of Kubernetes' `quantity()`: comparable with `compareTo`."""

    def __init__(self, value: Decimal) -> None:
        self.value = value


def _replace(s: Any, old: Any, new: Any, n: Any = None) -> celtypes.StringType:
    count = -1 if n is None else int(n)
    return celtypes.StringType(str(s).replace(str(old), str(new), count))


def _sum(values: Any) -> celtypes.IntType | celtypes.DoubleType:
    items = list(values)
    if any(isinstance(v, celtypes.DoubleType) for v in items):
        return celtypes.DoubleType(sum(float(v) for v in items))
    return celtypes.IntType(sum(int(v) for v in items))


def _is_quantity(s: Any) -> celtypes.BoolType:
    return celtypes.BoolType(parse_quantity(str(s)) is not None)


def _quantity(s: Any) -> _Quantity:
    q = parse_quantity(str(s))
    if q is None:
        raise ValueError(f"quantity: not a quantity: {s!r}")
    return _Quantity(q)


def _compare_to(a: _Quantity, b: _Quantity) -> celtypes.IntType:
    return celtypes.IntType((a.value > b.value) - (a.value < b.value))


# Kubernetes' additions to CEL that the CRD's rules use
K8S_LIBRARY: dict[str, Callable[..., Any]] = {
    "replace": _replace,
    "sum": _sum,
    "isQuantity": _is_quantity,
    "quantity": _quantity,
    "compareTo": _compare_to,
}


def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=K8S_LIBRARY)


def holds(rule: str, value: Any) -> bool:
    """Whether a (non-transition) rule holds with `self` bound to `value` (JSON-like data)."""
    result = _program(rule).evaluate({"self": json_to_cel(value)})
    if isinstance(result, Exception):  # cel-python returns evaluation errors as values
        raise ValueError(str(result))
    return bool(result)


def problems(schema: Mapping[str, Any], value: Any, path: str) -> list[tuple[str, str]]:
    """(field path, message) for every rule of `schema` (and below) that `value` breaks."""
    out: list[tuple[str, str]] = []
    for rule in schema.get("x-kubernetes-validations", []):
        if is_transition_rule(rule["rule"]):
            continue
        try:
            ok = holds(rule["rule"], value)
        except Exception as exc:  # noqa: BLE001 - the API server reports a rule it cannot evaluate as invalid
            out.append((path, f"{rule['message']} (rule not evaluable: {exc})"))
            continue
        if not ok:
            out.append((path + rule.get("fieldPath", ""), " ".join(rule["message"].split())))
    if isinstance(value, Mapping):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                out += problems(props[key], sub, f"{path}.{key}")
            elif isinstance(extra, Mapping):
                out += problems(extra, sub, f"{path}.{key}")
    elif isinstance(value, list):
        items = schema.get("items", {})
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[str] = set()
        for i, item in enumerate(value):
            out += problems(items, item, f"{path}[{i}]")
            if schema.get("x-kubernetes-list-type") == "map" and isinstance(item, Mapping):
                key = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
                if key in seen:
                    out.append((f"{path}[{i}]", f"Duplicate value: {key}"))
                seen.add(key)
    return out
