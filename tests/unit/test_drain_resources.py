"""spec.drain.resources: the drain pods' own compute resources (the drain Job's pod and the warm
drain runtime's), apart from the consumers' `spec.template.resources`. A Spark driver JVM needs more
memory than a consumer: with one field for both, a user who limits the consumers to what they need
has every drain OOM-killed, and the only fix (raising the consumers' limit) rolls the consumers.
Unset, the drain pods keep what they had: the template's resources, else the drain defaults."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lagpilot.act import drain_runtime as rt
from lagpilot.act.deployment import build_deployment
from lagpilot.act.drain_manifests import build_drain_job
from lagpilot.spec import SpecError, parse_spec
from tests.unit.test_drain_runtime_operator import DRAIN, RAW, container

CONSUMERS = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
DRAINS = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}


def spec_of(template: dict[str, Any] | None = None, drain: dict[str, Any] | None = None) -> Any:
    raw = copy.deepcopy(RAW)
    if template is not None:
        raw["template"] = {"resources": template}
    if drain is not None:
        raw["drain"]["resources"] = drain
    return parse_spec(raw)


def pods(spec: Any) -> dict[str, dict[str, Any]]:
    """The container resources of the consumers, the drain Job and the warm runtime."""
    return {
        "consumers": container(build_deployment("orders", "ns1", "uid-1", spec, 2))["resources"],
        "job": container(build_drain_job("orders", "ns1", "uid-1", spec, DRAIN, 1))["resources"],
        "runtime": container(rt.build_runtime_deployment("orders", "ns1", "uid-1", spec))["resources"],
    }


def test_drain_pods_get_the_drains_resources_and_the_consumers_keep_theirs() -> None:
    got = pods(spec_of(template=CONSUMERS, drain=DRAINS))
    assert got == {"consumers": CONSUMERS, "job": DRAINS, "runtime": DRAINS}


def test_unset_drain_resources_keep_the_templates_else_the_defaults() -> None:
    assert pods(spec_of(template=CONSUMERS)) == {
        "consumers": CONSUMERS,
        "job": CONSUMERS,
        "runtime": CONSUMERS,
    }
    defaults = pods(spec_of())
    assert defaults["job"]["limits"] == {"memory": "3Gi"} and defaults["runtime"]["limits"] == {
        "memory": "3Gi"
    }
    # drain resources alone leave the consumers at their defaults
    assert pods(spec_of(drain=DRAINS))["consumers"] == defaults["consumers"]


def test_drain_resources_roll_the_runtime_not_the_consumers() -> None:
    before, after = spec_of(template=CONSUMERS), spec_of(template=CONSUMERS, drain=DRAINS)
    assert rt.manifest_hash(
        rt.build_runtime_deployment("orders", "ns1", "uid-1", before)
    ) != rt.manifest_hash(rt.build_runtime_deployment("orders", "ns1", "uid-1", after))
    assert build_deployment("orders", "ns1", "uid-1", before, 2) == build_deployment(
        "orders", "ns1", "uid-1", after, 2
    )


@pytest.mark.parametrize(
    "drain,field,reason",
    [
        ({"resources": {"requests": {"cpu": "-1"}}}, "spec.drain.resources.requests.cpu", "quantity"),
        (
            {"resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "3Gi"}}},
            "spec.drain.resources.requests",
            "less than or equal to drain.resources.limits",
        ),
        (
            {"launcher": "sparkApplication", "resources": {"limits": {"memory": "4Gi"}}},
            "spec.drain.resources",
            "launcher job",
        ),
    ],
    ids=["negative", "request-above-limit", "sparkapplication"],
)
def test_bad_drain_resources_are_refused_naming_the_field(
    drain: dict[str, Any], field: str, reason: str
) -> None:
    raw = copy.deepcopy(RAW)
    raw["drain"] = {**{k: v for k, v in raw["drain"].items() if k != "warmRuntime"}, **drain}
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    problems = info.value.problems
    assert any(p == field and reason in msg for p, msg in problems), problems
