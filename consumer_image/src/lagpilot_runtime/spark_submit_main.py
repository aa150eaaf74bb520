"""The drain's main file when spark-submit starts it (the SparkApplication launcher, docs/drain.md).

The kubeflow spark-operator submits a SparkApplication in cluster mode: spark-submit starts the
driver JVM with the application's settings as `spark.*` system properties, then runs this file with
Python. `lagpilot drain` builds its own SparkConf without the JVM's defaults (the Job launcher starts
the JVM itself), so here those settings — master, executor image and sizing, driver host — are
handed to it the way the Job launcher hands them: LAGPILOT_SPARK_MASTER and LAGPILOT_SPARK_CONF
(which wins over the drain's own defaults). The image links this file at /opt/lagpilot/drain_main.py.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any


def submitted_settings(props: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """(pure) The environment additions that carry spark-submit's settings into `lagpilot drain`:
    every `spark.*` property (the master apart) merged over LAGPILOT_SPARK_CONF's own entries."""
    spark = {k: str(v) for k, v in props.items() if k.startswith("spark.")}
    out: dict[str, str] = {}
    master = spark.pop("spark.master", "")
    if master:
        out["LAGPILOT_SPARK_MASTER"] = master
    extra = json.loads(env.get("LAGPILOT_SPARK_CONF") or "{}")
    out["LAGPILOT_SPARK_CONF"] = json.dumps({**extra, **spark}, sort_keys=True)
    return out


def main() -> int:
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # spark-submit's gateway (PYSPARK_GATEWAY_PORT): the driver JVM
    jvm: Any = SparkContext._jvm  # set by _ensure_initialized (None only before it)
    props = {
        str(k): str(jvm.System.getProperty(k))
        for k in jvm.System.getProperties().stringPropertyNames()
        if str(k).startswith("spark.")
    }
    os.environ.update(submitted_settings(props, os.environ))
    from .drain.job import main as drain_main

    return drain_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
