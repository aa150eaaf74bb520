"""The pod runner builds a container's environment as the kubelet does (no cluster needed)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_dev.podrunner import ContainerConfigError, expand_vars, resolve_env

POD: dict[str, Any] = {
    "metadata": {
        "name": "c-0",
        "namespace": "prod",
        "uid": "u-1",
        "labels": {"app": "x"},
        "annotations": {"a/b": "note"},
    },
    "spec": {"serviceAccountName": "runner", "nodeName": "n1"},
}
SECRETS = {"kafka": {"username": "alice", "password": "pw"}}
CONFIG_MAPS = {"cfg": {"TOPIC": "orders", "BATCH": "500"}}


def _resolve(container: dict[str, Any]) -> dict[str, str]:
    return resolve_env(POD, container, get_secret=SECRETS.get, get_config_map=CONFIG_MAPS.get)


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("plain", {}, "plain"),
        ("$(A)-x", {"A": "1"}, "1-x"),
        ("$(MISSING)", {}, "$(MISSING)"),
        ("$$(A)", {"A": "1"}, "$(A)"),
        ("$$", {}, "$"),
        ("a$b", {"b": "no"}, "a$b"),
        ("$(A", {"A": "1"}, "$(A"),
        ("$(A)$(B)", {"A": "1", "B": "2"}, "12"),
        ("trailing $", {}, "trailing $"),
    ],
    ids=[
        "plain",
        "defined",
        "undefined-kept",
        "escaped",
        "dollar-dollar",
        "no-paren",
        "unclosed",
        "two",
        "trailing",
    ],
)
def test_expand_vars(text: str, env: dict[str, str], expected: str) -> None:
    assert expand_vars(text, env) == expected


@given(st.text(alphabet=st.characters(blacklist_characters="$")))
def test_expand_vars_leaves_text_without_dollar_alone(text: str) -> None:
    assert expand_vars(text, {"A": "x"}) == text


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ([{"name": "A", "value": "1"}], {"A": "1"}),
        ([{"name": "A", "value": "1"}, {"name": "B", "value": "$(A)2"}], {"A": "1", "B": "12"}),
        (
            [{"name": "U", "valueFrom": {"secretKeyRef": {"name": "kafka", "key": "username"}}}],
            {"U": "alice"},
        ),
        ([{"name": "T", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "TOPIC"}}}], {"T": "orders"}),
        ([{"name": "O", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}}], {}),
        (
            [
                {
                    "name": "O",
                    "valueFrom": {"secretKeyRef": {"name": "kafka", "key": "nokey", "optional": True}},
                }
            ],
            {},
        ),
        ([{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], {"N": "c-0"}),
        ([{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}], {"NS": "prod"}),
        ([{"name": "U", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}], {"U": "u-1"}),
        ([{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}], {"L": "x"}),
        (
            [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a/b']"}}}],
            {"A": "note"},
        ),
        (
            [{"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}}],
            {"SA": "runner"},
        ),
        ([{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}], {"IP": "127.0.0.1"}),
        ([{"name": "E", "value": ""}], {"E": ""}),
    ],
    ids=[
        "value",
        "expansion",
        "secret",
        "configmap",
        "optional-missing-secret",
        "optional-missing-key",
        "pod-name",
        "namespace",
        "uid",
        "label",
        "annotation",
        "service-account",
        "pod-ip",
        "empty",
    ],
)
def test_env_entries(env: list[dict[str, Any]], expected: dict[str, str]) -> None:
    assert _resolve({"env": env}) == expected


def test_env_from_with_prefix_then_env_overrides() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CM_"}, {"secretRef": {"name": "kafka"}}],
        "env": [{"name": "CM_TOPIC", "value": "override"}],
    }
    assert _resolve(container) == {
        "CM_TOPIC": "override",
        "CM_BATCH": "500",
        "username": "alice",
        "password": "pw",
    }


@pytest.mark.parametrize(
    ("container", "message"),
    [
        (
            {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}}]},
            'secret "missing" not found',
        ),
        (
            {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "kafka", "key": "nokey"}}}]},
            "couldn't find key nokey",
        ),
        (
            {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k"}}}]},
            'configmap "missing"',
        ),
        ({"envFrom": [{"secretRef": {"name": "missing"}}]}, 'secret "missing" not found'),
        (
            {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}}]},
            "unsupported fieldRef",
        ),
    ],
    ids=["secret", "secret-key", "configmap", "envfrom-secret", "bad-fieldref"],
)
def test_missing_sources_are_config_errors(container: dict[str, Any], message: str) -> None:
    with pytest.raises(ContainerConfigError, match=message):
        _resolve(container)


def test_optional_env_from_is_skipped() -> None:
    assert _resolve({"envFrom": [{"secretRef": {"name": "missing", "optional": True}}]}) == {}


@pytest.mark.parametrize(
    ("resources", "ref", "expected"),
    [
        ({"limits": {"cpu": "2"}}, {"resource": "limits.cpu"}, "2"),
        ({"limits": {"cpu": "500m"}}, {"resource": "limits.cpu"}, "1"),
        ({"limits": {"cpu": "500m"}}, {"resource": "limits.cpu", "divisor": "1m"}, "500"),
        ({"requests": {"memory": "64Mi"}}, {"resource": "requests.memory", "divisor": "1Mi"}, "64"),
        ({"limits": {"memory": "1Gi"}}, {"resource": "requests.memory", "divisor": "1Mi"}, "1024"),
        ({}, {"resource": "limits.cpu"}, "16"),
    ],
    ids=["cpu", "cpu-rounds-up", "millicores", "memory", "request-defaults-to-limit", "node-allocatable"],
)
def test_resource_field_ref(resources: dict[str, Any], ref: dict[str, str], expected: str) -> None:
    env = _resolve({"resources": resources, "env": [{"name": "R", "valueFrom": {"resourceFieldRef": ref}}]})
    assert env == {"R": expected}
