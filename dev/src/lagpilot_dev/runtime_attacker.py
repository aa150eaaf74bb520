"""Issue 23 C1's attacker, for the real test (tests/real/test_drain_runtime_auth.py) and the fault
campaign (bench/chaos/review.py `forged_plan`): plans POSTed to a warm drain runtime's port from
ANOTHER process with no key, as any pod in the cluster could before C1 (the runtime must refuse
them: 401)."""

from __future__ import annotations

import json
import subprocess
import sys

# stdin: the bodies (JSON list); argv: the port, the host, then "healthz" to ask GET /healthz after them.
# stdout: [[status, body], ...]; a runtime that takes a plan runs it: no answer within 30 s (status 0)
ATTACKER = r"""
import http.client, json, sys
port, host, bodies = int(sys.argv[1]), sys.argv[2], json.loads(sys.stdin.read())
out = []
for body in bodies:
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        c.request("POST", "/drains", body=body.encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out.append([r.status, r.read().decode()])
    except Exception as exc:
        out.append([0, type(exc).__name__ + ": " + str(exc)])
    c.close()
if sys.argv[3:] == ["healthz"]:
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/healthz")
    r = c.getresponse()
    out.append([r.status, r.read().decode()])
print(json.dumps(out))
"""


def attack(
    port: int, bodies: list[str], healthz: bool = False, host: str = "127.0.0.1"
) -> list[tuple[int, str]]:
    """Send `bodies` to the runtime on `host`:`port` from another process (on the real node `host` is
    the runtime pod's IP): [(status,
    body)] per body, then (with `healthz`) the `GET /healthz` answer last."""
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, str(port), host, *(["healthz"] if healthz else [])],
        input=json.dumps(bodies),
        text=True,
        capture_output=True,
        timeout=300,
        check=True,
    )
    return [(int(s), b) for s, b in json.loads(done.stdout)]
