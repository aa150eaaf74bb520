"""The status model (lagpilot/model/status.py) is the one declaration of the status's shape: the
CRD's status schema (both copies) is exactly what it generates, its enums are the hand-off's, and a
status as the operator writes it validates against it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from lagpilot.decide import handoff
from lagpilot.model.status import DrainPhase, HandOffPath, Stall, status_openapi_schema, validate_status

ROOT = Path(__file__).resolve().parents[2]
CRDS = [
    ROOT / "crds" / "batchconsumergroup.yaml",
    ROOT / "charts" / "lagpilot" / "crds" / "batchconsumergroup.yaml",
]


@pytest.mark.parametrize("path", CRDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_crd_status_schema_is_the_models(path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status == status_openapi_schema()


def test_the_enums_are_the_hand_offs() -> None:
    assert handoff.Phase is DrainPhase  # one declaration of the phases, in the status model
    assert {p.value for p in HandOffPath} == {handoff.PATH_ACK, handoff.PATH_EMPTY, handoff.PATH_QUIESCE}
    assert {s.value for s in Stall} == {"NoProgress", "NoRunningPod"}


def test_keyed_lists_have_their_keys_required() -> None:
    """A list-type map's keys must be required (or defaulted) in its items, else the API server
    rejects the CRD."""

    def walk(node: dict, path: str = "status"):  # type: ignore[no-untyped-def]
        for name, sub in (node.get("properties") or {}).items():
            yield from walk(sub, f"{path}.{name}")
        if node.get("x-kubernetes-list-type") == "map":
            yield path, node["x-kubernetes-list-map-keys"], node["items"].get("required", [])
        if "items" in node:
            yield from walk(node["items"], path + "[]")

    maps = list(walk(status_openapi_schema()))
    assert {p for p, _, _ in maps} >= {
        "status.partitionStatuses",
        "status.drain.ranges",
        "status.drain.history",
        "status.conditions",
    }
    assert all(set(keys) <= set(req) for _, keys, req in maps), maps


EXAMPLE = {
    "observedGeneration": 2,
    "partitions": 3,
    "replicas": 1,
    "desiredReplicas": 1,
    "totalLag": 0,
    "maxPartitionLag": 0,
    "produceRate": 5.96,
    "capacityPerReplica": 52.6,
    "projectedCatchUpSeconds": 0.0,
    "lastScaleTime": "2026-11-26T03:10:04Z",
    "dataLossRecords": 0,
    "lastObservedTime": "2026-11-26T03:14:09.503Z",
    "partitionStatuses": [
        {
            "partition": 0,
            "committed": 6737,
            "end": 6737,
            "low": 0,
            "lag": 0,
            "produceRate": 1.985,
            "consumeRate": 2.1,
        }
    ],
    "drain": {
        "id": 2,
        "phase": "Verified",
        "reason": "AllRangesDone",
        "message": "drain 2 Verified",
        "ranges": [{"partition": 0, "start": 4935, "end": 6737, "tasks": 4}],
        "attempt": 1,
        "plannedAt": "2026-11-26T03:12:01.120Z",
        "finishedAt": "2026-11-26T03:12:48.000Z",
        "handOffPath": "ConsumerAck",
        "runtime": "cold",
        "pauseSeconds": 0.0,
        "recordsTotal": 1802,
        "recordsDone": 1802,
        "history": [
            {
                "id": 2,
                "phase": "Verified",
                "reason": "AllRangesDone",
                "ranges": [{"partition": 0, "start": 4935, "end": 6737}],
                "recordsDone": 1802,
                "recordsTotal": 1802,
                "seconds": 41.5,
                "pauseSeconds": 0.0,
            }
        ],
    },
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "ConsumersReady",
            "message": "1/1 consumers ready",
            "observedGeneration": 2,
            "lastTransitionTime": "2026-11-26T03:10:04Z",
        }
    ],
}


def test_an_example_status_validates_and_a_wrong_one_names_its_field() -> None:
    model = validate_status(EXAMPLE)
    assert model.drain is not None and model.drain.phase is DrainPhase.VERIFIED
    assert model.model_dump(by_alias=True, exclude_none=True) == EXAMPLE  # nothing lost, nothing added
    for bad, where in (
        (dict(EXAMPLE, drain={**EXAMPLE["drain"], "phase": "Done"}), "drain.phase"),
        (dict(EXAMPLE, partitionStatuses=[{"partition": 0}]), "partitionStatuses.0.end"),
        (dict(EXAMPLE, estimator={}), "estimator"),
    ):
        with pytest.raises(ValidationError) as err:
            validate_status(bad)
        assert where in str(err.value)
