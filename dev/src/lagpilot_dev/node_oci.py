"""Tiny OCI image archives written here, for images the node needs that no registry can serve.

The node has no registry to pull from (the machines reach package registries only), so the images
it runs are imported into containerd from archives (`ctr -n k8s.io images import`):
- the sandbox ("pause") image: `pause` compiled here from Kubernetes' build/pause/linux/pause.c;
- a test image with Debian's static busybox (sh, sleep, dd, nc ...), for the node's own tests.

An archive is an OCI image layout in a tar (oci-layout, index.json, blobs/sha256/...): one layer,
one config, one manifest; the image's name is the index's `io.containerd.image.name` and
`org.opencontainers.image.ref.name` annotations, which `ctr images import` uses. Layers are written
with fixed mtimes and owners so the same inputs give the same digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    """One file, directory or symlink in the image's single layer."""

    path: str  # inside the image, without the leading "/"
    data: bytes | None = None  # a regular file's content (None: a directory or a symlink)
    mode: int = 0o755
    link: str | None = None  # a symlink's target


@dataclass
class ImageSpec:
    """What goes into the image config (the subset the node uses)."""

    name: str  # e.g. "lagpilot.local/pause:v1.35.4"
    entries: list[Entry] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    user: str = ""
    env: list[str] = field(default_factory=lambda: ["PATH=/bin"])


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(entries: list[Entry]) -> bytes:
    """The uncompressed layer: entries in order, parents first, owned by root, mtime 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.path.lstrip("/"))
            info.mtime = 0
            info.uid = info.gid = 0
            info.mode = e.mode
            if e.link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = e.link
                tar.addfile(info)
            elif e.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def oci_archive(spec: ImageSpec) -> bytes:
    """The image as an OCI layout tar, ready for `ctr images import`."""
    raw = layer_tar(spec.entries)
    gz = gzip.compress(raw, compresslevel=6, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            k: v
            for k, v in {
                "Entrypoint": spec.entrypoint,
                "Cmd": spec.cmd,
                "User": spec.user,
                "Env": spec.env,
            }.items()
            if v
        },
        "rootfs": {"type": "layers", "diff_ids": [_sha(raw)]},
    }
    config_b = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": _sha(config_b),
            "size": len(config_b),
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _sha(gz), "size": len(gz)}
        ],
    }
    manifest_b = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _sha(manifest_b),
                "size": len(manifest_b),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": spec.name,
                    "org.opencontainers.image.ref.name": spec.name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
    }
    for blob in (gz, config_b, manifest_b):
        files["blobs/sha256/" + _sha(blob).split(":", 1)[1]] = blob
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def pause_image(pause_binary: Path, name: str) -> ImageSpec:
    """The sandbox image: /pause and nothing else (as registry.k8s.io/pause), run as 65535."""
    return ImageSpec(
        name=name,
        entries=[Entry("pause", pause_binary.read_bytes(), 0o755)],
        entrypoint=["/pause"],
        user="65535:65535",
        env=[],
    )


# busybox applets the node's tests use (sh for traps, dd to allocate memory, httpd and nc for HTTP).
# Not wget: Debian's static busybox segfaults in it inside the image (exit 139; no NSS there).
BUSYBOX_APPLETS = (
    "sh",
    "sleep",
    "dd",
    "nc",
    "echo",
    "printf",
    "grep",
    "cat",
    "true",
    "id",
    "ls",
    "env",
    "httpd",
    "kill",
    "nslookup",
)


def busybox_image(busybox: Path, name: str) -> ImageSpec:
    """A test image: Debian's static busybox at /bin/busybox with applet symlinks, a writable /tmp."""
    entries = [
        Entry("bin", None, 0o755),
        Entry("bin/busybox", busybox.read_bytes(), 0o755),
        Entry("tmp", None, 0o1777),
    ]
    entries += [Entry(f"bin/{a}", link="busybox") for a in BUSYBOX_APPLETS]
    return ImageSpec(name=name, entries=entries, cmd=["/bin/sh"])
