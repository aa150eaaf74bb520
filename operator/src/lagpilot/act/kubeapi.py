"""The few Kubernetes API calls the operator makes, behind one small class.

Every verb here is listed in docs/rbac.md (the Helm chart's Role is built from that list):
- apps/deployments: get, patch (server-side apply with field manager `lagpilot`), and create: an
  apply that creates the Deployment is authorized as `create` as well (measured on v1.35);
- core/secrets: get (the Kafka credentials for the operator's own admin connection);
- core/configmaps: get, create, patch (the CR's memory, `<cr>-lagpilot-state`, server-side applied:
  act/memory.py);
- lagpilot.io/batchconsumergroups/status: patch (merge patch, only when something changed), and get
  for the writes the next cycle depends on (status.drain: `patch_status_guarded`, resourceVersion);
- core/events + events.k8s.io/events: create (kopf posts the events);
- apiextensions.k8s.io/customresourcedefinitions: get, of `batchconsumergroups.lagpilot.io` only
  (the installed CRD checked against the operator's own: act/crd_check.py).
kopf itself lists/watches batchconsumergroups and patches them (annotations for its progress).

Handlers call these through `asyncio.to_thread`; the kubernetes client is thread-safe enough for
that (one urllib3 pool). Errors are re-raised as `KubeError` with the HTTP status and the API's
reason, without bodies (a 422 body can echo the object we sent).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lagpilot.act.deployment import FIELD_MANAGER
from lagpilot.model.crd import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)


class KubeError(Exception):
    def __init__(self, status: int | None, reason: str, what: str):
        self.status = status
        self.reason = reason
        super().__init__(f"{what}: HTTP {status} {reason}")


class StatusConflict(KubeError):
    """A guarded status write found that what it was based on changed (another writer: a second
    operator instance, a person) or kept conflicting: nothing was written; re-read and decide again."""

    def __init__(self, reason: str, what: str):
        super().__init__(409, reason, what)


def _wrap(err: Exception, what: str) -> KubeError:
    status = getattr(err, "status", None)
    reason = str(getattr(err, "reason", "") or type(err).__name__)
    if status in (401, 403, 404, 409):
        # these Status messages name the user, verb and resource ("... cannot create resource
        # \"deployments\" ..."): safe and what an admin needs; other bodies may echo the object sent
        try:
            message = json.loads(getattr(err, "body", "") or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            reason = f"{reason}: {message}"
    return KubeError(status, reason, what)


def _raw_json(call: Callable[[], Any], what: str, missing_ok: bool = False) -> Any:
    """The JSON body of a client call made with ``_preload_content=False`` (the raw response, its
    connection released): not the client's models, whose building and serializing back cost ~11 ms
    of CPU (under the GIL) per call, every cycle of every CR (docs/operator.md "Scale"). A 404 is
    None when `missing_ok`; any other failure a KubeError naming `what`."""
    try:
        resp = call()
        try:
            body = resp.data
        finally:
            resp.release_conn()
    except Exception as err:  # noqa: BLE001
        if missing_ok and getattr(err, "status", None) == 404:
            return None
        raise _wrap(err, what) from None
    return json.loads(body)


def load_api_client(pool_size: int = 32) -> Any:
    """In-cluster config when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config).

    ``pool_size``: HTTP connections kept to the API server; at least the control loop's cycle
    threads (LAGPILOT_CYCLE_WORKERS), else concurrent cycles open and discard connections
    (urllib3's "Connection pool is full", seen with 200 CRs at the client's default of 10)."""
    from kubernetes import client, config

    conf = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=conf)
    except config.ConfigException:
        config.load_kube_config(client_configuration=conf)
    conf.connection_pool_maxsize = max(int(pool_size), 10)
    return client.ApiClient(conf)


class KubeApi:
    def __init__(self, api_client: Any = None):
        from kubernetes import client

        self._client = api_client if api_client is not None else load_api_client()
        self.apps = client.AppsV1Api(self._client)
        self.core = client.CoreV1Api(self._client)
        self.custom = client.CustomObjectsApi(self._client)

    def apply_deployment(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply the whole desired Deployment (force: the operator owns these fields)."""
        meta = manifest["metadata"]
        try:
            resp = self.apps.patch_namespaced_deployment(
                meta["name"],
                meta["namespace"],
                manifest,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except Exception as err:  # noqa: BLE001
            raise _wrap(err, f"apply Deployment {meta['namespace']}/{meta['name']}") from None
        applied: dict[str, Any] = self._client.sanitize_for_serialization(resp)
        return applied

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        # the raw JSON, not the client's V1Deployment model (`_raw_json`)
        body = _raw_json(
            lambda: self.apps.read_namespaced_deployment(name, namespace, _preload_content=False),
            f"get Deployment {namespace}/{name}",
            missing_ok=True,
        )
        return None if body is None else dict(body)

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        """The pods matching `selector` (raw JSON items)."""
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        body = _raw_json(
            lambda: self.core.list_namespaced_pod(namespace, label_selector=sel, _preload_content=False),
            f"list pods {namespace} -l {sel}",
        )
        return list(body.get("items") or [])

    def read_secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's `data` (base64 values), None when it does not exist."""
        try:
            resp = self.core.read_namespaced_secret(name, namespace)
        except Exception as err:  # noqa: BLE001
            if getattr(err, "status", None) == 404:
                return None
            raise _wrap(err, f"get Secret {namespace}/{name}") from None
        return dict(resp.data or {})  # type: ignore[arg-type]  # base64 text, typed bytes | str by the stubs

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap `name` (raw JSON), None when it does not exist."""
        body = _raw_json(
            lambda: self.core.read_namespaced_config_map(name, namespace, _preload_content=False),
            f"get ConfigMap {namespace}/{name}",
            missing_ok=True,
        )
        return None if body is None else dict(body)

    def apply_configmap(self, manifest: dict[str, Any]) -> None:
        """Server-side apply a ConfigMap (creates it when absent): the memory, act/memory.py."""
        meta = manifest["metadata"]
        try:
            resp = self.core.patch_namespaced_config_map(
                meta["name"],
                meta["namespace"],
                manifest,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
            )
            resp.release_conn()  # type: ignore[attr-defined]  # _preload_content=False: the raw response
        except Exception as err:  # noqa: BLE001
            raise _wrap(err, f"apply ConfigMap {meta['namespace']}/{meta['name']}") from None

    def get_crd(self, name: str) -> dict[str, Any] | None:
        """The CustomResourceDefinition `name` (raw JSON), None when it does not exist: the start-up
        check of the installed CRD (act/crd_check.py; RBAC: `get` on that one name)."""
        from kubernetes import client

        api = client.ApiextensionsV1Api(self._client)
        body = _raw_json(
            lambda: api.read_custom_resource_definition(name, _preload_content=False, _request_timeout=30),
            f"get CustomResourceDefinition {name}",
            missing_ok=True,
        )
        return None if body is None else dict(body)

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """JSON merge patch of the CR's status subresource."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": patch}
            )
        except Exception as err:  # noqa: BLE001
            raise _wrap(err, f"patch status of BatchConsumerGroup {namespace}/{name}") from None

    def read_status(self, namespace: str, name: str) -> tuple[str, dict[str, Any]]:
        """(resourceVersion, status) of the CR, read through the status subresource."""
        try:
            # a custom object: its JSON as a dict (the stubs say object)
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object_status(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURAL, name
            )
        except Exception as err:  # noqa: BLE001
            raise _wrap(err, f"get status of BatchConsumerGroup {namespace}/{name}") from None
        return str((obj.get("metadata") or {}).get("resourceVersion") or ""), dict(obj.get("status") or {})

    def patch_status_guarded(
        self,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        basis: Callable[[Mapping[str, Any]], bool],
        attempts: int = 5,
    ) -> None:
        """A merge patch of the status that cannot overwrite a concurrent writer's decision
        (optimistic concurrency): read the status and its resourceVersion, check `basis` (the part
        the write was decided on is still as the caller read it), patch with that resourceVersion;
        a 409 (a write in between) re-reads and checks again. `StatusConflict` when the basis
        changed or after `attempts` conflicts; nothing is written then."""
        what = f"patch status of BatchConsumerGroup {namespace}/{name}"
        for _ in range(max(1, attempts)):
            rv, status = self.read_status(namespace, name)
            if not basis(status):
                raise StatusConflict("the status changed since it was read (another writer)", what)
            try:
                self.custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    {"metadata": {"resourceVersion": rv}, "status": patch},
                )
                return
            except Exception as err:  # noqa: BLE001
                if getattr(err, "status", None) == 409:
                    log.info("status write conflicted; re-reading", extra={"group": f"{namespace}/{name}"})
                    continue
                raise _wrap(err, what) from None
        raise StatusConflict(f"still conflicting after {attempts} attempts", what)
