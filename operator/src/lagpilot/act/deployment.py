"""Pure manifest builder for the consumer Deployment of one BatchConsumerGroup.

No API calls here: `build_deployment` turns (CR identity, parsed spec, replica count) into the dict
the handlers server-side apply with field manager `lagpilot`. Tested without a cluster.

Choices worth knowing:
- Secret material (SASL credentials, TLS keys, the PostgreSQL DSN) reaches the pod only as
  `secretKeyRef` env entries; the operator never copies a secret value into the manifest.
- `LAGPILOT_POD_NAME` comes from the downward API: the runtime names its Kafka clients and logs
  with it (not `group.instance.id`: a static member that stops stalls the group's rebalance until
  its session times out; docs/consumer.md).
- Rolling updates use maxSurge 0: a surge pod would be a consumer beyond the partition count, which
  only triggers an extra rebalance and then idles.
- Restricted Pod Security profile: non-root, no privilege escalation, all capabilities dropped,
  RuntimeDefault seccomp, read-only root filesystem (an emptyDir at /tmp for scratch files).
- terminationGracePeriodSeconds leaves room for the batch in flight to finish and commit.
- `app.kubernetes.io/version` (the operator's version) is on the Deployment, not in its pod
  template: an operator upgrade re-applies an identical template and rolls nothing; pods restart
  when what they run changes (the image, the env...). The first upgrade to this rule removes the
  label from the template once (one roll).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from lagpilot import __version__
from lagpilot.model.crd import GROUP, KIND, VERSION
from lagpilot.spec import GroupSpec

API_VERSION = f"{GROUP}/{VERSION}"
FIELD_MANAGER = "lagpilot"
CONTAINER_NAME = "consumer"
HTTP_PORT = 8080
GROUP_LABEL = "lagpilot.io/group"
APP_NAME = "lagpilot-consumer"
# the consumer image's non-root user (consumer_image/Dockerfile)
RUN_AS_USER = 10001
DEFAULT_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "512Mi"},
}


def deployment_name(cr_name: str) -> str:
    """The consumer Deployment's name: `<cr>-consumer` (kept within the 253-character limit)."""
    return _shorten(cr_name, 253 - len("-consumer")) + "-consumer"


def label_value(value: str) -> str:
    """A label value (<= 63 chars): long CR names are cut and suffixed with a stable hash."""
    return _shorten(value, 63)


def _shorten(value: str, limit: int) -> str:
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return value[: limit - 9].rstrip("-.") + "-" + digest


def selector_labels(cr_name: str) -> dict[str, str]:
    """The Deployment's selector (immutable once created: keep it minimal and stable)."""
    return {"app.kubernetes.io/name": APP_NAME, GROUP_LABEL: label_value(cr_name)}


def labels(cr_name: str, version: str) -> dict[str, str]:
    return {
        **selector_labels(cr_name),
        "app.kubernetes.io/instance": label_value(cr_name),
        "app.kubernetes.io/component": "consumer",
        "app.kubernetes.io/part-of": "lagpilot",
        "app.kubernetes.io/managed-by": "lagpilot",
        "app.kubernetes.io/version": label_value(version),
    }


def owner_reference(cr_name: str, cr_uid: str) -> dict[str, Any]:
    """Controller owner reference: the garbage collector deletes the Deployment with the CR."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": cr_name,
        "uid": cr_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _value_env(name: str, value: object) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def build_env(
    spec: GroupSpec, owner_uid: str = "", handoff_key_secret: str = "", handoff_key_id: str = ""
) -> list[dict[str, Any]]:
    """The runtime's environment (docs/CONTRACTS.md), then the user's extra env. ``owner_uid``: the
    CR's uid (LAGPILOT_OWNER_UID: the drain hand-off acts only on mailbox entries of this CR);
    ``handoff_key_secret``/``handoff_key_id``: the CR's hand-off key Secret and its fingerprint
    (LAGPILOT_HANDOFF_KEY: the hand-off acts only on entries signed with it, M8)."""
    env = _kafka_env(spec)
    env += _processing_env(spec)
    env += _failure_env(spec)
    env += _handoff_env(owner_uid, handoff_key_secret, handoff_key_id)
    # the user's extra env last; names starting with LAGPILOT_ are rejected by the CRD and spec.py
    user = [dict(e) for e in spec.template.env]
    # the names (never the values) of the user's env entries that come from a Secret: the runtime
    # masks their values in every error and log line it emits (lagpilot_runtime.redaction)
    secret_names = [e["name"] for e in user if "secretKeyRef" in (e.get("valueFrom") or {})]
    if secret_names:
        env.append(_value_env("LAGPILOT_SECRET_ENV", ",".join(secret_names)))
    return env + user


def _kafka_env(spec: GroupSpec) -> list[dict[str, Any]]:
    """The cluster, its security (credentials as Secret refs) and the group's topic and settings."""
    k = spec.kafka
    env: list[dict[str, Any]] = [
        _value_env("LAGPILOT_BOOTSTRAP_SERVERS", k.bootstrap_servers),
        _value_env("LAGPILOT_SECURITY_PROTOCOL", k.security_protocol),
    ]
    if k.sasl_mechanism:
        env.append(_value_env("LAGPILOT_SASL_MECHANISM", k.sasl_mechanism))
    if k.uses_oauthbearer:
        env.append(_value_env("LAGPILOT_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", k.oauth_token_endpoint_url))
        if k.oauth_scope:
            env.append(_value_env("LAGPILOT_SASL_OAUTHBEARER_SCOPE", k.oauth_scope))
        if k.secret_name:
            env.append(_secret_env("LAGPILOT_SASL_OAUTHBEARER_CLIENT_ID", k.secret_name, "clientId"))
            env.append(_secret_env("LAGPILOT_SASL_OAUTHBEARER_CLIENT_SECRET", k.secret_name, "clientSecret"))
    elif k.secret_name and k.uses_sasl:
        env.append(_secret_env("LAGPILOT_SASL_USERNAME", k.secret_name, "username"))
        env.append(_secret_env("LAGPILOT_SASL_PASSWORD", k.secret_name, "password"))
    if k.secret_name and k.uses_ssl:
        env.append(_secret_env("LAGPILOT_SSL_CA_PEM", k.secret_name, "ca.crt", optional=True))
        env.append(_secret_env("LAGPILOT_SSL_CERT_PEM", k.secret_name, "tls.crt", optional=True))
        env.append(_secret_env("LAGPILOT_SSL_KEY_PEM", k.secret_name, "tls.key", optional=True))
    return [
        *env,
        _value_env("LAGPILOT_TOPIC", spec.topic),
        _value_env("LAGPILOT_GROUP_ID", spec.group_id),
        _value_env("LAGPILOT_BATCH_MAX_RECORDS", spec.batch.max_records),
        _value_env("LAGPILOT_BATCH_TIMEOUT_MS", spec.batch.timeout_ms),
        _value_env("LAGPILOT_SESSION_TIMEOUT_MS", k.session_timeout_ms),
    ]


def _processing_env(spec: GroupSpec) -> list[dict[str, Any]]:
    """The sink or handler, its config and concurrency, and the Postgres sink's DSN (a Secret ref)."""
    p = spec.processing
    env: list[dict[str, Any]] = []
    if p.sink:
        env.append(_value_env("LAGPILOT_SINK", p.sink))
    if p.handler:
        env.append(_value_env("LAGPILOT_HANDLER", p.handler))
    env += [
        _value_env("LAGPILOT_HANDLER_CONFIG", json.dumps(p.config_dict, sort_keys=True)),
        _value_env("LAGPILOT_CONCURRENCY", p.concurrency),
    ]
    if p.sink == "postgres" and p.postgres.dsn_secret_name:
        env.append(
            _secret_env("LAGPILOT_POSTGRES_DSN", p.postgres.dsn_secret_name, p.postgres.dsn_secret_key)
        )
        env.append(_value_env("LAGPILOT_POSTGRES_TABLE", p.postgres.table))
        env.append(_value_env("LAGPILOT_POSTGRES_MODE", p.postgres.mode))
    return env


def _failure_env(spec: GroupSpec) -> list[dict[str, Any]]:
    """The failure policy, the metrics port, the pod's name and the log level."""
    f = spec.failure
    return [
        _value_env("LAGPILOT_FAILURE_POLICY", f.policy),
        _value_env("LAGPILOT_MAX_RETRIES", f.max_retries),
        _value_env("LAGPILOT_RETRY_BACKOFF_MS", f.backoff_ms),
        _value_env("LAGPILOT_DLQ_TOPIC", spec.dead_letter_topic),
        _value_env("LAGPILOT_METRICS_PORT", HTTP_PORT),
        {
            "name": "LAGPILOT_POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
        _value_env("LAGPILOT_LOG_LEVEL", "INFO"),
    ]


def _handoff_env(owner_uid: str, handoff_key_secret: str, handoff_key_id: str) -> list[dict[str, Any]]:
    """The CR's uid and hand-off key (a Secret ref) the drain hand-off checks mailbox entries with."""
    env: list[dict[str, Any]] = []
    if owner_uid:
        env.append(_value_env("LAGPILOT_OWNER_UID", owner_uid))
    if owner_uid and handoff_key_secret:
        # optional: a deleted Secret leaves the pods running without the key (they then act on no
        # mailbox entry: drains take the quiesce fallback) rather than unable to start
        env.append(_secret_env("LAGPILOT_HANDOFF_KEY", handoff_key_secret, "key", optional=True))
        env.append(_value_env("LAGPILOT_HANDOFF_KEY_ID", handoff_key_id))  # a new key rolls the pods
    return env


def termination_grace_seconds(spec: GroupSpec) -> int:
    """Long enough for one batch to fill, be processed and committed after SIGTERM."""
    return max(60, math.ceil(spec.batch.timeout_ms / 1000) + 30)


def build_deployment(
    cr_name: str,
    namespace: str,
    cr_uid: str,
    spec: GroupSpec,
    replicas: int,
    version: str = __version__,
    handoff_key_id: str = "",
) -> dict[str, Any]:
    """The full desired Deployment, ready for server-side apply. ``handoff_key_id``: the fingerprint
    of the CR's hand-off key (its Secret exists: the pods get the key from it); "" none."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    lbl = labels(cr_name, version)
    probe = {
        "httpGet": {"path": "/healthz", "port": HTTP_PORT},
        "periodSeconds": 10,
        "timeoutSeconds": 3,
        "failureThreshold": 6,
        "initialDelaySeconds": 10,
    }
    ready = {
        "httpGet": {"path": "/readyz", "port": HTTP_PORT},
        "periodSeconds": 5,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.template.image,
        "imagePullPolicy": spec.template.image_pull_policy,
        # explicit (not the image's entrypoint) so the test-side pod runner can run it as is
        "command": ["lagpilot", "consume"],
        "env": build_env(
            spec,
            owner_uid=cr_uid,
            handoff_key_secret=f"{cr_name}-handoff-key" if handoff_key_id else "",
            handoff_key_id=handoff_key_id,
        ),
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "livenessProbe": probe,
        "readinessProbe": ready,
        "resources": dict(spec.template.resources) or DEFAULT_RESOURCES,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(cr_name),
            "namespace": namespace,
            "labels": lbl,
            "ownerReferences": [owner_reference(cr_name, cr_uid)],
        },
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(cr_name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                # the operator's version labels the Deployment only: in the pod template it would
                # roll every consumer Deployment at every operator upgrade (issue 23 M10)
                "metadata": {"labels": {k: v for k, v in lbl.items() if k != "app.kubernetes.io/version"}},
                "spec": {
                    "containers": [container],
                    "terminationGracePeriodSeconds": termination_grace_seconds(spec),
                    # consumers never call the Kubernetes API
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS_USER,
                        "runAsGroup": RUN_AS_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
                },
            },
        },
    }
