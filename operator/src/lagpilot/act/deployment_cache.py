"""The consumer Deployments as a watch delivers them, so a control-loop cycle reads its Deployment
from memory instead of one GET per CR per cycle (docs/operator.md "Scale").

- `DeploymentCache.watched(type, body)`: fed by kopf's watch of the operator's Deployments
  (handlers.deployment_seen, label `app.kubernetes.io/managed-by=lagpilot`, selected server-side:
  other Deployments never reach the operator): the initial listing and every change. A watched entry is trusted until the watch replaces or deletes it.
- `put(obj)`: what an apply answered (or a fallback GET read): trusted for `provisional_s` (5 s)
  only, unless the watch delivers that version (or a newer one) meanwhile; so a dead watch (no
  list/watch permission, a broken stream) costs a GET per cycle again, never a stale answer.
- Never goes back: an entry older (resourceVersion) than the one held is ignored, whichever comes
  first (the apply's answer or the watch's event).
- `CachingKube`: the Kube of reconcile/deps.py with `get_deployment` answered from the cache (a miss is a
  GET, whose answer is `put`) and `apply_deployment` putting the apply's answer; anything else is
  the wrapped KubeApi's.

Only `metadata` (name, namespace, resourceVersion, generation), `spec.replicas` and `status` are
kept (what the cycle reads): the cache of 200 Deployments stays small. Thread-safe (cycles run in
threads, the watch in the event loop). Time (`monotonic`) is injected for tests.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

# the label of every Deployment the operator manages (deployment.labels): the watch's server-side
# selector (settings.configure) and the handler's filter (handlers.deployment_seen)
MANAGED_BY_LABEL, MANAGED_BY = "app.kubernetes.io/managed-by", "lagpilot"
WATCH_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def _rv(obj: Mapping[str, Any]) -> int | None:
    raw: Any = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None  # opaque (not an etcd revision): ordering unknown


def _slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion", "generation")},
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas")},
        "status": copy.deepcopy(dict(obj.get("status") or {})),
    }


class DeploymentCache:
    def __init__(self, provisional_s: float = 5.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.provisional_s = provisional_s
        self._mono = monotonic
        self._lock = threading.Lock()
        # (namespace, name) -> (slim object, expires at (monotonic) or None: from the watch)
        self._items: dict[tuple[str, str], tuple[dict[str, Any], float | None]] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def _older(self, key: tuple[str, str], obj: Mapping[str, Any], or_equal: bool) -> bool:
        held = self._items.get(key)
        if held is None:
            return False
        a, b = _rv(obj), _rv(held[0])
        if a is None or b is None:
            return False
        return a <= b if or_equal else a < b

    def watched(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """One watch event (type None: the initial listing)."""
        key = self._key(body)
        with self._lock:
            if event_type == "DELETED":
                if not self._older(key, body, or_equal=False):
                    self._items.pop(key, None)
                return
            if not self._older(key, body, or_equal=False):
                self._items[key] = (_slim(body), None)

    def put(self, obj: Mapping[str, Any]) -> None:
        """An answer of our own request (apply, GET): trusted for `provisional_s`."""
        key = self._key(obj)
        with self._lock:
            if not self._older(key, obj, or_equal=True):
                self._items[key] = (_slim(obj), self._mono() + self.provisional_s)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment if the cache can answer for it, else None (then ask the API server)."""
        with self._lock:
            held = self._items.get((namespace, name))
            if held is None or (held[1] is not None and self._mono() >= held[1]):
                self.misses += 1
                return None
            self.hits += 1
            return copy.deepcopy(held[0])

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class CachingKube:
    """reconcile/deps.Kube over a KubeApi: the Deployment from the cache first (see the module doc)."""

    def __init__(self, kube: Any, cache: DeploymentCache) -> None:
        self._kube = kube
        self.cache = cache

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        got = self.cache.get(namespace, name)
        if got is not None:
            return got
        dep: dict[str, Any] | None = self._kube.get_deployment(namespace, name)
        if dep is not None:
            self.cache.put(dep)
        return dep

    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]:
        resp: dict[str, Any] = self._kube.apply_deployment(manifest)
        if isinstance(resp, Mapping) and resp.get("metadata"):
            self.cache.put(resp)
        return resp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)
