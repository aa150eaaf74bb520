"""Signed drain plans: the warm drain runtime runs only plans the operator signed (issue 23, C1).

Pure: no I/O. The operator (lagpilot.act.drain_runtime) keeps one random 256-bit key per
BatchConsumerGroup in a Secret it creates and owns (`<cr>-drain-runtime-key`); only the runtime's
pod gets it (env from secretKeyRef). At each warm launch the operator signs the attempt's plan:

    HMAC-SHA256(key, canonical({"v": 1, "crUid", "drainId", "attempt", "expiresAt", "plan": <plan text>}))

`canonical` is JSON with sorted keys, no whitespace, ASCII only; the plan is embedded as the exact
text the Job carries (LAGPILOT_DRAIN_PLAN), so a changed sub-range, batch size or drain id breaks
the signature. The Job gets the signature (not the key) in LAGPILOT_DRAIN_PLAN_AUTH and sends it
with its plan; the runtime (`verify`, constant-time compare) also checks its own CR uid, the expiry,
that the signed drain id is the plan's, and itself that the (drain id, attempt) is newer than every
one it took before (a replay). docs/drain.md "Who may send the runtime a plan".
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lagpilot_runtime import hex_key

KEY_ENV = "LAGPILOT_DRAIN_RUNTIME_KEY"  # the runtime pod only (secretKeyRef); hex of 32 random bytes
KEY_ID_ENV = "LAGPILOT_DRAIN_RUNTIME_KEY_ID"  # a one-way fingerprint of it (the pod template follows the key)
CR_UID_ENV = "LAGPILOT_CR_UID"  # the runtime's CR: a plan signed for another CR is refused
AUTH_ENV = "LAGPILOT_DRAIN_PLAN_AUTH"  # a warm drain Job's signature of its plan (JSON of PlanAuth)
# a busy drain's next parts (drain_plan.NextPart): signed with the CR's drain part key, which the
# drain Jobs and the warm runtime get (secretKeyRef), the consumers never
PART_KEY_ENV = "LAGPILOT_DRAIN_PART_KEY"
PART_MAC_SEP = ";mac="
KEY_BYTES = hex_key.KEY_BYTES  # the one size of a per-CR key (hex_key)
PLAN_TTL_S = 900  # a warm Job must hand its plan over within this long of its launch (pod start, busy waits)
VERSION = 1


class Refused(ValueError):
    """The plan is not the operator's (or no longer valid): the runtime refuses it (HTTP 401)."""


def new_key() -> str:
    """A fresh per-CR key, as the Secret stores it (hex)."""
    return hex_key.new_key(KEY_BYTES)


def parse_key(text: str | bytes | None) -> bytes:
    """The key from its hex form; ValueError unless it is exactly KEY_BYTES bytes."""
    return hex_key.parse_key(text, "drain runtime key", KEY_BYTES)


def key_id(key: bytes) -> str:
    """A fingerprint of the key (one-way; safe in a pod spec): changes when the key does."""
    return hex_key.fingerprint(key, b"lagpilot-drain-runtime-key-id")


@dataclass(frozen=True)
class PlanAuth:
    """The operator's signature of one attempt's plan (the plan text travels beside it)."""

    cr_uid: str
    drain_id: str
    attempt: int
    expires_at: int  # epoch seconds
    signature: str  # hex HMAC-SHA256

    def to_dict(self) -> dict[str, Any]:
        return {
            "crUid": self.cr_uid,
            "drainId": self.drain_id,
            "attempt": self.attempt,
            "expiresAt": self.expires_at,
            "signature": self.signature,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlanAuth:
        if not isinstance(d, Mapping):
            raise Refused("no signature")
        try:
            attempt, expires = d["attempt"], d["expiresAt"]
            if type(attempt) is not int or type(expires) is not int:
                raise TypeError("attempt/expiresAt must be integers")
            return cls(str(d["crUid"]), str(d["drainId"]), attempt, expires, str(d["signature"]))
        except (KeyError, TypeError) as exc:
            raise Refused(f"malformed signature ({exc})") from None


def canonical(cr_uid: str, drain_id: str, attempt: int, expires_at: int, plan_text: str) -> bytes:
    """The bytes that are signed (sorted keys, no whitespace, ASCII: one encoding per content)."""
    return json.dumps(
        {
            "v": VERSION,
            "crUid": cr_uid,
            "drainId": drain_id,
            "attempt": int(attempt),
            "expiresAt": int(expires_at),
            "plan": plan_text,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode()


def _mac(key: bytes, cr_uid: str, drain_id: str, attempt: int, expires_at: int, plan_text: str) -> str:
    return hmac.new(
        key, canonical(cr_uid, drain_id, attempt, expires_at, plan_text), hashlib.sha256
    ).hexdigest()


def sign(key: bytes, plan_text: str, cr_uid: str, drain_id: str, attempt: int, expires_at: float) -> PlanAuth:
    """The operator's side: sign the exact plan text of one attempt."""
    exp = int(expires_at)
    return PlanAuth(
        cr_uid,
        str(drain_id),
        int(attempt),
        exp,
        _mac(key, cr_uid, str(drain_id), int(attempt), exp, plan_text),
    )


def verify(key: bytes, plan_text: str, auth: PlanAuth, cr_uid: str, now: float) -> None:
    """The runtime's side: raise Refused unless `auth` is this key's signature of `plan_text` for
    this CR, not expired. (The drain id inside the plan and the replay rule: the caller's, after
    parsing.) The signature is checked first and in constant time: an unsigned caller learns nothing."""
    if not key:
        raise Refused("the runtime has no key")
    want = _mac(key, auth.cr_uid, auth.drain_id, auth.attempt, auth.expires_at, plan_text)
    if not hmac.compare_digest(want.encode(), auth.signature.encode()):
        raise Refused("bad signature")
    if not hmac.compare_digest(auth.cr_uid.encode(), cr_uid.encode()):
        raise Refused("signed for another BatchConsumerGroup")
    if now >= auth.expires_at:
        raise Refused("the signed plan has expired")


# ---- a busy drain's next parts -------------------------------------------------------------------


def _part_mac(key: bytes, owner: str, topic: str, body: str) -> str:
    msg = b"lagpilot-drain-part-mac-v1\0" + owner.encode() + b"\0" + topic.encode() + b"\0" + body.encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def sign_part(key: bytes, owner: str, topic: str, body: str) -> str:
    """The metadata of a next part's commit: its body and ``;mac=`` HMAC-SHA256 under the CR's part
    key over the CR's tag (``owner``: drain_plan.owner_tag), the topic and the body (drain id, round,
    final, every sub-range)."""
    if not key:
        raise ValueError("no drain part key")
    return body + PART_MAC_SEP + _part_mac(key, owner, topic, body)


def verify_part(key: bytes, owner: str, topic: str, metadata: str | None) -> str:
    """The body of a signed next part; Refused unless it carries this key's MAC (constant time)."""
    if not key:
        raise Refused("no drain part key")
    body, sep, mac = (metadata or "").rpartition(PART_MAC_SEP)
    if not sep or not hmac.compare_digest(_part_mac(key, owner, topic, body).encode(), mac.encode()):
        raise Refused("next part not signed by the operator")
    return body
