"""lagpilot_dev.runtime_attacker: what the C1 real test and the chaos campaign's forged_plan send, and
what they read back (a local HTTP server stands in for the runtime)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from lagpilot_dev.runtime_attacker import attack


class _Runtime(http.server.BaseHTTPRequestHandler):
    posted: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:  # http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Runtime.posted.append(body)
        self._answer(401, b'{"error": "not a signed plan"}')

    def do_GET(self) -> None:
        self._answer(200, b'{"warm": true}')

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    _Runtime.posted = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Runtime)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()


def test_each_body_posted_and_answered_in_order(port: int) -> None:
    assert attack(port, ['{"a":1}', '{"b":2}']) == [(401, '{"error": "not a signed plan"}')] * 2
    assert _Runtime.posted == [b'{"a":1}', b'{"b":2}']


def test_healthz_answer_last_when_asked(port: int) -> None:
    assert attack(port, ['{"a":1}'], healthz=True) == [
        (401, '{"error": "not a signed plan"}'),
        (200, '{"warm": true}'),
    ]


def test_no_answer_is_status_0() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    [(status, body)] = attack(free, ["{}"])
    assert status == 0 and "ConnectionRefused" in body
