"""Leader election over a coordination.k8s.io/v1 Lease: the pure part (Kubernetes' leaderelection
pattern, as client-go's `leaderelection` package does it; the I/O is `lagpilot.act.leader_lease`).

One operator instance holds the Lease (its `holderIdentity`) and renews it every `retry_s`; the
others stand by and try every `retry_s`. Expiry is judged on the local clock only: a standby
remembers WHEN IT FIRST SAW the current version of the Lease (`observed_at`) and takes it once
`leaseDurationSeconds` passed since then without a change — never from `renewTime`, another
machine's clock. The holder stops acting (the process exits) when it could not renew for
`renew_deadline_s` < `duration_s`, so it has stopped before any standby can take the Lease over.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from lagpilot.config import Env


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""

    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(
                "leader election timings need 0 < retry < renew deadline < lease duration, got "
                f"{self.retry_s} / {self.renew_deadline_s} / {self.duration_s}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LeaseTiming:
        """LAGPILOT_LEASE_DURATION_SECONDS, LAGPILOT_LEASE_RENEW_DEADLINE_SECONDS,
        LAGPILOT_LEASE_RETRY_SECONDS."""
        e = Env(env)
        return cls(
            e.number("LAGPILOT_LEASE_DURATION_SECONDS", cls.duration_s, minimum=None),
            e.number("LAGPILOT_LEASE_RENEW_DEADLINE_SECONDS", cls.renew_deadline_s, minimum=None),
            e.number("LAGPILOT_LEASE_RETRY_SECONDS", cls.retry_s, minimum=None),
        )


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as read: holder ("" when released) and its duration."""

    holder: str
    duration_s: float
    transitions: int = 0


class Step(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    CREATE = "Create"  # no Lease yet: create it holding it
    RENEW = "Renew"  # ours: write a new renewTime
    TAKE = "Take"  # released or expired: write ourselves as the holder (transitions + 1)
    WAIT = "Wait"  # another holder's, not expired


def next_step(
    record: LeaseRecord | None, identity: str, observed_at: float, now: float
) -> tuple[Step, float]:
    """What to do with the Lease, and (WAIT) how long until it would expire. `observed_at`: the
    local time this version of the record was first seen."""
    if record is None:
        return Step.CREATE, 0.0
    if record.holder == identity:
        return Step.RENEW, 0.0
    if not record.holder:
        return Step.TAKE, 0.0
    left = observed_at + record.duration_s - now
    if left <= 0:
        return Step.TAKE, 0.0
    return Step.WAIT, left


GLOB_CHARS = "*?[!,"


def lease_namespaces(watched: list[str], own: str | None) -> list[str]:
    """Where the Lease(s) live: one per watched namespace when the operator watches named
    namespaces (so two instances whose namespaces overlap — two releases, a debug run — exclude
    each other there), taken in sorted order (no two instances each holding a part and waiting for
    the rest); else (all namespaces, or kopf glob patterns) one in the operator's own namespace."""
    if watched and not any(c in n for n in watched for c in GLOB_CHARS):
        return sorted(set(watched))
    if not own:
        raise ValueError(
            "leader election when watching all namespaces (or namespace patterns) needs the "
            "operator's namespace: --leader-election-namespace or LAGPILOT_OPERATOR_NAMESPACE"
        )
    return [own]
