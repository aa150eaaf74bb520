"""bench/chaos/faults.py: the pure pieces of the fault campaign (kind selection per mode, the busy
Spark worker pick, the runtime log scan, the summary and its table)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.chaos import faults as cf
from bench.chaos.faults import Fault


@pytest.mark.parametrize(
    ("selected", "warm", "run", "na"),
    [
        (
            cf.KINDS,
            False,
            set(cf.KINDS) - {"drain_runtime_kill", "forged_plan", "runtime_sigstop"},
            ("drain_runtime_kill", "forged_plan", "runtime_sigstop"),
        ),
        (
            ("forged_plan", "second_operator", "delete_while_planned"),
            False,
            {"second_operator", "delete_while_planned"},
            ("forged_plan",),
        ),
        (cf.KINDS, True, set(cf.KINDS), ()),
        (("drain_runtime_kill", "drain_driver_kill"), False, {"drain_driver_kill"}, ("drain_runtime_kill",)),
        (("drain_runtime_kill",), True, {"drain_runtime_kill"}, ()),
        (("consumer_kill",), False, {"consumer_kill"}, ()),
        ((), True, set(), ()),
    ],
)
def test_split_kinds(selected: tuple[str, ...], warm: bool, run: set[str], na: tuple[str, ...]) -> None:
    got_run, got_na = cf.split_kinds(selected, warm)
    assert set(got_run) == run and got_na == na


@pytest.mark.parametrize(
    ("drain", "mid"),
    [
        ({"phase": "Running", "recordsDone": 1, "recordsTotal": 10}, True),
        ({"phase": "Running", "recordsDone": 0, "recordsTotal": 10}, False),  # not started
        ({"phase": "Running", "recordsDone": 10, "recordsTotal": 10}, False),  # all done
        ({"phase": "Running"}, False),
        ({"phase": "Verified", "recordsDone": 5, "recordsTotal": 10}, False),
        ({}, False),
    ],
)
def test_mid_way(drain: dict[str, object], mid: bool) -> None:
    assert cf.mid_way(drain) is mid


@given(st.sets(st.sampled_from(cf.KINDS)), st.booleans())
def test_split_kinds_partitions_the_selection(selected: set[str], warm: bool) -> None:
    run, na = cf.split_kinds(selected, warm)
    assert set(run) | set(na) == selected and not set(run) & set(na)
    assert set(na) <= set(cf.WARM_ONLY) and (not warm or not na)


def test_runtime_kill_is_a_known_kind_warm_only() -> None:
    assert "drain_runtime_kill" in cf.KINDS and set(cf.WARM_ONLY) <= set(cf.KINDS)
    assert len(set(cf.KINDS)) == len(cf.KINDS)


@pytest.mark.parametrize(
    ("before", "after", "busy"),
    [
        ({1: 10, 2: 10}, {1: 12, 2: 10}, {1}),
        ({1: 10, 2: None}, {1: 10, 2: 50}, set()),  # no first sample: not known to be busy
        ({1: 10}, {1: None}, set()),  # gone
        ({1: 10, 2: 3}, {1: 11, 2: 4, 3: 9}, {1, 2}),  # 3 appeared between the samples
        ({}, {}, set()),
    ],
)
def test_busy_pids(before: dict[int, int | None], after: dict[int, int | None], busy: set[int]) -> None:
    assert cf.busy_pids(before, after) == busy


DAEMON = "python -m lagpilot_runtime.spark_daemon"
PROCS = {
    100: (1, "java org.apache.spark.deploy.SparkSubmit"),
    200: (100, DAEMON),  # the daemon
    201: (200, DAEMON),
    202: (200, DAEMON),
    203: (200, DAEMON),  # forked workers
    300: (100, "python something else"),
}


@pytest.mark.parametrize(
    ("procs", "busy", "want"),
    [
        (PROCS, (), 203),  # youngest forked worker
        (PROCS, (201,), 201),  # a busy forked worker first (the runtime keeps idle ones)
        (PROCS, (201, 202), 202),
        (PROCS, (200, 300), 203),  # busy but not a forked worker: ignored
        ({100: (1, "java"), 200: (100, DAEMON)}, (), 200),  # only the daemon
        ({100: (1, "java")}, (), None),
        ({}, (9,), None),
    ],
)
def test_pick_spark_worker(
    procs: dict[int, tuple[int, str]], busy: tuple[int, ...], want: int | None
) -> None:
    assert cf.pick_spark_worker(procs, busy) == want


def test_log_events() -> None:
    lines = [
        "not json at all",
        json.dumps({"ts": "t1", "event": "drain_runtime_cancel", "drain": "7"}),
        json.dumps({"ts": "t2", "event": "drain_runtime_served", "drain": "7", "cancelled": True, "exit": 1}),
        json.dumps({"ts": "t3", "event": "drain_runtime_cancel", "drain": "8"}),
        "{broken json",
        json.dumps(["a", "list"]),
        "  " + json.dumps({"event": "drain_runtime_cancel", "drain": 7}),
    ]
    assert [e["ts"] for e in cf.log_events(lines, "drain_runtime_cancel") if "ts" in e] == ["t1", "t3"]
    assert len(cf.log_events(lines, "drain_runtime_cancel", "7")) == 2  # "7" and 7 are the same drain
    assert cf.log_events(lines, "drain_runtime_cancel", "9") == []
    assert cf.log_events(lines, "drain_runtime_served", "7")[0]["cancelled"] is True


def test_summary_and_table_with_a_not_applicable_kind() -> None:
    faults = [
        Fault(
            "drain_driver_kill",
            1,
            "eos",
            fired=True,
            at=1.0,
            recovered=True,
            recover_s=30.0,
            evidence={"pid": 1},
        ),
        Fault("drain_runtime_kill", 1, "eos", fired=True, at=1.0, recovered=False, evidence={"pid": 2}),
        Fault("drain_executor_kill", 1, "eos", fired=False, detail="not running"),
    ]
    s = cf.summary(faults, 0, 0, 3, {"not_applicable": []})
    assert (s["faults"], s["recovered"], s["not_fired"], s["kinds"]) == (2, 1, 1, 2)
    assert s["per_kind"]["drain_runtime_kill"] == {
        "injected": 1,
        "recovered": 0,
        "not_fired": 0,
        "recover_s_median": None,
        "recover_s_max": None,
    }
    assert list(s["per_kind"]) == ["drain_executor_kill", "drain_driver_kill", "drain_runtime_kill"]
    assert cf.verdict(s) == ["recovered 1 != faults 2"]
    t = cf.table(cf.per_kind(faults[:1]), ("drain_runtime_kill",))
    rows = t.splitlines()
    assert len(rows) == 3 and rows[2].startswith("drain_runtime_kill") and "n/a" in rows[2]
    assert "needs --warm-runtime" in rows[2]
    # a kind that ran is never also listed as not applicable
    assert cf.table(cf.per_kind(faults), ("drain_runtime_kill",)).count("drain_runtime_kill") == 1


def test_each_fired_fault_is_listed_with_what_confirmed_it() -> None:
    faults = [
        Fault(
            "consumer_kill",
            1,
            "eos",
            fired=True,
            at=5.0,
            recovered=True,
            recover_s=4.0,
            evidence={"pid": 77, "pod": "eos-abc", "answers": [[401, "x"]], "cmdline": "y" * 200},
        ),
        Fault("drain_executor_kill", 1, "eos", fired=False, detail="not running"),
        Fault("kafka_restart", 2, fired=True, at=None, evidence={}),
    ]
    got = cf.confirmations(faults)
    assert got[0] == {
        "kind": "consumer_kill",
        "round": 1,
        "target": "eos",
        "at": 5.0,
        "recovered": True,
        "confirmed": True,
        "evidence": {"pid": 77, "pod": "eos-abc"},
    }
    assert [(g["kind"], g["confirmed"]) for g in got] == [("consumer_kill", True), ("kafka_restart", False)]
    s = cf.summary(faults[:2], 0, 0, 0, {"fired_all_confirmed": False})
    assert "a fault counted as fired has no confirmation (time and evidence)" in cf.verdict(s)


def test_the_issue_23_kinds_are_known_and_the_campaign_has_20() -> None:
    new = {"second_operator", "forged_plan", "runtime_sigstop", "delete_while_planned"}
    assert new <= set(cf.KINDS) and len(cf.KINDS) >= 20
    assert {"forged_plan", "runtime_sigstop"} <= set(cf.WARM_ONLY)


def test_reconciled_counts_only_reconcile_lines() -> None:
    lines = [
        '{"message": "standing by for the leader lease"}',
        "not json",
        '{"message": "deployment applied"}',
        '{"message": "first cycle done", "name": "eos"}',
        '{"message": "first cycle done", "name": "alo"}',
        "[1]",
    ]
    assert cf.reconciled(lines[:2]) == 0
    assert cf.reconciled(lines) == 3


def test_forged_bodies_attack_the_live_drain_past_its_split() -> None:
    bare, made_up = cf.forged_bodies("7", "t", "g", {1: 50, 0: 100}, 1000.0)
    plan = json.loads(bare)
    assert plan["drainId"] == "7" and plan["readCommitted"] is False and "auth" not in plan
    assert [(r["partition"], r["start"], r["end"]) for r in plan["subRanges"]] == [(0, 0, 1100), (1, 0, 1050)]
    env = json.loads(made_up)
    assert env["plan"] == bare and env["auth"]["drainId"] == "7" and env["auth"]["expiresAt"] == 1600


@pytest.mark.parametrize(
    ("answers", "ok"),
    [
        ([(401, "forged"), (401, "bad signature")], True),
        ([(401, "x"), (409, "busy")], False),  # a forged plan that got as far as "busy" was not refused
        ([(401, "x"), (200, "{}")], False),
        ([(401, "x"), (0, "timeout")], False),  # no answer: the runtime ran it
        ([], False),
    ],
)
def test_refused_all(answers: list[tuple[int, str]], ok: bool) -> None:
    assert cf.refused_all(answers) is ok


def test_invisible_sub_ranges() -> None:
    aborted = {0: (100, 199), 1: (50, 59)}
    subs = [
        {"partition": 0, "start": 0, "end": 120},
        {"partition": 0, "start": 120, "end": 201},
        {"partition": 0, "start": 201, "end": 300},
        {"partition": 1, "start": 50, "end": 61},
        {"partition": 2, "start": 0, "end": 1},
    ]
    assert cf.invisible_sub_ranges(subs, aborted) == [
        {"partition": 0, "start": 120, "end": 201},
        {"partition": 1, "start": 50, "end": 61},
    ]


def test_report_visible() -> None:
    visible = {0: [0, 1, 2, 5], 1: [0]}  # 3, 4: aborted; 6 a marker
    ok = cf.report_visible([(0, 0, 1), (0, 1, 1), (0, 2, 1), (0, 5, 1), (1, 0, 1)], visible)
    assert ok == {"produced": 5, "delivered": 5, "distinct": 5, "lost": 0, "duplicated": 0, "outside": 0}
    bad = cf.report_visible([(0, 0, 2), (0, 3, 1), (1, 0, 1)], visible)  # 1, 2, 5 lost; 3 aborted delivered
    assert bad["lost"] == 3 and bad["duplicated"] == 1 and bad["outside"] == 1


def test_verdict_names_a_delivered_offset_kafka_does_not_show() -> None:
    base = {"faults": 1, "kinds": 1, "recovered": 1, "lost": 0, "duplicated": 0}
    assert cf.verdict({**base, "eos": {"outside": 0}, "alo": {"outside": 0}}) == []
    assert cf.verdict({**base, "eos": {"outside": 0}, "alo": {"outside": 4}}) == ["alo outside 4"]


def test_offset_runs_name_where_a_ledger_misses_or_repeats() -> None:
    counts = [(0, 0, 1), (0, 1, 1), (0, 4, 2), (0, 5, 2), (0, 6, 3), (1, 0, 1), (1, 2, 1), (1, 9, 1)]
    got = cf.offset_runs(counts, {0: range(7), 1: range(3)})
    assert got["lost"] == {0: [[2, 4]], 1: [[1, 2]]}
    assert got["duplicated"] == {0: [[4, 6, 2], [6, 7, 3]]}
    assert cf.offset_runs([(0, o, 1) for o in range(5)], {0: range(5)}) == {"lost": {}, "duplicated": {}}


def test_the_busy_drain_kinds_are_known_with_their_crash_points() -> None:
    assert set(cf.BUSY_KINDS) == {
        "operator_at_next_publish",
        "operator_at_next_seal",
        "operator_at_deliver",
        "operator_at_next_alter_offsets",
        "busy_driver_kill",
        "forged_part",
        "stale_part",
    }
    assert set(cf.BUSY_KINDS) <= set(cf.KINDS) and not set(cf.BUSY_KINDS) & set(cf.WARM_ONLY)
    # act/drain.py names a next split's points Next<Kind>; the part's write is Deliver
    from lagpilot.decide.handoff import Kind

    assert cf.BUSY_POINTS == {
        "operator_at_next_publish": f"Next{Kind.PUBLISH.value}:effect",
        "operator_at_next_seal": f"Next{Kind.SEAL.value}:status",
        "operator_at_deliver": f"{Kind.DELIVER.value}:effect",
    }
    assert cf.EMPTY_GROUP_POINTS == {
        "operator_at_next_alter_offsets": f"Next{Kind.ALTER_OFFSETS.value}:effect"
    }
    # the operator runs with every one of them (disarmed until a round removes its marker)
    assert {*cf.BUSY_POINTS.values(), *cf.EMPTY_GROUP_POINTS.values()} <= set(cf.OPERATOR_POINTS)


def test_the_forged_part_is_refused_by_the_crs_key_and_would_rerun_everything() -> None:
    import pytest as _pytest

    from lagpilot_runtime import plan_auth
    from lagpilot_runtime.drain.plan import NextPart

    meta = cf.forged_part(7, 2, {0: 5000, 1: 300}, "abc123abc123", "t")
    assert cf.part_round(meta) == 3
    with _pytest.raises(plan_auth.Refused):
        plan_auth.verify_part(b"k" * 32, "abc123abc123", "t", meta)
    part = NextPart.from_body(meta.rpartition(";mac=")[0])
    assert part.drain_id == "7" and not part.final
    assert {(s.partition, s.start, s.end) for s in part.sub_ranges} == {(0, 0, 6000), (1, 0, 1300)}
    # a genuine part verifies, and its round is read back
    good = plan_auth.sign_part(b"k" * 32, "abc123abc123", "t", NextPart("7", 2, False, ()).body())
    assert cf.part_round(good) == 2 and plan_auth.verify_part(b"k" * 32, "abc123abc123", "t", good)
    assert cf.part_round("garbage") is None and cf.part_round(None) is None


def test_next_parts_reads_the_drivers_taken_parts_of_one_drain() -> None:
    events = [
        {"event": "drain_next_part", "drain": "3", "round": 1, "final": False, "unfinished": 2, "ts": 1},
        {"event": "drain_next_part", "drain": "4", "round": 1, "final": False},
        {"event": "drain_part_refused", "drain": "3"},
        {"event": "drain_next_part", "drain": "3", "round": 2, "final": True, "unfinished": 0, "ts": 2},
    ]
    assert [(p["round"], p["final"]) for p in cf.next_parts(events, 3)] == [(1, False), (2, True)]


def test_verdict_names_a_kind_of_the_run_that_never_fired() -> None:
    # the full campaign's kinds include the busy drains' (drain 7): one of them never confirmed is a
    # problem even when the totals meet the issue's target
    per = {k: {"injected": 2} for k in cf.KINDS if k != "stale_part"}
    per["stale_part"] = {"injected": 0, "not_fired": 2}
    base = {
        "faults": 50,
        "kinds": len(cf.KINDS) - 1,
        "recovered": 50,
        "lost": 0,
        "duplicated": 0,
        "per_kind": per,
    }
    assert cf.verdict(base, 40, 20, wanted=cf.KINDS) == ["never fired: stale_part"]
    assert cf.verdict(base, 40, 20, wanted=set(cf.KINDS) - {"stale_part"}) == []
    assert set(cf.BUSY_KINDS) <= set(cf.KINDS)  # the default kind list (bench/chaos.py without --kinds)


@pytest.mark.parametrize(
    ("given", "capacity", "want"),
    [
        (None, 151.2, (454, "measured")),  # 3 x what one eos consumer processes per busy second
        (None, None, (600, "fallback")),  # nothing reported yet: 3 x 100 records / 500 ms
        (None, 0.0, (600, "fallback")),
        (900, 151.2, (900, "given")),  # --hot-rate wins
    ],
)
def test_hot_rate(given: int | None, capacity: float | None, want: tuple[int, str]) -> None:
    assert cf.hot_rate(given, capacity) == want


def test_publish_actions_after_the_crash() -> None:
    def rec(action: str, drain: int, ts: str) -> str:
        return json.dumps(
            {
                "message": "drain action",
                "action": action,
                "reason": "NextSplitPublished",
                "drain_message": f"drain {drain}: next split 1 published; waiting",
                "timestamp": ts,
            }
        )

    lines = [
        rec("Publish", 1, "2026-11-26T16:41:53.5+00:00"),  # the one that died after it
        json.dumps({"message": "fault injection: exiting", "point": "NextPublish:effect"}),
        rec("WriteStatus", 12, "2026-11-26T16:43:00+00:00"),  # another drain
        rec("WriteStatus", 1, "2026-11-26T16:43:01.8+00:00"),
        "not json",
    ]
    from datetime import datetime

    crash = datetime.fromisoformat("2026-11-26T16:41:53.8+00:00").timestamp()
    assert cf.publish_actions_after(lines, 1, crash) == ["WriteStatus"]
    assert cf.publish_actions_after(lines, 1, crash - 1) == ["Publish", "WriteStatus"]
