"""The drain job's pure parts: Kafka options for Spark, explicit offsets, remaining work, retention."""

from __future__ import annotations

import json

import pytest

from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain.job import _short_error
from lagpilot_runtime.drain.plan import DrainPlan, SubRange
from lagpilot_runtime.drain.progress import RetentionError, check_retention, remaining_work
from lagpilot_runtime.drain.spark import read_options, resolve_jars, spark_kafka_options

PLAN = DrainPlan(
    "4", "orders", "g", (SubRange(0, 0, 0, 100), SubRange(0, 1, 100, 200), SubRange(2, 0, 50, 80))
)


def cfg(**kw) -> ConsumerConfig:
    return ConsumerConfig(bootstrap_servers="k:9093", topic="orders", group_id="g", sink="log", **kw)


@pytest.mark.parametrize(
    "conf,expect,absent",
    [
        (
            dict(),
            {"kafka.security.protocol": "PLAINTEXT", "failOnDataLoss": "true"},
            ["kafka.sasl.jaas.config"],
        ),
        (
            dict(
                security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512",
                sasl_username="u",
                sasl_password='p"w',
                ssl_ca_pem="CA",
            ),
            {
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.certificates": "CA",
                "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p\\"w";',
            },
            ["kafka.ssl.keystore.key"],
        ),
        (
            dict(security_protocol="SSL", ssl_cert_pem="C", ssl_key_pem="K"),
            {
                "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.certificate.chain": "C",
                "kafka.ssl.keystore.key": "K",
            },
            ["kafka.sasl.mechanism"],
        ),
    ],
    ids=["plaintext", "sasl-scram-tls", "mtls"],
)
def test_spark_kafka_options(conf, expect, absent):
    opts = spark_kafka_options(cfg(**conf), read_committed=True)
    assert opts["kafka.bootstrap.servers"] == "k:9093" and opts["kafka.isolation.level"] == "read_committed"
    for k, v in expect.items():
        assert opts[k] == v
    for k in absent:
        assert k not in opts
    assert 'p"w' not in repr(cfg(**conf))  # the config never shows the secret


def test_read_options_are_explicit_numeric_offsets_for_one_partition():
    o = read_options("orders", SubRange(2, 1, 500, 900), 650)
    assert json.loads(o["assign"]) == {"orders": [2]}
    assert json.loads(o["startingOffsets"]) == {"orders": {"2": 650}}
    assert json.loads(o["endingOffsets"]) == {"orders": {"2": 900}}
    assert "latest" not in json.dumps(o) and "earliest" not in json.dumps(o)


def test_remaining_work_skips_finished_sub_ranges():
    work = remaining_work(PLAN, {(0, 0): (100, 100), (0, 1): (150, 50)})
    assert [(s.partition, s.index, start) for s, start in work] == [(0, 1, 150), (2, 0, 50)]


def test_retention_names_partition_and_offsets():
    with pytest.raises(
        RetentionError, match=r"partition 0: offsets 150\.\.159 deleted by retention \(low watermark 160"
    ):
        check_retention(PLAN, [(PLAN.sub_ranges[1], 150)], {0: 160, 2: 0})
    check_retention(PLAN, [(PLAN.sub_ranges[1], 150)], {0: 150})  # exactly at the start: fine


def test_resolve_jars(tmp_path):
    (tmp_path / "a.jar").write_text("")
    (tmp_path / "b.txt").write_text("")
    assert resolve_jars(str(tmp_path)) == [str(tmp_path / "a.jar")]
    assert resolve_jars("/x/1.jar,/x/2.jar") == ["/x/1.jar", "/x/2.jar"]
    assert resolve_jars(None) == []


def test_short_error_finds_the_python_cause_in_a_java_trace():
    text = "An exception was thrown from the Python worker:\n  File x\nRuntimeError: 3 record(s) failed\n\tat org.apache..."
    assert _short_error(Exception(text)) == "RuntimeError: 3 record(s) failed"
