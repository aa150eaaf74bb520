"""`pod_io` (tests/fixtures/node.py) on the real node: what a test reads of its pods' logs.

The API keeps no log of a deleted pod, and the lines a process writes while it terminates (a
consumer's close: `commit_given_up`, what the exact-once checks count as announced replays) are the
last ones before its pod goes: `follow` must keep a pod's log to its end."""

from __future__ import annotations

import textwrap
import time
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.fixtures.node import PodIO, Pods

pytestmark = pytest.mark.real

# writes a line on SIGTERM, a moment later its last one, and exits: what a consumer's close does
TERMINATING = textwrap.dedent("""
    import os, signal, sys, time
    me = os.environ["HOSTNAME"]
    def on_term(signum, frame):
        print("terminating", me, flush=True)
        time.sleep(1)
        print("last line of", me, flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("started", me, flush=True)
    while True:
        time.sleep(0.2)
""")


def _pod(name: str, pods: Pods) -> dict[str, Any]:
    """A bare pod of the test image under Pod Security `restricted`, running TERMINATING."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "terminating"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": pods.image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", TERMINATING],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }


@pytest.mark.slow
def test_follow_keeps_the_lines_a_pod_writes_while_it_terminates(
    kube_api: Any, pods: Pods, pod_io: PodIO
) -> None:
    """Pods deleted while `follow` runs: `namespace_logs` (and `logs`) still give each one's whole
    log, the lines written after its SIGTERM up to its exit included, once the API has none. The
    deletions 1.7 s apart, so that no periodic read of the logs happens to catch every pod's end."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube_api)
    ns = pods.namespace()
    stop = pod_io.follow(ns)
    try:
        names = [f"terminating-{i}" for i in range(3)]
        for name in names:
            core.create_namespaced_pod(ns, _pod(name, pods))
        for name in names:
            wait_until(lambda n=name: f"started {n}" in pod_io.logs(ns, n), f"{name} to start", 180)
        for name in names:  # at different moments of any polling: each pod's end its own
            core.delete_namespaced_pod(name, ns)
            time.sleep(1.7)
        wait_until(lambda: not core.list_namespaced_pod(ns).items, "the pods to be deleted", 180)
        for name in names:  # the fault fired: the API has no log of them any more
            with pytest.raises(ApiException) as gone:
                core.read_namespaced_pod_log(name, ns)
            assert gone.value.status == 404, gone.value
        kept = pod_io.namespace_logs(ns)
        assert sorted(kept) == names, sorted(kept)
        whole = {n: f"started {n}\nterminating {n}\nlast line of {n}\n" for n in names}
        short = {n: kept[n] for n in names if whole[n] not in kept[n]}
        assert not short, f"logs without their end: {short}"
        assert {n: pod_io.logs(ns, n) for n in names} == kept
    finally:
        stop.set()
