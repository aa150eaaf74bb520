"""M8 (issue 23): mailbox entries carry an HMAC under a per-CR hand-off key.

Anyone with Kafka Read on ``<groupId>.lagpilot-handoff`` can commit to it. Without a MAC such a
forger writes ``lph2;cr=<the CR's uid>;id=..;split=S`` and the owner acks and jumps to S: the records
in between belong to no drain. These tests pin the wire format (the MAC binds topic, partition and
every field), the owner's rule (a request without a valid MAC is ignored) and the operator's (an ack
without a valid MAC is not taken)."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime.handoff_mailbox import Entry

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
UID = "0b6f7c1e-8f3a-4c1d-9e2b-3f4a5b6c7d8e"
TOPIC = "orders"

ints = st.integers(0, 2**62)


@given(ints, ints, st.one_of(st.none(), ints), st.booleans(), st.integers(0, 10_000))
def test_a_signed_entry_round_trips_and_verifies(drain_id, split, ack, done, partition):
    if done and ack is None:
        return
    e = mbx.sign(Entry(drain_id, split, ack, done, UID), KEY, TOPIC, partition)
    assert len(e.mac) == 64
    got = mbx.decode(e.encode(), committed_offset=split)
    assert got == e
    assert mbx.verify(got, KEY, TOPIC, partition)
    assert len(e.encode()) < 4096  # Kafka's default offset.metadata.max.bytes


def test_the_mac_binds_key_topic_partition_and_every_field():
    e = mbx.sign(Entry(3, 500, 120, False, UID), KEY, TOPIC, 2)
    assert mbx.verify(e, KEY, TOPIC, 2)
    assert not mbx.verify(e, OTHER_KEY, TOPIC, 2)
    assert not mbx.verify(e, KEY, "other", 2)
    assert not mbx.verify(e, KEY, TOPIC, 3)  # copied onto another partition
    for forged in (
        Entry(3, 900, 120, False, UID, e.mac),
        Entry(3, 500, 400, False, UID, e.mac),
        Entry(4, 500, 120, False, UID, e.mac),
        Entry(3, 500, 120, True, UID, e.mac),
        Entry(3, 500, None, False, UID, e.mac),
        Entry(3, 500, 120, False, "x" + UID[1:], e.mac),
    ):
        assert not mbx.verify(forged, KEY, TOPIC, 2), forged
    assert not mbx.verify(Entry(3, 500, 120, False, UID), KEY, TOPIC, 2)  # no MAC at all
    assert not mbx.verify(e, b"", TOPIC, 2)  # no key: nothing verifies


@pytest.mark.parametrize(
    "meta",
    [
        f"lph2;cr={UID};id=1;split=60",  # no MAC
        f"lph2;cr={UID};id=1;split=60;mac={'0' * 64}",  # a made-up MAC
        None,
    ],
)  # signed with another key
def test_owner_step_ignores_a_forged_request_with_the_right_uid(meta):
    if meta is None:
        meta = mbx.sign(mbx.request(1, 60, UID), OTHER_KEY, TOPIC, 0).encode()
    entry = mbx.decode(meta, 60)
    assert entry is not None and entry.owner == UID  # it parses: only the MAC tells it apart
    assert mbx.trusted(entry, KEY, TOPIC, 0) is None
    genuine = mbx.sign(mbx.request(1, 60, UID), KEY, TOPIC, 0)
    assert mbx.trusted(mbx.decode(genuine.encode(), 60), KEY, TOPIC, 0) == genuine


# ---- the operator's side: DrainCalls.mailbox takes only verified entries; write_mailbox signs ----


class _Fut:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> Any:
        return self.value


class FakeAdmin:
    def __init__(self, entries: dict[int, tuple[int, str]]) -> None:
        self.entries = entries

    def list_consumer_group_offsets(self, reqs: Any, request_timeout: float) -> dict[str, _Fut]:
        req = reqs[0]
        tps = []
        for tp in req.topic_partitions:
            off, meta = self.entries.get(tp.partition, (-1001, None))
            tps.append(
                TopicPartition(tp.topic, tp.partition, off)
                if meta is None
                else TopicPartition(tp.topic, tp.partition, off, metadata=meta)
            )
        return {req.group_id: _Fut(SimpleNamespace(topic_partitions=tps))}

    def alter_consumer_group_offsets(self, reqs: Any, request_timeout: float) -> dict[str, _Fut]:
        req = reqs[0]
        for tp in req.topic_partitions:
            self.entries[tp.partition] = (tp.offset, tp.metadata)
        return {req.group_id: _Fut(SimpleNamespace(topic_partitions=[SimpleNamespace(error=None)]))}


def _calls() -> Any:
    from lagpilot.act.drain_calls import DrainCalls

    c = DrainCalls()
    c.timeout_s = 1.0
    return c


def _spec() -> Any:
    return SimpleNamespace(group_id="g", topic=TOPIC)


def test_operator_does_not_take_a_forged_ack():
    genuine = mbx.sign(Entry(1, 500, 100, False, UID), KEY, TOPIC, 1)
    admin = FakeAdmin(
        {
            0: (500, f"lph2;cr={UID};id=1;split=500;ack=499"),  # forged, no MAC
            1: (500, genuine.encode()),
            2: (500, mbx.sign(Entry(1, 500, 499, False, UID), OTHER_KEY, TOPIC, 2).encode()),  # wrong key
            3: (500, mbx.sign(Entry(1, 500, 499, False, UID), KEY, TOPIC, 1).encode()),
        }
    )  # partition 1's, copied
    got = _calls().mailbox(admin, _spec(), [0, 1, 2, 3], key=KEY)
    assert got == {0: None, 1: genuine, 2: None, 3: None}
    # and so the drain does not take the forged ack's start: the group at the split with no (verified)
    # ack means it got there by itself (an empty range), never [499, 500)
    assert mbx.resolve(500, got[0], 1, 500, UID) == mbx.Resolution(True, 500, 500)
    assert mbx.resolve(500, got[1], 1, 500, UID) == mbx.Resolution(True, 500, 100)


def test_operator_signs_what_it_writes():
    admin = FakeAdmin({})
    _calls().write_mailbox(
        admin, _spec(), {0: mbx.request(1, 500, UID), 1: mbx.sealed_entry(1, 40, 40, UID)}, key=KEY
    )
    for p, (off, meta) in admin.entries.items():
        e = mbx.decode(meta, off)
        assert e is not None and mbx.verify(e, KEY, TOPIC, p), meta


def test_the_handoff_key_secret_is_the_crs_and_the_deployment_references_it():
    from lagpilot.act import handoff_key

    s = handoff_key.HANDOFF_KEY.secret("cr1", "ns", UID, KEY.hex())
    assert s["metadata"]["name"] == handoff_key.key_secret_name("cr1")
    ref = s["metadata"]["ownerReferences"][0]
    assert ref["uid"] == UID and ref["controller"] is True
    assert (
        base64.b64decode(base64.b64encode(s["stringData"][handoff_key.KEY_FIELD].encode()))
        == KEY.hex().encode()
    )


def test_the_consumer_deployment_gets_the_key_by_reference_only_and_drain_jobs_not_at_all():
    from lagpilot.act.deployment import build_deployment
    from lagpilot.act.drain_manifests import consumer_env
    from lagpilot.spec import parse_spec

    spec = parse_spec(
        {
            "topic": "t",
            "groupId": "g",
            "kafka": {"bootstrapServers": "k:9092"},
            "template": {"image": "img"},
            "processing": {"sink": "log"},
        }
    )
    kid = mbx.key_id(KEY)
    env = {
        e["name"]: e
        for e in build_deployment("cr1", "ns", UID, spec, 1, handoff_key_id=kid)["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env[mbx.KEY_ENV]["valueFrom"]["secretKeyRef"]["name"] == "cr1-handoff-key"
    assert "value" not in env[mbx.KEY_ENV] and env[mbx.KEY_ID_ENV]["value"] == kid != KEY.hex()
    assert mbx.KEY_ENV not in {e["name"] for e in consumer_env(spec)}  # drain pods: no mailbox, no key


class _Core:
    def __init__(self, secret: Any = None) -> None:
        self.secret, self.created = secret, []

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        if self.secret is None:
            raise type("NotFound", (Exception,), {"status": 404})()
        return self.secret

    def create_namespaced_secret(self, namespace: str, body: Any) -> None:
        self.created.append(body)
        self.secret = {
            **body,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in body["stringData"].items()},
        }


def test_the_operator_creates_the_key_once_and_never_trusts_a_secret_it_does_not_own():
    from lagpilot.act.handoff_key import HANDOFF_KEY, HandoffKeys

    core = _Core()
    k = HandoffKeys(core, lambda x: x).key("ns", "cr1", UID)
    assert len(k) == 32 and len(core.created) == 1
    assert HandoffKeys(core, lambda x: x).key("ns", "cr1", UID) == k  # read back after a restart
    planted = HANDOFF_KEY.secret("cr1", "ns", "someone-else", KEY.hex())
    planted["data"] = {"key": base64.b64encode(KEY.hex().encode()).decode()}
    with pytest.raises(RuntimeError) as err:
        HandoffKeys(_Core(planted), lambda x: x).key("ns", "cr1", UID)
    assert KEY.hex() not in str(err.value)
