"""One Go cache for every Go build of a cold run (lagpilot_dev.gocache, dev/build-go-env.sh): held by
leases, removed by the last one released, in Python and in the build scripts alike (the scripts
calling the Python implementation on their fd 9, `python -m lagpilot_dev.gocache`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lagpilot_dev import gocache

ROOT = Path(__file__).resolve().parents[2]
GO_ENV = ROOT / "dev" / "build-go-env.sh"


def _filled(go_dir: Path) -> Path:
    (go_dir / "go-build").mkdir(parents=True)
    (go_dir / "go-build" / "entry").write_text("x")
    mod = go_dir / "go-mod" / "example.com" / "m@v1.0.0"
    mod.mkdir(parents=True)
    (mod / "go.mod").write_text("module example.com/m\n")
    (mod / "go.mod").chmod(0o444)
    mod.chmod(0o555)  # the module cache is read-only, as Go leaves it
    return go_dir


def _trash(parent: Path) -> list[Path]:
    return sorted(parent.glob(gocache.TRASH_PREFIX + "*"))


def test_the_last_lease_removes_the_caches_and_an_earlier_one_does_not(tmp_path: Path) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    deleted: list[Path] = []
    with gocache.lease(go_dir, env={}, delete=deleted.append):
        with gocache.lease(go_dir, env={}, delete=deleted.append):
            _filled(go_dir)
        assert go_dir.is_dir() and deleted == []  # the outer lease still holds it
    assert not go_dir.exists()
    assert deleted == _trash(tmp_path) and len(deleted) == 1
    assert (deleted[0] / "go-build" / "entry").read_text() == "x"  # moved aside whole, for `delete`


@pytest.mark.parametrize("env", [{"LAGPILOT_KEEP_GO_CACHE": "1"}, {"LAGPILOT_GO_CACHE_SHARED": "1"}])
def test_keep_and_shared_leave_the_caches(tmp_path: Path, env: dict[str, str]) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    with gocache.lease(go_dir, env=env, delete=lambda p: pytest.fail(f"deleted {p}")):
        _filled(go_dir)
    assert (go_dir / "go-build" / "entry").exists()
    assert gocache.removes_at_release({}) and not gocache.removes_at_release(env)


def test_a_lease_with_nothing_built_removes_nothing(tmp_path: Path) -> None:
    """A warm `dev up` takes the lease too: no directory, nothing moved or deleted."""
    with gocache.lease(gocache.go_cache_dir(tmp_path), env={}, delete=lambda p: pytest.fail(f"deleted {p}")):
        pass
    assert _trash(tmp_path) == []


def test_the_background_delete_removes_a_read_only_module_cache(tmp_path: Path) -> None:
    go_dir = _filled(gocache.go_cache_dir(tmp_path))
    trash = tmp_path / (gocache.TRASH_PREFIX + "t")
    go_dir.rename(trash)
    # the same command delete_in_background starts, waited for here
    proc = subprocess.run(
        ["sh", "-c", 'chmod -R u+w "$1" 2>/dev/null; rm -rf "$1"', "rm-go-cache", str(trash)], check=False
    )
    assert proc.returncode == 0 and not trash.exists()


def test_go_env_points_go_at_the_directory(tmp_path: Path) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    assert gocache.go_env(go_dir, {}) == {
        "GOMODCACHE": str(go_dir / "go-mod"),
        "GOCACHE": str(go_dir / "go-build"),
    }
    assert gocache.go_env(go_dir, {"LAGPILOT_GO_CACHE_SHARED": "1"}) == {}
    assert gocache.build_env(tmp_path) == {"LAGPILOT_GO_CACHE_DIR": str(go_dir)}


def _script_build(go_dir: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """What a build script does around its `go` commands (dev/build-go-env.sh), with no `go` run:
    the lease, the caches written, the cleanup; prints the GOCACHE it was given."""
    script = (
        f'. "{GO_ENV}"; go_build_setup test "{out}"; echo "$GOCACHE"; mkdir -p "$GOCACHE"; cleanup_go_caches'
    )
    return subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "LAGPILOT_GO_CACHE_DIR": str(go_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_a_build_script_leaves_the_caches_to_a_lease_held_in_python(tmp_path: Path) -> None:
    """Stack.up's lease spans the node's and the policy agent's builds: the first script to finish
    must not remove what the next one uses."""
    go_dir = gocache.go_cache_dir(tmp_path)
    deleted: list[Path] = []
    with gocache.lease(go_dir, env={}, delete=deleted.append):
        proc = _script_build(go_dir, tmp_path / "out")
        assert proc.stdout.strip() == str(go_dir / "go-build")
        assert (go_dir / "go-build").is_dir()
        assert "in use by another build" in proc.stderr
    assert not go_dir.exists() and len(deleted) == 1


def test_a_build_script_alone_removes_its_caches(tmp_path: Path) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    proc = _script_build(go_dir, tmp_path / "out")
    assert "removing the Go caches in the background" in proc.stderr
    assert not go_dir.exists()  # moved aside at once; the background `rm` is not waited for


def test_a_build_script_keeps_its_caches_when_asked(tmp_path: Path) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    _script_build(go_dir, tmp_path / "out", LAGPILOT_KEEP_GO_CACHE="1")
    assert (go_dir / "go-build").is_dir()
    # and the lease is free again: a Python lease released now removes them
    with gocache.lease(go_dir, env={}, delete=lambda p: None):
        pass
    assert not go_dir.exists()


def test_a_build_script_run_by_hand_uses_its_own_directory(tmp_path: Path) -> None:
    """Without LAGPILOT_GO_CACHE_DIR (a script run by hand), OUT_DIR/src as before."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "LAGPILOT_GO_CACHE_DIR"}
    script = f'. "{GO_ENV}"; go_build_setup test "{out}"; echo "$GOCACHE $GO_WORK"; LAGPILOT_KEEP_GO_CACHE=1 cleanup_go_caches'
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.split() == [str(out / "src" / "go-build"), str(out / "src" / "work")]


def test_every_stack_go_build_is_given_the_cold_runs_directory() -> None:
    """The Python side of each Go build passes LAGPILOT_GO_CACHE_DIR, and each script reads it."""
    src = ROOT / "dev" / "src" / "lagpilot_dev"
    for module in ("kube.py", "node.py", "netpol.py", "helm.py", "kstatus.py"):
        assert "gocache.build_env(" in (src / module).read_text(), module
    assert "gocache.lease(" in (src / "images" / "tools.py").read_text()
    assert "gocache.lease(" in (src / "stack.py").read_text()
    for script in ("build-kube.sh", "build-node.sh", "build-netpol.sh"):
        assert "go_build_setup " in (ROOT / "dev" / script).read_text(), script
    for script in ("install-helm.sh", "build-kstatus-check.sh"):
        text = (ROOT / "dev" / script).read_text()
        assert 'go_cache_lease "$LAGPILOT_GO_CACHE_DIR"' in text and "cleanup_go_caches" in text, script


def test_what_an_interrupted_removal_left_goes_with_the_next(tmp_path: Path) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    stale = tmp_path / (gocache.TRASH_PREFIX + "old")
    stale.mkdir()
    deleted: list[Path] = []
    with gocache.lease(go_dir, env={}, delete=deleted.append):
        _filled(go_dir)
    assert deleted[0] == stale and len(deleted) == 2 and not go_dir.exists()


def test_a_build_scripts_lease_outlives_the_python_that_took_it(tmp_path: Path) -> None:
    """The scripts' lease is lagpilot_dev.gocache's, taken by a `python -m lagpilot_dev.gocache
    lease` that exits at once: the lock stays with the script's fd 9 until its cleanup, so a Python
    lease released meanwhile leaves the caches, and the script's release then removes them."""
    go_dir = gocache.go_cache_dir(tmp_path)
    go_on = tmp_path / "go-on"
    os.mkfifo(go_on)
    script = (
        f'. "{GO_ENV}"; go_build_setup test "{tmp_path / "out"}"; mkdir -p "$GOCACHE"; echo leased; '
        f'read -r _ < "{go_on}"; cleanup_go_caches'
    )
    proc = subprocess.Popen(
        ["bash", "-c", script],
        env={**os.environ, "LAGPILOT_GO_CACHE_DIR": str(go_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "leased"
        deleted: list[Path] = []
        with gocache.lease(go_dir, env={}, delete=deleted.append):
            pass
        assert deleted == [] and (go_dir / "go-build").is_dir()  # the script's lease held
        with open(go_on, "w") as w:
            w.write("\n")
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert gocache.REMOVING in err and not go_dir.exists()


def test_a_build_script_without_the_venv_fails_before_building(tmp_path: Path) -> None:
    """The lease needs the venv's python (LAGPILOT_VENV, else the repo's .venv): without it the
    script stops at its lease, saying so, rather than building with no lease."""
    go_dir = gocache.go_cache_dir(tmp_path)
    script = f'set -e; . "{GO_ENV}"; go_build_setup test "{tmp_path / "out"}"; echo built'
    proc = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "LAGPILOT_GO_CACHE_DIR": str(go_dir), "LAGPILOT_VENV": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0 and "built" not in proc.stdout
    assert f"needs {tmp_path / 'none' / 'bin' / 'python'}" in proc.stderr


def test_the_scripts_entry_point_refuses_a_descriptor_that_is_not_the_lease_file(tmp_path: Path) -> None:
    go_dir = gocache.go_cache_dir(tmp_path)
    gocache.lease_file(go_dir).write_text("")
    with open(tmp_path / "other", "w") as other, pytest.raises(ValueError, match="is not"):
        gocache.main(["lease", str(go_dir), "--fd", str(other.fileno())])
