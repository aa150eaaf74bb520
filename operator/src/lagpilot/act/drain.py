"""The drain executor: performs what the pure hand-off state machine (`handoff.next_action`) asks.

Called once per control-loop cycle by reconcile.py, after the scaler acted and before the status
write (`DrainExecutor.reconcile`). Within one call it loops observe → next_action → act → write
`status.drain` until the machine has to wait (owners to acknowledge, the Job running, a retry
back-off), so the hand-off itself (publish → acks observed → seal → create the Job) runs back to
back. The hand-off mailbox (`lagpilot_runtime.handoff_mailbox`) is read with the per-group offsets
readers (never the admin OffsetFetch, which crashes librdkafka) and written with
`alter_consumer_group_offsets` (the mailbox group never has members). While phase Planned, every
observation reads the group's committed offsets BEFORE the mailbox (the ordering the exactness
argument needs, docs/drain.md).

Every effect comes first and its status write right after (`Action.status`), and the state machine
is built so that a lost write is recognised from Kafka and the API server on the next call. Job
names are deterministic (`<cr>-drain-<id>-<attempt>`): a Job created before a lost status write is
adopted (409), never duplicated.

The Kafka admin and Kubernetes calls it makes are in `drain_calls.DrainCalls` (its base class; unit
tests replace them); the Job and SparkApplication manifests in `drain_manifests`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lagpilot import __version__
from lagpilot.config import OperatorConfig
from lagpilot.decide.drain_watch import (
    NO_POD_S,
    NO_PROGRESS_S,
    STARTUP_S,
    Sighting,
    StallLimits,
    first_sighting,
    stalled_condition,
)
from lagpilot.decide.handoff import (
    ACK_TIMEOUT_S,
    NO_PART,
    QUIESCE_TIMEOUT_S,
    Action,
    DrainStatus,
    GroupMember,
    HandBack,
    JobObservation,
    Kind,
    Observed,
    Offsets,
    PartSeen,
    Phase,
    condition,
    data_loss_condition,
    forward_moves,
    job_name,
    next_action,
)
from lagpilot.decide.status import Condition, merge_conditions
from lagpilot.model.status import DrainRuntime
from lagpilot.spec import GroupSpec
from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain.plan import NextPart, owner_tag, parts_group

from .drain_calls import DrainCalls
from .drain_manifests import (
    JOB_LABEL,  # noqa: F401 - re-exported: the drain pods' label (tests, finalizer)
    DrainSettings,
)
from .drain_part_key import PartKeys
from .drain_runtime import RuntimeManager
from .handoff_key import HandoffKeys
from .kubeapi import StatusConflict

log = logging.getLogger(__name__)

MAX_STEPS = 8  # actions per call; the machine waits (Kind.NONE) long before that
ACK_POLL_S = 0.2  # the acks' poll right after a publish (DrainExecutor.ack_poll_s)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


# ---- fault injection (tests only) ----------------------------------------------------------------


def _fault_point(kind: str, when: str) -> None:
    """Die like `kill -9` at a named point, once per point: the fault tests' way of killing the
    operator between an effect and its status write (or right after the write).

    LAGPILOT_TEST_CRASH_AT="Quiesce:effect,AlterOffsets:effect,..." and LAGPILOT_TEST_CRASH_DIR
    (marker files: each point fires once across restarts). Unset in production: a no-op.
    """
    points = os.environ.get("LAGPILOT_TEST_CRASH_AT")
    marker_dir = os.environ.get("LAGPILOT_TEST_CRASH_DIR")
    if not points or not marker_dir or f"{kind}:{when}" not in points.split(","):
        return
    marker = os.path.join(marker_dir, f"{kind}-{when}")
    if os.path.exists(marker):
        return
    with open(marker, "w") as fh:
        fh.write(str(time.time()))
    log.warning("fault injection: exiting", extra={"point": f"{kind}:{when}"})
    os._exit(137)


# ---- metrics -----------------------------------------------------------------------------------

_METRICS: dict[str, Any] = {}


def _metrics() -> dict[str, Any]:
    if not _METRICS:
        from prometheus_client import Gauge

        _METRICS["total"] = Gauge(
            "lagpilot_drain_records_total", "Records in the current drain's ranges", ["namespace", "name"]
        )
        _METRICS["done"] = Gauge(
            "lagpilot_drain_records_done", "Records the current drain has processed", ["namespace", "name"]
        )
        _METRICS["active"] = Gauge(
            "lagpilot_drain_active",
            "1 while a drain holds a range (Planned..Succeeded)",
            ["namespace", "name"],
        )
        _METRICS["pause"] = Gauge(
            "lagpilot_drain_pause_seconds",
            "How long the last hand-off paused the live group",
            ["namespace", "name"],
        )
        _METRICS["progress_at"] = Gauge(
            "lagpilot_drain_last_progress_timestamp_seconds",
            "When the current drain attempt launched or its progress last moved (Unix time)",
            ["namespace", "name"],
        )
    return _METRICS


def _count_lost(namespace: str, name: str, n: int) -> None:
    """lagpilot_drain_records_lost_total: records of handed-off ranges retention deleted before the
    drain read them (counted once, when the status first records them)."""
    try:
        m = _metrics()
        if "lost" not in m:
            from prometheus_client import Counter

            m["lost"] = Counter(
                "lagpilot_drain_records_lost_total",
                "Records of drained ranges deleted by retention before the drain read them",
                ["namespace", "name"],
            )
        m["lost"].labels(namespace, name).inc(n)
    except Exception:  # noqa: BLE001 - metrics are best effort
        pass


def _count_stall(namespace: str, name: str, reason: str) -> None:
    """lagpilot_drain_stalls_total{reason}: attempts the no-progress detector stopped (NoProgress |
    NoRunningPod), counted with the DrainStalled event."""
    try:
        m = _metrics()
        if "stalls" not in m:
            from prometheus_client import Counter

            m["stalls"] = Counter(
                "lagpilot_drain_stalls_total",
                "Drain attempts stopped by the no-progress detector, by reason",
                ["namespace", "name", "reason"],
            )
        m["stalls"].labels(namespace, name, reason or "Unknown").inc()
    except Exception:  # noqa: BLE001 - metrics are best effort
        pass


def _publish(namespace: str, name: str, d: DrainStatus | None) -> None:
    try:
        m = _metrics()
    except Exception:  # noqa: BLE001 - metrics are best effort (e.g. registered twice in tests)
        return
    if d is None:
        return
    m["total"].labels(namespace, name).set(d.records_total)
    m["done"].labels(namespace, name).set(d.records_done)
    m["active"].labels(namespace, name).set(
        1 if d.phase in (Phase.PLANNED, Phase.HANDED_OFF, Phase.RUNNING, Phase.SUCCEEDED) else 0
    )
    if d.pause_seconds is not None:
        m["pause"].labels(namespace, name).set(d.pause_seconds)
    if d.progress_at is not None:
        m["progress_at"].labels(namespace, name).set(d.progress_at)


# ---- the executor ---------------------------------------------------------------------------------


@dataclasses.dataclass
class DrainContext:
    """One CR's inputs for a call, gathered by reconcile.py (no policy in here)."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: GroupSpec
    raw_drain: Mapping[str, Any] | None
    offsets: Mapping[int, Offsets]
    replicas: int
    wanted: Sequence[int]
    admin: Any  # confluent_kafka AdminClient (shared, from the pool)
    scale: Callable[[int], object]  # apply the consumer Deployment with n replicas (its result unused)
    patch_status: Callable[[dict[str, Any]], None]
    emit: Callable[[str, str, str], None]
    reobserve: Callable[[], Mapping[int, Offsets]]  # fresh offsets (after an alter / quiesce)
    version: str = __version__
    tasks: Mapping[int, int] = dataclasses.field(
        default_factory=dict
    )  # planner's Spark tasks per wanted partition
    slots: int = (
        0  # a busy drain's first split: the task slots the planner asks its Job to hold (0: its tasks)
    )
    slot_rate: float = 0.0  # records/s of one such slot as the planner sized them (DrainNeed.slot_rate)
    # the running busy drain outgrew its slots (drain_policy.RollOver: slots held, needed, rate), else None
    roll_over: Any = None
    # when an idle busy drain hands its partitions back (the step's StepDecision.hand_back; default: at once)
    hand_back: HandBack = dataclasses.field(default_factory=HandBack)
    launched_runtime: str = ""  # set by create_job: warm | cold, as the launched (or adopted) Job says
    # status.drain writes guarded by the drain they were decided on (`same_drain`, resourceVersion:
    # KubeApi.patch_status_guarded); `verify_drain` checks that basis before an effect. None: plain
    # `patch_status` (unit-test fakes)
    patch_drain: Callable[[dict[str, Any], DrainStatus | None], None] | None = None
    verify_drain: Callable[[DrainStatus | None], None] | None = None
    # the executor keeps drains busy across a burst (issue 25 item 2; step.Model.drain_busy, the
    # same flag the planner was given): new drains are planned busy and take next splits
    busy: bool = False
    # status.conditions as the cycle read them: every status.drain write carries the drain's
    # conditions merged into them (`drain_patch`); None: unknown, status.drain is written alone
    conditions: Sequence[Mapping[str, Any]] | None = None


EFFECTS = (
    Kind.PUBLISH,
    Kind.QUIESCE,
    Kind.ALTER_OFFSETS,
    Kind.SEAL,
    Kind.LAUNCH,
    Kind.DELETE_JOB,
    Kind.RESTORE,
    Kind.DELIVER,
)


def normalized(d: DrainStatus | None) -> DrainStatus | None:
    """A drain as it reads back from status (to_dict → from_dict: times, history, a finished
    drain's summary), so a drain held in memory compares equal to its stored form."""
    return None if d is None else DrainStatus.from_dict(d.to_dict())


def same_drain(basis: DrainStatus | None) -> Callable[[Mapping[str, Any]], bool]:
    """The basis check of a guarded status.drain write: the stored drain is still `basis`."""
    want = normalized(basis)

    def check(status: Mapping[str, Any]) -> bool:
        try:
            return normalized(DrainStatus.from_dict(status.get("drain"))) == want
        except (KeyError, TypeError, ValueError):
            return False

    return check


@dataclasses.dataclass(frozen=True)
class DrainResult:
    status: dict[str, Any] | None
    condition: tuple[str, str, str]
    actions: tuple[str, ...] = ()
    data_loss: tuple[str, str, str] | None = None  # the DataLoss condition (None: no drain recorded)
    stalled: tuple[str, str, str] | None = None  # the DrainStalled condition (None: no drain recorded)
    conditions: list[dict[str, Any]] | None = (
        None  # status.conditions as this call last wrote them (None: not written)
    )


def drain_conditions(d: DrainStatus | None) -> list[Condition]:
    """The conditions that follow from status.drain alone: Draining, DataLoss (once a drain is
    recorded), DrainStalled (likewise)."""
    loss = data_loss_condition(d)
    return (
        [Condition("Draining", *condition(d))]
        + ([] if loss is None else [Condition("DataLoss", *loss)])
        + ([] if d is None else [Condition("DrainStalled", *stalled_condition(d))])
    )


def drain_patch(
    d: DrainStatus, conditions: Sequence[Mapping[str, Any]] | None, generation: int, now: float
) -> dict[str, Any]:
    """The status write of a drain step: status.drain and, in the same merge patch, the conditions
    it implies merged into `conditions` (the whole list: a merge patch replaces a list), so no reader
    sees a phase without its condition. `conditions` None (unknown): status.drain alone."""
    patch: dict[str, Any] = {"drain": d.to_dict()}
    if conditions is not None:
        patch["conditions"] = merge_conditions(conditions, drain_conditions(d), generation, now)
    return patch


class DrainExecutor(DrainCalls):
    """Runs the hand-off state machine against the cluster (its calls: `DrainCalls`). One instance per operator."""

    def __init__(
        self,
        api_client: Any,
        settings: DrainSettings | None = None,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 15.0,
        config: OperatorConfig | None = None,
    ) -> None:
        from kubernetes import client

        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)  # SparkApplications (launcher sparkApplication)
        self._sanitize = api_client.sanitize_for_serialization
        self.settings = settings or DrainSettings.from_env()
        # spec.drain.warmRuntime: the runtime Deployment per CR and the URL a launch hands to its Job
        self.runtime = RuntimeManager(api_client, self.settings)
        # the CRs' hand-off keys: every mailbox entry is signed and verified with its CR's (M8)
        self.handoff = HandoffKeys(self.core, self._sanitize)
        # the CRs' drain part keys: a busy drain's next parts are signed with them (drain_part_key.py)
        self.part_keys = PartKeys(self.core, self._sanitize)
        self.clock = clock
        self.timeout_s = timeout_s
        # how long the owners get to acknowledge before the quiesce fallback (tests shorten it)
        cfg = config if config is not None else OperatorConfig.from_env()
        self.ack_timeout_s = _or(cfg.drain_ack_timeout_seconds, ACK_TIMEOUT_S)
        self.ack_wait_s = 3.0  # within one call, right after a publish: poll for the acks this long
        # ... this often: each poll is one observation (membership, offsets, mailbox: three Kafka
        # reads); the owners ack within about a second, and the seal waits for the poll after the
        # last ack (0.5 s before: on the node demo the acks were all in 1 s before the seal)
        self.ack_poll_s = ACK_POLL_S
        # the no-progress detector's limits (docs/drain.md "Deadlines and stalls"; tests shorten them)
        self.stall_limits = StallLimits(
            no_progress_s=_or(cfg.drain_stall_seconds, NO_PROGRESS_S),
            no_pod_s=_or(cfg.drain_no_pod_seconds, NO_POD_S),
            startup_s=_or(cfg.drain_startup_seconds, STARTUP_S),
        )
        # per CR uid: when this operator first saw its running attempt's sign of life (a task's start;
        # drain_watch.first_sighting): the no-progress window counts from it, start-up is bounded apart
        self.sightings: dict[str, Sighting] = {}
        # how long the quiesce fallback waits for the group to empty (LAGPILOT_DRAIN_QUIESCE_TIMEOUT_SECONDS;
        # unset: QUIESCE_TIMEOUT_S, at least two session timeouts + 30 s so killed members have left)
        self.quiesce_timeout_s: float | None = cfg.drain_quiesce_timeout_seconds

    def handoff_key(self, namespace: str, name: str, uid: str) -> bytes:
        """The CR's hand-off key (`handoff_key.HandoffKeys`; created before the consumer Deployment)."""
        return self.handoff.key(namespace, name, uid)

    def handoff_key_id(self, namespace: str, name: str, uid: str) -> str:
        return self.handoff.key_id(namespace, name, uid)

    def part_key(self, namespace: str, name: str, uid: str) -> bytes:
        """The CR's drain part key (`drain_part_key.PartKeys`; created before a busy drain's Job)."""
        return self.part_keys.key(namespace, name, uid)

    def read_part(
        self, admin: Any, spec: GroupSpec, d: DrainStatus, *, key: bytes, uid: str
    ) -> PartSeen | None:
        """The next part a busy drain's driver reads now (its commit in the parts group, topic
        partition 0): NO_PART when there is none or it does not verify under the CR's part key (the
        driver ignores it too); None when the read failed."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        g = parts_group(spec.group_id, str(d.id), owner_tag(uid))
        try:
            fut = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, 0)])],
                request_timeout=self.timeout_s,
            )[g]
            tps = fut.result(timeout=self.timeout_s).topic_partitions
        except Exception as err:  # noqa: BLE001
            log.warning(
                "reading the busy drain's next part failed", extra={"group": spec.group_id, "error": str(err)}
            )
            return None
        for tp in tps:
            if tp.offset is None or tp.offset < 0:
                continue
            meta = getattr(tp, "metadata", None)
            try:
                part = NextPart.from_body(
                    plan_auth.verify_part(
                        key, owner_tag(uid), spec.topic, meta.decode() if isinstance(meta, bytes) else meta
                    )
                )
            except ValueError:  # plan_auth.Refused is one: unsigned, forged, malformed
                return NO_PART
            if part.drain_id == str(d.id):
                return PartSeen(part.round, part.final)
        return NO_PART

    def write_part(self, admin: Any, spec: GroupSpec, part: NextPart, *, key: bytes, uid: str) -> None:
        """A "simple" commit to the memberless parts group: offset = the round, metadata = the part
        signed with the CR's part key."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        g = parts_group(spec.group_id, part.drain_id, owner_tag(uid))
        meta = plan_auth.sign_part(key, owner_tag(uid), spec.topic, part.body())
        req = ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, 0, part.round, metadata=meta)])
        res = admin.alter_consumer_group_offsets([req], request_timeout=self.timeout_s)[g].result(
            timeout=self.timeout_s
        )
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"writing the busy drain's next part to {g} failed: {bad[0].error}")

    # -- the loop -----------------------------------------------------------------------------------
    def observe(
        self, ctx: DrainContext, d: DrainStatus | None, offsets: Mapping[int, Offsets], replicas: int
    ) -> Observed:
        """What ``next_action`` needs, read in order: ``_observe_hand_off`` (membership, the group's
        offsets, then the mailbox) -> ``_observe_part`` (a busy drain's delivered part) ->
        ``_observe_progress`` (progress groups, retention losses) -> ``_observe_job``."""
        if decided_unobserved(d):  # nothing read: the step does not look (``decided_unobserved``)
            self.sightings.pop(ctx.uid, None)
            return Observed(
                generation=ctx.generation,
                offsets=offsets,
                group_empty=None,
                replicas=replicas,
                wanted=tuple(ctx.wanted),
                tasks=dict(ctx.tasks),
                slots=ctx.slots,
                ack_timeout_s=self.ack_timeout_s,
                stall_limits=self.stall_limits,
                owner=ctx.uid,
                quiesce_timeout_s=self.quiesce_bound_s(ctx.spec),
                busy=ctx.busy,
                hand_back=ctx.hand_back,
            )
        group_empty, members, mailbox = None, None, None
        if d is not None and (d.phase is Phase.PLANNED or d.extension is not None):
            group_empty, members, offsets, mailbox = self._observe_hand_off(ctx, d)
        part, wanted = self._observe_part(ctx, d)
        progress, lost, attempts = self._observe_progress(ctx, d)
        job = self._observe_job(ctx, d)
        stall_limits = self._started(ctx, d, attempts)
        return Observed(
            generation=ctx.generation,
            offsets=offsets,
            group_empty=group_empty,
            replicas=replicas,
            wanted=wanted,
            tasks=dict(ctx.tasks),
            slots=ctx.slots,
            slot_rate=ctx.slot_rate,
            roll_over=ctx.roll_over,
            job=job,
            progress=progress,
            mailbox=mailbox,
            ack_timeout_s=self.ack_timeout_s,
            lost=lost,
            stall_limits=stall_limits,
            members=members,
            owner=ctx.uid,
            quiesce_timeout_s=self.quiesce_bound_s(ctx.spec),
            busy=ctx.busy,
            part=part,
            hand_back=ctx.hand_back,
        )

    def _observe_hand_off(
        self, ctx: DrainContext, d: DrainStatus
    ) -> tuple[
        bool | None,
        Sequence[GroupMember] | None,
        Mapping[int, Offsets],
        Mapping[int, mbx.Entry | None] | None,
    ]:
        """A hand-off in flight (a first split, or a busy drain's next split): (group empty, its
        members, the group's offsets, the mailbox entries of the handed partitions)."""
        members = None
        # order matters: membership, then the group's committed offsets, then the mailbox (a
        # busy drain's next split in hand-off reads them as a first split does)
        group_empty = self.group_empty(ctx.admin, ctx.spec.group_id)
        if (
            d.phase is Phase.PLANNED and d.quiesced_at is not None and group_empty is False
        ):  # who keeps the group non-empty (M6)
            members = self.group_members(ctx.admin, ctx.spec.group_id)
        offsets = ctx.reobserve()
        handed = d.partitions if d.phase is Phase.PLANNED else (d.extension.partitions if d.extension else [])
        mailbox = self.mailbox(
            ctx.admin, ctx.spec, handed, key=self.handoff_key(ctx.namespace, ctx.name, ctx.uid)
        )
        return group_empty, members, offsets, mailbox

    def _observe_part(
        self, ctx: DrainContext, d: DrainStatus | None
    ) -> tuple[PartSeen | None, tuple[int, ...]]:
        """A Running busy drain's delivered part, and the partitions wanted for a next split (none
        when the part cannot be read: unknown whether the drain was handed back)."""
        wanted = tuple(ctx.wanted)
        part = None
        if d is not None and d.busy and d.phase is Phase.RUNNING and d.attempt > 0:
            part = self.read_part(
                ctx.admin, ctx.spec, d, key=self.part_key(ctx.namespace, ctx.name, ctx.uid), uid=ctx.uid
            )
            if part is None:
                wanted = ()  # unknown whether the drain was handed back: no next split this cycle
        return part, wanted

    def _observe_progress(
        self, ctx: DrainContext, d: DrainStatus | None
    ) -> tuple[
        dict[tuple[int, int], tuple[int, int]] | None,
        dict[tuple[int, int], tuple[tuple[int, int], ...]] | None,
        dict[tuple[int, int], int] | None,
    ]:
        """The sub-ranges' progress, the ranges retention deleted and the attempt that last wrote each
        (None, None, None: nothing to read or not read)."""
        progress, lost, attempts = None, None, None
        if d is not None and d.sub_ranges and d.phase is not Phase.VERIFIED:
            found: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
            by: dict[tuple[int, int], int] = {}
            progress = self.progress(ctx.admin, ctx.spec, d, found, owner=ctx.uid, attempts_out=by)
            lost, attempts = (None, None) if progress is None else (found, by)
        return progress, lost, attempts

    def _started(
        self, ctx: DrainContext, d: DrainStatus | None, attempts: Mapping[tuple[int, int], int] | None
    ) -> StallLimits:
        """The stall limits with the running attempt's first sign of life as this operator saw it
        (``first_sighting``; a progress read that failed sees none this cycle)."""
        if d is None or d.phase is not Phase.RUNNING or d.attempt <= 0:
            self.sightings.pop(ctx.uid, None)
            return self.stall_limits
        alive = attempts is not None and d.attempt in attempts.values()
        seen = first_sighting(self.sightings.get(ctx.uid), d.id, d.attempt, alive, self.clock())
        if seen is None:
            self.sightings.pop(ctx.uid, None)
            return self.stall_limits
        self.sightings[ctx.uid] = seen
        return dataclasses.replace(self.stall_limits, started_at=seen.at)

    def _observe_job(self, ctx: DrainContext, d: DrainStatus | None) -> JobObservation | None:
        if (
            d is not None
            and d.attempt > 0
            and d.phase in (Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)
        ):
            return self.job(ctx.namespace, job_name(ctx.name, d.id, d.attempt), ctx.spec.drain.launcher)
        return None

    def quiesce_bound_s(self, spec: GroupSpec) -> float:
        if self.quiesce_timeout_s is not None:
            return self.quiesce_timeout_s
        return max(QUIESCE_TIMEOUT_S, 2 * spec.kafka.session_timeout_ms / 1000.0 + 30.0)

    def perform(
        self, ctx: DrainContext, action: Action, d: DrainStatus | None, runtime_url: str | None = None
    ) -> bool:
        """Do the action's effect; False when the broker refused an offset move because a member
        joined meanwhile (nothing to record: that member finds the ack and completes it)."""
        k = action.kind
        if k in (Kind.QUIESCE, Kind.RESTORE) and action.replicas is not None:
            ctx.scale(action.replicas)
        elif k is Kind.PUBLISH:
            self.write_mailbox(
                ctx.admin, ctx.spec, action.entries, key=self.handoff_key(ctx.namespace, ctx.name, ctx.uid)
            )
        elif k is Kind.ALTER_OFFSETS:
            self.write_mailbox(
                ctx.admin, ctx.spec, action.entries, key=self.handoff_key(ctx.namespace, ctx.name, ctx.uid)
            )  # the acks first: the owner's order
            _fault_point(k.value, "ack")
            try:
                # forward only: a member may have come, moved past the split and gone since the observation
                fresh = ctx.reobserve()
                moves = forward_moves(action.offsets, {p: o.committed for p, o in fresh.items()})
                if moves:
                    self.alter_offsets(ctx.admin, ctx.spec, moves)
            except Exception as err:  # noqa: BLE001 - typically UNKNOWN_MEMBER_ID / non-empty group
                log.warning(
                    "moving the empty group's offsets refused; retrying next cycle",
                    extra={"group": ctx.spec.group_id, "error": str(err)},
                )
                return False
        elif k is Kind.SEAL:
            self.write_mailbox(
                ctx.admin, ctx.spec, action.entries, key=self.handoff_key(ctx.namespace, ctx.name, ctx.uid)
            )
            if action.replicas is not None:
                ctx.scale(action.replicas)
        elif k is Kind.LAUNCH:
            assert action.status is not None
            if action.replicas is not None:
                ctx.scale(action.replicas)  # the live group first: it resumes at split
            if action.status.busy:  # its Job's pod reads the part key Secret: it exists first
                self.part_key(ctx.namespace, ctx.name, ctx.uid)
            self.create_job(ctx, action.status, action.attempt, runtime_url)
        elif k is Kind.DELIVER:
            assert action.part is not None
            self.write_part(
                ctx.admin,
                ctx.spec,
                action.part,
                key=self.part_key(ctx.namespace, ctx.name, ctx.uid),
                uid=ctx.uid,
            )
        elif k is Kind.DELETE_JOB:
            assert d is not None
            self.delete_job(
                ctx.namespace, job_name(ctx.name, d.id, action.attempt or d.attempt), ctx.spec.drain.launcher
            )
        return True

    def reconcile(self, ctx: DrainContext) -> DrainResult:
        """Run the machine until it waits; write status.drain after every effect. Each pass: observe
        -> decide (``next_action``) -> ``_announce`` (warm runtime, log, the stored status still the
        one decided on) -> the effect (``perform``) -> ``_record`` (status, events, metrics) -> the
        next pass, a brief wait for acks (``_wait_for_acks``) or the end of the call."""
        d = DrainStatus.from_dict(ctx.raw_drain)
        offsets, replicas = ctx.offsets, ctx.replicas
        done: list[str] = []
        written: list[dict[str, Any]] | None = None  # status.conditions as this call last wrote them
        waited = 0.0
        step = 0
        while step < MAX_STEPS:
            if step > 0 and (
                d is None
                or ((d.phase is not Phase.PLANNED and d.extension is None) and not decided_unobserved(d))
            ):  # observe() re-reads
                offsets = ctx.reobserve()
            step += 1
            marks = [time.monotonic()]
            observed = self.observe(ctx, d, offsets, replicas)
            marks.append(time.monotonic())
            action = next_action(ctx.spec, d, observed, self.clock())
            runtime_url = self._announce(ctx, action, d)
            marks.append(time.monotonic())
            if not self.perform(ctx, action, d, runtime_url):
                done.append(action.kind.value + ":refused")
                break
            marks.append(time.monotonic())
            if action.kind is Kind.LAUNCH:
                action = with_runtime(action, ctx.launched_runtime)
            if action.replicas is not None and action.kind in (
                Kind.QUIESCE,
                Kind.RESTORE,
                Kind.LAUNCH,
                Kind.SEAL,
            ):
                replicas = action.replicas
            d, written = _record(ctx, action, d, written, self.clock())
            marks.append(time.monotonic())
            _log_step(ctx, action, marks)
            done.append(action.kind.value)
            if action.kind is Kind.NONE:
                if self._wait_for_acks(action, d, waited):
                    waited += self.ack_poll_s
                    step -= 1
                    continue
                break
        _publish(ctx.namespace, ctx.name, d)
        status = None if d is None else d.to_dict()
        return DrainResult(
            status,
            condition(d),
            tuple(done),
            data_loss_condition(d),
            None if d is None else stalled_condition(d),
            written,
        )

    def _announce(self, ctx: DrainContext, action: Action, d: DrainStatus | None) -> str | None:
        """Before the effect: a launch's warm runtime URL (None: the Job drains cold), the action
        logged, and (an effect) the stored status.drain verified to be the one it was decided on."""
        runtime_url = None
        if action.kind is Kind.LAUNCH and ctx.spec.drain.launcher == "job":
            # the warm runtime, if wanted and Ready right now (else the Job drains cold)
            runtime_url = self.runtime.url(ctx.namespace, ctx.name, ctx.uid, ctx.spec, ctx.version)
        if action.kind is not Kind.NONE:
            extra = {
                "group": f"{ctx.namespace}/{ctx.name}",
                "action": action.kind.value,
                "reason": action.reason,
                "drain_message": action.message,
            }
            if action.kind is Kind.LAUNCH:
                extra["runtime"] = (DrainRuntime.WARM if runtime_url else DrainRuntime.COLD).value
            log.info("drain action", extra=extra)
        if action.kind in EFFECTS and ctx.verify_drain is not None:
            ctx.verify_drain(d)  # StatusConflict: another writer decided meanwhile; no effect
        return runtime_url

    def _wait_for_acks(self, action: Action, d: DrainStatus | None, waited: float) -> bool:
        """Right after the publish the owners ack within about a second (their mailbox check runs at
        every batch boundary, at most once a second): wait briefly (True: slept, decide again)
        instead of a whole control-loop interval."""
        published = (
            None
            if d is None
            else (
                d.extension.published_at
                if d.extension is not None and d.phase is not Phase.PLANNED
                else d.published_at
            )
        )
        if (
            action.reason == "WaitingForAcks"
            and published is not None
            and waited < self.ack_wait_s
            and self.clock() - published < self.ack_wait_s + 1
        ):
            time.sleep(self.ack_poll_s)
            return True
        return False


def decided_unobserved(d: DrainStatus | None) -> bool:
    """True when the drain's next step is decided from the spec, the stored drain and the clock
    alone: HandedOff (``decide.handoff._handed_off``: launch the first attempt, or cancel keeping
    the range; tests/unit/test_drain_launch_reads.py pins it). The executor then reads neither the
    group's offsets nor the progress groups before it: the Job follows the seal without Kafka
    round trips in between (docs/node.md "Plan → first record on the node")."""
    return d is not None and d.phase is Phase.HANDED_OFF and d.extension is None


STEP_PHASES = ("observe_s", "decide_s", "effect_s", "record_s")


def step_timings(marks: Sequence[float]) -> dict[str, float]:
    """Where one pass of the drain loop spent its time (`reconcile`'s marks: before observe, after
    observe, after decide + announce, after the effect, after the status write), in seconds."""
    return {k: round(b - a, 3) for k, a, b in zip(STEP_PHASES, marks, marks[1:], strict=False)}


def _log_step(ctx: DrainContext, action: Action, marks: Sequence[float]) -> None:
    """One line per pass that acted ("drain step": the action and `step_timings`): the hand-off's
    start-up (plan → publish → acks → seal → Job) read from the operator's log, a phase at a time."""
    if action.kind is Kind.NONE and action.status is None:
        return
    log.info(
        "drain step",
        extra={
            "group": f"{ctx.namespace}/{ctx.name}",
            "action": action.kind.value,
            "reason": action.reason,
            **step_timings(marks),
        },
    )


def _record(
    ctx: DrainContext,
    action: Action,
    d: DrainStatus | None,
    written: list[dict[str, Any]] | None,
    now: float,
) -> tuple[DrainStatus | None, list[dict[str, Any]] | None]:
    """After the effect: the fault points (chaos bench), the status written with its conditions in
    one patch (``drain_patch``; guarded by the status it was decided on, when the API allows), the
    event and the metrics. `written`: the conditions this reconcile call last wrote (None: none yet;
    the CR's as read, ``ctx.conditions``, are merged into). Returns the status now current and the
    conditions as this call last wrote them."""
    # a busy drain's next split has points of its own ("NextPublish", "NextSeal", ...)
    point = (
        "Next" + action.kind.value
        if d is not None
        and d.phase is not Phase.PLANNED
        and action.kind in (Kind.PUBLISH, Kind.ALTER_OFFSETS, Kind.SEAL)
        else action.kind.value
    )
    _fault_point(point, "effect")
    if action.status is not None and action.status != d:
        patch = drain_patch(
            action.status, ctx.conditions if written is None else written, ctx.generation, now
        )
        if ctx.patch_drain is not None:
            ctx.patch_drain(patch, d)
        else:
            ctx.patch_status(patch)
        written = patch.get("conditions", written)
        d = action.status
        _fault_point(point, "status")
    if action.event is not None:
        ctx.emit(*action.event)
    if action.lost_records:
        _count_lost(ctx.namespace, ctx.name, action.lost_records)
    if action.event is not None and action.event[1] == "DrainStalled" and d is not None:
        _count_stall(ctx.namespace, ctx.name, d.stalled)
    return d, written


def with_runtime(action: Action, word: str) -> Action:
    """A launch recorded with the path its Job takes (warm | cold): status.drain.runtime and the
    DrainStarted event's message (pure)."""
    if not word or action.status is None:
        return action
    event = action.event
    if event is not None:
        event = (event[0], event[1], f"{event[2]}; runtime {word}")
    return dataclasses.replace(action, status=dataclasses.replace(action.status, runtime=word), event=event)


def run_in_cycle(
    executor: DrainExecutor,
    ref: Any,
    spec: GroupSpec,
    raw_spec: Mapping[str, Any],
    status: Mapping[str, Any],
    obs: Any,
    decision: Any,
    replicas: int,
    handle: Any,
    deps: Any,
    apply_deployment: Callable[..., int],
    runtime_replicas: int | None = 1,
    runtime_seen: Any = None,
    hand_back: HandBack | None = None,
) -> DrainResult:
    """The adapter reconcile.py calls: converts its observation and decision, wires the effects.
    `runtime_replicas` is the step's count for the warm drain runtime (None: none), `runtime_seen`
    this cycle's read of it (`RuntimeManager.observe`; None: not read)."""

    def offsets_of(observation: Any) -> dict[int, Offsets]:
        return {p.partition: Offsets(p.committed, p.earliest, p.latest) for p in observation.partitions}

    # the warm drain runtime first (created/scaled/updated/deleted as the spec and the step say), so
    # a launch in this very call can find it; never changed or scaled down while an attempt runs (it
    # may be the one serving it)
    runtime = getattr(executor, "runtime", None)
    if runtime is not None:
        running = (status.get("drain") or {}).get("phase") == Phase.RUNNING.value
        runtime.sync(
            ref.namespace,
            ref.name,
            ref.uid,
            spec,
            running,
            getattr(deps, "version", __version__),
            deps.emit,
            replicas=runtime_replicas,
            seen=runtime_seen,
            now=getattr(deps, "clock", time.time)(),
        )

    guarded = getattr(deps.kube, "patch_status_guarded", None)
    read = getattr(deps.kube, "read_status", None)
    ctx = DrainContext(
        namespace=ref.namespace,
        name=ref.name,
        uid=ref.uid,
        generation=int(ref.generation or 0),
        spec=spec,
        raw_drain=status.get("drain"),
        offsets=offsets_of(obs),
        replicas=replicas,
        wanted=tuple(decision.drain.partitions) if getattr(decision, "drain", None) else (),
        tasks=dict(decision.drain.tasks_by_partition) if getattr(decision, "drain", None) else {},
        slots=int(getattr(decision.drain, "slots", 0) or 0) if getattr(decision, "drain", None) else 0,
        slot_rate=float(getattr(decision.drain, "slot_rate", 0.0) or 0.0)
        if getattr(decision, "drain", None)
        else 0.0,
        roll_over=getattr(decision, "roll_over", None),
        hand_back=hand_back or HandBack(),
        admin=handle.safe_admin(executor.timeout_s),  # admin OffsetFetch would SIGSEGV (kafka_observe)
        scale=lambda n: apply_deployment(ref, raw_spec, status, deps, replicas=n),
        patch_status=lambda patch: deps.kube.patch_status(ref.namespace, ref.name, patch),
        emit=deps.emit,
        patch_drain=None
        if guarded is None
        else (lambda patch, basis: guarded(ref.namespace, ref.name, patch, same_drain(basis))),
        verify_drain=None if read is None else (lambda basis: _verify(read, ref, basis)),
        reobserve=lambda: offsets_of(
            deps.observe(handle, spec.topic, spec.group_id, deps.kafka_timeout_seconds)
        ),
        version=getattr(deps, "version", __version__),
        busy=spec.drain.busy,  # the planner's flag too (reconcile's Model.drain_busy)
        conditions=list(status.get("conditions") or []),
    )
    return executor.reconcile(ctx)


def _verify(
    read: Callable[[str, str], tuple[str, dict[str, Any]]], ref: Any, basis: DrainStatus | None
) -> None:
    """Before an effect: the stored status.drain is still the one the action was decided on."""
    _rv, status = read(ref.namespace, ref.name)
    if not same_drain(basis)(status):
        raise StatusConflict(
            "status.drain changed since it was read (another writer); the effect is not made",
            f"drain step of BatchConsumerGroup {ref.namespace}/{ref.name}",
        )
