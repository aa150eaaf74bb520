"""The BatchConsumerGroup CRD on the real kube-apiserver (v1.35, with CEL and structural pruning).

What is shown: the CRD installs and becomes Established; every example is accepted and stored
without a field being pruned; defaults are applied; `kubectl get bcg` shows the printer columns
(with values once status is written through the status subresource); `kubectl explain` reads well;
invalid CRs are rejected with an error naming the offending field; topic and groupId are immutable.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagpilot.spec import SpecError, parse_spec
from tests.fixtures.kube import wait_until

pytestmark = [pytest.mark.real]

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "batchconsumergroup.yaml"
CRD_NAME = "batchconsumergroups.lagpilot.io"
EXAMPLES = sorted((ROOT / "examples").glob("bcg-*.yaml"))

BASE: dict[str, Any] = {
    "apiVersion": "lagpilot.io/v1alpha1",
    "kind": "BatchConsumerGroup",
    "metadata": {"name": "base"},
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092"},
        "topic": "orders",
        "groupId": "orders-batch",
        "processing": {"sink": "log"},
    },
}

# The status sketch of docs/CONTRACTS.md, as the operator writes it.
STATUS = {
    "observedGeneration": 1,
    "partitions": 6,
    "replicas": 3,
    "desiredReplicas": 4,
    "totalLag": 12345,
    "maxPartitionLag": 8000,
    "produceRate": 450.2,
    "capacityPerReplica": 137.5,
    "projectedCatchUpSeconds": 812,
    "lastScaleTime": "2026-01-01T00:00:00Z",
    "dataLossRecords": 0,
    "lastObservedTime": "2026-01-01T00:00:00.000Z",
    "partitionStatuses": [
        {
            "partition": 0,
            "committed": 100,
            "end": 110,
            "low": 0,
            "lag": 10,
            "produceRate": 12.5,
            "consumeRate": 11.0,
        },
        {
            "partition": 1,
            "end": 8000,
            "low": 0,
            "lag": 8000,
            "oldestAgeSeconds": 31.5,
            "produceRate": 400.0,
            "consumeRate": 0.0,
        },
    ],
    "drain": {
        "id": 3,
        "phase": "Running",
        "reason": "Launched",
        "message": "drain 3 Running",
        "attempt": 1,
        "ranges": [{"partition": 1, "start": 0, "end": 8000, "tasks": 2}],
        "subRanges": [
            {"partition": 1, "index": 0, "start": 0, "end": 4000, "next": 1200, "records": 1200},
            {"partition": 1, "index": 1, "start": 4000, "end": 8000, "next": 4000, "records": 0},
        ],
        "plannedAt": "2026-01-01T00:00:00.000Z",
        "handOffPath": "ConsumerAck",
        "recordsTotal": 8000,
        "recordsDone": 1200,
        "history": [
            {
                "id": 2,
                "phase": "Verified",
                "reason": "AllRangesDone",
                "ranges": [{"partition": 0, "start": 10, "end": 60}],
                "recordsDone": 50,
                "recordsTotal": 50,
                "seconds": 12.5,
                "pauseSeconds": 0.0,
            }
        ],
    },
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Reconciled",
            "message": "consumers up",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Scaling",
            "status": "True",
            "reason": "ProjectionAboveSLA",
            "message": "scale up 3→4: projected 812s > SLA 600s",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "CatchUpAtRisk",
            "status": "True",
            "reason": "ProjectionAboveSLA",
            "message": "projected 812s > SLA 600s",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ],
}


def merged(patch: dict[str, Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    """Deep-merge `patch` into a copy of `base`; a None value deletes the key."""
    out = copy.deepcopy(base)

    def merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
        for k, v in src.items():
            if v is None:
                dst.pop(k, None)
            elif isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = copy.deepcopy(v)

    merge(out, patch)
    return out


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part]
    return obj


def is_subset(small: Any, big: Any) -> bool:
    """True when every field of `small` is in `big` with the same value (nothing pruned)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and is_subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(map(is_subset, small, big))
    return small == big


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def crd(kube):
    """Install (or update) the CRD and wait until it is Established and served."""
    kube.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=lagpilot-tests", "-f", str(CRD_FILE)
    )
    kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=120s", timeout=150)
    # Established can precede discovery: wait until kubectl resolves the short name.
    wait_until(
        lambda: kube.kubectl("get", "bcg", "-A", check=False).returncode == 0,
        "the bcg resource in discovery",
        timeout=120,
    )
    return kube


@pytest.fixture(scope="module")
def ns(crd):
    """One namespace for the module (CRs need no ServiceAccount); deleted without waiting."""
    name = f"crd-{uuid.uuid4().hex[:8]}"
    crd.kubectl("create", "namespace", name)
    yield name
    crd.kubectl("delete", "namespace", name, "--wait=false", check=False)


def create(kube, ns: str, obj: dict[str, Any]):
    return kube.kubectl(
        "create", "-n", ns, "-f", "-", input_text=yaml.safe_dump(obj, allow_unicode=True), check=False
    )


def get_json(kube, ns: str, name: str) -> dict[str, Any]:
    return json.loads(kube.kubectl("get", "bcg", name, "-n", ns, "-o", "json").stdout)


# --------------------------------------------------------------------------- install, examples


def test_crd_is_established_with_its_names(crd):
    out = json.loads(crd.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    conds = {c["type"]: c["status"] for c in out["status"]["conditions"]}
    assert conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"
    assert out["status"]["acceptedNames"]["shortNames"] == ["bcg"]
    assert out["status"]["acceptedNames"]["categories"] == ["lagpilot"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_is_accepted_and_stored_unpruned(crd, ns, example):
    """Every example applies, is stored unpruned, and the operator's parser accepts what is stored
    (with the CRD's defaults filled in: e.g. the schema-qualified table of bcg-sasl-tls)."""
    proc = crd.kubectl("apply", "-n", ns, "-f", str(example), check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    bcg = next(d for d in docs if d["kind"] == "BatchConsumerGroup")
    name = bcg["metadata"]["name"]
    assert f"batchconsumergroup.lagpilot.io/{name}" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr  # e.g. 'unknown field' would mean pruning
    stored = get_json(crd, ns, name)
    assert is_subset(bcg["spec"], stored["spec"]), (bcg["spec"], stored["spec"])
    parse_spec(stored["spec"])


def test_defaults_are_applied(crd, ns):
    obj = merged({"metadata": {"name": "minimal"}})
    proc = create(crd, ns, obj)
    assert proc.returncode == 0, proc.stderr
    spec = get_json(crd, ns, "minimal")["spec"]
    expected = {
        "kafka.securityProtocol": "PLAINTEXT",
        "batch.maxRecords": 500,
        "batch.timeoutMs": 1000,
        "processing.concurrency": 1,
        "failure.maxRetries": 3,
        "failure.backoffMs": 200,
        "failure.policy": "deadLetter",
        "scaling.minReplicas": 1,
        "scaling.maxReplicas": 10,
        "scaling.tolerance": 0.1,
        "scaling.pollIntervalSeconds": 15,
        "scaling.behavior.scaleUp.stabilizationWindowSeconds": 0,
        "scaling.behavior.scaleDown.stabilizationWindowSeconds": 300,
        "catchUpSLASeconds": 600,
        "drain.enabled": True,
        "drain.maxTasks": 16,
        "drain.minBacklogRecords": 10000,
        "drain.cancel": False,
        "drain.launcher": "job",
        "drain.warmRuntime": False,
        "paused": False,
        "template.image": "lagpilot/consumer:0.1.0",
        "template.imagePullPolicy": "IfNotPresent",
    }
    got = {path: dig(spec, path) for path in expected}
    assert got == expected
    assert "deadLetterTopic" not in spec["failure"]  # "<topic>.dlq" is computed by the operator
    # issue 25: splitFactor is an optional cap with no default (each partition gets the tasks it needs)
    assert "splitFactor" not in spec["drain"]


def test_postgres_defaults_are_applied(crd, ns):
    obj = merged(
        {
            "metadata": {"name": "pg-defaults"},
            "spec": {"processing": {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "pg"}}}},
        }
    )
    proc = create(crd, ns, obj)
    assert proc.returncode == 0, proc.stderr
    pg = get_json(crd, ns, "pg-defaults")["spec"]["processing"]["postgres"]
    assert pg == {"dsnSecretRef": {"name": "pg", "key": "dsn"}, "table": "lagpilot_records", "mode": "insert"}


# --------------------------------------------------------------------------- kubectl get / explain


def test_get_shows_printer_columns_and_status_values(crd, ns):
    name = "printer"
    assert create(crd, ns, merged({"metadata": {"name": name}})).returncode == 0
    header = crd.kubectl("get", "bcg", name, "-n", ns).stdout.splitlines()[0].split()
    assert header == ["NAME", "TOPIC", "REPLICAS", "LAG", "CATCH-UP", "SLA", "READY", "AGE"]
    wide = crd.kubectl("get", "bcg", name, "-n", ns, "-o", "wide").stdout.splitlines()[0].split()
    assert wide == [
        "NAME",
        "TOPIC",
        "PARTITIONS",
        "REPLICAS",
        "DESIRED",
        "LAG",
        "MAX-LAG",
        "RATE",
        "CATCH-UP",
        "SLA",
        "READY",
        "DRAIN",
        "DECISION",
        "AGE",
    ]

    crd.kubectl(
        "patch",
        "bcg",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": STATUS}),
    )
    row = crd.kubectl("get", "bcg", name, "-n", ns, "--no-headers").stdout.split()
    assert row[:7] == [name, "orders", "3", "12345", "812", "600", "True"]
    wide_row = crd.kubectl("get", "bcg", name, "-n", ns, "-o", "wide", "--no-headers").stdout
    assert re.search(
        r"\b6\s+3\s+4\s+12345\s+8000\s+450\.2\s+812\s+600\s+True\s+Running\s+scale up 3→4", wide_row
    ), wide_row


def test_status_round_trips_through_the_status_subresource(crd, ns):
    """Every contract status field is declared (nothing pruned); undeclared ones are dropped."""
    name = "status-rt"
    assert create(crd, ns, merged({"metadata": {"name": name}})).returncode == 0
    # notInSchema, and the free-form memory an operator before issue 26 kept in the status
    sent = {**STATUS, "notInSchema": 1, "estimator": {"at": "2026-01-01T00:00:00.000Z"}}
    proc = crd.kubectl(
        "patch",
        "bcg",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": sent}),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    status = get_json(crd, ns, name)["status"]
    want = copy.deepcopy(STATUS)
    assert is_subset(want, status), status
    assert "notInSchema" not in status and "estimator" not in status, status

    # every field is reachable with jsonpath (keyed lists of named objects, no encoded strings)
    def jsonpath(expr: str) -> str:
        return crd.kubectl("get", "bcg", name, "-n", ns, "-o", f"jsonpath={expr}").stdout

    assert jsonpath("{.status.partitionStatuses[?(@.partition==1)].oldestAgeSeconds}") == "31.5"
    assert jsonpath("{.status.drain.ranges[0].end}") == "8000"
    assert jsonpath("{.status.drain.subRanges[?(@.index==0)].next}") == "1200"
    assert jsonpath("{.status.drain.history[?(@.id==2)].ranges[0].start}") == "10"
    # the enum is enforced by the API server: a phase outside it is refused, naming the field
    bad = crd.kubectl(
        "patch",
        "bcg",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"drain": {"phase": "Done"}}}),
        check=False,
    )
    assert bad.returncode != 0 and "status.drain.phase" in bad.stderr, bad.stderr
    # status is ignored on the main resource: a spec update cannot overwrite it
    crd.kubectl(
        "patch", "bcg", name, "-n", ns, "--type=merge", "-p", json.dumps({"status": {"replicas": 99}})
    )
    assert get_json(crd, ns, name)["status"]["replicas"] == 3


def test_category_and_field_selector(crd, ns):
    for name, topic in [("sel-a", "alpha"), ("sel-b", "beta")]:
        obj = merged({"metadata": {"name": name}, "spec": {"topic": topic, "groupId": name}})
        assert create(crd, ns, obj).returncode == 0
    names = crd.kubectl("get", "lagpilot", "-n", ns, "-o", "name").stdout.split()
    assert {"batchconsumergroup.lagpilot.io/sel-a", "batchconsumergroup.lagpilot.io/sel-b"} <= set(names)
    sel = crd.kubectl(
        "get", "bcg", "-n", ns, "--field-selector", "spec.topic=beta", "-o", "name"
    ).stdout.split()
    assert sel == ["batchconsumergroup.lagpilot.io/sel-b"]


def _explain(kube, what: str) -> str:
    # the OpenAPI v3 document is published a little after Established: retry until it is there
    def attempt() -> str | None:
        proc = kube.kubectl("explain", what, check=False)
        return proc.stdout if proc.returncode == 0 and "DESCRIPTION" in proc.stdout else None

    return wait_until(attempt, f"kubectl explain {what}", timeout=120, interval=2)


def test_explain_spec_reads_well(crd):
    out = _explain(crd, "bcg.spec")
    text = " ".join(out.split())
    crd_spec = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["spec"]
    for field, schema in crd_spec["properties"].items():
        assert re.search(rf"^\s+{field}\s+<", out, re.M), f"{field} missing from explain"
        first_words = " ".join(schema["description"].split()[:6])
        assert first_words in text, f"description of {field} missing from explain"
    for req in crd_spec["required"]:
        assert re.search(rf"^\s+{req}\s+<\S+> -required-", out, re.M), req


@pytest.mark.parametrize(
    "path,expected",
    [
        ("bcg.spec.kafka.bootstrapServers", "Comma-separated host:port list"),
        ("bcg.spec.batch.maxRecords", "Default 500 (1 to 100000)"),
        ("bcg.spec.processing.handler", '"package.module:function"'),
        ("bcg.spec.kafka.securityProtocol", "SASL_SSL"),
        ("bcg.status.projectedCatchUpSeconds", "Projected seconds until the lag is cleared"),
    ],
    ids=["bootstrapServers", "maxRecords", "handler", "securityProtocol", "projectedCatchUp"],
)
def test_explain_nested_field(crd, path, expected):
    text = " ".join(_explain(crd, path).split())
    assert expected in text


# --------------------------------------------------------------------------- rejections

# (id, patch onto BASE, the field the error must name, a fragment of the error's reason)
INVALID = [
    ("missing-topic", {"spec": {"topic": None}}, "spec.topic", "Required value"),
    ("missing-group-id", {"spec": {"groupId": None}}, "spec.groupId", "Required value"),
    (
        "missing-bootstrap",
        {"spec": {"kafka": {"bootstrapServers": None}}},
        "spec.kafka.bootstrapServers",
        "Required value",
    ),
    (
        "batch-size-zero",
        {"spec": {"batch": {"maxRecords": 0}}},
        "spec.batch.maxRecords",
        "greater than or equal to 1",
    ),
    (
        "batch-size-too-large",
        {"spec": {"batch": {"maxRecords": 100001}}},
        "spec.batch.maxRecords",
        "less than or equal to 100000",
    ),
    (
        "batch-timeout-too-large",
        {"spec": {"batch": {"timeoutMs": 600001}}},
        "spec.batch.timeoutMs",
        "less than or equal to 600000",
    ),
    (
        "batch-timeout-over-sla",
        {"spec": {"batch": {"timeoutMs": 10000}, "catchUpSLASeconds": 5}},
        "spec.batch.timeoutMs",
        "must be shorter than catchUpSLASeconds",
    ),
    (
        "min-above-max-replicas",
        {"spec": {"scaling": {"minReplicas": 5, "maxReplicas": 2}}},
        "spec.scaling.minReplicas",
        "less than or equal to scaling.maxReplicas",
    ),
    (
        "min-above-default-max",
        {"spec": {"scaling": {"minReplicas": 11}}},
        "spec.scaling.minReplicas",
        "less than or equal to scaling.maxReplicas",
    ),
    (
        "max-replicas-zero",
        {"spec": {"scaling": {"maxReplicas": 0}}},
        "spec.scaling.maxReplicas",
        "greater than or equal to 1",
    ),
    (
        "sink-and-handler",
        {"spec": {"processing": {"sink": "log", "handler": "mypkg.handlers:process"}}},
        "spec.processing",
        "exactly one of processing.sink or processing.handler",
    ),
    (
        "neither-sink-nor-handler",
        {"spec": {"processing": {"sink": None, "concurrency": 2}}},
        "spec.processing",
        "exactly one of processing.sink or processing.handler",
    ),
    (
        "handler-without-colon",
        {"spec": {"processing": {"sink": None, "handler": "mypkg.handlers.process"}}},
        "spec.processing.handler",
        "should match",
    ),
    (
        "handler-path-like",
        {"spec": {"processing": {"sink": None, "handler": "mypkg/handlers:process"}}},
        "spec.processing.handler",
        "should match",
    ),
    (
        "unknown-sink",
        {"spec": {"processing": {"sink": "s3"}}},
        "spec.processing.sink",
        'Unsupported value: "s3"',
    ),
    ("sla-zero", {"spec": {"catchUpSLASeconds": 0}}, "spec.catchUpSLASeconds", "greater than or equal to 1"),
    (
        "sla-negative",
        {"spec": {"catchUpSLASeconds": -60}},
        "spec.catchUpSLASeconds",
        "greater than or equal to 1",
    ),
    (
        "sasl-without-secret-ref",
        {"spec": {"kafka": {"securityProtocol": "SASL_SSL", "saslMechanism": "PLAIN"}}},
        "spec.kafka.secretRef",
        "required when kafka.securityProtocol is",
    ),
    (
        "sasl-without-mechanism",
        {"spec": {"kafka": {"securityProtocol": "SASL_PLAINTEXT", "secretRef": {"name": "kafka-creds"}}}},
        "spec.kafka.saslMechanism",
        "required when kafka.securityProtocol is",
    ),
    (
        "ssl-without-secret-ref",
        {"spec": {"kafka": {"securityProtocol": "SSL"}}},
        "spec.kafka.secretRef",
        "required when kafka.securityProtocol is",
    ),
    (
        "mechanism-with-plaintext",
        {"spec": {"kafka": {"saslMechanism": "PLAIN"}}},
        "spec.kafka.saslMechanism",
        "Forbidden",
    ),
    (
        "bad-security-protocol",
        {"spec": {"kafka": {"securityProtocol": "TLS"}}},
        "spec.kafka.securityProtocol",
        'Unsupported value: "TLS"',
    ),
    (
        "bad-sasl-mechanism",
        {
            "spec": {
                "kafka": {
                    "securityProtocol": "SASL_SSL",
                    "saslMechanism": "GSSAPI",
                    "secretRef": {"name": "kafka-creds"},
                }
            }
        },
        "spec.kafka.saslMechanism",
        'Unsupported value: "GSSAPI"',
    ),
    (
        "bootstrap-without-port",
        {"spec": {"kafka": {"bootstrapServers": "kafka"}}},
        "spec.kafka.bootstrapServers",
        "should match",
    ),
    (
        "bootstrap-with-scheme",
        {"spec": {"kafka": {"bootstrapServers": "PLAINTEXT://kafka:9092"}}},
        "spec.kafka.bootstrapServers",
        "should match",
    ),
    ("bad-topic-name", {"spec": {"topic": "orders topic"}}, "spec.topic", "should match"),
    ("topic-dot", {"spec": {"topic": ".."}}, "spec.topic", 'must not be "." or ".."'),
    (
        "postgres-sink-without-config",
        {"spec": {"processing": {"sink": "postgres"}}},
        "spec.processing.postgres",
        "required when processing.sink is postgres",
    ),
    (
        "postgres-config-with-log-sink",
        {"spec": {"processing": {"postgres": {"dsnSecretRef": {"name": "pg"}}}}},
        "spec.processing.postgres",
        "only allowed when processing.sink is postgres",
    ),
    (
        "postgres-table-injection",
        {
            "spec": {
                "processing": {
                    "sink": "postgres",
                    "postgres": {"dsnSecretRef": {"name": "pg"}, "table": "x; drop table y"},
                }
            }
        },
        "spec.processing.postgres.table",
        "should match",
    ),
    (
        "dead-letter-topic-is-topic",
        {"spec": {"failure": {"deadLetterTopic": "orders"}}},
        "spec.failure.deadLetterTopic",
        "must differ from topic",
    ),
    (
        "bad-failure-policy",
        {"spec": {"failure": {"policy": "ignore"}}},
        "spec.failure.policy",
        'Unsupported value: "ignore"',
    ),
    (
        "bad-drain-launcher",
        {"spec": {"drain": {"launcher": "SparkApplication"}}},
        "spec.drain.launcher",
        'Unsupported value: "SparkApplication"',
    ),
    (
        "warm-runtime-with-spark-application",
        {"spec": {"drain": {"launcher": "sparkApplication", "warmRuntime": True}}},
        "spec.drain.warmRuntime",
        "must be false when spec.drain.launcher is",
    ),
    (
        "warm-runtime-cooldown-without-warm-runtime",
        {"spec": {"drain": {"warmRuntimeCooldownSeconds": 60}}},
        "spec.drain.warmRuntimeCooldownSeconds",
        "allowed only with spec.drain.warmRuntime true",
    ),
    (
        "warm-runtime-cooldown-negative",
        {"spec": {"drain": {"warmRuntime": True, "warmRuntimeCooldownSeconds": -1}}},
        "spec.drain.warmRuntimeCooldownSeconds",
        "greater than or equal to 0",
    ),
    (
        "concurrency-zero",
        {"spec": {"processing": {"concurrency": 0}}},
        "spec.processing.concurrency",
        "greater than or equal to 1",
    ),
    (
        "tolerance-above-one",
        {"spec": {"scaling": {"tolerance": 1.5}}},
        "spec.scaling.tolerance",
        "less than or equal to 1",
    ),
    (
        "reserved-env-name",
        {"spec": {"template": {"env": [{"name": "LAGPILOT_TOPIC", "value": "other"}]}}},
        "spec.template.env",
        "reserved for the lagpilot runtime",
    ),
    (
        "test-hook-env-name",
        {"spec": {"template": {"env": [{"name": "LP_TEST_NO_HANDOFF", "value": "1"}]}}},
        "spec.template.env",
        "reserved for the runtime's tests",
    ),
    (
        "config-too-large",
        {"spec": {"processing": {"config": {f"k{i}": "x" * 4000 for i in range(3)}}}},
        "spec.processing.config",
        "at most 10000 characters",
    ),
    (
        "config-value-not-string",
        {"spec": {"processing": {"config": {"retries": 3}}}},
        "spec.processing.config.retries",
        "must be of type string",
    ),
    ("unknown-field-typo", {"spec": {"batch": {"maxRecord": 5}}}, "spec.batch.maxRecord", "unknown field"),
    ("name-too-long", {"metadata": {"name": "n" * 53}}, "metadata.name", "at most 52 characters"),
]


def _env(**value_from: Any) -> dict[str, Any]:
    return {"spec": {"template": {"env": [{"name": "X", "valueFrom": value_from}]}}}


def _res(**parts: Any) -> dict[str, Any]:
    return {"spec": {"template": {"resources": parts}}}


_PG = {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "pg"}}}
_DLQ = "spec.failure.deadLetterTopic"
_BS = "spec.kafka.bootstrapServers"
_SK = "spec.template.env[0].valueFrom.secretKeyRef"
_CM = "spec.template.env[0].valueFrom.configMapKeyRef"
_FR = "spec.template.env[0].valueFrom.fieldRef"

# issue 14: the classes a held-out set found accepted, each now rejected naming its field
INVALID_ISSUE_14 = [
    # failure.deadLetterTopic validated like topic, and against it
    ("dlq-dot", {"spec": {"failure": {"deadLetterTopic": "."}}}, _DLQ, 'must not be "." or ".."'),
    ("dlq-dotdot", {"spec": {"failure": {"deadLetterTopic": ".."}}}, _DLQ, 'must not be "." or ".."'),
    (
        "dlq-consumer-offsets",
        {"spec": {"failure": {"deadLetterTopic": "__consumer_offsets"}}},
        _DLQ,
        'must not start with "__"',
    ),
    (
        "dlq-transaction-state",
        {"spec": {"failure": {"deadLetterTopic": "__transaction_state"}}},
        _DLQ,
        'must not start with "__"',
    ),
    ("dlq-bad-chars", {"spec": {"failure": {"deadLetterTopic": "orders dlq"}}}, _DLQ, "should match"),
    (
        "dlq-collides-dot-underscore",
        {"spec": {"topic": "orders.eu", "failure": {"deadLetterTopic": "orders_eu"}}},
        _DLQ,
        "must not collide with topic",
    ),
    (
        "dlq-collides-underscore-dot",
        {"spec": {"topic": "orders_eu", "failure": {"deadLetterTopic": "orders.eu"}}},
        _DLQ,
        "must not collide with topic",
    ),
    (
        "dlq-with-policy-pause",
        {"spec": {"failure": {"policy": "pause", "deadLetterTopic": "orders-dead"}}},
        _DLQ,
        "only allowed when failure.policy is deadLetter",
    ),
    (
        "dlq-with-policy-exit",
        {"spec": {"failure": {"policy": "exit", "deadLetterTopic": "orders-dead"}}},
        _DLQ,
        "only allowed when failure.policy is deadLetter",
    ),
    (
        "default-dlq-over-249",
        {"spec": {"topic": "t" * 246, "groupId": "long-topic"}},
        "spec.topic",
        "at most 245 characters",
    ),
    # bootstrapServers: ports 1-65535, no empty host labels
    ("port-65536", {"spec": {"kafka": {"bootstrapServers": "kafka:65536"}}}, _BS, "should match"),
    ("port-99999", {"spec": {"kafka": {"bootstrapServers": "kafka:99999"}}}, _BS, "should match"),
    ("port-zero", {"spec": {"kafka": {"bootstrapServers": "kafka:0"}}}, _BS, "should match"),
    (
        "second-server-port-too-big",
        {"spec": {"kafka": {"bootstrapServers": "a:9092,b:70000"}}},
        _BS,
        "should match",
    ),
    ("host-empty-label", {"spec": {"kafka": {"bootstrapServers": "kafka..svc:9092"}}}, _BS, "should match"),
    ("host-leading-dot", {"spec": {"kafka": {"bootstrapServers": ".kafka:9092"}}}, _BS, "should match"),
    ("host-trailing-dot", {"spec": {"kafka": {"bootstrapServers": "kafka.:9092"}}}, _BS, "should match"),
    # credentials only with a protocol that uses them
    (
        "secret-ref-with-plaintext",
        {"spec": {"kafka": {"securityProtocol": "PLAINTEXT", "secretRef": {"name": "kafka-creds"}}}},
        "spec.kafka.secretRef",
        "only allowed when kafka.securityProtocol is SSL",
    ),
    (
        "secret-ref-with-default-protocol",
        {"spec": {"kafka": {"secretRef": {"name": "kafka-creds"}}}},
        "spec.kafka.secretRef",
        "Forbidden",
    ),
    # Secret/ConfigMap keys and names as Kubernetes validates them
    (
        "dsn-key-dot",
        {"spec": {"processing": {**_PG, "postgres": {"dsnSecretRef": {"name": "pg", "key": "."}}}}},
        "spec.processing.postgres.dsnSecretRef.key",
        'must not be "." or start with ".."',
    ),
    (
        "dsn-key-dotdot-prefix",
        {"spec": {"processing": {**_PG, "postgres": {"dsnSecretRef": {"name": "pg", "key": "..data"}}}}},
        "spec.processing.postgres.dsnSecretRef.key",
        'must not be "." or start with ".."',
    ),
    (
        "dsn-key-slash",
        {"spec": {"processing": {**_PG, "postgres": {"dsnSecretRef": {"name": "pg", "key": "a/b"}}}}},
        "spec.processing.postgres.dsnSecretRef.key",
        "should match",
    ),
    (
        "env-secret-key-dotdot",
        _env(secretKeyRef={"name": "s", "key": ".."}),
        f"{_SK}.key",
        'must not be "." or start with ".."',
    ),
    (
        "env-secret-name-upper",
        _env(secretKeyRef={"name": "MySecret", "key": "k"}),
        f"{_SK}.name",
        "should match",
    ),
    (
        "env-secret-name-empty",
        _env(secretKeyRef={"name": "", "key": "k"}),
        f"{_SK}.name",
        "at least 1 chars long",
    ),
    (
        "env-configmap-name-underscore",
        _env(configMapKeyRef={"name": "my_cm", "key": "k"}),
        f"{_CM}.name",
        "should match",
    ),
    (
        "env-configmap-key-space",
        _env(configMapKeyRef={"name": "cm", "key": "a b"}),
        f"{_CM}.key",
        "should match",
    ),
    # resources: non-negative, requests <= limits
    (
        "negative-cpu-string",
        _res(requests={"cpu": "-1"}),
        "spec.template.resources.requests.cpu",
        "should match",
    ),
    (
        "negative-memory-int",
        _res(limits={"memory": -5}),
        "spec.template.resources.limits.memory",
        "greater than or equal to 0",
    ),
    (
        "requests-above-limits",
        _res(requests={"memory": "2Gi"}, limits={"memory": "1Gi"}),
        "spec.template.resources.requests",
        "less than or equal to template.resources.limits",
    ),
    (
        "requests-above-limits-mixed-units",
        _res(requests={"cpu": "1.5"}, limits={"cpu": "1200m"}),
        "spec.template.resources.requests",
        "less than or equal to template.resources.limits",
    ),
    # image references
    (
        "image-upper-case",
        {"spec": {"template": {"image": "Lagpilot/Consumer:1"}}},
        "spec.template.image",
        "should match",
    ),
    (
        "image-with-space",
        {"spec": {"template": {"image": "lagpilot/consumer :1"}}},
        "spec.template.image",
        "should match",
    ),
    (
        "image-with-scheme",
        {"spec": {"template": {"image": "https://registry.example.com/x:1"}}},
        "spec.template.image",
        "should match",
    ),
    (
        "image-empty-tag",
        {"spec": {"template": {"image": "lagpilot/consumer:"}}},
        "spec.template.image",
        "should match",
    ),
    # fieldRef paths Kubernetes supports for env
    (
        "fieldref-unsupported-path",
        _env(fieldRef={"fieldPath": "spec.containers"}),
        f"{_FR}.fieldPath",
        "should match",
    ),
    (
        "fieldref-labels-without-key",
        _env(fieldRef={"fieldPath": "metadata.labels"}),
        f"{_FR}.fieldPath",
        "should match",
    ),
    (
        "fieldref-api-version-v2",
        _env(fieldRef={"apiVersion": "v2", "fieldPath": "metadata.name"}),
        f"{_FR}.apiVersion",
        'Unsupported value: "v2"',
    ),
    # scaling.pollIntervalSeconds <= catchUpSLASeconds
    (
        "poll-above-sla",
        {"spec": {"scaling": {"pollIntervalSeconds": 120}, "catchUpSLASeconds": 60}},
        "spec.scaling.pollIntervalSeconds",
        "less than or equal to catchUpSLASeconds",
    ),
    (
        "default-poll-above-sla",
        {"spec": {"catchUpSLASeconds": 10, "batch": {"timeoutMs": 500}}},
        "spec.scaling.pollIntervalSeconds",
        "less than or equal to catchUpSLASeconds",
    ),
]
INVALID += INVALID_ISSUE_14

# spec.drain.resources: the drain pods' own resources, checked as template.resources and only where
# lagpilot builds the drain's pod (launcher job)
INVALID += [
    (
        "drain-resources-negative-cpu",
        {"spec": {"drain": {"resources": {"requests": {"cpu": "-1"}}}}},
        "spec.drain.resources.requests.cpu",
        "should match",
    ),
    (
        "drain-resources-requests-above-limits",
        {"spec": {"drain": {"resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "3Gi"}}}}},
        "spec.drain.resources.requests",
        "less than or equal to drain.resources.limits",
    ),
    (
        "drain-resources-with-sparkapplication",
        {"spec": {"drain": {"launcher": "sparkApplication", "resources": {"limits": {"memory": "4Gi"}}}}},
        "spec.drain.resources",
        "launcher job",
    ),
]


@pytest.mark.parametrize("patch,field,reason", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_cr_is_rejected_naming_the_field(crd, ns, patch, field, reason, request):
    obj = merged(patch)
    if "name" not in patch.get("metadata", {}):
        obj["metadata"]["name"] = f"bad-{request.node.callspec.id}"[:52]
    proc = create(crd, ns, obj)
    assert proc.returncode != 0, f"accepted: {proc.stdout}"
    err = " ".join(proc.stderr.split())
    assert field in err, err
    assert reason in err, err
    # rejected means not stored
    gone = crd.kubectl("get", "bcg", obj["metadata"]["name"], "-n", ns, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # and the operator's parser rejects it too, naming the same field (the CRD and parser agree)
    if field.startswith("spec.") and reason != "unknown field":
        with pytest.raises(SpecError) as info:
            parse_spec(obj["spec"])
        paths = [p for p, _ in info.value.problems]
        assert any(p == field or p.startswith(field + ".") or p.startswith(field + "[") for p in paths), paths


def test_base_cr_of_the_invalid_table_is_valid(crd, ns):
    """Positive control: the rejections above come from their patch, not from the base."""
    proc = create(crd, ns, merged({"metadata": {"name": "base-ok"}}))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("field,new", [("topic", "orders-v2"), ("groupId", "another-group")])
def test_topic_and_group_id_are_immutable(crd, ns, field, new):
    name = f"immutable-{field.lower()}"
    assert create(crd, ns, merged({"metadata": {"name": name}})).returncode == 0
    proc = crd.kubectl(
        "patch", "bcg", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": {field: new}}), check=False
    )
    assert proc.returncode != 0
    err = " ".join(proc.stderr.split())
    assert f"spec.{field}" in err and "immutable" in err, err
    assert get_json(crd, ns, name)["spec"][field] == BASE["spec"][field]
    # other fields stay mutable (positive control for the transition rule)
    proc = crd.kubectl(
        "patch",
        "bcg",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"scaling": {"maxReplicas": 3}, "paused": True}}),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert get_json(crd, ns, name)["spec"]["scaling"]["maxReplicas"] == 3
