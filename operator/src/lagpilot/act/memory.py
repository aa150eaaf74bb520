"""The controller's memory of a CR outside its status: the ConfigMap ``<cr>-lagpilot-state``.

What the decision step carries from one cycle to the next (``decide.step.StepState``: the
estimator's per-partition rates, rate windows and data-loss bookkeeping; the scaler's raw
recommendations and last scale time) is controller memory, not observed state: the API conventions
keep it out of ``.status``. Like the HPA's recommendations it moves every cycle; unlike the HPA
(which forgets on restart) lagpilot keeps it in an object the CR owns, so a restarted operator or a
new leader resumes where the last one was (docs/operator.md "Memory"). One data field, ``memory``:
the JSON of ``StepState.to_memory()`` (floats as Python writes them: read back exactly).

The ConfigMap is server-side applied (field manager ``lagpilot``; create or update in one call),
controlled by the CR (garbage-collected with it). One of that name the CR does not control is
not read (a fresh start) and is taken over by the next write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lagpilot.act.deployment import label_value, owner_reference
from lagpilot.act.key_secret import owned_by

MEMORY_FIELD = "memory"


def memory_name(cr_name: str) -> str:
    return f"{cr_name}-lagpilot-state"


def memory_configmap(cr_name: str, namespace: str, uid: str, memory: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap holding ``memory`` (a JSON-ready dict)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": memory_name(cr_name),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "lagpilot",
                "app.kubernetes.io/component": "memory",
                "app.kubernetes.io/managed-by": "lagpilot",
                "lagpilot.io/group": label_value(cr_name),
            },
            "ownerReferences": [owner_reference(cr_name, uid)],
        },
        "data": {MEMORY_FIELD: json.dumps(memory, separators=(",", ":"), sort_keys=True)},
    }


def memory_of(configmap: Mapping[str, Any] | None, uid: str) -> dict[str, Any] | None:
    """The memory a ConfigMap holds; None when absent, not controlled by the CR ``uid`` or unreadable
    (the step then starts fresh, as on a CR's first cycle)."""
    if not configmap or not owned_by(configmap, uid):
        return None
    try:
        out = json.loads(((configmap.get("data") or {}).get(MEMORY_FIELD)) or "null")
    except ValueError:
        return None
    return dict(out) if isinstance(out, dict) else None
