"""The PySpark worker daemon with the drain's imports done once, before it forks workers.

Spark starts one Python worker per concurrent task by forking `pyspark.daemon`. Each worker would
otherwise import pyarrow, pandas, confluent_kafka, psycopg and the handler on its own: with a dozen
tasks on a small pod that is tens of CPU-seconds of start-up. Set as `spark.python.daemon.module`
by the drain job; forked workers share the imported modules copy-on-write.
"""
from __future__ import annotations

import importlib
import os


def _preload() -> None:
    for name in ("pyarrow", "confluent_kafka", "psycopg", "lagpilot_runtime.drain_job",
                 "lagpilot_runtime.failure", "lagpilot_runtime.handler", "pyspark.worker",
                 "pyspark.sql.pandas.serializers"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs its preload
            pass
    spec = os.environ.get("LAGPILOT_HANDLER") or ""
    module = spec.partition(":")[0]
    if module:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the task reports a real import error itself
            pass


if __name__ == "__main__":
    _preload()
    from pyspark.daemon import manager

    manager()
