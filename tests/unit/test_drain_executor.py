"""The executor's loop with fake Kafka/Kubernetes effects: the order of effects and status writes."""
from __future__ import annotations

from typing import Any

from lagpilot.drain import DrainContext, DrainExecutor, DrainSettings
from lagpilot.handoff import JobObservation, JobState, Offsets
from lagpilot.spec import parse_spec

SPEC = parse_spec({"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g",
                   "batch": {"maxRecords": 10}, "drain": {"splitFactor": 2}})


class FakeExecutor(DrainExecutor):
    def __init__(self, log: list[tuple[str, Any]], world: dict[str, Any]) -> None:
        from kubernetes import client
        super().__init__(client.ApiClient(), DrainSettings(), clock=lambda: 1000.0)
        self.log, self.world = log, world

    def group_empty(self, admin: Any, group_id: str) -> bool | None:
        return self.world["empty"]

    def progress(self, admin: Any, spec: Any, d: Any) -> dict[tuple[int, int], tuple[int, int]]:
        return dict(self.world["progress"])

    def job(self, namespace: str, name: str) -> JobObservation:
        return self.world["jobs"].get(name, JobObservation(JobState.ABSENT))

    def alter_offsets(self, admin: Any, spec: Any, offsets: Any) -> None:
        self.log.append(("alter", dict(offsets)))
        self.world["committed"].update(offsets)

    def create_job(self, ctx: Any, d: Any, attempt: int) -> None:
        self.log.append(("create_job", attempt))
        self.world["jobs"][f"orders-drain-{d.id}-{attempt}"] = JobObservation(JobState.ACTIVE, 1)

    def delete_job(self, namespace: str, name: str) -> None:
        self.log.append(("delete_job", name))


def ctx(log: list[tuple[str, Any]], world: dict[str, Any], raw_drain: Any, wanted: tuple[int, ...] = ()) -> DrainContext:
    def offsets() -> dict[int, Offsets]:
        return {0: Offsets(world["committed"][0], 0, 500)}

    def patch(p: dict[str, Any]) -> None:
        log.append(("status", p["drain"]["phase"], p["drain"]["reason"]))
        world["status"] = p["drain"]

    def scale(n: int) -> None:
        log.append(("scale", n))
        world["replicas"] = n

    return DrainContext(namespace="ns", name="orders", uid="u", generation=1, spec=SPEC, raw_drain=raw_drain,
                        offsets=offsets(), replicas=world["replicas"], wanted=wanted, admin=None, scale=scale,
                        patch_status=patch, emit=lambda *e: log.append(("event", e[1])), reobserve=offsets)


def test_hand_off_order_of_effects_and_writes():
    log: list[tuple[str, Any]] = []
    world: dict[str, Any] = {"empty": False, "progress": {}, "jobs": {}, "committed": {0: 100}, "replicas": 3, "status": None}
    ex = FakeExecutor(log, world)
    r1 = ex.reconcile(ctx(log, world, None, wanted=(0,)))
    # the plan is written before anything moves; then the quiesce; then it waits for the members
    assert log[:3] == [("status", "Planned", "Planned"), ("event", "DrainPlanned"), ("scale", 0)]
    assert r1.condition[0] == "True" and r1.actions[-1] == "None"
    log.clear()
    world["empty"] = True
    r2 = ex.reconcile(ctx(log, world, world["status"]))
    kinds = [e[0] if e[0] != "status" else f"status:{e[1]}:{e[2]}" for e in log if e[0] != "event"]
    assert kinds == ["status:Planned:StartsFixed", "alter", "status:HandedOff:HandedOff", "scale", "create_job",
                     "status:Running:Launched"], kinds
    assert ("alter", {0: 500}) in log  # the group moves exactly to split
    assert ("scale", 3) in log  # the live group gets its replicas back, resuming at split
    assert r2.status["phase"] == "Running" and r2.status["ranges"] == [{"partition": 0, "start": 100, "split": 500}]
