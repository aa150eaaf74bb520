"""Tests only: "once across every process of a test run" for the runtime's LP_TEST_* crash points.

A crash point fires in the first process that claims its marker; every later claim (the restarted
container, the other consumer pods) fails and the process goes on. Two stores, the first one set:

- ``LP_TEST_ONCE_TABLE``: a row in a PostgreSQL table the test created (``ONCE_DDL``), keyed by the
  marker's name; the DSN is read from the env variable named by ``LP_TEST_ONCE_DSN_FROM`` (the pod's
  own Secret-sourced variable, e.g. ``LEDGER_DSN``: a hook's value comes from a ConfigMap, which never
  holds a password). Pods on a real node share no directory (Pod Security ``restricted`` refuses a
  hostPath), but they all reach the database the test reads.
- a marker directory (the hook's ``*_CRASH_DIR``): an ``O_EXCL`` file ``<dir>/<name>``, for processes
  of one host (the pod runner, in-process tests).

The claim's detail is ``"<pid> <unix time> <HOSTNAME>"``: the pod that fired, for the test to check
(on a node the pid is the container's, not the host's). Unset in production: no crash point fires.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

TABLE_ENV = "LP_TEST_ONCE_TABLE"
DSN_FROM_ENV = "LP_TEST_ONCE_DSN_FROM"
ONCE_DDL = "CREATE TABLE {table} (name text PRIMARY KEY, detail text NOT NULL, at double precision NOT NULL)"
_TABLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def configured(env: Mapping[str, str], marker_dir: str | None) -> bool:
    """True when a store is set: the table (with its DSN variable) or the marker directory."""
    return bool(env.get(TABLE_ENV) and env.get(DSN_FROM_ENV)) or bool(marker_dir)


def detail() -> str:
    return f"{os.getpid()} {time.time()} {os.environ.get('HOSTNAME', '')}"


def claim(
    name: str,
    marker_dir: str | None,
    what: str,
    env: Mapping[str, str] | None = None,
    connect: Callable[[str], Any] | None = None,
) -> bool:
    """Claim the marker `name` for this process (True: the crash point fires here), once across every
    process sharing the store. ValueError for a table name that is not a plain identifier, KeyError
    when the DSN variable is missing: a misconfigured hook fails loudly, it never fires silently."""
    e = os.environ if env is None else env
    table = e.get(TABLE_ENV)
    if table and e.get(DSN_FROM_ENV):
        if not _TABLE.match(table):
            raise ValueError(f"{TABLE_ENV} must be a plain lower-case identifier (got {table!r})")
        dsn = e[e[DSN_FROM_ENV]]
        if connect is None:
            import psycopg

            connect = psycopg.connect
        with connect(dsn) as conn:
            cur = conn.execute(
                f"INSERT INTO {table} (name, detail, at) VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING",
                (name, what, time.time()),
            )
            won = cur.rowcount == 1
            conn.commit()
            return won
    if not marker_dir:
        return False
    try:
        fd = os.open(os.path.join(marker_dir, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, what.encode())
    os.close(fd)
    return True
