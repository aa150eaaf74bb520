"""The BatchConsumerGroup status as typed models (pydantic v2): the one declaration of its shape.

Lists of named sub-objects, each keyed (``partitionStatuses`` by ``partition``, ``drain.history`` by
``id``, ``conditions`` by ``type``), enums where a field takes a fixed set of values (the drain's
``phase``, its hand-off path, its runtime), times as RFC 3339 strings, so ``kubectl get bcg -o
jsonpath`` reaches every field and printer columns can show any of them.

``status_openapi_schema()`` gives the structural OpenAPI v3 schema of ``.status`` for the CRD (both
copies hold it; tests/unit/test_status_model.py checks they equal it). The operator builds plain
dicts (decide/ stays free of this package); the unit tests validate what it writes against
``BatchConsumerGroupStatus`` with unknown fields forbidden, as the API server would prune them.

The controller's memory (the estimator's rate windows, the scaler's recommendation history) is
not here: it lives in the ConfigMap ``<cr>-lagpilot-state`` the CR owns (docs/operator.md
"Memory").
"""

from __future__ import annotations

import enum
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

INT64: JsonDict = {"format": "int64"}
INT32: JsonDict = {"format": "int32"}
DATE_TIME: JsonDict = {"format": "date-time"}
NULLABLE: JsonDict = {"nullable": True}


def _list_map(*keys: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DrainPhase(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """The drain hand-off's phases: the one declaration (lagpilot.decide.handoff.Phase is this enum)."""

    PLANNED = "Planned"
    HANDED_OFF = "HandedOff"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    VERIFIED = "Verified"
    CANCELLED = "Cancelled"


class HandOffPath(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """How the owners handed a drain's ranges off (handoff.PATH_* are these values)."""

    CONSUMER_ACK = "ConsumerAck"
    EMPTY_GROUP = "EmptyGroup"
    QUIESCE = "Quiesce"


class DrainRuntime(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    WARM = "warm"
    COLD = "cold"


class Stall(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    NO_PROGRESS = "NoProgress"
    NO_RUNNING_POD = "NoRunningPod"


class DrainEndReason(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """Why a busy drain takes no further split and ends (``status.drain.reason`` of its final part,
    and the event's reason with the ``Drain`` prefix)."""

    # the capped group holds its partitions again: they are handed back (event DrainHandedBack)
    HANDING_BACK = "HandingBack"
    # its slots cannot hold the burst and a new drain's launch would hold more: it ends and the next
    # drain is planned with the slots the load needs (event DrainRollingOver; issue 25)
    ROLLING_OVER = "RollingOver"


class DrainHoldReason(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """Why an idle busy drain keeps its slots (``status.drain.reason`` during its hold, with
    ``idleSince`` set): every sub-range done, no next split wanted, the slots held for a new drain's
    start-up before the partitions are handed back (docs/drain.md "Busy drains")."""

    HOLDING_SLOTS = "HoldingSlots"


class ConditionType(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """Every condition type the operator writes, in the order `merge_conditions` lists them (the one
    declaration: decide/status.CONDITION_TYPES and decide/kstatus read it)."""

    READY = "Ready"
    SCALING = "Scaling"
    CATCH_UP_AT_RISK = "CatchUpAtRisk"
    DRAINING = "Draining"
    DEGRADED = "Degraded"
    RECONCILING = "Reconciling"  # kstatus (Flux, Argo CD)
    STALLED = "Stalled"  # kstatus
    DATA_LOSS = "DataLoss"
    DRAIN_STALLED = "DrainStalled"
    TERMINATING = "Terminating"
    SCALING_INEFFECTIVE = "ScalingIneffective"  # issue 25 item 4: a scale-up did not raise the throughput


# The abnormal-true types (True: something needs attention): listed while True or Unknown, absent
# while False (kstatus: "the absence of any conditions means everything is normal"; the API
# conventions allow it). Ready, Scaling and Draining (normal-true and state types) are always listed.
ABNORMAL_TRUE = frozenset(
    {
        ConditionType.CATCH_UP_AT_RISK.value,
        ConditionType.DEGRADED.value,
        ConditionType.RECONCILING.value,
        ConditionType.STALLED.value,
        ConditionType.DATA_LOSS.value,
        ConditionType.DRAIN_STALLED.value,
        ConditionType.TERMINATING.value,
        ConditionType.SCALING_INEFFECTIVE.value,
    }
)


class ScalingIneffectiveReason(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """Reasons of the ``ScalingIneffective`` condition (and of the decision that holds the count)."""

    # True: the last scale-up raised the throughput by < 10 % of the rise expected
    DOWNSTREAM_LIMITED = "DownstreamLimited"
    # False: no such scale-up (none judged ineffective, or the limit cleared)
    AS_EXPECTED = "AsExpected"


class DegradedReason(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    """Reasons of the ``Degraded`` condition declared here (the cycle's Kafka and Kubernetes causes are
    their error's reason)."""

    # the installed CRD lacks fields this operator writes or reads (decide/crd_check.py)
    CRD_OUTDATED = "CRDOutdated"


class StartUpSource(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    MEASURED = "Measured"
    DEFAULT = "Default"


class ConditionStatus(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class RecommendationSource(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    DEPLOYMENT = "Deployment"
    GROUP_MEMBERS = "GroupMembers"


class CapacitySource(str, enum.Enum):  # noqa: UP042 - str() and format() of the members as today
    COMMIT_METADATA = "CommitMetadata"
    COMMITTED_RATE = "CommittedRate"
    UNKNOWN = "Unknown"


def _int(description: str, fmt: JsonDict = INT64, **kw: Any) -> Any:
    return Field(description=description, json_schema_extra=fmt, **kw)


def _time(description: str) -> Any:
    return Field(None, description=f"{description} RFC 3339, milliseconds.", json_schema_extra=DATE_TIME)


class PartitionStatus(_Model):
    """One partition of the topic as last observed."""

    partition: int = _int("Partition number.", INT32)
    committed: int | None = _int(
        "The group's committed offset; absent before its first commit.", default=None
    )
    end: int = _int("Log-end offset.")
    low: int | None = _int(
        "Earliest offset still in the log (records below it were deleted by retention); absent: 0.",
        default=None,
    )
    lag: int | None = _int(
        "Records not yet committed: end - committed (from low when retention deleted some); absent: 0.",
        default=None,
    )
    oldest_age_seconds: float | None = Field(
        None,
        description="Age of the oldest record waiting to be processed; absent when nothing waits or unknown.",
    )
    produce_rate: float | None = Field(
        None, description="Smoothed produce rate, records per second (to 0.001); absent: 0."
    )
    consume_rate: float | None = Field(
        None, description="Smoothed rate the group commits at, records per second (to 0.001); absent: 0."
    )


class DrainRange(_Model):
    """One partition's drained range [start, end): end is the split offset of the hand-off."""

    partition: int = _int("Partition number.", INT32)
    start: int | None = _int(
        "First offset of the range (the owner's committed offset at its ack); absent until "
        "the owner acknowledged.",
        default=None,
    )
    end: int = _int("The split offset: the range ends before it; the live group goes on from it.")
    tasks: int | None = _int(
        "Spark tasks the planner gave this partition (absent in history entries).", INT32, default=None
    )


class SubRange(_Model):
    """One Spark task's sub-range of a partition's range and its progress (from Kafka)."""

    partition: int = _int("Partition number.", INT32)
    index: int = _int("Sub-range index within the partition.", INT32)
    start: int = _int("First offset of the sub-range.")
    end: int = _int("The sub-range ends before this offset.")
    next: int | None = _int(
        "Next offset to process (end: done); absent: start (nothing processed yet).", default=None
    )
    records: int | None = _int("Records processed so far; absent: 0.", default=None)


class SubRangesFolded(_Model):
    """A busy drain's done sub-ranges that left subRanges past its bound (their counts)."""

    ranges: int = _int("Ranges of done sub-ranges no longer listed (joined where they touch).", INT32)
    records_done: int = _int("Records they processed.")
    records_total: int = _int("Records in them.")


class LostRange(_Model):
    """Offsets of a handed-off range that retention deleted before the drain read them."""

    partition: int = _int("Partition number.", INT32)
    start: int = _int("First lost offset.")
    end: int = _int("The lost offsets end before this one.")


# ranges one status.drain.history entry keeps (a busy drain's splits; at least one per partition)
HISTORY_RANGES = 64


class DrainHistoryEntry(_Model):
    """A finished drain (the last 5 are kept)."""

    id: int = _int("Drain id.")
    phase: DrainPhase = Field(description="Its final phase.")
    reason: str = Field("", description="CamelCase reason of its final phase.")
    ranges: list[DrainRange] = Field(
        default_factory=list,
        description="Every range it was handed, by partition and offset: a busy drain's next splits "
        f"too, several per partition (adjacent ones joined); at most {HISTORY_RANGES} (at least one per "
        "partition), the oldest extra ones left out past that (rangesOmitted).",
        json_schema_extra=_list_map("partition", "end"),
    )
    ranges_omitted: int | None = _int(
        "Ranges left out of ranges past its bound, the oldest first (absent: none).", INT32, default=None
    )
    records_done: int = _int("Records drained.", default=0)
    records_total: int = _int("Records in its ranges.", default=0)
    seconds: float | None = Field(None, description="From the launch of its last attempt to its end.")
    pause_seconds: float | None = Field(
        None,
        description="How long the live group had its consumers removed (0 unless the quiesce fallback ran).",
    )


class DrainExtension(_Model):
    """A busy drain's next split while it is handed off (issue 25 item 2, docs/drain.md "Busy
    drains"): planned while the drain runs, handed off through the same mailbox protocol as a first
    split; its ranges then join the running drain's."""

    round: int = _int("The drain's split number (its first split is round 0).", INT32)
    ranges: list[DrainRange] = Field(
        default_factory=list,
        description="The next split's ranges, one per partition.",
        json_schema_extra=_list_map("partition"),
    )
    planned_at: str | None = _time("When the next split was planned (its split offsets recorded).")
    published_at: str | None = _time("When its hand-off requests were published to the owners.")


class DrainStatus(_Model):
    """The drain hand-off state machine (docs/drain.md), persisted before each step so a restarted
    operator resumes it; written only with resourceVersion-guarded patches."""

    id: int = _int("Drain id (increasing per CR).")
    phase: DrainPhase = Field(description="Phase of the hand-off state machine.")
    reason: str = Field("", description="CamelCase reason of the phase.")
    message: str = Field("", description="Human-readable state.")
    ranges: list[DrainRange] = Field(
        default_factory=list,
        description="The planned ranges, one per partition.",
        json_schema_extra=_list_map("partition"),
    )
    sub_ranges: list[SubRange] | None = Field(
        None,
        description="One per Spark task, with its progress; absent once the drain is finished.",
        json_schema_extra=_list_map("partition", "index"),
    )
    sub_ranges_folded: SubRangesFolded | None = Field(
        None,
        description="A busy drain's done sub-ranges past 64 listed, folded into counts a range at a time, "
        "the oldest of the partition with the most first (each partition keeps its latest; absent: none).",
    )
    restore_replicas: int | None = _int(
        "Replicas the consumers get back after a quiesce; absent once finished.", INT32, default=None
    )
    attempt: int = _int("Job attempt of the current round (0 before the first launch).", INT32, default=0)
    attempt_base: int | None = _int("Attempts are counted from here (absent: 1).", INT32, default=None)
    retry_at: str | None = _time("When a failed attempt is retried, or a Failed drain's next round starts.")
    cancel_requested: bool | None = Field(None, description="spec.drain.cancel was seen (absent: false).")
    failed_generation: int | None = _int("metadata.generation a Failed drain failed at.", default=None)
    planned_at: str | None = _time("When the drain was planned (its split offsets recorded).")
    published_at: str | None = _time("When the hand-off requests were published to the owners.")
    quiesced_at: str | None = _time(
        "When the quiesce fallback scaled the consumers to 0 (absent on the other paths)."
    )
    handed_off_at: str | None = _time("When every range was handed off.")
    resumed_at: str | None = _time("When a quiesced group got its replicas back.")
    started_at: str | None = _time("When the Job of the current attempt was launched.")
    finished_at: str | None = _time("When the drain reached its final phase.")
    progress_at: str | None = _time(
        "When the current attempt was launched or its progress last moved (the no-progress detector's clock)."
    )
    pause_seconds: float | None = Field(
        None, description="How long the live group had its consumers removed."
    )
    records_total: int = _int("Records in the ranges.", default=0)
    records_done: int = _int("Records drained so far.", default=0)
    records_lost: int | None = _int("Records of lostRanges (absent: 0).", default=None)
    lost_ranges: list[LostRange] | None = Field(
        None,
        description="Offsets retention deleted before the drain read them.",
        json_schema_extra=_list_map("partition", "start", "end"),
    )
    last_error: str | None = Field(None, description="The last failed attempt's cause.")
    hand_off_path: HandOffPath | None = Field(None, description="How the ranges were handed off.")
    runtime: DrainRuntime | None = Field(None, description="How the current attempt's Job was launched.")
    stalled: Stall | None = Field(
        None, description="Set from a stalled attempt's detection until progress moves again."
    )
    failed_rounds: int | None = _int("Rounds of attempts that ended Failed (absent: 0).", INT32, default=None)
    busy: bool | None = Field(
        None,
        description="A busy drain (issue 25 item 2): while the capped group cannot hold its partitions it "
        "takes their next split without a new start-up (absent: false).",
    )
    round: int | None = _int(
        "Next splits a busy drain took after its first (absent: 0).", INT32, default=None
    )
    slots: int | None = _int(
        "Task slots a busy drain's Job holds: its parallelism, recorded at each launch; before the "
        "launch, the slots the planner asked for (absent: one per unfinished sub-range).",
        INT32,
        default=None,
    )
    slot_rate: float | None = Field(
        None,
        description="Records per second of one of a busy drain's slots as the planner sized them (the "
        "task capacity of its plan): its roll-over judges the slots by it (absent: the task capacity "
        "of the moment).",
    )
    extension: DrainExtension | None = Field(
        None, description="A busy drain's next split while it is handed off (absent: none)."
    )
    idle_since: str | None = _time(
        "When a busy drain became idle (every sub-range done, no next split wanted): it holds its slots "
        "for a new drain's start-up from then before it hands its partitions back (absent: not idle)."
    )
    history: list[DrainHistoryEntry] | None = Field(
        None,
        description="The last 5 finished drains (absent: none yet).",
        json_schema_extra=_list_map("id"),
    )


class Recommendation(_Model):
    """spec.mode Recommend only: what the operator would do, published instead of done
    (docs/recommend.md). Absent in mode Act."""

    replicas: int | None = _int(
        "Replicas the operator recommends (what it would scale to in mode Act).", INT32, default=None
    )
    current_replicas: int | None = _int(
        "Replicas it sees: the consumer Deployment's, or, without one, the group's members as the "
        "broker describes them.",
        INT32,
        default=None,
    )
    source: RecommendationSource | None = Field(
        None, description="Where currentReplicas comes from (Deployment or GroupMembers)."
    )
    capacity_source: CapacitySource | None = Field(
        None,
        description="Where the per-replica capacity comes from - CommitMetadata (lagpilot's consumer "
        "runtime reports it), CommittedRate (measured from the group's commits while every partition "
        "lags) or Unknown (no sample yet).",
    )
    reason: str | None = Field(
        None, description="CamelCase reason of the recommendation (the decision's reason)."
    )
    message: str | None = Field(None, description="The decision's message, with the numbers it used.")
    drain: bool | None = Field(
        None, description="true when, in mode Act, the operator would hand the backlog to a drain now."
    )
    since: str | None = Field(
        None,
        description="When the recommended replica count last changed (RFC 3339).",
        json_schema_extra=DATE_TIME,
    )


class StartUpFigure(_Model):
    """A start-up figure the planner uses: measured on this CR (the nearest-rank 80th percentile of
    the last 5 samples, capped at 900 s) or the operator's default until one is measured. The samples
    themselves are controller memory: the ConfigMap ``<cr>-lagpilot-state`` (``learned``)."""

    seconds: float = Field(description="The figure the planner uses, seconds.")
    source: StartUpSource = Field(description="Measured (from samples) or Default (none measured yet).")


class StartUps(_Model):
    """What this CR's start-ups measured (issue 25 item 4, docs/decision.md "Learning from what is
    measured"): the figures only; their samples live in the controller's memory."""

    pod_start: StartUpFigure | None = Field(
        None, description="A scale-up -> the consumer Deployment's Ready replicas reach it."
    )
    drain_start: StartUpFigure | None = Field(
        None, description="A cold drain's first attempt launched -> its first progress seen."
    )
    drain_warm_start: StartUpFigure | None = Field(
        None, description="A drain launched on a Ready warm runtime -> its first progress seen."
    )


class Condition(_Model):
    type: str = Field(description="Condition type.", max_length=316)
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        "", description="CamelCase machine-readable reason of the last transition.", max_length=1024
    )
    message: str = Field("", description="Human-readable details.", max_length=32768)
    observed_generation: int | None = _int(
        "metadata.generation the condition was computed for.", default=None
    )
    last_transition_time: str | None = Field(
        None, description="When the status last changed (RFC 3339).", json_schema_extra=DATE_TIME
    )


class BatchConsumerGroupStatus(_Model):
    """Observed state, written only by the operator through the status subresource. Lags and
    rates are as of the last observation."""

    observed_generation: int | None = _int(
        "metadata.generation of the spec the operator last acted on.", default=None
    )
    partitions: int | None = _int("Partition count of the topic, as last observed.", INT32, default=None)
    replicas: int | None = _int("Current replicas of the consumer Deployment.", INT32, default=None)
    desired_replicas: int | None = _int("Replicas the last decision asked for.", INT32, default=None)
    recommendation: Recommendation | None = Field(
        None,
        description="spec.mode Recommend only: what the operator would do, published instead of done "
        "(docs/recommend.md). Absent in mode Act.",
    )
    total_lag: int | None = _int(
        "Records produced but not yet committed by the group, over all partitions.", default=None
    )
    max_partition_lag: int | None = _int("Lag of the most lagging partition.", default=None)
    produce_rate: float | None = Field(
        None,
        description="Smoothed produce rate of the whole topic, records per second; absent until measured.",
        json_schema_extra=NULLABLE,
    )
    capacity_per_replica: float | None = Field(
        None,
        description="Records one consumer processes per busy second, from the runtime's capacity report in "
        "the commit metadata; absent until reported.",
        json_schema_extra=NULLABLE,
    )
    projected_catch_up_seconds: float | None = Field(
        None,
        description="Projected seconds until the lag is cleared at the current replica count; absent when "
        "unknown or when the group cannot catch up at all.",
        json_schema_extra=NULLABLE,
    )
    last_scale_time: str | None = Field(
        None,
        description="When the operator last changed the replica count (RFC 3339).",
        json_schema_extra=DATE_TIME,
    )
    data_loss_records: int | None = _int(
        "Records deleted by retention before the group consumed them, counted since the operator first "
        "observed the group (each lost record once).",
        default=None,
    )
    last_observed_time: str | None = _time("When the partitions in partitionStatuses were observed.")
    partition_statuses: list[PartitionStatus] | None = Field(
        None,
        description="Each partition as last observed (offsets, lag, rates, the oldest waiting record's age); "
        "written with any other status change and at least every 60 s.",
        json_schema_extra=_list_map("partition"),
    )
    drain: DrainStatus | None = Field(None, description="The drain hand-off (docs/drain.md).")
    start_ups: StartUps | None = Field(
        None, description="The pod start and drain start-ups the planner uses, measured on this CR."
    )
    conditions: list[Condition] | None = Field(
        None,
        description="Current state as conditions: Ready, Scaling and Draining always; the abnormal-true "
        "types CatchUpAtRisk, Degraded, DataLoss, DrainStalled, Terminating, ScalingIneffective and the "
        "kstatus conditions Reconciling and Stalled (derived from Ready and Degraded; docs/gitops.md) only "
        "while True or Unknown (absent: False).",
        json_schema_extra=_list_map("type"),
    )


# --- the structural schema for the CRD --------------------------------------------------------------

_KEEP = (
    "type",
    "format",
    "description",
    "enum",
    "properties",
    "items",
    "required",
    "nullable",
    "maxLength",
    "maxItems",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON-schema node -> a Kubernetes structural-schema node: $refs inlined, optionals
    (anyOf with null) collapsed to their type, titles and defaults dropped."""
    node = dict(node)
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
    if "$ref" in node:
        ref = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**ref, **node}  # the field's description wins over the class docstring
    if "anyOf" in node:
        kinds = [k for k in node.pop("anyOf") if k.get("type") != "null"]
        if len(kinds) != 1:
            raise ValueError(f"not structural: {kinds}")
        node = {**_resolve(kinds[0], defs), **node}
    out: dict[str, Any] = {}
    for key in _KEEP:
        if key not in node:
            continue
        value = node[key]
        if key == "properties":
            value = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key == "items":
            value = _resolve(value, defs)
        elif key == "description":
            value = " ".join(str(value).split())
        out[key] = value
    if out.get("type") == "object" and "required" in out:
        out["required"] = sorted(out["required"])
    return out


def status_openapi_schema() -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``.status`` (the CRD's ``properties.status``)."""
    raw = BatchConsumerGroupStatus.model_json_schema(by_alias=True, mode="serialization")
    schema = _resolve(raw, raw.get("$defs", {}))
    # the status is written field by field (merge patches): nothing at the top level is required
    schema.pop("required", None)
    return dict(json.loads(json.dumps(schema)))  # no shared sub-objects (YAML anchors in a dump)


def validate_status(status: dict[str, Any]) -> BatchConsumerGroupStatus:
    """Parse a status as stored (raises pydantic.ValidationError naming the field)."""
    return BatchConsumerGroupStatus.model_validate(status)


__all__ = [
    "ABNORMAL_TRUE",
    "HISTORY_RANGES",
    "BatchConsumerGroupStatus",
    "CapacitySource",
    "Condition",
    "DrainHistoryEntry",
    "DrainHoldReason",
    "DrainPhase",
    "DrainRange",
    "DrainStatus",
    "HandOffPath",
    "LostRange",
    "PartitionStatus",
    "Recommendation",
    "RecommendationSource",
    "SubRange",
    "status_openapi_schema",
    "validate_status",
]
