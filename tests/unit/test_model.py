"""The model (lagpilot.model): one declaration, enforced as written.

The CRD is generated from the model (tests/unit/test_model_generated.py keeps the files fresh), so the
parser and the CRD cannot disagree on a pattern or a bound by construction; these tests check the
two places where they still could: what pydantic enforces vs. what the generated schema says
(bounds at their edges, hypothesis properties over specs drawn from the schema), and the CEL rules,
evaluated by cel-python as written (every rule of the CRD is either evaluated or one of the
documented exceptions). tests/real/test_crd_parser_agreement.py compares with the real API server.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from lagpilot.model import cel
from lagpilot.model.crd import openapi_schema, spec_schema
from lagpilot.model.validate import SpecError, field_path, parse, stored
from lagpilot.spec import parse_spec
from tests.crd_specs import mutated_specs, schema_at, set_path, valid_specs
from tests.unit.test_crd_schema import SCHEMA, validate

BASE: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "topic": "orders",
    "groupId": "g",
    "processing": {"sink": "log"},
}


def _walk(schema: dict[str, Any], path: str):
    for name, sub in schema.get("properties", {}).items():
        p = f"{path}.{name}"
        yield p, sub
        yield from _walk(sub, p)
        if "items" in sub:
            yield from _walk(sub["items"], p + "[]")
        if isinstance(sub.get("additionalProperties"), dict):
            yield p + ".*", sub["additionalProperties"]


def _rules(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, str]]]:
    out = [(path, r) for r in schema.get("x-kubernetes-validations", [])]
    for name, sub in schema.get("properties", {}).items():
        out += _rules(sub, f"{path}.{name}")
    if "items" in schema:
        out += _rules(schema["items"], path + "[]")
    return out


NUMERIC = [
    (p, s)
    for p, s in _walk(SCHEMA["properties"]["spec"], "spec")
    if s.get("type") in ("integer", "number") and "[]" not in p and "*" not in p
]


@pytest.mark.parametrize("path,schema", NUMERIC, ids=[p for p, _ in NUMERIC])
def test_numeric_bounds_are_the_crd_bounds(path: str, schema: dict[str, Any]) -> None:
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
        with pytest.raises(SpecError):
            parse_spec(set_path(base, dotted, schema.get("minimum", 0) + 1.5))


def test_every_cel_rule_is_evaluated_but_the_documented_exceptions() -> None:
    rules = _rules(openapi_schema())
    transition = [(p, r["rule"]) for p, r in rules if cel.is_transition_rule(r["rule"])]
    assert transition == [(".spec.topic", "self == oldSelf"), (".spec.groupId", "self == oldSelf")]
    root = [r["rule"] for p, r in rules if p == ""]
    assert root == ["size(self.metadata.name) <= 52"]  # the parser sees the spec only
    evaluated = [r for p, r in rules if p.startswith(".spec") and not cel.is_transition_rule(r["rule"])]
    assert len(evaluated) == 32
    for rule in evaluated:  # each compiles, and runs on the defaulted base spec (where it holds)
        assert cel._program(rule["rule"]) is not None


# one spec per evaluated rule that breaks it (and only it), with the path the API server names
BREAKS = [
    ({"failure": {"deadLetterTopic": "orders"}}, "spec.failure.deadLetterTopic", "must differ from topic"),
    (
        {"topic": "a.b", "failure": {"deadLetterTopic": "a_b"}},
        "spec.failure.deadLetterTopic",
        "must not collide",
    ),
    ({"topic": "t" * 246}, "spec.topic", "at most 245 characters"),
    (
        {"catchUpSLASeconds": 10, "batch": {"timeoutMs": 500}},
        "spec.scaling.pollIntervalSeconds",
        "catchUpSLASeconds",
    ),
    ({"catchUpSLASeconds": 20, "batch": {"timeoutMs": 20000}}, "spec.batch.timeoutMs", "shorter than"),
    (
        {"kafka": {"bootstrapServers": "k:1", "securityProtocol": "SASL_SSL", "secretRef": {"name": "s"}}},
        "spec.kafka.saslMechanism",
        "is required when",
    ),
    (
        {"kafka": {"bootstrapServers": "k:1", "saslMechanism": "PLAIN"}},
        "spec.kafka.saslMechanism",
        "only allowed",
    ),
    (
        {
            "kafka": {
                "bootstrapServers": "k:1",
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "OAUTHBEARER",
                "secretRef": {"name": "s"},
            }
        },
        "spec.kafka.oauthbearer",
        "is required when",
    ),
    (
        {
            "kafka": {
                "bootstrapServers": "k:1",
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "PLAIN",
                "secretRef": {"name": "s"},
                "oauthbearer": {"tokenEndpointUrl": "https://idp/token"},
            }
        },
        "spec.kafka.oauthbearer",
        "only allowed",
    ),
    (
        {"kafka": {"bootstrapServers": "k:1", "securityProtocol": "SSL"}},
        "spec.kafka.secretRef",
        "is required when",
    ),
    (
        {"kafka": {"bootstrapServers": "k:1", "secretRef": {"name": "s"}}},
        "spec.kafka.secretRef",
        "only allowed",
    ),
    ({"topic": "."}, "spec.topic", 'must not be "." or ".."'),
    ({"processing": {"sink": "log", "handler": "a:b"}}, "spec.processing", "exactly one"),
    ({"processing": {"sink": "postgres"}}, "spec.processing.postgres", "is required when"),
    (
        {"processing": {"sink": "log", "postgres": {"dsnSecretRef": {"name": "p"}}}},
        "spec.processing.postgres",
        "only allowed",
    ),
    (
        {"processing": {"sink": "log", "config": {f"k{i}": "x" * 4000 for i in range(3)}}},
        "spec.processing.config",
        "at most 10000",
    ),
    (
        {"processing": {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "p", "key": "..k"}}}},
        "spec.processing.postgres.dsnSecretRef.key",
        "must not be",
    ),
    ({"failure": {"policy": "exit", "deadLetterTopic": "x"}}, "spec.failure.deadLetterTopic", "only allowed"),
    ({"failure": {"deadLetterTopic": ".."}}, "spec.failure.deadLetterTopic", 'must not be "." or ".."'),
    ({"failure": {"deadLetterTopic": "__x"}}, "spec.failure.deadLetterTopic", 'must not start with "__"'),
    (
        {"scaling": {"minReplicas": 11}},
        "spec.scaling.minReplicas",
        "less than or equal to scaling.maxReplicas",
    ),
    (
        {"drain": {"warmRuntime": True, "launcher": "sparkApplication"}},
        "spec.drain.warmRuntime",
        "must be false",
    ),
    ({"drain": {"warmRuntimeCooldownSeconds": 5}}, "spec.drain.warmRuntimeCooldownSeconds", "allowed only"),
    (
        {"drain": {"resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "3Gi"}}}},
        "spec.drain.resources.requests",
        "less than or equal to drain.resources.limits",
    ),
    (
        {"drain": {"launcher": "sparkApplication", "resources": {"limits": {"memory": "4Gi"}}}},
        "spec.drain.resources",
        "launcher job only",
    ),
    (
        {"template": {"resources": {"requests": {"cpu": "1.5"}, "limits": {"cpu": "1200m"}}}},
        "spec.template.resources.requests",
        "less than or equal to",
    ),
    ({"template": {"env": [{"name": "LAGPILOT_A"}]}}, "spec.template.env[0].name", "LAGPILOT_"),
    ({"template": {"env": [{"name": "LP_TEST_A"}]}}, "spec.template.env[0].name", "LP_TEST_"),
    (
        {
            "template": {
                "env": [
                    {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ]
            }
        },
        "spec.template.env[0]",
        "not both",
    ),
    (
        {"template": {"env": [{"name": "A", "valueFrom": {}}]}},
        "spec.template.env[0].valueFrom",
        "exactly one",
    ),
    (
        {"template": {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "."}}}]}},
        "spec.template.env[0].valueFrom.secretKeyRef.key",
        "must not be",
    ),
    (
        {"template": {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "s", "key": "..a"}}}]}},
        "spec.template.env[0].valueFrom.configMapKeyRef.key",
        "must not be",
    ),
]


def test_every_evaluated_rule_is_broken_once_below() -> None:
    messages = {
        " ".join(r["message"].split())
        for p, r in _rules(spec_schema(), ".spec")
        if not cel.is_transition_rule(r["rule"])
    }
    hit = set()
    for patch, path, fragment in BREAKS:
        with pytest.raises(SpecError) as info:
            parse({**BASE, **patch})
        hit |= {m for p, m in info.value.problems if p == path and fragment in m}
    assert hit == messages


@pytest.mark.parametrize("patch,path,fragment", BREAKS, ids=[b[1] + ":" + b[2] for b in BREAKS])
def test_a_broken_rule_names_its_field_with_the_crd_message(
    patch: dict[str, Any], path: str, fragment: str
) -> None:
    parse(BASE)  # positive control
    with pytest.raises(SpecError) as info:
        parse({**BASE, **patch})
    assert any(p == path and fragment in m for p, m in info.value.problems), info.value.problems


def test_rules_see_the_defaulted_object() -> None:
    """As on the API server: `catchUpSLASeconds: 10` alone breaks the rule against the default poll
    interval (15), which the raw spec does not contain."""
    assert "scaling" not in {**BASE, "catchUpSLASeconds": 10}
    assert stored(parse(BASE))["scaling"]["pollIntervalSeconds"] == 15
    with pytest.raises(SpecError, match=r"spec\.scaling\.pollIntervalSeconds"):
        parse({**BASE, "catchUpSLASeconds": 10, "batch": {"timeoutMs": 500}})


def test_kubernetes_cel_library_functions() -> None:
    assert cel.holds("self.replace('.', '_') == 'a_b_c'", "a.b.c")
    assert cel.holds("self.map(k, size(self[k])).sum() == 5", {"a": "xy", "b": "xyz"})
    assert cel.holds("isQuantity('1.5Gi') && !isQuantity('1.5 Gi')", {})
    assert cel.holds("quantity('1500m').compareTo(quantity('1')) == 1", {})
    assert cel.holds("quantity('1Ki').compareTo(quantity('1024')) == 0", {})


def test_duplicate_list_map_key_is_named_at_its_index() -> None:
    with pytest.raises(SpecError) as info:
        parse({**BASE, "template": {"env": [{"name": "A"}, {"name": "B"}, {"name": "A"}]}})
    assert [p for p, _ in info.value.problems] == ["spec.template.env[2]"]


def test_field_path_of_pydantic_locations() -> None:
    assert field_path(("template", "env", 0, "name")) == "spec.template.env[0].name"
    assert field_path(("processing", "config", "k")) == "spec.processing.config.k"


def test_stored_spec_round_trips() -> None:
    s = stored(parse(BASE))
    assert stored(parse(s)) == s
    assert s["batch"] == {"maxRecords": 500, "timeoutMs": 1000} and "postgres" not in s["processing"]


def _openapi_paths(spec: dict[str, Any]) -> list[str]:
    return [e.split(":", 1)[0].lstrip(".") for e in validate(SCHEMA, {"spec": spec}, "")]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(valid_specs())
def test_every_spec_the_crd_admits_is_parsed(spec: dict[str, Any]) -> None:
    assert _openapi_paths(spec) == []
    parse_spec(spec)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(mutated_specs())
def test_what_the_schema_rejects_the_parser_rejects_naming_the_field(
    case: tuple[dict[str, Any], str],
) -> None:
    spec, _mutated = case
    schema_errors = _openapi_paths(spec)
    if not schema_errors:
        return
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    parser_paths = [p for p, _ in info.value.problems]

    def related(a: str, b: str) -> bool:
        a, b = a.replace("[", ".["), b.replace("[", ".[")
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    assert any(related(s, p) for s in schema_errors for p in parser_paths), (schema_errors, parser_paths)


def test_schema_at_helper_reads_the_generated_schema() -> None:
    assert schema_at("spec.batch.maxRecords")["maximum"] == 100000


def test_a_read_only_mapping_view_is_parsed_and_remembered() -> None:
    """kopf passes the spec as a Mapping view: parsed like a dict, and a repeated spec is not
    validated again (the model is immutable)."""
    from types import MappingProxyType

    view = MappingProxyType({**BASE, "batch": MappingProxyType({"maxRecords": 7})})
    first = parse(view)
    assert first.batch.max_records == 7
    assert parse({**BASE, "batch": {"maxRecords": 7}}) is first
    with pytest.raises(SpecError):  # errors are not remembered as successes
        parse({**BASE, "batch": {"maxRecords": 0}})
