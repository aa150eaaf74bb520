"""The PySpark worker daemon with the drain's imports done once, before it forks workers.

Spark starts one Python worker per concurrent task by forking `pyspark.daemon`. Each worker would
otherwise import pyarrow, pandas, confluent_kafka, psycopg and the handler on its own: with a dozen
tasks on a small pod that is tens of CPU-seconds of start-up. Set as `spark.python.daemon.module`
by the drain job; forked workers share the imported modules copy-on-write.

pandas is preloaded too: the drain's code never uses it, but pyarrow imports it (its pandas shim)
the first time a worker builds an array (Spark's own struct wrapping of the first batch, the
task's summary), so without it every one of the tasks imported pandas after the fork (measured
with PYTHONPROFILEIMPORTTIME: 12 imports, ~0.5 s CPU each, in the tasks' first-record path).
"""

from __future__ import annotations

import importlib
import os


def _preload() -> None:
    names = [
        "pyarrow",
        "pandas",
        "pyarrow.pandas_compat",
        "confluent_kafka",
        "psycopg",
        "lagpilot_runtime.drain.task",
        "lagpilot_runtime.failure",
        "lagpilot_runtime.handler",
        "pyspark.worker",
        "pyspark.sql.pandas.serializers",
    ]
    if os.environ.get("LAGPILOT_DRAIN_PRELOAD_PANDAS", "1") == "0":  # A/B switch of bench/drain.py
        names = [n for n in names if "pandas" not in n or n.startswith("pyspark")]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs its preload
            pass
    try:
        if "pandas" in names:
            import pyarrow

            pyarrow.array([0])  # pyarrow's pandas shim initialised once here, not in every worker
    except Exception:  # noqa: BLE001
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
