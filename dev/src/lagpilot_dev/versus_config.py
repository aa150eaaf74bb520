"""What `bench/versus.py` runs against lagpilot: a plain consumer Deployment scaled by a KEDA
ScaledObject (pure: builds the objects and reads the results, no I/O).

The Deployment is the one the operator renders for the demo's BatchConsumerGroup (same command,
handler, batch settings, sink and ledger: `lagpilot.act.deployment.build_deployment` on the demo's
manifest) without what only the operator adds: no owner reference, no CR uid, no hand-off key (there
is no drain). The ScaledObject uses KEDA's `kafka` trigger on the same topic and group, with the same
`minReplicaCount`/`maxReplicaCount` as the CR's `minReplicas`/`maxReplicas`; everything else is
KEDA's default unless a variant sets it (`KedaVariant`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lagpilot.act.deployment import build_deployment
from lagpilot.decide.keda import KedaConfig
from lagpilot.spec import parse_spec
from lagpilot_dev.demo.config import RunNames, manifest
from lagpilot_dev.demo.traffic import Profile

# the partition options of KEDA's Kafka scaler (trigger metadata names) -> KedaConfig fields
OPTIONS = {
    "limitToPartitionsWithLag": "limit_to_partitions_with_lag",
    "ensureEvenDistributionOfPartitions": "ensure_even_distribution_of_partitions",
    "excludePersistentLag": "exclude_persistent_lag",
}
# the HPA's documented defaults (KEDA leaves `advanced.horizontalPodAutoscalerConfig.behavior` unset)
HPA_SCALE_DOWN_WINDOW_S = 300


@dataclass(frozen=True)
class KedaVariant:
    """One KEDA configuration. Unset fields are KEDA's and the HPA's defaults."""

    name: str = "keda-default"
    lag_threshold: int = 10
    activation_lag_threshold: int = 0
    polling_interval_s: int = 30
    cooldown_s: int = 300
    scale_down_window_s: int | None = None  # None: no behavior block (the HPA's 300 s)
    options: tuple[str, ...] = ()  # names from OPTIONS, set to "true"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown Kafka scaler option(s) {unknown}; known: {sorted(OPTIONS)}")
        if self.lag_threshold <= 0:
            raise ValueError(f"lagThreshold must be > 0, got {self.lag_threshold}")
        self.model(1, 1)  # the model refuses the option pairs KEDA refuses, with KEDA's words

    @classmethod
    def parse(cls, text: str) -> KedaVariant:
        """``name:lagThreshold=100,scaleDown=60,pollingInterval=15,limitToPartitionsWithLag`` (the CLI's form)."""
        name, _, rest = text.partition(":")
        kw: dict[str, Any] = {"name": name.strip() or "keda"}
        opts: list[str] = []
        keys = {
            "lagThreshold": "lag_threshold",
            "activationLagThreshold": "activation_lag_threshold",
            "pollingInterval": "polling_interval_s",
            "cooldownPeriod": "cooldown_s",
            "scaleDown": "scale_down_window_s",
        }
        for item in (x.strip() for x in rest.split(",") if x.strip()):
            k, eq, v = item.partition("=")
            if not eq:
                opts.append(k)
            elif k in keys:
                kw[keys[k]] = int(v)
            else:
                raise ValueError(
                    f"unknown KEDA setting {k!r} in {text!r}; known: {sorted(keys)} and {sorted(OPTIONS)}"
                )
        return cls(**kw, options=tuple(opts))

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> KedaVariant:
        """The inverse of :meth:`describe` (versus.json's ``variants``); an explicit 300 s scale-down
        window and none (the HPA's 300 s) are the same to the HPA and to the model."""
        fields = (
            "name",
            "lag_threshold",
            "activation_lag_threshold",
            "polling_interval_s",
            "cooldown_s",
            "scale_down_window_s",
        )
        return cls(**{k: d[k] for k in fields if k in d}, options=tuple(d.get("options") or ()))

    def model(self, min_replicas: int, max_replicas: int) -> KedaConfig:
        """The same configuration for lagpilot.decide.keda (the model checked against the run)."""
        return KedaConfig(
            lag_threshold=self.lag_threshold,
            activation_lag_threshold=self.activation_lag_threshold,
            polling_interval_s=float(self.polling_interval_s),
            cooldown_s=float(self.cooldown_s),
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            down_window_s=float(
                HPA_SCALE_DOWN_WINDOW_S if self.scale_down_window_s is None else self.scale_down_window_s
            ),
            **{OPTIONS[o]: True for o in self.options},
        )

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = list(self.options)
        d["scale_down_window_s"] = (
            HPA_SCALE_DOWN_WINDOW_S if self.scale_down_window_s is None else self.scale_down_window_s
        )
        return d


def consumer_deployment(
    names: RunNames, profile: Profile, bootstrap_servers: str, image: str | None = None
) -> dict[str, Any]:
    """The demo's consumer Deployment as the operator renders it, standing alone (1 replica to start);
    ``image``: the demo image loaded into the real node (the CR's, `imagePullPolicy: Never`)."""
    spec = parse_spec(manifest(names, profile, bootstrap_servers, image)["spec"])
    dep = build_deployment(names.name, names.ns, "", spec, 1)
    dep["metadata"].pop("ownerReferences", None)
    dep["metadata"]["labels"]["lagpilot.io/versus"] = "keda"
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert not any(e["name"] in ("LAGPILOT_OWNER_UID", "LAGPILOT_HANDOFF_KEY") for e in env)
    return dep


def scaled_object(
    names: RunNames, profile: Profile, bootstrap_servers: str, v: KedaVariant
) -> dict[str, Any]:
    """The ScaledObject: KEDA's `kafka` trigger on the run's topic and group."""
    m = manifest(names, profile, bootstrap_servers)["spec"]["scaling"]
    meta: dict[str, str] = {
        "bootstrapServers": bootstrap_servers,
        "consumerGroup": names.group_id,
        "topic": names.topic,
        "lagThreshold": str(v.lag_threshold),
        "activationLagThreshold": str(v.activation_lag_threshold),
        # the consumer starts from the earliest offset (lagpilot's runtime: auto.offset.reset=earliest),
        # so a partition without a committed offset lags by its whole log, as KEDA's option says
        "offsetResetPolicy": "earliest",
    }
    for o in v.options:
        meta[o] = "true"
    spec: dict[str, Any] = {
        "scaleTargetRef": {"name": f"{names.name}-consumer"},
        "pollingInterval": v.polling_interval_s,
        "cooldownPeriod": v.cooldown_s,
        "minReplicaCount": int(m["minReplicas"]),
        "maxReplicaCount": int(m["maxReplicas"]),
        "triggers": [{"type": "kafka", "metadata": meta}],
    }
    if v.scale_down_window_s is not None:
        spec["advanced"] = {
            "horizontalPodAutoscalerConfig": {
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": v.scale_down_window_s}}
            }
        }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": names.name, "namespace": names.ns},
        "spec": spec,
    }


# ---- the results ---------------------------------------------------------------------------------
FIGURES = ("within_sla_fraction", "p99_s", "replica_minutes", "drain_task_minutes", "scale_events")


def figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The figures both sides are measured by, from one run's demo summary."""
    lat = summary.get("latency") or {}
    led = summary.get("ledger") or {}
    return {
        "within_sla_fraction": lat.get("within_sla_fraction"),
        "p99_s": lat.get("p99_s"),
        "replica_minutes": summary.get("replica_minutes"),
        "drain_task_minutes": summary.get("drain_task_minutes"),
        "scale_events": sum(1 for e in summary.get("scale_events") or [] if e.get("cause") == "scaling"),
        "max_replicas": summary.get("max_replicas"),
        "exactly_once": bool(summary.get("ok")) and led.get("lost") == 0 and led.get("duplicated") == 0,
        "produced": summary.get("produced"),
        "lost": led.get("lost"),
        "duplicated": led.get("duplicated"),
    }


@dataclass
class Round:
    """One round: every variant on the same trace, in the order run."""

    index: int
    order: list[str]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> figures (+ paths)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def medians(rounds: Sequence[Round], base: str = "lagpilot") -> dict[str, Any]:
    """Per variant: the median of each figure over the rounds, and the median of the per-round ratios
    variant / base (the same round's lagpilot run: same machine load, same minute)."""
    names = sorted({v for r in rounds for v in r.results})
    out: dict[str, Any] = {}
    for v in names:
        per = [r.results[v] for r in rounds if v in r.results]
        med = {}
        for k in FIGURES:
            xs = [float(p[k]) for p in per if p.get(k) is not None]
            med[k] = round(statistics.median(xs), 4) if xs else None
        ratios = {}
        for k in ("replica_minutes", "p99_s"):
            rs = [
                x
                for r in rounds
                if v in r.results and base in r.results
                if (x := _ratio(r.results[v].get(k), r.results[base].get(k))) is not None
            ]
            ratios[f"{k}_vs_{base}"] = round(statistics.median(rs), 3) if rs else None
        diffs = [
            r.results[v]["within_sla_fraction"] - r.results[base]["within_sla_fraction"]
            for r in rounds
            if v in r.results
            and base in r.results
            and r.results[v].get("within_sla_fraction") is not None
            and r.results[base].get("within_sla_fraction") is not None
        ]
        ratios[f"within_sla_points_vs_{base}"] = round(100 * statistics.median(diffs), 2) if diffs else None
        out[v] = {
            "rounds": len(per),
            "median": med,
            "per_round_vs_base": ratios,
            "exactly_once_all_rounds": all(p.get("exactly_once") for p in per),
        }
    return out


def round_order(variants: Sequence[str], index: int) -> list[str]:
    """Which runs first alternates: round 0 as given, round 1 reversed, and so on."""
    return list(variants) if index % 2 == 0 else list(reversed(variants))
