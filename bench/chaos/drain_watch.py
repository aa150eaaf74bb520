"""How the campaign (bench/chaos.py) watches the eos drains it injects faults into: the drain Job's and
the warm runtime's pods, the runtime's readiness and log, the operator's crash points (armed, then
confirmed), and `drain_polls`, the one polling loop every drain round runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.chaos import faults as cf
from bench.chaos.faults import Fault
from bench.chaos.procs import JOB_LABEL, RUNTIME_SELECTOR, TERMINAL, say
from bench.chaos.stack import CampaignBase


def planned_since(d: dict[str, Any], since: float) -> bool:
    """status.drain `d` was planned at or after `since` (its plannedAt is RFC 3339 with milliseconds:
    1 ms of slack for the truncation). A drain without plannedAt is not known to be: False."""
    at = d.get("plannedAt")
    if not at:
        return False
    try:
        t = datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return t >= since - 0.001


class DrainWatch(CampaignBase):
    def wait_no_drain(self) -> int:
        d = self.until(
            lambda: (
                (lambda d: d if (not d or d.get("phase") in TERMINAL) else None)(self.drain()) or {"none": 1}
            ),
            "no eos drain in flight",
            self.timeout,
        )
        return int(d.get("id") or 0)

    def drain_pod(self) -> tuple[str, int, str] | None:
        """(pod, pid, its lagpilot.io/drain-runtime label: warm|cold|"") of the running drain Job's pod."""
        for pod in self.core.list_namespaced_pod(self.ns, label_selector=JOB_LABEL).items:
            if pod.status.phase in ("Running", "Pending"):
                pid = self.runner.pid_of(self.ns, pod.metadata.name)
                if pid:
                    return (
                        pod.metadata.name,
                        pid,
                        str((pod.metadata.labels or {}).get(cf.RUNTIME_LABEL) or ""),
                    )
        return None

    def runtime_pod(self) -> tuple[str, int | None, bool] | None:
        """(pod, pid or None, Ready) of the eos drain runtime's pod (--warm-runtime), None when absent."""
        for pod in self.core.list_namespaced_pod(self.ns, label_selector=RUNTIME_SELECTOR).items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
            return pod.metadata.name, self.runner.pid_of(self.ns, pod.metadata.name), ready
        return None

    def wait_runtime_ready(self, before: str) -> None:
        """--warm-runtime: wait (bounded) until the runtime pod is Ready and runs the Deployment's current
        config (the operator hands a launch only such a pod) before a drain round, so its drains launch
        warm; recorded in `runtime_waits` (a round that starts cold says so)."""
        if not self.warm:
            return
        t = time.time()
        gen, count = self.base()

        def ready_current() -> bool:
            # >= 2 operator cycles first: a spec change during the last drain is applied to the
            # runtime's Deployment only on the first cycle after it (its pod is then replaced)
            n = self.op.cycles()
            if n is None or (n - count if self.op.gen == gen else n) < 2:
                return False
            r = self.runtime_pod()
            if not (r and r[1] and r[2]):
                return False
            from kubernetes import client

            dep = client.AppsV1Api(self.api).read_namespaced_deployment("eos-drain-runtime", self.ns)
            want = (dep.spec.template.metadata.annotations or {}).get(cf.RUNTIME_CONFIG_ANNOTATION)
            pod = self.core.read_namespaced_pod(r[0], self.ns)
            return bool(want) and (pod.metadata.annotations or {}).get(cf.RUNTIME_CONFIG_ANNOTATION) == want

        try:
            self.until(
                ready_current, "the eos drain runtime pod Ready with the current config", self.timeout, 1.0
            )
            ok = True
        except TimeoutError as exc:
            say(str(exc))
            ok = False
        self.runtime_waits.append({"before": before, "ready": ok, "waited_s": round(time.time() - t, 1)})
        say(
            f"drain runtime {'Ready' if ok else 'NOT Ready'} before {before} (waited {time.time() - t:.1f} s)"
        )

    def runtime_events(self, event: str, drain: str | None = None) -> list[dict[str, Any]]:
        """`event` records (of one drain) in the runtime pod's log (NodePods' file of its last read)."""
        rt = self.runtime_pod()
        path = self.runner.log_path(self.ns, rt[0]) if rt else None
        if path is None or not Path(path).exists():
            return []
        return cf.log_events(Path(path).read_text(errors="replace").splitlines(), event, drain)

    def how_ran(self, d: dict[str, Any]) -> dict[str, Any]:
        """Evidence: how the current attempt runs (status.drain.runtime, the Job pod's runtime label)."""
        got = None
        with contextlib.suppress(Exception):
            got = self.drain_pod()
        return {
            "attempt": d.get("attempt"),
            "status_runtime": d.get("runtime"),
            "job_pod": got[0] if got else None,
            "job_runtime_label": got[2] if got else None,
        }

    def arm(self) -> None:
        for kind, point in cf.HANDOFF_POINTS.items():
            if kind in self.kinds:  # a point not selected stays disarmed (--kinds)
                (self.crash_dir / point.replace(":", "-")).unlink(missing_ok=True)

    def check_markers(self, faults: dict[str, Fault]) -> None:
        self.check_points({k: f for k, f in faults.items() if k in cf.HANDOFF_POINTS}, cf.HANDOFF_POINTS)

    def check_points(
        self,
        faults: dict[str, Fault],
        points: dict[str, str],
        more: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """A crash-point fault (`points`: kind -> the operator's crash point) is confirmed by the
        marker the operator wrote at that point and the death of the operator process that ran then
        (seen by ensure(), which restarts it); evidence: pid, return code, marker, how the drain ran
        (`how_ran`) and `more(status.drain)`."""
        for kind, f in faults.items():
            marker = self.crash_dir / points[kind].replace(":", "-")
            if f.fired or not marker.exists() or marker.read_text() == "disarmed":
                continue
            at = float(marker.read_text().strip())
            self.op.ensure()  # a no-op while it runs
            died = [d for d in self.op.deaths if d[0] >= at - 1]
            if died:
                f.fired, f.at = True, at
                f.evidence = {"pid": died[0][1], "returncode": died[0][2], "marker": marker.name}
                with contextlib.suppress(Exception):
                    d = self.drain()
                    f.evidence.update({**(more(d) if more else {}), **self.how_ran(d)})

    def cancel_seen(self, f: Fault, drain_id: int | None) -> str | None:
        """Warm: the runtime must have cancelled the killed caller's plan (its log's drain_runtime_cancel
        and drain_runtime_served cancelled=true for that drain); recorded in the evidence. None = ok."""
        if f.evidence.get("job_runtime_label") != "warm":
            return None
        cancels = self.runtime_events("drain_runtime_cancel", str(drain_id))
        served = [
            {k: e.get(k) for k in ("ts", "exit", "cancelled", "records", "seconds")}
            for e in self.runtime_events("drain_runtime_served", str(drain_id))
        ]
        f.evidence["runtime_cancel_logged"] = len(cancels)
        f.evidence["runtime_served"] = served
        return None if cancels else f"the runtime logged no cancel of drain {drain_id}"

    def drain_polls(
        self,
        before: str,
        before_burst: Callable[[], Any] | None = None,
        each: Callable[[], None] | None = None,
        burst: int | None = None,
        window: float | None = None,
    ) -> Iterator[tuple[dict[str, Any], bool]]:
        """One drain round's loop: wait until no eos drain is in flight (and, --warm-runtime, the runtime
        pod is Ready), call `before_burst`, add the backlog burst that forces the next drain, then once a
        second (bounded by twice the fault timeout) yield (status.drain, whether it is that new drain).
        `each` runs before every poll; `burst` replaces --burst (0: `before_burst` wrote the backlog).
        `window` replaces the bound (seconds after the burst; drain 7's busy drain lasts longer).
        The caller breaks out when it is done.

        A drain is the round's own only when it is newer than the last one in flight before the round
        AND was planned after `before_burst` returned (`planned_since`): a drain that began between the
        wait and the round's fault (a re-created CR adopting a handed-back remainder, a split taken from
        the steady stream) is not the round's, whatever it ends as (the 57th fault of the 2026-11-26
        campaign: aborted_transactions judged the adopted drain its hold had cancelled)."""
        prev = self.wait_no_drain()
        self.wait_runtime_ready(before)
        if before_burst is not None:
            before_burst()
        since = time.time()
        if (self.args.burst if burst is None else burst) > 0:
            self.producer.burst(self.args.burst if burst is None else burst)
        deadline = time.monotonic() + (self.timeout * 2 if window is None else window)
        while time.monotonic() < deadline:
            if each is not None:
                each()
            self.tick()
            try:
                d = self.drain()
            except Exception:  # noqa: BLE001 - apiserver hiccup
                time.sleep(1)
                continue
            yield d, int(d.get("id") or 0) > prev and planned_since(d, since)
            time.sleep(1)
