"""The topic's time retention, for the drain planner (issue 12 item 2): best effort, cached.

``retention.ms`` via DescribeConfigs, once per topic and cluster every ``TTL_S``; a failure or
``-1`` (infinite) is "unknown" (``None``) and the planner then ignores retention. ``retention.bytes``
is not turned into a time (it would need the partition's size and byte rate): a topic limited by
bytes only is treated as unknown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

TTL_S = 300.0
_cache: dict[tuple[str, str], tuple[float, float | None]] = {}
_lock = threading.Lock()


def retention_seconds(configs: Mapping[str, str | None]) -> float | None:
    """``retention.ms`` as seconds; None when absent, unparsable, or -1/0 (infinite / unknown). Pure."""
    raw = configs.get("retention.ms")
    try:
        ms = float(raw) if raw is not None else -1.0
    except (TypeError, ValueError):
        return None
    return ms / 1000.0 if ms > 0 else None


def describe(client: Any, topic: str, timeout_s: float) -> float | None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = client.describe_configs([res], request_timeout=timeout_s)[res].result(timeout=timeout_s)
    return retention_seconds({k: getattr(v, "value", None) for k, v in entries.items()})


def cached(handle: Any, topic: str, timeout_s: float, now: float | None = None) -> float | None:
    """The topic's retention in seconds from the cache, refreshed every TTL_S (never raises)."""
    now = time.monotonic() if now is None else now
    key = (str(getattr(handle, "bootstrap", "")), topic)
    with _lock:
        hit = _cache.get(key)
    if hit is not None and now - hit[0] < TTL_S:
        return hit[1]
    try:
        value = describe(handle.client, topic, min(timeout_s, 5.0))
    except Exception as err:  # noqa: BLE001 - best effort: unknown retention
        log.debug("describe topic configs failed", extra={"topic": topic, "error": str(err)})
        value = hit[1] if hit is not None else None
    with _lock:
        _cache[key] = (now, value)
    return value
