"""The CustomResourceDefinition, built from the model (`lagpilot.model.spec`).

Pydantic's JSON schema is not a Kubernetes structural schema; `openapi_schema()` turns one into the
other: `$ref`s inlined, an optional field is just not required (no `anyOf` with null), no titles,
`const` as a one-value `enum`, and the CRD's extensions (`x-kubernetes-*`, `format`, `default: {}`)
carried over from the fields. The rest of the CRD (names, printer columns, subresources) is data
here.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from lagpilot.model.spec import BatchConsumerGroup

GROUP = "lagpilot.io"
VERSION = "v1alpha1"
KIND = "BatchConsumerGroup"
PLURAL = "batchconsumergroups"
SHORT_NAMES = ["bcg"]

HEADER = """\
# BatchConsumerGroup: a Kafka consumer group that processes records in batches and that lagpilot
# scales (and, past the partition cap, drains with Spark) to keep its catch-up time inside an SLA.
#
# GENERATED from operator/src/lagpilot/model/ by `./dev/gen-crd` (python -m lagpilot.model.generate):
# do not edit by hand; tests/unit/test_model_generated.py fails when this file is stale.
# Field names are fixed by docs/CONTRACTS.md; every field is explained in docs/crd-reference.md.
# There is deliberately no scale subresource: the operator owns the replica count (see the
# reference, "Why no scale subresource").
"""

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Topic",
        "type": "string",
        "jsonPath": ".spec.topic",
        "description": "Kafka topic the group consumes.",
    },
    {
        "name": "Partitions",
        "type": "integer",
        "jsonPath": ".status.partitions",
        "priority": 1,
        "description": "Partition count of the topic, as last observed.",
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".status.replicas",
        "description": "Current replicas of the consumer Deployment.",
    },
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": ".status.desiredReplicas",
        "priority": 1,
        "description": "Replicas the last decision asked for.",
    },
    {
        "name": "Lag",
        "type": "integer",
        "jsonPath": ".status.totalLag",
        "description": "Records not yet committed, summed over all partitions.",
    },
    {
        "name": "Max-Lag",
        "type": "integer",
        "jsonPath": ".status.maxPartitionLag",
        "priority": 1,
        "description": "Lag of the most lagging partition.",
    },
    {
        "name": "Rate",
        "type": "number",
        "jsonPath": ".status.produceRate",
        "priority": 1,
        "description": "Smoothed produce rate of the topic, records per second.",
    },
    {
        "name": "Catch-up",
        "type": "number",
        "jsonPath": ".status.projectedCatchUpSeconds",
        "description": "Projected seconds until the lag is cleared at the current replica count.",
    },
    {
        "name": "SLA",
        "type": "integer",
        "jsonPath": ".spec.catchUpSLASeconds",
        "description": "Catch-up SLA in seconds.",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Status of the Ready condition.",
    },
    {
        "name": "Drain",
        "type": "string",
        "jsonPath": ".status.drain.phase",
        "priority": 1,
        "description": "Phase of the current or last drain hand-off.",
    },
    {
        "name": "Decision",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Scaling")].message',
        "priority": 1,
        "description": "The last scaling decision and its reason (the Scaling condition's message).",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
# `kubectl get bcg --field-selector spec.topic=orders`
SELECTABLE_FIELDS = [{"jsonPath": ".spec.topic"}, {"jsonPath": ".spec.groupId"}]

# key order of a schema node in the written YAML (readability only: the API server ignores it)
_KEY_ORDER = [
    "type",
    "format",
    "description",
    "nullable",
    "required",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "maxProperties",
    "maxItems",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "properties",
    "additionalProperties",
    "items",
]


class _StructuralSchema(GenerateJsonSchema):
    """Pydantic's generator, with an optional value being just an absent one."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        return value  # keep the model's order (a rule reads better before its message)


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        node = {**copy.deepcopy(defs[ref.rsplit("/", 1)[1]]), **node}
    node.pop("title", None)
    if "default" in node and node["default"] is None:
        del node["default"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf"):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    rank = {k: i for i, k in enumerate(_KEY_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))


@functools.cache
def _openapi_schema() -> dict[str, Any]:
    raw = BatchConsumerGroup.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_StructuralSchema
    )
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    return schema


def openapi_schema() -> dict[str, Any]:
    """The CRD's `openAPIV3Schema`: the model's JSON schema as a Kubernetes structural schema."""
    return copy.deepcopy(_openapi_schema())


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "lagpilot", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": SHORT_NAMES,
                "categories": ["lagpilot"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    # no scale subresource: docs/crd-reference.md "Why no scale subresource"
                    "subresources": {"status": {}},
                    "selectableFields": SELECTABLE_FIELDS,
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def spec_schema() -> dict[str, Any]:
    """The `spec` property of the schema (what the operator validates); shared, do not modify."""
    schema: dict[str, Any] = _openapi_schema()["properties"]["spec"]
    return schema
