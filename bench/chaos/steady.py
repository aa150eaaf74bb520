"""The steady faults of the campaign (bench/chaos.py): a consumer of a CR killed (at a random moment, or by
the sink's crash hook right after a batch's transaction), the operator killed, a part of the stack
(Kafka, kube-apiserver, etcd, PostgreSQL) killed and restarted; each confirmed, then waited on."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from typing import Any

from bench.chaos.faults import Fault
from bench.chaos.pods import hook_crash_in_runtime, hook_crash_in_status
from bench.chaos.procs import pid_gone, port_closed
from bench.chaos.review import ReviewFaults


class SteadyFaults(ReviewFaults):
    def consumer_pid(self, which: str) -> tuple[str, int] | None:
        pods = self.core.list_namespaced_pod(
            self.ns, label_selector=f"app.kubernetes.io/component=consumer,app.kubernetes.io/instance={which}"
        ).items
        for pod in sorted(pods, key=lambda p: p.metadata.name):
            pid = self.runner.pid_of(self.ns, pod.metadata.name)
            if pid:
                return pod.metadata.name, pid
        return None

    def crash_after_write_on_node(self, f: Fault) -> None:
        """consumer_kill_after_write with the pods on the real node: the eos handler's hook
        (bench/chaos/handler.py `crash_after_write`) armed in its table; the consumer that claims it
        dies with exit 137 right after its batch's transaction, before its Kafka commit. Confirmed
        when that pod's container has ended with 137 at or after the claim and runs again, seen by the
        node's container runtime (the kubelet's own source) or in the pod's API status, both read at
        each poll (evidence `seen_by`): the API's view alone does not hide a crash (a full-suite run
        at load 8-15 saw exit 137 and the new attempt in containerd's log while a check on the API's
        restart count, against a count read before arming, saw nothing for 120 s). The timeout's
        message holds both last views."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'UPDATE "{self.crash_table}" SET armed = true WHERE id = 1')

            def fired() -> str | None:
                row = conn.execute(f'SELECT fired FROM "{self.crash_table}" WHERE id = 1').fetchone()
                return row[0] if row and row[0] else None

            claim = self.until(fired, "the eos handler's crash hook to fire", 120, 0.2)
        pid, at, pod = [*claim.split(" ", 2), "", ""][:3]
        claimed_at = float(at)
        seen: dict[str, Any] = {}

        def crashed_and_ran_again() -> dict[str, Any] | None:
            # both views at each poll: the evidence says which saw it (the API alone missed one)
            seen["runtime"] = self.runner.container_statuses(self.ns, pod)
            with contextlib.suppress(Exception):  # the API away: the runtime's view still counts
                obj = self.core.read_namespaced_pod(pod, self.ns)
                seen["api"] = self.core.api_client.sanitize_for_serialization(
                    obj.status.container_statuses or []
                )
            by = {
                "runtime": hook_crash_in_runtime(seen["runtime"], claimed_at),
                "api": hook_crash_in_status(seen.get("api") or [], claimed_at),
            }
            got = by["runtime"] or by["api"]
            return {**got, "seen_by": [k for k, v in by.items() if v]} if got else None

        try:
            ended = self.until(crashed_and_ran_again, f"{pod}'s container to end with 137 and run again", 240)
        except TimeoutError as exc:
            views = {
                "runtime": [
                    {k: c.get(k) for k in ("metadata", "state", "exitCode", "finishedAt")}
                    for c in seen.get("runtime", [])
                ],
                "api": [
                    {k: c.get(k) for k in ("restartCount", "state", "lastState")} for c in seen.get("api", [])
                ],
            }
            raise TimeoutError(
                f"{exc}; claim {claim!r}; last views {json.dumps(views, default=str)[:1500]}"
            ) from None
        if "api" not in ended["seen_by"]:  # the runtime first: how long until the API's status shows it
            t_rt = time.monotonic()
            with contextlib.suppress(TimeoutError):
                self.until(
                    lambda: "api" in (crashed_and_ran_again() or {}).get("seen_by", []), "the API", 60, 0.5
                )
            ended["api_lag_s"] = (
                round(time.monotonic() - t_rt, 1)
                if hook_crash_in_status(seen.get("api") or [], claimed_at)
                else None
            )
        f.fired = True
        f.evidence = {"pid": int(pid), "pod": pod, "marker": claim, **ended}

    def steady(self, kind: str, rnd: int, target: str = "") -> Fault:
        f = Fault(kind, rnd, target)
        base = self.base()
        try:
            if kind == "consumer_kill":
                got = self.until(lambda: self.consumer_pid(target), f"a running {target} consumer", 120)
                name, pid = got
                os.killpg(pid, signal.SIGKILL)
                f.fired = pid_gone(pid)
                f.evidence = {"pod": name, "pid": pid}
            elif kind == "consumer_kill_after_write":
                self.crash_after_write_on_node(f)
            elif kind == "operator_kill":
                assert self.op.proc is not None
                pid = self.op.proc.pid
                time.sleep(random.uniform(0, 2.0))  # somewhere in its 2 s cycle
                os.killpg(pid, signal.SIGKILL)
                self.op.proc.wait(15)
                f.fired = pid_gone(pid)
                f.evidence = {"pid": pid, "returncode": self.op.proc.returncode}
            elif kind == "second_operator":
                self.second_operator(f)
                if f.detail:  # fired, but two operators reconciled: not recovered
                    return self.record(f)
            elif kind == "kafka_restart":
                pid = self.kafka.process.pid()
                self.kafka.kill()
                f.fired = pid is not None and pid_gone(pid) and port_closed(self.kafka_port)
                f.evidence = {"pid": pid, "port": self.kafka_port}
            elif kind in ("apiserver_restart", "etcd_restart"):
                comp = kind.split("_")[0]
                port = self.api_port if comp == "apiserver" else self.etcd_port
                pid = self.kube.processes[comp].pid()
                self.kube.kill(comp)
                f.fired = pid is not None and pid_gone(pid) and port_closed(port)
                f.evidence = {"pid": pid, "port": port}
            elif kind == "postgres_restart":
                pid = self.pg.process().pid()
                self.pg.kill()
                f.fired = pid is not None and pid_gone(pid) and port_closed(self.pg_port)
                f.evidence = {"pid": pid, "port": self.pg_port}
            f.at = f.at if kind == "second_operator" else time.time()
            if kind == "kafka_restart":
                time.sleep(1.0)
                self.kafka.start()
            elif kind in ("apiserver_restart", "etcd_restart"):
                time.sleep(1.0)
                self.kube.start()
            elif kind == "postgres_restart":
                time.sleep(1.0)
                self.pg.start()
        except Exception as exc:  # noqa: BLE001 - the fault could not be injected: say so, count nothing
            f.detail = f"injection failed: {exc!r}"[:300]
            if kind.endswith("_restart"):
                with contextlib.suppress(Exception):
                    {"kafka_restart": self.kafka, "postgres_restart": self.pg}.get(kind, self.kube).start()
        if not f.fired:
            f.detail = f.detail or "not confirmed (pid alive or port open)"
            return self.record(f)
        assert f.at is not None
        took_over = (
            (lambda: None if f.evidence.get("took_over_s") is not None else "the standby never took over")
            if kind == "second_operator"
            else None
        )
        secs = self.recover_wait(
            f.at, kind, self.timeout, None if kind == "second_operator" else base, took_over
        )
        f.recovered, f.recover_s = secs is not None, secs
        return self.record(f)
