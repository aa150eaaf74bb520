"""What the fault campaign (bench/chaos.py) runs and probes beside the stack: the names shared by its
modules, pid/port probes that confirm a fault fired, the steady producer and the operator subprocess."""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from lagpilot_dev.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
PARTS = 2
BATCH = 100
CRD_FILE = REPO / "crds" / "batchconsumergroup.yaml"
JOB_LABEL = "lagpilot.io/drain-job"
RUNTIME_SELECTOR = "app.kubernetes.io/name=lagpilot-drain-runtime,lagpilot.io/drain-runtime-of=eos"  # operator drain_runtime.py
TERMINAL = ("Verified", "Failed", "Cancelled")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tcp_open(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def dead(pid: int) -> bool:
    """True when `pid` is gone or a zombie with no live thread left. Never reaps (a child's
    Popen.poll() would then see ECHILD and report exit code 0)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    if state != "Z":
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def pid_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dead(pid):
            return True
        time.sleep(0.05)
    return dead(pid)


def port_closed(port: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not tcp_open(port):
            return True
        time.sleep(0.05)
    return False


# ---- producer ------------------------------------------------------------------------------------


class Producer(threading.Thread):
    """`rate` records/s per partition, paced by elapsed time, plus bursts on demand."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KP

        self.p = KP(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 20,
                "enable.idempotence": True,
                "message.timeout.ms": 600000,
                "queue.buffering.max.messages": 2_000_000,
                "log_level": 2,
            }
        )  # connection-refused lines while the broker restarts are expected
        self.topic, self.rate = topic, rate
        self.stop_evt = threading.Event()
        self.acked = {p: 0 for p in range(PARTS)}
        self.errors: list[str] = []
        self._burst: list[int] = []
        self._lock = threading.Lock()
        self.paused = (
            threading.Event()
        )  # aborted_transactions: the steady stream waits (what is due is sent after)
        # busy drains (drain 7): an extra stream on one partition, [partition, records/s, since, sent], or None
        self._hot: list[Any] | None = None

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()] += 1

    def _send(self, part: int, n: int) -> None:
        for _ in range(n):
            while True:
                try:
                    self.p.produce(self.topic, value=b'{"chaos":1}', partition=part, on_delivery=self._cb)
                    break
                except BufferError:
                    self.p.poll(0.05)

    def burst(self, per_partition: int) -> None:
        with self._lock:
            self._burst.append(per_partition)

    def heat(self, partition: int, rate: int) -> None:
        """An extra `rate` records/s on `partition` (on top of the steady stream) until cool()."""
        with self._lock:
            self._hot = [partition, rate, time.monotonic(), 0]

    def cool(self) -> None:
        with self._lock:
            self._hot = None

    @property
    def hot(self) -> bool:
        return self._hot is not None

    def run(self) -> None:
        started, sent = time.monotonic(), 0
        while not self.stop_evt.wait(0.2):
            if self.paused.is_set():
                self.p.poll(0)
                continue
            due = int(self.rate * (time.monotonic() - started)) - sent
            if due > 0:
                for part in range(PARTS):
                    self._send(part, due)
                sent += due
            with self._lock:
                bursts, self._burst = self._burst, []
                hot = self._hot
                hot_due = 0 if hot is None else int(hot[1] * (time.monotonic() - hot[2])) - hot[3]
                if hot is not None and hot_due > 0:
                    hot[3] += hot_due
            if hot is not None and hot_due > 0:
                self._send(hot[0], hot_due)
            for n in bursts:
                for part in range(PARTS):
                    self._send(part, n)
            self.p.poll(0)
        self.p.flush(300)

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(400)


# ---- the operator --------------------------------------------------------------------------------


class Operator(OperatorProcess):
    """`lagpilot operator` as a subprocess; `ensure()` restarts it when dead (its Deployment's job).
    `gen` counts its starts (a cycle count from an earlier process is not comparable)."""

    def __init__(self, env: dict[str, str], namespace: str, log_path: Path, port: int) -> None:
        super().__init__(namespace, log_path, env, metrics_port=port)

    @property
    def port(self) -> int:
        return self.metrics_port

    @property
    def gen(self) -> int:
        return self.restarts + 1

    def cycles(self) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=3) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("lagpilot_cycle_duration_seconds_count"):
                        return float(line.split()[-1])
        except (OSError, ValueError):
            return None
        return 0.0
