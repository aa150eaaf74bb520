"""The CR's drain part key (issue 25 item 2): signs a busy drain's next parts (lagpilot_runtime.drain.plan.NextPart).

A Secret `<cr>-drain-part-key` (32 random bytes, hex; immutable), owned by the CR (deleted with
it), created by the operator when a busy drain is launched or the warm runtime is applied. The drain
Jobs of busy drains and the warm runtime get it as `LAGPILOT_DRAIN_PART_KEY` (secretKeyRef) and
verify every part with it; the consumers never get it. Why a key of its own and not the runtime's
plan key or the hand-off key: docs/drain.md "Busy drains: the executor". Never logged: only the
Secret's name is.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from lagpilot_runtime import plan_auth

from .key_secret import KEY_FIELD, CrKeys, KeyKind

__all__ = ["PART_KEY", "PartKeys", "part_key_ref", "part_key_secret_name"]


def part_key_secret_name(cr_name: str) -> str:
    """`<cr>-drain-part-key`: the Secret holding the key that signs the CR's busy drains' next parts."""
    return f"{cr_name}-drain-part-key"


PART_KEY = KeyKind(
    "drain part key", part_key_secret_name, "drain-part-key", plan_auth.new_key, plan_auth.parse_key
)


def part_key_ref(cr_name: str, optional: bool = False) -> dict[str, Any]:
    """The env entry that gives a drain process the key (never its value)."""
    ref: dict[str, Any] = {"name": part_key_secret_name(cr_name), "key": KEY_FIELD}
    if optional:
        ref["optional"] = True
    return {"name": plan_auth.PART_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}


# the CRs' drain part keys (``PartKeys(core, sanitize)``): ``key``
PartKeys = partial(CrKeys, PART_KEY)
