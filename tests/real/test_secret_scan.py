"""Secrets never leak (issue 14, item 2, without the drain part): known unique secret values go into
Secrets — the real SCRAM password of the local SASL listener, a wrong SASL password, the real
PostgreSQL password (in a DSN), a wrong one (a failing sink), a TLS private key — and the CRs using
them run: consumption over SASL into PostgreSQL with the operator's scaling decisions, a bad
password, a failing sink, a TLS handshake that cannot succeed. Then the operator's log, every pod
log, the events, the CR objects (status included), the operator's metrics and the Deployment specs
are scanned: 0 occurrences of any value. Credentials reach pods only as secretKeyRef.
"""
from __future__ import annotations

import base64
import json
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import wait_until
from tests.real.test_operator_e2e import (  # noqa: F401 - fixtures
    Operator,
    apply_cr,
    condition,
    cr,
    crd,
    get_cr,
    produce,
    start_operator,
)
from tests.real.test_sasl import sasl  # noqa: F401 - fixture

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _self_signed(tmp: Path) -> tuple[str, str]:
    """A fresh self-signed certificate and its private key (PEM), made with the openssl CLI."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=lagpilot-secret-scan", "-keyout", str(tmp / "tls.key"), "-out", str(tmp / "tls.crt")],
                   check=True, capture_output=True, timeout=60)
    return (tmp / "tls.crt").read_text(), (tmp / "tls.key").read_text()


def test_no_secret_value_in_logs_events_status_metrics_or_specs(
        sasl: dict[str, str], crd: Any, kube_api: Any, pod_runner: Any,  # noqa: F811
        namespace: Callable[..., str], kafka_bootstrap: str, new_topic: Callable[..., str],
        postgres_dsn: str, start_operator: Callable[[str], Operator], tmp_path: Path) -> None:  # noqa: F811
    import psycopg
    from kubernetes import client

    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    ns = namespace("secrets")
    op = start_operator(ns)
    topic = new_topic(partitions=2, prefix="secrets")
    produce(kafka_bootstrap, topic, 150, 2)

    pg_password = re.match(r"postgresql://[^:]+:([^@]+)@", postgres_dsn).group(1)
    bad_pg_password = f"pgbad{uuid.uuid4().hex}"
    bad_dsn = postgres_dsn.replace(pg_password, bad_pg_password)
    bad_sasl_password = f"saslbad{uuid.uuid4().hex}"
    cert_pem, key_pem = _self_signed(tmp_path)
    # a line from the middle of the private key's base64 body: unique to this key
    key_lines = [ln for ln in key_pem.splitlines() if ln and not ln.startswith("-----")]
    tls_key_body = key_lines[len(key_lines) // 2]
    values = {"scram password": sasl["password"], "wrong SASL password": bad_sasl_password,
              "postgres password": pg_password, "wrong postgres password": bad_pg_password,
              "TLS key": tls_key_body}

    secrets = {
        "kafka-ok": {"username": sasl["username"], "password": sasl["password"]},
        "kafka-bad": {"username": sasl["username"], "password": bad_sasl_password},
        "pg-ok": {"dsn": postgres_dsn},
        "pg-bad": {"dsn": bad_dsn},
        "kafka-tls": {"ca.crt": cert_pem, "tls.crt": cert_pem, "tls.key": key_pem},
    }
    for name, data in secrets.items():
        core.create_namespaced_secret(ns, {"metadata": {"name": name}, "data": {k: _b64(v) for k, v in data.items()}})

    table = f"secrets_{uuid.uuid4().hex[:8]}"
    sasl_kafka = {"bootstrapServers": sasl["bootstrap"], "securityProtocol": "SASL_PLAINTEXT",
                  "saslMechanism": "SCRAM-SHA-512"}
    common = {"topic": topic, "drain": {"enabled": False}, "batch": {"maxRecords": 50, "timeoutMs": 200}}
    crs = {
        # consumes over SASL into PostgreSQL; the operator observes and decides every 2 s
        "ok": {**common, "groupId": f"sec-ok-{uuid.uuid4().hex[:6]}",
               "kafka": {**sasl_kafka, "secretRef": {"name": "kafka-ok"}},
               "processing": {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "pg-ok"}, "table": table}},
               "scaling": {"minReplicas": 1, "maxReplicas": 2, "pollIntervalSeconds": 2}},
        # the broker refuses the password
        "bad-sasl": {**common, "groupId": f"sec-bad-{uuid.uuid4().hex[:6]}",
                     "kafka": {**sasl_kafka, "secretRef": {"name": "kafka-bad"}},
                     "processing": {"sink": "log"},
                     "scaling": {"minReplicas": 0, "maxReplicas": 1, "pollIntervalSeconds": 2}},
        # the sink cannot log in: the batch fails, is retried, then the consumer pauses
        "bad-sink": {**common, "groupId": f"sec-sink-{uuid.uuid4().hex[:6]}",
                     "kafka": {**sasl_kafka, "secretRef": {"name": "kafka-ok"}},
                     "processing": {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "pg-bad"},
                                                                     "table": table}},
                     "failure": {"policy": "pause", "maxRetries": 1, "backoffMs": 100},
                     "scaling": {"minReplicas": 1, "maxReplicas": 1, "pollIntervalSeconds": 2}},
        # TLS against a PLAINTEXT listener, with a real client key and a self-signed CA
        "tls": {**common, "groupId": f"sec-tls-{uuid.uuid4().hex[:6]}",
                "kafka": {"bootstrapServers": kafka_bootstrap, "securityProtocol": "SSL",
                          "secretRef": {"name": "kafka-tls"}},
                "processing": {"sink": "log"},
                "scaling": {"minReplicas": 0, "maxReplicas": 1, "pollIntervalSeconds": 2}},
    }
    for name, spec in crs.items():
        apply_cr(crd, ns, cr(name, spec))

    # the faults fired and the good path worked
    def rows() -> int:
        with psycopg.connect(postgres_dsn) as conn:
            try:
                return conn.execute(f"select count(*) from {table}").fetchone()[0]
            except psycopg.errors.UndefinedTable:
                return 0

    wait_until(lambda: rows() >= 300, "the SASL consumer to write 300 rows to PostgreSQL", 240, interval=2)
    for name, reasons in (("bad-sasl", ("AuthenticationFailed",)), ("tls", None)):
        c = wait_until(lambda: (lambda d: d if d and d["status"] == "True" else None)(
            condition(get_cr(custom, ns, name), "Degraded")), f"{name}: Degraded", 180, interval=1)
        print(f"{name}: Degraded {c['reason']}: {c['message']}")
        if reasons:
            assert c["reason"] in reasons, c

    def sink_failed() -> bool:
        for pod in core.list_namespaced_pod(ns).items:
            if not pod.metadata.name.startswith("bad-sink-consumer"):
                continue
            path = pod_runner.log_path(ns, pod.metadata.name)
            if path.exists() and "password authentication failed" in path.read_text(errors="replace"):
                return True
        return False

    wait_until(sink_failed, "bad-sink: the sink's login to fail in the consumer pod", 180, interval=2)
    wait_until(lambda: "lagpilot_" in op.metrics(), "operator metrics", 60, interval=1)

    # the scan
    places: dict[str, str] = {
        "operator log": op.tail(1_000_000),
        "operator metrics": op.metrics(),
        "events": json.dumps([e.to_dict() for e in core.list_namespaced_event(ns).items], default=str),
        "CRs (spec and status)": json.dumps([get_cr(custom, ns, n) for n in crs], default=str),
        "Deployments": json.dumps([d.to_dict() for d in apps.list_namespaced_deployment(ns).items], default=str),
        "Jobs": json.dumps([j.to_dict() for j in client.BatchV1Api(kube_api).list_namespaced_job(ns).items],
                           default=str),
    }
    pods = core.list_namespaced_pod(ns).items
    assert len(pods) >= 2, [p.metadata.name for p in pods]
    for pod in pods:
        path = pod_runner.log_path(ns, pod.metadata.name)
        places[f"pod log {pod.metadata.name}"] = path.read_text(errors="replace") if path.exists() else ""
    assert any("password authentication failed" in v for k, v in places.items() if k.startswith("pod log"))
    hits = [(what, where) for what, value in values.items() for where, text in places.items() if value in text]
    print(f"scanned {len(places)} places ({', '.join(places)}) for {len(values)} values: {len(hits)} hits")
    assert hits == []

    # credentials reach the pods only as secretKeyRef
    for dep in apps.list_namespaced_deployment(ns).items:
        for e in dep.spec.template.spec.containers[0].env:
            if e.name in ("LAGPILOT_SASL_USERNAME", "LAGPILOT_SASL_PASSWORD", "LAGPILOT_POSTGRES_DSN",
                          "LAGPILOT_SSL_KEY_PEM", "LAGPILOT_SSL_CA_PEM", "LAGPILOT_SSL_CERT_PEM"):
                assert e.value is None and e.value_from.secret_key_ref is not None, (dep.metadata.name, e.name)
    assert op.alive(), op.tail()
