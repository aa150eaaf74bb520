"""Pieces of bench/chaos.py that need no running stack: the fault record, the summary (per kind:
injected, recovered, time to recover), the table, and the /proc helpers that find a drain's Spark
Python workers. Pure functions take their inputs; nothing here talks to Kafka, Kubernetes or
PostgreSQL."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# every kind bench/chaos.py can inject, in the order of the table
KINDS: tuple[str, ...] = (
    "consumer_kill",
    "consumer_kill_after_write",
    "operator_kill",
    "operator_at_plan_write",
    "operator_at_publish",
    "operator_at_seal",
    "operator_at_launch",
    "drain_executor_kill",
    "drain_driver_kill",
    "drain_runtime_kill",
    "kafka_restart",
    "apiserver_restart",
    "etcd_restart",
    "postgres_restart",
    "spec_change_mid_drain",
    "cr_delete_mid_drain",
    # issue 23's fixed review items: M3 (Lease), C1 (signed plans), H3 (heartbeat), H1 (finalizer of a Planned drain)
    "second_operator",
    "forged_plan",
    "runtime_sigstop",
    "delete_while_planned",
    "aborted_transactions",
    # busy drains (issue 25 item 2; docs/drain.md "Busy drains"): a fault during a next split's hand-off
    # and delivery (bench/chaos/busy.py, drain 7)
    "operator_at_next_publish",
    "operator_at_next_seal",
    "operator_at_deliver",
    "operator_at_next_alter_offsets",
    "busy_driver_kill",
    "forged_part",
    "stale_part",
)

# kinds that need spec.drain.warmRuntime (bench/chaos.py --warm-runtime): without it they are "not
# applicable" (listed, never injected, never counted as not fired)
WARM_ONLY: tuple[str, ...] = ("drain_runtime_kill", "forged_plan", "runtime_sigstop")

# the drain Job's (and its pod's) label saying how the attempt ran (operator drain_runtime.py)
RUNTIME_LABEL = "lagpilot.io/drain-runtime"
RUNTIME_CONFIG_ANNOTATION = "lagpilot.io/drain-runtime-config"  # the runtime pod's config hash

# the operator's test crash points (LAGPILOT_TEST_CRASH_AT, operator/src/lagpilot/act/drain.py) per kind:
# after the plan's status write, after publishing the split, after sealing the acks, after the launch
HANDOFF_POINTS: dict[str, str] = {
    "operator_at_plan_write": "WriteStatus:status",
    "operator_at_publish": "Publish:effect",
    "operator_at_seal": "Seal:effect",
    "operator_at_launch": "Launch:effect",
}

# busy drains (drain 7): the operator's crash points during a next split (act/drain.py names a next
# split's points "Next<Kind>"): after publishing a next split's requests to the mailbox, before the
# status write that records it published; after the status write that appends a sealed next split's
# sub-ranges, before its part is delivered; after writing a part to the parts group, before its status
# write. They fire by themselves in a busy drain (its first next split and delivery)
BUSY_POINTS: dict[str, str] = {
    "operator_at_next_publish": "NextPublish:effect",
    "operator_at_next_seal": "NextSeal:status",
    "operator_at_deliver": "Deliver:effect",
}
# ... and one that needs the group empty while a next split is published: the operator then acks for
# the absent owners and moves the group's offsets to the split (handoff._resolve_next_split), and dies
# right after that effect, before anything else; drain 7 empties the group for it (busy.py empty_group)
EMPTY_GROUP_POINTS: dict[str, str] = {"operator_at_next_alter_offsets": "NextAlterOffsets:effect"}
BUSY_KINDS: tuple[str, ...] = (
    *BUSY_POINTS,
    *EMPTY_GROUP_POINTS,
    "busy_driver_kill",
    "forged_part",
    "stale_part",
)

# delete_while_planned: the operator's crash point right after publishing the hand-off and before its
# status write resolves anything (the drain stays Planned while the owners ack); armed like the others
PLANNED_POINT = "Publish:status"

# every crash point the campaign's operator runs with (LAGPILOT_TEST_CRASH_AT), each disarmed until its
# round removes the marker
OPERATOR_POINTS: tuple[str, ...] = (
    *HANDOFF_POINTS.values(),
    PLANNED_POINT,
    *BUSY_POINTS.values(),
    *EMPTY_GROUP_POINTS.values(),
)

# the operators' own log lines (tests/real/test_leader_election.py): a reconciling operator logs these,
# one standing by logs "standing by for the leader lease" and neither of them
RECONCILE_MESSAGES = ("deployment applied", "first cycle done")


@dataclass
class Fault:
    """One injection. `fired` only when confirmed (pid gone, port closed, phase reached); a fault that
    did not fire is reported with `fired=False` and the reason in `detail`, never counted."""

    kind: str
    round: int
    target: str = ""
    fired: bool = False
    at: float | None = None  # wall time the fault was confirmed injected
    recovered: bool = False
    recover_s: float | None = None
    detail: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["recover_s"] is not None:
            d["recover_s"] = round(d["recover_s"], 1)
        return d


def split_kinds(selected: Iterable[str], warm: bool) -> tuple[frozenset[str], tuple[str, ...]]:
    """(kinds to run, kinds not applicable in this mode, in table order) (pure)."""
    sel = set(selected)
    na = tuple(k for k in KINDS if k in sel and k in WARM_ONLY and not warm)
    return frozenset(sel - set(na)), na


def mid_way(drain: Mapping[str, Any]) -> bool:
    """A drain status (status.drain) Running with some but not all of its records done: the moment a
    drain fault is injected (pure)."""
    return drain.get("phase") == "Running" and 0 < drain.get("recordsDone", 0) < drain.get("recordsTotal", 0)


def _median(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def per_kind(faults: Iterable[Fault]) -> dict[str, dict[str, Any]]:
    """{kind: {injected, recovered, not_fired, recover_s_median, recover_s_max}} (pure); `injected`
    counts confirmed faults only."""
    out: dict[str, dict[str, Any]] = {}
    times: dict[str, list[float]] = {}
    for f in faults:
        k = out.setdefault(f.kind, {"injected": 0, "recovered": 0, "not_fired": 0})
        if not f.fired:
            k["not_fired"] += 1
            continue
        k["injected"] += 1
        if f.recovered:
            k["recovered"] += 1
            if f.recover_s is not None:
                times.setdefault(f.kind, []).append(f.recover_s)
    for kind, k in out.items():
        ts = times.get(kind, [])
        med = _median(ts)
        k["recover_s_median"] = None if med is None else round(med, 1)
        k["recover_s_max"] = round(max(ts), 1) if ts else None
    order = {k: i for i, k in enumerate(KINDS)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def summary(
    faults: Sequence[Fault],
    lost: int | None,
    duplicated: int | None,
    replayed: int | None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The bench's JSON line (pure): `faults` = confirmed injections, `recovered` = those recovered."""
    kinds = per_kind(faults)
    return {
        "faults": sum(1 for f in faults if f.fired),
        "recovered": sum(1 for f in faults if f.fired and f.recovered),
        "not_fired": sum(1 for f in faults if not f.fired),
        "kinds": sum(1 for k in kinds.values() if k["injected"] > 0),
        "lost": lost,
        "duplicated": duplicated,
        "replayed": replayed,
        "per_kind": kinds,
        **dict(extra or {}),
    }


def confirmations(faults: Iterable[Fault]) -> list[dict[str, Any]]:
    """One short line of the JSON per confirmed fault (pure): kind, round, target, when, recovered, and
    the scalar evidence that confirmed it (pid, port, marker, generation, phase ...; long values and
    nested ones stay in result.json). A fault without a confirmation time or evidence is listed too,
    with `confirmed: false`, so a reader (and the verdict) sees it."""
    out = []
    for f in faults:
        if not f.fired:
            continue
        ev = {
            k: v
            for k, v in f.evidence.items()
            if isinstance(v, (int, float, bool)) or (isinstance(v, str) and len(v) <= 80)
        }
        out.append(
            {
                "kind": f.kind,
                "round": f.round,
                "target": f.target,
                "at": f.at,
                "recovered": f.recovered,
                "confirmed": f.at is not None and bool(f.evidence),
                "evidence": ev,
            }
        )
    return out


def table(kinds: Mapping[str, Mapping[str, Any]], not_applicable: Sequence[str] = ()) -> str:
    """The per-kind table (pure); `not_applicable` kinds get one `n/a` row each."""

    def cell(x: Any) -> str:
        return "-" if x is None else (f"{x:.1f}" if isinstance(x, float) else str(x))

    lines = [
        f"{'fault kind':<27}{'injected':>9}{'recovered':>10}{'not fired':>10}{'recover s (median)':>20}{'max':>8}"
    ]
    for kind, k in kinds.items():
        lines.append(
            f"{kind:<27}{k['injected']:>9}{k['recovered']:>10}{k['not_fired']:>10}"
            f"{cell(k['recover_s_median']):>20}{cell(k['recover_s_max']):>8}"
        )
    for kind in not_applicable:
        if kind not in kinds:
            lines.append(f"{kind:<27}{'n/a':>9}{'n/a':>10}{'n/a':>10}{'(needs --warm-runtime)':>28}")
    return "\n".join(lines)


def verdict(
    result: Mapping[str, Any], min_faults: int = 1, min_kinds: int = 1, wanted: Iterable[str] = ()
) -> list[str]:
    """What is wrong with a run's JSON (pure): [] when faults >= min_faults over >= min_kinds kinds,
    every `wanted` kind (the run's selection) confirmed fired at least once, every confirmed fault
    recovered, nothing lost, nothing duplicated by the exactly-once sink."""
    problems = []
    if (result.get("faults") or 0) < min_faults:
        problems.append(f"faults {result.get('faults')} < {min_faults}")
    if (result.get("kinds") or 0) < min_kinds:
        problems.append(f"kinds {result.get('kinds')} < {min_kinds}")
    per = result.get("per_kind") or {}
    never = [k for k in KINDS if k in set(wanted) and not (per.get(k) or {}).get("injected")]
    if never:
        problems.append(f"never fired: {', '.join(never)}")
    if not result.get("fired_all_confirmed", True):
        problems.append("a fault counted as fired has no confirmation (time and evidence)")
    if result.get("recovered") != result.get("faults"):
        problems.append(f"recovered {result.get('recovered')} != faults {result.get('faults')}")
    if result.get("lost") != 0:
        problems.append(f"lost {result.get('lost')}")
    if result.get("duplicated") != 0:
        problems.append(f"duplicated {result.get('duplicated')}")
    for which in ("eos", "alo"):  # delivered offsets Kafka does not show (an aborted record, a marker)
        if ((result.get(which) or {}).get("outside") or 0) != 0:
            problems.append(f"{which} outside {result[which]['outside']}")
    return problems


# ---- /proc ---------------------------------------------------------------------------------------


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def ppid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int, table_: Mapping[int, int] | None = None) -> list[int]:
    """Every process below `root` (from a {pid: ppid} table, default the live /proc)."""
    if table_ is None:
        table_ = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (pp := ppid_of(int(name))) is not None:
                table_[int(name)] = pp
    children: dict[int, list[int]] = {}
    for pid, pp in table_.items():
        children.setdefault(pp, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of a process in clock ticks (/proc), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, ValueError, IndexError):
        return None


def busy_pids(before: Mapping[int, int | None], after: Mapping[int, int | None]) -> frozenset[int]:
    """The pids whose CPU ticks grew between two samples (pure)."""
    return frozenset(
        p for p, t in after.items() if t is not None and before.get(p) is not None and t > before[p]
    )  # type: ignore[operator]


def pick_spark_worker(procs: Mapping[int, tuple[int, str]], busy: Iterable[int] = ()) -> int | None:
    """A Spark Python worker among a drain pod's processes {pid: (ppid, cmdline)} (pure): a process of
    the Python daemon (`lagpilot_runtime.spark_daemon` / `pyspark.daemon` / `pyspark.worker`) whose
    parent is such a process too (a forked worker: killing it fails one task attempt, the executor
    retries it), preferring one in `busy` (its CPU time grew: it runs a task; the warm runtime keeps
    idle forked workers too); else the youngest daemon process; None when there is none (Spark not
    started yet)."""

    def is_py(cmd: str) -> bool:
        return any(m in cmd for m in ("spark_daemon", "pyspark.daemon", "pyspark.worker", "pyspark/daemon"))

    py = {pid: pp for pid, (pp, cmd) in procs.items() if is_py(cmd)}
    forked = sorted(pid for pid, pp in py.items() if pp in py)
    hot = [pid for pid in forked if pid in set(busy)]
    if hot:
        return hot[-1]
    if forked:
        return forked[-1]
    return max(py) if py else None


def json_records(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON object records among log lines (pure); other lines are skipped."""
    import json

    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def log_events(lines: Iterable[str], event: str, drain: str | None = None) -> list[dict[str, Any]]:
    """The JSON log records of `event` (optionally of one drain id) among a pod's log lines (pure);
    lines that are not JSON objects are skipped."""
    return [
        rec
        for rec in json_records(lines)
        if rec.get("event") == event and (drain is None or str(rec.get("drain")) == str(drain))
    ]


def recover_seconds(at: float | None, done_at: float | None) -> float | None:
    if at is None or done_at is None or math.isnan(done_at):
        return None
    return max(0.0, done_at - at)


def reconciled(lines: Iterable[str]) -> int:
    """How many reconcile steps an operator's JSON log lines show (pure): the apply handler's
    "deployment applied" and the control loop's "first cycle done" (second_operator)."""
    return sum(1 for rec in json_records(lines) if rec.get("message") in RECONCILE_MESSAGES)


def forged_bodies(drain_id: str, topic: str, group: str, ends: Mapping[int, int], now: float) -> list[str]:
    """forged_plan's attack (pure): issue 23's C1 plan for the LIVE drain id, one sub-range per
    partition from 0 past the real split (the old runtime committed `sub.end`: the real attempt would
    skip the rest and still end Verified), read uncommitted; sent bare (the old protocol) and wrapped
    with a made-up signature."""
    import json

    plan = json.dumps(
        {
            "drainId": str(drain_id),
            "topic": topic,
            "groupId": group,
            "batchMaxRecords": 100,
            "parallelism": len(ends),
            "readCommitted": False,
            "subRanges": [
                {"partition": int(p), "index": 0, "start": 0, "end": int(e) + 1000}
                for p, e in sorted(ends.items())
            ],
        },
        separators=(",", ":"),
        sort_keys=True,
    )
    made_up = json.dumps(
        {
            "plan": plan,
            "auth": {
                "crUid": "forged",
                "drainId": str(drain_id),
                "attempt": 99,
                "expiresAt": int(now) + 600,
                "signature": "00" * 32,
            },
        }
    )
    return [plan, made_up]


def refused_all(answers: Sequence[tuple[int, str]]) -> bool:
    """forged_plan: every forged request refused as unauthenticated (401), none taken (pure)."""
    return bool(answers) and all(status == 401 for status, _ in answers)


def next_parts(events: Iterable[Mapping[str, Any]], drain: Any) -> list[dict[str, Any]]:
    """The parts a busy drain's driver took (its `drain_next_part` log records of drain `drain`), as
    {round, final, unfinished, ts} in log order (pure)."""
    return [
        {k: e.get(k) for k in ("round", "final", "unfinished", "ts")}
        for e in events
        if e.get("event") == "drain_next_part" and str(e.get("drain")) == str(drain)
    ]


def forged_part(drain_id: Any, round_: int, ends: Mapping[int, int], owner: str, topic: str) -> str:
    """forged_part's attack (pure but for its random key): a next part for the LIVE drain at the round
    after the current one, with one sub-range per partition from 0 past the end (taken, it would
    re-run everything: duplicates in the ledger) and fresh indices, signed with a key that is NOT the
    CR's part key (a random one: what anyone without the Secret can do)."""
    import secrets

    from lagpilot_runtime import plan_auth
    from lagpilot_runtime.drain.plan import NextPart, SubRange

    subs = tuple(SubRange(int(p), 900 + int(p), 0, int(e) + 1000) for p, e in sorted(ends.items()))
    body = NextPart(str(drain_id), int(round_) + 1, False, subs).body()
    return plan_auth.sign_part(secrets.token_bytes(32), owner, topic, body)


def publish_actions_after(lines: Iterable[str], drain_id: Any, after: float) -> list[str]:
    """operator_at_next_publish (pure): the actions ("Publish" | "WriteStatus") of the operator's
    `NextSplitPublished` records of drain `drain_id` logged after `after` (Unix time), in log order.
    The operator that comes back after dying at NextPublish:effect must find its own requests in the
    mailbox and only write the status ("WriteStatus"): a "Publish" first would mean it asked again."""
    from datetime import datetime

    out = []
    for rec in json_records(lines):
        if rec.get("message") != "drain action" or rec.get("reason") != "NextSplitPublished":
            continue
        if not str(rec.get("drain_message") or "").startswith(f"drain {drain_id}:"):
            continue
        try:
            ts = datetime.fromisoformat(str(rec.get("timestamp"))).timestamp()
        except ValueError:
            continue
        if ts > after:
            out.append(str(rec.get("action")))
    return out


def room_for_next_split(drain: Mapping[str, Any], min_left: int) -> bool:
    """A busy drain's status with no next split in hand and at least `min_left` records left (pure):
    operator_at_next_alter_offsets empties the group then, so that the next split is planned and
    published with no owner to ack it (and the drain does not end before it)."""
    left = int(drain.get("recordsTotal") or 0) - int(drain.get("recordsDone") or 0)
    return not drain.get("extension") and left >= min_left


def part_round(metadata: str | None) -> int | None:
    """The round a parts-group commit's metadata claims (unverified), None when it is not a part (pure)."""
    from lagpilot_runtime.drain.plan import NextPart

    body = (metadata or "").rpartition(";mac=")[0]
    try:
        return NextPart.from_body(body).round
    except (ValueError, IndexError):
        return None


# drain 7's hot stream on partition 0: this many times what one eos consumer processes (partition 0 has
# one consumer however far the group scales), so the partition-capped group cannot hold it
HOT_FACTOR = 3
HOT_RATE_FALLBACK = 600  # records/s when no capacity was reported yet: 3 x 100 records / 500 ms (--cost-ms)


def hot_rate(given: int | None, capacity: float | None) -> tuple[int, str]:
    """(records/s, where from) of drain 7's hot stream (pure): `given` (--hot-rate) when set, else
    HOT_FACTOR times the eos consumers' measured capacity (status.capacityPerReplica: records one
    consumer processes per busy second, from the runtime's own report), else HOT_RATE_FALLBACK."""
    if given:
        return int(given), "given"
    if capacity is not None and capacity > 0:
        return max(1, math.ceil(HOT_FACTOR * float(capacity))), "measured"
    return HOT_RATE_FALLBACK, "fallback"


# aborted_transactions: per partition, in this order, one transaction each, with the steady stream paused
# until the drain is planned: the committed block is the drain's backlog, the aborted one ends at the
# split, so with 2 sub-ranges per partition the second one holds no visible record (H5's case)
TRANSACTIONS: tuple[tuple[str, int], ...] = (("commit", 12000), ("abort", 30000))


def invisible_sub_ranges(
    subs: Iterable[Mapping[str, Any]], aborted: Mapping[int, tuple[int, int]]
) -> list[dict[str, Any]]:
    """The drain's sub-ranges that hold no committed record (pure): inside a partition's aborted block
    `[lo, hi]` or its abort marker at `hi + 1` (the steady stream was paused while the block was
    written, so nothing else lies between)."""
    out = []
    for x in subs:
        blk = aborted.get(int(x["partition"]))
        if blk is not None and int(x["start"]) >= blk[0] and int(x["end"]) <= blk[1] + 2:
            out.append({k: x[k] for k in ("partition", "start", "end")})
    return out


def report_visible(
    counts: Iterable[tuple[int, int, int]], visible: Mapping[int, Iterable[int]]
) -> dict[str, int]:
    """A ledger report against the offsets a read_committed reader sees (pure), for a topic that holds
    transactions: `lost` = visible offsets never delivered, `duplicated` = deliveries beyond the first,
    `outside` = distinct delivered offsets that are not visible (an aborted record delivered, or a
    transaction marker's offset)."""
    vis = {int(p): set(map(int, offs)) for p, offs in visible.items()}
    seen: dict[tuple[int, int], int] = {}
    for p, o, n in counts:
        seen[(int(p), int(o))] = seen.get((int(p), int(o)), 0) + int(n)
    inside = sum(1 for (p, o) in seen if o in vis.get(p, ()))
    return {
        "produced": sum(len(v) for v in vis.values()),
        "delivered": sum(seen.values()),
        "distinct": len(seen),
        "lost": sum(len(v) for v in vis.values()) - inside,
        "duplicated": sum(n - 1 for n in seen.values()),
        "outside": len(seen) - inside,
    }


def offset_runs(
    counts: Iterable[tuple[int, int, int]], expected: Mapping[int, Iterable[int]], most: int = 40
) -> dict[str, dict[int, list[list[int]]]]:
    """Where a ledger misses or repeats offsets (pure), for a run whose `lost`/`duplicated` is not 0:
    per partition the runs `[a, b)` of expected offsets never delivered (`lost`) and the runs
    `[a, b, times]` of offsets delivered more than once (`duplicated`), at most `most` runs each."""
    seen: dict[tuple[int, int], int] = {}
    for p, o, n in counts:
        seen[(int(p), int(o))] = seen.get((int(p), int(o)), 0) + int(n)

    def runs(offsets: Iterable[tuple[int, int]]) -> list[list[int]]:
        out: list[list[int]] = []
        for o, n in sorted(offsets):
            if out and out[-1][1] == o and out[-1][2] == n:
                out[-1][1] = o + 1
            else:
                out.append([o, o + 1, n])
        return out[:most]

    lost = {
        int(p): [r[:2] for r in runs((int(o), 0) for o in offs if (int(p), int(o)) not in seen)]
        for p, offs in expected.items()
    }
    dup: dict[int, list[tuple[int, int]]] = {}
    for (p, o), n in seen.items():
        if n > 1:
            dup.setdefault(p, []).append((o, n))
    return {"lost": {p: r for p, r in lost.items() if r}, "duplicated": {p: runs(v) for p, v in dup.items()}}
