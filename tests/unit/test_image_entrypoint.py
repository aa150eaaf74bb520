"""The consumer image's entrypoint: Spark's `executor` becomes the executor JVM (as Spark's
entrypoint.sh builds it); anything else goes to `lagpilot`."""

from __future__ import annotations

import pytest

from lagpilot_runtime.image_entrypoint import (
    EXECUTOR_BACKEND,
    EntrypointError,
    command_for,
    executor_argv,
    java_opts,
)

SPARK_ENV = {
    "SPARK_HOME": "/opt/spark",
    "JAVA_HOME": "/jdk",
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.5:7078",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_APPLICATION_ID": "spark-abc",
    "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "orders-drain-3-exec-2",
    "SPARK_JAVA_OPT_10": "-Dlast",
    "SPARK_JAVA_OPT_2": "-Dsecond",
    "SPARK_JAVA_OPT_0": "-Dfirst",
}


def test_executor_argv_matches_sparks_entrypoint():
    argv = executor_argv(SPARK_ENV)
    assert argv[:4] == ["/jdk/bin/java", "-Dfirst", "-Dsecond", "-Dlast"]  # numeric order, not lexical
    assert argv[4:6] == ["-Xms512m", "-Xmx512m"]
    assert argv[6] == "-cp" and argv[7].endswith("/opt/spark/jars/*") and argv[8] == EXECUTOR_BACKEND
    tail = dict(zip(argv[9::2], argv[10::2], strict=False))
    assert tail == {
        "--driver-url": "spark://CoarseGrainedScheduler@10.0.0.5:7078",
        "--executor-id": "2",
        "--cores": "2",
        "--app-id": "spark-abc",
        "--hostname": "10.0.0.9",
        "--resourceProfileId": "0",
        "--podName": "orders-drain-3-exec-2",
    }


def test_java_opts_ignores_other_names():
    assert java_opts({"SPARK_JAVA_OPT_1": "-a", "SPARK_JAVA_OPT_X": "-b", "SPARK_JAVA_OPT_0": "-c"}) == [
        "-c",
        "-a",
    ]


@pytest.mark.parametrize("missing", ["SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_APPLICATION_ID"])
def test_executor_without_sparks_env_is_refused(missing):
    env = {k: v for k, v in SPARK_ENV.items() if k != missing}
    with pytest.raises(EntrypointError, match=missing):
        executor_argv(env)


def test_spark_home_defaults_to_installed_pyspark():
    env = {k: v for k, v in SPARK_ENV.items() if k != "SPARK_HOME"}
    argv, out_env = command_for(["executor"], env)
    assert out_env["SPARK_HOME"].endswith("pyspark") and argv[argv.index("-cp") + 1].endswith(
        "pyspark/jars/*"
    )


@pytest.mark.parametrize(
    "args,tail", [([], ["consume"]), (["drain", "--plan", "x"], ["drain", "--plan", "x"])]
)
def test_other_args_go_to_lagpilot(args, tail):
    argv, _ = command_for(args, {"PATH": "/nonexistent"})
    assert argv[0].endswith("lagpilot") and argv[1:] == tail


def test_executor_gets_the_k8s_master_for_its_rpc_secret_file():
    """H4: the executor's first connection reads spark.authenticate.secret.file only with a k8s
    spark.master in its startup conf, which Spark does not pass: the entrypoint adds the drain's."""
    from lagpilot_runtime.image_entrypoint import master_opt

    env = {**SPARK_ENV, "LAGPILOT_SPARK_MASTER": "k8s://https://kubernetes.default.svc"}
    argv = executor_argv(env)
    assert "-Dspark.master=k8s://https://kubernetes.default.svc" in argv
    assert argv.index("-Dspark.master=k8s://https://kubernetes.default.svc") < argv.index(EXECUTOR_BACKEND)
    assert master_opt({"LAGPILOT_SPARK_MASTER": "local[2]"}) == []  # only a k8s master
    assert master_opt({**env, "SPARK_JAVA_OPT_9": "-Dspark.master=k8s://x"}) == []  # Spark's own wins
    assert master_opt(SPARK_ENV) == []
