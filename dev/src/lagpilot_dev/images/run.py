"""`lagpilot dev images`, the runs: `podman run --network host` of each image: the operator's
`lagpilot operator --help`, `id` in each (the image's USER), and the consumer's default command
(`consume`) against the dev stack's Kafka into its PostgreSQL, stopped with SIGTERM once every
record landed.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from lagpilot_dev.images.build import IMAGES, ImageDef
from lagpilot_dev.images.tools import RUN_NPROC_CAP, Layout, run_cmd, ulimit_flags
from lagpilot_dev.paths import free_port


def run_id(layout: Layout, image: ImageDef) -> str:
    """`id` inside the image, as whatever user the image says (its USER)."""
    return run_cmd(
        layout.podman_argv(
            "run", "--rm", "--network", "host", *ulimit_flags(RUN_NPROC_CAP), "--entrypoint", "id", image.tag
        ),
        timeout=300,
    ).stdout.strip()


def run_operator_help(layout: Layout) -> dict[str, Any]:
    img = IMAGES["operator"]
    t0 = time.monotonic()
    p = run_cmd(
        layout.podman_argv(
            "run", "--rm", "--network", "host", *ulimit_flags(RUN_NPROC_CAP), img.tag, "--help"
        ),
        timeout=300,
    )
    return {
        "exit": p.returncode,
        "help_head": p.stdout.strip().splitlines()[:2],
        "id": run_id(layout, img),
        "seconds": round(time.monotonic() - t0, 1),
    }


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    ).values():
        fut.result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            break
        time.sleep(0.2)
    prod = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        prod.produce(topic, key=b"k%d" % i, value=b"image-record-%d" % i, partition=i % partitions)
    if prod.flush(60) != 0:
        raise RuntimeError("records not delivered")


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def pg_count(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
        if exists is None:
            return 0
        return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def pg_summary(dsn: str, table: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        n, distinct, parts = conn.execute(
            f'SELECT count(*), count(DISTINCT (topic, partition, "offset")), count(DISTINCT partition) FROM "{table}"'
        ).fetchone()
    return {"rows": n, "distinct_offsets": distinct, "partitions": parts}


def run_consumer(
    layout: Layout, bootstrap: str, dsn: str, count: int = 2000, partitions: int = 2, timeout: float = 240.0
) -> dict[str, Any]:
    """The consumer image's default command (`consume`) on host network: `count` records produced
    to a new topic must all land in a new PostgreSQL table; then SIGTERM (podman stop) and the
    group's committed offsets read back from Kafka."""
    img = IMAGES["consumer"]
    suffix = uuid.uuid4().hex[:8]
    topic, group, table, name = (
        f"images-{suffix}",
        f"images-{suffix}",
        f"images_{suffix}",
        f"lagpilot-consumer-{suffix}",
    )
    produce(bootstrap, topic, count, partitions)
    env = {
        "LAGPILOT_BOOTSTRAP_SERVERS": bootstrap,
        "LAGPILOT_TOPIC": topic,
        "LAGPILOT_GROUP_ID": group,
        "LAGPILOT_SINK": "postgres",
        "LAGPILOT_POSTGRES_DSN": dsn,
        "LAGPILOT_POSTGRES_TABLE": table,
        "LAGPILOT_METRICS_PORT": str(free_port()),
        "LAGPILOT_POD_NAME": name,
        "LAGPILOT_BATCH_MAX_RECORDS": "500",
    }
    env_flags = [a for k in env for a in ("--env", k)]  # values come from our environment, not argv
    t0 = time.monotonic()
    run_cmd(
        layout.podman_argv(
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            *ulimit_flags(RUN_NPROC_CAP),
            *env_flags,
            img.tag,
        ),
        env={**os.environ, **env},
        timeout=300,
    )
    try:
        uid_line = ""
        landed = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            landed = pg_count(dsn, table)
            if landed >= count:
                break
            state = run_cmd(
                layout.podman_argv("inspect", "--format", "{{.State.Status}}", name), check=False
            ).stdout.strip()
            if state not in ("running", "created", "configured"):
                break
            time.sleep(1.0)
        seconds_to_land = round(time.monotonic() - t0, 1)
        top = run_cmd(layout.podman_argv("top", name, "user", "huser", "args"), check=False)
        uid_line = top.stdout.strip()
        run_cmd(layout.podman_argv("stop", "--time", "30", name), timeout=120)
        exit_code = int(
            run_cmd(layout.podman_argv("inspect", "--format", "{{.State.ExitCode}}", name)).stdout.strip()
        )
        logs = run_cmd(layout.podman_argv("logs", name), check=False)
        log_text = (logs.stdout or "") + (logs.stderr or "")
    finally:
        run_cmd(layout.podman_argv("rm", "--force", name), check=False)
    offsets = committed_offsets(bootstrap, group, topic, partitions)
    return {
        "topic": topic,
        "group": group,
        "table": table,
        "produced": count,
        "postgres": pg_summary(dsn, table),
        "committed": offsets,
        "exit_code": exit_code,
        "seconds_to_land": seconds_to_land,
        "top": uid_line,
        "log_lines": len(log_text.splitlines()),
        "log_tail": log_text.strip().splitlines()[-3:],
    }
