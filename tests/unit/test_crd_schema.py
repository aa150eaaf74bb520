"""Offline checks of crds/batchconsumergroup.yaml and examples/ (no API server needed).

Why: `kubectl explain` only reads descriptions, printer columns silently show <none> when their
JSONPath is wrong, and a status field missing from the schema is pruned without an error. These
tests catch all three before a cluster is involved, and keep the CRD in line with
docs/CONTRACTS.md. CEL rules are exercised on the real API server in tests/real/test_crd.py.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "batchconsumergroup.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("bcg-*.yaml"))

CRD = yaml.safe_load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]
STATUS = SCHEMA["properties"]["status"]


# --------------------------------------------------------------------------- helpers


def walk_properties(schema: dict, path: str = ""):
    """Yield (path, schema) for every named property, descending into items."""
    for name, sub in schema.get("properties", {}).items():
        p = f"{path}.{name}" if path else name
        yield p, sub
        yield from walk_properties(sub, p)
        if "items" in sub:
            yield from walk_properties(sub["items"], p + "[]")


def schema_at(path: str) -> dict:
    """Schema of a dotted path such as `status.conditions[].status` (KeyError if undeclared)."""
    node = SCHEMA
    for part in path.split("."):
        many = part.endswith("[]")
        name = part.removesuffix("[]")
        if name not in node.get("properties", {}) and isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]  # a map: any key
        else:
            node = node["properties"][name]
        if many:
            node = node["items"]
    return node


_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def validate(schema: dict, value: Any, path: str = "") -> list[str]:
    """A small structural validator for the OpenAPI subset the CRD uses (no CEL).

    jsonschema is not a project dependency; this covers type, enum, bounds, lengths, pattern,
    required, unknown fields (pruning), nullable, int-or-string and preserve-unknown-fields.
    """
    errs: list[str] = []
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null not allowed"]
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return [f"{path}: must be int or string"]
    else:
        t = schema.get("type")
        if t == "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif t == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif t in _TYPES:
            ok = isinstance(value, _TYPES[t]) and (t == "boolean" or not isinstance(value, bool))
        else:
            ok = True
        if not ok:
            return [f"{path}: expected {t}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errs.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(f"{path}: longer than {schema['maxLength']}")
        if "pattern" in schema and not re.fullmatch(schema["pattern"], value):  # Go: `$` = end of text
            errs.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(f"{path}: more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            errs += validate(schema.get("items", {}), item, f"{path}[{i}]")
    if isinstance(value, dict):
        for req in schema.get("required", []):
            if req not in value:
                errs.append(f"{path}.{req}: required")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        opaque = schema.get("x-kubernetes-preserve-unknown-fields") or path == ".metadata"
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errs.append(f"{path}: more than {schema['maxProperties']} properties")
        for k, v in value.items():
            if k in props:
                errs += validate(props[k], v, f"{path}.{k}")
            elif isinstance(extra, dict):
                errs += validate(extra, v, f"{path}.{k}")
            elif not opaque:
                errs.append(f"{path}.{k}: unknown field")
    return errs


def load_examples() -> list[tuple[str, dict]]:
    out = []
    for f in EXAMPLES:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") == "BatchConsumerGroup":
                out.append((f.name, doc))
    return out


def contract_blocks() -> dict[str, dict]:
    """The `spec:` and `status:` YAML sketches of docs/CONTRACTS.md."""
    text = (ROOT / "docs" / "CONTRACTS.md").read_text()
    blocks: dict[str, dict] = {}
    for body in re.findall(r"```yaml\n(.*?)```", text, re.S):
        doc = yaml.safe_load(body)
        if isinstance(doc, dict):
            blocks.update(doc)
    return blocks


def contract_leaves(obj: Any, path: str):
    """Yield (path, value) of the contract sketch; `{...}` / `[...]` mark opaque fields."""
    if isinstance(obj, dict) and set(obj) != {"..."}:
        for k, v in obj.items():
            yield from contract_leaves(v, f"{path}.{k}")
    elif isinstance(obj, list) and obj and obj != ["..."]:
        yield from contract_leaves(obj[0], path + "[]")
    else:
        yield path, obj


MINIMAL = {
    "apiVersion": "lagpilot.io/v1alpha1",
    "kind": "BatchConsumerGroup",
    "metadata": {"name": "minimal"},
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092"},
        "topic": "orders",
        "groupId": "orders-batch",
        "processing": {"sink": "log"},
    },
}


# --------------------------------------------------------------------------- the CRD's identity


def test_names_and_version_follow_the_contract():
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["metadata"]["name"] == "batchconsumergroups.lagpilot.io"
    spec = CRD["spec"]
    assert spec["group"] == "lagpilot.io" and spec["scope"] == "Namespaced"
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        "BatchConsumerGroup",
        "batchconsumergroups",
        "batchconsumergroup",
    )
    assert names["shortNames"] == ["bcg"] and names["categories"] == ["lagpilot"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [("v1alpha1", True, True)]


def test_status_subresource_and_deliberately_no_scale_subresource():
    assert VERSION["subresources"] == {"status": {}}  # docs/crd-reference.md explains why no scale


# --------------------------------------------------------------------------- descriptions


def test_every_property_has_a_description():
    missing = [
        p for p, s in walk_properties(SCHEMA) if p != "metadata" and not str(s.get("description", "")).strip()
    ]
    assert missing == []
    assert SCHEMA["description"].strip()


def _fmt(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def test_defaults_and_bounds_are_in_descriptions():
    """kubectl explain shows neither defaults nor min/max: the description must say them."""
    problems = []
    for path, s in walk_properties(SPEC, "spec"):
        desc = " ".join(s.get("description", "").split())
        if "default" in s and not isinstance(s["default"], dict):
            if f"Default {_fmt(s['default'])}" not in desc:
                problems.append(f"{path}: default {s['default']!r} not in description")
        if "minimum" in s and "maximum" in s:
            if f"{_fmt(s['minimum'])} to {_fmt(s['maximum'])}" not in desc:
                problems.append(f"{path}: bounds not in description")
        elif "minimum" in s and f"at least {_fmt(s['minimum'])}" not in desc:
            problems.append(f"{path}: minimum not in description")
    assert problems == []


def test_every_validation_rule_has_a_message():
    rules = []

    def collect(s: dict) -> None:
        rules.extend(s.get("x-kubernetes-validations", []))
        for sub in s.get("properties", {}).values():
            collect(sub)
        if "items" in s:
            collect(s["items"])

    collect(SCHEMA)
    assert len(rules) >= 12
    assert all(r.get("message", "").strip() for r in rules)


@pytest.mark.parametrize("field", ["topic", "groupId"])
def test_topic_and_group_id_are_immutable(field):
    rules = [r["rule"] for r in SPEC["properties"][field].get("x-kubernetes-validations", [])]
    assert "self == oldSelf" in rules
    assert field in SPEC["required"]  # a transition rule on an optional field could be dodged by removing it


# --------------------------------------------------------------------------- contract alignment


def test_every_contract_field_is_declared():
    """Undeclared status fields are pruned by the API server; undeclared spec fields are rejected."""
    missing = []
    for section, body in contract_blocks().items():
        for path, _ in contract_leaves(body, section):
            try:
                schema_at(path.strip(".").removesuffix("[]"))
            except KeyError:
                missing.append(path)
    assert missing == []


def test_contract_sample_values_match_crd_defaults():
    block = contract_blocks()["spec"]
    mismatches = []
    for path, value in contract_leaves(block, "spec"):
        s = schema_at(path)
        if "default" in s and s["default"] != value:
            mismatches.append((path, value, s["default"]))
    assert mismatches == []


def test_contract_status_sample_validates():
    status = copy.deepcopy(contract_blocks()["status"])
    status = {k: v for k, v in status.items() if v not in ({"...": None}, ["..."])}  # opaque in the sketch
    status["lastScaleTime"] = status["lastObservedTime"] = "2026-01-01T00:00:00Z"
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Reconciled",
            "message": "ok",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    assert validate(STATUS, status, ".status") == []


def test_the_status_is_structural_all_the_way_down():
    """No free-form part: every field is declared (jsonpath and printer columns reach each one),
    lists of objects are keyed (lagpilot.model.status)."""
    free = [p for p, s in walk_properties(STATUS, "status") if s.get("x-kubernetes-preserve-unknown-fields")]
    assert free == [] and not STATUS.get("x-kubernetes-preserve-unknown-fields")
    unkeyed = [
        p
        for p, s in walk_properties(STATUS, "status")
        if s.get("type") == "array"
        and s["items"].get("type") == "object"
        and s.get("x-kubernetes-list-type") != "map"
    ]
    assert unkeyed == []


# --------------------------------------------------------------------------- printer columns


def _column_path(json_path: str) -> str:
    """`.status.conditions[?(@.type=="Ready")].status` -> `status.conditions[].status`."""
    return re.sub(r"\[\?\(.*?\)\]", "[]", json_path).lstrip(".")


def test_printer_columns_point_at_declared_fields():
    cols = VERSION["additionalPrinterColumns"]
    names = [c["name"] for c in cols]
    for required in ["Topic", "Partitions", "Replicas", "Desired", "Lag", "Catch-up", "SLA", "Ready", "Age"]:
        assert required in names
    for c in cols:
        if c["jsonPath"] == ".metadata.creationTimestamp":
            continue
        s = schema_at(_column_path(c["jsonPath"]))
        kind = {"string": "string", "integer": "integer", "number": "number"}[s["type"]]
        assert c["type"] == kind, c["name"]
    default_view = [c["name"] for c in cols if c.get("priority", 0) == 0]
    assert default_view == ["Topic", "Replicas", "Lag", "Catch-up", "SLA", "Ready", "Age"]


def test_ready_column_filters_on_the_ready_condition():
    col = next(c for c in VERSION["additionalPrinterColumns"] if c["name"] == "Ready")
    assert col["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'


def test_decision_column_is_the_scaling_condition_message():
    col = next(c for c in VERSION["additionalPrinterColumns"] if c["name"] == "Decision")
    assert col["jsonPath"] == '.status.conditions[?(@.type=="Scaling")].message'


@pytest.mark.parametrize("path", ["status.slaSeconds", "status.lastDecision"])
def test_status_does_not_repeat_a_fact_kept_elsewhere(path):
    """slaSeconds is spec.catchUpSLASeconds and lastDecision the Scaling condition's message: the
    status keeps each fact once (`kubectl describe bcg` stays short)."""
    with pytest.raises(KeyError):
        schema_at(path)


# --------------------------------------------------------------------------- defaults and examples


def test_defaults_validate_against_their_own_schema():
    bad = [
        (p, s["default"])
        for p, s in walk_properties(SPEC, "spec")
        if "default" in s and validate(s, s["default"], p)
    ]
    assert bad == []


def test_there_are_three_examples():
    assert {f.name for f in EXAMPLES} == {"bcg-postgres.yaml", "bcg-handler.yaml", "bcg-sasl-tls.yaml"}


@pytest.mark.parametrize("name,doc", load_examples(), ids=[n for n, _ in load_examples()])
def test_example_validates_structurally(name, doc):
    assert doc["apiVersion"] == "lagpilot.io/v1alpha1"
    assert validate(SCHEMA, doc) == []
    assert len(doc["metadata"]["name"]) <= 52
    proc = doc["spec"]["processing"]
    assert ("sink" in proc) != ("handler" in proc)


def test_sasl_example_references_its_secret_keys():
    docs = list(yaml.safe_load_all((ROOT / "examples" / "bcg-sasl-tls.yaml").read_text()))
    bcg = next(d for d in docs if d["kind"] == "BatchConsumerGroup")
    secret = next(
        d
        for d in docs
        if d["kind"] == "Secret" and d["metadata"]["name"] == bcg["spec"]["kafka"]["secretRef"]["name"]
    )
    assert {"username", "password", "ca.crt"} <= set(secret["stringData"])
    assert bcg["spec"]["kafka"]["securityProtocol"] == "SASL_SSL" and "saslMechanism" in bcg["spec"]["kafka"]


def _with(path: str, value: Any) -> dict:
    obj = copy.deepcopy(MINIMAL)
    *parents, leaf = path.split(".")
    node = obj
    for p in parents:
        node = node.setdefault(p, {})
    if value is _DELETE:
        node.pop(leaf)
    else:
        node[leaf] = value
    return obj


_DELETE = object()

STRUCTURAL_REJECTS = [
    ("missing-topic", "spec.topic", _DELETE, ".spec.topic: required"),
    ("batch-zero", "spec.batch.maxRecords", 0, ".spec.batch.maxRecords"),
    ("batch-too-big", "spec.batch.maxRecords", 100001, ".spec.batch.maxRecords"),
    ("timeout-too-big", "spec.batch.timeoutMs", 600001, ".spec.batch.timeoutMs"),
    ("sla-zero", "spec.catchUpSLASeconds", 0, ".spec.catchUpSLASeconds"),
    ("bad-protocol", "spec.kafka.securityProtocol", "TLS", ".spec.kafka.securityProtocol"),
    ("bad-handler", "spec.processing.handler", "mypkg.handlers.process", ".spec.processing.handler"),
    ("bad-topic", "spec.topic", "orders topic", ".spec.topic"),
    ("bad-bootstrap", "spec.kafka.bootstrapServers", "kafka", ".spec.kafka.bootstrapServers"),
    ("string-for-int", "spec.batch.maxRecords", "500", ".spec.batch.maxRecords"),
    ("unknown-field", "spec.batch.maxRecord", 5, ".spec.batch.maxRecord: unknown field"),
    ("config-not-string", "spec.processing.config", {"n": 1}, ".spec.processing.config.n"),
]


@pytest.mark.parametrize(
    "path,value,expected", [r[1:] for r in STRUCTURAL_REJECTS], ids=[r[0] for r in STRUCTURAL_REJECTS]
)
def test_schema_rejects(path, value, expected):
    assert validate(SCHEMA, MINIMAL) == []  # the base is valid, so the error is the mutation's
    errs = validate(SCHEMA, _with(path, value))
    assert any(e.startswith(expected) for e in errs), errs


# --------------------------------------------------------------------------- string formats


def _pattern(path: str) -> re.Pattern:
    return re.compile(schema_at(path)["pattern"])


FORMATS = [
    # (field, value, accepted)
    ("spec.processing.handler", "mypkg.handlers:process", True),
    ("spec.processing.handler", "handlers:process", True),
    ("spec.processing.handler", "_pkg.mod_2:fn_3", True),
    ("spec.processing.handler", "mypkg.handlers.process", False),
    ("spec.processing.handler", "mypkg/handlers:process", False),
    ("spec.processing.handler", "mypkg.handlers:", False),
    ("spec.processing.handler", ":process", False),
    ("spec.processing.handler", "1pkg:process", False),
    ("spec.processing.handler", "pkg..mod:process", False),
    ("spec.processing.handler", "pkg:mod:process", False),
    ("spec.kafka.bootstrapServers", "kafka:9092", True),
    ("spec.kafka.bootstrapServers", "k-0.kafka.svc:9092,k-1.kafka.svc:9093", True),
    ("spec.kafka.bootstrapServers", "10.0.0.1:9092", True),
    ("spec.kafka.bootstrapServers", "[::1]:9092", True),
    ("spec.kafka.bootstrapServers", "kafka", False),
    ("spec.kafka.bootstrapServers", "kafka:", False),
    ("spec.kafka.bootstrapServers", "kafka:9092, kafka2:9092", False),
    ("spec.kafka.bootstrapServers", "kafka:9092,", False),
    ("spec.kafka.bootstrapServers", "PLAINTEXT://kafka:9092", False),
    ("spec.topic", "orders", True),
    ("spec.topic", "clickstream.v2_eu-west", True),
    ("spec.topic", "a" * 249, True),
    ("spec.topic", "a" * 250, False),
    ("spec.topic", "orders topic", False),
    ("spec.topic", "orders/eu", False),
    ("spec.topic", "", False),
    ("spec.processing.postgres.table", "lagpilot_records", True),
    ("spec.processing.postgres.table", "ledger.settled_payments", True),
    ("spec.processing.postgres.table", "x; drop table y", False),
    ("spec.processing.postgres.table", 'a"b', False),
    ("spec.processing.postgres.table", "a.b.c", False),
    ("spec.kafka.secretRef.name", "kafka-credentials", True),
    ("spec.kafka.secretRef.name", "Kafka_Credentials", False),
]


@pytest.mark.parametrize(
    "field,value,accepted",
    FORMATS,
    ids=[f"{f.rsplit('.', 1)[-1]}:{v[:30] or 'empty'}" for f, v, _ in FORMATS],
)
def test_string_format(field, value, accepted):
    assert (validate(schema_at(field), value, field) == []) is accepted
    if accepted:
        assert _pattern(field).search(value)


def test_the_default_sla_leaves_room_for_the_default_batch_timeout():
    """The CEL rule batch.timeoutMs < catchUpSLASeconds*1000 must hold for the defaults."""
    timeout = schema_at("spec.batch.timeoutMs")["default"]
    sla = schema_at("spec.catchUpSLASeconds")["default"]
    assert timeout < sla * 1000


# --------------------------------------------------------------------------- the reference doc


def test_reference_doc_covers_every_field():
    doc = (ROOT / "docs" / "crd-reference.md").read_text()
    paths = [p for p, _ in walk_properties(SPEC, "spec")] + [p for p, _ in walk_properties(STATUS, "status")]
    # the core/v1 EnvVar sources are summarised in one row, as in the Kubernetes docs
    # a row may stand for sibling objects of one shape: `status.startUps.*.seconds` (`*`: one path segment)
    patterns = [
        re.compile("^" + re.escape(r).replace(r"\*", r"[^.]+") + "$")
        for r in re.findall(r"^\| `([^`]*\*[^`]*)`", doc, flags=re.M)
    ]
    missing = [
        p
        for p in paths
        if not p.startswith("spec.template.env[].valueFrom.")
        and f"`{p}`" not in doc
        and not any(pat.match(p) for pat in patterns)
    ]
    assert missing == []


def test_reference_doc_states_every_default():
    doc = (ROOT / "docs" / "crd-reference.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in doc.splitlines()
        if line.startswith("| `spec.")
    }
    wrong = [
        p
        for p, s in walk_properties(SPEC, "spec")
        if "default" in s and f"`{json_scalar(s['default'])}`" not in rows.get(p, "")
    ]
    assert wrong == []


def json_scalar(v: Any) -> str:
    if isinstance(v, dict):
        return "{}"
    return _fmt(v)
