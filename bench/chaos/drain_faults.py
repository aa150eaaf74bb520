"""The drain faults of the campaign (bench/chaos.py), three drains per round, each forced by a backlog
burst: drain 1, the operator killed at each hand-off step, a Spark worker killed, the spec changed;
drain 2, the drain driver killed, then the CR deleted mid-drain and re-created; drain 3
(--warm-runtime), the warm runtime's pod killed mid warm drain. Each confirmed, then waited on until
that drain is Verified and the system healthy."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from bench.chaos import faults as cf
from bench.chaos.drain_watch import DrainWatch
from bench.chaos.faults import Fault
from bench.chaos.procs import TERMINAL, dead, pid_gone, say
from lagpilot.model.crd import GROUP, PLURAL, VERSION


class DrainFaults(DrainWatch):
    def kill_executor(self, f: Fault, d: dict[str, Any]) -> None:
        got = self.drain_pod()
        if got is None:
            return
        name, root, label = got
        tree = "job"
        if label == "warm":  # the Job's process only waits on the runtime: the workers are the runtime's
            rt = self.runtime_pod()
            if rt is None or not rt[1]:
                return
            name, root, tree = rt[0], rt[1], "runtime"
        pids = cf.descendants(root)
        before = {p: cf.cpu_ticks(p) for p in pids}
        time.sleep(0.5)
        busy = cf.busy_pids(before, {p: cf.cpu_ticks(p) for p in pids})
        procs = {pid: (cf.ppid_of(pid) or 0, cf.cmdline(pid)) for pid in pids}
        pid = cf.pick_spark_worker(procs, busy)
        if pid is None:
            return
        cmd = procs[pid][1][:120]
        os.kill(pid, signal.SIGKILL)
        if pid_gone(pid):
            f.fired, f.at = True, time.time()
            f.evidence = {
                **f.evidence,
                "pod": name,
                "pid": pid,
                "cmdline": cmd,
                "process_tree": tree,
                "worker_busy": pid in busy,
                **self.how_ran(d),
            }

    def drain_one(self, rnd: int) -> list[Fault]:
        """Drain 1: the operator killed at each hand-off step, a Spark worker killed, the spec changed.
        The crash points can leave the mid-drain faults no window: after the launch crash the operator
        is down (~30 s to come back under load) while a warm attempt runs, and the drain can be
        Verified before any status showed it mid-way. Then those two get a drain of their own (drain
        1b, no crash point armed) rather than being reported not fired."""
        faults = {k: Fault(k, rnd, "eos") for k in cf.HANDOFF_POINTS if k in self.kinds}
        ex, sp = Fault("drain_executor_kill", rnd, "eos"), Fault("spec_change_mid_drain", rnd, "eos")
        want_ex, want_sp = "drain_executor_kill" in self.kinds, "spec_change_mid_drain" in self.kinds
        d, verified_at, new_gen = self.drain_one_pass(
            f"drain 1 of round {rnd}", faults, ex, sp, want_ex, want_sp
        )
        for f in faults.values():
            if not f.fired:
                f.detail = f"crash point not reached in this drain (last phase {d.get('phase')})"
        groups = [(list(faults.values()), d, verified_at, new_gen)]
        mid = [f for f, want in ((ex, want_ex), (sp, want_sp)) if want]
        if faults and any(not f.fired for f in mid):
            missed = [f.kind for f in mid if not f.fired]
            say(
                f"round {rnd}: {', '.join(missed)} had no window in drain 1 (last phase {d.get('phase')}); drain 1b for them"
            )
            for f in mid:
                if not f.fired:
                    f.evidence["drain_1_missed"] = f"not mid-way while observed (last phase {d.get('phase')})"
            d, verified_at, new_gen = self.drain_one_pass(
                f"drain 1b of round {rnd}", {}, ex, sp, want_ex and not ex.fired, want_sp and not sp.fired
            )
        for f in mid:
            if not f.fired and not f.detail:
                f.detail = f"the drain was not running mid-way when tried (last phase {d.get('phase')})"
        groups.append((mid, d, verified_at, new_gen))
        broken = False
        for group, gd, gv, gg in groups:
            broken = self.drain_one_recover(group, gd, gv, gg, broken)
        out = [f for group, *_ in groups for f in group]
        for f in out:
            self.record(f)
        return out

    def drain_one_pass(
        self, label: str, faults: dict[str, Fault], ex: Fault, sp: Fault, want_ex: bool, want_sp: bool
    ) -> tuple[dict[str, Any], float | None, int | None]:
        """One forced drain with the crash points of `faults` armed (none: nothing armed), the Spark worker
        kill and the spec change injected once it runs mid-way: (its last status, Verified at, the
        generation the spec change made)."""
        d: dict[str, Any] = {}
        verified_at = None
        new_gen = None
        for d, ours in self.drain_polls(
            label,
            before_burst=self.arm if faults else None,
            each=(lambda: self.check_markers(faults)) if faults else None,
        ):
            if ours and cf.mid_way(d):
                if want_ex and not ex.fired and not ex.detail:
                    self.kill_executor(ex, d)
                elif (
                    want_sp
                    and (ex.fired or not want_ex)
                    and not sp.fired
                    and time.time() - (ex.at or 0) > 3
                    and not sp.detail
                ):
                    gen0 = int((self.cr("eos") or {})["metadata"]["generation"])
                    self.timeout_ms = 600 if self.timeout_ms == 500 else 500
                    self.custom.patch_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        self.ns,
                        PLURAL,
                        "eos",
                        {"spec": {"batch": {"timeoutMs": self.timeout_ms}}},
                    )
                    obj = self.cr("eos") or {}
                    new_gen = int(obj["metadata"]["generation"])
                    phase = ((obj.get("status") or {}).get("drain") or {}).get("phase")
                    if new_gen > gen0 and phase == "Running":
                        sp.fired, sp.at = True, time.time()
                        sp.evidence = {
                            **sp.evidence,
                            "generation": [gen0, new_gen],
                            "drain_phase": phase,
                            "timeoutMs": self.timeout_ms,
                            **self.how_ran(d),
                        }
                    else:
                        sp.detail = f"generation {gen0}->{new_gen}, drain phase {phase}"
            if ours and d.get("phase") in TERMINAL:
                if faults:
                    self.check_markers(faults)
                if d.get("phase") == "Verified":
                    verified_at = time.time()
                break
        return d, verified_at, new_gen

    def drain_one_recover(
        self,
        out: list[Fault],
        d: dict[str, Any],
        verified_at: float | None,
        new_gen: int | None,
        broken: bool,
    ) -> bool:
        """Wait for the recovery of `out`, the fired faults of one drain whose last status is `d`; `broken`:
        an earlier group did not recover (its timeout answers for these). Returns the new `broken`."""
        for f in out:  # how the attempt that finished the drain ran
            if f.fired:
                f.evidence["verified_attempt"], f.evidence["verified_runtime"] = (
                    d.get("attempt"),
                    d.get("runtime"),
                )
        for f in out:
            if not f.fired:
                continue
            if broken:  # same drain, same criterion: the first one's timeout answers for the rest
                f.detail = "the system did not recover from this drain's faults (see the first of them)"
                continue
            if verified_at is None:
                f.detail = f"drain ended {d.get('phase')}: {str(d.get('message'))[:200]}"
                continue

            def gen_ok(f: Fault = f) -> str | None:  # f bound: called within this iteration
                if f.kind != "spec_change_mid_drain":
                    return None
                conds = ((self.cr("eos") or {}).get("status") or {}).get("conditions") or []
                ready = [c for c in conds if c.get("type") == "Ready"]
                return (
                    None
                    if ready and int(ready[0].get("observedGeneration") or 0) >= (new_gen or 0)
                    else "observedGeneration behind"
                )

            assert f.at is not None
            secs = self.recover_wait(f.at, f.kind, self.timeout, None, gen_ok)
            if secs is not None:
                f.recovered, f.recover_s = True, max(secs, verified_at - f.at)
            else:
                broken = True
        return broken

    def drain_two(self, rnd: int) -> list[Fault]:
        """Drain 2: the drain driver killed (retried), then the CR deleted mid-drain and re-created."""
        dv, de = Fault("drain_driver_kill", rnd, "eos"), Fault("cr_delete_mid_drain", rnd, "eos")
        want_dv, want_de = "drain_driver_kill" in self.kinds, "cr_delete_mid_drain" in self.kinds
        d: dict[str, Any] = {}
        att0 = done0 = cold_polls = 0
        drain_id = None
        for d, ours in self.drain_polls(f"drain 2 of round {rnd}"):
            running = ours and cf.mid_way(d)
            if want_dv and running and not dv.fired and not dv.detail:
                got = self.drain_pod()
                if got and self.warm and got[2] != "warm":
                    got = None  # --warm-runtime: the caller of a warm attempt is what must be killed
                    cold_polls += 1
                if got:
                    name, pid, label = got
                    att0, done0, drain_id = int(d.get("attempt") or 0), int(d["recordsDone"]), int(d["id"])
                    os.killpg(pid, signal.SIGKILL)
                    if pid_gone(pid):
                        dv.fired, dv.at = True, time.time()
                        dv.evidence = {
                            "pod": name,
                            "pid": pid,
                            "attempt": att0,
                            "recordsDone": done0,
                            "status_runtime": d.get("runtime"),
                            "job_runtime_label": label,
                        }
            elif (
                dv.fired
                and ours
                and int(d.get("attempt") or 0) > att0
                and "retry_attempt" not in dv.evidence
                and d.get("phase") == "Running"
                and d.get("recordsDone", 0) > done0
            ):
                dv.evidence.update(
                    {"retry_attempt": int(d.get("attempt") or 0), "retry_runtime": d.get("runtime")}
                )
                if want_de:  # the CR is deleted under this retry: recovered = the retry delivering
                    assert dv.at is not None
                    secs = self.recover_wait(
                        dv.at,
                        dv.kind,
                        self.timeout,
                        None,
                        lambda drain_id=drain_id: self.cancel_seen(dv, drain_id),
                    )
                    dv.recovered, dv.recover_s = secs is not None, secs
            elif (
                want_de
                and (dv.recovered or dv.detail or not want_dv)
                and running
                and not de.detail
                and not de.fired
            ):
                self.delete_mid_drain(de, d)
                break
            if ours and d.get("phase") in TERMINAL:
                break
        if not dv.fired and not dv.detail:
            dv.detail = (
                f"the drain was not running mid-way (last phase {d.get('phase')})"
                if not cold_polls
                else f"no warm attempt ran mid-way ({cold_polls} polls saw a cold one; last phase {d.get('phase')})"
            )
        elif (
            dv.fired
            and not dv.recovered
            and d.get("phase") == "Verified"
            and int(d.get("attempt") or 0) > att0
        ):
            # the retry completed (without cr_delete_mid_drain: recovered = the drain Verified)
            dv.evidence.update({"verified_attempt": d.get("attempt"), "verified_runtime": d.get("runtime")})
            secs = self.recover_wait(
                dv.at or 0, dv.kind, self.timeout, None, lambda: self.cancel_seen(dv, drain_id)
            )
            dv.recovered, dv.recover_s = secs is not None, secs
        if not de.fired and not de.detail:
            de.detail = f"no running drain to delete the CR under (last phase {d.get('phase')})"
        out = [*([dv] if want_dv else []), *([de] if want_de else [])]
        for f in out:
            self.record(f)
        return out

    def drain_three(self, rnd: int) -> Fault:
        """--warm-runtime, drain 3: the runtime pod's process group SIGKILLed while a warm attempt runs.
        Recovered = the drain Verified (the Job's process fails on the dropped connection, the operator
        retries: cold while the runtime is not Ready, warm once it is) and every partition delivering."""
        rk = Fault("drain_runtime_kill", rnd, "eos")
        d: dict[str, Any] = {}
        tree: list[int] = []
        attempts: dict[str, Any] = {}
        cold_seen = 0
        for d, ours in self.drain_polls(f"drain 3 of round {rnd}"):
            if ours and d.get("attempt"):
                attempts[str(d.get("attempt"))] = d.get("runtime")
            running = ours and cf.mid_way(d)
            if running and not rk.fired and not rk.detail:
                job, rt = self.drain_pod(), self.runtime_pod()
                if job and job[2] == "warm" and rt and rt[1]:
                    name, pid = rt[0], rt[1]
                    tree = cf.descendants(pid)
                    att0 = int(d.get("attempt") or 0)
                    os.killpg(pid, signal.SIGKILL)
                    gone = pid_gone(pid)
                    phase = self.drain().get("phase")
                    if gone and phase == "Running":
                        rk.fired, rk.at = True, time.time()
                    else:
                        rk.detail = f"not confirmed: pid gone {gone}, drain phase {phase}"
                    rk.evidence = {
                        "pod": name,
                        "pid": pid,
                        "phase_after_kill": phase,
                        "attempt": att0,
                        "recordsDone": d.get("recordsDone"),
                        "recordsTotal": d.get("recordsTotal"),
                        "drain": d.get("id"),
                        "status_runtime": d.get("runtime"),
                        "job_pod": job[0],
                        "job_runtime_label": job[2],
                        "runtime_tree": len(tree),
                    }
                elif job and job[2] == "cold":
                    cold_seen += 1
            if rk.fired and "left_alive_5s" not in rk.evidence and time.time() - (rk.at or 0) > 5:
                rk.evidence["left_alive_5s"] = [
                    p for p in tree if not dead(p)
                ]  # Spark's daemon has its own pgid
            if ours and d.get("phase") in TERMINAL:
                break
        if not rk.fired and not rk.detail:
            rk.detail = (
                f"no warm attempt ran mid-way (cold attempts seen {cold_seen} polls; "
                f"last phase {d.get('phase')})"
            )
        if rk.fired:
            rk.evidence.update(
                {
                    "attempts": attempts,
                    "final_phase": d.get("phase"),
                    "verified_attempt": d.get("attempt"),
                    "verified_runtime": d.get("runtime"),
                }
            )
            if d.get("phase") == "Verified":
                assert rk.at is not None
                secs = self.recover_wait(rk.at, rk.kind, self.timeout)
                rk.recovered, rk.recover_s = secs is not None, secs
            else:
                rk.detail = f"drain ended {d.get('phase')}: {str(d.get('message'))[:200]}"
            with contextlib.suppress(Exception):
                rt = self.runtime_pod()
                rk.evidence["runtime_after"] = {"pod": rt[0], "pid": rt[1], "ready": rt[2]} if rt else None
        return self.record(rk)

    def delete_mid_drain(self, f: Fault, d: dict[str, Any]) -> None:
        first_id = int(d["id"])
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, "eos")
        t = time.time()
        at_delete = self.drain()
        f.evidence = {
            "at_delete": {
                k: at_delete.get(k)
                for k in ("id", "phase", "recordsDone", "recordsTotal", "attempt", "runtime")
            }
        }
        mid = cf.mid_way(at_delete)
        try:
            self.until(
                lambda: self.cr("eos") is None, "the eos CR to be released by its finalizer", self.timeout
            )
        except TimeoutError:
            f.detail = "the CR was never released by the finalizer"
            f.fired = mid
            f.at = t
            return
        self.present["eos"] = False
        if not mid:
            f.detail = f"not mid-drain at the delete: {f.evidence['at_delete']}"
        else:
            f.fired, f.at = True, t
        events = [
            e.reason
            for e in self.core.list_namespaced_event(self.ns).items
            if e.involved_object.kind == "BatchConsumerGroup" and e.involved_object.name == "eos"
        ]
        handed_back = "DrainRemainderHandedBack" in events
        f.evidence["handed_back"] = handed_back
        # pods of the old CR go with it (garbage collection) before the new one starts
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
        if not f.fired:
            return

        def adopted() -> str | None:
            dd = self.drain()
            if handed_back:
                return (
                    None
                    if dd.get("phase") == "Verified" and int(dd.get("id") or 0) > first_id
                    else f"adopted remainder not Verified yet ({dd.get('id')} {dd.get('phase')})"
                )
            return None if not dd or dd.get("phase") in TERMINAL else f"drain {dd.get('phase')}"

        secs = self.recover_wait(t, f.kind, self.timeout * 2, None, adopted)
        f.recovered, f.recover_s = secs is not None, secs
        if f.recovered:
            f.evidence["adopted_drain"] = {
                k: self.drain().get(k) for k in ("id", "phase", "recordsTotal", "attempt", "runtime")
            }
