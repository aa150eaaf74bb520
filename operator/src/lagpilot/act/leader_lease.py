"""Leader election: the Lease calls (coordination.k8s.io/v1 leases: get, create, update) and the
standby/renew loops; the decisions are `lagpilot.decide.leader` (pure). Used by `run.py`: the
operator starts kopf only once it holds its Lease(s), renews them in a thread, and exits at once
when it cannot renew within the renew deadline (the restarted container stands by), so two
instances never act on the same CRs. A graceful stop releases the Lease: the standby takes over
within one retry period instead of one lease duration.

Every write is an optimistic-concurrency write (create, or update with the resourceVersion read):
two standbys racing for an expired Lease cannot both win (the loser gets a 409).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lagpilot.decide.leader import LeaseRecord, LeaseTiming, Step, next_step

log = logging.getLogger(__name__)
DEFAULT_LEASE_NAME = "lagpilot-operator"


def _micro_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        api_client: Any,
        namespaces: Sequence[str],
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self._sanitize = api_client.sanitize_for_serialization
        self.namespaces = sorted(set(namespaces))
        self.name, self.identity = name, identity
        self.timing = timing or LeaseTiming()
        self.clock, self.wall = clock, wall
        self._seen: dict[str, tuple[str, float]] = {}  # namespace -> (resourceVersion, first seen at)
        self.renewed: dict[str, float] = {}  # namespace -> last successful acquire/renew (clock)

    # -- one attempt -------------------------------------------------------------------------------
    def _read(self, ns: str) -> dict[str, Any] | None:
        try:
            return dict(self._sanitize(self.api.read_namespaced_lease(self.name, ns)))
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return None
            raise

    def try_once(self, ns: str) -> tuple[bool, str]:
        """(held after this attempt, the holder seen). Raises on an API error other than a lost race."""
        lease = self._read(ns)
        now = self.clock()
        record = self._record(ns, lease, now)
        step, _left = next_step(record, self.identity, self._seen.get(ns, ("", now))[1], now)
        if step is Step.WAIT:
            assert record is not None
            return False, record.holder
        try:
            self._write(ns, step, lease, record)
        except Exception as err:
            if getattr(err, "status", None) in (409, 422):  # another instance wrote first: re-read next time
                return False, record.holder if record is not None else ""
            raise
        if step is Step.TAKE:
            log.info(
                "leader lease taken over",
                extra={
                    "namespace": ns,
                    "lease": self.name,
                    "identity": self.identity,
                    "from": record.holder if record else "",
                },
            )
        self.renewed[ns] = now
        return True, self.identity

    def _record(self, ns: str, lease: dict[str, Any] | None, now: float) -> LeaseRecord | None:
        """The Lease as read (None: absent); notes when its resourceVersion last changed (the
        holder's renewals are judged on this instance's clock, as client-go does)."""
        if lease is None:
            return None
        spec = lease.get("spec") or {}
        rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        if self._seen.get(ns, ("", 0.0))[0] != rv:
            self._seen[ns] = (rv, now)
        return LeaseRecord(
            str(spec.get("holderIdentity") or ""),
            float(spec.get("leaseDurationSeconds") or self.timing.duration_s),
            int(spec.get("leaseTransitions") or 0),
        )

    def _write(self, ns: str, step: Step, lease: dict[str, Any] | None, record: LeaseRecord | None) -> None:
        """Create, take over or renew the Lease (a replace guarded by the resourceVersion read)."""
        stamp = _micro_time(self.wall())
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.timing.duration_s),
            "renewTime": stamp,
        }
        if step is Step.CREATE:
            spec.update(acquireTime=stamp, leaseTransitions=0)
            self.api.create_namespaced_lease(
                ns,
                {  # type: ignore[arg-type]  # a dict body: the client serializes it as is
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": ns},
                    "spec": spec,
                },
            )
            return
        assert lease is not None and record is not None
        old = lease.get("spec") or {}
        if step is Step.TAKE:
            spec.update(acquireTime=stamp, leaseTransitions=record.transitions + 1)
        else:
            spec.update(acquireTime=old.get("acquireTime") or stamp, leaseTransitions=record.transitions)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": ns,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": spec,
        }
        self.api.replace_namespaced_lease(self.name, ns, body)  # type: ignore[arg-type]  # a dict body

    # -- the loops -----------------------------------------------------------------------------------
    def acquire(self, stop: threading.Event, on_wait: Callable[[str, str], None] | None = None) -> bool:
        """Block until every Lease is held (sorted order), trying every retry period; False when
        `stop` was set first. `on_wait(namespace, holder)` once per namespace it had to wait for."""
        for ns in self.namespaces:
            waited = False
            while not stop.is_set():
                try:
                    held, holder = self.try_once(ns)
                except Exception as err:  # noqa: BLE001 - the API server away: keep trying
                    log.warning(
                        "leader lease attempt failed", extra={"namespace": ns, "error": str(err)[:300]}
                    )
                    held, holder = False, "?"
                if held:
                    break
                if not waited and on_wait is not None:
                    on_wait(ns, holder)
                waited = True
                stop.wait(self.timing.retry_s)
            if stop.is_set():
                return False
        return True

    def renew_forever(self, stop: threading.Event, on_lost: Callable[[str, str], None]) -> None:
        """Renew every Lease every retry period until `stop`; `on_lost(namespace, why)` (which must
        stop this process's reconciling) when another holder is seen, or when a Lease could not be
        renewed for the renew deadline."""
        while not stop.wait(self.timing.retry_s):
            for ns in self.namespaces:
                try:
                    held, holder = self.try_once(ns)
                except Exception as err:  # noqa: BLE001
                    held, holder = False, ""
                    log.warning(
                        "leader lease renewal failed", extra={"namespace": ns, "error": str(err)[:300]}
                    )
                if held:
                    continue
                if holder and holder != self.identity:
                    on_lost(ns, f"the Lease is held by {holder}")
                    return
                if self.clock() - self.renewed.get(ns, 0.0) >= self.timing.renew_deadline_s:
                    on_lost(ns, f"not renewed for {self.timing.renew_deadline_s:.0f}s")
                    return

    def release(self) -> None:
        """Give the Leases up (graceful stop): holder cleared, so a standby takes over at its next try."""
        for ns in self.namespaces:
            try:
                lease = self._read(ns)
                spec = (lease or {}).get("spec") or {}
                if lease is None or spec.get("holderIdentity") != self.identity:
                    continue
                spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=_micro_time(self.wall()))
                self.api.replace_namespaced_lease(
                    self.name,
                    ns,
                    {  # type: ignore[arg-type]  # a dict body: the client serializes it as is
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {
                            "name": self.name,
                            "namespace": ns,
                            "resourceVersion": lease["metadata"]["resourceVersion"],
                        },
                        "spec": spec,
                    },
                )
                log.info("leader lease released", extra={"namespace": ns, "lease": self.name})
            except Exception as err:  # noqa: BLE001 - it expires by itself
                log.warning(
                    "releasing the leader lease failed", extra={"namespace": ns, "error": str(err)[:300]}
                )
