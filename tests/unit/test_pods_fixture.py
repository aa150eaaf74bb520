"""tests/fixtures/node.py `pods` on the pod runner: the CR's template must make the runner's pods (host
processes sharing the venv) run the code of the checkout the tests run from. The venv's editable
install points at the checkout it was installed from (/work/main for a worktree sharing the venv),
so PYTHONPATH=<repo> alone would run that checkout's `lagpilot_runtime` in the consumers."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fixtures.node import REPO, runner_pods


def _pythonpath(repo: Path) -> list[str]:
    p = runner_pods(lambda prefix=None: "ns", "127.0.0.1:9092", "lagpilot-test-1", repo=repo)
    env = {e["name"]: e["value"] for e in p.template()["env"]}
    return env["PYTHONPATH"].split(os.pathsep)


def test_runner_pods_put_the_checkouts_sources_before_the_repo_root() -> None:
    path = _pythonpath(REPO)
    for d in ("consumer_image/src", "operator/src"):
        assert str(REPO / d) in path, (d, path)
        assert path.index(str(REPO / d)) < path.index(str(REPO)), path
    assert path[-1] == str(REPO)  # the tests' handler modules (tests.real.*) still import from the root


def test_runner_pods_template_keeps_the_tests_env_after_its_own() -> None:
    p = runner_pods(lambda prefix=None: "ns", "127.0.0.1:9092", "lagpilot-test-1")
    env = p.template(env=[{"name": "X", "value": "1"}], resources={})["env"]
    assert [e["name"] for e in env] == ["PYTHONPATH", "X"]
    assert p.image is None and "image" not in p.template()
