"""The warm drain runtime on demand, operator side (spec.drain.warmRuntimeCooldownSeconds): the
runtime Deployment follows the step's `runtime_replicas` (0/1; None: deleted), a scale-up from 0
stamps `lagpilot.io/drain-runtime-scaled-up-at`, the cycle reads the Deployment and its pods once
(`RuntimeManager.observe`) into the step's `RuntimeObservation`, and the sync reuses that read.
The rule itself (when 0/1, when a split waits) is decide/runtime.py's, tested in tests/unit/test_step.py.
Pure and fakes: no cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lagpilot.act import drain_runtime as rt
from lagpilot.decide.handoff import condition
from lagpilot.decide.runtime import RuntimeObservation
from lagpilot.decide.status import format_time, parse_time
from lagpilot_runtime import plan_auth
from tests.unit.runtime_fakes import FakeApps, FakeCore, runtime_manager
from tests.unit.test_drain_runtime_operator import pod, spec_with

NOW = 1_790_000_000.0
# with the fingerprint of the key _manager gives the CR (the pod template follows the key)
D = rt.build_runtime_deployment(
    "orders", "ns1", "uid-1", spec_with(warmRuntimeCooldownSeconds=5), key_id=plan_auth.key_id(bytes(32))
)
HASH = rt.manifest_hash(D)
EARLIER = format_time(NOW - 300)


def dep(replicas: int, stamp: str | None = EARLIER, deleting: bool = False) -> dict[str, Any]:
    out = copy.deepcopy(D)
    out["spec"]["replicas"] = replicas
    if stamp is not None:
        out["metadata"]["annotations"][rt.SCALED_UP_ANNOTATION] = stamp
    if deleting:
        out["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return out


def stamp_of(m: dict[str, Any]) -> str | None:
    return m["metadata"]["annotations"].get(rt.SCALED_UP_ANNOTATION)


# ---- the decided replica count and the scale-up stamp (pure) -----------------------------------------

WITH = [  # (existing, decided replicas, the stamp the apply carries)
    ("create-at-1", None, 1, format_time(NOW)),
    ("create-at-0", None, 0, None),
    ("scale-up-from-0", dep(0), 1, format_time(NOW)),
    ("scale-up-from-0-never-stamped", dep(0, stamp=None), 1, format_time(NOW)),
    ("stay-at-1-keeps-the-stamp", dep(1), 1, EARLIER),
    ("scale-down-keeps-the-stamp", dep(1), 0, EARLIER),
    ("stay-at-0", dep(0), 0, EARLIER),
    ("at-1-without-stamp-is-stamped-now", dep(1, stamp=None), 1, format_time(NOW)),  # an older operator's
    ("at-1-unreadable-stamp-is-stamped-now", dep(1, stamp="yesterday"), 1, format_time(NOW)),
    ("at-0-without-stamp-stays-without", dep(0, stamp=None), 0, None),
    ("being-deleted-counts-as-0", dep(1, deleting=True), 1, format_time(NOW)),
]


@pytest.mark.parametrize("existing,replicas,stamp", [c[1:] for c in WITH], ids=[c[0] for c in WITH])
def test_with_replicas(existing: Any, replicas: int, stamp: str | None) -> None:
    before = copy.deepcopy(D)
    out = rt.with_replicas(D, replicas, existing, NOW)
    assert out["spec"]["replicas"] == replicas and stamp_of(out) == stamp
    assert D == before  # the built manifest is not modified
    assert rt.manifest_hash(out) == HASH  # the pod template (and its config hash) is untouched
    assert out["spec"]["template"] == D["spec"]["template"]


SYNC = [  # (decided replicas or None, existing, attempt running, action)
    ("absent-want-0", 0, None, False, rt.Sync.APPLY),  # created with 0 replicas: the Deployment stays
    ("absent-want-1", 1, None, False, rt.Sync.APPLY),
    ("at-0-want-0", 0, dep(0), False, rt.Sync.NONE),
    ("at-1-want-1", 1, dep(1), False, rt.Sync.NONE),
    ("at-0-want-1", 1, dep(0), False, rt.Sync.APPLY),
    ("at-0-want-1-running", 1, dep(0), True, rt.Sync.APPLY),  # a scale-up takes no runtime from an attempt
    ("at-1-want-0", 0, dep(1), False, rt.Sync.APPLY),
    ("at-1-want-0-running", 0, dep(1), True, rt.Sync.DEFER),  # a warm attempt keeps its runtime
    ("at-1-never-stamped", 1, dep(1, stamp=None), False, rt.Sync.APPLY),  # stamped once, then NONE
    ("at-1-never-stamped-running", 1, dep(1, stamp=None), True, rt.Sync.DEFER),
    ("none-present", None, dep(1), False, rt.Sync.DELETE),
    ("none-present-running", None, dep(0), True, rt.Sync.DEFER),
    ("none-absent", None, None, False, rt.Sync.NONE),
    ("being-deleted-want-1", 1, dep(1, deleting=True), False, rt.Sync.NONE),
]


@pytest.mark.parametrize("replicas,existing,running,want", [c[1:] for c in SYNC], ids=[c[0] for c in SYNC])
def test_sync_action_follows_the_decided_replicas(
    replicas: int | None, existing: Any, running: bool, want: rt.Sync
) -> None:
    desired = None if replicas is None else rt.with_replicas(D, replicas, existing, NOW)
    assert rt.sync_action(desired, existing, running) is want


def test_spec_change_at_0_replicas_is_applied_even_while_running_only_when_scaling_up() -> None:
    stale = dep(0)
    stale["metadata"]["annotations"][rt.CONFIG_ANNOTATION] = "old"
    assert rt.sync_action(rt.with_replicas(D, 0, stale, NOW), stale, True) is rt.Sync.DEFER
    assert rt.sync_action(rt.with_replicas(D, 0, stale, NOW), stale, False) is rt.Sync.APPLY


# ---- the step's observation (pure) -----------------------------------------------------------------

OBS = [  # (Deployment, pods, observation)
    ("absent", None, [], RuntimeObservation(0, False, None)),
    ("at-0", dep(0), [], RuntimeObservation(0, False, parse_time(EARLIER))),
    ("at-1-no-pod", dep(1), [], RuntimeObservation(1, False, parse_time(EARLIER))),
    (
        "at-1-pod-not-ready",
        dep(1),
        [pod("a", ready=False, config=HASH)],
        RuntimeObservation(1, False, parse_time(EARLIER)),
    ),
    ("at-1-ready", dep(1), [pod("a", config=HASH)], RuntimeObservation(1, True, parse_time(EARLIER))),
    (
        "at-1-ready-old-config",
        dep(1),
        [pod("a", config="old")],
        RuntimeObservation(1, False, parse_time(EARLIER)),
    ),
    (
        "at-1-ready-but-deleting",
        dep(1),
        [pod("a", config=HASH, deleting=True)],
        RuntimeObservation(1, False, parse_time(EARLIER)),
    ),
    (
        "unreadable-stamp",
        dep(1, stamp="yesterday"),
        [pod("a", config=HASH)],
        RuntimeObservation(1, True, None),
    ),
    ("being-deleted", dep(1, deleting=True), [], RuntimeObservation(0, False, parse_time(EARLIER))),
]


@pytest.mark.parametrize("existing,pods,want", [c[1:] for c in OBS], ids=[c[0] for c in OBS])
def test_observation_of(existing: Any, pods: list[dict[str, Any]], want: RuntimeObservation) -> None:
    assert rt.observation_of(existing, pods, 31000, HASH) == want


# ---- the I/O edge: one read a cycle, reused by the sync ------------------------------------------------


def _manager(
    current: dict[str, Any] | None, pods: list[dict[str, Any]] | None = None
) -> tuple[rt.RuntimeManager, FakeApps, FakeCore]:
    m = runtime_manager(current, pods)
    return m, m.apps, m.core


def test_observe_reads_the_pods_only_while_there_are_replicas() -> None:
    on_demand = spec_with(warmRuntimeCooldownSeconds=5)
    m, apps, core = _manager(None)
    seen = m.observe("ns1", "orders", "uid-1", on_demand)
    assert (
        seen is not None and seen.existing is None and seen.observation == RuntimeObservation(0, False, None)
    )
    assert apps.calls == ["get"] and core.calls == []
    m, apps, core = _manager(dep(0))
    assert m.observe("ns1", "orders", "uid-1", on_demand).observation.replicas == 0  # type: ignore[union-attr]
    assert apps.calls == ["get"] and core.calls == []
    m, apps, core = _manager(dep(1), [pod("a", ip="127.0.0.1", config=HASH)])
    seen = m.observe("ns1", "orders", "uid-1", on_demand)
    assert seen is not None and seen.observation == RuntimeObservation(1, True, parse_time(EARLIER))
    assert apps.calls == ["get"] and core.calls == [
        ("list pods", "app.kubernetes.io/name=lagpilot-drain-runtime,lagpilot.io/drain-runtime-of=orders")
    ]


def test_observe_without_a_warm_runtime_makes_no_call_and_errors_are_none() -> None:
    m, apps, core = _manager(dep(1))
    for _ in range(3):
        assert m.observe("ns1", "orders", "uid-1", spec_with(warmRuntime=False)) is None
        assert m.observe("ns1", "orders", "uid-1", spec_with(enabled=False)) is None
    assert apps.calls == [] and core.calls == []

    def forbidden(*a: Any, **k: Any) -> None:
        err = RuntimeError("Forbidden")
        err.status = 403  # type: ignore[attr-defined]
        raise err

    core.list_namespaced_pod = forbidden  # type: ignore[method-assign]
    assert m.observe("ns1", "orders", "uid-1", spec_with(warmRuntimeCooldownSeconds=5)) is None


def test_sync_scales_0_1_0_with_the_stamp_reusing_the_cycles_read() -> None:
    on_demand = spec_with(warmRuntimeCooldownSeconds=5)
    events: list[tuple[str, str, str]] = []
    m, apps, _ = _manager(None)

    def cycle(replicas: int | None, now: float, running: bool = False) -> rt.SyncResult:
        seen = m.observe("ns1", "orders", "uid-1", on_demand)
        return m.sync(
            "ns1",
            "orders",
            "uid-1",
            on_demand,
            running,
            emit=lambda *e: events.append(e),
            replicas=replicas,
            seen=seen,
            now=now,
        )

    assert cycle(0, NOW).action is rt.Sync.APPLY  # created with 0 replicas, no stamp
    assert apps.current["spec"]["replicas"] == 0 and stamp_of(apps.current) is None
    assert cycle(0, NOW + 2).action is rt.Sync.NONE
    assert cycle(1, NOW + 4).action is rt.Sync.APPLY  # the burst: 0 -> 1, stamped in the same apply
    assert apps.current["spec"]["replicas"] == 1 and stamp_of(apps.current) == format_time(NOW + 4)
    assert cycle(1, NOW + 6).action is rt.Sync.NONE
    assert cycle(0, NOW + 8, running=True).action is rt.Sync.DEFER  # an attempt runs: kept
    assert cycle(0, NOW + 10).action is rt.Sync.APPLY  # cooldown over: 1 -> 0, the stamp kept
    assert apps.current["spec"]["replicas"] == 0 and stamp_of(apps.current) == format_time(NOW + 4)
    assert cycle(1, NOW + 30).action is rt.Sync.APPLY  # the next burst: a new stamp
    assert stamp_of(apps.current) == format_time(NOW + 30)
    # one GET a cycle (observe), the sync reads nothing more
    assert apps.calls.count("get") == 7 and apps.calls.count("apply") == 4, apps.calls
    assert [e[2].split(" Deployment")[0] for e in events] == [
        "created",
        "scaled 0->1",
        "scaled 1->0",
        "scaled 0->1",
    ]
    assert cycle(None, NOW + 40).action is rt.Sync.DELETE  # no runtime any more (the step says None)


def test_always_mode_is_one_replica_as_before() -> None:
    m, apps, _ = _manager(None)
    always = spec_with()
    assert m.sync("ns1", "orders", "uid-1", always, False).action is rt.Sync.APPLY  # default: 1
    assert apps.current["spec"]["replicas"] == 1
    assert m.sync("ns1", "orders", "uid-1", always, False, replicas=1).action is rt.Sync.NONE


# ---- the cycle: the observation reaches the step, the step's count reaches the sync -------------------


class _FakeRuntime:
    def __init__(self, observation: RuntimeObservation | None) -> None:
        self.observation = observation
        self.observed: list[str] = []
        self.synced: list[dict[str, Any]] = []

    def observe(self, namespace: str, name: str, uid: str, spec: Any, version: str = "") -> Any:
        self.observed.append(f"{namespace}/{name}")
        if self.observation is None:
            return None
        return rt.RuntimeSeen({"read": len(self.observed)}, self.observation)

    def sync(
        self,
        namespace: str,
        name: str,
        uid: str,
        spec: Any,
        running: bool,
        version: str = "",
        emit: Any = None,
        replicas: int | None = 1,
        seen: Any = None,
        now: float | None = None,
    ) -> Any:
        self.synced.append({"replicas": replicas, "seen": seen, "now": now, "running": running})
        return rt.SyncResult(rt.Sync.NONE, "x")


class _FakeExecutor:
    timeout_s = 1.0

    def __init__(self, runtime: _FakeRuntime) -> None:
        self.runtime = runtime
        self.wanted: list[tuple[int, ...]] = []

    def handoff_key_id(self, namespace: str, name: str, uid: str) -> str:
        return "kid-test"  # the per-CR hand-off key's fingerprint (M8); this test is about the runtime

    def reconcile(self, ctx: Any) -> Any:
        from lagpilot.act.drain import DrainResult

        self.wanted.append(tuple(ctx.wanted))
        return DrainResult(None, condition(None))


def _world(drain: dict[str, Any], observation: RuntimeObservation | None) -> Any:
    from tests.unit.test_handlers_reconcile import World, base_spec

    spec = base_spec(maxReplicas=3)
    spec["drain"] = {"enabled": True, "minBacklogRecords": 1000, **drain}
    w = World(spec)
    w.deps.drain = _FakeExecutor(_FakeRuntime(observation))
    w.deps.kafka_timeout_seconds = 0.1
    return w


def _burst(w: Any, cycles: int = 4) -> None:
    """3 partitions at their cap, 10 records/s each, a backlog the SLA (60 s) cannot see cleared."""
    for i in range(cycles):
        w.kafka.set([(0, 50_000 + 500 * i, 1000 + 20 * i, 10.0)] * 3)
        assert w.cycle(5.0).ok


@pytest.mark.parametrize(
    "drain,observation,replicas,waits",
    [
        # on demand, the runtime at 0: the drain is due but waits (its split once Ready); scaled to 1
        ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 5}, RuntimeObservation(0, False, None), 1, True),
        # on demand, Ready: the drain goes ahead (warm)
        ({"warmRuntime": True, "warmRuntimeCooldownSeconds": 5}, RuntimeObservation(1, True, NOW), 1, False),
        # always: 1, the split never waits
        ({"warmRuntime": True}, RuntimeObservation(0, False, None), 1, False),
        # no runtime: None (deleted if present), no read
        ({"warmRuntime": False}, None, None, False),
    ],
)
def test_cycle_passes_the_observation_to_the_step_and_its_count_to_the_sync(
    drain: dict[str, Any], observation: RuntimeObservation | None, replicas: int | None, waits: bool
) -> None:
    w = _world(drain, observation)
    _burst(w)
    ex: _FakeExecutor = w.deps.drain
    assert ex.runtime.observed == ["team-a/orders"] * 4  # one read a cycle
    assert [s["replicas"] for s in ex.runtime.synced][-1] == replicas
    last = ex.runtime.synced[-1]
    assert last["now"] == w.kafka.clock
    if observation is not None:
        assert last["seen"] == rt.RuntimeSeen({"read": 4}, observation)  # this cycle's read, reused
    scaling = w.cond("Scaling")["message"]
    if waits:
        assert not any(ex.wanted), ex.wanted
        assert "waits for the warm drain runtime" in scaling, scaling
    else:
        assert any(ex.wanted), (ex.wanted, scaling)  # the drain was due (the control case)
        assert "waits for the warm drain runtime" not in scaling
