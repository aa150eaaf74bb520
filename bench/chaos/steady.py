"""The steady faults of the campaign (bench/chaos.py): a consumer of a CR killed (at a random moment, or by
the sink's crash hook right after a batch's transaction), the operator killed, a part of the stack
(Kafka, kube-apiserver, etcd, PostgreSQL) killed and restarted; each confirmed, then waited on."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from typing import Any

from bench.chaos.faults import Fault
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
        through the kubelet: that pod's container terminated with 137 and ran again."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            before = {
                p.metadata.name: sum(c.restart_count for c in p.status.container_statuses or [])
                for p in self.core.list_namespaced_pod(
                    self.ns,
                    label_selector="app.kubernetes.io/component=consumer,app.kubernetes.io/instance=eos",
                ).items
            }
            conn.execute(f'UPDATE "{self.crash_table}" SET armed = true WHERE id = 1')

            def fired() -> str | None:
                row = conn.execute(f'SELECT fired FROM "{self.crash_table}" WHERE id = 1').fetchone()
                return row[0] if row and row[0] else None

            claim = self.until(fired, "the eos handler's crash hook to fire", 120, 0.2)
        pid, _at, pod = [*claim.split(" ", 2), "", ""][:3]

        def terminated_137() -> dict[str, Any] | None:
            obj = self.core.read_namespaced_pod(pod, self.ns)
            for c in obj.status.container_statuses or []:
                last = c.last_state.terminated if c.last_state is not None else None
                if last is not None and last.exit_code == 137 and c.restart_count > before.get(pod, 0):
                    return {"exit_code": last.exit_code, "restarts": c.restart_count}
            return None

        ended = self.until(terminated_137, f"{pod}'s container to end with 137 and run again", 120)
        f.fired = bool(ended)
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
