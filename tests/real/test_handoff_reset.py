"""A person resets a group's offsets after a drain (issue 23, H2): the mailbox must not move it.

Operator subprocess + kube-apiserver/controller-manager + the pods where `pods` runs them (the real
node by default) + Kafka (its own
`kafka-consumer-groups.sh --reset-offsets`) + PostgreSQL (the ledger handler of
tests/real/test_drain_operator.py: one row per delivery).

The drain is planned while the live group processes its backlog, but its owners never ack (an older
consumer image, LP_TEST_NO_HANDOFF, given to the pods by the test hooks' admission policy:
`tests.fixtures.node.TestHooks`) and the ack timeout is long, so every partition reaches the split
by itself: the drain ends `Cancelled/NothingToDrain` without any ack in the mailbox. Then the group is
paused (0 consumers), its offsets are reset to the earliest with the real CLI tool, and it resumes
with consumers that run the hand-off (the older-image switch removed from the namespace's hooks, so
the pods created on resume have none: checked in their specs; drains disabled so no new drain is
planned). Every record must be processed again by the group from offset 0: a request left
actionable in the mailbox would make the new owners ack and jump to the split, skipping everything
below it with no drain to process it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import TestHooks
from tests.real.test_drain_operator import PARTS, Scenario, scenario, wait_phase  # noqa: F401
from tests.real.test_handoff_live import enable_drain, wait_group_running
from tests.real.test_operator_e2e import crd  # noqa: F401  (fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]

BACKLOG = 5000  # per partition; ~50 s for one consumer per partition at 100 records/s


def mailbox_entries(kafka_admin: Any, s: Scenario) -> dict[int, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from lagpilot_runtime import handoff_mailbox as mbx

    g = mbx.mailbox_group(s.group)
    res = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(g, [TopicPartition(s.topic, p) for p in range(PARTS)])]
    )[g].result(30)
    return {tp.partition: mbx.decode(getattr(tp, "metadata", None), tp.offset) for tp in res.topic_partitions}


def committed(kafka_admin: Any, s: Scenario) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    res = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(s.group, [TopicPartition(s.topic, p) for p in range(PARTS)])]
    )[s.group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def consumer_pod_hooks(s: Scenario) -> dict[str, list[str]]:
    """pod name -> the LP_TEST_* names in its spec (what admission gave it), for the consumer pods
    that exist now."""
    return {
        p.metadata.name: sorted(
            e.name for c in p.spec.containers for e in c.env or () if e.name.startswith("LP_TEST_")
        )
        for p in s.core.list_namespaced_pod(s.ns).items
        if "drain" not in p.metadata.name
    }


def test_offset_reset_after_a_drain_does_not_make_the_owner_jump(
    scenario: Callable[..., Scenario],
    test_hooks: TestHooks,
    kafka_admin: Any,
    kafka_part: Any,
    postgres_dsn: str,
) -> None:
    import psycopg

    s = scenario(
        {p: BACKLOG for p in range(PARTS)},
        sla_s=10,
        live={},
        drain_enabled=False,
        consumer_env={"LP_TEST_NO_HANDOFF": "1"},
        operator_env={"LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "900"},
    )
    wait_group_running(s, postgres_dsn)
    older = consumer_pod_hooks(s)
    assert older and all("LP_TEST_NO_HANDOFF" in h for h in older.values()), older  # the older image, really
    enable_drain(s)
    d = wait_phase(s, ("HandedOff", "Running", "Verified", "Cancelled", "Failed"), 600)
    # the setup really produced the H2 case: a drain resolved with no ack (the group got there by itself)
    assert d["phase"] == "Cancelled" and d["reason"] == "NothingToDrain", d
    drain_id = int(d["id"])
    splits = {
        int(r["partition"]): int(r["end"])
        for h in d.get("history") or ()
        if h["id"] == drain_id
        for r in h["ranges"]
    }
    assert splits, d
    entries = mailbox_entries(kafka_admin, s)
    print(f"drain {drain_id} resolved by itself; splits {splits}; mailbox {entries}")

    # pause (0 consumers), no new drains; the consumers created on resume run the hand-off (the
    # older-image switch gone from the namespace's hooks)
    s.patch_spec({"paused": True, "drain": {"enabled": False}})
    wait_until(lambda: not consumer_pod_hooks(s), "every consumer pod gone (paused)", 300, interval=1)
    test_hooks.set(s.ns, {})

    def reset() -> bool:
        proc = kafka_part.consumer_groups(
            ["--reset-offsets", "--group", s.group, "--topic", s.topic, "--to-earliest", "--execute"],
            timeout=120,
        )
        print(proc.returncode, proc.stdout[-400:], proc.stderr[-400:])
        return proc.returncode == 0 and committed(kafka_admin, s) == {p: 0 for p in range(PARTS)}

    wait_until(
        reset,
        "the group's offsets reset to 0 by kafka-consumer-groups.sh (needs the group empty)",
        180,
        interval=3,
    )
    resumed_at = time.time()
    s.patch_spec({"paused": False})

    def caught_up() -> bool:
        s.op.ensure()
        return committed(kafka_admin, s) == {p: s.produced[p] for p in range(PARTS)}

    wait_until(caught_up, "the group back at the end after the reset", 600, interval=2)
    newer = consumer_pod_hooks(s)
    assert newer and not set(newer) & set(older), (older, newer)
    assert all(h == [] for h in newer.values()), f"consumers still given the older-image switch: {newer}"
    with psycopg.connect(postgres_dsn) as conn:
        again = {
            (int(p), int(o))
            for p, o in conn.execute(
                f'SELECT partition, "offset" FROM {s.table} WHERE at >= %s', (resumed_at,)
            )
        }
    expected = {(p, o) for p in range(PARTS) for o in range(s.produced[p])}
    skipped = expected - again
    print(
        f"after the reset: {len(again)} offsets processed again of {len(expected)}; skipped {len(skipped)}; "
        f"mailbox now {mailbox_entries(kafka_admin, s)}"
    )
    assert not skipped, (
        f"{len(skipped)} offsets skipped after the reset (the owner jumped to the split "
        f"{splits}), e.g. {sorted(skipped)[:5]}"
    )
    assert s.drain()["id"] == drain_id  # no drain processed anything meanwhile
