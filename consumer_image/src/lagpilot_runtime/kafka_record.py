"""A confluent_kafka Message as a :class:`~lagpilot_runtime.handler.Record`, read lazily."""

from __future__ import annotations

from typing import Any

from .handler import Record

_FIELDS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp_ms")


class KafkaRecord(Record):
    """A :class:`Record` read from its confluent_kafka Message on first field access.

    Building seven-field objects for every record costs ~1 µs each, as much as the rest of the
    loop's per-record work; a handler that forwards a batch or only looks at some records should
    not pay it. The first access to any field materialises all of them (then the message is
    dropped); equality, hashing, ``repr``, ``dataclasses.replace``/``asdict`` and pickling behave
    as for a plain Record.
    """

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        msg = d.pop("_msg", None)
        if msg is None:
            raise AttributeError(name)
        ts_type, ts = msg.timestamp()
        headers = msg.headers()
        d.update(
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            key=msg.key(),
            value=msg.value(),
            headers=[(k, v if v is not None else b"") for k, v in headers] if headers else [],
            timestamp_ms=ts if ts_type != 0 else None,
        )
        if name not in d:
            raise AttributeError(name)
        return d[name]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    __hash__ = Record.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Record, tuple(getattr(self, f) for f in _FIELDS))


_new = object.__new__


def to_record(msg: Any) -> Record:
    """A confluent_kafka.Message → Record (lazy; bytes untouched, no decoding, so it cannot fail)."""
    r = _new(KafkaRecord)
    r.__dict__["_msg"] = msg
    return r
