"""The per-CR keys' one form (lagpilot_runtime.hex_key): the hand-off key, the drain runtime key,
the drain part key and the Spark RPC key are parsed and fingerprinted by it. Their fingerprints are
what they were (a changed key id would roll every consumer pod)."""

from __future__ import annotations

import pytest

from lagpilot.act import spark_rpc_key
from lagpilot_runtime import handoff_mailbox as mbx
from lagpilot_runtime import hex_key, plan_auth

KEY = bytes(range(32))


def test_fingerprints_are_unchanged() -> None:
    # the values of the copies each module had before (main at 57f451b)
    assert mbx.key_id(KEY) == "5270186253f32eef"
    assert plan_auth.key_id(KEY) == "679f0751c7321cb4"


@pytest.mark.parametrize("parse", [mbx.parse_key, plan_auth.parse_key, spark_rpc_key.parse_key])
def test_every_kind_reads_hex_of_exactly_32_bytes(parse) -> None:  # type: ignore[no-untyped-def]
    assert parse(KEY.hex()) == KEY and parse(KEY.hex().encode() + b"\n") == KEY
    for bad in ("", "00" * 31, "00" * 33):
        with pytest.raises(ValueError, match="has 32 bytes"):
            parse(bad)
    with pytest.raises(ValueError):
        parse("zz" * 32)


def test_new_keys_are_random_hex_of_their_size() -> None:
    a, b = hex_key.new_key(), plan_auth.new_key()
    assert a != b and len(bytes.fromhex(a)) == len(bytes.fromhex(b)) == 32
    assert len(bytes.fromhex(spark_rpc_key.new_key())) == 32
