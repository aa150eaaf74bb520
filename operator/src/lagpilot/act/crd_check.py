"""The operator-wide check of the installed CRD (the I/O edge of lagpilot.decide.crd_check).

Read at start-up (settings.configure) and again by the first cycle that runs once `every_s`
(LAGPILOT_CRD_CHECK_SECONDS, 300 s) passed: the CRD can change under a running operator (another
checkout's `kubectl apply`, a `helm upgrade` followed by the CRD's apply), and one GET of one object
every 5 minutes costs nothing beside the cycles. Every CR's cycle asks `outdated()`; the verdict is
shared, so there is one read per interval whatever the number of CRs.

A read the API server refuses (no `get` on the CRD: an RBAC set up before this check) or that fails
is logged once as a warning and checks nothing: the operator works as before the check existed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from lagpilot.act.kubeapi import KubeError
from lagpilot.decide import crd_check
from lagpilot.decide.status import Condition
from lagpilot.model.crd import GROUP, PLURAL, VERSION, openapi_schema

log = logging.getLogger(__name__)
CRD_NAME = f"{PLURAL}.{GROUP}"


class CrdCheck:
    """`outdated()`: the `Degraded=CRDOutdated` condition while the installed CRD lacks what this
    operator writes or reads, else None; re-read at most every `every_s` (thread-safe)."""

    def __init__(
        self,
        read: Callable[[], Mapping[str, Any] | None],
        every_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._every_s = every_s
        self._clock = clock
        self._ours = openapi_schema()
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._verdict: Condition | None = None
        self._reading = False
        self._said: str | None = None  # the last verdict or read error logged

    def outdated(self) -> Condition | None:
        """The verdict; the caller that finds it due reads the CRD (outside the lock: the other
        cycles meanwhile get the previous verdict, never wait for the read)."""
        with self._lock:
            now = self._clock()
            if self._reading or (self._read_at is not None and now - self._read_at < self._every_s):
                return self._verdict
            self._reading, self._read_at = True, now
        verdict = None
        try:
            verdict = self._check()
        finally:
            with self._lock:
                self._verdict, self._reading = verdict, False
        return verdict

    def _check(self) -> Condition | None:
        try:
            installed = self._read()
        except KubeError as err:
            self._say(
                logging.WARNING,
                f"the installed CRD {CRD_NAME} could not be read: not checked against this operator's "
                "(docs/rbac.md: get on customresourcedefinitions by name)",
                error=str(err),
            )
            return None
        gaps = crd_check.crd_gaps(self._ours, installed or {}, VERSION)
        verdict = crd_check.outdated_condition(gaps)
        if verdict is None:
            self._say(logging.INFO, f"the installed CRD {CRD_NAME} holds every field of this operator's")
        else:
            self._say(
                logging.ERROR, f"the installed CRD {CRD_NAME} is outdated: {verdict.message}", gaps=len(gaps)
            )
        return verdict

    def _say(self, level: int, message: str, **extra: Any) -> None:
        """Log a verdict or a read error once, until it changes."""
        said = f"{message} {extra.get('error', '')}"
        if said != self._said:
            self._said = said
            log.log(level, message, extra={"crd": CRD_NAME, **extra})
