"""The real API server and the operator's parser give the same verdict on generated specs (issue 14).

Specs are drawn from the CRD's own patterns and bounds (tests/crd_specs.py): valid ones, and valid
ones with one field replaced by an arbitrary value. Each is created with dryRun=All (nothing is
stored) and strict field validation; the parser (`lagpilot.spec.parse_spec`) is run on what the
API server returns, i.e. with the CRD's defaults applied, exactly what the operator would see.
Property: admitted ⇔ parsed, and a rejection names, on both sides, a common field.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lagpilot.spec import SpecError, parse_spec
from tests.crd_specs import any_specs, valid_specs
from tests.real.test_crd import crd, ns  # noqa: F401 - fixtures

pytestmark = [pytest.mark.real]

GROUP, VERSION, PLURAL = "lagpilot.io", "v1alpha1", "batchconsumergroups"


def dry_run_create(custom: Any, namespace: str, spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(the object the API server would store, "") or (None, the error message with its causes)."""
    from kubernetes.client.exceptions import ApiException

    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": "agreement"},
        "spec": spec,
    }
    try:
        return custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
        ), ""
    except ApiException as exc:
        if exc.status not in (400, 422):
            raise
        status = json.loads(exc.body)
        causes = " ".join(
            f"{c.get('field', '')}: {c.get('message', '')}"
            for c in (status.get("details") or {}).get("causes") or []
        )
        return None, f"{status.get('message', '')} {causes}"


@pytest.fixture(scope="module")
def custom(crd, kube_api):  # the fixture imported above
    from kubernetes import client

    return client.CustomObjectsApi(kube_api)


def _parser_paths(spec: dict[str, Any]) -> list[str] | None:
    try:
        parse_spec(spec)
    except SpecError as exc:
        return [p for p, _ in exc.problems]
    return None


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(valid_specs())
def test_generated_valid_specs_are_admitted_and_parsed(custom, ns, spec):
    stored, err = dry_run_create(custom, ns, spec)
    assert stored is not None, f"API server rejected a spec the generator deems valid: {err}\n{spec}"
    assert _parser_paths(stored["spec"]) is None, (_parser_paths(stored["spec"]), stored["spec"])


def test_api_server_and_parser_agree(custom, ns):
    verdicts = {"admitted": 0, "rejected": 0}

    @settings(
        max_examples=100,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(any_specs())
    def agree(spec: dict[str, Any]) -> None:
        stored, err = dry_run_create(custom, ns, spec)
        if stored is not None:
            verdicts["admitted"] += 1
            paths = _parser_paths(stored["spec"])
            assert paths is None, (
                f"admitted by the API server, rejected by the parser at {paths}: {stored['spec']}"
            )
            return
        verdicts["rejected"] += 1
        paths = _parser_paths(spec)
        assert paths is not None, f"rejected by the API server, accepted by the parser: {err}\n{spec}"
        assert any(p in err for p in paths), f"no common field: parser {paths}, API server: {err}"

    agree()
    print("API server verdicts:", verdicts)
    # the property saw both outcomes (a run where everything passed or failed would prove little)
    assert verdicts["admitted"] >= 10 and verdicts["rejected"] >= 10, verdicts


@pytest.mark.parametrize(
    "spec",
    [
        {"topic": "t" * 245},
        {"topic": "t" * 249, "failure": {"policy": "exit"}},
        {"scaling": {"tolerance": 1}},
        {"catchUpSLASeconds": 15},
        {
            "processing": {
                "sink": "postgres",
                "postgres": {"dsnSecretRef": {"name": "pg"}, "table": "ledger.settled_payments"},
            }
        },
    ],
    ids=["topic-245", "topic-249-exit", "tolerance-1", "sla-equals-default-poll", "schema-table"],
)
def test_boundary_specs_are_admitted_and_parsed(custom, ns, spec):
    full = {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "orders",
        "groupId": "g",
        "processing": {"sink": "log"},
        **spec,
    }
    stored, err = dry_run_create(custom, ns, full)
    assert stored is not None, err
    parse_spec(stored["spec"])


def test_strategy_is_not_vacuous() -> None:
    """The property above must see both verdicts: mutated specs are mostly invalid."""
    from tests.crd_specs import mutated_specs

    seen = {"ok": 0, "bad": 0}

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(st.one_of(valid_specs(), mutated_specs().map(lambda t: t[0])))
    def count(spec: dict[str, Any]) -> None:
        seen["ok" if _parser_paths(spec) is None else "bad"] += 1

    count()
    assert seen["ok"] >= 10 and seen["bad"] >= 10, seen
