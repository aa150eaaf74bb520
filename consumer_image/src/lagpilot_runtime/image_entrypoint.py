"""The consumer image's ENTRYPOINT: `lagpilot <args>`, except Spark's `executor`.

Spark on Kubernetes creates executor pods with the application's image, no `command` and
`args: ["executor"]`, and describes the executor in the environment (SPARK_DRIVER_URL,
SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_EXECUTOR_MEMORY, SPARK_APPLICATION_ID,
SPARK_EXECUTOR_POD_IP, SPARK_RESOURCE_PROFILE_ID, SPARK_EXECUTOR_POD_NAME, SPARK_JAVA_OPT_<n>).
Spark's own image answers that in `entrypoint.sh`; this does the same for the lagpilot image, so a
drain with `k8s://` master gets its executors from this one image:

    exec java <SPARK_JAVA_OPT_0..n> -Xms<mem> -Xmx<mem> -cp <classpath>
         org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend --driver-url ... ...

Anything else (`consume`, `drain`, `--help`) is handed to the `lagpilot` command unchanged, so
`ENTRYPOINT ["python", "-m", "lagpilot_runtime.image_entrypoint"]` + `CMD ["consume"]` behaves as
`ENTRYPOINT ["lagpilot"]` did. Pure argv building (`executor_argv`) is unit-tested; `main` execs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
REQUIRED = (
    "SPARK_DRIVER_URL",
    "SPARK_EXECUTOR_ID",
    "SPARK_EXECUTOR_CORES",
    "SPARK_APPLICATION_ID",
    "SPARK_EXECUTOR_POD_IP",
)


class EntrypointError(Exception):
    """The executor's environment is incomplete (not started by Spark?)."""


def spark_home(env: Mapping[str, str]) -> str:
    """$SPARK_HOME, else the installed pyspark package (its `jars/` hold Spark, spark-kubernetes
    and the Kubernetes client), found without importing pyspark."""
    if env.get("SPARK_HOME"):
        return env["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise EntrypointError("neither SPARK_HOME nor an installed pyspark: cannot start a Spark executor")
    return str(next(iter(spec.submodule_search_locations)))


def java_binary(env: Mapping[str, str]) -> str:
    if env.get("JAVA_HOME"):
        return str(Path(env["JAVA_HOME"]) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH")) or "java"


def java_opts(env: Mapping[str, str]) -> list[str]:
    """SPARK_JAVA_OPT_<n> in numeric order (as entrypoint.sh's `sort -t_ -k4 -n`)."""
    opts = []
    for k, v in env.items():
        if k.startswith("SPARK_JAVA_OPT_") and k[len("SPARK_JAVA_OPT_") :].isdigit():
            opts.append((int(k[len("SPARK_JAVA_OPT_") :]), v))
    return [v for _, v in sorted(opts)]


def master_opt(env: Mapping[str, str]) -> list[str]:
    """`-Dspark.master=<k8s://...>` from LAGPILOT_SPARK_MASTER (the drain's master, which the
    operator's conf gives executors through spark.executorEnv), unless Spark passed one.

    The executor's first connection to its driver (KubernetesExecutorBackend's driverPropsFetcher)
    authenticates with a SecurityManager on the JVM's startup conf only. Spark reads the RPC
    secret from `spark.authenticate.secret.file` (the operator's per-CR Secret, mounted in the pod:
    docs/rbac.md) only when that conf names a k8s master (SecurityManager.secretKeyFromFile), and
    passes no `spark.master` to executors: without this the executor fails with "A secret key must
    be specified via the spark.authenticate.secret config" (seen on the real node). The driver's
    properties, fetched next, carry the same master."""
    master = env.get("LAGPILOT_SPARK_MASTER", "")
    if not master.startswith("k8s://") or any(o.startswith("-Dspark.master=") for o in java_opts(env)):
        return []
    return [f"-Dspark.master={master}"]


def executor_argv(env: Mapping[str, str], extra_args: Sequence[str] = ()) -> list[str]:
    """The executor JVM's command line, as Spark's entrypoint.sh builds it (pure)."""
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise EntrypointError(
            f"`executor` needs {', '.join(missing)} in the environment (set by Spark's "
            "Kubernetes scheduler backend on executor pods)"
        )
    home = spark_home(env)
    classpath = [
        p
        for p in (
            env.get("SPARK_CLASSPATH"),
            env.get("SPARK_EXTRA_CLASSPATH"),
            env.get("LAGPILOT_SPARK_EXECUTOR_CLASSPATH"),
            f"{home}/jars/*",
            env.get("SPARK_DIST_CLASSPATH"),
        )
        if p
    ]
    argv = [java_binary(env), *java_opts(env), *master_opt(env)]
    mem = env.get("SPARK_EXECUTOR_MEMORY")
    if mem:
        argv += [f"-Xms{mem}", f"-Xmx{mem}"]
    argv += [
        "-cp",
        ":".join(classpath),
        EXECUTOR_BACKEND,
        "--driver-url",
        env["SPARK_DRIVER_URL"],
        "--executor-id",
        env["SPARK_EXECUTOR_ID"],
        "--cores",
        env["SPARK_EXECUTOR_CORES"],
        "--app-id",
        env["SPARK_APPLICATION_ID"],
        "--hostname",
        env["SPARK_EXECUTOR_POD_IP"],
    ]
    if env.get("SPARK_RESOURCE_PROFILE_ID"):
        argv += ["--resourceProfileId", env["SPARK_RESOURCE_PROFILE_ID"]]
    if env.get("SPARK_EXECUTOR_POD_NAME"):
        argv += ["--podName", env["SPARK_EXECUTOR_POD_NAME"]]
    return [*argv, *extra_args]


def command_for(args: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """(argv to exec, environment) for the container's args (pure)."""
    out_env = dict(env)
    if args[:1] == ["executor"]:
        out_env.setdefault("SPARK_HOME", spark_home(env))
        # the Python workers Spark forks on this executor: this image's interpreter
        out_env.setdefault("PYSPARK_PYTHON", sys.executable)
        return executor_argv(out_env, args[1:]), out_env
    lagpilot = shutil.which("lagpilot", path=env.get("PATH")) or str(Path(sys.executable).parent / "lagpilot")
    return [lagpilot, *(args or ["consume"])], out_env


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cmd, env = command_for(args, os.environ)
    except EntrypointError as exc:
        print(f"lagpilot image entrypoint: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
