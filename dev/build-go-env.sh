# Sourced (not run) by dev/build-kube.sh, dev/build-node.sh and dev/build-netpol.sh (go_cache_lease and
# cleanup_go_caches also by dev/install-helm.sh and dev/build-kstatus-check.sh): what the Go builds share.
#   go_build_setup NAME OUT_DIR   log() as "[build-NAME HH:MM:SS] ...", OUT_DIR/bin made, static Go builds
#                                 (CGO_ENABLED=0) with the module's own go.mod rules, go_cache_lease
#                                 with OUT_DIR/src as the default directory
#   go_cache_lease DEFAULT_DIR    the Go caches in $LAGPILOT_GO_CACHE_DIR, else DEFAULT_DIR: GOMODCACHE
#                                 DIR/go-mod, GOCACHE DIR/go-build, work dirs under GO_WORK=DIR/work; and a
#                                 shared lease on them (flock on DIR.lease, fd 9) held until cleanup
#   cleanup_go_caches             drop the lease; when it was the last one, move DIR aside and delete it in
#                                 the background (nothing waits for the 1-2 min of `rm` of ~6 GB)
# Both call lagpilot_dev.gocache (`python -m lagpilot_dev.gocache lease|release DIR`, the venv's python),
# the one implementation of the lease, which the stack's Python drivers use too.
# The stack's drivers (lagpilot_dev/gocache.py) set LAGPILOT_GO_CACHE_DIR=<cache>/go and hold a lease of
# their own for a whole cold run, so every Go build of the run (control plane and node, NetworkPolicy
# agent, helm, kstatus-check, buildah) shares one module cache and one build cache, deleted once at the
# end (measured: 0.9 GB of modules + 3.0 GB of build cache for Kubernetes v1.35.4 alone); the binaries
# are what is kept. LAGPILOT_KEEP_GO_CACHE=1 keeps the caches (a rebuild is then ~35 s instead of
# ~5 min); LAGPILOT_GO_CACHE_SHARED=1 uses Go's own (user-wide) caches instead, never removed.

KUBE_VERSION="${LAGPILOT_KUBE_VERSION:-v1.35.4}"

go_build_setup() {
  _go_build_name="$1" _go_build_out="$2"
  mkdir -p "$_go_build_out/bin"
  export GOFLAGS="-mod=mod -buildvcs=false"
  export CGO_ENABLED=0
  go_cache_lease "$_go_build_out/src"
}

log() { printf '[build-%s %s] %s\n' "$_go_build_name" "$(date +%H:%M:%S)" "$*" >&2; }

# the lease itself is lagpilot_dev.gocache's (one implementation, with the Python drivers' leases): it
# locks and releases fd 9, opened here on DIR.lease, with the venv's python (./dev/setup made it before
# any driver runs a build; LAGPILOT_VENV as dev/lint reads it)
_go_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_gocache() {
  _go_py="${LAGPILOT_VENV:-$_go_repo/.venv}/bin/python"
  [ -x "$_go_py" ] || { echo "the Go cache lease needs $_go_py (./dev/setup makes it)" >&2; return 1; }
  "$_go_py" -m lagpilot_dev.gocache "$@"
}

go_cache_lease() {
  _go_dir="${LAGPILOT_GO_CACHE_DIR:-$1}"
  GO_WORK="$_go_dir/work"
  if [ "${LAGPILOT_GO_CACHE_SHARED:-0}" = 1 ]; then
    GO_WORK="$1/work"; mkdir -p "$GO_WORK"; _go_dir=""
    return 0
  fi
  mkdir -p "$(dirname "$_go_dir")"
  exec 9>>"$_go_dir.lease"
  _gocache lease "$_go_dir"
  mkdir -p "$GO_WORK"
  export GOMODCACHE="$_go_dir/go-mod" GOCACHE="$_go_dir/go-build"
}

cleanup_go_caches() {
  [ -n "${_go_dir:-}" ] || return 0
  # the last lease moves DIR aside and deletes it in the background (not with LAGPILOT_KEEP_GO_CACHE=1);
  # another build's (or a cold run's driver's) lease leaves it to that one's release
  _go_said="$(_gocache release "$_go_dir")"
  exec 9>&-
  [ -z "$_go_said" ] || log "$_go_said"
}
