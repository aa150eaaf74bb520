"""Deleting a CR while its drain is `Planned` with acks in the mailbox (issue 23, H1).

Operator subprocess + kube-apiserver/controller-manager + the pods where `pods` runs them (the real
node) + Kafka + PostgreSQL (the ledger handler of
tests/real/test_drain_operator.py: one row per delivery).

The operator dies right after publishing the hand-off (test-only crash point `Publish:status`), so it
never sees the acks: the live owners ack (start = their committed offset) and move themselves to the
split while the status still says `Planned` with unresolved starts. The CR is deleted, then the
operator comes back and runs the finalizer. `[ack, split)` of every acked partition has no other owner
any more (the group is past the split, no drain recorded it): the finalizer must hand it back to
`<groupId>.lagpilot-remainder` before it lets the CR go, and seal the mailbox. Checked: every produced
offset is delivered (ledger), handed back, or at/above the group's committed offset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.test_drain_operator import PARTS, Scenario, scenario  # noqa: F401
from tests.real.test_finalizer import remainder_in_kafka
from tests.real.test_handoff_live import enable_drain, wait_group_running
from tests.real.test_handoff_reset import committed, mailbox_entries
from tests.real.test_operator_e2e import crd, events_for, get_cr  # noqa: F401  (crd: fixture used by `scenario`)

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_cr_deleted_while_planned_with_acks_hands_the_acked_ranges_back(
    scenario: Callable[..., Scenario], kafka_admin: Any, postgres_dsn: str, tmp_path: Path
) -> None:
    import psycopg

    s = scenario(
        {p: 6000 for p in range(PARTS)},
        sla_s=20,
        live={},
        drain_enabled=False,
        crash_at="Publish:status",
        operator_env={
            "LAGPILOT_DRAIN_ACK_TIMEOUT_SECONDS": "300",
            "LAGPILOT_DELETE_DRAIN_WAIT_SECONDS": "600",
        },
    )
    wait_group_running(s, postgres_dsn)
    enable_drain(s)
    marker = tmp_path / f"crash-{s.ns}" / "Publish-status"
    wait_until(
        lambda: marker.exists() and not s.op.alive(),
        "the operator dead right after publishing the hand-off",
        300,
    )
    d = s.drain()
    assert d["phase"] == "Planned" and d.get("publishedAt"), d
    splits = {int(r["partition"]): int(r["end"]) for r in d["ranges"]}
    assert all(r.get("start") is None for r in d["ranges"]), d  # nothing resolved in the status

    def acked_and_moved() -> dict[int, int] | None:
        entries, own = mailbox_entries(kafka_admin, s), committed(kafka_admin, s)
        acks = {
            p: e.ack
            for p, e in entries.items()
            if p in splits and e is not None and e.acked and e.drain_id == d["id"]
        }
        return acks if set(acks) == set(splits) and all(own[p] >= splits[p] for p in splits) else None

    acks = wait_until(
        acked_and_moved, "every owner acked and moved to its split (the operator is down)", 120, interval=1
    )
    print(f"drain {d['id']} Planned, splits {splits}, acks {acks}, group at {committed(kafka_admin, s)}")
    assert any(acks[p] < splits[p] for p in splits), "no owner acked a non-empty range: nothing to lose"

    s.custom.delete_namespaced_custom_object("lagpilot.io", "v1alpha1", s.ns, "batchconsumergroups", s.name)
    s.op.ensure()  # the operator is back: its finalizer decides

    def gone() -> bool:
        try:
            get_cr(s.custom, s.ns, s.name)
            return False
        except Exception as err:  # noqa: BLE001
            return getattr(err, "status", None) == 404

    wait_until(gone, "the CR released by the finalizer", 600, interval=1)
    reasons = [e.reason for e in events_for(s.core, s.ns, s.name)]
    rem = remainder_in_kafka(kafka_admin, s.group, s.topic)
    print(f"events {reasons}; remainder {rem}")
    assert rem is not None and rem.drain_id == d["id"], (
        f"[ack, split) dropped: no remainder handed back ({reasons})"
    )
    assert set(rem.ranges) == {(p, acks[p], splits[p]) for p in splits if acks[p] < splits[p]}, rem
    assert "DrainRemainderHandedBack" in reasons, reasons
    # every mailbox entry of the drain is sealed: nothing in it moves anyone later
    assert all(e is not None and e.done for p, e in mailbox_entries(kafka_admin, s).items() if p in splits)

    wait_until(
        lambda: not s.core.list_namespaced_pod(s.ns).items, "every pod gone (GC of the Deployment)", 240
    )
    own = committed(kafka_admin, s)
    with psycopg.connect(postgres_dsn) as conn:
        delivered = {(int(p), int(o)) for p, o in conn.execute(f'SELECT partition, "offset" FROM {s.table}')}
    handed = {(p, o) for p, a, b in rem.ranges for o in range(a, b)}
    ahead = {(p, o) for p in range(PARTS) for o in range(max(own.get(p, 0), 0), s.produced[p])}
    missing = {(p, o) for p, n in s.produced.items() for o in range(n)} - delivered
    print(f"missing {len(missing)}, handed back {len(handed)}, ahead of the group {len(ahead)}")
    assert missing <= handed | ahead, f"{len(missing - handed - ahead)} offsets owned by nobody"
