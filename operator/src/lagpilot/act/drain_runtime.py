"""The warm drain runtime, operator side (spec.drain.warmRuntime; docs/drain.md "Warm drain runtime").

A cold drain Job spends most of its start-up before it reads a record (driver JVM, SparkSession,
Kafka source planning, Python worker daemon). With `spec.drain.warmRuntime: true` the operator
keeps one Deployment `<cr>-drain-runtime` per CR whose pod runs `lagpilot drain --serve`: the drain
Job's image, command and environment (Secret material as secretKeyRef only) without the plan, plus
`LAGPILOT_DRAIN_RUNTIME_PORT` and `LAGPILOT_DRAIN_MAX_PARALLELISM` (= spec.drain.maxTasks). It serves
HTTP on that port (`GET /healthz` 200 once warm; `POST /drains` from the drain Job's process;
lagpilot_runtime.drain.runtime). The drain Job stays the unit the operator launches, observes,
retries and cancels: a Job launched while the runtime pod is Ready gets
`LAGPILOT_DRAIN_RUNTIME_URL=http://<podIP>:<port>` and hands its plan over (label
`lagpilot.io/drain-runtime: warm`); otherwise it drains by itself (`cold`).

Pure here: `runtime_wanted`, `runtime_port`, `build_runtime_deployment`, `config_hash`,
`runtime_url` (which pod, if any, serves the next attempt), `observation_of` (the decision step's
`RuntimeObservation`), `with_replicas` (the count the step decided, and the scale-up time),
`sync_action` (what to do with the Deployment this cycle). Thin I/O: `RuntimeManager`: `observe`
(get the Deployment, list its pods while it has replicas) in the cycle's observe phase, `sync`
(server-side apply / delete, reusing that read) from `drain.run_in_cycle`, `url` at each launch.

Replicas (`decide.runtime`, `StepDecision.runtime_replicas`): 1 all the time without
`spec.drain.warmRuntimeCooldownSeconds` (as before); with it, on demand: 0 or 1 as the step says
(a due drain scales it up, the cooldown after the last drain down; the Deployment stays
with 0 replicas). A scale-up from 0 (or the creation) writes the time in the annotation
`lagpilot.io/drain-runtime-scaled-up-at` (RFC 3339, in the same apply): the step's `scaled_up_at_s`,
which bounds how long a due drain's split waits for the runtime to be Ready.

Choices:
- port `30000 + crc32("<ns>/<name>") % 20000`: deterministic per CR; the dev pod runner runs every
  pod as a local process in one network namespace (pod IP 127.0.0.1), so two CRs must not share
  it (any port works on a real cluster). Declared as containerPort `drain-api`.
- strategy Recreate: never two runtime pods of one CR at once (same port on the dev runner; on a
  cluster one warm JVM is the point).
- the pod template carries `lagpilot.io/drain-runtime-config` (a hash of its labels and spec): a launch
  uses only a pod whose hash is the current spec's, so a runtime started from an older spec (other
  handler, image, Kafka settings) never runs a new attempt: the Job goes cold until the new pod
  is Ready.
- while an attempt runs (status.drain phase Running) the Deployment is neither patched nor deleted:
  a warm attempt must not lose its runtime to a spec change or a scale-down; the change applies
  right after. A scale-up from 0 is applied (there is no pod to lose).
- when not wanted (warmRuntime false, drain disabled, launcher sparkApplication) it is deleted
  (foreground: gone only once its pod is, and only when the CR owns it); the CR's deletion removes
  it through its owner reference.

Who may send it a plan (issue 23, C1; docs/drain.md "Who may send the warm runtime a plan"):
- a per-CR key: the Secret `<cr>-drain-runtime-key` (32 random bytes, hex; immutable), created by
  the operator, owned by the CR, referenced (secretKeyRef) only by the runtime's container, after
  its Spark executor conf is built (executors never get it); never by the consumer or Job pods.
  Its fingerprint (`LAGPILOT_DRAIN_RUNTIME_KEY_ID`) is in the pod template, so a new key rolls
  the runtime. `RuntimeManager.key` reads it once per operator process (`get`; `create` if absent)
  and refuses a Secret the CR does not own.
- at each warm launch the operator signs the attempt's plan (`RuntimeManager.sign`,
  lagpilot_runtime.plan_auth); the Job carries the signature, not the key.
- the URL only from a pod owned by this CR's runtime Deployment (pod → ReplicaSet → Deployment →
  CR uid: `owned_pods`), never a look-alike whose labels match.
- a NetworkPolicy `<cr>-drain-runtime` (`build_network_policy`, owned by the CR, created before the
  Deployment): ingress to the runtime's pods only from this CR's drain pods in the namespace, on
  the runtime port (and, with Spark's k8s backend, from this CR's executors on any port: the
  runtime is their driver).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import hashlib
import json
import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lagpilot import __version__
from lagpilot.decide.pod_health import not_ready_detail
from lagpilot.decide.runtime import MODE_ON_DEMAND, RuntimeObservation, mode_of
from lagpilot.decide.status import format_time, parse_time
from lagpilot.spec import GroupSpec
from lagpilot_runtime import plan_auth
from lagpilot_runtime.drain.plan import DrainPlan

from .deployment import FIELD_MANAGER, label_value, owner_reference
from .drain_manifests import DRAIN_LABEL, DrainSettings, consumer_env, drain_pod_spec
from .drain_part_key import PartKeys, part_key_ref
from .key_secret import KEY_FIELD, CrKeys, KeyKind, controller_of, owned_by
from .spark_rpc_key import SparkRpcKeys

log = logging.getLogger(__name__)

COMPONENT = "drain-runtime"
APP_NAME = "lagpilot-drain-runtime"
RUNTIME_OF_LABEL = "lagpilot.io/drain-runtime-of"  # the selector: which CR's runtime
CONFIG_ANNOTATION = "lagpilot.io/drain-runtime-config"
SCALED_UP_ANNOTATION = "lagpilot.io/drain-runtime-scaled-up-at"  # RFC 3339: its last scale-up from 0
PORT_NAME = "drain-api"
PORT_ENV = "LAGPILOT_DRAIN_RUNTIME_PORT"
PARALLELISM_ENV = "LAGPILOT_DRAIN_MAX_PARALLELISM"
PORT_BASE, PORT_SPAN = 30000, 20000
# JVM + SparkSession + warm-up take 10-70 s on 2 busy cores: liveness only after a generous delay
LIVENESS = {"initialDelaySeconds": 180, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6}
READINESS = {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3}


# ---- pure ----------------------------------------------------------------------------------------


def runtime_wanted(spec: GroupSpec) -> bool:
    """A runtime exists only where a drain Job could use it."""
    d = spec.drain
    return d.warm_runtime and d.enabled and d.launcher == "job"


def runtime_name(cr_name: str) -> str:
    """`<cr>-drain-runtime` (CR names are at most 52 characters: within a Deployment's 253)."""
    return f"{cr_name}-drain-runtime"


def runtime_port(namespace: str, name: str) -> int:
    """The runtime's HTTP port, deterministic per CR (distinct CRs on one dev host need distinct ports)."""
    return PORT_BASE + zlib.crc32(f"{namespace}/{name}".encode()) % PORT_SPAN


def key_secret_name(cr_name: str) -> str:
    """`<cr>-drain-runtime-key`: the Secret holding the CR's plan-signing key."""
    return f"{cr_name}-drain-runtime-key"


def selector_labels(cr_name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP_NAME, RUNTIME_OF_LABEL: label_value(cr_name)}


def selector(cr_name: str) -> str:
    """`selector_labels` as a label selector (the runtime's pods)."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(cr_name).items())


def _labels(cr_name: str, version: str) -> dict[str, str]:
    return {
        **selector_labels(cr_name),
        "app.kubernetes.io/instance": label_value(cr_name),
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/part-of": "lagpilot",
        "app.kubernetes.io/managed-by": "lagpilot",
        "app.kubernetes.io/version": label_value(version),
    }


def config_hash(labels: Mapping[str, str], pod_spec: Mapping[str, Any]) -> str:
    """A short, stable digest of a pod template (what the runtime runs with, and its labels)."""
    text = json.dumps({"labels": labels, "spec": pod_spec}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_runtime_deployment(
    cr_name: str,
    namespace: str,
    cr_uid: str,
    spec: GroupSpec,
    settings: DrainSettings | None = None,
    version: str = __version__,
    key_id: str = "",
) -> dict[str, Any]:
    """The runtime's Deployment: 1 replica, owned by the CR, the drain Job's pod pieces
    (drain_manifests.drain_pod_spec, consumer_env) with `lagpilot drain --serve`, no plan; the
    CR's key (secretKeyRef), its fingerprint `key_id` and the CR uid added after the Spark conf
    was built from the env (so executors get neither)."""
    settings = settings or DrainSettings()
    port = runtime_port(namespace, cr_name)
    # the Spark side is sized for the most tasks a drain may run (drain_runtime's local[N] / executors)
    plan = DrainPlan(
        drain_id="runtime",
        topic=spec.topic,
        group_id=spec.group_id,
        sub_ranges=(),
        batch_max_records=spec.batch.max_records,
        parallelism=spec.drain.max_tasks,
    )
    env = [
        *consumer_env(spec),
        {"name": "LAGPILOT_SPARK_JARS", "value": settings.spark_jars},
        {"name": PORT_ENV, "value": str(port)},
        {"name": PARALLELISM_ENV, "value": str(spec.drain.max_tasks)},
    ]
    pod_spec = drain_pod_spec(cr_name, namespace, spec, plan, settings, env, ["lagpilot", "drain", "--serve"])
    pod_spec["restartPolicy"] = "Always"
    container = pod_spec["containers"][0]
    container["env"] = container["env"] + [
        {
            "name": plan_auth.KEY_ENV,
            "valueFrom": {"secretKeyRef": {"name": key_secret_name(cr_name), "key": KEY_FIELD}},
        },
        {"name": plan_auth.CR_UID_ENV, "value": cr_uid},
        *([{"name": plan_auth.KEY_ID_ENV, "value": key_id}] if key_id else []),
        # a busy drain's next parts are verified with the CR's part key (optional: a runtime runs
        # the plans of drains that are not busy without it)
        part_key_ref(cr_name, optional=True),
    ]
    container["ports"] = [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}]
    probe = {"httpGet": {"path": "/healthz", "port": PORT_NAME}}
    container["readinessProbe"] = {**probe, **READINESS}
    container["livenessProbe"] = {**probe, **LIVENESS}
    labels = _labels(cr_name, version)
    digest = config_hash(labels, pod_spec)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": runtime_name(cr_name),
            "namespace": namespace,
            "labels": labels,
            "annotations": {CONFIG_ANNOTATION: digest},
            "ownerReferences": [owner_reference(cr_name, cr_uid)],
        },
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": selector_labels(cr_name)},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels, "annotations": {CONFIG_ANNOTATION: digest}},
                "spec": pod_spec,
            },
        },
    }


# the CR's plan-signing key; its Secret carries the runtime's labels (a new key rolls the runtime)
RUNTIME_KEY = KeyKind(
    "drain runtime key",
    key_secret_name,
    COMPONENT,
    plan_auth.new_key,
    plan_auth.parse_key,
    extra_labels=selector_labels,
)


def build_network_policy(
    cr_name: str,
    namespace: str,
    cr_uid: str,
    settings: DrainSettings | None = None,
    version: str = __version__,
) -> dict[str, Any]:
    """Ingress to the CR's runtime pods only from the CR's drain pods (label
    `app.kubernetes.io/name: lagpilot-drain` + `lagpilot.io/drain: <cr>`, same namespace) on the
    runtime port; with Spark's k8s backend (`settings.spark_master`) also from the CR's executors
    (`spark-role: executor` + `lagpilot.io/drain: <cr>`) on any port (they connect back to their
    driver: the runtime). Everything else is dropped where the network plugin enforces policies."""
    settings = settings or DrainSettings()
    rules: list[dict[str, Any]] = [
        {
            "from": [
                {
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "lagpilot-drain",
                            DRAIN_LABEL: label_value(cr_name),
                        }
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": runtime_port(namespace, cr_name)}],
        }
    ]
    if settings.spark_master:
        rules.append(
            {
                "from": [
                    {
                        "podSelector": {
                            "matchLabels": {DRAIN_LABEL: label_value(cr_name), "spark-role": "executor"}
                        }
                    }
                ]
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": runtime_name(cr_name),
            "namespace": namespace,
            "labels": _labels(cr_name, version),
            "ownerReferences": [owner_reference(cr_name, cr_uid)],
        },
        "spec": {
            "podSelector": {"matchLabels": selector_labels(cr_name)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }


def owned_pods(
    pods: Sequence[Mapping[str, Any]],
    replicasets: Sequence[Mapping[str, Any]],
    deployment: Mapping[str, Any] | None,
    cr_uid: str,
) -> list[Mapping[str, Any]]:
    """The pods of this CR's runtime: controlled by a ReplicaSet that is controlled by the runtime
    Deployment (by uid) that is controlled by the CR (by uid). A pod whose labels merely match
    (anyone who may create pods in the namespace can copy them) is not one of them (pure)."""
    if deployment is None or not owned_by(deployment, cr_uid):
        return []
    dep_uid = ((deployment.get("metadata") or {}).get("uid")) or ""
    rs_uids = {
        str((rs.get("metadata") or {}).get("uid"))
        for rs in replicasets
        if owned_by(rs, dep_uid) and (controller_of(rs) or {}).get("kind") == "Deployment"
    }
    out = []
    for pod in pods:
        ref = controller_of(pod)
        if ref is not None and ref.get("kind") == "ReplicaSet" and ref.get("uid") in rs_uids:
            out.append(pod)
    return out


def manifest_hash(manifest: Mapping[str, Any] | None) -> str | None:
    """The config annotation of a runtime Deployment (built or read back); None if absent."""
    if not manifest:
        return None
    return ((manifest.get("metadata") or {}).get("annotations") or {}).get(CONFIG_ANNOTATION)


def _ready(pod: Mapping[str, Any]) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []
    )


def runtime_url(pods: Sequence[Mapping[str, Any]], port: int, config: str | None = None) -> str | None:
    """The first Ready runtime pod with a podIP (not being deleted; with `config`, only one running
    that config) → `http://<podIP>:<port>`; None when there is none (the Job drains cold)."""
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name") or "")):
        meta = pod.get("metadata") or {}
        ip = str((pod.get("status") or {}).get("podIP") or "")
        if not ip or meta.get("deletionTimestamp") or not _ready(pod):
            continue
        if config is not None and (meta.get("annotations") or {}).get(CONFIG_ANNOTATION) != config:
            continue
        host = f"[{ip}]" if ":" in ip else ip
        return f"http://{host}:{port}"
    return None


def replicas_of(manifest: Mapping[str, Any] | None) -> int:
    """spec.replicas of a runtime Deployment (0: absent, or being deleted)."""
    if not manifest or (manifest.get("metadata") or {}).get("deletionTimestamp"):
        return 0
    return int((manifest.get("spec") or {}).get("replicas") or 0)


def ready_replicas_of(manifest: Mapping[str, Any] | None) -> int:
    """status.readyReplicas of a runtime Deployment as read (0: absent or none ready)."""
    return int(((manifest or {}).get("status") or {}).get("readyReplicas") or 0)


def scaled_up_at(manifest: Mapping[str, Any] | None) -> float | None:
    """The Deployment's last scale-up from 0 (its annotation); None when absent or unreadable."""
    raw = ((manifest or {}).get("metadata") or {}).get("annotations") or {}
    try:
        return parse_time(raw.get(SCALED_UP_ANNOTATION))
    except ValueError:
        return None


def observation_of(
    existing: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], port: int, config: str | None
) -> RuntimeObservation:
    """What the decision step sees of the runtime: the Deployment's replicas, whether a pod of the
    current config is Ready (the notion `runtime_url` uses for a launch), the last scale-up, and
    while none is Ready what its pods say keeps them from it (decide.pod_health.not_ready_detail:
    an OOM kill at the memory limit, CrashLoopBackOff, ...), for the CR's Ready condition."""
    ready = runtime_url(pods, port, config) is not None
    return RuntimeObservation(
        replicas=replicas_of(existing),
        ready=ready,
        scaled_up_at_s=scaled_up_at(existing),
        problem="" if ready else not_ready_detail(pods),
    )


def with_replicas(
    desired: Mapping[str, Any], replicas: int, existing: Mapping[str, Any] | None, now: float
) -> dict[str, Any]:
    """The desired Deployment with the decided replica count; a scale-up from 0 (or the creation)
    stamps `SCALED_UP_ANNOTATION` with `now`, otherwise the existing stamp is kept (a server-side
    apply that left it out would remove it). A running Deployment without a readable stamp (made
    by an operator before the stamp existed, or scaled up by hand) is stamped now: the step bounds
    how long a due drain waits for the runtime from that time, never from "unknown"."""
    out = copy.deepcopy(dict(desired))
    out["spec"]["replicas"] = replicas
    kept = (((existing or {}).get("metadata") or {}).get("annotations") or {}).get(SCALED_UP_ANNOTATION)
    fresh = replicas > 0 and (replicas_of(existing) == 0 or scaled_up_at(existing) is None)
    stamp = format_time(now) if fresh else kept
    if stamp:
        out["metadata"]["annotations"][SCALED_UP_ANNOTATION] = stamp
    return out


class Sync(enum.Enum):
    NONE = "none"  # as wanted (or already going away)
    APPLY = "apply"  # create it, or bring it to the current spec
    DELETE = "delete"
    DEFER = "defer"  # would change or delete it, but a drain attempt is running


def sync_action(
    desired: Mapping[str, Any] | None, existing: Mapping[str, Any] | None, attempt_running: bool
) -> Sync:
    """What to do with the runtime Deployment this cycle (pure)."""
    if existing is not None and (existing.get("metadata") or {}).get("deletionTimestamp"):
        return Sync.NONE  # foreground deletion under way: wait for it to be gone
    if desired is None:
        if existing is None:
            return Sync.NONE
        return Sync.DEFER if attempt_running else Sync.DELETE
    if existing is None:
        return Sync.APPLY
    if manifest_hash(existing) == manifest_hash(desired) and _same_shell(desired, existing):
        return Sync.NONE
    if replicas_of(existing) == 0 and desired["spec"]["replicas"] > 0:
        return Sync.APPLY  # a scale-up from 0: there is no runtime pod an attempt could be using
    return Sync.DEFER if attempt_running else Sync.APPLY


def _same_shell(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """Replicas, scale-up stamp and owner as wanted (someone scaled it by hand, or it was adopted
    from another CR uid)."""
    owners = [
        (o.get("uid"), o.get("controller"))
        for o in (existing.get("metadata") or {}).get("ownerReferences") or []
    ]
    want = [(o["uid"], o["controller"]) for o in desired["metadata"]["ownerReferences"]]
    stamps = [
        ((m.get("metadata") or {}).get("annotations") or {}).get(SCALED_UP_ANNOTATION)
        for m in (desired, existing)
    ]
    return (
        (existing.get("spec") or {}).get("replicas") == desired["spec"]["replicas"]
        and owners == want
        and stamps[0] == stamps[1]
    )


# ---- I/O -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SyncResult:
    action: Sync
    name: str
    error: str = ""


@dataclasses.dataclass(frozen=True)
class RuntimeSeen:
    """One cycle's read of a CR's runtime (`RuntimeManager.observe`): the Deployment as read (None:
    absent) and what the decision step sees of it. `sync` reuses the read (no second GET)."""

    existing: dict[str, Any] | None
    observation: RuntimeObservation


class RuntimeManager:
    """Applies/deletes one CR's runtime Deployment and finds its Ready pod. One per operator."""

    def __init__(self, api_client: Any, settings: DrainSettings | None = None) -> None:
        from kubernetes import client

        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self._sanitize: Callable[[object], dict[str, Any]] = api_client.sanitize_for_serialization
        self.settings = settings or DrainSettings.from_env()
        # CRs without a runtime Deployment, as last seen: a CR that never wanted one costs one GET per
        # operator start, not one per cycle (thread-safe enough: set add/discard under the GIL)
        self._absent: set[str] = set()
        self._keys = CrKeys(RUNTIME_KEY, self.core, self._sanitize)  # the CRs' plan-signing keys
        # the CRs' Spark RPC keys (k8s master: the runtime's and the drain Jobs' executors; H4)
        self.rpc_keys = SparkRpcKeys(self.core, self._sanitize)
        self._part_keys = PartKeys(
            self.core, self._sanitize
        )  # the CRs' busy drains' part keys (drain_part_key.py)
        self._policies: set[tuple[str, str, str]] = set()  # NetworkPolicies known to be the CR's

    def desired(
        self, namespace: str, name: str, uid: str, spec: GroupSpec, version: str
    ) -> dict[str, Any] | None:
        """The runtime Deployment the spec wants (None: none). Reads (or creates) the CR's key on
        first use: raises when it cannot (the caller's error path: no runtime change, cold drains)."""
        if not runtime_wanted(spec):
            return None
        key = self.key(namespace, name, uid)
        if self.settings.spark_master:  # the runtime's pod mounts it (drain_manifests.spark_rpc_key_conf)
            self.rpc_keys.key(namespace, name, uid)
        return build_runtime_deployment(
            name, namespace, uid, spec, self.settings, version, plan_auth.key_id(key)
        )

    def key(self, namespace: str, name: str, uid: str) -> bytes:
        """The CR's plan-signing key (`key_secret.CrKeys`: read, or created when absent, once per
        operator process; a Secret the CR does not own, or without a valid key, raises)."""
        return self._keys.key(namespace, name, uid)

    def sign(
        self,
        namespace: str,
        name: str,
        uid: str,
        plan_text: str,
        drain_id: str,
        attempt: int,
        now: float | None = None,
    ) -> plan_auth.PlanAuth:
        """The operator's signature of one warm attempt's plan (valid plan_auth.PLAN_TTL_S)."""
        t = time.time() if now is None else now
        return plan_auth.sign(
            self.key(namespace, name, uid), plan_text, uid, drain_id, attempt, t + plan_auth.PLAN_TTL_S
        )

    def ensure_policy(self, namespace: str, name: str, uid: str) -> None:
        """Create the CR's NetworkPolicy unless it exists as the CR's (once per operator process).
        One left by an earlier CR of the same name (its garbage collection pending) is not
        counted: retried at the next apply."""
        cache = (namespace, name, uid)
        if cache in self._policies:
            return
        try:
            policy = build_network_policy(name, namespace, uid, self.settings)
            self.net.create_namespaced_network_policy(namespace, policy)  # type: ignore[arg-type]  # a dict body
        except Exception as err:
            if getattr(err, "status", None) != 409:
                raise
            if not owned_by(
                self._sanitize(self.net.read_namespaced_network_policy(runtime_name(name), namespace)), uid
            ):
                raise RuntimeError(
                    f"NetworkPolicy {runtime_name(name)} exists and is not this BatchConsumerGroup's"
                ) from err
        self._policies.add(cache)

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._sanitize(self.apps.read_namespaced_deployment(name, namespace))
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return None
            raise

    def _pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return (
            self._sanitize(self.core.list_namespaced_pod(namespace, label_selector=selector(name))).get(
                "items"
            )
            or []
        )

    def observe(
        self, namespace: str, name: str, uid: str, spec: GroupSpec, version: str = __version__
    ) -> RuntimeSeen | None:
        """The cycle's read of the runtime: a GET of the Deployment, and a LIST of its pods while it
        has replicas, only on demand (``warmRuntimeCooldownSeconds``: is it Ready?) or while fewer
        are ready than it asks for (what they say, e.g. OOMKilled, goes to the CR's Ready
        condition). None (no call at all) for a CR without a runtime, and on an API error
        (logged; `sync` then reads the Deployment itself, the step sees no runtime)."""
        if not runtime_wanted(spec):
            return None
        try:
            desired = self.desired(namespace, name, uid, spec, version)
            existing = self._get(namespace, runtime_name(name))
            # the pods only where the step reads them (on demand: is it Ready?), or where one is not
            # ready (why, for the Ready condition); always-mode plans as before
            on_demand = mode_of(spec) == MODE_ON_DEMAND
            wanted = replicas_of(existing)
            read = wanted > 0 and (on_demand or ready_replicas_of(existing) < wanted)
            pods = self._pods(namespace, name) if read else []
        except Exception as err:  # noqa: BLE001 - best effort: the step then plans as without a runtime
            log.warning(
                "observing the drain runtime failed",
                extra={
                    "group": f"{namespace}/{name}",
                    "error": f"{type(err).__name__}: HTTP {getattr(err, 'status', '')}",
                },
            )
            return None
        return RuntimeSeen(
            existing, observation_of(existing, pods, runtime_port(namespace, name), manifest_hash(desired))
        )

    def sync(
        self,
        namespace: str,
        name: str,
        uid: str,
        spec: GroupSpec,
        attempt_running: bool,
        version: str = __version__,
        emit: Callable[[str, str, str], None] | None = None,
        replicas: int | None = 1,
        seen: RuntimeSeen | None = None,
        now: float | None = None,
    ) -> SyncResult:
        """Bring `<cr>-drain-runtime` to what the spec and the step want: `replicas` is the step's
        `runtime_replicas` (None: no runtime, deleted), `seen` this cycle's `observe` (no second
        GET), `now` the scale-up stamp's time. Never raises: a failure is logged and returned (the
        drain then simply launches cold). Steps: ``_planned_sync`` (desired, existing, the action)
        -> ``_apply`` | ``_delete`` | deferred -> whether the runtime is known absent."""
        key, dname = f"{namespace}/{name}", runtime_name(name)
        if (replicas is None or not runtime_wanted(spec)) and key in self._absent:
            return SyncResult(Sync.NONE, dname)
        policy_error = ""
        try:
            desired, existing, action = self._planned_sync(
                namespace, name, uid, spec, attempt_running, version, replicas, seen, now
            )
            if action is Sync.APPLY:
                assert desired is not None
                policy_error = self._apply(namespace, name, uid, desired, existing, emit)
            elif action is Sync.DELETE:
                self._delete(namespace, name, emit)
            elif action is Sync.DEFER:
                log.info(
                    "drain runtime change deferred: a drain attempt is running",
                    extra={"group": key, "deployment": dname},
                )
            if desired is None and existing is None:
                self._absent.add(key)
            else:
                self._absent.discard(key)
            return SyncResult(action, dname, policy_error)
        except Exception as err:  # noqa: BLE001 - best effort: without a runtime drains start cold
            msg = f"{type(err).__name__}: HTTP {getattr(err, 'status', '')} {getattr(err, 'reason', '')}".strip()
            log.warning("drain runtime sync failed", extra={"group": key, "deployment": dname, "error": msg})
            self._absent.discard(key)
            return SyncResult(Sync.NONE, dname, msg)

    def _planned_sync(
        self,
        namespace: str,
        name: str,
        uid: str,
        spec: GroupSpec,
        attempt_running: bool,
        version: str,
        replicas: int | None,
        seen: RuntimeSeen | None,
        now: float | None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Sync]:
        """(desired, existing, action): the manifest at the step's replicas (None: no runtime), the
        Deployment as read, and what to do; a Deployment this CR does not own is never deleted."""
        dname = runtime_name(name)
        desired = self.desired(namespace, name, uid, spec, version) if replicas is not None else None
        existing = seen.existing if seen is not None else self._get(namespace, dname)
        if desired is not None:
            assert replicas is not None
            desired = with_replicas(desired, replicas, existing, time.time() if now is None else now)
        action = sync_action(desired, existing, attempt_running)
        if action is Sync.DELETE and not owned_by(existing, uid):
            log.warning(
                "drain runtime Deployment not owned by this BatchConsumerGroup: not deleted",
                extra={"group": f"{namespace}/{name}", "deployment": dname},
            )
            action = Sync.NONE
        return desired, existing, action

    def _apply(
        self,
        namespace: str,
        name: str,
        uid: str,
        desired: dict[str, Any],
        existing: dict[str, Any] | None,
        emit: Callable[[str, str, str], None] | None,
    ) -> str:
        """Create, update or scale the runtime (its NetworkPolicy and the part key first); returns
        the NetworkPolicy's error ("" when made)."""
        key, dname = f"{namespace}/{name}", runtime_name(name)
        policy_error = ""
        try:  # the policy first: the runtime never listens without it (where policies are enforced)
            self.ensure_policy(namespace, name, uid)
        except Exception as err:  # noqa: BLE001 - the signature still guards the runtime: applied anyway
            policy_error = f"NetworkPolicy: {type(err).__name__}: HTTP {getattr(err, 'status', '')}"
            log.warning(
                "drain runtime NetworkPolicy not created", extra={"group": key, "error": policy_error}
            )
        try:  # the busy drains' part key before the pod that reads it (its env ref is optional)
            self._part_keys.key(namespace, name, uid)
        except Exception as err:  # noqa: BLE001 - busy drains in this runtime then take no next part
            log.warning(
                "drain part key not made before the runtime",
                extra={"group": key, "error": f"{type(err).__name__}: HTTP {getattr(err, 'status', '')}"},
            )
        self.apps.patch_namespaced_deployment(
            dname,
            namespace,
            desired,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        verb = "created" if existing is None else "updated"
        before, after = replicas_of(existing), desired["spec"]["replicas"]
        if existing is not None and before != after and manifest_hash(existing) == manifest_hash(desired):
            verb = f"scaled {before}->{after}"
        log.info(
            "drain runtime applied",
            extra={
                "group": key,
                "deployment": dname,
                "verb": verb,
                "replicas": after,
                "port": runtime_port(namespace, name),
            },
        )
        if emit is not None:
            emit(
                "Normal",
                "DrainRuntimeApplied",
                f"{verb} Deployment {dname} (warm drain runtime, "
                f"{after} replica{'' if after == 1 else 's'}, port "
                f"{runtime_port(namespace, name)})",
            )
        return policy_error

    def _delete(self, namespace: str, name: str, emit: Callable[[str, str, str], None] | None) -> None:
        dname = runtime_name(name)
        self.apps.delete_namespaced_deployment(dname, namespace, propagation_policy="Foreground")
        log.info("drain runtime deleted", extra={"group": f"{namespace}/{name}", "deployment": dname})
        if emit is not None:
            emit(
                "Normal",
                "DrainRuntimeDeleted",
                f"deleted Deployment {dname} (spec.drain.warmRuntime off or drains disabled)",
            )

    def url(
        self, namespace: str, name: str, uid: str, spec: GroupSpec, version: str = __version__
    ) -> str | None:
        """The URL a Job launched now should hand its plan to; None → cold (also on any API error, or
        when the CR's key cannot be had). Only a pod of the CR's own runtime Deployment (`owned_pods`)."""
        if not runtime_wanted(spec):
            return None
        try:
            desired = self.desired(namespace, name, uid, spec, version)
            pods = self._pods(namespace, name)
            deployment = self._get(namespace, runtime_name(name)) if pods else None
            replicasets = self._replicasets(namespace, name) if deployment is not None else []
        except Exception as err:  # noqa: BLE001
            log.warning(
                "reading the drain runtime failed: launching cold",
                extra={
                    "group": f"{namespace}/{name}",
                    "error": f"{type(err).__name__}: HTTP {getattr(err, 'status', '')}",
                },
            )
            return None
        mine = owned_pods(pods, replicasets, deployment, uid)
        if len(mine) < len(pods):
            log.warning(
                "pods that look like the drain runtime but are not its own: ignored",
                extra={
                    "group": f"{namespace}/{name}",
                    "pods": sorted(str((p.get("metadata") or {}).get("name")) for p in pods if p not in mine),
                },
            )
        return runtime_url(mine, runtime_port(namespace, name), manifest_hash(desired))

    def _replicasets(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return (
            self._sanitize(
                self.apps.list_namespaced_replica_set(namespace, label_selector=selector(name))
            ).get("items")
            or []
        )
