"""spec.py: defaults, typed parsing, and cross-field validation naming the field path."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from lagpilot.spec import GroupSpec, SpecError, parse_spec

BASE: dict[str, Any] = {
    "kafka": {"bootstrapServers": "kafka-0:9092,kafka-1:9092"},
    "topic": "orders",
    "groupId": "orders-batch",
    "processing": {"sink": "log"},
}


def with_(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes applied (value None deletes the key)."""
    spec = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        d = spec
        for p in parents:
            d = d.setdefault(p, {})
        if value is None:
            d.pop(leaf, None)
        else:
            d[leaf] = value
    return spec


def test_defaults_follow_contracts() -> None:
    s = parse_spec(BASE)
    assert isinstance(s, GroupSpec)
    assert s.kafka.security_protocol == "PLAINTEXT"
    assert (s.batch.max_records, s.batch.timeout_ms) == (500, 1000)
    assert (s.scaling.min_replicas, s.scaling.max_replicas) == (1, 10)
    assert s.scaling.poll_interval_seconds == 15.0
    assert (s.scaling.scale_up_window_seconds, s.scaling.scale_down_window_seconds) == (0.0, 300.0)
    assert s.catch_up_sla_seconds == 600.0
    assert s.dead_letter_topic == "orders.dlq"
    assert s.processing.postgres.table == "lagpilot_records"
    assert s.paused is False and s.drain.enabled is True


def test_full_spec_is_parsed() -> None:
    s = parse_spec(with_(
        kafka__securityProtocol="SASL_SSL", kafka__saslMechanism="SCRAM-SHA-512",
        kafka__secretRef={"name": "creds"},
        processing={"sink": "postgres", "concurrency": 4, "config": {"b": "2", "a": "1"},
                    "postgres": {"dsnSecretRef": {"name": "pg", "key": "url"}, "mode": "upsert"}},
        scaling={"minReplicas": 0, "maxReplicas": 3, "tolerance": 0.2, "pollIntervalSeconds": 2,
                 "behavior": {"scaleUp": {"stabilizationWindowSeconds": 5},
                              "scaleDown": {"stabilizationWindowSeconds": 20}}},
        catchUpSLASeconds=120, paused=True,
        template={"image": "x/y:1", "env": [{"name": "FOO", "value": "bar"}],
                  "resources": {"limits": {"cpu": "1"}}},
    ))
    assert s.kafka.uses_sasl and s.kafka.uses_ssl and s.kafka.secret_name == "creds"
    assert s.processing.config == (("a", "1"), ("b", "2"))
    assert s.processing.postgres.dsn_secret_key == "url" and s.processing.postgres.mode == "upsert"
    assert s.scaling.scale_up_window_seconds == 5 and s.scaling.scale_down_window_seconds == 20
    assert s.scaling.min_replicas == 0 and s.catch_up_sla_seconds == 120 and s.paused
    assert s.template.env[0]["name"] == "FOO"


@pytest.mark.parametrize("spec, path", [
    (with_(kafka=None), "spec.kafka"),
    (with_(kafka__bootstrapServers=None), "spec.kafka.bootstrapServers"),
    (with_(kafka__bootstrapServers="no-port"), "spec.kafka.bootstrapServers"),
    (with_(kafka__securityProtocol="SASL_PLAINTEXT", kafka__secretRef={"name": "c"}),
     "spec.kafka.saslMechanism"),
    (with_(kafka__securityProtocol="SASL_SSL", kafka__saslMechanism="PLAIN"), "spec.kafka.secretRef.name"),
    (with_(kafka__securityProtocol="TLS"), "spec.kafka.securityProtocol"),
    (with_(topic=None), "spec.topic"),
    (with_(topic="bad topic"), "spec.topic"),
    (with_(groupId=None), "spec.groupId"),
    (with_(batch__maxRecords=0), "spec.batch.maxRecords"),
    (with_(batch__maxRecords="500"), "spec.batch.maxRecords"),
    (with_(processing__handler="m:f"), "spec.processing"),
    (with_(processing__sink=None, processing__handler="not a handler"), "spec.processing.handler"),
    (with_(processing__sink="postgres"), "spec.processing.postgres.dsnSecretRef.name"),
    (with_(processing__concurrency=65), "spec.processing.concurrency"),
    (with_(processing__config={"k": 1}), "spec.processing.config.k"),
    (with_(failure__deadLetterTopic="orders"), "spec.failure.deadLetterTopic"),
    (with_(scaling__minReplicas=5, scaling__maxReplicas=2), "spec.scaling.maxReplicas"),
    (with_(scaling__tolerance=1.5), "spec.scaling.tolerance"),
    (with_(scaling__pollIntervalSeconds=0), "spec.scaling.pollIntervalSeconds"),
    (with_(scaling__behavior={"scaleDown": {"stabilizationWindowSeconds": -1}}),
     "spec.scaling.behavior.scaleDown.stabilizationWindowSeconds"),
    (with_(catchUpSLASeconds=0), "spec.catchUpSLASeconds"),
    (with_(paused="yes"), "spec.paused"),
    (with_(scaling="fast"), "spec.scaling"),
    (with_(template={"env": [{"name": "LAGPILOT_TOPIC", "value": "x"}]}), "spec.template.env[0].name"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_errors_name_the_field(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    assert path in [p for p, _ in info.value.problems], info.value.problems
    assert path in str(info.value)


def test_all_problems_reported_at_once() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(with_(topic=None, groupId=None, batch__maxRecords=0))
    paths = {p for p, _ in info.value.problems}
    assert {"spec.topic", "spec.groupId"} <= paths


def test_bool_is_not_a_number() -> None:
    with pytest.raises(SpecError, match="spec.scaling.maxReplicas"):
        parse_spec(with_(scaling__maxReplicas=True))
