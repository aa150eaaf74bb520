"""The compact encodings of the operator's memory in the CR status, one line where ``kubectl describe``
would otherwise print an object per field: the estimator's per-partition memory, the scaler's
recommendation history, a drain's ranges, sub-ranges and finished-drain history lines; each
``*_to_status``/``format_*`` has its parser, and the parsers also read the older, longer forms.
Numbers round-trip exactly (an operator restarted from its status resumes where it was), except the
estimator's rates, written to 0.001 records/s (``RATE_DECIMALS``): the line is also the status's
per-partition view, and a restart resumes from the rounded rates."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .status import format_time, parse_time

_EST_KEYS = {"produce_rate": "produceRate", "consume_rate": "consumeRate", "lost_through": "lostThrough"}


def _samples_to_str(samples: Iterable[Any], base: float) -> str:
    return " ".join(f"{float(t) - base:.3f}:{int(v)}" for t, v in samples)


def _samples_from(value: Any, base: float | None) -> list[list[float]]:
    if value is None:
        return []
    if isinstance(value, str):
        out = []
        for item in value.split():
            off, _, v = item.partition(":")
            if base is None or not v:
                raise ValueError(f"malformed samples {value!r}")
            out.append([base + float(off), int(v)])
        return out
    return [[float(t), int(v)] for t, v in value]  # the old form: [[time, value], ...]


def _num(x: Any) -> str:
    """A number for a one-line status field: ints as ints, floats by repr (round-trips exactly)."""
    if isinstance(x, bool):
        raise ValueError(f"not a number: {x!r}")
    if isinstance(x, int):
        return str(x)
    f = float(x)
    return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)


def _parse_num(s: str) -> int | float:
    return int(s) if s.lstrip("-").isdigit() else float(s)


# one partition of the estimator's memory on one line, in this key order; ints stay ints
_EST_LINE = (("committed", "committed", int), ("end", "end", int), ("low", "low", int), ("lag", "lag", int),
             ("produce_rate", "produceRate", float), ("consume_rate", "consumeRate", float),
             ("samples", "samples", int), ("lost_through", "lostThrough", int))


RATE_DECIMALS = 3  # produceRate/consumeRate in the status: records/s to 0.001 (the estimator resumes from them)
# the partition's oldest unprocessed record's age (an observation, not memory: not read back)
AGE_KEY = "oldestAgeSeconds"


def _rate(x: Any) -> str:
    return _num(round(float(x), RATE_DECIMALS))


def _estimate_to_line(p: Mapping[str, Any], base: float, age: float | None = None) -> str:
    """``PartitionEstimate`` (asdict) -> "committed=6737 end=6737 low=0 lag=0 produceRate=9.85
    consumeRate=22.776 samples=34 window=-120.001:1785 0.000:6737" (rates rounded to
    ``RATE_DECIMALS``; ``oldestAgeSeconds=12.3`` after ``lag`` when the partition has a waiting record)."""
    kv = []
    for k, name, typ in _EST_LINE:
        if p.get(k) is None:
            continue
        kv.append(f"{name}={_rate(p[k]) if typ is float else _num(p[k])}")
        if name == "lag" and age is not None:
            kv.append(f"{AGE_KEY}={_num(round(float(age), 1))}")
    return " ".join(kv + ["window=" + _samples_to_str(p.get("window") or (), base)]).rstrip()


def _split_line(line: str) -> tuple[list[tuple[str, str]], list[str]]:
    """An estimator line -> its ``name=value`` fields before ``window=`` and the window's tokens.
    Raises ValueError on a token of neither kind."""
    fields: list[tuple[str, str]] = []
    window: list[str] = []
    in_window = False
    for tok in line.split():
        name, eq, v = tok.partition("=")
        if eq and name == "window":
            in_window = True
            window.extend([v] if v else [])
        elif eq and not in_window:
            fields.append((name, v))
        elif in_window and not eq:
            window.append(tok)
        else:
            raise ValueError(f"malformed estimator line {line!r}")
    return fields, window


def _estimate_from_line(line: str, base: float, partition: str) -> dict[str, Any]:
    kinds = {name: (k, typ) for k, name, typ in _EST_LINE}
    out: dict[str, Any] = {"committed": None, "lost_through": None}
    fields, window = _split_line(line)
    for name, v in fields:
        if name == AGE_KEY:
            float(v)  # validated; an observation of the cycle that wrote it, not the estimator's memory
            continue
        k, typ = kinds.get(name, (name, _parse_num))
        out[k] = typ(v)
    out["partition"] = int(partition)
    out["window"] = _samples_from(" ".join(window), base)
    return out


def estimator_to_status(d: Mapping[str, Any], ages: Mapping[int, float] | None = None) -> dict[str, Any]:
    """``EstimatorState.to_dict()`` -> ``status.estimator``: each partition's memory on one line
    (``kubectl describe`` shows one line per partition); this is also the status's per-partition
    view (offsets, lag, rates; ``ages``: the oldest waiting record's age of lagging partitions). The status is written with a JSON merge
    patch, which merges nested objects: a string replaces a partition object of an older operator
    whole, and the old top-level ``atS`` is sent as null (deleted)."""
    at = float(d["atS"])
    ages = ages or {}
    parts = {str(k): _estimate_to_line(dict(p), at, ages.get(int(k))) for k, p in dict(d.get("partitions") or {}).items()}
    # capacityPerReplica and dataLossRecords are status.capacityPerReplica / status.dataLossRecords
    # (one fact, one place): sent as null, so an older operator's copies here are deleted;
    # step_memory_from_status reads them back from the top level
    return {"at": format_time(at), "atS": None, "capacityPerReplica": None, "dataLossRecords": None,
            "resets": d.get("resets", 0), "partitions": parts}


def estimator_from_status(d: Mapping[str, Any]) -> dict[str, Any]:
    """``status.estimator`` (this form or an older one) -> the dict ``EstimatorState.from_dict`` reads.
    Raises ValueError on a malformed value (the caller then starts fresh)."""
    # a null field is not stored (the merge patch deletes it): `committed` of a partition the group
    # has not committed yet comes back missing, and EstimatorState.from_dict needs the key
    if "at" not in d:  # written before times were strings: float atS, lists
        return {**d, "partitions": {str(k): {"committed": None, **dict(p)}
                                    for k, p in dict(d.get("partitions") or {}).items()}}
    try:
        at = parse_time(d["at"])
        if at is None:
            raise ValueError("no time")
        back = {v: k for k, v in _EST_KEYS.items()}
        parts = {}
        for k, p in dict(d.get("partitions") or {}).items():
            if isinstance(p, str):  # one line per partition (this operator)
                parts[str(k)] = _estimate_from_line(p, at, str(k))
                continue
            # an object per partition (an operator before the one-line form); null-valued keys
            # skipped: the old-form keys sent as null must not shadow the new ones
            q = {"committed": None, **{back.get(n, n): v for n, v in dict(p).items()
                                       if n != "window" and v is not None}}
            q["window"] = _samples_from(p.get("window"), at)
            parts[str(k)] = q
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed status.estimator: {exc}") from exc
    # capacityPerReplica/dataLossRecords: only an older operator's copies (this one keeps them at
    # the top level; step_memory_from_status puts those in)
    return {"atS": at, "capacityPerReplica": d.get("capacityPerReplica"),
            "dataLossRecords": d.get("dataLossRecords") or 0, "resets": d.get("resets", 0), "partitions": parts}


def partitions_view(status: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The per-partition view of a status (``status.estimator.partitions``, either form) as dicts
    {partition, committed, end, low, lag, produceRate, consumeRate[, oldestAgeSeconds]}, by
    partition; [] when absent or unreadable. For readers (tests, the demo), not the estimator."""
    est = (status or {}).get("estimator") or {}
    out = []
    try:
        for k, raw in dict(est.get("partitions") or {}).items():
            if isinstance(raw, str):
                row: dict[str, Any] = {"partition": int(k), "committed": None}
                row.update({n: _parse_num(v) for n, v in _split_line(raw)[0]})
            else:
                row = {"partition": int(k), "committed": None, **{n: v for n, v in dict(raw).items() if n != "window"}}
                row.update({_EST_KEYS.get(n, n): v for n, v in dict(raw).items() if n in _EST_KEYS})
            out.append(row)
    except (TypeError, ValueError):
        return []
    return sorted(out, key=lambda r: r["partition"])


def estimator_time(d: Mapping[str, Any] | None) -> float:
    """When ``status.estimator`` (either form) was computed; 0 if absent or unreadable."""
    d = d or {}
    try:
        return parse_time(d.get("at", d.get("atS"))) or 0.0
    except ValueError:
        return 0.0


def scaling_history_to_status(d: Mapping[str, Any]) -> dict[str, Any]:
    """``ScalingHistory.to_dict()`` -> ``status.scalingHistory`` (recommendations relative to the newest)."""
    recs = list(d.get("recommendations") or ())
    base = max((float(t) for t, _ in recs), default=None)
    return {"lastScaleTime": format_time(d.get("lastScaleS")), "lastScaleS": None,  # null: merge patch
            "recommendationsAt": format_time(base),
            "recommendations": _samples_to_str(recs, base) if base is not None else ""}


def scaling_history_from_status(d: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``status.scalingHistory`` (this form or the old one) -> the dict ``ScalingHistory.from_dict``
    reads; a malformed value gives None (an empty history, as ``from_dict`` does)."""
    if not d:
        return None
    if isinstance(d.get("recommendations"), list) or ("lastScaleS" in d and "recommendationsAt" not in d):
        return dict(d)  # written before times were strings
    try:
        base = parse_time(d.get("recommendationsAt"))
        return {"recommendations": _samples_from(d.get("recommendations") or None, base),
                "lastScaleS": parse_time(d.get("lastScaleTime"))}
    except (TypeError, ValueError):
        return None


# the estimator's facts the status keeps once, at the top level (not inside status.estimator)
ESTIMATOR_TOP_LEVEL = ("capacityPerReplica", "dataLossRecords")


def step_memory_from_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` with ``estimator`` and ``scalingHistory`` in the form ``StepState.from_status``
    reads (an unreadable estimator is dropped: the step then starts fresh). The estimator's
    capacity and data-loss count come from ``status.capacityPerReplica`` / ``status.dataLossRecords``
    (an older operator's copies inside ``status.estimator`` are used only when those are absent)."""
    out = dict(status)
    if status.get("estimator"):
        try:
            est = estimator_from_status(status["estimator"])
            for k in ESTIMATOR_TOP_LEVEL:
                if status.get(k) is not None:
                    est[k] = status[k]
            out["estimator"] = est
        except ValueError:
            out["estimator"] = None
    out["scalingHistory"] = scaling_history_from_status(status.get("scalingHistory"))
    return out


# --- status.drain in a few lines -------------------------------------------------------------------
# The hand-off (lagpilot.decide.handoff DrainStatus.to_dict/from_dict) keeps its ranges, sub-ranges and past
# drains one per line, so `kubectl describe` shows a drain in ~20 lines, not one line per field of
# every range. Each parser also takes the object form an operator before this one wrote.

_RANGE = re.compile(r"^p(\d+)\[(\?|\d+)\.\.(\d+)\)(?:x(\d+))?$")
_SUB = re.compile(r"^p(\d+)#(\d+) \[(\d+)\.\.(\d+)\) next=(\d+) records=(\d+)$")
_HISTORY = re.compile(r"^drain (\d+) (\w+) \((\w*)\): (.*?); (\d+)/(\d+) records"
                      r"(?: in (-?[0-9.e+-]+) s)?(?:, pause (-?[0-9.e+-]+) s)?$")


def format_ranges_line(ranges: Iterable[Mapping[str, Any]], tasks: bool = True) -> str:
    """Ranges on one line, ``p0[400..6300)x4 p2[?..75)``: partition, [start, split) (``?``: start
    not fixed yet), ``xN`` the Spark tasks planned for it (when known and ``tasks``)."""
    out = []
    for r in ranges:
        start = "?" if r.get("start") is None else int(r["start"])
        n = f"x{int(r['tasks'])}" if tasks and r.get("tasks") is not None else ""
        out.append(f"p{int(r['partition'])}[{start}..{int(r['split'])}){n}")
    return " ".join(out)


def parse_ranges(raw: Any) -> list[dict[str, Any]]:
    """``format_ranges_line`` (or a list of {partition, start, split[, tasks]} objects) -> dicts
    {partition, start, split} plus ``tasks`` where recorded. Raises ValueError when malformed."""
    if not raw:
        return []
    if isinstance(raw, str):
        out = []
        for item in raw.split():
            m = _RANGE.match(item)
            if m is None:
                raise ValueError(f"malformed range {item!r} in {raw!r}")
            r: dict[str, Any] = {"partition": int(m[1]), "start": None if m[2] == "?" else int(m[2]),
                                 "split": int(m[3])}
            if m[4] is not None:
                r["tasks"] = int(m[4])
            out.append(r)
        return out
    out = []
    for x in raw:
        r = {"partition": int(x["partition"]), "start": None if x.get("start") is None else int(x["start"]),
             "split": int(x["split"])}
        if x.get("tasks") is not None:
            r["tasks"] = int(x["tasks"])
        out.append(r)
    return out


def format_sub_range(s: Mapping[str, Any]) -> str:
    """One drain sub-range and its progress: ``p0#1 [5455..10310) next=7000 records=1545`` (partition
    0, index 1, offsets [start, end), the next offset to process, records done)."""
    return (f"p{int(s['partition'])}#{int(s['index'])} [{int(s['start'])}..{int(s['end'])}) "
            f"next={int(s['next'])} records={int(s['records'])}")


def parse_sub_range(raw: Any) -> dict[str, int]:
    """``format_sub_range`` (or the object form) -> {partition, index, start, end, next, records}."""
    if isinstance(raw, str):
        m = _SUB.match(raw.strip())
        if m is None:
            raise ValueError(f"malformed sub-range {raw!r}")
        return dict(zip(("partition", "index", "start", "end", "next", "records"), map(int, m.groups())))
    return {"partition": int(raw["partition"]), "index": int(raw["index"]), "start": int(raw["start"]),
            "end": int(raw["end"]), "next": int(raw.get("next", raw["start"])), "records": int(raw.get("records", 0))}


def format_history_entry(h: Mapping[str, Any]) -> str:
    """A finished drain on one line: ``drain 3 Verified (AllRangesDone): p0[400..6300) p2[0..75);
    5975/5975 records in 41.5 s, pause 0 s`` (id, phase, reason, ranges without task counts,
    records done/total, run seconds and the live group's pause when known). An entry that could not
    be read (``parse_history_entry(..., strict=False)``) is written back as it was."""
    if "id" not in h and isinstance(h.get("line"), str):
        return h["line"]
    ranges = format_ranges_line(parse_ranges(h.get("ranges")), tasks=False) or "none"
    line = (f"drain {int(h['id'])} {h.get('phase') or 'Unknown'} ({h.get('reason') or ''}): {ranges}; "
            f"{int(h.get('recordsDone') or 0)}/{int(h.get('recordsTotal') or 0)} records")
    if h.get("seconds") is not None:
        line += f" in {_num(h['seconds'])} s"
    if h.get("pauseSeconds") is not None:
        line += f", pause {_num(h['pauseSeconds'])} s"
    return line


def parse_history_entry(raw: Any, strict: bool = True) -> dict[str, Any]:
    """``format_history_entry`` (or the object form) -> {id, phase, reason, ranges (one line, as
    ``ranges_of`` reads), recordsDone, recordsTotal, seconds, pauseSeconds} (absent: None).
    Malformed: ValueError, or with ``strict=False`` {"line": raw} (a past drain's summary is for
    people: an edited line must not make the current drain unreadable)."""
    if not strict:
        try:
            return parse_history_entry(raw)
        except (KeyError, TypeError, ValueError):
            return {"line": str(raw)}
    if not isinstance(raw, str):
        out = dict(raw)
        if isinstance(out.get("ranges"), list):
            out["ranges"] = format_ranges_line(parse_ranges(out["ranges"]), tasks=False)
        for k, v in list(out.items()):
            if k.endswith("At") and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = format_time(v)
        return out
    m = _HISTORY.match(raw.strip())
    if m is None:
        raise ValueError(f"malformed drain history entry {raw!r}")
    ranges = "" if m[4] == "none" else m[4]
    parse_ranges(ranges)  # validates
    return {"id": int(m[1]), "phase": m[2], "reason": m[3], "ranges": ranges,
            "recordsDone": int(m[5]), "recordsTotal": int(m[6]),
            "seconds": None if m[7] is None else _parse_num(m[7]),
            "pauseSeconds": None if m[8] is None else _parse_num(m[8])}
