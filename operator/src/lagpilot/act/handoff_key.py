"""The CR's hand-off key (issue 23, M8): signs every mailbox entry (lagpilot_runtime.handoff_mailbox).

A Secret `<cr>-handoff-key` (32 random bytes, hex; immutable), created by the operator before the
consumer Deployment, owned by the CR (deleted with it). The consumer pods get it as
`LAGPILOT_HANDOFF_KEY` (secretKeyRef) and its fingerprint as `LAGPILOT_HANDOFF_KEY_ID` (a new key rolls
them); the operator reads it here, once per process, and refuses a Secret the CR does not own (a
key someone else chose must never be trusted). Never logged: only the Secret's name is.
"""

from __future__ import annotations

from functools import partial

from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime import hex_key

from .key_secret import KEY_FIELD, CrKeys, KeyKind

__all__ = ["HANDOFF_KEY", "KEY_FIELD", "HandoffKeys", "key_secret_name", "new_key"]


def key_secret_name(cr_name: str) -> str:
    """`<cr>-handoff-key`: the Secret holding the CR's mailbox-signing key."""
    return f"{cr_name}-handoff-key"


def new_key() -> str:
    return hex_key.new_key(mbx.KEY_BYTES)


# its Secret: owned by the CR, immutable (a new key is a new Secret: delete it and the operator makes
# another at its next start, which rolls the consumers)
HANDOFF_KEY = KeyKind(
    "hand-off key", key_secret_name, "handoff-key", new_key, mbx.parse_key, key_id=mbx.key_id
)

# the CRs' hand-off keys (``HandoffKeys(core, sanitize)``): ``key``, ``key_id`` (its fingerprint)
HandoffKeys = partial(CrKeys, HANDOFF_KEY)
