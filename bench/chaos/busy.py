"""The campaign's faults for busy drains (issue 25 item 2; docs/drain.md "Busy drains"), drain 7: the
eos drain is kept busy by a hot stream on partition 0 (`--hot-rate` records/s on top of the steady
stream, several times what its consumer processes) so the operator hands off next splits and
delivers them as signed parts to the running driver. Into that drain:

- operator_at_next_publish: the operator dies like kill -9 right after writing a next split's requests
  to the mailbox, before the status write that records it published (crash point `NextPublish:effect`);
  the next operator must find its own requests there (no second publish) and resolve the split;
- operator_at_next_seal: the operator dies like kill -9 right after the status write that appends a
  sealed next split's sub-ranges (crash point `NextSeal:status`), before its part is delivered;
- operator_at_deliver: the operator dies right after writing a part to the parts group, before its
  status write (`Deliver:effect`);
- operator_at_next_alter_offsets (NOT APPLICABLE since the pod runner retired, bench/chaos/pods.py
  NODE_NOT_APPLICABLE; the code below stays for a hold on a node of the bench's own): the group
  emptied during the busy drain (its consumer pods deleted and their replacements held Pending by the
  pod runner, as when no node fits them) so a published next split
  has no owner to ack it: the operator acks for the absent owners and moves the group's offsets to the
  split, and dies right after that effect (`NextAlterOffsets:effect`); the consumers come back once it
  fired; the next operator must seal that split from the acks it wrote, the consumers resume at the
  split, the drain ends exact;
- forged_part: while the driver runs a delivered part or waits for the next, a part signed with a
  random key (the next round, every partition from 0 past its end) is committed to the drain's parts
  group `<groupId>.lagpilot-drain.<tag>.<id>.next`: it must be refused (the driver logs
  `drain_part_refused`) and the drain still end exact;
- stale_part: the operator's own part of an older round (read from the parts group earlier, genuinely
  signed) committed again while the drain is at a later round: no driver may take it (again), the
  operator delivers the current part again, the drain ends exact;
- busy_driver_kill: the drain Job's process group SIGKILLed after its driver took a delivered part
  (its `drain_next_part` log line), while it runs it or waits for the next one: the operator's retry
  (a new attempt) must take over exactly.

Each is confirmed (marker written by the dying operator and its death seen; the forged commit read back
from Kafka and the driver's refusal logged after it; the stale commit read back; the driver's pid gone
with a part taken) before it
counts; recovered = that drain Verified (the driver kill: by a later attempt) and the system healthy;
the end check of the ledgers (`lost`, `duplicated`) covers every offset of the drain."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from bench.chaos import faults as cf
from bench.chaos.faults import Fault
from bench.chaos.procs import TERMINAL, pid_gone, say
from bench.chaos.review import ReviewFaults

# operator_at_next_alter_offsets: the group is kept empty at most this long for the operator to reach
# NextAlterOffsets (a next split planned, published, then acted for the absent owners: a few cycles)
ALTER_WAIT_S = 240.0
ALTER_MIN_LEFT = 10_000  # records the drain has left when its group is emptied (its next split comes later)
MIN_HOT_S = 120.0  # the hot stream lasts at least this long ...
MAX_HOT_S = 480.0  # ... and at most this long (then it stops whatever has not fired)
# forged_part writes again (every ~10 s) until the driver reads and refuses it: a driver reads its parts
# group only between passes, so while it runs a long part the operator's next delivery overwrites the
# forged one unread (run 5, warm: 5 writes in ~50 s, none read)
FORGE_TRIES = 15
STALE_WAIT_S = (
    120.0  # the driver kill waits this long after the forgery for stale_part's window (a later round)
)


def _done(f: Fault | None) -> bool:
    return f is None or f.fired or bool(f.detail)


@dataclass
class _BusyRun:
    """drain_seven's kinds and what its polls learned (one busy drain, and the drains its kinds left
    are carried over to)."""

    faults: dict[str, Fault]
    points: dict[str, Fault]  # the operator's crash points (cf.BUSY_POINTS)
    empty_points: dict[str, Fault]  # the empty group's crash point (cf.EMPTY_GROUP_POINTS)
    ao: Fault | None  # operator_at_next_alter_offsets
    fp: Fault | None  # forged_part
    dk: Fault | None  # busy_driver_kill
    sp: Fault | None  # stale_part
    hold: dict[str, Any] = field(
        default_factory=dict
    )  # the empty group's evidence (operator_at_next_alter_offsets)
    genuine: dict[int, str] = field(
        default_factory=dict
    )  # the operator's parts as read from the parts group, per round
    forged: set[str] = field(
        default_factory=set
    )  # what forged_part wrote there (never taken for a genuine part)
    seen: dict[str, Any] = field(default_factory=lambda: {"rounds": 0, "attempts": set(), "busy": False})
    hot_at: list[float] = field(default_factory=list)
    hot_ev: dict[str, Any] = field(
        default_factory=dict
    )  # the hot stream's rate and where it came from (evidence of every kind)
    eligible: list[float] = field(default_factory=list)
    kill_att: int = 0
    # the crash points' restarts can end a busy drain before the kinds after them had a window (the
    # restarted operator measures the rates afresh and may hand the partitions back): while the hot
    # stream runs, the kinds left go on in the next drain (verified: drain id -> when seen Verified)
    carried: set[int] = field(default_factory=set)
    verified: dict[int, float] = field(default_factory=dict)
    holds: list[dict[str, Any]] = field(
        default_factory=list
    )  # empty groups of carried drains that reached no NextAlterOffsets


class BusyFaults(ReviewFaults):
    # -- what the driver and the parts group show ------------------------------------------------------
    def driver_events(self, event: str, drain: Any) -> list[dict[str, Any]]:
        """`event` records of drain `drain` in every drain Job pod's log (dead ones too: NodePods keeps
        the last read of each in a file) and, --warm-runtime, the runtime pod's."""
        out: list[dict[str, Any]] = []
        logs = self.workdir / "pods" / "logs"
        for f in sorted(logs.glob(f"{self.ns}_eos-drain-*.log")) if logs.exists() else []:
            if "runtime" in f.name:
                continue
            out += cf.log_events(f.read_text(errors="replace").splitlines(), event, str(drain))
        if self.warm:
            out += self.runtime_events(event, str(drain))
        return out

    def attempt_events(self, event: str, drain: Any, attempt: int) -> list[dict[str, Any]]:
        """`event` records of drain `drain` logged by its cold attempt `attempt` (that Job pod's log; a
        warm attempt's driver logs in the runtime pod: driver_events, not told apart per attempt)."""
        logs = self.workdir / "pods" / "logs"
        out: list[dict[str, Any]] = []
        for f in sorted(logs.glob(f"{self.ns}_eos-drain-{drain}-{attempt}-*.log")) if logs.exists() else []:
            out += cf.log_events(f.read_text(errors="replace").splitlines(), event, str(drain))
        return out

    def parts_group(self, drain: Any) -> str:
        from lagpilot_runtime.drain.plan import owner_tag, parts_group

        return parts_group(
            self.groups["eos"], str(drain), owner_tag(str((self.cr("eos") or {})["metadata"]["uid"]))
        )

    def read_parts_commit(self, drain: Any) -> tuple[int, str] | None:
        """(offset, metadata) of the drain's parts group commit, None when there is none."""
        for tp in self.committed_offsets(self.parts_group(drain), [0]):
            if tp.offset is not None and tp.offset >= 0:
                meta = tp.metadata
                return int(tp.offset), (meta.decode() if isinstance(meta, bytes) else str(meta or ""))
        return None

    def write_parts_commit(self, drain: Any, offset: int, metadata: str) -> None:
        """A commit to the drain's parts group as the operator makes it (act/drain.py write_part)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        g = self.parts_group(drain)
        req = ConsumerGroupTopicPartitions(g, [TopicPartition(self.topic, 0, int(offset), metadata=metadata)])
        res = self.admin.alter_consumer_group_offsets([req], request_timeout=30)[g].result(timeout=30)
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"commit to {g}: {bad[0].error}")

    # -- the empty group (operator_at_next_alter_offsets) ----------------------------------------------
    @staticmethod
    def eos_consumer(pod: Any) -> bool:
        """A pod of the eos consumer Deployment (what the pod runner holds while the group is empty)."""
        labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
        return (
            labels.get("app.kubernetes.io/component") == "consumer"
            and labels.get("app.kubernetes.io/instance") == "eos"
        )

    def consumer_pod_names(self) -> list[str]:
        return [
            p.metadata.name
            for p in self.core.list_namespaced_pod(
                self.ns, label_selector="app.kubernetes.io/component=consumer,app.kubernetes.io/instance=eos"
            ).items
            if p.metadata.deletion_timestamp is None
        ]

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.ns)

    def group_members(self) -> int | None:
        """Members of the eos consumer group (Kafka's view), None when it cannot be read."""
        g = self.groups["eos"]
        try:
            return len(
                self.admin.describe_consumer_groups([g], request_timeout=30)[g].result(timeout=30).members
            )
        except Exception:  # noqa: BLE001 - evidence only
            return None

    def empty_group(self, d: dict[str, Any]) -> dict[str, Any]:
        """Empty the eos group: the pod runner holds the eos consumer pods Pending (no node fits them),
        then their running pods are deleted (each stops gracefully and leaves the group at once; the
        ReplicaSet's replacements stay Pending). Returns the evidence of the hold."""
        self.runner.hold = self.eos_consumer
        names = self.consumer_pod_names()
        for name in names:
            with contextlib.suppress(Exception):
                self.delete_pod(name)
        say(f"drain 7: eos group emptied (consumer pods {names} deleted, replacements held Pending)")
        return {
            "held_at": time.time(),
            "pods_deleted": names,
            "round_at_hold": d.get("round"),
            "extension_at_hold": bool(d.get("extension")),
        }

    def release_group(self, hold: dict[str, Any]) -> None:
        """The eos consumer pods are bound again (the held replacements start)."""
        if not hold or "released_at" in hold:
            return
        self.runner.hold = None
        hold["released_at"] = time.time()
        hold["held_s"] = round(hold["released_at"] - hold["held_at"], 1)
        with contextlib.suppress(Exception):
            hold["bound_after_release"] = self.runner.bind_pending(self.ns)
        say(f"drain 7: eos consumer pods released after {hold['held_s']} s")

    def republish_ok(self, f: Fault) -> str | None:
        """operator_at_next_publish recovered (None): the operator that came back recorded the next split
        published with a status write only (its requests were in the mailbox), never a second Publish."""
        path = self.op.log_path
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        acts = cf.publish_actions_after(lines, f.evidence.get("drain"), float(f.at or 0))
        f.evidence["next_publish_actions_after"] = acts[:5]
        if not acts:
            return "no NextSplitPublished record after the crash yet"
        return None if acts[0] == "WriteStatus" else f"the next operator published again: {acts[:5]}"

    def busy_job(self, d: dict[str, Any]) -> tuple[str, int, str] | None:
        """(pod, pid, runtime label) of the current attempt's running Job pod."""
        got = self.drain_pod()
        if got and got[0].startswith(f"eos-drain-{d.get('id')}-{d.get('attempt')}-"):
            return got
        return None

    # -- the faults ------------------------------------------------------------------------------------
    def forge_part(self, f: Fault, d: dict[str, Any], forged_out: set[str] | None = None) -> None:
        """forged_part: commit a part signed with a random key at the next round (cf.forged_part) to
        the drain's parts group, again (at most FORGE_TRIES times) until the driver logs a refusal
        after it (the operator, reading it as no part, may overwrite it with its own before the
        driver's next poll; a driver running a pass does not poll).
        Fired = the forged commit read back from Kafka as written and the refusal logged."""
        drain, rnd = d["id"], int(d.get("round") or 0)
        from lagpilot_runtime.drain.plan import owner_tag

        owner = owner_tag(str((self.cr("eos") or {})["metadata"]["uid"]))
        forged = cf.forged_part(drain, rnd, self.watermarks(), owner, self.topic)
        if forged_out is not None:
            forged_out.add(forged)
        refused0 = len(self.driver_events("drain_part_refused", drain))
        tries, landed, refused = 0, False, 0
        while tries < FORGE_TRIES and not refused:
            tries += 1
            self.write_parts_commit(drain, rnd + 1, forged)
            got = self.read_parts_commit(drain)
            landed = landed or (got is not None and got[1] == forged)
            for _ in range(20):  # ~10 s: the driver polls its parts group every second
                if refused:
                    break
                time.sleep(0.5)
                refused = len(self.driver_events("drain_part_refused", drain)) - refused0
        f.evidence = {
            "drain": drain,
            "round": rnd,
            "forged_round": rnd + 1,
            "forged_landed": landed,
            "forged_writes": tries,
            "driver_refused_logged": refused,
            "parts_taken_before": len(self.taken(drain)),
            **self.how_ran(d),
        }
        if landed and refused:
            f.fired, f.at = True, time.time()
        else:
            f.detail = f"not confirmed: forged commit landed {landed}, driver refusals logged {refused}"

    def replay_stale(self, f: Fault, d: dict[str, Any], genuine: dict[int, str], current: int) -> None:
        """stale_part: the operator's own (genuinely signed) part of an older round, read earlier from
        the parts group, committed again at its offset while the drain is at round `current`. Fired =
        the commit read back as written. The driver must not take it (a part is taken only when newer
        than its plan), the operator re-delivers the current part (it reads an older round)."""
        drain = d["id"]
        r = max(x for x in genuine if x < current)
        self.write_parts_commit(drain, r, genuine[r])
        got = self.read_parts_commit(drain)
        f.evidence = {
            "drain": drain,
            "stale_round": r,
            "current_round": current,
            "stale_landed": got is not None and got[1] == genuine[r],
            "parts_taken_before": len(self.taken(drain)),
            **self.how_ran(d),
        }
        if f.evidence["stale_landed"]:
            f.fired, f.at = True, time.time()
        else:
            f.detail = f"not confirmed: the group's commit read back {got}"

    def taken(self, drain: Any) -> list[dict[str, Any]]:
        return cf.next_parts(self.driver_events("drain_next_part", drain), drain)

    def stale_ok(self, f: Fault) -> str | None:
        """stale_part recovered (None): after the replay no driver of the drain took a part of a round at
        or below the stale one, and the operator's current part is back in the parts group."""
        drain, stale = f.evidence["drain"], int(f.evidence["stale_round"])
        after = self.taken(drain)[int(f.evidence["parts_taken_before"]) :]
        f.evidence["parts_taken_after"] = [(p.get("round"), p.get("final")) for p in after]
        again = [p.get("round") for p in after if int(p.get("round") or 0) <= stale]
        return f"a driver took the stale round {again} again" if again else None

    def kill_busy_driver(self, f: Fault, d: dict[str, Any], eligible_since: list[float]) -> bool:
        """busy_driver_kill once the current attempt's driver took a delivered part: SIGKILL its Job pod's
        process group, preferably while it runs that part (records left); after 60 s of eligible polls
        without such a moment, while it waits for the next one. Returns whether it was tried."""
        att = int(d.get("attempt") or 0)
        job = self.busy_job(d)
        if job is None:
            return False
        taken = [
            p
            for p in cf.next_parts(
                self.attempt_events("drain_next_part", d["id"], att)
                if job[2] != "warm"
                else self.driver_events("drain_next_part", d["id"]),
                d["id"],
            )
            if not p.get("final")
        ]
        if not taken:
            return False
        if not eligible_since:
            eligible_since.append(time.time())
        running = (
            int(d.get("recordsDone") or 0) < int(d.get("recordsTotal") or 0)
            and int(taken[-1].get("unfinished") or 0) > 0
        )
        if not running and time.time() - eligible_since[0] < 60:
            return False
        name, pid, label = job
        os.killpg(pid, signal.SIGKILL)
        gone = pid_gone(pid)
        phase = self.drain().get("phase")
        f.evidence = {
            "pod": name,
            "pid": pid,
            "attempt": att,
            "job_runtime_label": label,
            "status_runtime": d.get("runtime"),
            "parts_taken": len(taken),
            "last_part_round": taken[-1].get("round"),
            "driver_state": "running a part" if running else "waiting for a part",
            "recordsDone": d.get("recordsDone"),
            "recordsTotal": d.get("recordsTotal"),
            "sub_ranges": len(d.get("subRanges") or ()),
            "round": d.get("round"),
            "phase_after_kill": phase,
        }
        if gone and phase == "Running":
            f.fired, f.at = True, time.time()
        else:
            f.detail = f"not confirmed: pid gone {gone}, drain phase {phase}"
        return True

    def drain_seven(self, rnd: int) -> list[Fault]:
        """Drain 7: a busy drain (hot stream on partition 0) with the selected busy kinds injected in this
        order: the operator crash points (armed before the drain: they fire at its first next split
        and its delivery), then the empty group for NextAlterOffsets (its consumers back once it fired,
        or after ALTER_WAIT_S), the forged part (once the driver took a part), the driver kill (once the
        current attempt took a part, after the forgery), the stale part (once the parts group holds a
        round above one read earlier)."""
        want = [k for k in cf.BUSY_KINDS if k in self.kinds]
        faults = {k: Fault(k, rnd, "eos") for k in want}
        st = _BusyRun(
            faults=faults,
            points={k: f for k, f in faults.items() if k in cf.BUSY_POINTS},
            empty_points={k: f for k, f in faults.items() if k in cf.EMPTY_GROUP_POINTS},
            ao=faults.get("operator_at_next_alter_offsets"),
            fp=faults.get("forged_part"),
            dk=faults.get("busy_driver_kill"),
            sp=faults.get("stale_part"),
        )
        d = self._busy_polls(st, rnd)
        self._busy_outcomes(st, d)
        for f in faults.values():
            self.record(f)
        return list(faults.values())

    def _busy_polls(self, st: _BusyRun, rnd: int) -> dict[str, Any]:
        """drain_seven's polls of its drain (and of the drains the kinds left are carried over to): each
        poll's step, a drain's end; the last status seen."""
        d: dict[str, Any] = {}
        last: dict[str, Any] = {}  # the last status of our current drain
        try:
            # the hot stream runs up to MAX_HOT_S, then the drain works off what it took (run 3, load 28:
            # 118,392 records in its retry, still Running 600 s after the burst): polled that much longer
            for d, ours in self.drain_polls(
                f"drain 7 (busy) of round {rnd}",
                before_burst=functools.partial(self._busy_arm, st),
                each=functools.partial(self._busy_check, st),
                window=MAX_HOT_S + self.timeout * 2,
            ):
                if not ours or int(d.get("id") or 0) in st.carried:
                    if st.hot_at and time.time() - st.hot_at[0] > MAX_HOT_S:
                        break
                    continue
                if last and last.get("id") != d.get("id"):
                    # our drain ended between two polls (under load): its outcome from status.drain.history
                    end = next(
                        (h for h in d.get("history") or () if str(h.get("id")) == str(last.get("id"))), {}
                    )
                    prev = {
                        **last,
                        "phase": end.get("phase") or "Unknown",
                        "message": f"ended between two polls ({end.get('reason') or 'not in status.drain.history'})",
                    }
                    if not self._busy_ended(st, prev):
                        d = prev
                        break
                last = d
                self._busy_step(st, d)
                if d.get("phase") in TERMINAL:
                    if self._busy_ended(st, d):
                        last = {}
                        continue
                    break
        finally:
            self.producer.cool()
            self.release_group(st.hold)
        return d

    def _busy_arm(self, st: _BusyRun) -> None:
        """Before the burst: the crash points armed, the hot stream on."""
        for k in st.points:
            (self.crash_dir / cf.BUSY_POINTS[k].replace(":", "-")).unlink(missing_ok=True)
        for k in st.empty_points:
            (self.crash_dir / cf.EMPTY_GROUP_POINTS[k].replace(":", "-")).unlink(missing_ok=True)
        cap = ((self.cr("eos") or {}).get("status") or {}).get("capacityPerReplica")
        rate, source = cf.hot_rate(self.args.hot_rate, cap)
        st.hot_ev.update({"hot_rate": rate, "hot_rate_source": source, "capacity_per_replica": cap})
        say(f"drain 7: hot stream {rate} records/s on partition 0 ({source}; eos capacityPerReplica {cap})")
        self.producer.heat(0, rate)
        st.hot_at.append(time.time())

    def _busy_check(self, st: _BusyRun) -> None:
        """Every poll: which crash points fired."""
        self.check_points(
            st.points,
            cf.BUSY_POINTS,
            more=lambda d: {
                "drain": d.get("id"),
                "round": d.get("round"),
                "extension": bool(d.get("extension")),
            },
        )
        self.check_points(
            st.empty_points,
            cf.EMPTY_GROUP_POINTS,
            more=lambda d: {
                "drain": d.get("id"),
                "round": d.get("round"),
                "extension": bool(d.get("extension")),
                "group_members_at_fire": self.group_members(),
            },
        )

    def _busy_ended(self, st: _BusyRun, dd: dict[str, Any]) -> bool:
        """Drain `dd` (ours) ended: record it; True when the kinds left go on in the next drain."""
        self._busy_check(st)
        if dd.get("phase") == "Verified":
            st.verified[int(dd.get("id") or 0)] = time.time()
        left = [k for k, f in st.faults.items() if not _done(f)]
        if not (
            dd.get("phase") == "Verified"
            and left
            and not any(f.fired for f in (st.fp, st.dk, st.sp) if f is not None)
            and self.producer.hot
            and st.hot_at
            and time.time() - st.hot_at[0] < MAX_HOT_S
        ):
            return False
        say(
            f"drain 7: drain {dd.get('id')} Verified at round {dd.get('round')} before {left} had a window: "
            "they go on in the next drain (the hot stream runs)"
        )
        st.carried.add(int(dd.get("id") or 0))
        self.release_group(st.hold)
        if st.hold and st.ao is not None and not st.ao.fired:
            st.holds.append({**st.hold, "drain": dd.get("id")})
            st.hold.clear()
        st.genuine.clear()
        st.eligible.clear()
        return True

    def _busy_step(self, st: _BusyRun, d: dict[str, Any]) -> None:
        """One poll of our drain: what it shows, then the next kind injected when its window is open."""
        seen = st.seen
        seen["busy"] = seen["busy"] or bool(d.get("busy"))
        seen["rounds"] = max(seen["rounds"], int(d.get("round") or 0))
        running = d.get("phase") == "Running"
        current = None
        if running:
            seen["attempts"].add(int(d.get("attempt") or 0))
            current = self._busy_genuine_part(st, d)
        crash_done = all(_done(f) for f in st.points.values())
        self._busy_hold_group(st, d, crash_done and running)
        # the other kinds once every crash point is done and the group is back
        points_done = crash_done and _done(st.ao) and (not st.hold or "released_at" in st.hold)
        if points_done and running:
            self._busy_inject(st, d, current)
        dk = st.dk
        if (
            dk is not None
            and dk.fired
            and "retry_attempt" not in dk.evidence
            and running
            and int(d.get("attempt") or 0) > st.kill_att
        ):
            dk.evidence.update(
                {
                    "retry_attempt": int(d.get("attempt") or 0),
                    "retry_runtime": d.get("runtime"),
                    "retry_sub_ranges": len(d.get("subRanges") or ()),
                }
            )
        self._busy_cool(st)

    def _busy_genuine_part(self, st: _BusyRun, d: dict[str, Any]) -> int | None:
        """The round of the operator's part in the drain's parts group, kept per round (stale_part
        replays one), None when there is none or it is not genuine."""
        with contextlib.suppress(Exception):  # the genuine parts, per round (stale_part replays one)
            got = self.read_parts_commit(d["id"])
            if got is not None and cf.part_round(got[1]) == got[0] and got[1] not in st.forged:
                st.genuine.setdefault(got[0], got[1])
                return got[0]
        return None

    def _busy_hold_group(self, st: _BusyRun, d: dict[str, Any], crash_done_running: bool) -> None:
        """operator_at_next_alter_offsets: the group emptied, or released when it fired or waited enough.

        The group is emptied while no next split is in hand and the drain has ALTER_MIN_LEFT records
        left, so that its NEXT split is planned and published with no owner: a split in hand may be
        acked by its owners as they leave (16:41 and 17:07, shared stack; the operator plans and
        publishes in one cycle, 0.2 s apart, so a poll cannot catch it in between), a drain near its end
        may hand its partitions back first (16:41). A drain that ends while held releases the group; the
        next one (carried over) empties it again."""
        ao, hold = st.ao, st.hold
        if (
            ao is not None
            and not _done(ao)
            and not hold
            and crash_done_running
            and d.get("busy")
            and cf.room_for_next_split(d, ALTER_MIN_LEFT)
        ):
            hold.update(self.empty_group(d))
        elif (
            hold and "released_at" not in hold and (_done(ao) or time.time() - hold["held_at"] > ALTER_WAIT_S)
        ):
            self.release_group(hold)
            if ao is not None and not ao.fired and not ao.detail:
                ao.detail = (
                    f"the operator did not reach {cf.EMPTY_GROUP_POINTS[ao.kind]} in {hold['held_s']} s "
                    f"of an empty group (round {d.get('round')}, extension {d.get('extension')})"
                )

    def _busy_inject(self, st: _BusyRun, d: dict[str, Any], current: int | None) -> None:
        """The crash points done and the group back, the drain running: the forged part, then the driver
        kill, then the stale part, each once its window is open (one per poll)."""
        fp, dk, sp = st.fp, st.dk, st.sp
        if (
            fp is not None
            and not _done(fp)
            and d.get("busy")
            and any(not p.get("final") for p in self.taken(d.get("id")))
        ):
            try:
                self.forge_part(fp, d, st.forged)
            except Exception as exc:  # noqa: BLE001 - not injected: say so
                fp.detail = f"forging failed: {exc!r}"[:300]
        elif (
            dk is not None
            and not _done(dk)
            and _done(fp)
            and (_done(sp) or time.time() - (fp.at if fp is not None and fp.at else 0) > STALE_WAIT_S)
        ):
            if self.kill_busy_driver(dk, d, st.eligible):
                st.kill_att = int(dk.evidence.get("attempt") or 0)
        elif (
            sp is not None
            and not _done(sp)
            and current is not None
            and any(r < current for r in st.genuine)
            and not (dk is not None and dk.fired and "retry_attempt" not in dk.evidence)
        ):
            try:
                self.replay_stale(sp, d, st.genuine, current)
            except Exception as exc:  # noqa: BLE001
                sp.detail = f"replay failed: {exc!r}"[:300]

    def _busy_cool(self, st: _BusyRun) -> None:
        """The hot stream off once every kind is in (at least MIN_HOT_S) or after MAX_HOT_S."""
        if not (self.producer.hot and st.hot_at):
            return
        dk = st.dk
        all_in = all(_done(f) for f in st.faults.values()) and (
            dk is None or not dk.fired or "retry_attempt" in dk.evidence
        )
        hot_s = time.time() - st.hot_at[0]
        if (all_in and hot_s >= MIN_HOT_S) or hot_s > MAX_HOT_S:
            self.producer.cool()
            say(
                f"drain 7: hot stream off after {hot_s:.0f} s (rounds {st.seen['rounds']}, attempts {sorted(st.seen['attempts'])})"
            )

    def _busy_outcomes(self, st: _BusyRun, d: dict[str, Any]) -> None:
        """After the polls: each kind's evidence, and whether it fired and its drain recovered."""
        ao = st.ao
        if ao is not None and st.hold:
            ao.evidence.update(st.hold)
        if ao is not None and st.holds:
            ao.evidence["earlier_holds"] = st.holds
        if d.get("phase") not in TERMINAL:
            say(
                f"drain 7: still {d.get('phase')} when the bench stopped polling ({d.get('recordsDone')}/{d.get('recordsTotal')})"
            )
        final_verified_at = time.time() if d.get("phase") == "Verified" else None
        parts_seen = self.taken(d.get("id")) if d else []
        for k, f in st.faults.items():
            if not f.fired and not f.detail:
                f.detail = (
                    f"no window in this drain (busy {st.seen['busy']}, rounds {st.seen['rounds']}, genuine parts read "
                    f"{sorted(st.genuine)}, last phase {d.get('phase')}, drains carried over {sorted(st.carried)})"
                )
            if f.fired:
                self._busy_outcome(st, d, k, f, final_verified_at, parts_seen)

    def _busy_outcome(
        self,
        st: _BusyRun,
        d: dict[str, Any],
        k: str,
        f: Fault,
        final_verified_at: float | None,
        parts_seen: list[dict[str, Any]],
    ) -> None:
        """A fired kind: recovered when its drain was Verified (the driver kill: by a later attempt) and
        the system healthy (recover_wait, with the kind's own check)."""
        fired_in = int(f.evidence.get("drain") or d.get("id") or 0)
        # a fault of a carried drain: that drain was seen Verified; else the last one must be
        verified_at = st.verified.get(fired_in) if fired_in in st.carried else final_verified_at
        f.evidence.update(
            {
                **st.hot_ev,
                "final_phase": d.get("phase"),
                "verified_attempt": d.get("attempt"),
                "verified_runtime": d.get("runtime"),
                "rounds": d.get("round"),
                "drains_carried_over": sorted(st.carried),
                "parts_taken": [(p.get("round"), p.get("final")) for p in parts_seen],
            }
        )
        if verified_at is None:
            f.detail = (
                f"drain ended {d.get('phase')}: {str(d.get('message'))[:200]}"
                if d.get("phase") in TERMINAL
                else f"drain still {d.get('phase')} when polling stopped: {str(d.get('message'))[:200]}"
            )
            return
        if k == "busy_driver_kill" and int(d.get("attempt") or 0) <= st.kill_att:
            f.detail = f"the drain was Verified by attempt {d.get('attempt')}, not a retry of {st.kill_att}"
            return
        extra = (
            (lambda f=f: self.stale_ok(f))
            if k == "stale_part"
            else (lambda f=f: self.republish_ok(f))
            if k == "operator_at_next_publish"
            # warm: the runtime must have cancelled the killed caller's plan (drain_two's check)
            else (lambda f=f: self.cancel_seen(f, d.get("id")))
            if k == "busy_driver_kill"
            else None
        )
        assert f.at is not None
        secs = self.recover_wait(f.at, k, self.timeout, None, extra)
        f.recovered = secs is not None
        # a carried drain's fault: recovered when its drain was Verified (the health check above runs
        # only after the later drain; it says nothing of how long this one took: evidence)
        f.evidence["health_checked_after_s"] = None if secs is None else round(secs, 1)
        f.recover_s = (
            None
            if secs is None
            else (verified_at - f.at if fired_in in st.carried else max(secs, verified_at - f.at))
        )
