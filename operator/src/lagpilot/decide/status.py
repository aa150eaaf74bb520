"""Status conditions per the Kubernetes API conventions, and diff-before-write.

- Every condition carries `observedGeneration` (the spec generation it describes).
- `lastTransitionTime` changes only when the condition's `status` flips; a new reason or message
  with the same status keeps the old time (as the API conventions and the HPA do).
- The abnormal-true types are listed only while True or Unknown (a flip to False removes them; a
  later True is a transition at that time).
- `status_patch` compares old and new status ignoring `lastTransitionTime` and returns a merge patch
  of the top-level fields that really changed, or None: no write, no watch event, no reconcile echo.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from lagpilot.decide import kstatus
from lagpilot.model.status import ABNORMAL_TRUE, ConditionStatus, ConditionType

CONDITION_TYPES = tuple(t.value for t in ConditionType)
TRUE, FALSE, UNKNOWN = (
    ConditionStatus.TRUE.value,
    ConditionStatus.FALSE.value,
    ConditionStatus.UNKNOWN.value,
)


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
    """Kubernetes time stamps: UTC, second precision, `Z` suffix (conditions, lastScaleTime)."""
    return dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- times in the status: THE formatter/parser pair ----------------------------------------------
# Inside the operator every time is a float (epoch seconds, `now` passed into pure code); the status
# holds RFC 3339 strings with millisecond precision ("2026-11-23T06:54:09.503Z"). Convert only here.


def format_time(t: float | None) -> str | None:
    """Epoch seconds -> RFC 3339 UTC with milliseconds; None stays None. Rounded to the millisecond,
    so ``format_time(parse_time(format_time(t))) == format_time(t)`` (a round trip never diffs)."""
    if t is None:
        return None
    ms = round(float(t) * 1000)
    secs, frac = divmod(ms, 1000)
    return dt.datetime.fromtimestamp(secs, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:03d}Z"


def parse_time(v: Any) -> float | None:
    """A status time (RFC 3339: any fraction, `Z` or an offset) -> epoch seconds. None stays None;
    anything else raises ValueError."""
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"not a time: {v!r}")
    s = v.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    head, dot, rest = s.partition(".")
    if dot:  # fromisoformat (3.10) takes 3 or 6 fraction digits only: normalise to 6
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        s = f"{head}.{(rest[:i] + '000000')[:6]}{rest[i:]}"
    try:
        t = dt.datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"not an RFC 3339 time: {v!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def merge_conditions(
    old: Iterable[Mapping[str, Any]] | None, new: Iterable[Condition], generation: int | None, now: float
) -> list[dict[str, Any]]:
    """New conditions replace old ones of the same type; other old types are kept as they were. The
    abnormal-true types (model.status.ABNORMAL_TRUE) are left out while False: absent means normal
    (kstatus), and `kubectl describe` lists only what needs a look besides Ready, Scaling, Draining.

    Output order is stable (CONDITION_TYPES first, then any others by name) so that equal content
    always renders equal lists and the diff stays quiet.
    """
    by_type: dict[str, dict[str, Any]] = {str(c.get("type")): dict(c) for c in (old or []) if c.get("type")}
    new = [c for c in new if c.type not in (kstatus.RECONCILING, kstatus.STALLED)]
    _apply(by_type, new, generation, now)
    # the kstatus conditions follow from the merged set, whichever writer changed it (lagpilot.decide.kstatus)
    _apply(by_type, [Condition(*d) for d in kstatus.derive(by_type)], generation, now)
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    listed = [c for t, c in by_type.items() if not (t in ABNORMAL_TRUE and c.get("status") == FALSE)]
    return sorted(listed, key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def _apply(
    by_type: dict[str, dict[str, Any]], new: Iterable[Condition], generation: int | None, now: float
) -> None:
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


def find_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == type_:
            return c
    return None


def _without_ltt(value: Any) -> Any:
    """A copy of a status value with every condition's lastTransitionTime removed, and every null
    field of a nested object (the apiserver keeps none: a merge patch's null deletes the key)."""
    if isinstance(value, list):
        return [_without_ltt(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _without_ltt(v) for k, v in value.items() if k != "lastTransitionTime" and v is not None}
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
