"""A busy drain through the warm drain runtime (issue 25 item 2; docs/drain.md "Busy drains"), on the
stack of tests/real/test_drain_operator.py: the CR starts with `warmRuntime: true` and `cancel: true`
while partition 0 takes 300 records/s (3x one consumer); once the runtime pod is Ready the drain is
allowed. Proven: the attempt ran warm (status.drain.runtime), the runtime served exactly one plan
(`drain_runtime_served`, exit 0) and its driver thread took >= 2 next parts and the final part with
the session it holds (`drain_next_part` in the runtime's log), one attempt; the ledger (no key) holds
every produced offset once. Its pods run on the real node (`pods`: the runtime a JVM in
the test image's container), the runtime's log is read through `pod_io` (the API's)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import PodIO
from tests.real.test_drain_operator import crd, scenario  # noqa: F401
from tests.real.test_drain_runtime import _log_events, _ready_runtime_pod, _worktree_pythonpath

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_a_busy_drain_takes_its_next_parts_in_the_warm_runtime(
    scenario: Any, pod_io: PodIO, postgres_dsn: str
) -> None:
    import psycopg
    from confluent_kafka import Consumer, TopicPartition

    s = scenario(
        {0: 3000, 1: 100, 2: 100},
        live={0: 300, 1: 0, 2: 0},
        drain={"busy": True, "warmRuntime": True, "cancel": True},
        operator_env=_worktree_pythonpath(),
    )
    pod = wait_until(lambda: _ready_runtime_pod(s), "runtime Ready", 240, interval=1)
    s.patch_spec({"drain": {"cancel": False}})
    t0 = time.monotonic()
    rounds = {"max": 0}

    def watch() -> dict:
        s.op.ensure()
        d = s.drain()
        rounds["max"] = max(rounds["max"], int(d.get("round") or 0))
        return d

    wait_until(
        lambda: watch() and rounds["max"] >= 2 and time.monotonic() - t0 > 60,
        "2 next splits",
        600,
        interval=1,
    )
    s.stop_live.set()
    s.live_thread.join(30)
    wait_until(lambda: watch().get("phase") in ("Verified", "Failed"), "end", 600, interval=1)
    d = s.drain()
    reader = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.group, "enable.auto.commit": False})

    def caught_up() -> bool:
        s.op.ensure()
        return all(
            tp.offset == s.produced.get(tp.partition, 0)
            for tp in reader.committed([TopicPartition(s.topic, p) for p in range(3)], timeout=30)
        )

    wait_until(caught_up, "caught up", 600, interval=2)
    reader.close()
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(f'SELECT partition, "offset" FROM {s.table}').fetchall()
    seen = [(int(p), int(o)) for p, o in rows]
    expected = {(p, o) for p, n in s.produced.items() for o in range(n)}
    rt_log = pod_io.logs(s.ns, pod.metadata.name)  # the runtime pod that served it (still Ready)
    served = _log_events(rt_log, "drain_runtime_served")
    parts = _log_events(rt_log, "drain_next_part")
    print(
        "WARM:",
        json.dumps(
            {
                "phase": d["phase"],
                "runtime": d.get("runtime"),
                "attempt": d["attempt"],
                "round": d.get("round"),
                "lost": len(expected - set(seen)),
                "dup": len(seen) - len(set(seen)),
                "served": [(e.get("drain"), e.get("exit"), e.get("records")) for e in served],
                "parts": [(e.get("round"), e.get("final")) for e in parts],
            }
        ),
    )
    assert d["phase"] == "Verified" and d.get("runtime") == "warm" and d["attempt"] == 1
    assert len(expected - set(seen)) == 0 and len(seen) == len(set(seen))
    assert len(served) == 1 and sum(1 for e in parts if not e.get("final")) >= 2
