"""The per-CR key Secrets the operator makes and trusts, read in one place.

The keys that use it: the warm drain runtime's plan-signing key (`<cr>-drain-runtime-key`,
act/drain_runtime.py, issue 23 C1), the hand-off key that signs mailbox entries
(`<cr>-handoff-key`, act/handoff_key.py, M8), the busy drains' part key (`<cr>-drain-part-key`,
act/drain_part_key.py) and the Spark RPC key (`<cr>-drain-rpc-key`, act/spark_rpc_key.py, H4).
Each kind is a `KeyKind` (its Secret's name and component label, how a key is made and checked);
`KeyKind.secret` builds its Secret and `CrKeys` reads or creates it. Each is a Secret of random bytes (hex; immutable)
owned by the CR (deleted with it), created by the operator when absent and read once per operator
process and CR uid. A Secret of that name the CR does not own is refused: a key someone else chose
(and so knows) must never be trusted. Never logged: only the Secret's name is.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lagpilot import __version__

from .deployment import label_value, owner_reference

log = logging.getLogger(__name__)

KEY_FIELD = "key"  # the Secret's data field (hex)


def controller_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The object's controller ownerReference (None: none)."""
    refs: list[Mapping[str, Any]] = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return ref
    return None


def owned_by(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """Its controller is the object with this uid."""
    ref = controller_of(obj)
    return bool(uid) and ref is not None and ref.get("uid") == uid


@dataclass(frozen=True)
class KeyKind:
    """One kind of per-CR key: its Secret's name and labels, how a key is made and checked."""

    what: str  # in messages and logs: "drain runtime key", "hand-off key"
    secret_name: Callable[[str], str]  # CR name -> Secret name
    component: str  # the Secret's app.kubernetes.io/component label
    new_key: Callable[[], str]  # a fresh key, hex
    parse_key: Callable[[Any], bytes]  # raises ValueError on a malformed key
    key_id: Callable[[bytes], str] | None = None  # the key's public fingerprint (None: the kind has none)
    # labels the Secret carries beyond the common ones (CR name -> labels; the runtime key: its runtime's)
    extra_labels: Callable[[str], Mapping[str, str]] | None = None

    def secret(
        self, cr_name: str, namespace: str, cr_uid: str, key_hex: str, version: str = __version__
    ) -> dict[str, Any]:
        """The CR's key Secret: owned by the CR (controller reference: deleted with it), immutable (a new
        key is a new Secret: delete it and the operator makes another, which rolls what uses it),
        labelled by its component."""
        labels = {
            **(self.extra_labels(cr_name) if self.extra_labels else {}),
            "app.kubernetes.io/instance": label_value(cr_name),
            "app.kubernetes.io/component": self.component,
            "app.kubernetes.io/part-of": "lagpilot",
            "app.kubernetes.io/managed-by": "lagpilot",
            "app.kubernetes.io/version": label_value(version),
        }
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "immutable": True,
            "metadata": {
                "name": self.secret_name(cr_name),
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner_reference(cr_name, cr_uid)],
            },
            "stringData": {KEY_FIELD: key_hex},
        }


class CrKeys:
    """The CRs' keys of one kind through one Kubernetes client (``core``: a CoreV1Api; ``sanitize``:
    its ApiClient's sanitize_for_serialization): read (or created) once per operator process and CR
    uid. The hand-off key, the busy drains' part key and the Spark RPC key are this class with their
    kind (``HandoffKeys``, ``PartKeys``, ``SparkRpcKeys``)."""

    def __init__(self, kind: KeyKind, core: Any, sanitize: Callable[[Any], Any]) -> None:
        self.kind = kind
        self.core = core
        self._sanitize = sanitize
        self._keys: dict[tuple[str, str, str], bytes] = {}

    def key(self, namespace: str, name: str, uid: str) -> bytes:
        """The CR's key, its Secret created when absent; raises when it cannot be read or created, or
        when the Secret is not the CR's or holds no valid key (so a caller that uses no key itself,
        the Spark RPC key's, calls it to make sure the Secret is there and sound)."""
        cache = (namespace, name, uid)
        if cache in self._keys:
            return self._keys[cache]
        kind, sname = self.kind, self.kind.secret_name(name)
        try:
            secret = self._sanitize(self.core.read_namespaced_secret(sname, namespace))
        except Exception as err:
            if getattr(err, "status", None) != 404:
                raise
            key_hex = kind.new_key()
            try:
                self.core.create_namespaced_secret(namespace, kind.secret(name, namespace, uid, key_hex))
                log.info(f"{kind.what} created", extra={"group": f"{namespace}/{name}", "secret": sname})
                self._keys[cache] = kind.parse_key(key_hex)
                return self._keys[cache]
            except Exception as err2:
                if getattr(err2, "status", None) != 409:
                    raise
                secret = self._sanitize(self.core.read_namespaced_secret(sname, namespace))  # made meanwhile
        if not owned_by(secret, uid):
            raise RuntimeError(
                f"Secret {sname} is not owned by this BatchConsumerGroup: not used as its {kind.what} "
                "(delete it; the operator makes its own)"
            )
        raw = ((secret or {}).get("data") or {}).get(KEY_FIELD) or ""
        try:
            key = kind.parse_key(base64.b64decode(raw))
        except ValueError:
            raise RuntimeError(f"Secret {sname} holds no valid {kind.what} (field {KEY_FIELD!r})") from None
        self._keys[cache] = key
        return key

    def key_id(self, namespace: str, name: str, uid: str) -> str:
        """The fingerprint of the CR's key (its kind's ``key_id``)."""
        if self.kind.key_id is None:
            raise TypeError(f"a {self.kind.what} has no key id")
        return self.kind.key_id(self.key(namespace, name, uid))
