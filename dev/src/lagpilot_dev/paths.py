"""Where the dev stack keeps things, which ports it uses, and how it runs its processes.

Every real part (Kafka, PostgreSQL, the Kubernetes control plane) is a plain local process: started
detached with a log file and a pid file under the state dir, so that a later `lagpilot dev status`
or a test session in another interpreter finds it again, and a fault test can SIGKILL it and start it
on the same data dir and the same ports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("lagpilot_dev")

LOOPBACK = "127.0.0.1"

# detached children started by this interpreter (they outlive it; see Process.start)
_CHILDREN: list[subprocess.Popen[bytes]] = []


def host_ip() -> str:
    """The host's address on its default route (`ip -j route get` asks the kernel's routing table
    only, no packet is sent): the real node's InternalIP and the address the apiserver advertises
    (pods reach it; they do not reach 127.0.0.1). `LAGPILOT_NODE_IP` overrides it; LOOPBACK when the
    host has no default route."""
    if os.environ.get("LAGPILOT_NODE_IP"):
        return os.environ["LAGPILOT_NODE_IP"]
    try:
        out = subprocess.run(
            ["ip", "-j", "route", "get", "192.0.2.1"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        src = json.loads(out)[0].get("prefsrc")
        if src:
            return str(src)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        pass
    return LOOPBACK


def cache_dir() -> Path:
    """The shared, reusable cache: jars, binaries, the Maven repository. Safe to keep forever."""
    return Path(os.environ.get("LAGPILOT_CACHE") or Path.home() / ".cache" / "lagpilot").expanduser()


def state_dir(cache: Path | None = None, name: str = "default") -> Path:
    """Per-stack mutable state: data dirs, logs, pids, ports. Deleting it resets the stack."""
    env = os.environ.get("LAGPILOT_STATE")
    if env:
        return Path(env).expanduser()
    return (cache or cache_dir()) / "state" / name


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two test sessions never install or start the same part twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on host:port (we can bind it ourselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = LOOPBACK, avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A port the kernel just handed out as free (ephemeral range), not in `avoid`."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port
    raise RuntimeError("could not find a free port")


class Ports:
    """Ports persisted in `<state>/ports.json`, so a restarted part comes back on the same address.

    A restarted Kafka must keep its bootstrap address (clients and consumer pods hold it), and its
    controller port is part of its static voter list.
    """

    def __init__(self, state: Path) -> None:
        self.path = state / "ports.json"

    def _load(self) -> dict[str, int]:
        try:
            return {str(k): int(v) for k, v in json.loads(self.path.read_text()).items()}
        except (FileNotFoundError, ValueError):
            return {}

    def get(self, name: str) -> int | None:
        """The persisted port for `name`, or None."""
        return self._load().get(name)

    def ensure(self, name: str, must_be_free: bool = False, wait_free: float = 20.0) -> int:
        """The persisted port for `name`; pick and persist a free one if none (or if it is taken
        by someone else when `must_be_free`, i.e. our own process for it is not running).

        A port just released by a killed process can stay busy for a moment: wait up to
        `wait_free` seconds before moving to a new port (clients hold the old address)."""
        with file_lock(self.path.with_suffix(".lock")):
            ports = self._load()
            port = ports.get(name)
            if port is not None and not must_be_free:
                return port
            if port is not None:
                deadline = time.monotonic() + wait_free
                while True:
                    if port_is_free(port):
                        return port
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.25)
            if port is not None:
                log.warning(
                    "persisted port taken by another process, picking a new one",
                    extra={"port_name": name, "port": port},
                )
            port = free_port(avoid=set(ports.values()))
            ports[name] = port
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(ports, indent=1, sort_keys=True))
            tmp.replace(self.path)
            return port


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name is in parentheses and may contain spaces: the state follows the last ')'
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (a zombie is a dead process not yet reaped)."""
    state = _proc_state(pid)
    if state is None:
        return False
    if state == "Z":
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
            if reaped == pid:
                return False
        except ChildProcessError:
            pass
        # A zombie thread-group leader may still have live threads holding its sockets and files
        # (a JVM exits thread by thread): it is dead only when no other task is left.
        try:
            return len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    return True


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass
class Process:
    """A detached local process with a log file and a pid file.

    `marker` is a string that must appear in the process's command line: it guards against a
    recycled pid being mistaken for our part after a reboot or a crash.
    """

    name: str
    argv: Sequence[str]
    log_file: Path
    pid_file: Path
    marker: str
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    user: str | None = None
    stop_signal: int = signal.SIGTERM
    extra_popen: dict[str, Any] = field(default_factory=dict)

    def pid(self) -> int | None:
        """The pid of our running process, or None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if not pid_alive(pid):
            return None
        if self.marker not in " ".join(cmdline(pid)):
            return None
        return pid

    def is_running(self) -> bool:
        """True when the process from our pid file is alive (and really ours)."""
        return self.pid() is not None

    def start(self) -> int:
        """Start detached (own session, survives the caller), output appended to the log file."""
        if (pid := self.pid()) is not None:
            return pid
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ if self.env is None else self.env)
        with open(self.log_file, "ab") as out:
            out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {self.name}\n".encode())
            out.flush()
            proc = subprocess.Popen(  # argv is built by us, no shell
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
                user=self.user,
                **self.extra_popen,
            )
        _CHILDREN.append(proc)  # keep a reference: no "still running" ResourceWarning when it is collected
        self.pid_file.write_text(f"{proc.pid}\n")
        # Popen returns once the child's exec closed its error pipe, which the kernel does before it
        # sets the new command line: for a moment /proc/<pid>/cmdline is empty and pid() would not
        # recognise the process (seen in CI under load: is_running() False right after start)
        deadline = time.monotonic() + 10.0
        while (
            self.marker not in " ".join(cmdline(proc.pid))
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        log.info("started process", extra={"part": self.name, "pid": proc.pid, "log": str(self.log_file)})
        return proc.pid

    def stop(self, grace: float = 30.0) -> None:
        """Graceful stop: the stop signal, then SIGKILL (to the whole session) after `grace` seconds."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        log.info("stopping process", extra={"part": self.name, "pid": pid})
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, self.stop_signal)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)
        if pid_alive(pid):
            log.warning("process ignored its stop signal, killing it", extra={"part": self.name, "pid": pid})
            self._kill_group(pid)
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL without warning: a crash, for fault tests. The pid file stays (as after a crash)."""
        pid = self.pid()
        if pid is None:
            return
        log.info("killing process (SIGKILL)", extra={"part": self.name, "pid": pid})
        self._kill_group(pid)

    @staticmethod
    def _kill_group(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # we started it as a session leader: pgid == pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the log, for error messages."""
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def wait_for(
    check: Callable[[], bool],
    what: str,
    timeout: float = 120.0,
    interval: float = 0.5,
    alive: Callable[[], bool] | None = None,
    log_every: float = 10.0,
) -> None:
    """Poll `check` until it is true; log what we wait for; fail early when `alive` says the
    process we wait on has died (no point waiting the full timeout for a dead broker)."""
    start = time.monotonic()
    last_log = start
    log.info("waiting", extra={"for": what, "timeout_s": timeout})
    while True:
        try:
            if check():
                log.info("ready", extra={"for": what, "after_s": round(time.monotonic() - start, 1)})
                return
        except Exception as exc:  # noqa: BLE001 - any failure of the probe means "not yet"
            last_error = repr(exc)
        else:
            last_error = None
        now = time.monotonic()
        if alive is not None and not alive():
            # asked once more a little later: a process found alive minutes later was once reported
            # dead here right after its start (CI: prometheus), failing the whole session fixture
            time.sleep(min(1.0, max(interval, 0.2)))
            if not alive():
                raise RuntimeError(f"gave up waiting for {what}: the process exited")
        if now - start > timeout:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})"
            )
        if now - last_log >= log_every:
            log.info(
                "still waiting",
                extra={"for": what, "elapsed_s": round(now - start), "last_error": last_error},
            )
            last_log = now
        time.sleep(interval)


def wait_started(
    proc: Process, check: Callable[[], bool], what: str, timeout: float, interval: float = 0.5
) -> None:
    """`wait_for(check)` on a part's process just started: fail early once its pid (from the pid file)
    is dead, and put the tail of its log in the error. Not `proc.is_running()`: right after exec
    /proc/<pid>/cmdline can still read empty, so the marker check fails for a few ms; the pid just
    written is good enough here."""

    def alive() -> bool:
        try:
            return pid_alive(int(proc.pid_file.read_text().strip()))
        except (FileNotFoundError, ValueError):
            return False

    try:
        wait_for(check, what, timeout=timeout, interval=interval, alive=alive)
    except (RuntimeError, TimeoutError) as exc:
        raise RuntimeError(f"{exc}\n--- {proc.log_file} (tail) ---\n{proc.log_tail(40)}") from exc


def tcp_open(port: int, host: str = LOOPBACK, timeout: float = 1.0) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_tcp(
    port: int,
    what: str,
    host: str = LOOPBACK,
    timeout: float = 120.0,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Wait until host:port accepts connections."""
    wait_for(lambda: tcp_open(port, host), f"{what} on {host}:{port}", timeout=timeout, alive=alive)


def http_ok(url: str, timeout: float = 2.0, context: Any = None) -> bool:
    """True when GET `url` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_http(
    url: str, what: str, timeout: float = 120.0, context: Any = None, alive: Callable[[], bool] | None = None
) -> None:
    """Wait until GET `url` answers 2xx."""
    wait_for(lambda: http_ok(url, context=context), f"{what} at {url}", timeout=timeout, alive=alive)


def dir_size_bytes(path: Path) -> int:
    """Total size of the files under `path` (for status and the cache figures)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total
