"""When the control loop writes the CR status (reconcile_report.status_write / write_status): only when a
field a reader sees changed, on a CR's first cycle in a process, and as a heartbeat of the memory
(status.estimator / status.scalingHistory) while nothing else moves."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagpilot.reconcile_deps import Cache
from lagpilot.reconcile_report import MEMORY_KEYS, status_write, with_memory
from lagpilot.decide import status as status_mod
from lagpilot.decide import status_codec
from lagpilot.decide.status import merge_conditions, Condition

from tests.unit.test_handlers_reconcile import T0, World, base_spec

HB = 60.0


def samples(status: dict[str, Any]) -> set[int]:
    """The rate-sample counts of status.estimator's partitions (whatever its stored form)."""
    return {p["samples"] for p in status_codec.estimator_from_status(status["estimator"])["partitions"].values()}


def est(at: float, samples: int = 1) -> dict[str, Any]:
    return {"at": status_mod.format_time(at), "capacityPerReplica": None, "partitions": {"0": {"samples": samples}}}


def conds(at: float, ready: str = "True", message: str = "") -> list[dict[str, Any]]:
    return merge_conditions(None, [Condition("Ready", ready, "ScaledToZero", message)], 1, at)


BASE = {"totalLag": 0, "conditions": conds(T0), "estimator": est(T0), "scalingHistory": {"recommendations": "0.000:0"}}


@pytest.mark.parametrize("name, new, written_at, now, want", [
    ("nothing changed", BASE, T0, T0 + 10, None),
    ("only the memory moved, heartbeat not due", {**BASE, "estimator": est(T0 + 10, 2)}, T0, T0 + 10, {"estimator"}),
    ("only the memory moved, first cycle in this process", {**BASE, "estimator": est(T0 + 10, 2)}, None, T0 + 10,
     {"estimator", "scalingHistory"}),
    ("only the memory moved, heartbeat due", {**BASE, "estimator": est(T0 + 60, 7)}, T0, T0 + 60,
     {"estimator", "scalingHistory"}),
    ("a visible field changed: written at once, with the memory", {**BASE, "totalLag": 5, "estimator": est(T0 + 10, 2)},
     T0, T0 + 10, {"totalLag", "estimator", "scalingHistory"}),
    ("a condition's message changed", {**BASE, "conditions": conds(T0, message="x")}, T0, T0 + 10,
     {"conditions", "estimator", "scalingHistory"}),
    ("only a lastTransitionTime differs: not a change", {**BASE, "conditions": conds(T0 + 10)}, T0, T0 + 10, None),
    ("no memory at all (paused / failing), nothing changed", {"totalLag": 0, "conditions": conds(T0)}, None, T0 + 99, None),
])
def test_status_write_table(name: str, new: dict[str, Any], written_at: float | None, now: float,
                            want: set[str] | None) -> None:
    patch = status_write(BASE, new, written_at, now, HB)
    if want is None or want == {"estimator"}:  # {"estimator"}: the memory moved but is not due
        assert patch is None, (name, patch)
    else:
        assert patch is not None and set(patch) == want, (name, patch)
        for k in want:
            assert patch[k] == new[k]


status_values = st.one_of(st.none(), st.integers(0, 3), st.text("ab", max_size=2))
statuses = st.fixed_dictionaries({}, optional={
    "totalLag": status_values, "desiredReplicas": status_values, "replicas": status_values,
    "estimator": st.builds(est, st.floats(T0, T0 + 100), st.integers(0, 5)),
    "scalingHistory": st.builds(lambda r: {"recommendations": r}, st.text("0123", max_size=3)),
})


@settings(max_examples=300, deadline=None)
@given(old=statuses, new=statuses, written_at=st.one_of(st.none(), st.floats(T0 - 200, T0 + 100)),
       now=st.floats(T0, T0 + 200))
def test_status_write_properties(old: dict[str, Any], new: dict[str, Any], written_at: float | None, now: float) -> None:
    patch = status_write(old, new, written_at, now, HB)
    full = status_mod.status_patch(old, new) or {}
    visible = {k: v for k, v in full.items() if k not in MEMORY_KEYS}
    memory = {k: new[k] for k in MEMORY_KEYS if new.get(k) is not None}
    due = written_at is None or now - written_at >= HB
    if visible:
        # every visible change is written at once, with the whole memory
        assert patch == {**visible, **{k: v for k, v in full.items() if k in MEMORY_KEYS}, **memory}
    elif memory and due:
        assert patch == memory
    else:
        assert patch is None  # in particular: a memory-only change is never written before it is due


def test_idle_cycles_write_the_status_only_as_a_heartbeat() -> None:
    """No lag, nothing produced: the first cycle writes, the next ones write nothing until the
    heartbeat; a change a reader sees is written at the cycle it happens."""
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)] * 3)
    w.cycle()
    w.cycle(advance=5)  # the second cycle knows the rates: produceRate None -> 0.0 is a real change
    assert len(w.kube.status_patches) == 2 and "produceRate" in w.kube.status_patches[-1]
    for _ in range(11):  # 55 s of 5 s cycles
        w.cycle(advance=5)
    assert len(w.kube.status_patches) == 2, [sorted(p) for p in w.kube.status_patches[2:]]
    w.cycle(advance=5)  # 60 s after the last write: the heartbeat carries the memory only
    assert len(w.kube.status_patches) == 3 and set(w.kube.status_patches[-1]) == set(MEMORY_KEYS)
    at = status_mod.parse_time(w.kube.status["estimator"]["at"])
    assert at == w.kafka.clock
    # the estimator kept going through the unwritten cycles: the memory equals that of an operator
    # writing it every cycle
    every = World(base_spec())
    every.deps.status_heartbeat_seconds = 0.0
    every.kafka.set([(0, 100, 100, None)] * 3)
    every.cycle()
    for _ in range(13):
        every.cycle(advance=5)
    assert len(every.kube.status_patches) == 14
    assert {k: w.kube.status[k] for k in MEMORY_KEYS} == {k: every.kube.status[k] for k in MEMORY_KEYS}
    assert samples(w.kube.status) == {13}
    w.kafka.set([(0, 150, 100, None)] * 3)  # records arrive: lag is visible at once
    w.cycle(advance=5)
    assert len(w.kube.status_patches) == 4
    assert w.kube.status["totalLag"] == 150 and "estimator" in w.kube.status_patches[-1]


def test_a_restart_resumes_from_the_written_memory_and_writes_at_once() -> None:
    w = World(base_spec())
    w.kafka.set([(0, 100, 100, None)] * 3)
    for _ in range(5):
        w.cycle(advance=5)
    assert len(w.kube.status_patches) == 2  # only the first two cycles wrote (see above)
    stored = samples(w.kube.status)
    w.cache = Cache()  # restart: the unwritten memory is gone; the stored one is at most a heartbeat old
    w.cycle(advance=5)
    assert len(w.kube.status_patches) == 3  # a new process writes its first cycle
    assert samples(w.kube.status) == {n + 1 for n in stored}


def test_memory_never_shadows_another_writers_fields() -> None:
    """The cycle's unwritten memory replaces only the memory keys of the live status: a drain that
    another writer recorded (the adoption, the executor) is what the next cycle sees."""
    live = {"estimator": est(T0), "drain": {"id": 2, "phase": "Planned"}, "totalLag": 3}
    memory = {"estimator": est(T0 + 30, 4), "scalingHistory": {"recommendations": "0.000:1"}, "drain": {"id": 1}}
    got = with_memory(live, memory)
    assert got["drain"] == {"id": 2, "phase": "Planned"} and got["totalLag"] == 3
    assert got["estimator"] == memory["estimator"] and got["scalingHistory"] == memory["scalingHistory"]
    older = {"estimator": est(T0 - 30, 9)}
    assert with_memory(live, older) == live  # a live memory newer than ours (another process) wins
    assert with_memory(copy.deepcopy(live), None) == live


def test_the_kafka_secret_is_read_once_a_minute_while_cycles_succeed_and_at_every_failing_attempt() -> None:
    import base64

    from lagpilot.reconcile_observe import SECRET_MAX_AGE_S
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
