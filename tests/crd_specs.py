"""Hypothesis strategies for BatchConsumerGroup specs, built from the CRD's own patterns and bounds.

`valid_specs()` draws specs that satisfy every OpenAPI and CEL rule of crds/batchconsumergroup.yaml
(strings from the CRD's regexes, numbers from its bounds, cross-field rules respected);
`mutated_specs()` draws a valid spec with one field replaced by an arbitrary (often invalid) value.
Used offline (tests/unit/test_model.py: OpenAPI verdicts vs. the parser) and on the
real API server (tests/real/test_crd_parser_agreement.py: apiserver verdicts vs. the parser).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
CRD = yaml.safe_load((ROOT / "crds" / "batchconsumergroup.yaml").read_text())
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]


def schema_at(path: str) -> dict[str, Any]:
    """Schema of `spec.a.b` (`[]` descends into items, `*` into additionalProperties)."""
    node: dict[str, Any] = SCHEMA
    for part in path.split("."):
        many = part.endswith("[]")
        name = part.removesuffix("[]")
        node = node["additionalProperties"] if name == "*" else node["properties"][name]
        if many:
            node = node["items"]
    return node


def pattern(path: str, max_len: int | None = None) -> st.SearchStrategy[str]:
    s = schema_at(path)
    hi = min(s.get("maxLength", 10_000), max_len or 10_000)
    lo = s.get("minLength", 0)
    return st.from_regex(s["pattern"], fullmatch=True).filter(lambda v: lo <= len(v) <= hi)


def ints(path: str, lo: int | None = None, hi: int | None = None) -> st.SearchStrategy[int]:
    s = schema_at(path)
    a = s.get("minimum", 0) if lo is None else max(lo, s.get("minimum", lo))
    b = s.get("maximum", 10**9) if hi is None else min(hi, s.get("maximum", hi))
    return st.integers(a, b)


DNS = pattern("spec.kafka.secretRef.name", 60)
KEY = pattern("spec.processing.postgres.dsnSecretRef.key", 40).filter(
    lambda k: k != "." and not k.startswith("..")
)
TOPIC = pattern("spec.topic", 60).filter(lambda t: t not in (".", ".."))
LONG_TOPIC = st.integers(240, 249).map(lambda n: "t" * n)

_UNITS = ["", "m", "k", "M", "G", "Ki", "Mi", "Gi"]


@st.composite
def quantity_pair(draw: st.DrawFn) -> tuple[Any, Any]:
    """(request, limit) with request <= limit, as int or quantity strings of the same unit."""
    unit = draw(st.sampled_from(_UNITS))
    req = draw(st.integers(0, 5000))
    lim = req + draw(st.integers(0, 5000))
    as_int = unit == "" and draw(st.booleans())
    return (req, lim) if as_int else (f"{req}{unit}", f"{lim}{unit}")


@st.composite
def env_entry(draw: st.DrawFn, name: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(["value", "secret", "configMap", "field", "resource", "none"]))
    e: dict[str, Any] = {"name": name}
    if kind == "value":
        e["value"] = draw(st.text(max_size=20))
    elif kind in ("secret", "configMap"):
        ref: dict[str, Any] = {"name": draw(DNS), "key": draw(KEY)}
        if draw(st.booleans()):
            ref["optional"] = draw(st.booleans())
        e["valueFrom"] = {f"{kind}KeyRef": ref}
    elif kind == "field":
        fr: dict[str, Any] = {
            "fieldPath": draw(pattern("spec.template.env[].valueFrom.fieldRef.fieldPath", 100))
        }
        if draw(st.booleans()):
            fr["apiVersion"] = "v1"
        e["valueFrom"] = {"fieldRef": fr}
    elif kind == "resource":
        e["valueFrom"] = {
            "resourceFieldRef": {
                "resource": draw(pattern("spec.template.env[].valueFrom.resourceFieldRef.resource", 40))
            }
        }
    return e


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec every rule of the CRD accepts (and so, the contract says, the operator too)."""
    spec: dict[str, Any] = {}
    proto = draw(st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", None]))
    kafka: dict[str, Any] = {"bootstrapServers": draw(pattern("spec.kafka.bootstrapServers", 300))}
    if proto is not None:
        kafka["securityProtocol"] = proto
    if proto not in (None, "PLAINTEXT"):
        kafka["secretRef"] = {"name": draw(DNS)}
    if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
        kafka["saslMechanism"] = draw(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]))
    spec["kafka"] = kafka

    policy = draw(st.sampled_from(["deadLetter", "pause", "exit", None]))
    dead_letter = policy in ("deadLetter", None)
    dlq = draw(st.none() | TOPIC) if dead_letter else None
    topic = draw(TOPIC | LONG_TOPIC)
    if dead_letter and dlq is None:
        topic = topic[:245]
    if dlq is not None and (dlq.startswith("__") or dlq.replace(".", "_") == topic.replace(".", "_")):
        dlq = None
        topic = topic[:245]
    spec["topic"] = topic
    spec["groupId"] = draw(pattern("spec.groupId", 80))

    sla = draw(st.one_of(st.integers(1, 120), ints("spec.catchUpSLASeconds")))
    if draw(st.booleans()) or sla < 15:
        spec["catchUpSLASeconds"] = sla
    else:
        sla = 600
    batch: dict[str, Any] = {}
    if draw(st.booleans()):
        batch["maxRecords"] = draw(ints("spec.batch.maxRecords"))
    if sla * 1000 <= 1000 or draw(st.booleans()):
        batch["timeoutMs"] = draw(ints("spec.batch.timeoutMs", hi=sla * 1000 - 1))
    if batch:
        spec["batch"] = batch

    kind = draw(st.sampled_from(["log", "postgres", "handler"]))
    proc: dict[str, Any] = (
        {"handler": draw(pattern("spec.processing.handler", 80))} if kind == "handler" else {"sink": kind}
    )
    if kind == "postgres":
        pg: dict[str, Any] = {"dsnSecretRef": {"name": draw(DNS)}}
        if draw(st.booleans()):
            pg["dsnSecretRef"]["key"] = draw(KEY)
        if draw(st.booleans()):
            pg["table"] = draw(pattern("spec.processing.postgres.table"))
        if draw(st.booleans()):
            pg["mode"] = draw(st.sampled_from(["insert", "upsert"]))
        proc["postgres"] = pg
    if draw(st.booleans()):
        proc["concurrency"] = draw(ints("spec.processing.concurrency"))
    if draw(st.booleans()):
        proc["config"] = draw(
            st.dictionaries(st.text("abcxyz_-.", min_size=1, max_size=8), st.text(max_size=30), max_size=4)
        )
    spec["processing"] = proc

    failure: dict[str, Any] = {}
    if policy is not None:
        failure["policy"] = policy
    if dlq is not None:
        failure["deadLetterTopic"] = dlq
    if draw(st.booleans()):
        failure["maxRetries"] = draw(ints("spec.failure.maxRetries"))
        failure["backoffMs"] = draw(ints("spec.failure.backoffMs"))
    if failure:
        spec["failure"] = failure

    scaling: dict[str, Any] = {}
    lo = draw(ints("spec.scaling.minReplicas"))
    hi = draw(ints("spec.scaling.maxReplicas", lo=max(lo, 1)))
    if draw(st.booleans()) or lo > 10:
        scaling["minReplicas"], scaling["maxReplicas"] = lo, hi
    if draw(st.booleans()):
        scaling["tolerance"] = draw(st.sampled_from([0, 1, 0.5]) | st.floats(0, 1, allow_nan=False))
    if sla < 15 or draw(st.booleans()):
        scaling["pollIntervalSeconds"] = draw(ints("spec.scaling.pollIntervalSeconds", hi=sla))
    if draw(st.booleans()):
        scaling["behavior"] = {
            "scaleUp": {
                "stabilizationWindowSeconds": draw(
                    ints("spec.scaling.behavior.scaleUp.stabilizationWindowSeconds")
                )
            }
        }
    if scaling:
        spec["scaling"] = scaling

    if draw(st.booleans()):
        spec["drain"] = {
            "enabled": draw(st.booleans()),
            "splitFactor": draw(ints("spec.drain.splitFactor")),
            "maxTasks": draw(ints("spec.drain.maxTasks")),
            "minBacklogRecords": draw(st.integers(0, 10**12)),
        }
        if draw(st.booleans()):
            spec["drain"]["launcher"] = draw(st.sampled_from(schema_at("spec.drain.launcher")["enum"]))
        if draw(st.booleans()):  # CEL: a warm runtime only with the job launcher
            spec["drain"]["warmRuntime"] = spec["drain"].get("launcher") != "sparkApplication" and draw(
                st.booleans()
            )
        if spec["drain"].get("warmRuntime") and draw(
            st.booleans()
        ):  # CEL: a cooldown only with a warm runtime
            spec["drain"]["warmRuntimeCooldownSeconds"] = draw(ints("spec.drain.warmRuntimeCooldownSeconds"))
    if draw(st.booleans()):
        spec["paused"] = draw(st.booleans())
    if draw(st.booleans()):
        spec["mode"] = draw(st.sampled_from(["Act", "Recommend"]))  # spec.mode (issue 28)

    template: dict[str, Any] = {}
    if draw(st.booleans()):
        template["image"] = draw(pattern("spec.template.image", 200))
    if draw(st.booleans()):
        names = draw(
            st.lists(
                st.sampled_from(["cpu", "memory", "ephemeral-storage", "example.com/gpu"]),
                unique=True,
                max_size=3,
            )
        )
        requests, limits = {}, {}
        for n in names:
            req, lim = draw(quantity_pair())
            which = draw(st.sampled_from(["both", "req", "lim"]))
            if which in ("both", "req"):
                requests[n] = req
            if which in ("both", "lim"):
                limits[n] = lim
        template["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if draw(st.booleans()):
        names = draw(
            st.lists(
                pattern("spec.template.env[].name", 20).filter(lambda n: not n.startswith("LAGPILOT_")),
                unique=True,
                max_size=4,
            )
        )
        template["env"] = [draw(env_entry(n)) for n in names]
    if template:
        spec["template"] = template
    return spec


# (path in the spec, strategy of replacement values): one per field, mostly invalid-ish values
_NASTY_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            ".",
            "..",
            "..x",
            "a..b",
            "__consumer_offsets",
            "-a",
            "a-",
            "A",
            "a b",
            "a\n",
            "",
            "x" * 300,
            "k:0",
            "k:65536",
            "k..s:9092",
            "k:9092,",
            "[::1]:9092",
            "Image:1",
            "a/b:1",
            "metadata.labels",
            "status.podIP",
            "spec.containers",
            "limits.cpu",
            "-1",
            "1Gi",
            "250m",
            "1e3",
            "0.5",
            "ledger.settled_payments",
            "a.b.c",
            "orders",
            "orders_x",
            "orders.x",
        ]
    ),
)
MUTATIONS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("kafka.bootstrapServers", _NASTY_TEXT),
    ("kafka.securityProtocol", st.sampled_from(["PLAINTEXT", "SSL", "SASL_SSL", "TLS"])),
    ("kafka.secretRef", st.sampled_from([{"name": "creds"}, {"name": "Creds"}])),
    ("kafka.saslMechanism", st.sampled_from(["PLAIN", "SCRAM-SHA-512", "GSSAPI"])),
    ("topic", _NASTY_TEXT),
    ("groupId", _NASTY_TEXT),
    ("failure.deadLetterTopic", _NASTY_TEXT),
    ("failure.policy", st.sampled_from(["deadLetter", "pause", "exit"])),
    ("drain.launcher", st.sampled_from(["job", "sparkApplication", "SparkApplication", "spark", ""])),
    ("drain.warmRuntime", st.sampled_from([True, False, "true", 1])),
    ("drain.warmRuntimeCooldownSeconds", st.sampled_from([-1, 0, 5, 86400, 86401, 1.5, "60"])),
    ("processing.postgres", st.just({"dsnSecretRef": {"name": "pg"}, "table": "ledger.settled_payments"})),
    ("processing.handler", _NASTY_TEXT),
    ("batch.timeoutMs", st.integers(-1, 700_000)),
    ("catchUpSLASeconds", st.integers(-1, 700_000)),
    ("scaling.pollIntervalSeconds", st.integers(0, 4000)),
    ("scaling.tolerance", st.sampled_from([0, 1, 1.0001, -0.01, 0.5])),
    ("scaling.minReplicas", st.integers(-1, 1001)),
    ("template.image", _NASTY_TEXT),
    (
        "template.resources",
        st.fixed_dictionaries(
            {
                "requests": st.dictionaries(
                    st.sampled_from(["cpu", "memory"]), st.one_of(st.integers(-3, 3), _NASTY_TEXT), max_size=2
                ),
                "limits": st.dictionaries(
                    st.sampled_from(["cpu", "memory"]), st.one_of(st.integers(-3, 3), _NASTY_TEXT), max_size=2
                ),
            }
        ),
    ),
    (
        "template.env",
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["A", "B"])},
                optional={
                    "valueFrom": st.one_of(
                        st.builds(
                            lambda n, k: {"secretKeyRef": {"name": n, "key": k}}, _NASTY_TEXT, _NASTY_TEXT
                        ),
                        st.builds(
                            lambda n, k: {"configMapKeyRef": {"name": n, "key": k}}, _NASTY_TEXT, _NASTY_TEXT
                        ),
                        st.builds(lambda p: {"fieldRef": {"fieldPath": p}}, _NASTY_TEXT),
                    )
                },
            ),
            max_size=2,
        ),
    ),
    ("processing.postgres.dsnSecretRef.key", _NASTY_TEXT),
]


def set_path(spec: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    *parents, leaf = dotted.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return out


@st.composite
def mutated_specs(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """(a valid spec with one field replaced, the dotted path replaced)."""
    spec = draw(valid_specs())
    path, values = draw(st.sampled_from(MUTATIONS))
    if path.startswith("processing.postgres.dsnSecretRef"):
        spec["processing"] = {"sink": "postgres", "postgres": {"dsnSecretRef": {"name": "pg"}}}
    return set_path(spec, path, draw(values)), path


def any_specs() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(valid_specs(), mutated_specs().map(lambda t: t[0]))
