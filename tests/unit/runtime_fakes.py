"""Fakes for the warm drain runtime's operator side (lagpilot.act.drain_runtime), shared by
tests/unit/test_drain_runtime_trust.py, test_drain_runtime_operator.py and
test_drain_runtime_on_demand.py: the API groups a `RuntimeManager` calls (each records its calls),
the manager on them, and a drain executor at its launch with a fake batch API and runtime."""

from __future__ import annotations

import base64
import copy
from typing import Any

from lagpilot.act import drain_runtime as rt
from lagpilot.act.drain_manifests import DrainSettings

NS, NAME, CR_UID = "ns1", "orders", "uid-1"


def api_error(status: int, reason: str | None = None) -> Exception:
    """What the kubernetes client raises: an exception with `status` and `reason`."""
    e = RuntimeError(reason or str(status))
    e.status, e.reason = status, reason or str(status)  # type: ignore[attr-defined]
    return e


class FakeCore:
    """Pods (listed as given) and Secrets (created once, stored as the API server stores them)."""

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        self.pods, self.secrets = pods or [], {}
        self.calls: list[tuple[str, str]] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> dict[str, Any]:
        self.calls.append(("list pods", label_selector))
        return {"items": self.pods}

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        self.calls.append(("get secret", name))
        if name not in self.secrets:
            raise api_error(404)
        return self.secrets[name]

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(("create secret", name))
        if name in self.secrets:
            raise api_error(409)
        stored = copy.deepcopy(body)
        stored["data"] = {
            k: base64.b64encode(v.encode()).decode() for k, v in (body.get("stringData") or {}).items()
        }
        stored.pop("stringData", None)
        self.secrets[name] = stored
        return stored


class FakeApps:
    """The runtime Deployment (`current`, None = absent) and its ReplicaSets; applies are server-side
    (field manager lagpilot), deletes foreground, as the manager must send them."""

    def __init__(
        self, current: dict[str, Any] | None = None, rss: list[dict[str, Any]] | None = None
    ) -> None:
        self.current, self.rss = current, rss or []
        self.calls: list[str] = []

    def read_namespaced_deployment(self, name: str, namespace: str) -> dict[str, Any]:
        self.calls.append("get")
        if self.current is None:
            raise api_error(404, "NotFound")
        return self.current

    def list_namespaced_replica_set(self, namespace: str, label_selector: str = "") -> dict[str, Any]:
        self.calls.append("list replicasets")
        return {"items": self.rss}

    def patch_namespaced_deployment(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> None:
        assert kw["field_manager"] == "lagpilot" and kw["_content_type"] == "application/apply-patch+yaml"
        self.calls.append("apply")
        self.current = body

    def delete_namespaced_deployment(self, name: str, namespace: str, propagation_policy: str = "") -> None:
        assert propagation_policy == "Foreground"
        self.calls.append("delete")
        self.current = None


class FakeNet:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create_namespaced_network_policy(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if any(p["metadata"]["name"] == body["metadata"]["name"] for p in self.created):
            raise api_error(409)
        self.created.append(body)
        return body

    def read_namespaced_network_policy(self, name: str, namespace: str) -> dict[str, Any]:
        for p in self.created:
            if p["metadata"]["name"] == name:
                return p
        raise api_error(404)


def runtime_manager(
    current: dict[str, Any] | None = None,
    pods: list[dict[str, Any]] | None = None,
    rss: list[dict[str, Any]] | None = None,
    key_made: bool = True,
) -> Any:
    """A RuntimeManager on FakeCore/FakeApps/FakeNet (`m.core`, `m.apps`, `m.net`). `key_made`: the
    CR's key and NetworkPolicy as already made (test_drain_runtime_trust makes them: False)."""
    from kubernetes import client

    from lagpilot.act.drain_part_key import PartKeys
    from lagpilot.act.key_secret import CrKeys
    from lagpilot.act.spark_rpc_key import SparkRpcKeys

    m = rt.RuntimeManager(client.ApiClient(), DrainSettings())
    m.core, m.apps, m._sanitize = FakeCore(pods), FakeApps(current, rss), (lambda x: x)
    m.net = FakeNet()
    # the key readers hold their client: made again on the fake one
    m._keys = CrKeys(rt.RUNTIME_KEY, m.core, m._sanitize)
    m.rpc_keys, m._part_keys = SparkRpcKeys(m.core, m._sanitize), PartKeys(m.core, m._sanitize)
    if key_made:
        m._keys._keys[(NS, NAME, CR_UID)] = bytes(32)
        m._part_keys._keys[(NS, NAME, CR_UID)] = bytes(32)
        m._policies.add((NS, NAME, CR_UID))
    return m


class FakeBatch:
    """Jobs: created ones kept in `created`; with `existing`, a create answers 409 and a read returns it."""

    def __init__(self, existing: dict[str, Any] | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.existing = existing

    def create_namespaced_job(self, namespace: str, body: dict[str, Any]) -> None:
        if self.existing is not None:
            raise api_error(409, "AlreadyExists")
        self.created.append(body)

    def read_namespaced_job(self, name: str, namespace: str) -> dict[str, Any]:
        assert self.existing is not None
        return self.existing


class FakeRuntime:
    """The executor's view of the runtime: a fixed URL (None: no warm pod) and a signature."""

    def __init__(self, url: str | None) -> None:
        self.url_value, self.asked = url, 0

    def url(self, namespace: str, name: str, uid: str, spec: Any, version: str = "0.1.0") -> str | None:
        self.asked += 1
        return self.url_value

    def sign(
        self,
        namespace: str,
        name: str,
        uid: str,
        plan_text: str,
        drain_id: str,
        attempt: int,
        now: float | None = None,
    ) -> Any:
        from lagpilot_runtime import plan_auth

        return plan_auth.sign(b"k" * 32, plan_text, uid, drain_id, attempt, (now or 0) + 600)


def executor_at_launch(existing_job: dict[str, Any] | None, url: str | None) -> tuple[Any, Any]:
    """A drain executor (tests/unit/test_drain_executor's fake world) whose `create_job` is the real one
    on a FakeBatch (`existing_job`: a Job of the attempt's name already there) with a FakeRuntime
    (`url`), brought to the launch: drain planned, the owner acked and committed at the split.
    Returns (executor, the context of the next reconcile: the launch); `ex.log` holds what it did."""
    from lagpilot.act.drain import DrainExecutor
    from lagpilot.decide.handoff import JobObservation, JobState
    from tests.unit.test_drain_executor import FakeExecutor, ctx, world0

    class Ex(FakeExecutor):
        def create_job(self, ctx: Any, d: Any, attempt: int, runtime_url: str | None = None) -> None:
            DrainExecutor.create_job(self, ctx, d, attempt, runtime_url)  # the real one, on a fake batch API
            self.world["jobs"][f"orders-drain-{d.id}-{attempt}"] = JobObservation(JobState.ACTIVE, 1)

    log: list[tuple[str, Any]] = []
    w = world0()
    ex = Ex(log, w)
    ex.batch = FakeBatch(existing_job)
    ex._sanitize = lambda x: x
    ex.runtime = FakeRuntime(url)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    w["mailbox"][0] = w["mailbox"][0].with_ack(100)
    w["committed"][0] = 500
    return ex, ctx(log, w, w["status"])
