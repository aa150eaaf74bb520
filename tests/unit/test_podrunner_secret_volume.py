"""The pod runner's one emulated volume kind: `secret` (the Spark RPC key of Spark-on-Kubernetes
drains, issue 23 H4), bind-mounted read-only in a private mount namespace of the process."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from lagpilot_dev.podrunner.container import secret_mounts, with_mounts


def test_secret_mounts_lists_the_containers_secret_volumes_only() -> None:
    pod = {
        "spec": {
            "volumes": [
                {"name": "tmp", "emptyDir": {}},
                {"name": "k", "secret": {"secretName": "x-drain-rpc-key"}},
            ]
        }
    }
    container = {
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "k", "mountPath": "/var/run/k"}]
    }
    assert secret_mounts(pod, container) == [("/var/run/k", "x-drain-rpc-key", "k")]
    assert with_mounts(["a", "b"], []) == ["a", "b"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_with_mounts_shows_the_files_at_the_mount_path_to_that_process_only(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "key").write_text("s3cret")
    target = f"/run/lagpilot-test-{uuid.uuid4().hex[:8]}"
    try:
        out = subprocess.run(
            with_mounts(
                ["/bin/sh", "-c", f"cat {target}/key; echo; touch {target}/x 2>/dev/null || echo ro"],
                [(target, str(src))],
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["s3cret", "ro"]
        assert not os.path.exists(f"{target}/key")  # the host sees an empty directory, not the Secret
    finally:
        os.rmdir(target)
