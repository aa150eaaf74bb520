"""The calls the drain executor (`drain.DrainExecutor`) makes, one method each: Kafka admin (group
membership, the progress groups, the hand-off mailbox, the empty group's offset move) and
Kubernetes (the drain Job or SparkApplication: read, create or adopt, delete). The executor's
loop decides which to call; unit tests replace these methods with fakes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lagpilot.decide.handoff import DrainStatus, GroupMember, JobObservation, job_name
from lagpilot.model.status import DrainRuntime
from lagpilot.spec import GroupSpec
from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime.drain.plan import (
    owner_tag,
    parse_progress_attempt,
    parse_progress_lost,
    parse_progress_metadata,
    progress_group,
)

from .drain_manifests import (
    JOB_LABEL,
    RUNTIME_PATH_LABEL,
    SPARK_APP_GROUP,
    SPARK_APP_PLURAL,
    SPARK_APP_VERSION,
    DrainSettings,
    build_drain_job,
    build_spark_application,
    drain_plan_for,
    job_observation,
    spark_application_observation,
)

if TYPE_CHECKING:
    from .drain import DrainContext

log = logging.getLogger(__name__)


class DrainCalls:
    """Kafka admin and Kubernetes calls of the drain executor (the attributes are set by its __init__)."""

    batch: Any
    core: Any
    custom: Any
    _sanitize: Callable[[object], dict[str, Any]]
    settings: DrainSettings
    timeout_s: float
    runtime: Any  # drain_runtime.RuntimeManager: signs warm plans
    clock: Callable[[], float]

    # -- observation ---------------------------------------------------------------------------
    def group_empty(self, admin: Any, group_id: str) -> bool | None:
        """True when the group has no members (the admin API then accepts an offset change)."""
        from confluent_kafka import ConsumerGroupState

        try:
            desc = admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)[
                group_id
            ].result(timeout=self.timeout_s)
        except Exception as err:  # noqa: BLE001 - unknown: the machine waits
            log.warning("describe group failed", extra={"group": group_id, "error": str(err)})
            return None
        return not desc.members and desc.state in (
            ConsumerGroupState.EMPTY,
            ConsumerGroupState.DEAD,
            ConsumerGroupState.UNKNOWN,
        )

    def group_members(self, admin: Any, group_id: str) -> tuple[GroupMember, ...] | None:
        """The group's members (client id, host) as the broker describes them; None when unknown.
        Read only while the quiesce fallback runs or after it gave up (``handoff._give_up_quiesce``)."""
        try:
            desc = admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)[
                group_id
            ].result(timeout=self.timeout_s)
        except Exception as err:  # noqa: BLE001 - unknown: the machine waits
            log.warning("describe group failed", extra={"group": group_id, "error": str(err)})
            return None
        return tuple(
            GroupMember(str(m.member_id or ""), str(m.client_id or ""), str(m.host or ""))
            for m in desc.members or ()
        )

    def progress(
        self,
        admin: Any,
        spec: GroupSpec,
        d: DrainStatus,
        lost_out: dict[tuple[int, int], tuple[tuple[int, int], ...]] | None = None,
        *,
        owner: str,
        attempts_out: dict[tuple[int, int], int] | None = None,
    ) -> dict[tuple[int, int], tuple[int, int]] | None:
        """(partition, index) → (next, records) from the progress groups of the CR with uid ``owner``;
        None if any read failed.
        ``lost_out`` receives the retention losses the drain recorded (``lost=a-b`` metadata),
        ``attempts_out`` the attempt whose task last committed each (``a=<attempt>``: its sign of life)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        by_index: dict[int, list[int]] = {}
        for s in d.sub_ranges:
            by_index.setdefault(s.index, []).append(s.partition)
        out: dict[tuple[int, int], tuple[int, int]] = {}
        try:
            futs = {}
            for index, parts in by_index.items():
                g = progress_group(spec.group_id, str(d.id), index, owner_tag(owner))
                futs[index] = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, p) for p in parts])],
                    request_timeout=self.timeout_s,
                )[g]
            for index, fut in futs.items():
                for tp in fut.result(timeout=self.timeout_s).topic_partitions:
                    if tp.offset is not None and tp.offset >= 0:
                        meta = getattr(tp, "metadata", None)
                        out[(tp.partition, index)] = (int(tp.offset), parse_progress_metadata(meta))
                        lost = parse_progress_lost(meta)
                        if lost and lost_out is not None:
                            lost_out[(tp.partition, index)] = lost
                        attempt = parse_progress_attempt(meta)
                        if attempt and attempts_out is not None:
                            attempts_out[(tp.partition, index)] = attempt
        except Exception as err:  # noqa: BLE001
            log.warning("reading drain progress failed", extra={"group": spec.group_id, "error": str(err)})
            return None
        return out

    def mailbox(
        self, admin: Any, spec: GroupSpec, partitions: Sequence[int], *, key: bytes
    ) -> dict[int, mbx.Entry | None] | None:
        """The hand-off mailbox entries of `partitions` that carry the CR's MAC under `key` (its
        hand-off key; M8): an entry that does not verify (a forged ack or request) reads as absent.
        None if the read failed (the machine waits)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        g = mbx.mailbox_group(spec.group_id)
        try:
            fut = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g, [TopicPartition(spec.topic, p) for p in partitions])],
                request_timeout=self.timeout_s,
            )[g]
            out: dict[int, mbx.Entry | None] = {p: None for p in partitions}
            for tp in fut.result(timeout=self.timeout_s).topic_partitions:
                if getattr(tp, "error", None) is not None:
                    raise RuntimeError(str(tp.error))
                out[tp.partition] = mbx.trusted(
                    mbx.decode(getattr(tp, "metadata", None), tp.offset), key, tp.topic, tp.partition
                )
            return out
        except Exception as err:  # noqa: BLE001
            log.warning(
                "reading the hand-off mailbox failed", extra={"group": spec.group_id, "error": str(err)}
            )
            return None

    def write_mailbox(
        self, admin: Any, spec: GroupSpec, entries: Mapping[int, mbx.Entry], *, key: bytes
    ) -> None:
        """A "simple" commit to the memberless mailbox group: offset = split, metadata = the entry,
        signed with the CR's hand-off key `key`."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not entries:
            return
        g = mbx.mailbox_group(spec.group_id)
        req = ConsumerGroupTopicPartitions(
            g,
            [
                TopicPartition(spec.topic, p, e.split, metadata=mbx.sign(e, key, spec.topic, p).encode())
                for p, e in sorted(entries.items())
            ],
        )
        res = admin.alter_consumer_group_offsets([req], request_timeout=self.timeout_s)[g].result(
            timeout=self.timeout_s
        )
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"writing the hand-off mailbox {g} failed: {bad[0].error}")

    def job(self, namespace: str, name: str, launcher: str = "job") -> JobObservation:
        """The attempt's Job — or, with launcher sparkApplication, its SparkApplication when no Job of
        that name exists (an attempt launched before the launcher changed is still seen: its pods
        carry the same drain-job label, so a retry waits for them either way)."""

        def read(call: Callable[[], Any]) -> dict[str, Any] | None:
            try:
                return self._sanitize(call())
            except Exception as err:
                if getattr(err, "status", None) != 404:
                    raise
                return None

        pods = (
            self._sanitize(
                self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}")
            ).get("items")
            or []
        )
        job = read(lambda: self.batch.read_namespaced_job(name, namespace))
        if job is not None or launcher != "sparkApplication":
            return job_observation(job, pods)
        app = read(
            lambda: self.custom.get_namespaced_custom_object(
                SPARK_APP_GROUP, SPARK_APP_VERSION, namespace, SPARK_APP_PLURAL, name
            )
        )
        return spark_application_observation(app, pods)

    # -- effects ----------------------------------------------------------------------------------
    def alter_offsets(self, admin: Any, spec: GroupSpec, offsets: Mapping[int, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        req = ConsumerGroupTopicPartitions(
            spec.group_id, [TopicPartition(spec.topic, p, o) for p, o in sorted(offsets.items())]
        )
        res = admin.alter_consumer_group_offsets([req], request_timeout=self.timeout_s)[spec.group_id].result(
            timeout=self.timeout_s
        )
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"altering offsets of group {spec.group_id} failed: {bad[0].error}")

    def create_job(
        self, ctx: DrainContext, d: DrainStatus, attempt: int, runtime_url: str | None = None
    ) -> None:
        """The attempt's Job, or its SparkApplication (spec.drain.launcher sparkApplication).
        `runtime_url`: the CR's warm drain runtime, Ready now (drain_runtime.py); None → cold.
        Sets `ctx.launched_runtime` to the path the Job takes (an adopted Job's own label).
        A warm Job carries the operator's signature of its plan (`RuntimeManager.sign`); when it
        cannot be signed (the CR's key unreadable) the Job goes cold. A Job of that name the CR
        does not own is never adopted (raises). With a k8s master, or a SparkApplication, the CR's
        Spark RPC key Secret is made first (`spark_rpc_key`; raises when it is not the CR's)."""
        args = (ctx.name, ctx.namespace, ctx.uid, ctx.spec, d, attempt, self.settings, ctx.version)
        runtime_auth = None
        if runtime_url:
            try:
                plan_text = drain_plan_for(
                    ctx.spec, d, ctx.uid, attempt
                ).to_json()  # the plan of this attempt
                runtime_auth = self.runtime.sign(
                    ctx.namespace, ctx.name, ctx.uid, plan_text, str(d.id), attempt, self.clock()
                )
            except Exception as err:  # noqa: BLE001 - no signature, no warm hand-over: the Job drains cold
                log.warning(
                    "signing the warm drain plan failed: launching cold",
                    extra={
                        "group": f"{ctx.namespace}/{ctx.name}",
                        "error": f"{type(err).__name__}: {err}"[:300],
                    },
                )
                runtime_url = None
        ctx.launched_runtime = (DrainRuntime.WARM if runtime_url else DrainRuntime.COLD).value
        if self.settings.spark_master or ctx.spec.drain.launcher == "sparkApplication":
            # the driver's pod and its executors mount the CR's Spark RPC key (H4): made before the Job
            # (a SparkApplication always runs executors on Kubernetes, whatever the operator's master)
            self.runtime.rpc_keys.key(ctx.namespace, ctx.name, ctx.uid)
        try:
            if ctx.spec.drain.launcher == "sparkApplication":
                self.custom.create_namespaced_custom_object(
                    SPARK_APP_GROUP,
                    SPARK_APP_VERSION,
                    ctx.namespace,
                    SPARK_APP_PLURAL,
                    build_spark_application(*args),
                )
            else:
                self.batch.create_namespaced_job(
                    ctx.namespace, build_drain_job(*args, runtime_url=runtime_url, runtime_auth=runtime_auth)
                )
        except Exception as err:
            if getattr(err, "status", None) != 409:  # 409: created before a lost status write → adopt
                raise
            ctx.launched_runtime = self._adopted_runtime(
                ctx.namespace, job_name(ctx.name, d.id, attempt), ctx.uid
            )

    def _adopted_runtime(self, namespace: str, name: str, uid: str = "") -> str:
        """warm | cold as the existing Job's label says ("" when unreadable, e.g. a SparkApplication).
        Raises when the Job is readable and not the CR's (its controller ownerReference): a Job made
        by someone else under the attempt's name is never taken for the attempt."""
        try:
            job = self._sanitize(self.batch.read_namespaced_job(name, namespace))
        except Exception:  # noqa: BLE001 - only for the record
            return ""
        refs = [r for r in (job.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")]
        if uid and not any(r.get("uid") == uid for r in refs):
            raise RuntimeError(f"Job {name} exists and is not owned by this BatchConsumerGroup: not adopted")
        return str(((job.get("metadata") or {}).get("labels") or {}).get(RUNTIME_PATH_LABEL) or "")

    def delete_job(self, namespace: str, name: str, launcher: str = "job") -> None:
        """Foreground deletion: the object stays until the garbage collector removed its pods, so
        "absent" (what Cancelled waits for) means no drain process is left. Both kinds with launcher
        sparkApplication (the attempt may predate a launcher change)."""
        calls: list[Callable[[], object]] = [
            lambda: self.batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground")
        ]
        if launcher == "sparkApplication":
            calls.append(
                lambda: self.custom.delete_namespaced_custom_object(
                    SPARK_APP_GROUP,
                    SPARK_APP_VERSION,
                    namespace,
                    SPARK_APP_PLURAL,
                    name,
                    propagation_policy="Foreground",
                )
            )
        for call in calls:
            try:
                call()
            except Exception as err:
                if getattr(err, "status", None) != 404:
                    raise
