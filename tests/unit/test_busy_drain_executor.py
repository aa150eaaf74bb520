"""The executor of a busy drain (issue 25 item 2): a Running drain's next split goes through the
mailbox hand-off (observed in the exact order a first split is), then its part is delivered to the
running attempt; the final part hands the partitions back. Fake Kafka/Kubernetes effects."""

from __future__ import annotations

from typing import Any

from lagpilot.decide import handoff as h
from lagpilot.decide.handoff import DrainStatus, JobObservation, JobState, Phase
from tests.unit.test_drain_executor import FakeExecutor, ctx, kinds, world0


class BusyExecutor(FakeExecutor):
    def part_key(self, namespace: str, name: str, uid: str) -> bytes:
        return bytes(32)

    def read_part(self, admin: Any, spec: Any, d: Any, *, key: bytes, uid: str) -> Any:
        self.log.append(("read", "part"))
        p = self.world.get("part")
        return h.NO_PART if p is None else h.PartSeen(p.round, p.final)

    def write_part(self, admin: Any, spec: Any, part: Any, *, key: bytes, uid: str) -> None:
        self.log.append(("part", part))
        self.world["part"] = part


def running_busy() -> dict[str, Any]:
    d = DrainStatus(
        id=1,
        phase=Phase.RUNNING,
        busy=True,
        attempt=1,
        planned_at=900.0,
        published_at=901.0,
        handed_off_at=902.0,
        started_at=903.0,
        progress_at=999.0,
        hand_off_path=h.PATH_ACK,
        ranges=(h.PartitionRange(0, 100, 50, 2),),
        sub_ranges=(h.SubProgress(0, 0, 50, 75, 75, 25), h.SubProgress(0, 1, 75, 100, 100, 25)),
    )
    return d.to_dict()


def test_a_next_split_is_handed_off_in_order_then_delivered_to_the_running_attempt():
    log: list[tuple[str, Any]] = []
    w = world0()
    w["committed"][0] = 300
    w["progress"] = {(0, 0): (75, 25), (0, 1): (100, 25)}
    w["jobs"]["orders-drain-1-1"] = JobObservation(JobState.ACTIVE, 1, running=1)
    ex = BusyExecutor(log, w)
    c = ctx(log, w, running_busy(), wanted=(0,))
    c.busy = True
    r = ex.reconcile(c)
    # planned (status first), then the hand-off: members, the group's offsets, the mailbox, publish
    assert [e for e in kinds(log) if e.startswith("status")][:2] == [
        "status:Running:NextSplitPlanned",
        "status:Running:NextSplitPublished",
    ], log
    reads = [e[1] for e in log if e[0] == "read"]
    i = reads.index("members")
    assert reads[i : i + 3] == ["members", "own", "mailbox"]  # the order that makes it exact
    assert ("mailbox", {0: "lph2;cr=u;id=1;split=500"}) in log
    # the owner acks at its committed offset and moves itself to the split
    w["mailbox"][0] = w["mailbox"][0].with_ack(300)
    w["committed"][0] = 500
    log.clear()
    c = ctx(log, w, w["status"], wanted=())
    c.busy = True
    r = ex.reconcile(c)
    seq = kinds(log)
    assert seq.index("mailbox") < seq.index("status:Running:NextSplitHandedOff") < seq.index("part"), log
    part = w["part"]
    assert part.round == 1 and not part.final
    assert [(s.start, s.end) for s in part.sub_ranges] == [(300, 400), (400, 500)]  # [ack, split) in 2 tasks
    assert r.status["round"] == 1 and r.status["phase"] == "Running"
    # the driver runs them; every sub-range done, no split wanted: the final part, once
    w["progress"].update({(0, 2): (400, 100), (0, 3): (500, 100)})
    log.clear()
    c = ctx(log, w, w["status"], wanted=())
    c.busy = True
    r = ex.reconcile(c)
    assert w["part"].final and w["part"].round == 1 and r.status["reason"] == "HandingBack"
    assert ("event", "DrainHandedBack") in log
    log.clear()
    c = ctx(log, w, w["status"], wanted=(0,))  # after the final part no next split is taken
    c.busy = True
    ex.reconcile(c)
    assert not [e for e in log if e[0] in ("part", "mailbox")], log


def test_an_unreadable_part_takes_no_next_split():
    log: list[tuple[str, Any]] = []
    w = world0()
    w["progress"] = {(0, 0): (75, 25), (0, 1): (100, 25)}
    w["jobs"]["orders-drain-1-1"] = JobObservation(JobState.ACTIVE, 1, running=1)

    class Blind(BusyExecutor):
        def read_part(self, admin: Any, spec: Any, d: Any, *, key: bytes, uid: str) -> Any:
            return None

    ex = Blind(log, w)
    c = ctx(log, w, running_busy(), wanted=(0,))
    c.busy = True
    ex.reconcile(c)
    assert not [
        e for e in log if e[0] in ("part", "mailbox") or (e[0] == "status" and "NextSplit" in e[2])
    ], log


class RecordingAdmin:
    """alter_consumer_group_offsets / list_consumer_group_offsets with real confluent_kafka types."""

    def __init__(self) -> None:
        self.groups: dict[str, Any] = {}

    def alter_consumer_group_offsets(self, reqs: Any, request_timeout: float = 0) -> dict[str, Any]:
        from concurrent.futures import Future

        out = {}
        for r in reqs:
            self.groups[r.group_id] = r.topic_partitions
            f: Future[Any] = Future()
            f.set_result(r)
            out[r.group_id] = f
        return out

    def list_consumer_group_offsets(self, reqs: Any, request_timeout: float = 0) -> dict[str, Any]:
        from concurrent.futures import Future

        from confluent_kafka import ConsumerGroupTopicPartitions

        out = {}
        for r in reqs:
            f: Future[Any] = Future()
            f.set_result(ConsumerGroupTopicPartitions(r.group_id, self.groups.get(r.group_id, [])))
            out[r.group_id] = f
        return out


def test_the_part_is_written_to_kafka_and_read_back_signed() -> None:
    from kubernetes import client

    from lagpilot.act.drain import DrainExecutor, DrainSettings
    from lagpilot.spec import parse_spec
    from lagpilot_runtime.drain.plan import NextPart, SubRange

    spec = parse_spec({"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g"})
    ex = DrainExecutor(client.ApiClient(), DrainSettings())
    admin = RecordingAdmin()
    d = DrainStatus.from_dict(running_busy())
    assert d is not None
    assert ex.read_part(admin, spec, d, key=bytes(32), uid="u") == h.NO_PART
    ex.write_part(admin, spec, NextPart("1", 2, False, (SubRange(0, 2, 300, 400),)), key=bytes(32), uid="u")
    assert ex.read_part(admin, spec, d, key=bytes(32), uid="u") == h.PartSeen(2, False)
    assert (
        ex.read_part(admin, spec, d, key=bytes(range(32)), uid="u") == h.NO_PART
    )  # another key's: not trusted


def test_only_a_busy_drains_driver_gets_the_part_key_never_its_executors() -> None:
    import dataclasses

    from lagpilot.act.drain_manifests import DrainSettings as Settings
    from lagpilot.act.drain_manifests import build_drain_job, build_spark_application
    from lagpilot.spec import parse_spec
    from lagpilot_runtime import plan_auth

    spec = parse_spec({"kafka": {"bootstrapServers": "k:9092"}, "topic": "t", "groupId": "g"})
    d = DrainStatus.from_dict(running_busy())
    assert d is not None
    k8s = Settings(spark_master="k8s://https://kubernetes.default.svc")
    for settings in (Settings(), k8s):
        job = build_drain_job("orders", "ns", "u", spec, d, 1, settings)
        env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        ref = env[plan_auth.PART_KEY_ENV]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "orders-drain-part-key" and "value" not in env[plan_auth.PART_KEY_ENV]
        assert plan_auth.PART_KEY_ENV not in env.get("LAGPILOT_SPARK_CONF", {}).get(
            "value", ""
        )  # not the executors'
        assert json_plan(env)["busy"] is True
        quiet = build_drain_job("orders", "ns", "u", spec, dataclasses.replace(d, busy=False), 1, settings)
        assert plan_auth.PART_KEY_ENV not in {
            e["name"] for e in quiet["spec"]["template"]["spec"]["containers"][0]["env"]
        }
    app = build_spark_application("orders", "ns", "u", spec, d, 1, k8s)
    assert plan_auth.PART_KEY_ENV in {e["name"] for e in app["spec"]["driver"]["env"]}
    assert plan_auth.PART_KEY_ENV not in {e["name"] for e in app["spec"]["executor"]["env"]}


def json_plan(env: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(env["LAGPILOT_DRAIN_PLAN"]["value"])
