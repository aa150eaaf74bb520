"""The kstatus conditions (`Reconciling`, `Stalled`), derived from the group's own conditions.

Flux and Argo CD judge a resource's health with kstatus (sigs.k8s.io/cli-utils/pkg/kstatus):
`metadata.generation` != `status.observedGeneration` -> InProgress; a condition `Reconciling=True`
-> InProgress; `Stalled=True` -> Failed; otherwise `Ready` (True -> Current, False/Unknown ->
InProgress). Without `Stalled`, a group that is `Degraded` but still `Ready` (its consumers run, the
operator cannot observe Kafka) read as Current: healthy.

Rules (docs/gitops.md; tested against kstatus itself in tests/real/test_kstatus.py):
- `Stalled` = `Degraded`: True with Degraded's reason and message while the operator cannot observe
  or act on the group (Kafka unreachable, authentication, invalid spec, duplicate groupId, data
  lost to retention), or while the installed CRD is older than the operator (`CRDOutdated`:
  decide/crd_check.py); False (`AsExpected`) otherwise. It needs someone to act.
- `Reconciling` = True while the operator is bringing the consumers to what it decided and nothing
  stalls it: no `Ready` yet (the first cycle has not run), or `Ready` False/Unknown for another
  reason than `Paused` (consumers starting, a rollout); False (`Reconciled`) when Ready,
  (`Stalled`) when stalled, (`Paused`) while `spec.paused`. Scaling in answer to lag is the
  group's normal life, not reconciling: a group whose pods are all ready at the replicas it
  decided is Current even while it scales (each new decision makes it Reconciling until its pods
  are ready).

Pure: no I/O; `derive` sees the merged conditions of one status write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagpilot.model.status import ConditionType

RECONCILING, STALLED = ConditionType.RECONCILING.value, ConditionType.STALLED.value
# Ready=False reasons that are a settled state, not progress towards one
SETTLED_NOT_READY = frozenset({"Paused"})


def derive(by_type: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) of Reconciling and Stalled for the merged conditions `by_type`."""
    degraded = by_type.get("Degraded") or {}
    ready = by_type.get("Ready")
    if degraded.get("status") == "True":
        reason = str(degraded.get("reason") or "Degraded")
        message = str(degraded.get("message") or "")
        return [
            (STALLED, "True", reason, message),
            (RECONCILING, "False", "Stalled", f"stalled ({reason}): the operator needs the cause fixed"),
        ]
    stalled = (STALLED, "False", "AsExpected", "")
    if ready is None:
        return [stalled, (RECONCILING, "True", "Initializing", "the operator has not completed a cycle yet")]
    if ready.get("status") == "True":
        return [stalled, (RECONCILING, "False", "Reconciled", str(ready.get("message") or ""))]
    reason = str(ready.get("reason") or "NotReady")
    if reason in SETTLED_NOT_READY:
        return [stalled, (RECONCILING, "False", reason, str(ready.get("message") or ""))]
    return [stalled, (RECONCILING, "True", reason, str(ready.get("message") or ""))]


def verdict(obj: Mapping[str, Any]) -> tuple[str, str]:
    """kstatus' verdict (status, message) on a BatchConsumerGroup, re-implemented from
    cli-utils v0.37.2 pkg/kstatus/status (Compute: checkGenericProperties then checkReadyCondition)
    for the tests and the plugin; tests/real/test_kstatus.py compares it with the real library."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating", "Resource scheduled for deletion"
    gen, observed = meta.get("generation"), status.get("observedGeneration")
    if gen is not None and observed is not None and int(gen) != int(observed):
        return "InProgress", (
            f"{obj.get('kind')} generation is {gen}, but latest observed generation is {observed}"
        )
    conds = status.get("conditions") or []
    for c in conds:
        if c.get("type") == RECONCILING and c.get("status") == "True":
            return "InProgress", str(c.get("message") or "")
        if c.get("type") == STALLED and c.get("status") == "True":
            return "Failed", str(c.get("message") or "")
    for c in conds:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return "Current", "Resource is Ready"
            if c.get("status") in ("False", "Unknown"):
                return "InProgress", str(c.get("message") or "")
    return "Current", "Resource is current"
