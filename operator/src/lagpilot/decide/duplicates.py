"""Two BatchConsumerGroups with the same ``groupId`` on the same Kafka cluster (issue 23, M4): pure.

Scope: the Kafka cluster (``spec.kafka.bootstrapServers`` as a set of ``host:port``, case-insensitive)
and ``spec.groupId`` — any topic, any namespace the operator watches. A Kafka consumer group is
cluster-wide and so are lagpilot's side groups, all named after ``groupId`` alone: the hand-off
mailbox ``<groupId>.lagpilot-handoff``, the progress groups
``<groupId>.lagpilot-drain.<tag>.<id>.<k>`` (drain ids of both CRs start at 1; since issue 23
``<tag>`` names the CR, but the finalizer deletes by the groupId prefix), the remainder
``<groupId>.lagpilot-remainder``. Two CRs on different topics would still share the group's
membership (the "group empty" check of the hand-off,
rebalances across both Deployments) and a deleted one would delete the other's progress groups.
Two spellings of one cluster (an IP and a DNS name) are not recognised as the same.

The CR created first (``creationTimestamp``, then ``uid``) holds the group; every other gets
``Degraded=True/DuplicateGroupId`` and does nothing until the holder is gone or its own ``groupId``
changes (no admission webhook: a CEL rule cannot see other objects, so this is a condition, as a
KEDA user knows it from a ScaledObject whose target another one already scales).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

REASON = "DuplicateGroupId"


@dataclass(frozen=True, order=True)
class Claim:
    """A CR's claim on a (cluster, groupId); ordered by age (the oldest holds the group)."""

    created: str  # metadata.creationTimestamp (RFC 3339, UTC: sorts as text)
    uid: str
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def cluster_key(bootstrap_servers: str) -> str:
    return ",".join(sorted({h.strip().lower() for h in str(bootstrap_servers).split(",") if h.strip()}))


def index_key(raw_spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(cluster, groupId) of a CR's raw spec; None when either is missing."""
    kafka = raw_spec.get("kafka") or {}
    servers = cluster_key(kafka.get("bootstrapServers") or "") if isinstance(kafka, Mapping) else ""
    group = str(raw_spec.get("groupId") or "").strip()
    return (servers, group) if servers and group else None


def claim_of(meta: Mapping[str, Any]) -> Claim:
    return Claim(
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("uid") or ""),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def other_holder(me: Claim, claims: Iterable[Claim]) -> Claim | None:
    """The CR that holds the group if it is not ``me`` (then ``me`` is a duplicate); None otherwise."""
    others = [c for c in claims if c.uid != me.uid]
    if not others:
        return None
    holder = min([me, *others])
    return None if holder.uid == me.uid else holder


def message(group_id: str, holder: Claim) -> str:
    return (
        f"spec.groupId {group_id!r} is already used on this Kafka cluster by BatchConsumerGroup {holder.ref} "
        f"(created {holder.created}); this CR creates no consumers and no drains until that one is deleted "
        f"or spec.groupId is changed"
    )
