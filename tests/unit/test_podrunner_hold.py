"""PodRunner.hold (fault injection: bench/chaos.py's empty group): a held unbound pod is not bound and
stays Pending; once the hold is cleared the same pod is bound."""

from __future__ import annotations

from typing import Any

from lagpilot_dev.podrunner import PodRunner


def pod(name: str, component: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"u-{name}",
            "labels": {"app.kubernetes.io/component": component},
        },
        "spec": {},
    }


def test_a_held_pod_stays_unbound_until_the_hold_is_cleared(monkeypatch: Any) -> None:
    r = PodRunner(
        "kubeconfig",
        namespaces={"ns"},
        metrics_sd_dir=None,
        hold=lambda p: p["metadata"]["labels"]["app.kubernetes.io/component"] == "consumer",
    )
    bound: list[str] = []
    monkeypatch.setattr(r, "_bind", lambda ns, name, uid: bound.append(name))
    r._on_pod(pod("eos-1", "consumer"), deleted=False)
    r._on_pod(pod("eos-drain-1", "drain"), deleted=False)
    assert bound == ["eos-drain-1"]  # the consumer is held, anything else bound as before
    r.hold = None
    r._on_pod(pod("eos-1", "consumer"), deleted=False)
    assert bound == ["eos-drain-1", "eos-1"]
