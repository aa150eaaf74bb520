"""Stages 5 and 6: the replay (the paced producer) and the wait until every record is in
PostgreSQL, one sample a second, shown as the live view or a progress line."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from lagpilot_dev.demo import view as demo_view
from lagpilot_dev.demo.config import RunNames
from lagpilot_dev.demo.console import Console, DemoError
from lagpilot_dev.demo.observe import Observer
from lagpilot_dev.demo.report import Sample
from lagpilot_dev.demo.traffic import Producer, Profile, phase_at

TICK_S = 1.0  # one sample a second
# --runtime-on-demand: after catching up, watch the runtime's scale-down at most its cooldown plus this
RUNTIME_DOWN_MARGIN_S = 60.0
PLAIN_EVERY_S = 10.0  # --plain: one progress line this often


def caught_up(s: Sample) -> str | None:
    """None when every record is in PostgreSQL, the group's lag is 0 and no drain is active;
    otherwise what is still missing (what the demo waits for)."""
    waits = []
    if s.total_backlog > 0:
        waits.append(f"{s.total_backlog:,} records to reach PostgreSQL")
    if s.total_group_lag > 0:
        waits.append(f"group lag {s.total_group_lag:,} → 0")
    if s.drain_active:
        done, total = s.drain_progress()
        waits.append(
            f"drain #{(s.drain or {}).get('id')} ({s.drain_phase}, {done:,}/{total:,}) to be verified"
        )
    if s.produced != sum(s.end.values()):
        waits.append("the end offsets to show every produced record")
    return "; ".join(waits) or None


def phase_text(profile: Profile, prod: Producer | None) -> str:
    """Where the replay is: the phase, its rate, the seconds left, and the whole schedule."""
    if prod is None or prod.t0 is None:
        return ""
    ph = phase_at(profile.phases, prod.elapsed())
    names = " → ".join(f"{p.name} {p.rate:g}/s×{p.seconds:g}s" for p in profile.phases)
    if ph is None:
        return f"replay done ({names})"
    i, p, left = ph
    return f"phase {i + 1}/{len(profile.phases)}: {p.name} at {p.rate:g} rec/s, {left:.0f} s left   ({names})"


@dataclass
class RunLoop:
    """The producer and the sampling loop around it."""

    console: Console
    names: RunNames
    profile: Profile
    observer: Observer
    operator_dead: Callable[[], str | None]  # None while the operator runs (it restarts a crashed one)
    restarts: Callable[[], int]  # the operator's restarts so far
    producer: Producer | None = None
    _last_line: float | None = None

    def stop_producer(self) -> None:
        if self.producer is not None:
            self.producer.stop()

    def show(self, s: Sample | None, phase: str = "") -> None:
        console, restarts = self.console, self.restarts()
        stage = console.stage + (f" · operator restarted {restarts}x" if restarts else "")
        header = demo_view.Header(
            profile=self.profile.name,
            elapsed_s=console.elapsed(),
            stage=stage,
            waiting_for=console.waiting,
            phase=phase,
            namespace=self.names.ns,
            name=self.names.name,
        )
        if console.live:
            cols, rows = shutil.get_terminal_size((120, 50))
            frame = [
                demo_view.clip(line, cols - 1)
                for line in demo_view.render(header, s, self.observer.kubectl_lines)
            ]
            sys.stdout.write(demo_view.HOME_CLEAR + "\n".join(frame[: max(10, rows - 1)]) + "\n")
            sys.stdout.flush()
        elif self._last_line is None or time.monotonic() - self._last_line >= PLAIN_EVERY_S:
            self._last_line = time.monotonic()
            print(demo_view.one_line(header, s), flush=True)

    def replay(self, bootstrap_servers: str) -> None:
        """Stage 5: produce the profile's phases while sampling once a second."""
        p, console = self.profile, self.console
        t0 = console.begin(
            5,
            f"Replay: a scaled-down seed backfill, {p.replay_seconds:.0f} s, ~{p.expected_records:,} records",
            "the replay to finish",
        )
        console.say(
            f"one consumer manages ~{p.consumer_capacity:.0f} records/s (handler cost {p.record_delay_ms:g} ms/record"
            f" + {p.batch_delay_ms:g} ms/batch); peak {max(ph.rate for ph in p.phases):g} records/s; "
            f"SLA {p.sla_s} s",
            indent=True,
        )
        time.sleep(2 if console.live else 0)
        self.producer = Producer(bootstrap_servers, self.names.topic, p.phases, p.partitions).start()
        while not self.producer.done.is_set():
            tick = time.monotonic()
            ph = phase_at(p.phases, self.producer.elapsed())
            console.waiting = (
                f"the replay: {ph[1].name} at {ph[1].rate:g} rec/s, {ph[2]:.0f} s left in this phase"
                if ph
                else "the producer to flush"
            )
            s = self.observer.sample(self.producer)
            self.show(s, phase_text(p, self.producer))
            if (dead := self.operator_dead()) is not None:
                raise DemoError(dead)
            time.sleep(max(0.0, TICK_S - (time.monotonic() - tick)))
        if self.producer.error:
            console.say(f"producer error: {self.producer.error}", indent=True)
        console.timings["replay"] = time.monotonic() - t0

    def catch_up(self) -> None:
        """Stage 6: sample until caught up (then linger as the profile says; with the runtime on
        demand, until it is scaled back to 0, at most its cooldown + RUNTIME_DOWN_MARGIN_S) or its timeout."""
        p, console = self.profile, self.console
        if console.live:
            console.stage = "Catching up"
        else:
            console.begin(6, "Catching up", "every record to reach PostgreSQL")
        t0 = time.monotonic()
        deadline = t0 + p.catch_up_timeout_s
        linger_until: float | None = None
        runtime_until: float | None = None
        while True:
            tick = time.monotonic()
            s = self.observer.sample(self.producer)
            missing = caught_up(s)
            if missing is None and linger_until is None:
                console.timings["catch_up_after_replay"] = tick - t0
                linger_until = tick + p.linger_s
                if p.runtime_on_demand:
                    runtime_until = tick + float(p.runtime_cooldown_s or 0) + RUNTIME_DOWN_MARGIN_S
            if linger_until is not None:
                runtime_up = runtime_until is not None and tick < runtime_until and s.runtime_replicas != 0
                if tick >= linger_until and not runtime_up:
                    break
                console.waiting = (
                    f"nothing: caught up; watching the warm drain runtime's scale-down "
                    f"(cooldown {p.runtime_cooldown_s} s; at most {runtime_until - tick:.0f} s more)"
                    if runtime_up and runtime_until is not None
                    else f"nothing: caught up; watching {linger_until - tick:.0f} s more"
                )
            else:
                console.waiting = f"{missing} (gives up in {deadline - tick:.0f} s)"
            self.show(s, phase_text(p, self.producer))
            if linger_until is None and tick > deadline:
                console.say(f"\ngave up waiting after {p.catch_up_timeout_s:.0f} s: {missing}")
                break
            if (dead := self.operator_dead()) is not None:
                raise DemoError(dead)
            time.sleep(max(0.0, TICK_S - (time.monotonic() - tick)))
        if console.live:
            self.show(self.observer.samples[-1], phase_text(p, self.producer))
