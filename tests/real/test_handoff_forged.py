"""A forged hand-off request does not move the live group (issue 23, M8).

Operator subprocess + kube-apiserver/controller-manager + the pods where `pods` runs them (the real
node) + Kafka + PostgreSQL (the ledger handler of
tests/real/test_drain_operator.py: one row per delivery). The consumers' logs are read through
`pod_io` (the API on the node).

The live group processes its backlog with drains disabled (no drain is ever planned). Another process,
with nothing but the Kafka client and Read on the mailbox group, commits to
``<groupId>.lagpilot-handoff`` a request that carries the CR's real uid (read from the CR) and a split
well ahead of each partition's committed offset. Before the MAC, the owners acked it and jumped to that
split: the records in between were owned by no drain. Now the owners ignore it: the group processes
every offset (the delivery ledger), its committed offsets reach the end, and the forged entries stay
unacknowledged in the mailbox.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.test_drain_operator import PARTS, Scenario, scenario  # noqa: F401
from tests.real.test_handoff_live import wait_group_running
from tests.real.test_handoff_reset import committed, mailbox_entries
from tests.real.test_operator_e2e import crd  # noqa: F401  (fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]

BACKLOG = 5000  # per partition; ~50 s for one consumer per partition at 100 records/s
AHEAD = 2000  # the forged split: this far past the partition's committed offset

FORGER = r"""
import json, sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, group, topic, uid, splits = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group + ".lagpilot-handoff", "enable.auto.commit": False})
tps = [TopicPartition(topic, int(p), int(s), metadata=f"lph2;cr={uid};id=1;split={int(s)}") for p, s in splits.items()]
res = c.commit(offsets=tps, asynchronous=False)
bad = [tp for tp in res if tp.error]
c.close()
print(json.dumps({"committed": {tp.partition: tp.offset for tp in res}, "errors": [str(tp.error) for tp in bad]}))
sys.exit(1 if bad else 0)
"""


def test_a_forged_request_with_the_crs_uid_does_not_make_the_owner_jump(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str
) -> None:
    import psycopg

    s = scenario({p: BACKLOG for p in range(PARTS)}, sla_s=10, live={}, drain_enabled=False)
    wait_group_running(s, postgres_dsn)
    uid = s.custom.get_namespaced_custom_object(
        "lagpilot.io", "v1alpha1", s.ns, "batchconsumergroups", s.name
    )["metadata"]["uid"]
    now = committed(kafka_admin, s)
    splits = {p: max(0, now.get(p, 0)) + AHEAD for p in range(PARTS)}
    assert all(sp < BACKLOG for sp in splits.values()), (now, splits)  # the forged range lies in the backlog
    proc = subprocess.run(
        [sys.executable, "-c", FORGER, s.bootstrap, s.group, s.topic, uid, __import__("json").dumps(splits)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    print("forger:", proc.returncode, proc.stdout[-400:], proc.stderr[-400:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the fault fired: the mailbox holds the forged requests, with the CR's own uid
    forged = mailbox_entries(kafka_admin, s)
    assert all(
        forged[p] is not None
        and forged[p].owner == uid
        and forged[p].split == splits[p]
        and not forged[p].acked
        for p in range(PARTS)
    ), forged

    def caught_up() -> bool:
        s.op.ensure()
        return committed(kafka_admin, s) == {p: s.produced[p] for p in range(PARTS)}

    wait_until(caught_up, "the group at the end of its backlog", 600, interval=2)
    with psycopg.connect(postgres_dsn) as conn:
        seen = {
            (int(p), int(o))
            for p, o in conn.execute(f"SELECT partition, \"offset\" FROM {s.table} WHERE source = 'consumer'")
        }
    expected = {(p, o) for p in range(PARTS) for o in range(s.produced[p])}
    skipped = expected - seen
    after = mailbox_entries(kafka_admin, s)
    print(
        f"forged splits {splits} at committed {now}; processed {len(seen)} of {len(expected)}; "
        f"skipped {len(skipped)}; mailbox now {after}"
    )
    assert not skipped, (
        f"{len(skipped)} offsets skipped: the owners jumped to the forged splits {splits}, "
        f"e.g. {sorted(skipped)[:5]}"
    )
    assert all(after[p] is not None and not after[p].acked for p in range(PARTS)), (
        f"a forged request was acked: {after}"
    )
    assert not s.drain(), s.drain()  # no drain ran: nothing else could have processed the records
    # the owners saw the forged entries and refused them holding the key (not merely keyless)
    refused = handoff_refusals(s)
    assert refused and all('"key_present": true' in ln and '"signed": false' in ln for ln in refused), (
        refused[:3]
    )


def handoff_refusals(s: Scenario) -> list[str]:
    """The `handoff_refused` lines of every consumer pod's log (`pod_io`: the API's logs, kept for pods deleted since by `follow`)."""
    assert s.io is not None
    out: list[str] = []
    for text in s.io.namespace_logs(s.ns, "consumer").values():
        out += [ln for ln in text.splitlines() if "handoff_refused" in ln]
    return out
