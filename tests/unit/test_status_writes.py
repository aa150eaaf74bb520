"""When the control loop writes the CR status (reconcile/report.status_write / write_status) and the
controller's memory (reconcile/report.save_memory): the status when a field a reader sees changed,
on a CR's first cycle in a process, and as a heartbeat of the per-partition view
(status.partitionStatuses / status.lastObservedTime) when only that moved; the memory ConfigMap on
the first cycle, as a heartbeat, and at once when a fact a restart must not get wrong moved."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.decide import status as status_mod
from lagpilot.decide.status import Condition, merge_conditions
from lagpilot.reconcile.deps import Cache
from lagpilot.reconcile.report import VIEW_KEYS, status_write
from tests.unit.test_handlers_reconcile import T0, World, base_spec

HB = 60.0


def samples(w: World) -> set[int]:
    """The rate-sample counts of the estimator's partitions in the memory ConfigMap."""
    return {p["samples"] for p in w.kube.memory()["estimator"]["partitions"].values()}


def view(at: float, end: int = 100) -> dict[str, Any]:
    return {
        "lastObservedTime": status_mod.format_time(at),
        "partitionStatuses": [
            {
                "partition": 0,
                "committed": 100,
                "end": end,
                "low": 0,
                "lag": end - 100,
                "produceRate": 0.0,
                "consumeRate": 0.0,
            }
        ],
    }


def conds(at: float, ready: str = "True", message: str = "") -> list[dict[str, Any]]:
    return merge_conditions(None, [Condition("Ready", ready, "ScaledToZero", message)], 1, at)


BASE = {"totalLag": 0, "conditions": conds(T0), **view(T0)}
BOTH = set(VIEW_KEYS)


@pytest.mark.parametrize(
    "name, new, written_at, now, want",
    [
        ("nothing changed", BASE, T0, T0 + 10, None),
        ("only the view's time moved (idle), heartbeat due", {**BASE, **view(T0 + 60)}, T0, T0 + 60, None),
        ("only the view moved, heartbeat not due", {**BASE, **view(T0 + 10, 120)}, T0, T0 + 10, None),
        ("only the view moved, first cycle in this process", {**BASE, **view(T0 + 10)}, None, T0 + 10, BOTH),
        ("only the view moved, heartbeat due", {**BASE, **view(T0 + 60, 120)}, T0, T0 + 60, BOTH),
        (
            "a visible field changed: written at once, with the view",
            {**BASE, "totalLag": 5, **view(T0 + 10)},
            T0,
            T0 + 10,
            {"totalLag"} | BOTH,
        ),
        (
            "a condition's message changed",
            {**BASE, "conditions": conds(T0, message="x")},
            T0,
            T0 + 10,
            {"conditions"} | BOTH,
        ),
        (
            "only a lastTransitionTime differs: not a change",
            {**BASE, "conditions": conds(T0 + 10)},
            T0,
            T0 + 10,
            None,
        ),
        (
            "no view at all (paused / failing), nothing changed",
            {"totalLag": 0, "conditions": conds(T0)},
            None,
            T0 + 99,
            None,
        ),
    ],
)
def test_status_write_table(
    name: str, new: dict[str, Any], written_at: float | None, now: float, want: set[str] | None
) -> None:
    patch = status_write(BASE, new, written_at, now, HB)
    if want is None:
        assert patch is None, (name, patch)
    else:
        assert patch is not None and set(patch) == want, (name, patch)
        for k in want:
            assert patch[k] == new[k]


status_values = st.one_of(st.none(), st.integers(0, 3), st.text("ab", max_size=2))
statuses = st.fixed_dictionaries(
    {},
    optional={
        "totalLag": status_values,
        "desiredReplicas": status_values,
        "replicas": status_values,
        "lastObservedTime": st.builds(status_mod.format_time, st.floats(T0, T0 + 100)),
        "partitionStatuses": st.builds(lambda e: view(T0, e)["partitionStatuses"], st.integers(100, 103)),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    old=statuses,
    new=statuses,
    written_at=st.one_of(st.none(), st.floats(T0 - 200, T0 + 100)),
    now=st.floats(T0, T0 + 200),
)
def test_status_write_properties(
    old: dict[str, Any], new: dict[str, Any], written_at: float | None, now: float
) -> None:
    patch = status_write(old, new, written_at, now, HB)
    full = status_mod.status_patch(old, new) or {}
    visible = {k: v for k, v in full.items() if k not in VIEW_KEYS}
    the_view = {k: new[k] for k in VIEW_KEYS if new.get(k) is not None}
    moved = "partitionStatuses" in full
    due = written_at is None or (moved and now - written_at >= HB)
    if visible:
        # every visible change is written at once, with the whole view
        assert patch == {**visible, **{k: v for k, v in full.items() if k in VIEW_KEYS}, **the_view}
    elif the_view and due:
        assert patch == the_view
    else:
        assert patch is None  # in particular: a view-only change is never written before it is due


def test_idle_cycles_write_the_status_once_and_the_memory_as_a_heartbeat() -> None:
    """No lag, nothing produced: the first cycles write the status, the next ones never (nothing a
    reader sees moves); the memory ConfigMap is written on the first cycle and then once a
    heartbeat; a change a reader sees is written at the cycle it happens."""
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)] * 3)
    w.cycle()
    w.cycle(advance=5)  # the second cycle knows the rates: produceRate None -> 0.0 is a real change
    assert len(w.kube.status_patches) == 2 and "produceRate" in w.kube.status_patches[-1]
    assert len(w.kube.configmap_writes) == 1
    for _ in range(10):  # up to 55 s after the first cycle
        w.cycle(advance=5)
    assert len(w.kube.status_patches) == 2, [sorted(p) for p in w.kube.status_patches[2:]]
    assert len(w.kube.configmap_writes) == 1
    w.cycle(advance=5)  # 60 s after the first cycle's memory write: the heartbeat
    assert len(w.kube.configmap_writes) == 2 and len(w.kube.status_patches) == 2
    assert w.kube.memory()["estimator"]["atS"] == w.kafka.clock
    # the estimator kept going through the unwritten cycles: the memory equals that of an operator
    # writing it every cycle
    every = World(base_spec())
    every.deps.status_heartbeat_seconds = 0.0
    every.kafka.set([(0, 100, 100, None)] * 3)
    every.cycle()
    for _ in range(12):
        every.cycle(advance=5)
    assert len(every.kube.configmap_writes) == 13
    assert w.kube.memory() == every.kube.memory()
    assert samples(w) == {12}
    w.kafka.set([(0, 150, 100, None)] * 3)  # records arrive: lag is visible at once, with the view
    w.cycle(advance=5)
    assert len(w.kube.status_patches) == 3
    assert w.kube.status["totalLag"] == 150 and "partitionStatuses" in w.kube.status_patches[-1]
    assert [p["end"] for p in w.kube.status["partitionStatuses"]] == [150] * 3


def test_a_restart_resumes_from_the_written_memory_and_writes_at_once() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)] * 3)
    for _ in range(5):
        w.cycle(advance=5)
    assert len(w.kube.configmap_writes) == 1  # only the first cycle wrote it (see above)
    stored = samples(w)
    w.cache = Cache()  # restart: the unwritten memory is gone; the stored one is at most a heartbeat old
    w.cycle(advance=5)
    assert len(w.kube.configmap_writes) == 2  # a new process writes its first cycle
    assert samples(w) == {n + 1 for n in stored}


def test_the_kafka_secret_is_read_once_a_minute_while_cycles_succeed_and_at_every_failing_attempt() -> None:
    import base64

    from lagpilot.reconcile.observe import SECRET_MAX_AGE_S
    from tests.unit.test_handlers_reconcile import NS, SASL

    def b64(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    w = World(copy.deepcopy(SASL))
    reads: list[str] = []
    orig = w.kube.read_secret_data
    w.kube.read_secret_data = lambda ns, name: reads.append(name) or orig(ns, name)  # type: ignore[method-assign]
    w.kafka.set([(0, 10, 10, None)])
    # missing: every attempt reads it again (the back-off bounds the rate)
    assert not w.cycle().ok and not w.cycle(advance=5).ok
    assert len(reads) == 2
    # created: the next attempt heals, then it is read again only when a minute old
    w.kube.secrets[(NS, "kcreds")] = {"username": b64("svc"), "password": b64("hunter2")}
    assert w.cycle(advance=10).ok
    assert len(reads) == 3
    for _ in range(int(SECRET_MAX_AGE_S // 5) - 1):
        assert w.cycle(advance=5).ok
    assert len(reads) == 3
    assert w.cycle(advance=5).ok  # 60 s after the read
    assert len(reads) == 4
    assert "hunter2" not in repr(w.cache)  # the held credentials never show in a repr
    # a failing cycle (the broker refuses the credentials) makes the next attempt read it again
    from lagpilot.observe.kafka_observe import ObserveError

    w.kafka.error = ObserveError("AuthenticationFailed", "SASL authentication failed on k:9093")
    assert not w.cycle(advance=5).ok
    assert len(reads) == 4  # this attempt still used the held copy
    w.kube.secrets[(NS, "kcreds")] = {"username": b64("svc"), "password": b64("fixed")}
    w.kafka.error = None
    assert w.cycle(advance=5).ok
    assert len(reads) == 5
