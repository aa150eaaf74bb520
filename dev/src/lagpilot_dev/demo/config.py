"""What one demo run is: its profile, the names it gives what it creates, and the
BatchConsumerGroup it applies (pure: no I/O)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagpilot.model.crd import GROUP, PLURAL, VERSION
from lagpilot.model.spec import Drain
from lagpilot_dev.demo.traffic import PROFILES, VERSUS_PROFILES, Profile
from lagpilot_dev.paths import cache_dir

REPO = Path(__file__).resolve().parents[4]
CRD_FILE = REPO / "crds" / "batchconsumergroup.yaml"
CRD_NAME = f"{PLURAL}.{GROUP}"
PARTS = ("kafka", "kube", "postgres", "spark")
PARTS_WITHOUT_OPERATOR = ("kafka", "kube", "postgres")  # --no-operator: no drains, no Spark
HANDLER = "lagpilot_dev.demo.handler:process"
DEMO_LABEL = "lagpilot.io/demo"
PG_SECRET = "demo-pg"  # the Secret holding the PostgreSQL DSN (key "dsn")
MAX_RUNTIME_COOLDOWN_S = 86400  # spec.drain.warmRuntimeCooldownSeconds' maximum (the CRD)


def profile_for(name: str, cold_drains: bool, runtime_on_demand_s: int | None = None) -> Profile:
    """The named profile; --cold-drains turns its warm drain runtime off; --runtime-on-demand SECONDS
    runs it on demand (spec.drain.warmRuntimeCooldownSeconds, warmRuntime true): not both."""
    profile = PROFILES[name] if name in PROFILES else VERSUS_PROFILES[name]
    if cold_drains and runtime_on_demand_s is not None:
        raise ValueError("--cold-drains and --runtime-on-demand exclude each other")
    if cold_drains:
        return dataclasses.replace(profile, warm_runtime=False)
    if runtime_on_demand_s is not None:
        if not 0 <= runtime_on_demand_s <= MAX_RUNTIME_COOLDOWN_S:
            raise ValueError(
                f"--runtime-on-demand must be 0..{MAX_RUNTIME_COOLDOWN_S} seconds (the CRD's range)"
            )
        return dataclasses.replace(profile, warm_runtime=True, runtime_cooldown_s=int(runtime_on_demand_s))
    return profile


@dataclass(frozen=True)
class RunNames:
    """The names one run gives what it creates (a random suffix: runs never share a topic or table)."""

    run_id: str
    out: Path  # logs, plot, summary
    ns: str
    name: str  # the BatchConsumerGroup
    deployment: str  # the consumer Deployment the operator creates for it
    topic: str
    group_id: str
    table: str  # the sink table
    ledger_table: str  # one row per delivery, no key (demo.handler)

    @classmethod
    def new(cls, ns: str, out: str | None) -> RunNames:
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
        suffix = uuid.uuid4().hex[:6]
        name = "orders-demo"
        return cls(
            run_id=run_id,
            out=Path(out) if out else cache_dir() / "demo" / run_id,
            ns=ns,
            name=name,
            deployment=f"{name}-consumer",  # the operator's naming (docs/CONTRACTS.md)
            topic=f"demo-orders-{suffix}",
            group_id=f"orders-demo-{suffix}",
            table=f"demo_orders_{suffix}",
            ledger_table=f"demo_ledger_{suffix}",
        )


def manifest(
    names: RunNames, profile: Profile, bootstrap_servers: str, image: str | None = None
) -> dict[str, Any]:
    """The BatchConsumerGroup the demo applies (also written to <out>/bcg.yaml). ``image``: the
    consumer image its pods run, never pulled (the demo image loaded into the node; None only for
    --no-operator's bare consumer, which runs no pod)."""
    p = profile
    template: dict[str, Any] = {
        # the DSN reaches the pods only as a secretKeyRef (LAGPILOT_* names are the runtime's)
        "env": [
            {"name": "DEMO_POSTGRES_DSN", "valueFrom": {"secretKeyRef": {"name": PG_SECRET, "key": "dsn"}}}
        ],
    }
    if image is not None:
        template.update(image=image, imagePullPolicy="Never")
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": names.name, "namespace": names.ns},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap_servers},
            "topic": names.topic,
            "groupId": names.group_id,
            "batch": {"maxRecords": p.batch_max_records, "timeoutMs": p.batch_timeout_ms},
            "processing": {
                # the built-in PostgreSQL sink behind an artificial downstream cost (see demo.handler)
                "handler": HANDLER,
                "config": {
                    "recordDelayMs": str(p.record_delay_ms),
                    "batchDelayMs": str(p.batch_delay_ms),
                    "postgres.table": names.table,
                    "ledgerTable": names.ledger_table,
                },
            },
            "failure": {"maxRetries": 5, "backoffMs": 200, "policy": "deadLetter"},
            "scaling": {
                "minReplicas": 1,
                "maxReplicas": p.partitions,
                "tolerance": 0.1,
                "pollIntervalSeconds": p.poll_interval_s,
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0},
                    "scaleDown": {"stabilizationWindowSeconds": p.scale_down_window_s},
                },
            },
            "catchUpSLASeconds": p.sla_s,
            "drain": {
                "enabled": True,
                "splitFactor": p.split_factor,
                "maxTasks": p.max_tasks,
                "minBacklogRecords": p.min_backlog_records,
                "warmRuntime": p.warm_runtime,
                **({"warmRuntimeCooldownSeconds": p.runtime_cooldown_s} if p.runtime_on_demand else {}),
            },
            "template": template,
        },
    }


def spec_settings(profile: Profile) -> dict[str, Any]:
    """The run's settings the simulator needs (what the manifest says); the runtime's mode and
    cooldown only for a run with the runtime on demand (the README demo's settings as before)."""
    p = profile
    out: dict[str, Any] = {
        "split_factor": p.split_factor,
        "max_tasks": p.max_tasks,
        "min_backlog_records": p.min_backlog_records,
        "poll_interval_s": p.poll_interval_s,
        "min_replicas": 1,
        "max_replicas": p.partitions,
        "scale_down_window_s": p.scale_down_window_s,
        "batch_timeout_s": p.batch_timeout_ms / 1000.0,
        # the manifest leaves spec.drain.busy at the CRD's default: the drains the operator runs
        "busy_drains": bool(Drain.model_fields["busy"].default),
    }
    if p.runtime_on_demand:
        out.update(warm_runtime="on-demand", runtime_cooldown_s=float(p.runtime_cooldown_s or 0))
    return out
