"""`lagpilot dev down --purge` after `./dev/demo --keep`: the kept pods' volumes (a projected token is
a tmpfs under the kubelet's root) stayed mounted, because `umount -R <kubelet root>` does nothing
when the root itself is not a mount point, and the node's directory could then not be removed
(seen 2026-11-27 after a cold demo with --keep: one tmpfs left under .../kubelet/pods/<uid>)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from lagpilot_dev.node import NodePart, mounts_under

ROOT = Path("/c/state/default/node/kubelet")
PROJECTED = ROOT / "pods/u1/volumes/kubernetes.io~projected/kube-api-access-x"
MOUNTS = f"""\
/dev/vda / ext4 rw,relatime 0 0
tmpfs {PROJECTED} tmpfs rw,relatime,size=524288k 0 0
tmpfs {ROOT}/pods/u1/volumes/kubernetes.io~empty-dir/with\\040space tmpfs rw 0 0
shm {ROOT}/pods/u1 tmpfs rw 0 0
tmpfs /c/state/default/node/kubelet-other/x tmpfs rw 0 0
tmpfs /c/state/default/node/kubelet tmpfs rw 0 0
"""


def test_mounts_under_the_root_deepest_first_without_the_root_or_its_siblings() -> None:
    assert mounts_under(ROOT, MOUNTS) == [
        str(ROOT / "pods/u1/volumes/kubernetes.io~empty-dir/with space"),
        str(PROJECTED),
        str(ROOT / "pods/u1"),
    ]


def test_mounts_under_a_root_with_nothing_mounted_is_empty() -> None:
    assert mounts_under(Path("/elsewhere"), MOUNTS) == []


def test_purge_unmounts_what_the_kubelet_left_before_removing_the_node(
    tmp_path: Path, monkeypatch: Any
) -> None:
    node = NodePart(tmp_path / "cache", tmp_path / "state")
    monkeypatch.setattr(NodePart, "stop", lambda self: None)
    left = node.kubelet_root / "pods/u1/volumes/kubernetes.io~projected/token"
    left.mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"tmpfs {left} tmpfs rw 0 0\n")
    monkeypatch.setattr("lagpilot_dev.node.MOUNTS_FILE", mounts)
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr("lagpilot_dev.node.subprocess.run", run)
    node.purge()
    assert ["umount", str(left)] in calls, calls
    assert not node.dir.exists()
