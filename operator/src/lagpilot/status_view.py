"""The one reader of a BatchConsumerGroup's status for the kubectl plugin (`kubectl lagpilot`).

Every field the plugin shows is read here, nowhere else: when the status changes shape (issue 26:
structured lists instead of encoded one-line strings), only this module changes. It decodes the
encoded parts through lagpilot.decide.status_codec today. Pure: dicts in, plain values out.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from lagpilot.decide import kstatus, status_codec


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
    ranges: list[dict[str, Any]]
    sub_ranges: list[dict[str, int]]
    records_done: int | None
    records_total: int | None
    attempt: Any


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)) else None


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
        "namespace": namespace(obj), "name": name(obj), "mode": mode(obj), "paused": paused(obj),
        "ready": condition(obj, "Ready").get("status", "Unknown"),
        "health": health(obj),
        "replicas": st.get("replicas"), "desiredReplicas": st.get("desiredReplicas"),
        "minReplicas": sc.get("minReplicas", 1), "maxReplicas": sc.get("maxReplicas", 10),
        "partitions": st.get("partitions"),
        "totalLag": st.get("totalLag"), "maxPartitionLag": st.get("maxPartitionLag"),
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
    rows = []
    for r in status_codec.partitions_view(_status(obj)):
        rows.append(PartitionRow(int(r["partition"]), r.get("lag"), _num(r.get("oldestAgeSeconds")),
                                 _num(r.get("produceRate")), _num(r.get("consumeRate")), r.get("committed"), r.get("end")))
    return rows


def decision(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The last decision and the numbers it used (`why`): the Scaling and CatchUpAtRisk conditions,
    the figures of the estimate, the spec's policy settings, the recommendation in mode Recommend."""
    sc = spec(obj).get("scaling") or {}
    beh = sc.get("behavior") or {}
    scaling = condition(obj, "Scaling")
    risk = condition(obj, "CatchUpAtRisk")
    return {
        "reason": scaling.get("reason"), "message": scaling.get("message"),
        "scaling": scaling.get("status"), "decidedAt": scaling.get("lastTransitionTime"),
        "catchUpAtRisk": risk.get("status"), "catchUpReason": risk.get("reason"), "catchUpMessage": risk.get("message"),
        "inputs": {k: summary(obj)[k] for k in ("replicas", "desiredReplicas", "partitions", "totalLag", "maxPartitionLag",
                                                "produceRate", "capacityPerReplica", "projectedCatchUpSeconds",
                                                "slaSeconds", "lastScaleTime")},
        "policy": {"minReplicas": sc.get("minReplicas", 1), "maxReplicas": sc.get("maxReplicas", 10),
                   "tolerance": sc.get("tolerance", 0.1),
                   "scaleUpStabilizationSeconds": (beh.get("scaleUp") or {}).get("stabilizationWindowSeconds", 0),
                   "scaleDownStabilizationSeconds": (beh.get("scaleDown") or {}).get("stabilizationWindowSeconds", 300),
                   "drainEnabled": (spec(obj).get("drain") or {}).get("enabled", True)},
        "recommendation": recommendation(obj),
    }


def recommendation(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    rec = _status(obj).get("recommendation")
    return dict(rec) if rec else None


def drain(obj: Mapping[str, Any]) -> DrainView | None:
    d = _status(obj).get("drain")
    if not d:
        return None
    subs = []
    for raw in d.get("subRanges") or []:
        try:
            subs.append(status_codec.parse_sub_range(raw))
        except (ValueError, KeyError, TypeError):
            continue
    return DrainView(d.get("id"), str(d.get("phase") or ""), str(d.get("reason") or ""), str(d.get("message") or ""),
                     status_codec.parse_ranges(d.get("ranges")), subs, d.get("recordsDone"), d.get("recordsTotal"),
                     d.get("attempt"))


def drain_history(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Past drains, newest last, each with at least `line` (the one-line summary)."""
    out = []
    for raw in (_status(obj).get("drain") or {}).get("history") or []:
        entry = status_codec.parse_history_entry(raw, strict=False)
        if "line" not in entry:
            entry["line"] = raw if isinstance(raw, str) else status_codec.format_history_entry(raw)
        out.append(entry)
    return out


def simulation_inputs(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The live figures `simulate` starts from: lag and rate per partition, capacity, replicas."""
    rows = partitions(obj)
    s = summary(obj)
    return {"partitionLag": {r.partition: int(r.lag or 0) for r in rows},
            "partitionRate": {r.partition: float(r.produce_rate or 0.0) for r in rows},
            "produceRate": s["produceRate"] or sum(float(r.produce_rate or 0.0) for r in rows),
            "capacityPerReplica": s["capacityPerReplica"], "replicas": s["replicas"], "partitions": s["partitions"] or len(rows)}
