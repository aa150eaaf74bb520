"""PostgreSQL from Debian, run as a private instance: own data dir, loopback TCP only, own port.

Why Debian's package: it is what the machine's registry offers, and the server binaries
(`/usr/lib/postgresql/<major>/bin/{initdb,postgres}`) can run any number of private clusters.
The package is installed on first use (a fresh machine ships only the psql client); Debian's own
"main" cluster is not created (createcluster.conf), so nothing else listens on 5432.

PostgreSQL refuses to run as root: as root we run it as the `postgres` system user (created by the
package). That user cannot enter /root (mode 700), so when the state dir is not reachable for it the
data dir lives under /var/lib/lagpilot/<id>/ and the state dir records where.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

from lagpilot_dev.images.tools import APT_LOCK_WAIT, run_apt_commands
from lagpilot_dev.paths import LOOPBACK, Ports, Process, file_lock, pid_alive, tcp_open, wait_for

log = logging.getLogger("lagpilot_dev.postgres")

APP_USER = "lagpilot"
APP_DB = "lagpilot"
SUPERUSER = "postgres"
RUN_AS_WHEN_ROOT = "postgres"
CREATECLUSTER_CONF = Path("/etc/postgresql-common/createcluster.conf")

# Tuned for a throw-away test database on a small machine. fsync off only risks data on an OS crash;
# a killed server (the fault tests) still recovers everything committed, since commits stay synchronous.
SERVER_SETTINGS: dict[str, str] = {
    "listen_addresses": LOOPBACK,
    "unix_socket_directories": "",  # TCP only: no socket dir permissions to get wrong
    "max_connections": "200",
    "shared_buffers": "128MB",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] %q%u@%d ",
}


def find_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/<major>/bin that has initdb, or None."""
    found = []
    for p in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        m = re.search(r"/postgresql/(\d+)/bin/initdb$", p)
        if m:
            found.append((int(m.group(1)), Path(p).parent))
    return max(found)[1] if found else None


def apt_commands() -> list[list[str]]:
    """The apt-get calls that install the server. Wait for a busy dpkg lock (another apt run)
    instead of failing; keep our createcluster.conf (--force-confold) instead of prompting."""
    return [
        ["apt-get", "update", "-q", *APT_LOCK_WAIT],
        [
            "apt-get",
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            *APT_LOCK_WAIT,
            "-o",
            "Dpkg::Options::=--force-confdef",
            "-o",
            "Dpkg::Options::=--force-confold",
            "postgresql",
        ],
    ]


def traversable_by(path: Path, uid: int, gids: set[int]) -> bool:
    """True when user `uid` (in groups `gids`) can enter every directory from / down to `path`."""
    p = Path(path).resolve()
    for d in [*reversed(p.parents), p]:
        try:
            st = d.stat()
        except FileNotFoundError:
            break  # will be created by us, with our permissions: check the existing part only
        if uid == 0:
            continue
        if st.st_uid == uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid in gids:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            return False
    return True


def dsn(user: str, password: str, port: int, db: str) -> str:
    """A libpq URI (psycopg, psql and SQLAlchemy all accept it)."""
    return f"postgresql://{user}:{password}@{LOOPBACK}:{port}/{db}"


class PostgresPart:
    """Install (apt), initdb (once), start, stop, kill and describe the private PostgreSQL."""

    name = "postgres"

    def __init__(self, cache_dir: Path, state_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / "postgres"
        self.ports = Ports(self.state_dir)
        self.secrets_file = self.dir / "secrets.json"
        self._process: Process | None = None

    # ---- install -------------------------------------------------------------------------------
    def installed(self) -> bool:
        return find_bindir() is not None

    def install(self) -> None:
        """`apt-get install postgresql` when the server binaries are missing (needs root)."""
        if self.installed():
            return
        with file_lock(self.cache_dir / ".postgres-apt.lock"):
            if self.installed():
                return
            if os.geteuid() != 0:
                raise RuntimeError(
                    "PostgreSQL server is not installed and we are not root: "
                    "run `sudo apt-get install -y postgresql` once"
                )
            if not CREATECLUSTER_CONF.exists():
                # keep Debian from creating and starting its own "main" cluster on port 5432
                CREATECLUSTER_CONF.parent.mkdir(parents=True, exist_ok=True)
                CREATECLUSTER_CONF.write_text("create_main_cluster = false\n")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            log.info("installing PostgreSQL with apt-get (first run only)")
            # the stack's one apt lock, and apt's busy lists lock waited for (images.tools)
            run_apt_commands(apt_commands(), env)
            if not self.installed():
                raise RuntimeError(
                    "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb was found"
                )
            log.info("installed PostgreSQL", extra={"bindir": str(find_bindir())})

    # ---- layout --------------------------------------------------------------------------------
    def _run_user(self) -> pwd.struct_passwd:
        """The user the server runs as: ourselves, or `postgres` when we are root."""
        if os.geteuid() != 0:
            return pwd.getpwuid(os.geteuid())
        try:
            return pwd.getpwnam(RUN_AS_WHEN_ROOT)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--home-dir",
                    "/var/lib/postgresql",
                    "--shell",
                    "/usr/sbin/nologin",
                    RUN_AS_WHEN_ROOT,
                ],
                check=True,
                capture_output=True,
            )
            return pwd.getpwnam(RUN_AS_WHEN_ROOT)

    @staticmethod
    def _drop_privileges_kwargs(user: pwd.struct_passwd) -> dict[str, Any]:
        """As root, also drop root's group and supplementary groups (Popen's `user=` alone keeps them)."""
        if os.geteuid() != 0:
            return {}
        return {"group": user.pw_gid, "extra_groups": []}

    def data_dir(self) -> Path:
        """Where the cluster lives (recorded in the state dir once chosen)."""
        pointer = self.dir / "data-dir"
        if pointer.exists():
            return Path(pointer.read_text().strip())
        user = self._run_user()
        gids = {user.pw_gid, *(g for g in os.getgrouplist(user.pw_name, user.pw_gid))}
        self.dir.mkdir(parents=True, exist_ok=True)
        if traversable_by(self.dir, user.pw_uid, gids):
            data = self.dir / "data"
        else:
            key = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:12]
            data = Path("/var/lib/lagpilot") / f"pg-{key}" / "data"
            if data.parent.exists():
                # left over from a deleted state dir (its passwords are gone with it): start afresh
                log.warning("removing an orphaned PostgreSQL data dir", extra={"data_dir": str(data)})
                shutil.rmtree(data.parent)
        pointer.write_text(f"{data}\n")
        return data

    def _secrets(self) -> dict[str, str]:
        """Passwords, generated once, stored mode 600 in the state dir (never logged)."""
        try:
            return dict(json.loads(self.secrets_file.read_text()))
        except FileNotFoundError:
            self.dir.mkdir(parents=True, exist_ok=True)
            s = {"superuser": secrets.token_urlsafe(18), "app": secrets.token_urlsafe(18)}
            fd = os.open(self.secrets_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(s, fh)
            return s

    def port(self) -> int:
        return self.ports.ensure("postgres")

    def process(self) -> Process:
        if self._process is None:
            bindir = find_bindir() or Path("/usr/lib/postgresql/15/bin")
            data = self.data_dir()
            user = self._run_user()
            argv = [str(bindir / "postgres"), "-D", str(data), "-c", f"port={self.port()}"]
            settings = dict(SERVER_SETTINGS)
            if (gw := self.pods_listen_host()) is not None:
                # pods on the real node reach the host at the bridge gateway (docs/node.md)
                settings["listen_addresses"] = f"{LOOPBACK},{gw}"
            for k, v in settings.items():
                argv += ["-c", f"{k}={v}"]
            self._process = Process(
                name="postgres",
                argv=argv,
                log_file=self.dir / "postgres.log",
                pid_file=self.dir / "postgres.pid",
                marker=f"-D {data}",
                user=user.pw_name if os.geteuid() == 0 else None,
                extra_popen=self._drop_privileges_kwargs(user),
                cwd=data.parent,
                stop_signal=signal.SIGINT,  # SIGINT = "fast" shutdown
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
            )
        return self._process

    # ---- run -----------------------------------------------------------------------------------
    def _initdb(self, data: Path) -> None:
        user = self._run_user()
        data.parent.mkdir(parents=True, exist_ok=True)
        os.chown(data.parent, user.pw_uid, user.pw_gid)
        pwfile = data.parent / ".pwfile"
        pwfile.write_text(self._secrets()["superuser"] + "\n")
        os.chown(pwfile, user.pw_uid, user.pw_gid)
        pwfile.chmod(0o600)
        bindir = find_bindir()
        assert bindir is not None
        argv = [
            str(bindir / "initdb"),
            "-D",
            str(data),
            f"--username={SUPERUSER}",
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
        ]
        log.info("initdb", extra={"data_dir": str(data), "as_user": user.pw_name})
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
                cwd=data.parent,
                user=user.pw_name if os.geteuid() == 0 else None,
                **self._drop_privileges_kwargs(user),
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            shutil.rmtree(data, ignore_errors=True)
            raise RuntimeError(
                f"initdb failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )

    @staticmethod
    def _remove_stale_lock(data: Path) -> None:
        """Remove postmaster.pid left by a killed server whose pid is not yet reaped (a zombie).

        PostgreSQL refuses to start while the pid in that file answers kill(pid, 0), which a zombie
        does until its parent reaps it; `pid_alive` knows a zombie is dead.
        """
        lock = data / "postmaster.pid"
        try:
            pid = int(lock.read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return
        if not pid_alive(pid):
            log.info("removing stale postmaster.pid of a dead server", extra={"pid": pid})
            lock.unlink(missing_ok=True)

    def is_running(self) -> bool:
        return self.process().is_running()

    def start(self, timeout: float = 120.0) -> None:
        """Start on the persisted port and data dir; create the app role/database once; wait for SQL."""
        self.install()
        with file_lock(self.dir / "start.lock"):
            proc = self.process()
            if not proc.is_running():
                self.ports.ensure("postgres", must_be_free=True)
                self._process = None  # the port may have moved: rebuild argv
                proc = self.process()
                data = self.data_dir()
                if not (data / "PG_VERSION").exists():
                    self._initdb(data)
                self._allow_pods(data)
                self._remove_stale_lock(data)
                proc.start()
            self._wait_sql(self.admin_dsn(), timeout)
            self._provision()

    @staticmethod
    def pods_listen_host() -> str | None:
        """The real node's bridge gateway when it exists on this host (lagpilot_dev.node), else None."""
        from lagpilot_dev.node import pod_gateway_on_host

        return pod_gateway_on_host()

    def _allow_pods(self, data: Path) -> None:
        """With the pod listener: a pg_hba line for the pod subnet (password auth, as for loopback)."""
        if self.pods_listen_host() is None:
            return
        from lagpilot_dev.node import POD_SUBNET

        hba = data / "pg_hba.conf"
        line = f"host all all {POD_SUBNET} scram-sha-256"
        text = hba.read_text()
        if line not in text.splitlines():
            hba.write_text(text.rstrip("\n") + f"\n# pods on the real node (lagpilot_dev.node)\n{line}\n")

    def pods_dsn(self) -> str | None:
        """The app DSN for pods on the real node, when the running server listens for them."""
        from lagpilot_dev.paths import cmdline

        gw = self.pods_listen_host()
        pid = self.process().pid()
        if gw is None or pid is None or f"listen_addresses={LOOPBACK},{gw}" not in " ".join(cmdline(pid)):
            return None
        return self.app_dsn().replace(f"@{LOOPBACK}:", f"@{gw}:")

    def _wait_sql(self, target: str, timeout: float) -> None:
        import psycopg

        def ready() -> bool:
            if not tcp_open(self.port()):
                return False
            with psycopg.connect(target, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            return True

        try:
            wait_for(
                ready,
                f"postgres on {LOOPBACK}:{self.port()}",
                timeout=timeout,
                interval=0.5,
                alive=self.process().is_running,
            )
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(
                f"{exc}\n--- {self.process().log_file} (tail) ---\n{self.process().log_tail()}"
            ) from exc

    def _provision(self) -> None:
        """Create the app role and database if missing (idempotent; safe after a crash midway)."""
        import psycopg
        from psycopg import sql

        app_password = self._secrets()["app"]
        with psycopg.connect(self.admin_dsn(), autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_USER,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                        sql.Identifier(APP_USER), sql.Literal(app_password)
                    )
                )
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (APP_DB,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(APP_DB), sql.Identifier(APP_USER)
                    )
                )

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after 60 s."""
        self.process().stop(grace=60.0)

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (fault tests); `start()` recovers from WAL."""
        self.process().kill()

    def purge(self) -> None:
        """Stop and delete the cluster (wherever its data dir lives) and its state."""
        self.stop()
        pointer = self.dir / "data-dir"
        if pointer.exists():
            data = Path(pointer.read_text().strip())
            shutil.rmtree(
                data.parent if data.parent.parent == Path("/var/lib/lagpilot") else data, ignore_errors=True
            )
        shutil.rmtree(self.dir, ignore_errors=True)
        self._process = None

    def admin_dsn(self) -> str:
        return dsn(SUPERUSER, self._secrets()["superuser"], self.port(), "postgres")

    def app_dsn(self) -> str:
        return dsn(APP_USER, self._secrets()["app"], self.port(), APP_DB)

    def info(self) -> dict[str, Any]:
        return {
            "postgres_dsn": self.app_dsn(),  # the superuser's DSN stays out of status output: admin_dsn()
            "pods_postgres_dsn": self.pods_dsn(),  # for pods on the real node (docs/node.md); None without
            "postgres_port": self.port(),
            "postgres_data_dir": str(self.data_dir()),
            "postgres_log": str(self.dir / "postgres.log"),
        }
