"""The CRD and the operator's parser agree (issue 14): what the API server admits, the operator
accepts, and what the OpenAPI schema rejects, the parser rejects naming the same field.

Offline half: patterns and bounds compared literally, and hypothesis properties over specs drawn
from the CRD's own patterns and bounds (tests/crd_specs.py) against the OpenAPI validator of
test_crd_schema.py. The CEL half (cross-field rules, quantities) is compared on the real API server
in tests/real/test_crd_parser_agreement.py with the same strategies.
"""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from lagpilot import spec as spec_mod
from lagpilot.spec import SpecError, parse_spec
from tests.crd_specs import mutated_specs, schema_at, set_path, valid_specs
from tests.unit.test_crd_schema import SCHEMA, validate

PATTERNS = {
    "BOOTSTRAP_RE": "spec.kafka.bootstrapServers",
    "TOPIC_RE": "spec.topic",
    "GROUP_ID_RE": "spec.groupId",
    "HANDLER_RE": "spec.processing.handler",
    "TABLE_RE": "spec.processing.postgres.table",
    "DNS_SUBDOMAIN_RE": "spec.kafka.secretRef.name",
    "CONFIG_KEY_RE": "spec.processing.postgres.dsnSecretRef.key",
    "IMAGE_RE": "spec.template.image",
    "QUANTITY_RE": "spec.template.resources.limits.*",
    "ENV_NAME_RE": "spec.template.env[].name",
    "FIELD_PATH_RE": "spec.template.env[].valueFrom.fieldRef.fieldPath",
    "RESOURCE_FIELD_RE": "spec.template.env[].valueFrom.resourceFieldRef.resource",
}
# fields that share a pattern with one of the above
SAME_PATTERN = {
    "spec.failure.deadLetterTopic": "TOPIC_RE",
    "spec.processing.postgres.dsnSecretRef.name": "DNS_SUBDOMAIN_RE",
    "spec.template.env[].valueFrom.secretKeyRef.name": "DNS_SUBDOMAIN_RE",
    "spec.template.env[].valueFrom.configMapKeyRef.name": "DNS_SUBDOMAIN_RE",
    "spec.template.env[].valueFrom.secretKeyRef.key": "CONFIG_KEY_RE",
    "spec.template.env[].valueFrom.configMapKeyRef.key": "CONFIG_KEY_RE",
    "spec.template.resources.requests.*": "QUANTITY_RE",
}

BASE: dict[str, Any] = {"kafka": {"bootstrapServers": "k:9092"}, "topic": "orders", "groupId": "g",
                        "processing": {"sink": "log"}}


def _walk(schema: dict, path: str):
    for name, sub in schema.get("properties", {}).items():
        p = f"{path}.{name}"
        yield p, sub
        yield from _walk(sub, p)
        if "items" in sub:
            yield from _walk(sub["items"], p + "[]")
        if isinstance(sub.get("additionalProperties"), dict):
            yield p + ".*", sub["additionalProperties"]


def test_parser_patterns_are_the_crd_patterns_verbatim() -> None:
    for const, path in {**PATTERNS, **{p: c for p, c in SAME_PATTERN.items()}}.items():
        if const.startswith("spec."):
            const, path = path, const
        assert getattr(spec_mod, const).pattern == schema_at(path)["pattern"], (const, path)


def test_every_pattern_in_the_spec_schema_is_known_to_the_parser() -> None:
    patterned = {p for p, s in _walk(SCHEMA["properties"]["spec"], "spec") if "pattern" in s}
    assert patterned == set(PATTERNS.values()) | set(SAME_PATTERN)


NUMERIC = [(p, s) for p, s in _walk(SCHEMA["properties"]["spec"], "spec")
           if s.get("type") in ("integer", "number") and "[]" not in p and "*" not in p]


@pytest.mark.parametrize("path,schema", NUMERIC, ids=[p for p, _ in NUMERIC])
def test_numeric_bounds_are_the_crd_bounds(path: str, schema: dict) -> None:
    dotted = path.removeprefix("spec.")
    base = set_path(BASE, "catchUpSLASeconds", 604800) if path != "spec.catchUpSLASeconds" else BASE
    for edge in ("minimum", "maximum"):
        if edge not in schema:
            continue
        step = -1 if edge == "minimum" else 1
        bad = schema[edge] + (step if schema["type"] == "integer" else step * 0.001)
        with pytest.raises(SpecError) as info:
            parse_spec(set_path(base, dotted, bad))
        assert path in [p for p, _ in info.value.problems], (bad, info.value.problems)
        assert validate(SCHEMA, {"spec": set_path(base, dotted, bad)})  # the schema agrees
    if schema["type"] == "integer":  # integer fields take no fractions, in the CRD and the parser
        frac = schema.get("minimum", 0) + 1.5
        with pytest.raises(SpecError):
            parse_spec(set_path(base, dotted, frac))


def _openapi_paths(spec: dict[str, Any]) -> list[str]:
    return [e.split(":", 1)[0].lstrip(".") for e in validate(SCHEMA, {"spec": spec}, "")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(valid_specs())
def test_every_spec_the_crd_admits_the_parser_accepts(spec: dict[str, Any]) -> None:
    assert _openapi_paths(spec) == []  # the generator stays inside the schema
    parse_spec(spec)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mutated_specs())
def test_what_the_schema_rejects_the_parser_rejects_naming_the_field(case: tuple[dict[str, Any], str]) -> None:
    spec, _mutated = case
    schema_errors = _openapi_paths(spec)
    if not schema_errors:
        return  # only CEL can decide: compared on the real API server
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    parser_paths = [p for p, _ in info.value.problems]

    def related(a: str, b: str) -> bool:
        a, b = a.replace("[", ".["), b.replace("[", ".[")
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    assert any(related(s, p) for s in schema_errors for p in parser_paths), (schema_errors, parser_paths)
