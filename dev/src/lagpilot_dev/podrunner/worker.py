"""One Pod's container as a local process: start it (env, credentials, argv), watch it (exit,
restart with back-off, probes), stop it (deletion, grace period) and report the status a kubelet
would (phase, conditions, containerStatuses). One thread per pod."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import LOOPBACK, ContainerConfigError, StartError, free_port, log, now_rfc3339
from .container import build_argv, secret_mounts, with_mounts
from .env import resolve_env
from .lifecycle import (
    TERMINATION_LOG_ENV,
    crash_backoff,
    exit_code_of,
    exit_outcome,
    pod_conditions,
    terminated_state,
    termination_message,
)
from .probes import Probe, probe_once

if TYPE_CHECKING:
    from .runner import PodRunner


class PodWorker:
    """Runs one Pod's container as a local process and reports its status (one thread per pod)."""

    TICK = 0.2

    def __init__(self, runner: PodRunner, pod: dict[str, Any]) -> None:
        self.runner = runner
        self.pod = pod
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.container: dict[str, Any] = (pod["spec"].get("containers") or [{}])[0]
        self.cname: str = self.container.get("name", "main")
        self.port = free_port()
        safe = f"{self.namespace}_{self.name}_{self.cname}"
        self.log_path = runner.workdir / "logs" / f"{safe}.log"
        self.pod_dir = runner.workdir / "pods" / f"{self.namespace}_{self.name}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.container_started_at: str | None = None
        self.start_time = now_rfc3339()
        self.restart_count = 0
        self.last_state: dict[str, Any] = {}
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.ready = False
        self.phase = "Pending"
        self.done = False  # terminal phase reached
        self.backoff_until = 0.0
        self.readiness: Probe | None = None
        self.liveness: Probe | None = None
        self.transitions: dict[str, tuple[str, str]] = {}
        self.deleting = False
        self.gone = False
        self.finished = threading.Event()
        self._wake = threading.Event()
        self._last_status: dict[str, Any] | None = None
        self._retry_write_at: float | None = None
        self._adopt_existing_status(pod)
        self.thread = threading.Thread(
            target=self._run, name=f"pod-{self.namespace}/{self.name}", daemon=True
        )

    def _adopt_existing_status(self, pod: Mapping[str, Any]) -> None:
        """After a runner restart: keep startTime and count the lost container as a restart."""
        status = pod.get("status") or {}
        self.start_time = status.get("startTime") or self.start_time
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == self.cname:
                self.restart_count = int(cs.get("restartCount") or 0)
                if "running" in (cs.get("state") or {}) or "terminated" in (cs.get("state") or {}):
                    self.restart_count += 1
                    self.last_state = {
                        "terminated": terminated_state(137, 9, None, now_rfc3339(), reason="RunnerRestarted")
                    }

    # -- called from the watch thread --
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting = True
        self._wake.set()

    def on_deleted(self) -> None:
        """The Pod object is gone (force-deleted, or our own final delete): stop the process."""
        self.gone = True
        self._wake.set()

    def start(self) -> None:
        self.thread.start()

    # -- the worker thread --
    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - a worker must never take the runner down
            log.exception("pod worker failed", extra={"pod": f"{self.namespace}/{self.name}"})
            self._kill_process(grace=2.0)
        finally:
            self._publish_metrics_target(False)
            self.finished.set()

    def _publish_metrics_target(self, up: bool) -> None:
        """The dev Prometheus's file-SD entry for this pod (see lagpilot_dev.prometheus): written when
        the container starts and its spec sets LAGPILOT_METRICS_PORT (the runner's own port for the
        pod), removed when the worker ends (pod deleted or gone, runner stopped)."""
        sd = getattr(self.runner, "metrics_sd_dir", None)
        if sd is None or not any(
            e.get("name") == "LAGPILOT_METRICS_PORT" for e in self.container.get("env") or []
        ):
            return
        from lagpilot_dev import prometheus

        with contextlib.suppress(OSError):
            if not up:
                prometheus.remove_pod_target(Path(sd), self.namespace, self.name)
                return
            group = (self.pod["metadata"].get("labels") or {}).get("lagpilot.io/group", "")
            prometheus.write_pod_target(Path(sd), self.namespace, self.name, self.port, {"group": group})

    def _loop(self) -> None:
        phase0 = (self.pod.get("status") or {}).get("phase")
        if phase0 in ("Succeeded", "Failed"):
            self.done, self.phase = True, phase0
        else:
            self._write_status()
        while True:
            if self.runner.stopping.is_set():
                self._kill_process(grace=self.runner.stop_grace)
                return
            if self.gone:
                self._kill_process(grace=2.0)
                return
            if self.deleting:
                self._terminate_and_delete()
                return
            now = time.monotonic()
            if self._retry_write_at is not None and now >= self._retry_write_at:
                self._write_status()
            if self.proc is None:
                if not self.done and now >= self.backoff_until:
                    self._start_container()
            else:
                rc = self.proc.poll()
                if rc is not None:
                    self._on_exit(rc)
                else:
                    self._run_probes(now)
            self._wake.wait(self.TICK)
            self._wake.clear()

    def _start_container(self) -> None:
        pod, c = self.pod, self.container
        try:
            env = resolve_env(
                pod,
                c,
                get_secret=lambda n: self.runner.get_secret(self.namespace, n),
                get_config_map=lambda n: self.runner.get_config_map(self.namespace, n),
                node_name=self.runner.node_name,
            )
            env.update(
                self.runner.test_env(self.namespace)
            )  # LP_TEST_* hooks: the namespace's, never the spec's
            if "KUBECONFIG" not in env and pod["spec"].get("automountServiceAccountToken") is not False:
                env["KUBECONFIG"] = str(self.runner.pod_credentials(pod, self.pod_dir))
        except ContainerConfigError as exc:
            self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.backoff_until = time.monotonic() + 2.0
            self._write_status()
            return
        except Exception as exc:  # noqa: BLE001 - apiserver unreachable (fault tests): try again shortly
            log.warning(
                "cannot prepare container yet",
                extra={"pod": f"{self.namespace}/{self.name}", "error": repr(exc)[:300]},
            )
            self.backoff_until = time.monotonic() + 2.0
            return
        # one network namespace for all local pods: each gets its own port (see module docstring)
        env["LAGPILOT_METRICS_PORT"] = str(self.port)
        env["PORT"] = str(self.port)
        full_env = self.runner.base_env(self.name)
        full_env.update(env)
        full_env[TERMINATION_LOG_ENV] = str(self._termination_file())
        try:
            argv = build_argv(
                c,
                full_env,
                bin_dirs=[str(self.runner.venv_bin)],
                python=self.runner.python,
                entrypoints=self.runner.entrypoints,
                search_path=os.environ.get("PATH", ""),
            )
        except StartError as exc:
            self._record_exit(128, None, reason="StartError", message=str(exc), started_at=now_rfc3339())
            return
        try:
            argv = with_mounts(argv, self._secret_volumes())
        except ContainerConfigError as exc:  # the kubelet: FailedMount, the container waits
            self.state = {"waiting": {"reason": "ContainerCreating", "message": str(exc)}}
            self.backoff_until = time.monotonic() + 2.0
            self._write_status()
            return
        cwd = (
            Path(c["workingDir"]) if c.get("workingDir") and Path(c["workingDir"]).is_dir() else self.pod_dir
        )
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            out.write(
                f"\n==== {now_rfc3339()} start #{self.restart_count} pod {self.namespace}/{self.name}: "
                f"{json.dumps(argv)}\n".encode()
            )
            out.flush()
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    env=full_env,
                    start_new_session=True,
                )
            except OSError as exc:
                self._record_exit(128, None, reason="StartError", message=str(exc), started_at=now_rfc3339())
                return
        self.container_started_at = now_rfc3339()
        self.state = {"running": {"startedAt": self.container_started_at}}
        self._publish_metrics_target(True)
        self.phase = "Running"
        started = time.monotonic()
        rp, lp = c.get("readinessProbe"), c.get("livenessProbe")
        self.readiness = Probe(rp, started) if rp else None
        self.liveness = Probe(lp, started) if lp else None
        self.ready = self.readiness is None
        log.info(
            "container started",
            extra={
                "pod": f"{self.namespace}/{self.name}",
                "pid": self.proc.pid,
                "port": self.port,
                "restart_count": self.restart_count,
                "log": str(self.log_path),
            },
        )
        self._write_status()

    def _secret_volumes(self) -> list[tuple[str, str]]:
        """The container's `secret` volumes as (mountPath, directory): each Secret's keys written as
        files (0600) under the pod's directory, for `with_mounts` to bind at the mountPath."""
        binds = []
        for mount_path, secret, volume in secret_mounts(self.pod, self.container):
            data = self.runner.get_secret(self.namespace, secret)
            if data is None:
                raise ContainerConfigError(
                    f'MountVolume.SetUp failed for volume "{volume}": secret "{secret}" not found'
                )
            d = self.pod_dir / "volumes" / volume
            d.mkdir(parents=True, exist_ok=True)
            for key, value in data.items():
                path = d / key
                path.write_text(value)
                path.chmod(0o600)
            binds.append((mount_path, str(d)))
        return binds

    def _on_exit(self, returncode: int) -> None:
        code, sig = exit_code_of(returncode)
        pid = self.proc.pid if self.proc else None
        self.proc = None
        log.info(
            "container exited", extra={"pod": f"{self.namespace}/{self.name}", "pid": pid, "exit_code": code}
        )
        self._record_exit(
            code, sig, started_at=self.container_started_at, message=self._termination_message(code)
        )

    def _termination_file(self) -> Path:
        """This run's termination message file (cleared before every start, as a new container's is)."""
        path = self.pod_dir / "termination-log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    def _termination_message(self, code: int) -> str | None:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 65536))
                tail = fh.read().decode("utf-8", "replace")
        except OSError:
            tail = ""
        return termination_message(self.container, code, self.pod_dir / "termination-log", tail)

    def _record_exit(
        self,
        code: int,
        sig: int | None,
        *,
        reason: str | None = None,
        message: str | None = None,
        started_at: str | None,
    ) -> None:
        term = terminated_state(code, sig, started_at, now_rfc3339(), reason=reason, message=message)
        self.ready = False
        outcome = exit_outcome(self.pod["spec"].get("restartPolicy"), code)
        if outcome.restart:
            delay = crash_backoff(self.restart_count, self.runner.backoff_initial, self.runner.backoff_max)
            self.last_state = {"terminated": term}
            self.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:.0f}s restarting failed container={self.cname} "
                    f"pod={self.name}_{self.namespace}({self.uid})",
                }
            }
            self.restart_count += 1
            self.backoff_until = time.monotonic() + delay
            # the phase stays as it was: Running once a process ran, Pending while none could start
        else:
            self.state = {"terminated": term}
            self.phase = outcome.phase or "Failed"
            self.done = True
        self._write_status()

    def _run_probes(self, now: float) -> None:
        for probe, is_readiness in ((self.readiness, True), (self.liveness, False)):
            if probe is None or now < probe.next_at:
                continue
            probe.next_at = now + probe.period
            ok = self._probe_once(probe)
            if ok:
                probe.successes, probe.failures = probe.successes + 1, 0
            else:
                probe.failures, probe.successes = probe.failures + 1, 0
            if is_readiness:
                success_threshold = int(probe.spec.get("successThreshold") or 1)
                failure_threshold = int(probe.spec.get("failureThreshold") or 3)
                if not self.ready and probe.successes >= success_threshold:
                    self.ready = True
                    self._write_status()
                elif self.ready and probe.failures >= failure_threshold:
                    self.ready = False
                    self._write_status()
            elif probe.failures >= int(probe.spec.get("failureThreshold") or 3):
                log.info(
                    "liveness probe failed, killing container", extra={"pod": f"{self.namespace}/{self.name}"}
                )
                probe.failures = 0
                self._kill_process(
                    grace=float(self.pod["spec"].get("terminationGracePeriodSeconds") or 30), reap=False
                )

    def _probe_once(self, probe: Probe) -> bool:
        return probe_once(
            probe, self.port, self.container, lambda: self.runner.base_env(self.name), self.pod_dir
        )

    def _kill_process(self, grace: float, reap: bool = True) -> int | None:
        """SIGTERM the process group, SIGKILL after `grace` seconds; returns the returncode."""
        proc = self.proc
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            rc = proc.wait(timeout=max(0.0, grace))
        except subprocess.TimeoutExpired:
            log.info(
                "grace period over, killing", extra={"pod": f"{self.namespace}/{self.name}", "pid": proc.pid}
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        # children that outlived the group leader
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if reap:
            self.proc = None
        return rc

    def _terminate_and_delete(self) -> None:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        if self.proc is not None:
            log.info(
                "pod deleted: stopping container",
                extra={"pod": f"{self.namespace}/{self.name}", "pid": self.proc.pid, "grace_s": grace},
            )
            rc = self._kill_process(grace=float(grace))
            code, sig = exit_code_of(rc if rc is not None else -9)
            self.state = {"terminated": terminated_state(code, sig, self.container_started_at, now_rfc3339())}
            self.ready = False
            if not self.done:
                self.phase = "Succeeded" if code == 0 else "Failed"
                self.done = True
            self._write_status()
        elif not self.done:
            # no process (never started, or in back-off): what the kubelet reports for a container
            # it cannot account for; never Succeeded, or a Job would count a pod that did not run
            self.ready = False
            self.state = {
                "terminated": terminated_state(
                    137,
                    None,
                    None,
                    now_rfc3339(),
                    reason="ContainerStatusUnknown",
                    message="The container could not be located when the pod was terminated",
                )
            }
            self.phase, self.done = "Failed", True
            self._write_status()
        self.runner.delete_pod(self.namespace, self.name, self.uid)

    def status(self) -> dict[str, Any]:
        now = now_rfc3339()
        ready = self.ready and self.proc is not None and not self.done
        cs: dict[str, Any] = {
            "name": self.cname,
            "image": str(self.container.get("image") or ""),
            "imageID": f"lagpilot-podrunner://{self.container.get('image') or ''}",
            "ready": ready,
            "started": self.proc is not None,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.proc is not None:
            cs["containerID"] = f"local://{self.proc.pid}"
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": pod_conditions(
                phase=self.phase,
                ready=ready,
                started_at=self.start_time,
                transitions=self.transitions,
                now=now,
            ),
            "hostIP": LOOPBACK,
            "hostIPs": [{"ip": LOOPBACK}],
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": self.start_time,
            "containerStatuses": [cs],
        }
        return status

    def _write_status(self) -> None:
        status = self.status()
        if status == self._last_status:
            return
        if self.runner.patch_pod_status(self.namespace, self.name, status):
            self._last_status = status
            self._retry_write_at = None
        else:  # apiserver down or restarting (fault tests): the loop retries
            self._retry_write_at = time.monotonic() + 2.0

    def pid(self) -> int | None:
        proc = self.proc
        return proc.pid if proc is not None and proc.poll() is None else None
