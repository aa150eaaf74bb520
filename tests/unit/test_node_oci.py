"""The OCI archives the node imports (lagpilot_dev.node_oci): a valid layout whose digests match."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from lagpilot_dev import node_oci


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files["blobs/sha256/" + digest.split(":", 1)[1]]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_archive_is_an_oci_layout_with_matching_digests(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    archive = node_oci.oci_archive(node_oci.pause_image(binary, "lagpilot.local/pause:v9"))
    files = _members(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    (desc,) = index["manifests"]
    assert desc["annotations"]["io.containerd.image.name"] == "lagpilot.local/pause:v9"
    manifest = json.loads(_blob(files, desc["digest"]))
    config = json.loads(_blob(files, manifest["config"]["digest"]))
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["config"]["User"] == "65535:65535"
    (layer_desc,) = manifest["layers"]
    import gzip

    raw = gzip.decompress(_blob(files, layer_desc["digest"]))
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(raw)) as layer:
        pause = layer.getmember("pause")
        assert pause.mode == 0o755
        assert layer.extractfile(pause).read() == b"\x7fELF not really"  # type: ignore[union-attr]


def test_same_inputs_same_digest(tmp_path: Path) -> None:
    bb = tmp_path / "busybox"
    bb.write_bytes(b"busybox")
    a = node_oci.oci_archive(node_oci.busybox_image(bb, "x/y:1"))
    b = node_oci.oci_archive(node_oci.busybox_image(bb, "x/y:1"))
    assert a == b
    raw_layer = node_oci.layer_tar(node_oci.busybox_image(bb, "x/y:1").entries)
    with tarfile.open(fileobj=io.BytesIO(raw_layer)) as layer:
        sh = layer.getmember("bin/sh")
        assert sh.issym() and sh.linkname == "busybox"
        assert layer.getmember("tmp").mode == 0o1777


def test_node_configs_carry_the_settings_this_machine_needs(tmp_path: Path) -> None:
    from lagpilot_dev.node import PAUSE_IMAGE, NodePart

    part = NodePart(tmp_path / "cache", tmp_path / "state")
    kc = part.kubelet_config()
    assert kc["failCgroupV1"] is False and kc["cgroupDriver"] == "cgroupfs"
    assert kc["containerRuntimeEndpoint"] == f"unix://{part.containerd_sock}"
    assert kc["authentication"]["anonymous"]["enabled"] is False
    cfg = part.containerd_config()
    assert "restrict_oom_score_adj = true" in cfg
    assert f'sandbox = "{PAUSE_IMAGE}"' in cfg
    assert len(str(part.containerd_sock)) < 100  # unix socket paths are limited to 108 bytes
