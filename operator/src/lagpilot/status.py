"""Status conditions per the Kubernetes API conventions, and diff-before-write.

- Every condition carries `observedGeneration` (the spec generation it describes).
- `lastTransitionTime` changes only when the condition's `status` flips; a new reason or message
  with the same status keeps the old time (as the API conventions and the HPA do).
- `status_patch` compares old and new status ignoring `lastTransitionTime` and returns a merge patch
  of the top-level fields that really changed, or None: no write, no watch event, no reconcile echo.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

CONDITION_TYPES = ("Ready", "Scaling", "CatchUpAtRisk", "Draining", "Degraded")
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


@dataclasses.dataclass(frozen=True)
class Condition:
    """One desired condition; the time stamps are filled in by `merge_conditions`."""

    type: str
    status: str
    reason: str
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in (TRUE, FALSE, UNKNOWN):
            raise ValueError(f"condition status must be True/False/Unknown, got {self.status!r}")
        if not self.reason or not self.reason[0].isupper() or not self.reason.isalnum():
            raise ValueError(f"condition reason must be CamelCase, got {self.reason!r}")


def rfc3339(now: float) -> str:
    """Kubernetes time stamps: UTC, second precision, `Z` suffix."""
    return dt.datetime.fromtimestamp(now, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(old: Iterable[Mapping[str, Any]] | None, new: Iterable[Condition],
                     generation: int | None, now: float) -> list[dict[str, Any]]:
    """New conditions replace old ones of the same type; other old types are kept as they were.

    Output order is stable (CONDITION_TYPES first, then any others by name) so that equal content
    always renders equal lists and the diff stays quiet.
    """
    by_type: dict[str, dict[str, Any]] = {str(c.get("type")): dict(c) for c in (old or []) if c.get("type")}
    for c in new:
        prev = by_type.get(c.type)
        ltt = prev.get("lastTransitionTime") if prev and prev.get("status") == c.status else None
        by_type[c.type] = {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "observedGeneration": generation,
            "lastTransitionTime": ltt or rfc3339(now),
        }
        if generation is None:
            del by_type[c.type]["observedGeneration"]
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def find_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == type_:
            return c
    return None


def _without_ltt(value: Any) -> Any:
    """A copy of a status value with every condition's lastTransitionTime removed."""
    if isinstance(value, list):
        return [_without_ltt(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _without_ltt(v) for k, v in value.items() if k != "lastTransitionTime"}
    return value


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that turns `old` into `new` at the top level, or None when nothing changed.

    Only keys present in `new` are considered (other writers' fields are left alone); a key whose
    value is None in `new` is removed (merge-patch semantics). Nested objects are written whole, so
    a list or map never keeps stale entries.
    """
    old = old or {}
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if value is None:
            if old.get(key) is not None:
                patch[key] = None
            continue
        if _without_ltt(old.get(key)) != _without_ltt(value):
            patch[key] = value
    return patch or None
