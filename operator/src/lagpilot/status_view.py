"""The one reader of a BatchConsumerGroup's status for the kubectl plugin (`kubectl lagpilot`).

Every field the plugin shows is read here, nowhere else: when the status changes shape, only this
module changes. It reads the structured status (lagpilot.model.status: ``partitionStatuses``,
``drain.ranges``/``subRanges``/``history`` as lists of objects) as plain dicts, tolerating a
missing or malformed entry (skipped) rather than failing the whole view. Pure: dicts in, plain
values out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from lagpilot.decide import kstatus


@dataclasses.dataclass(frozen=True)
class PartitionRow:
    partition: int
    lag: int | None
    oldest_age_s: float | None  # time lag: age of the oldest record not yet processed
    produce_rate: float | None
    consume_rate: float | None
    committed: int | None
    end: int | None


@dataclasses.dataclass(frozen=True)
class DrainView:
    id: Any
    phase: str
    reason: str
    message: str
    ranges: list[
        dict[str, Any]
    ]  # {partition, start (None until acknowledged), end (the split offset), tasks}
    sub_ranges: list[dict[str, int]]  # {partition, index, start, end, next, records}
    records_done: int | None
    records_total: int | None
    attempt: Any


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _num(x: Any) -> float | None:
    return (
        float(x)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))
        else None
    )


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) else None


def _objects(raw: Any) -> list[Mapping[str, Any]]:
    """The objects of a status list (anything else in it, or a non-list, is skipped)."""
    return [x for x in raw if isinstance(x, Mapping)] if isinstance(raw, list) else []


def _ranges(raw: Any) -> list[dict[str, Any]]:
    out = []
    for r in _objects(raw):
        if _int(r.get("partition")) is None or _int(r.get("end")) is None:
            continue
        row: dict[str, Any] = {"partition": r["partition"], "start": _int(r.get("start")), "end": r["end"]}
        if _int(r.get("tasks")) is not None:
            row["tasks"] = r["tasks"]
        out.append(row)
    return sorted(out, key=lambda r: r["partition"])


def _ranges_line(ranges: list[dict[str, Any]]) -> str:
    return " ".join(
        f"p{r['partition']}[{'?' if r['start'] is None else r['start']}..{r['end']})" for r in ranges
    )


def _secs(x: Any) -> str:
    """Seconds on a history line: whole numbers without a fraction, others as recorded."""
    v = _num(x)
    return "?" if v is None else str(int(v)) if v.is_integer() else repr(v)


def name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace", ""))


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def mode(obj: Mapping[str, Any]) -> str:
    return str(spec(obj).get("mode") or "Act")


def paused(obj: Mapping[str, Any]) -> bool:
    return bool(spec(obj).get("paused"))


def conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(_status(obj).get("conditions") or [])


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in conditions(obj) if c.get("type") == type_), {})


def health(obj: Mapping[str, Any]) -> str:
    """kstatus' verdict (Current, InProgress, Failed, Terminating): how Flux judges the group."""
    return kstatus.verdict(obj)[0]


def summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The group at a glance: the figures `top` and `status` print."""
    st = _status(obj)
    sc = spec(obj).get("scaling") or {}
    return {
        "namespace": namespace(obj),
        "name": name(obj),
        "mode": mode(obj),
        "paused": paused(obj),
        "ready": condition(obj, "Ready").get("status", "Unknown"),
        "health": health(obj),
        "replicas": st.get("replicas"),
        "desiredReplicas": st.get("desiredReplicas"),
        "minReplicas": sc.get("minReplicas", 1),
        "maxReplicas": sc.get("maxReplicas", 10),
        "partitions": st.get("partitions"),
        "totalLag": st.get("totalLag"),
        "maxPartitionLag": st.get("maxPartitionLag"),
        "produceRate": _num(st.get("produceRate")),
        "capacityPerReplica": _num(st.get("capacityPerReplica")),
        "projectedCatchUpSeconds": _num(st.get("projectedCatchUpSeconds")),
        "slaSeconds": _num(spec(obj).get("catchUpSLASeconds", 600)),
        "dataLossRecords": st.get("dataLossRecords"),
        "lastScaleTime": st.get("lastScaleTime"),
        "drainPhase": (st.get("drain") or {}).get("phase"),
        "observedGeneration": st.get("observedGeneration"),
        "generation": (obj.get("metadata") or {}).get("generation"),
    }


def partitions(obj: Mapping[str, Any]) -> list[PartitionRow]:
    """status.partitionStatuses by partition (an entry without a partition number is skipped)."""
    rows = []
    for r in _objects(_status(obj).get("partitionStatuses")):
        p = _int(r.get("partition"))
        if p is None:
            continue
        rows.append(
            PartitionRow(
                p,
                _int(r.get("lag", 0)),  # lag, low and the rates are left out while 0
                _num(r.get("oldestAgeSeconds")),
                _num(r.get("produceRate", 0.0)),
                _num(r.get("consumeRate", 0.0)),
                _int(r.get("committed")),
                _int(r.get("end")),
            )
        )
    return sorted(rows, key=lambda r: r.partition)


def decision(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The last decision and the numbers it used (`why`): the Scaling and CatchUpAtRisk conditions,
    the figures of the estimate, the spec's policy settings, the recommendation in mode Recommend."""
    sc = spec(obj).get("scaling") or {}
    beh = sc.get("behavior") or {}
    scaling = condition(obj, "Scaling")
    risk = condition(obj, "CatchUpAtRisk")
    return {
        "reason": scaling.get("reason"),
        "message": scaling.get("message"),
        "scaling": scaling.get("status"),
        "decidedAt": scaling.get("lastTransitionTime"),
        # abnormal-true: not listed while False (once the operator wrote its conditions)
        "catchUpAtRisk": risk.get("status") or ("False" if condition(obj, "Ready") else None),
        "catchUpReason": risk.get("reason"),
        "catchUpMessage": risk.get("message"),
        "inputs": {
            k: summary(obj)[k]
            for k in (
                "replicas",
                "desiredReplicas",
                "partitions",
                "totalLag",
                "maxPartitionLag",
                "produceRate",
                "capacityPerReplica",
                "projectedCatchUpSeconds",
                "slaSeconds",
                "lastScaleTime",
            )
        },
        "policy": {
            "minReplicas": sc.get("minReplicas", 1),
            "maxReplicas": sc.get("maxReplicas", 10),
            "tolerance": sc.get("tolerance", 0.1),
            "scaleUpStabilizationSeconds": (beh.get("scaleUp") or {}).get("stabilizationWindowSeconds", 0),
            "scaleDownStabilizationSeconds": (beh.get("scaleDown") or {}).get(
                "stabilizationWindowSeconds", 300
            ),
            "drainEnabled": (spec(obj).get("drain") or {}).get("enabled", True),
        },
        "recommendation": recommendation(obj),
    }


def recommendation(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    rec = _status(obj).get("recommendation")
    return dict(rec) if rec else None


_SUB_KEYS = ("partition", "index", "start", "end", "next", "records")


def _sub_range(x: Mapping[str, Any]) -> dict[str, Any]:
    """A stored sub-range with the fields the operator leaves out at their defaults filled in:
    ``next`` absent is ``start`` (nothing processed), ``records`` absent is 0."""
    return {"next": x.get("start"), "records": 0, **x}


def drain(obj: Mapping[str, Any]) -> DrainView | None:
    d = _status(obj).get("drain")
    if not d or not isinstance(d, Mapping):
        return None
    subs = [
        {k: int(x[k]) for k in _SUB_KEYS}
        for x in (_sub_range(y) for y in _objects(d.get("subRanges")))
        if all(_int(x.get(k)) is not None for k in _SUB_KEYS)
    ]
    return DrainView(
        d.get("id"),
        str(d.get("phase") or ""),
        str(d.get("reason") or ""),
        str(d.get("message") or ""),
        _ranges(d.get("ranges")),
        sorted(subs, key=lambda x: (x["partition"], x["index"])),
        d.get("recordsDone"),
        d.get("recordsTotal"),
        d.get("attempt"),
    )


def drain_history(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Past drains as recorded (status.drain.history), each with its ranges as one line
    (``p0[400..6300)``) and ``line``, the one-line summary: ``drain 3 Verified (AllRangesDone):
    p0[400..6300); 5975/5975 records in 41.5 s, pause 0 s``."""
    d = _status(obj).get("drain")
    out = []
    for h in _objects(d.get("history") if isinstance(d, Mapping) else None):
        entry = dict(h)
        entry["ranges"] = _ranges_line(_ranges(h.get("ranges")))
        if _int(h.get("rangesOmitted")):  # past the entry's bound (a busy drain's many splits)
            entry["ranges"] += f" (+{_int(h.get('rangesOmitted'))} earlier ranges not kept)"
        line = (
            f"drain {h.get('id', '?')} {h.get('phase') or 'Unknown'} ({h.get('reason') or ''}): "
            f"{entry['ranges'] or 'none'}; {_int(h.get('recordsDone')) or 0}/{_int(h.get('recordsTotal')) or 0} records"
        )
        if h.get("seconds") is not None:
            line += f" in {_secs(h['seconds'])} s"
        if h.get("pauseSeconds") is not None:
            line += f", pause {_secs(h['pauseSeconds'])} s"
        entry["line"] = line
        out.append(entry)
    return out


def simulation_inputs(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The live figures `simulate` starts from: lag and rate per partition, capacity, replicas."""
    rows = partitions(obj)
    s = summary(obj)
    return {
        "partitionLag": {r.partition: int(r.lag or 0) for r in rows},
        "partitionRate": {r.partition: float(r.produce_rate or 0.0) for r in rows},
        "produceRate": s["produceRate"] or sum(float(r.produce_rate or 0.0) for r in rows),
        "capacityPerReplica": s["capacityPerReplica"],
        "replicas": s["replicas"],
        "partitions": s["partitions"] or len(rows),
    }
