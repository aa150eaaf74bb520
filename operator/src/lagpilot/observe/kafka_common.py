"""What every Kafka module of the operator shares: request counting, the user-facing errors and
their classification, bounded locks, librdkafka's log lines (thinned), closing consumers quietly."""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class _RepeatFilter(logging.Filter):
    """librdkafka repeats a failing connection's line on every retry (every 1-5 s, per broker
    thread): let each distinct line through once a minute (digits ignored when comparing)."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < self.every_s:
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
        return True


_KAFKA_LOG = logging.getLogger("lagpilot.kafka")
_KAFKA_LOG.addFilter(_RepeatFilter())

# Kafka requests the operator issues, by kind (`describe_topics`, `list_offsets`, `offset_fetch`,
# `offsets_topic_fetch`, `admin_other`; `snapshot_fallback` counts cycles, not requests):
# `lagpilot.run` points this at the `lagpilot_kafka_requests_total` counter.
RequestCounter = Callable[[str, int], None]
_request_counter: RequestCounter | None = None


def set_request_counter(counter: RequestCounter | None) -> None:
    global _request_counter
    _request_counter = counter


def _count(kind: str, n: int = 1) -> None:
    c = _request_counter
    if c is not None and n > 0:
        try:
            c(kind, n)
        except Exception:  # noqa: BLE001 - counting must never fail a cycle
            pass


class ObserveError(Exception):
    """An observation failed for a reason the user can act on; `reason` is CamelCase."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}")


class SecretError(ObserveError):
    """The Kafka credentials Secret is missing or lacks a key (values are never echoed)."""


def _timed_lock(lock: threading.Lock, timeout_s: float, what: str) -> _Held:
    """Acquire `lock` within `timeout_s` or raise TimeoutError: a stuck holder never blocks a cycle forever."""
    if not lock.acquire(timeout=max(0.0, timeout_s)):
        raise TimeoutError(f"{what}: lock not free within {timeout_s:.1f}s")
    return _Held(lock)


class _Held:
    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


def close_quietly(consumer: Any) -> None:
    if consumer is None:
        return
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing a broken consumer: nothing to do
        pass


_CONSUMER_ONLY_DROPPED = ("client.id", "error_cb")  # consumer errors surface in consume()/committed()


def consumer_base(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster's connection settings for a Consumer (the admin client's callbacks dropped)."""
    return {k: v for k, v in conf.items() if k not in _CONSUMER_ONLY_DROPPED}


class NoPartitions(Exception):
    """DescribeTopics answered a topic without partitions."""


class _RecentErrors(Protocol):
    def recent_error(self, within_s: float = 60.0) -> str | None: ...


# --- error classification ------------------------------------------------------------------------

_UNREACHABLE = {
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
    "_RESOLVE",
    "_DESTROY",
    "NETWORK_EXCEPTION",
    "BROKER_NOT_AVAILABLE",
    "_SSL",
}
_AUTHN = {"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE", "UNSUPPORTED_SASL_MECHANISM"}
_AUTHZ = {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"}
_MISSING = {"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"}
_TIMEOUT = {"_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"}


def _error_name(err: Any) -> str:
    """KafkaError / KafkaException → its code name (`_TRANSPORT`, `UNKNOWN_TOPIC_OR_PART`, ...)."""
    inner = err.args[0] if getattr(err, "args", None) and hasattr(err.args[0], "name") else err
    try:
        return str(inner.name())
    except Exception:  # noqa: BLE001 - not a KafkaError
        return type(err).__name__


def classify(err: BaseException, handle: _RecentErrors | None, topic: str, bootstrap: str) -> ObserveError:
    """Map a failed call to a user-facing reason. A timeout is reported as the recent client error
    behind it (broker down, authentication) when the error callback saw one."""
    if isinstance(err, ObserveError):
        return err
    name = _error_name(err)
    if name in _TIMEOUT or isinstance(err, (TimeoutError, concurrent.futures.TimeoutError)):
        recent = handle.recent_error() if handle else None
        name = recent or "_TIMED_OUT"
        if name in _TIMEOUT:
            return ObserveError(
                "KafkaTimeout",
                f"no answer from the Kafka cluster at {bootstrap} in time; "
                "is it reachable, and is spec.kafka.securityProtocol right?",
            )
    if name in _MISSING:
        return ObserveError("TopicNotFound", f"topic {topic!r} does not exist on {bootstrap}")
    if name in _AUTHN:
        token_endpoint = getattr(handle, "token_endpoint", None)
        if token_endpoint:
            # OIDC client credentials: librdkafka reports a refusal at the token endpoint and one at
            # the broker alike, so both places are named (the URL is the CR's, never a credential)
            return ObserveError(
                "AuthenticationFailed",
                (
                    f"SASL OAUTHBEARER authentication failed: the token endpoint {token_endpoint} "
                    "(spec.kafka.oauthbearer.tokenEndpointUrl) refused the client credentials from "
                    f"spec.kafka.secretRef, or the Kafka cluster at {bootstrap} refused the token it issued "
                    "(expired, or not for this cluster: issuer, audience or signature)"
                ),
            )
        return ObserveError(
            "AuthenticationFailed",
            f"the Kafka cluster at {bootstrap} rejected the credentials from spec.kafka.secretRef",
        )
    if name in _AUTHZ:
        return ObserveError(
            "AuthorizationFailed",
            f"the Kafka principal may not describe topic {topic!r} or its group on {bootstrap} ({name})",
        )
    if name in _UNREACHABLE:
        return ObserveError(
            "BrokerUnreachable", f"cannot connect to the Kafka cluster at {bootstrap} ({name})"
        )
    return ObserveError("KafkaError", f"Kafka request to {bootstrap} failed ({name})")


def as_exception(err: Any) -> Exception:
    from confluent_kafka import KafkaException

    return KafkaException(err)
