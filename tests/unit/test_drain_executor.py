"""The executor's loop with fake Kafka/Kubernetes effects: the order of observations, effects and
status writes of the mailbox hand-off."""

from __future__ import annotations

from typing import Any

from lagpilot.act.drain import DrainContext, DrainExecutor, DrainSettings
from lagpilot.decide.handoff import JobObservation, JobState, Offsets
from lagpilot.spec import parse_spec

SPEC = parse_spec(
    {
        "kafka": {"bootstrapServers": "k:9092"},
        "topic": "t",
        "groupId": "g",
        "batch": {"maxRecords": 10},
        "drain": {"splitFactor": 2},
    }
)


class FakeExecutor(DrainExecutor):
    def __init__(self, log: list[tuple[str, Any]], world: dict[str, Any]) -> None:
        from kubernetes import client

        super().__init__(client.ApiClient(), DrainSettings(), clock=lambda: world["now"])
        self.ack_wait_s = 0.0
        self.log, self.world = log, world

    def group_empty(self, admin: Any, group_id: str) -> bool | None:
        self.log.append(("read", "members"))
        return self.world["empty"]

    def handoff_key(self, namespace: str, name: str, uid: str) -> bytes:
        return bytes(32)

    def mailbox(self, admin: Any, spec: Any, partitions: Any, *, key: bytes) -> dict[int, Any]:
        self.log.append(("read", "mailbox"))
        return {p: self.world["mailbox"].get(p) for p in partitions}

    def write_mailbox(self, admin: Any, spec: Any, entries: Any, *, key: bytes) -> None:
        if entries:
            self.log.append(("mailbox", {p: e.encode() for p, e in entries.items()}))
            self.world["mailbox"].update(entries)

    def progress(
        self, admin: Any, spec: Any, d: Any, lost_out: Any = None, *, owner: str, attempts_out: Any = None
    ) -> dict[tuple[int, int], tuple[int, int]]:
        if lost_out is not None:
            lost_out.update(self.world.get("lost") or {})
        if attempts_out is not None:
            attempts_out.update(self.world.get("attempts") or {})
        return dict(self.world["progress"])

    def job(self, namespace: str, name: str, launcher: str = "job") -> JobObservation:
        return self.world["jobs"].get(name, JobObservation(JobState.ABSENT))

    def alter_offsets(self, admin: Any, spec: Any, offsets: Any) -> None:
        if not self.world["empty"]:
            raise RuntimeError("UNKNOWN_MEMBER_ID: group not empty")
        self.log.append(("alter", dict(offsets)))
        self.world["committed"].update(offsets)

    def create_job(self, ctx: Any, d: Any, attempt: int, runtime_url: str | None = None) -> None:
        self.log.append(("create_job", attempt))
        self.world.setdefault("runtime_urls", []).append(runtime_url)
        self.world["jobs"][f"orders-drain-{d.id}-{attempt}"] = JobObservation(JobState.ACTIVE, 1)

    def delete_job(self, namespace: str, name: str, launcher: str = "job") -> None:
        self.log.append(("delete_job", name))


def ctx(
    log: list[tuple[str, Any]], world: dict[str, Any], raw_drain: Any, wanted: tuple[int, ...] = ()
) -> DrainContext:
    def offsets() -> dict[int, Offsets]:
        return {0: Offsets(world["committed"][0], 0, 500)}

    def reobserve() -> dict[int, Offsets]:
        log.append(("read", "own"))
        return offsets()

    def patch(p: dict[str, Any]) -> None:
        log.append(("status", p["drain"]["phase"], p["drain"]["reason"]))
        world["status"] = p["drain"]

    def scale(n: int) -> None:
        log.append(("scale", n))
        world["replicas"] = n

    return DrainContext(
        namespace="ns",
        name="orders",
        uid="u",
        generation=1,
        spec=SPEC,
        raw_drain=raw_drain,
        offsets=offsets(),
        replicas=world["replicas"],
        wanted=wanted,
        admin=None,
        scale=scale,
        patch_status=patch,
        emit=lambda *e: log.append(("event", e[1])),
        reobserve=reobserve,
    )


def world0() -> dict[str, Any]:
    return {
        "empty": False,
        "progress": {},
        "jobs": {},
        "committed": {0: 100},
        "replicas": 3,
        "status": None,
        "mailbox": {},
        "now": 1000.0,
    }


def kinds(log: list[tuple[str, Any]]) -> list[str]:
    return [e[0] if e[0] != "status" else f"status:{e[1]}:{e[2]}" for e in log if e[0] not in ("event",)]


def test_consumer_ack_path_never_scales_and_reads_own_offsets_before_the_mailbox():
    log: list[tuple[str, Any]] = []
    w = world0()
    ex = FakeExecutor(log, w)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    assert kinds(log) == [
        "status:Planned:Planned",
        "read",
        "read",
        "read",
        "mailbox",
        "status:Planned:Published",
        "read",
        "read",
        "read",
        "status:Planned:WaitingForAcks",
    ], log
    assert [e[1] for e in log if e[0] == "read"][:3] == [
        "members",
        "own",
        "mailbox",
    ]  # the order that makes it exact
    assert ("mailbox", {0: "lph2;cr=u;id=1;split=500"}) in log
    # the owner acks (start = its committed offset), then commits split itself
    w["mailbox"][0] = w["mailbox"][0].with_ack(100)
    w["committed"][0] = 500
    log.clear()
    r = ex.reconcile(ctx(log, w, w["status"]))
    assert kinds(log)[:5] == ["read", "read", "read", "mailbox", "status:HandedOff:HandedOff"], log
    seq = kinds(log)
    assert seq.index("create_job") + 1 == seq.index("status:Running:Launched"), log
    assert (
        "mailbox",
        {0: "lph2;cr=u;id=1;split=500;ack=100;done=1"},
    ) in log  # sealed with the HandedOff write
    assert not [e for e in log if e[0] == "scale"]  # the live group was never touched
    assert [(x["partition"], x["start"], x["end"]) for x in r.status["ranges"]] == [(0, 100, 500)]
    assert r.status["handOffPath"] == "ConsumerAck" and r.status["pauseSeconds"] == 0.0


def test_empty_group_acks_before_the_alter_and_a_refused_alter_records_nothing():
    log: list[tuple[str, Any]] = []
    w = world0()
    w["empty"] = True
    ex = FakeExecutor(log, w)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    # published, then (group empty) acked for the absent owner, then moved, then handed off + launched
    seq = kinds(log)
    assert seq.index("mailbox") < seq.index("status:Planned:Published") < seq.index("alter")
    acks = [e for e in log if e[0] == "mailbox"]
    assert acks[1] == ("mailbox", {0: "lph2;cr=u;id=1;split=500;ack=100"})
    assert log.index(acks[1]) < log.index(("alter", {0: 500}))  # the ack before the move
    assert w["status"]["phase"] == "Running" and w["status"]["handOffPath"] == "EmptyGroup"
    assert not [e for e in log if e[0] == "scale"]

    # a member joins between the observation and the alter: refused, no status write, retried later
    log.clear()
    w2 = world0()
    w2["empty"] = True
    ex2 = FakeExecutor(log, w2)
    ex2.reconcile(ctx(log, w2, None, wanted=(0,)))  # runs through; now replay with a joining member:
    w3 = world0()
    w3["empty"] = True
    ex3 = FakeExecutor(log, w3)
    real_alter = FakeExecutor.alter_offsets

    def joined_then_alter(self: Any, admin: Any, spec: Any, offsets: Any) -> None:
        w3["empty"] = False
        real_alter(self, admin, spec, offsets)

    ex3.alter_offsets = joined_then_alter.__get__(ex3)  # type: ignore[method-assign]
    log.clear()
    r = ex3.reconcile(ctx(log, w3, None, wanted=(0,)))
    assert r.actions[-1] == "AlterOffsets:refused" and w3["status"]["phase"] == "Planned"
    assert w3["mailbox"][0].ack == 100  # the joining owner finds the ack and completes the move


def test_empty_group_move_skips_a_partition_a_member_took_past_the_split_meanwhile():
    # between the executor's observation (empty, committed 100 < split 500) and its alter, a member
    # joined, found the ack, moved to 500, processed and committed up to 530 and left (empty again):
    # the fresh read before the alter sees 530, so nothing moves back to 500
    log: list[tuple[str, Any]] = []
    w = world0()
    w["empty"] = True
    ex = FakeExecutor(log, w)
    real_write = FakeExecutor.write_mailbox

    def ack_then_member_came_and_went(self: Any, admin: Any, spec: Any, entries: Any, *, key: bytes) -> None:
        real_write(self, admin, spec, entries, key=key)
        if any(e.ack is not None for e in entries.values()):
            w["committed"][0] = 530

    ex.write_mailbox = ack_then_member_came_and_went.__get__(ex)  # type: ignore[method-assign]
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    assert not [e for e in log if e[0] == "alter"], log
    assert w["committed"][0] == 530 and w["status"]["phase"] == "Running", (w["committed"], w["status"])


def test_no_ack_in_time_falls_back_to_quiesce_and_restores():
    log: list[tuple[str, Any]] = []
    w = world0()
    ex = FakeExecutor(log, w)
    ex.reconcile(ctx(log, w, None, wanted=(0,)))
    w["now"] += 31  # an older consumer image never acks
    log.clear()
    ex.reconcile(ctx(log, w, w["status"]))
    assert ("scale", 0) in log and w["status"]["handOffPath"] == "Quiesce"
    w["empty"] = True
    w["now"] += 30
    log.clear()
    ex.reconcile(ctx(log, w, w["status"]))
    seq = kinds(log)
    assert (
        seq.index("mailbox")
        < seq.index("alter")
        < seq.index("status:HandedOff:HandedOff")
        < seq.index("scale")
        < seq.index("create_job")
    )
    assert ("scale", 3) in log and w["status"]["pauseSeconds"] == 30.0


def test_the_executor_reads_its_job_through_the_kubernetes_client_calls():
    # DrainCalls.job itself (the other tests replace it): the pods by the drain-job label, then the
    # Job; absent (404) without a SparkApplication launcher is ABSENT
    from lagpilot.act.drain_calls import DrainCalls
    from lagpilot.act.drain_manifests import JOB_LABEL

    class NotFound(Exception):
        status = 404

    asked: list[str] = []

    class Core:
        def list_namespaced_pod(self, namespace: str, label_selector: str) -> dict[str, Any]:
            asked.append(label_selector)
            return {"items": []}

    class Batch:
        def read_namespaced_job(self, name: str, namespace: str) -> dict[str, Any]:
            raise NotFound()

    calls = DrainCalls()
    calls.core, calls.batch, calls.custom, calls._sanitize = Core(), Batch(), None, lambda x: x
    assert calls.job("ns", "orders-drain-1-1").state is JobState.ABSENT
    assert asked == [f"{JOB_LABEL}=orders-drain-1-1"]
