"""The Kafka edges of the finalizer (``deletion.py`` decides): read/write/delete the remainder group,
read the group's committed offsets, delete a deleted CR's drain progress groups."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lagpilot.decide.deletion import (
    Remainder,
    decode_remainder,
    encode_remainder,
    group_offsets_of,
    remainder_group,
)

log = logging.getLogger(__name__)


def topic_partitions(admin: Any, topic: str, timeout_s: float) -> list[int]:
    md = admin.list_topics(topic, timeout=timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        raise RuntimeError(f"topic {topic!r} not found: {getattr(t, 'error', None)}")
    return sorted(t.partitions)


def committed(
    admin: Any, group_id: str, topic: str, partitions: list[int], timeout_s: float
) -> dict[int, tuple[int, str | None]]:
    """(offset, metadata) per partition the group committed (``admin``: the operator's SafeAdmin)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    req = ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p) for p in partitions])
    res = admin.list_consumer_group_offsets([req], request_timeout=timeout_s)[group_id].result(
        timeout=timeout_s
    )
    return group_offsets_of(res.topic_partitions)


def read_remainder(admin: Any, group_id: str, topic: str, timeout_s: float) -> Remainder | None:
    parts = topic_partitions(admin, topic, timeout_s)
    return decode_remainder(committed(admin, remainder_group(group_id), topic, parts, timeout_s))


def delete_groups(admin: Any, groups: list[str], timeout_s: float) -> list[str]:
    """Delete consumer groups; a group that does not exist counts as deleted. Returns the failures."""
    if not groups:
        return []
    failed = []
    for g, fut in admin.delete_consumer_groups(groups, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except Exception as err:  # noqa: BLE001
            if "GROUP_ID_NOT_FOUND" not in str(err) and "not found" not in str(err).lower():
                failed.append(f"{g}: {err}")
    return failed


def write_remainder(
    conf: Mapping[str, Any], admin: Any, group_id: str, topic: str, rem: Remainder, timeout_s: float
) -> None:
    """Replace the remainder group's content with ``rem`` and read it back (raises if it differs).

    The old content is deleted first (a stale range would be drained twice); a crash between the
    delete and the commit is repaired by the finalizer's retry (the CR and its status still exist).
    """
    from confluent_kafka import Consumer, TopicPartition

    g = remainder_group(group_id)
    failed = delete_groups(admin, [g], timeout_s)
    if failed:
        raise RuntimeError(f"clearing {g} failed: {failed[0]}")
    enc = encode_remainder(rem)
    c = Consumer(
        {
            **{k: v for k, v in conf.items() if k not in ("logger", "error_cb")},
            "group.id": g,
            "enable.auto.commit": False,
            "client.id": "lagpilot-operator-remainder",
        }
    )
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, off, metadata=meta) for p, (off, meta) in sorted(enc.items())],
            asynchronous=False,
        )
    finally:
        c.close()
    back = read_remainder(admin, group_id, topic, timeout_s)
    if back != rem:
        raise RuntimeError(f"the remainder read back from {g} differs from what was written")


def list_progress_groups(admin: Any, group_id: str, timeout_s: float) -> list[str]:
    """``<groupId>.lagpilot-drain.*`` groups (a deleted CR's drain progress)."""
    res = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    prefix = f"{group_id}.lagpilot-drain."
    return sorted(x.group_id for x in res.valid if x.group_id.startswith(prefix))


def consumers_alive(core: Any, kube: Any, namespace: str, cr_name: str) -> int:
    """How many consumers of the CR may still act on its hand-off: its consumer pods not yet ended,
    or its Deployment's replicas if more (a pod still to be created counts)."""
    from lagpilot.act.deployment import deployment_name, selector_labels

    sel = ",".join(
        f"{k}={v}" for k, v in {**selector_labels(cr_name), "app.kubernetes.io/component": "consumer"}.items()
    )
    pods = core.list_namespaced_pod(namespace, label_selector=sel).items or []
    running = sum(1 for p in pods if (getattr(p.status, "phase", None) or "") not in ("Succeeded", "Failed"))
    dep = kube.get_deployment(namespace, deployment_name(cr_name))
    replicas = int(((dep or {}).get("spec") or {}).get("replicas") or 0)
    return max(running, replicas)


def planned_inputs(
    calls: Any,
    kube: Any,
    admin: Any,
    namespace: str,
    cr_name: str,
    spec: Any,
    partitions: list[int],
    timeout_s: float,
    key: bytes,
) -> dict[str, Any]:
    """The finalizer's reads for a drain deleted while Planned (``deletion.decide``), in the order the
    hand-off's exactness needs: the CR's consumers first (none left: none can act afterwards), then
    the group's committed offsets, then the mailbox (``calls``: the drain executor's mailbox reader;
    None when the read failed; ``key``: the CR's hand-off key, entries that do not verify read as absent)."""
    alive = consumers_alive(calls.core, kube, namespace, cr_name)
    offs = committed(admin, spec.group_id, spec.topic, partitions, timeout_s)
    return {
        "consumers_alive": alive,
        "committed": {p: offs.get(p, (None, None))[0] for p in partitions},
        "mailbox": calls.mailbox(admin, spec, partitions, key=key),
    }
