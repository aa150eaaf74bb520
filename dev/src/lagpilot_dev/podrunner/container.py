"""What a container runs locally: the image's known entrypoint and CMD (test-side knowledge of our
own images), and the argv built from command + args."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from .base import StartError
from .env import expand_vars

# images whose entrypoint the runner knows (the container spec gives no command): repository -> argv
# (test-side only: a real kubelet reads them from the image). The consumer image's ENTRYPOINT is
# `python -m lagpilot_runtime.image_entrypoint` with CMD `consume`: Spark's executor pods carry no
# command and `args: ["executor"]`, which that entrypoint turns into the executor JVM (as Spark's
# entrypoint.sh does); other args go to `lagpilot`. As in a container, `args` replace the image's CMD.
DEFAULT_ENTRYPOINTS: dict[str, list[str]] = {
    "lagpilot/consumer": ["python", "-m", "lagpilot_runtime.image_entrypoint"],
    "lagpilot/operator": ["lagpilot", "operator"],
}
# the image's CMD, used when the container gives neither command nor args
DEFAULT_IMAGE_CMDS: dict[str, list[str]] = {
    "lagpilot/consumer": ["consume"],
}


def image_repository(image: str) -> str:
    """`registry:5000/lagpilot/consumer:0.1.0@sha256:...` -> `lagpilot/consumer` (best effort)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name.rsplit(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # drop the registry host
    if parts[:1] == ["library"]:
        parts = parts[1:]
    return "/".join(parts)


def build_argv(
    container: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    bin_dirs: Sequence[str],
    python: str,
    entrypoints: Mapping[str, Sequence[str]] = DEFAULT_ENTRYPOINTS,
    search_path: str = "",
    image_cmds: Mapping[str, Sequence[str]] = DEFAULT_IMAGE_CMDS,
) -> list[str]:
    """The local argv for a container: command + args with `$(VAR)` expanded; the image's known
    entrypoint when there is no command; a bare program name resolved in `bin_dirs` first, then
    `search_path`; `python`/`python3` become `python` (the project's interpreter)."""
    command = [expand_vars(str(c), env) for c in container.get("command") or []]
    args = [expand_vars(str(a), env) for a in container.get("args") or []]
    if not command:
        repo = image_repository(str(container.get("image") or ""))
        key = next((k for k in entrypoints if repo == k or repo.endswith("/" + k)), None)
        if key is None:
            raise StartError(
                f"container {container.get('name')!r} has no command and the local runner does not "
                f"know the entrypoint of image {container.get('image')!r}"
            )
        command = list(entrypoints[key])
        if not args:
            args = list(image_cmds.get(key, ()))
    prog = command[0]
    if re.fullmatch(r"python(3(\.\d+)?)?", prog):
        resolved: str | None = python
    elif "/" in prog:
        resolved = prog if os.access(prog, os.X_OK) else None
    else:
        resolved = shutil.which(prog, path=os.pathsep.join([*bin_dirs, search_path]))
    if resolved is None:
        raise StartError(f'exec: "{prog}": executable file not found in $PATH')
    return [resolved, *command[1:], *args]


def secret_mounts(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(mountPath, Secret name, volume name) of each `secret` volume the container mounts (pure)."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        secret = (volumes.get(m.get("name")) or {}).get("secret")
        if secret is not None:
            out.append((str(m["mountPath"]), str(secret.get("secretName") or ""), str(m["name"])))
    return out


def with_mounts(argv: Sequence[str], binds: Sequence[tuple[str, str]], unshare: str = "unshare") -> list[str]:
    """`argv` run in a private mount namespace in which each (mountPath, source dir) is bind-mounted
    read-only (pure). The process keeps its pid (unshare and sh exec into it); needs root."""
    if not binds:
        return list(argv)
    script = (
        'while [ "$1" != "--" ]; do mkdir -p "$1" && mount -o bind,ro "$2" "$1" || exit 127; shift 2; done; '
        'shift; exec "$@"'
    )
    pairs = [p for mount_path, source in binds for p in (mount_path, source)]
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        script,
        "sh",
        *pairs,
        "--",
        *argv,
    ]
