"""Does the installed CRD hold what this operator writes and reads? (issue 26; docs/operator.md
"Conditions", docs/helm.md "Updating the CRD")

The API server prunes every field its CRD's structural schema does not declare, silently: an older
CRD (another checkout's, or a `helm upgrade`, which never upgrades `crds/`) drops status fields the
operator writes (`status.drain.idleSince` was, 2026-11-27: a busy drain's hold restarted every
cycle) and spec fields it reads (they read as their defaults). The check compares the installed
CRD's served version with the operator's own schema (lagpilot.model.crd, which `crds/` is
generated from) under `spec` and `status`:

1. a property of ours the installed schema lacks -> a gap (one per missing object, not one per
   field below it); below `x-kubernetes-preserve-unknown-fields` nothing is pruned: no gap;
2. a `type` that differs -> a gap (the API server would reject what the operator writes);
3. an `enum` that lacks a value of ours -> a gap naming the values.

Fields the installed CRD has and the operator does not (a newer CRD) are no gap. Validation bounds,
patterns and CEL rules are not compared: they do not prune. Pure: no I/O (act/crd_check.py reads the
CRD), no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from lagpilot.decide.status import TRUE, Condition, find_condition, merge_conditions
from lagpilot.model.status import ConditionType, DegradedReason

DEGRADED, STALLED = ConditionType.DEGRADED.value, ConditionType.STALLED.value
CRD_OUTDATED = DegradedReason.CRD_OUTDATED.value
NAMED = 8  # gaps named in the condition's message; the rest are counted
FIX = (
    "apply this version's CRD: kubectl apply --server-side -f crds/ (Helm never upgrades a chart's "
    'crds/: docs/helm.md "Updating the CRD")'
)


@dataclasses.dataclass(frozen=True)
class Gap:
    """A field path of ours (`status.drain.idleSince`, `[]` for a list's items) and what is wrong."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path} ({self.problem})"


def served_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    """The `openAPIV3Schema` of `version` when the installed CRD serves it, else None."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version and v.get("served"):
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, Mapping) else {}
    return None


def schema_gaps(ours: Mapping[str, Any], installed: Mapping[str, Any], path: str) -> list[Gap]:
    """What of the schema node `ours` the installed node lacks or declares otherwise (steps 1-3)."""
    if installed.get("x-kubernetes-preserve-unknown-fields"):
        return []
    gaps: list[Gap] = []
    if ours.get("type") and installed.get("type") and ours["type"] != installed["type"]:
        return [Gap(path, f"type {installed['type']}, this operator writes {ours['type']}")]
    if ours.get("enum") is not None and installed.get("enum") is not None:
        lacking = [str(v) for v in ours["enum"] if v not in installed["enum"]]
        if lacking:
            gaps.append(Gap(path, "enum lacks " + ", ".join(lacking)))
    theirs = installed.get("properties") or {}
    for name, sub in (ours.get("properties") or {}).items():
        where = f"{path}.{name}" if path else name
        if name not in theirs:
            gaps.append(Gap(where, "missing"))
        else:
            gaps.extend(schema_gaps(sub, theirs[name], where))
    for key, step in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(ours.get(key), Mapping) and isinstance(installed.get(key), Mapping):
            gaps.extend(schema_gaps(ours[key], installed[key], path + step))
    return gaps


def crd_gaps(ours: Mapping[str, Any], crd: Mapping[str, Any], version: str) -> list[Gap]:
    """The gaps of the installed CRD `crd` (as the API server returns it) against our schema `ours`
    under `spec` and `status` (apiVersion, kind and metadata are the API server's own)."""
    installed = served_schema(crd, version)
    if installed is None:
        return [Gap(version, "not served")]
    theirs = installed.get("properties") or {}
    gaps: list[Gap] = []
    for top in ("spec", "status"):
        sub = (ours.get("properties") or {}).get(top)
        if sub is None:
            continue
        if top not in theirs:
            if not installed.get("x-kubernetes-preserve-unknown-fields"):
                gaps.append(Gap(top, "missing"))
            continue
        gaps.extend(schema_gaps(sub, theirs[top], top))
    return gaps


def outdated_condition(gaps: Iterable[Gap]) -> Condition | None:
    """`Degraded=True`, reason `CRDOutdated`, naming the first NAMED gaps and the fix; None: none."""
    gaps = list(gaps)
    if not gaps:
        return None
    named = ", ".join(str(g) for g in gaps[:NAMED])
    more = f" and {len(gaps) - NAMED} more" if len(gaps) > NAMED else ""
    return Condition(
        DEGRADED,
        TRUE,
        CRD_OUTDATED,
        f"the installed CRD is older than this operator: the API server drops or refuses {named}{more}; "
        f"the operator keeps acting without them; {FIX}",
    )


def with_outdated(
    conditions: list[dict[str, Any]],
    old: Iterable[Mapping[str, Any]] | None,
    outdated: Condition | None,
    generation: int | None,
    now: float,
) -> list[dict[str, Any]]:
    """The cycle's merged `conditions` with the CRD's verdict laid over: `Degraded=CRDOutdated` unless
    the cycle's own cause already holds Degraded True (a failed observation, data loss: the more
    urgent, and the CRD's stays in the log and its event). The old status's Degraded (`old`) keeps its
    lastTransitionTime when it was already True."""
    if outdated is None:
        return conditions
    current = find_condition(conditions, DEGRADED)
    if current is not None and current.get("status") == TRUE and current.get("reason") != CRD_OUTDATED:
        return conditions
    # Degraded and kstatus' Stalled as last written: their lastTransitionTime is kept while True
    kept = [
        dict(c)
        for c in old or []
        if c.get("type") in (DEGRADED, STALLED) and find_condition(conditions, str(c.get("type"))) is None
    ]
    return merge_conditions(conditions + kept, [outdated], generation, now)
