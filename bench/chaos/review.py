"""The campaign's faults for issue 23's fixed review items (bench/chaos.py): a second operator instance
(M3: it stands by; the leader killed, it takes over), a forged and a replayed plan sent to the warm
runtime during a warm drain (C1: refused 401, the drain exact), the warm runtime's processes SIGSTOPped
mid-plan (H3: the attempt fails by its heartbeat while the runtime is still stopped, the retry
finishes), and the CR deleted while its drain is `Planned` with the owners' acks in the mailbox (H1:
the finalizer hands `[ack, split)` back, the re-created CR drains it). Each confirmed, then waited on."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from bench.chaos import faults as cf
from bench.chaos.drain_watch import DrainWatch
from bench.chaos.faults import Fault
from bench.chaos.procs import (
    JOB_LABEL,
    PARTS,
    TERMINAL,
    Operator,
    dead,
    pid_gone,
    say,
)
from lagpilot.model.crd import GROUP, PLURAL, VERSION
from lagpilot_dev.paths import free_port
from lagpilot_dev.runtime_attacker import attack


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


class ReviewFaults(DrainWatch):
    # -- M3: a second operator instance ----------------------------------------------------------------
    def second_operator(self, f: Fault) -> None:
        """Start a second operator (its own identity) on the namespace: confirmed when it logs that it
        stands by and reconciles nothing while the leader runs 2 more cycles; then SIGKILL the leader and
        keep it down until the standby reconciles (took over: evidence `took_over_s`); then the standby
        is stopped (SIGTERM releases the Lease) and the campaign's operator comes back."""
        assert self.op.proc is not None
        # started by its constructor (OperatorProcess.__init__)
        sb = Operator(
            dict(self.op.env, LAGPILOT_POD_NAME=f"chaos-standby-{self.run_id}"),
            self.ns,
            self.workdir / f"operator-standby-{f.round}.log",
            free_port(),
        )
        lines = lambda: sb.log_path.read_text(errors="replace").splitlines() if sb.log_path.exists() else []  # noqa: E731
        try:
            self.until(
                lambda: any("standing by" in ln for ln in lines()), "the second operator to stand by", 180
            )
            n0 = self.op.cycles() or 0.0
            self.until(lambda: (self.op.cycles() or 0.0) >= n0 + 2, "2 more cycles of the leader", 120)
            both = cf.reconciled(lines())
            f.evidence = {
                "standby_pid": sb.proc.pid if sb.proc else None,
                "standby_reconciled_before_kill": both,
            }
            if both:
                f.fired, f.at = True, time.time()
                f.detail = f"both operators reconcile ({both} reconcile lines of the second one)"
                return
            pid = self.op.proc.pid
            self.hold_operator = True  # the Deployment's restart would take its own Lease back at once
            os.killpg(pid, signal.SIGKILL)
            self.op.proc.wait(15)
            f.fired, f.at = pid_gone(pid), time.time()
            f.evidence.update({"pid": pid, "leader_returncode": self.op.proc.returncode})
            if not f.fired:
                return
            try:
                self.until(lambda: cf.reconciled(lines()) > 0, "the standby to take over", self.timeout)
                f.evidence["took_over_s"] = round(time.time() - f.at, 1)
                self.until(lambda: (sb.cycles() or 0.0) >= 2, "2 cycles of the new leader", self.timeout)
                f.evidence["new_leader_cycles"] = sb.cycles()
            except TimeoutError as exc:
                f.evidence["took_over_s"] = None
                say(f"second_operator: {exc}")
        finally:
            sb.stop()
            self.hold_operator = False
            self.op.ensure()

    # -- C1 + H3: during a warm drain ----------------------------------------------------------------
    def watermarks(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-watermarks-{self.run_id}"})
        try:
            return {
                p: int(c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1])
                for p in range(PARTS)
            }
        finally:
            c.close()

    def live_job_plan(self) -> str | None:
        """The running Job's own signed plan (as anyone who can read Jobs could read it), as a body."""
        from kubernetes import client

        for job in client.BatchV1Api(self.api).list_namespaced_job(self.ns, label_selector=JOB_LABEL).items:
            if (job.status.active or 0) > 0:
                env = {e.name: e.value for e in job.spec.template.spec.containers[0].env or []}
                if env.get("LAGPILOT_DRAIN_PLAN") and env.get("LAGPILOT_DRAIN_PLAN_AUTH"):
                    return json.dumps(
                        {
                            "plan": env["LAGPILOT_DRAIN_PLAN"],
                            "auth": json.loads(env["LAGPILOT_DRAIN_PLAN_AUTH"]),
                        }
                    )
        return None

    def runtime_host(self) -> str:
        """Where the warm runtime listens for its drain pods: the runtime pod's IP on the node's bridge
        (lagpilot_dev.runtime_attacker)."""
        rt = self.runtime_pod()
        if rt is None:
            raise RuntimeError("no drain runtime pod")
        ip = self.core.read_namespaced_pod(rt[0], self.ns).status.pod_ip
        if not ip:
            raise RuntimeError(f"the drain runtime pod {rt[0]} has no IP yet")
        return str(ip)

    def forge(self, f: Fault, d: dict[str, Any]) -> None:
        """forged_plan: the C1 attack for the live drain id (bare, made-up signature) and the live Job's
        own signed plan replayed, from another process. Fired = the requests reached the runtime (an
        answer and the runtime's `drain_runtime_refused` lines)."""
        from lagpilot.act.drain_runtime import runtime_port

        port, host = runtime_port(self.ns, "eos"), self.runtime_host()
        before = len(self.runtime_events("drain_runtime_refused"))
        bodies = cf.forged_bodies(
            str(d["id"]), self.topic, self.groups["eos"], self.watermarks(), time.time()
        )
        replay = self.live_job_plan()
        answers = attack(port, bodies + ([replay] if replay else []), host=host)
        time.sleep(1.0)
        refused = len(self.runtime_events("drain_runtime_refused")) - before
        f.evidence = {
            "port": port,
            "host": host,
            "answers": [[s, b[:160]] for s, b in answers],
            "runtime_refused_logged": refused,
            "drain": d.get("id"),
            "recordsDone": d.get("recordsDone"),
            "recordsTotal": d.get("recordsTotal"),
            "replayed_live_plan": replay is not None,
            "replay_body": replay,
            **self.how_ran(d),
        }
        if all(s == 0 for s, _ in answers):
            f.detail = f"no answer from the runtime's {host}:{port}: {answers}"
            return
        f.fired, f.at = True, time.time()

    def forged_ok(self, f: Fault, drain_id: Any) -> str | None:
        """forged_plan recovered (None) = the two forged plans answered 401 and logged as refused, the
        live plan's replay never taken (409 busy while it runs), the runtime served that drain only its
        real attempts, and after the drain the replayed plan is refused as a replay (401)."""
        answers = [(int(s), str(b)) for s, b in f.evidence["answers"]]
        if not cf.refused_all(answers[:2]):
            return f"a forged plan was not refused: {answers[:2]}"
        if f.evidence["runtime_refused_logged"] < 2:
            return "the runtime did not log the refusals"
        if f.evidence["replayed_live_plan"] and answers[2][0] not in (401, 409):
            return f"the replayed live plan was answered {answers[2]}"
        if "replay_after" not in f.evidence and f.evidence.get("replay_body"):
            f.evidence["replay_after"] = [
                list(a)
                for a in attack(
                    f.evidence["port"], [f.evidence["replay_body"]], host=f.evidence.get("host", "127.0.0.1")
                )
            ]
        after = f.evidence.get("replay_after")
        if after and not (after[0][0] == 401 and "replay" in after[0][1]):
            return f"the finished plan replayed was not refused as a replay: {after}"
        served = self.runtime_events("drain_runtime_served", str(drain_id))
        f.evidence["runtime_served"] = [
            {k: e.get(k) for k in ("exit", "records", "cancelled")} for e in served
        ]
        return None

    def stop_runtime(
        self, f: Fault, d: dict[str, Any], job: tuple[str, int, str], rt: tuple[str, int | None, bool]
    ) -> list[int]:
        """runtime_sigstop: SIGSTOP every process of the runtime pod (its group and Spark's Python daemon,
        which has a group of its own). Fired = the runtime's root process stopped (state T)."""
        assert rt[1] is not None
        tree = [rt[1], *cf.descendants(rt[1])]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rt[1], signal.SIGSTOP)
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
        time.sleep(0.5)
        states = [proc_state(p) for p in tree]
        f.evidence = {
            "pod": rt[0],
            "pid": rt[1],
            "stopped": sum(1 for s in states if s == "T"),
            "processes": len(tree),
            "job_pod_at_stop": job[0],
            "job_pid": job[1],
            "drain": d.get("id"),
            "attempt_at_stop": d.get("attempt"),
            "recordsDone": d.get("recordsDone"),
            "recordsTotal": d.get("recordsTotal"),
            **self.how_ran(d),
        }
        if states[0] == "T":
            f.fired, f.at = True, time.time()
        else:
            f.detail = f"the runtime's process is {states[0]} after SIGSTOP"
            self.resume(tree)
        return tree

    def resume(self, tree: list[int]) -> None:
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)

    def drain_four(self, rnd: int) -> list[Fault]:
        """--warm-runtime, drain 4: forged plans sent to the runtime mid warm attempt, then the runtime's
        processes SIGSTOPped: the Job's process must end by its heartbeat while the runtime is still
        stopped (SIGCONT only then), and a retry finish the drain (Verified)."""
        fp, ss = Fault("forged_plan", rnd, "eos"), Fault("runtime_sigstop", rnd, "eos")
        want_fp, want_ss = "forged_plan" in self.kinds, "runtime_sigstop" in self.kinds
        d: dict[str, Any] = {}
        tree: list[int] = []
        attempts: dict[str, Any] = {}
        cold = 0
        drain_id = None
        try:
            for d, ours in self.drain_polls(f"drain 4 of round {rnd}"):
                if ours and d.get("attempt"):
                    attempts[str(d.get("attempt"))] = d.get("runtime")
                    drain_id = d.get("id")
                running = ours and cf.mid_way(d)
                if running and (
                    (want_fp and not fp.fired and not fp.detail)
                    or (want_ss and (fp.fired or fp.detail or not want_fp) and not ss.fired and not ss.detail)
                ):
                    job, rt = self.drain_pod(), self.runtime_pod()
                    if not (job and job[2] == "warm" and rt and rt[1]):
                        cold += 1 if job and job[2] == "cold" else 0
                    elif want_fp and not fp.fired and not fp.detail:
                        self.forge(fp, d)
                    elif time.time() - (fp.at or 0) > 3:
                        tree = self.stop_runtime(ss, d, job, rt)
                if ss.fired and tree and "job_ended_s" not in ss.evidence:
                    self._watch_stopped_job(ss, tree)
                if ours and d.get("phase") in TERMINAL:
                    break
        finally:
            if tree:
                self.resume(tree)
        for f, want in ((fp, want_fp), (ss, want_ss)):
            if want and not f.fired and not f.detail:
                f.detail = (
                    f"no warm attempt ran mid-way ({cold} polls saw a cold one; last phase {d.get('phase')})"
                )
        out = [f for f, want in ((fp, want_fp), (ss, want_ss)) if want]
        for f in out:
            if f.fired:
                self._drain_four_outcome(f, d, attempts, drain_id)
        for f in out:
            f.evidence.pop("replay_body", None)  # a signed plan: not written to the result
            self.record(f)
        return out

    def _watch_stopped_job(self, ss: Fault, tree: list[int]) -> None:
        """runtime_sigstop fired, its Job's end not seen yet: once the Job's process ended by itself, was
        the runtime still stopped (then resumed); after the timeout, resumed without an end."""
        jp = int(ss.evidence["job_pid"])
        if dead(jp):  # the Job's process ended by itself: was the runtime still stopped?
            ss.evidence["job_ended_s"] = round(time.time() - (ss.at or 0), 1)
            ss.evidence["runtime_still_stopped"] = proc_state(tree[0]) == "T"
            ss.evidence["job_log_tail"] = self.pod_log_tail(str(ss.evidence["job_pod_at_stop"]))
            self.resume(tree)
            ss.evidence["resumed_at"] = round(time.time(), 1)
        elif time.time() - (ss.at or 0) > self.timeout:
            ss.evidence["job_ended_s"] = None
            self.resume(tree)

    def _drain_four_outcome(
        self, f: Fault, d: dict[str, Any], attempts: dict[str, Any], drain_id: Any
    ) -> None:
        """A fired kind of drain 4: recovered when the drain was Verified (runtime_sigstop: by a retry,
        after the stopped attempt failed by its heartbeat) and the system healthy (forged_plan: its own
        check, that no forged plan ran)."""
        f.evidence.update(
            {
                "attempts": attempts,
                "final_phase": d.get("phase"),
                "verified_attempt": d.get("attempt"),
                "verified_runtime": d.get("runtime"),
            }
        )
        if d.get("phase") != "Verified":
            f.detail = f"drain ended {d.get('phase')}: {str(d.get('message'))[:200]}"
            return
        if f.kind == "runtime_sigstop":
            ok = (
                f.evidence.get("job_ended_s") is not None
                and f.evidence.get("runtime_still_stopped")
                and int(d.get("attempt") or 0) > int(f.evidence.get("attempt_at_stop") or 0)
            )
            if not ok:
                f.detail = (
                    "the attempt did not fail by its heartbeat while the runtime was stopped, or no retry "
                    f"finished: {f.evidence.get('job_ended_s')} {f.evidence.get('runtime_still_stopped')} "
                    f"attempt {d.get('attempt')}"
                )
                return
            check = None
        else:
            check = functools.partial(self.forged_ok, f, drain_id)
        assert f.at is not None
        secs = self.recover_wait(f.at, f.kind, self.timeout, None, check)
        f.recovered, f.recover_s = secs is not None, secs
        if not f.recovered and check is not None:
            f.detail = str(check())

    def pod_log_tail(self, pod: str, n: int = 3) -> list[str]:
        path = self.runner.log_path(self.ns, pod)
        if path is None or not Path(path).exists():
            return []
        return [ln[:300] for ln in Path(path).read_text(errors="replace").splitlines()[-n:]]

    # -- H1: the CR deleted while its drain is Planned ------------------------------------------------
    def mailbox(self) -> tuple[dict[int, Any], dict[int, int]]:
        """(the eos group's mailbox entries, its committed offsets) per partition."""
        from lagpilot_runtime import handoff_mailbox as mbx

        own = self.groups["eos"]
        entries = {
            tp.partition: mbx.decode(getattr(tp, "metadata", None), tp.offset)
            for tp in self.committed_offsets(mbx.mailbox_group(own))
        }
        return entries, {tp.partition: int(tp.offset) for tp in self.committed_offsets(own)}

    def remainder(self) -> Any:
        """The remainder a deleted eos CR handed back and no CR adopted yet (None: none)."""
        from lagpilot.decide.deletion import decode_remainder, group_offsets_of, remainder_group

        return decode_remainder(group_offsets_of(self.committed_offsets(remainder_group(self.groups["eos"]))))

    def holds_nothing(self) -> str | None:
        """None when the eos CR holds nothing: no handed-back remainder waiting for its adoption (the
        remainder group is deleted once the adopted drain is in status.drain) and no drain in flight;
        else what it still holds."""
        rem = self.remainder()
        if rem is not None:
            return f"drain {rem.drain_id}'s remainder ({rem.records} records) not adopted yet"
        dd = self.drain()
        if dd and dd.get("phase") not in TERMINAL:
            return f"drain {dd.get('id')} ({dd.get('reason')}) {dd.get('phase')}"
        return None

    def drain_five(self, rnd: int) -> Fault:
        """Drain 5: the operator dies right after publishing the hand-off (crash point Publish:status) and
        stays down while the owners ack and move to the split; the CR is deleted (drain `Planned`, acks in
        the mailbox), the operator comes back and its finalizer runs; the CR is re-created with the same
        groupId. Fired = at the delete the drain was Planned with >= 1 owner's ack of a non-empty range.
        Recovered = the CR released, DrainRemainderHandedBack, the re-created CR's adopted drain Verified
        (and, at the end, the ledger: `[ack, split)` dropped would be `lost`)."""
        f = Fault("delete_while_planned", rnd, "eos")
        marker = self.crash_dir / cf.PLANNED_POINT.replace(":", "-")

        def arm() -> None:
            self.hold_operator = (
                True  # the operator that dies at the point stays down (tick() does not restart it)
            )
            marker.unlink(missing_ok=True)

        d: dict[str, Any] = {}
        uid = None
        try:
            for d, ours in self.drain_polls(f"drain 5 of round {rnd}", before_burst=arm):
                if marker.exists() and marker.read_text() != "disarmed" and not self.op.alive():
                    break
                if ours and d.get("phase") in TERMINAL:
                    break
                if not self.op.alive() and not marker.exists():
                    self.op.ensure()  # died of something else: the Deployment restarts it
            else:
                d = {}
            if not (marker.exists() and marker.read_text() != "disarmed"):
                f.detail = f"crash point {cf.PLANNED_POINT} not reached (last phase {d.get('phase')})"
                return self.record(f)
            d = self.drain()
            splits = {int(r["partition"]): int(r["end"]) for r in d.get("ranges") or ()}

            def acked() -> dict[int, int] | None:
                entries, own = self.mailbox()
                acks = {
                    p: e.ack
                    for p, e in entries.items()
                    if p in splits and e is not None and e.acked and str(e.drain_id) == str(d.get("id"))
                }
                return acks if set(acks) == set(splits) and all(own[p] >= splits[p] for p in splits) else None

            try:
                acks = self.until(
                    acked, "every owner acked and moved to its split (the operator is down)", 180
                )
            except TimeoutError as exc:
                acks = {}
                say(f"delete_while_planned: {exc}")
            at = self.drain()
            f.evidence = {
                "crash_marker": marker.name,
                "drain": d.get("id"),
                "phase_at_delete": at.get("phase"),
                "published": bool(at.get("publishedAt")),
                "splits": splits,
                "acks": acks,
                "acked_records": sum(splits[p] - a for p, a in acks.items()),
            }
            uid = (self.cr("eos") or {}).get("metadata", {}).get("uid")
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, "eos")
            t = time.time()
            if at.get("phase") == "Planned" and any(a < splits[p] for p, a in acks.items()):
                f.fired, f.at = True, t
            else:
                f.detail = f"not Planned with a non-empty acked range at the delete: {f.evidence}"
        finally:
            self.hold_operator = False
            self.op.ensure()
        try:
            self.until(lambda: self.cr("eos") is None, "the eos CR released by its finalizer", self.timeout)
        except TimeoutError:
            f.detail = "the CR was never released by the finalizer"
            return self.record(f)
        self.present["eos"] = False
        reasons = [
            e.reason
            for e in self.core.list_namespaced_event(self.ns).items
            if e.involved_object.kind == "BatchConsumerGroup" and e.involved_object.uid == uid
        ]
        f.evidence["handed_back"] = "DrainRemainderHandedBack" in reasons
        with contextlib.suppress(TimeoutError):
            self.until(
                lambda: (
                    not self.core.list_namespaced_pod(
                        self.ns, label_selector="app.kubernetes.io/instance=eos"
                    ).items
                ),
                "the old eos pods gone",
                120,
            )
        self.apply("eos")
        first_id = int(d.get("id") or 0)
        if not f.fired:
            # not fired, yet the finalizer may have handed a remainder back all the same (the owners
            # acked after the wait, 2026-11-26 round 2): the re-created CR adopts it as its next drain.
            # Wait (as after a fire) until it holds nothing, so that the next kind neither finds that
            # drain in flight nor takes it for its own (the 57th fault of that campaign)
            try:
                self.until(
                    lambda: self.holds_nothing() is None,
                    "the re-created eos CR to hold nothing",
                    self.timeout * 2,
                )
            except TimeoutError as exc:
                try:
                    f.evidence["still_held"] = self.holds_nothing()
                except Exception as err:  # noqa: BLE001 - evidence only: never ends the campaign
                    f.evidence["still_held"] = f"unknown ({err!r}; {exc})"
            dd = self.drain()
            if dd.get("reason") == "AdoptedRemainder" or int(dd.get("id") or 0) > first_id:
                f.evidence["adopted_drain"] = {
                    k: dd.get(k) for k in ("id", "phase", "reason", "recordsTotal", "attempt")
                }
            return self.record(f)

        def adopted() -> str | None:
            if not f.evidence["handed_back"]:
                return "nothing handed back: [ack, split) has no owner"
            dd = self.drain()
            return (
                None
                if dd.get("phase") == "Verified" and int(dd.get("id") or 0) > first_id
                else f"adopted remainder not Verified yet ({dd.get('id')} {dd.get('phase')})"
            )

        assert f.at is not None
        secs = self.recover_wait(f.at, f.kind, self.timeout * 2, None, adopted)
        f.recovered, f.recover_s = secs is not None, secs
        if f.recovered:
            f.evidence["adopted_drain"] = {
                k: self.drain().get(k) for k in ("id", "phase", "recordsTotal", "attempt", "runtime")
            }
        else:
            f.detail = str(adopted())
        return self.record(f)

    # -- H5: aborted transactions in a drain's backlog ----------------------------------------------------
    def write_transactions(self, f: Fault) -> None:
        """aborted_transactions: with the steady stream paused (until drain_six sees the drain planned),
        one transactional producer writes per partition cf.TRANSACTIONS (a committed backlog, then an
        ABORTED block up to the end). Fired = the abort returned and every aborted record's offset is
        known (delivery reports)."""
        import uuid

        from confluent_kafka import Producer as KP

        offsets: dict[str, dict[int, list[int]]] = {"commit": {}, "abort": {}}

        def cb(err: Any, msg: Any, outcome: str) -> None:
            if err is None:
                offsets[outcome].setdefault(msg.partition(), []).append(msg.offset())

        # no drain may take its split before the abort: spec.drain.cancel holds new drains while the
        # transactions are written (the first runs without it planned at the LSO, i.e. before the open
        # aborted transaction, and never read it); the steady stream waits until the drain is planned
        self.set_drain_cancel(True)
        self.producer.paused.set()
        time.sleep(1.0)
        t0 = time.time()
        p = KP(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"chaos-tx-{uuid.uuid4().hex[:8]}",
                "enable.idempotence": True,
                "linger.ms": 20,
            }
        )
        try:
            p.init_transactions(60)
            for outcome, n in cf.TRANSACTIONS:
                p.begin_transaction()
                for _ in range(n):
                    for part in range(PARTS):
                        while True:
                            try:
                                p.produce(
                                    self.topic,
                                    value=b'{"chaos":"tx"}',
                                    partition=part,
                                    on_delivery=lambda err, msg, o=outcome: cb(err, msg, o),
                                )
                                break
                            except BufferError:
                                p.poll(0.05)
                p.flush(120)
                (p.commit_transaction if outcome == "commit" else p.abort_transaction)(120)
        except Exception as exc:  # noqa: BLE001 - not injected: say so, count nothing
            f.detail = f"transactions not written: {exc!r}"[:300]
            self.producer.paused.clear()
            return
        finally:
            self.set_drain_cancel(False)
        want = {o: sum(n for oo, n in cf.TRANSACTIONS if oo == o) for o in ("commit", "abort")}
        got = {o: {p_: len(v) for p_, v in offsets[o].items()} for o in offsets}
        self.aborted = {p_: (min(v), max(v)) for p_, v in offsets["abort"].items()}
        f.evidence = {
            "aborted": {str(p_): list(r) for p_, r in self.aborted.items()},
            "records": got,
            "per_partition": want,
            "drains_held_s": round(time.time() - t0, 1),
        }
        if all(got[o].get(p_) == want[o] for o in want for p_ in range(PARTS)):
            f.fired, f.at = True, time.time()
        else:
            f.detail = f"not every transactional record was written: {got} (want {want} per partition)"

    def set_drain_cancel(self, on: bool) -> None:
        self.retry(
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.ns, PLURAL, "eos", {"spec": {"drain": {"cancel": on}}}
            ),
            "patch spec.drain.cancel",
        )

    def drain_six(self, rnd: int) -> Fault:
        """Drain 6: aborted transactions in the backlog (it is the backlog: no burst). Recovered = that drain
        Verified (sub-ranges with no visible record complete: H5) and healthy; the end check compares the
        ledgers with what a read_committed reader sees (an aborted record delivered is `outside`)."""
        f = Fault("aborted_transactions", rnd, "eos")
        d: dict[str, Any] = {}
        polls = self.drain_polls(
            f"drain 6 of round {rnd}", before_burst=lambda: self.write_transactions(f), burst=0
        )
        try:
            for d, ours in polls:
                if not f.fired:
                    break
                if self.producer.paused.is_set() and (ours or time.time() - (f.at or 0) > 120):
                    self.producer.paused.clear()  # the split is taken (or no drain came): the steady stream goes on
                    f.evidence["steady_paused_s"] = round(time.time() - (f.at or 0), 1)
                if ours and d.get("phase") == "Running" and "sub_ranges" not in f.evidence:
                    subs = list(d.get("subRanges") or ())
                    if subs:
                        f.evidence["sub_ranges"] = len(subs)
                        f.evidence["invisible_sub_ranges"] = cf.invisible_sub_ranges(subs, self.aborted)
                if ours and d.get("phase") in TERMINAL:
                    break
        finally:
            self.producer.paused.clear()
        if not f.fired:
            return self.record(f)
        blk = self.aborted
        f.evidence["drain_covered_aborted"] = bool(d.get("id")) and all(
            any(
                int(r["partition"]) == p_
                and r.get("start") is not None
                and int(r["start"]) <= lo
                and int(r["end"]) > hi
                for r in d.get("ranges") or ()
            )
            for p_, (lo, hi) in blk.items()
        )
        f.evidence.update(
            {
                "drain": d.get("id"),
                "final_phase": d.get("phase"),
                "attempt": d.get("attempt"),
                "runtime": d.get("runtime"),
                "recordsTotal": d.get("recordsTotal"),
            }
        )
        if d.get("phase") != "Verified":
            f.detail = f"drain ended {d.get('phase')}: {str(d.get('message'))[:200]}"
            return self.record(f)
        assert f.at is not None
        secs = self.recover_wait(f.at, f.kind, self.timeout)
        f.recovered, f.recover_s = secs is not None, secs
        return self.record(f)

    def visible_offsets(self, ends: dict[int, int]) -> dict[int, list[int]]:
        """Every offset a read_committed reader sees below `ends` (the end check with transactions)."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"chaos-visible-{self.run_id}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        out: dict[int, list[int]] = {p: [] for p in ends}
        try:
            c.assign([TopicPartition(self.topic, p, 0) for p in ends if ends[p] > 0])
            todo = {p for p in ends if ends[p] > 0}
            deadline = time.monotonic() + 600
            while todo and time.monotonic() < deadline:
                for m in c.consume(10000, 5.0):
                    if m.error() is not None:
                        if m.error().code() == -191:  # _PARTITION_EOF
                            todo.discard(m.partition())
                        continue
                    if m.offset() < ends[m.partition()]:
                        out[m.partition()].append(m.offset())
        finally:
            c.close()
        return out
