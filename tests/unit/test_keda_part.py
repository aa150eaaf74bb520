"""lagpilot_dev.keda's install steps that need no running KEDA (a fake kubectl)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from lagpilot_dev.keda import KedaPart


class FakeKube:
    """kubectl against an API server that has just created the CRDs: `.status.conditions` stays
    unset for the first `reads` reads (what `kubectl wait --for=condition=Established` reported on
    this stack: ".status.conditions accessor error: <nil> is of the type <nil>"), then Established."""

    def __init__(self, reads: int) -> None:
        self.reads = reads
        self.calls: list[tuple[str, ...]] = []

    def kubectl(
        self,
        *args: str,
        input_text: str | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        if args[0] == "wait":
            if self.reads > 0:
                self.reads -= 1
                return subprocess.CompletedProcess(
                    list(args),
                    1,
                    "",
                    "error: .status.conditions accessor error: "
                    "<nil> is of the type <nil>, expected []interface{}",
                )
            return subprocess.CompletedProcess(list(args), 0, "condition met", "")
        if args[0] == "get" and args[1].startswith("crd"):
            status: dict[str, Any] = {}
            if self.reads > 0:
                self.reads -= 1
            else:
                status = {
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True"},
                        {"type": "Established", "status": "True"},
                    ]
                }
            return subprocess.CompletedProcess(list(args), 0, json.dumps({"status": status}), "")
        return subprocess.CompletedProcess(list(args), 0, "", "")


def _part(tmp_path: Path, kube: FakeKube) -> KedaPart:
    part = KedaPart(tmp_path / "cache", tmp_path / "state")
    for d in ("rbac", "crd"):
        (part.config / d).mkdir(parents=True)
    (part.config / "rbac" / "namespace.yaml").write_text("{}")
    (part.config / "crd" / "keda.sh_scaledobjects.yaml").write_text("{}")
    part.kube = kube  # type: ignore[assignment]
    return part


def test_the_crds_are_waited_for_while_their_status_has_no_conditions_yet(tmp_path: Path) -> None:
    kube = FakeKube(reads=3)
    _part(tmp_path, kube)._apply_manifests()
    assert kube.reads == 0  # the fault fired: three reads saw no conditions
