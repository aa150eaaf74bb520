"""A container's environment as the kubelet builds it (`env`, `envFrom`, `$(VAR)` expansion,
Secret/ConfigMap/field/resource references), plus the host variables a local process inherits."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .base import DEFAULT_NODE_NAME, INHERITED_ENV, LOOPBACK, NODE_CAPACITY, ContainerConfigError

# env names as Kubernetes >= 1.34 accepts them (RelaxedEnvironmentVariableValidation): printable ASCII but "="
_ENV_NAME = re.compile(r"^[!-<>-~][ -<>-~]*$")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined vars are replaced, `$$` is a literal `$`, undefined
    references are left as written (as the kubelet does for command, args and env values)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i : end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


def _field_ref(pod: Mapping[str, Any], path: str, node_name: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName") or node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": LOOPBACK,
        "status.hostIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
        "status.hostIPs": LOOPBACK,
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef {path!r}")


_CPU_UNITS = {"m": 1e-3}
_MEM_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_quantity(q: str) -> float:
    """A Kubernetes quantity ("500m", "2", "64Mi") as a float in base units."""
    q = str(q).strip()
    for suffix, mult in {**_MEM_UNITS, **_CPU_UNITS}.items():
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * mult
    return float(q)


def _resource_field_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    res = container.get("resources") or {}
    kind, _, name = str(ref.get("resource", "")).partition(".")
    value = (res.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (res.get("limits") or {}).get(name)  # requests default to limits
    if value is None:
        value = NODE_CAPACITY.get(name, "0")  # limits default to node allocatable
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(parse_quantity(value) / divisor))


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    get_secret: Callable[[str], Mapping[str, str] | None],
    get_config_map: Callable[[str], Mapping[str, str] | None],
    node_name: str = DEFAULT_NODE_NAME,
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: `envFrom` first, then `env` in order
    (later entries override, values may reference earlier ones with `$(VAR)`).

    `get_secret(name)` returns the decoded Secret data (or None when missing), `get_config_map`
    likewise. A missing required source raises ContainerConfigError.
    """
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        if "configMapRef" in src:
            ref, data = src["configMapRef"], get_config_map(src["configMapRef"].get("name", ""))
            what = "configmap"
        elif "secretRef" in src:
            ref, data = src["secretRef"], get_secret(src["secretRef"].get("name", ""))
            what = "secret"
        else:
            continue
        if data is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(f'{what} "{ref.get("name")}" not found')
        for key, value in data.items():
            if _ENV_NAME.match(prefix + key):  # the kubelet skips invalid names
                env[prefix + key] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand_vars(str(var.get("value") or ""), env)
            continue
        vf = var["valueFrom"]
        if "secretKeyRef" in vf or "configMapKeyRef" in vf:
            is_secret = "secretKeyRef" in vf
            ref = vf["secretKeyRef"] if is_secret else vf["configMapKeyRef"]
            data = (get_secret if is_secret else get_config_map)(ref.get("name", ""))
            what = "secret" if is_secret else "configmap"
            if data is None or ref.get("key") not in data:
                if ref.get("optional"):
                    continue
                if data is None:
                    raise ContainerConfigError(f'{what} "{ref.get("name")}" not found')
                raise ContainerConfigError(f"couldn't find key {ref.get('key')} in {what} {ref.get('name')}")
            env[name] = data[ref["key"]]
        elif "fieldRef" in vf:
            env[name] = _field_ref(pod, vf["fieldRef"].get("fieldPath", ""), node_name)
        elif "resourceFieldRef" in vf:
            env[name] = _resource_field_ref(container, vf["resourceFieldRef"])
        else:
            raise ContainerConfigError(f"unsupported valueFrom for {name}")
    return env


def base_env(pod_name: str, venv_bin: Path, extra_env: Mapping[str, str]) -> dict[str, str]:
    """What every local process starts from (a real container inherits nothing; Java, Spark and the
    caches must be found): INHERITED_ENV, the venv first on PATH, HOSTNAME, then `extra_env`."""
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    env["PATH"] = os.pathsep.join([str(venv_bin), os.environ.get("PATH", "/usr/bin:/bin")])
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    env["HOSTNAME"] = pod_name
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra_env)
    return env
