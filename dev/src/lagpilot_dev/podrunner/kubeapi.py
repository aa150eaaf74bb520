"""The runner's calls to the API server on the workers' behalf: Secret/ConfigMap data for the env,
the pod's ServiceAccount credentials (TokenRequest), the pod status patch and the final delete."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import ContainerConfigError, log, write_private


class PodApi:
    """The kubelet's API calls for pods, through one CoreV1Api (`core`) of `api_client`."""

    def __init__(self, core: Any, api_client: Any, stopping: threading.Event) -> None:
        self._core = core
        self._api_client = api_client
        self.stopping = stopping

    def get_data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        from kubernetes import client

        try:
            if kind == "secret":
                resp = self._core.read_namespaced_secret(name, namespace, _preload_content=False)
            else:
                resp = self._core.read_namespaced_config_map(name, namespace, _preload_content=False)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise ContainerConfigError(f"reading {kind} {name}: HTTP {exc.status}") from exc
        obj = json.loads(resp.data)
        if kind == "secret":
            data = {
                k: base64.b64decode(v).decode("utf-8", errors="surrogateescape")
                for k, v in (obj.get("data") or {}).items()
            }
            data.update(obj.get("stringData") or {})
            return data
        data = dict(obj.get("data") or {})
        data.update(
            {
                k: base64.b64decode(v).decode("utf-8", errors="surrogateescape")
                for k, v in (obj.get("binaryData") or {}).items()
            }
        )
        return data

    def test_env(self, namespace: str) -> dict[str, str]:
        """The runtime's test fault hooks for every pod of `namespace`: the namespace annotation
        TEST_ENV_ANNOTATION (a JSON object), names starting with LP_TEST_ only. A CR cannot set
        them (the CRD refuses LP_TEST_* in template.env); a test that owns the namespace can."""
        from .base import TEST_ENV_ANNOTATION, TEST_HOOK_PREFIX

        ns = self._core.read_namespace(namespace)
        raw = ((ns.metadata.annotations or {}).get(TEST_ENV_ANNOTATION) or "").strip()
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ContainerConfigError(
                f"namespace annotation {TEST_ENV_ANNOTATION} is not JSON: {exc}"
            ) from exc
        return {str(k): str(v) for k, v in (data or {}).items() if str(k).startswith(TEST_HOOK_PREFIX)}

    def get_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.get_data("secret", namespace, name)

    def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.get_data("configmap", namespace, name)

    def pod_credentials(self, pod: Mapping[str, Any], pod_dir: Path) -> Path:
        """In-cluster credentials, locally: a TokenRequest token of the pod's ServiceAccount (bound
        to the pod), as `<pod_dir>/kubeconfig` (returned; the container's KUBECONFIG) and as the usual
        `serviceaccount/{token,ca.crt,namespace}` files. The token is never logged."""
        from kubernetes import client

        from lagpilot_dev.kube import kubeconfig_yaml

        meta = pod["metadata"]
        ns, sa = meta["namespace"], pod["spec"].get("serviceAccountName") or "default"
        body = {
            "spec": {
                "expirationSeconds": 86400,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            }
        }
        try:
            resp = self._core.create_namespaced_service_account_token(sa, ns, body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status == 404:
                raise ContainerConfigError(f'serviceaccount "{sa}" not found') from exc
            raise ContainerConfigError(f"token request for serviceaccount {sa}: HTTP {exc.status}") from exc
        token = json.loads(resp.data)["status"]["token"]
        cfg = self._api_client.configuration
        sa_dir = pod_dir / "serviceaccount"
        sa_dir.mkdir(parents=True, exist_ok=True)
        ca = Path(cfg.ssl_ca_cert)
        for name, content in (("token", token), ("namespace", ns), ("ca.crt", ca.read_text())):
            write_private(sa_dir / name, content)
        path = pod_dir / "kubeconfig"
        write_private(
            path, kubeconfig_yaml(cfg.host, ca, f"system:serviceaccount:{ns}:{sa}", token=token, namespace=ns)
        )
        return path

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        from kubernetes import client

        try:
            self._core.patch_namespaced_pod_status(
                name, namespace, {"status": status}, _preload_content=False
            )
            return True
        except client.ApiException as exc:
            if exc.status == 404:
                return True  # the pod is gone: nothing left to report
            log.warning(
                "pod status update failed",
                extra={"pod": f"{namespace}/{name}", "status": exc.status, "reason": exc.reason},
            )
            return False
        except Exception as exc:  # noqa: BLE001 - apiserver down (fault tests): retried on the next change
            log.warning("pod status update failed", extra={"pod": f"{namespace}/{name}", "error": repr(exc)})
            return False

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete (grace 0, this uid only); retried while the apiserver is away."""
        from kubernetes import client

        while True:
            try:
                self._core.delete_namespaced_pod(
                    name,
                    namespace,
                    body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                    _preload_content=False,
                )
                return
            except client.ApiException as exc:
                if exc.status in (404, 409):
                    return
                log.warning(
                    "final pod delete failed", extra={"pod": f"{namespace}/{name}", "status": exc.status}
                )
            except Exception as exc:  # noqa: BLE001 - apiserver down (fault tests)
                log.warning(
                    "final pod delete failed", extra={"pod": f"{namespace}/{name}", "error": repr(exc)[:300]}
                )
            if self.stopping.wait(2.0):
                return
