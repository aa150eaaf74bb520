"""spark-submit's settings (JVM system properties) handed to `lagpilot drain` (SparkApplication launcher)."""

from __future__ import annotations

import json

from lagpilot_runtime.spark_submit_main import submitted_settings


def test_master_and_spark_properties_win_over_the_drains_own_conf():
    props = {
        "spark.master": "k8s://https://10.0.0.1:443",
        "spark.kubernetes.container.image": "lagpilot/consumer:1",
        "spark.executor.instances": "3",
        "spark.driver.host": "drain-driver-svc",
        "java.version": "17",
    }
    env = {"LAGPILOT_SPARK_CONF": json.dumps({"spark.executor.instances": "1", "spark.local.dir": "/tmp/x"})}
    out = submitted_settings(props, env)
    assert out["LAGPILOT_SPARK_MASTER"] == "k8s://https://10.0.0.1:443"
    assert json.loads(out["LAGPILOT_SPARK_CONF"]) == {
        "spark.kubernetes.container.image": "lagpilot/consumer:1",
        "spark.executor.instances": "3",
        "spark.driver.host": "drain-driver-svc",
        "spark.local.dir": "/tmp/x",
    }


def test_without_a_master_property_the_drain_keeps_its_own():
    out = submitted_settings({"spark.app.name": "x"}, {})
    assert "LAGPILOT_SPARK_MASTER" not in out and json.loads(out["LAGPILOT_SPARK_CONF"]) == {
        "spark.app.name": "x"
    }
