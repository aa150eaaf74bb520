"""The one form of the per-CR keys (the hand-off key, the drain runtime key, the busy drains' part
key, the Spark RPC key): random bytes kept as hex in a Secret, checked when read, and named in a pod
spec only by a one-way fingerprint. Never logged."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

KEY_BYTES = 32


def new_key(size: int = KEY_BYTES) -> str:
    """A fresh key, as its Secret stores it (hex)."""
    return secrets.token_hex(size)


def parse_key(text: Any, what: str, size: int = KEY_BYTES) -> bytes:
    """The key from its hex form; ValueError (naming `what`, never the text) unless it is exactly
    `size` bytes."""
    raw = text.decode() if isinstance(text, bytes) else str(text or "")
    key = bytes.fromhex(raw.strip())
    if len(key) != size:
        raise ValueError(f"a {what} has {size} bytes (hex)")
    return key


def fingerprint(key: bytes, label: bytes) -> str:
    """A one-way fingerprint of the key under `label` (safe in a pod spec): changes when the key does."""
    return hashlib.sha256(label + b"\0" + key).hexdigest()[:16]
