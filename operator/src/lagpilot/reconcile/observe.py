"""The observe phase of a cycle (reconcile.py): the Kafka credentials from spec.kafka and its Secret,
a lease on the cluster's shared clients, the group's observation from the cluster's shared view, the
timestamp of the oldest unprocessed record of each lagging partition, the lag snapshot the
decision step reads, and the warm drain runtime's Deployment and pods (spec.drain.warmRuntime only)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from lagpilot.act.kubeapi import KubeError
from lagpilot.decide import lag as lag_mod
from lagpilot.observe.kafka_observe import Observation, SecretError, admin_config, observe_max_age_s
from lagpilot.reconcile.deps import Cache, Deps, GroupRef
from lagpilot.spec import GroupSpec
from lagpilot_runtime import redaction

SECRET_MAX_AGE_S = 60.0


@dataclasses.dataclass(frozen=True)
class Observed:
    handle: Any  # the leased Kafka handle (kafka_admin), held until the cycle ends
    obs: Observation
    snap: lag_mod.LagSnapshot
    runtime: Any = (
        None  # act.drain_runtime.RuntimeSeen: the warm drain runtime read (None: none, or not read)
    )

    @property
    def runtime_observation(self) -> Any:
        """What the decision step sees of the warm drain runtime (decide.runtime.RuntimeObservation)."""
        return None if self.runtime is None else self.runtime.observation


def kafka_config(ref: GroupRef, spec: GroupSpec, deps: Deps, cache: Cache, now: float) -> dict[str, str]:
    """The admin config from spec.kafka and its Secret. The Secret is read again when the last read
    is SECRET_MAX_AGE_S old, names another Secret, or the last cycle failed (a fixed Secret heals a
    Degraded CR at its next attempt, as before): not one GET per cycle."""
    secret = None
    name = spec.kafka.secret_name
    if name:
        held = cache.secret
        if (
            held is not None
            and held[0] == name
            and cache.failures == 0
            and 0 <= now - held[1] < SECRET_MAX_AGE_S
        ):
            secret = held[2]
        else:
            cache.secret = None
            try:
                secret = deps.kube.read_secret_data(ref.namespace, name)
            except KubeError as err:
                if err.status == 403:
                    raise SecretError(
                        "SecretForbidden", f"the operator may not read Secret {name!r} (RBAC)"
                    ) from None
                raise
            if secret is not None:
                cache.secret = (name, now, dict(secret))
    else:
        cache.secret = None
    conf = admin_config(spec.kafka, secret)
    # the secret values this operator was given: masked in its log lines, events and status text
    redaction.install(
        [conf.get("sasl.password"), conf.get("ssl.key.pem"), conf.get("sasl.oauthbearer.client.secret")]
    )
    return conf


def observe(
    ref: GroupRef,
    spec: GroupSpec,
    deps: Deps,
    cache: Cache,
    now: float,
    leases: contextlib.ExitStack,
    mark: Callable[[str], None],
) -> Observed:
    """Credentials, lease, observation and peek (time marks kafka_config, observe, peek), the
    snapshot, then the warm drain runtime (mark runtime). Raises ObserveError / KubeError for the
    cycle to report."""
    poll = spec.scaling.poll_interval_seconds
    conf = kafka_config(ref, spec, deps, cache, now)
    mark("kafka_config")
    handle = leases.enter_context(deps.admin_pool.lease(ref.key, conf))
    # the cluster's shared view, at most half an interval old: one Kafka read serves every CR's cycle
    obs = deps.observe(
        handle,
        spec.topic,
        spec.group_id,
        deps.kafka_timeout_seconds,
        max_age_s=observe_max_age_s(poll, deps.observe_max_age_seconds),
    )
    mark("observe")

    # the oldest unprocessed record of each lagging partition (its timestamp), best effort
    offsets = [
        lag_mod.PartitionOffsets(p.partition, p.earliest, p.latest, p.committed) for p in obs.partitions
    ]
    oldest: dict[int, float] = {}
    if deps.peek is not None:
        positions = {
            p.partition: lag_mod.consume_position(p) for p in offsets if lag_mod.partition_lag(p) > 0
        }
        oldest = deps.peek(handle, spec.topic, positions, min(2.0, deps.kafka_timeout_seconds))
    mark("peek")

    snap = lag_mod.snapshot(
        obs.observed_at,
        [dataclasses.replace(p, oldest_unprocessed_ts_s=oldest.get(p.partition)) for p in offsets],
        {p.partition: p.capacity.records_per_second for p in obs.partitions if p.capacity is not None},
    )
    runtime = observe_runtime(ref, spec, deps)
    mark("runtime")
    return Observed(handle, obs, snap, runtime)


def observe_runtime(ref: GroupRef, spec: GroupSpec, deps: Deps) -> Any:
    """The warm drain runtime's Deployment and pods, read once a cycle (act.drain_runtime.RuntimeManager
    .observe; its sync reuses the read). None, without any API call, for a CR without spec.drain.warmRuntime
    or an operator without drains; None also on an API error (best effort, logged)."""
    manager = getattr(deps.drain, "runtime", None)
    if manager is None:
        return None
    return manager.observe(ref.namespace, ref.name, ref.uid, spec, deps.version)


def group_consumers(handle: Any, group_id: str, topic: str, timeout_s: float) -> int:
    """Members of the consumer group that have partitions of `topic` assigned (all members when
    the broker gives no assignment), as the broker describes the group: the current replicas of a
    group lagpilot does not run (spec.mode Recommend). Raises ObserveError when it cannot tell."""
    from lagpilot.observe.kafka_observe import ObserveError

    try:
        admin = handle.safe_admin(timeout_s)
        desc = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)[group_id].result(
            timeout=timeout_s
        )
    except Exception as err:  # noqa: BLE001 - named in the Degraded condition
        raise ObserveError(
            "GroupDescribeFailed",
            f"describing consumer group {group_id!r} failed: "
            f"{type(err).__name__}: {redaction.redact(str(err))}",
        ) from None
    n = 0
    for m in desc.members or ():
        tps = getattr(getattr(m, "assignment", None), "topic_partitions", None)
        if tps is None or any(tp.topic == topic for tp in tps):
            n += 1
    return n
