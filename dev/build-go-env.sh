# Sourced (not run) by dev/build-kube.sh and dev/build-node.sh: what both builds share.
#   go_build_setup NAME OUT_DIR   log() as "[build-NAME HH:MM:SS] ...", OUT_DIR/bin and OUT_DIR/src made,
#                                 static Go builds (CGO_ENABLED=0) with the module's own go.mod rules,
#                                 and Go's module and build caches under OUT_DIR/src
#   cleanup_go_caches             delete OUT_DIR/src after a successful build
# Go's caches for a build (measured: 0.9 GB of modules + 3.0 GB of build cache for Kubernetes
# v1.35.4) are deleted after it, so the only disk kept is the binaries (~280 MB).
# LAGPILOT_KEEP_GO_CACHE=1 keeps them (a rebuild is then ~35 s instead of ~5 min);
# LAGPILOT_GO_CACHE_SHARED=1 uses Go's own (shared, user-wide) caches instead.

KUBE_VERSION="${LAGPILOT_KUBE_VERSION:-v1.35.4}"

go_build_setup() {
  _go_build_name="$1" _go_build_out="$2"
  mkdir -p "$_go_build_out/bin" "$_go_build_out/src"
  export GOFLAGS="-mod=mod -buildvcs=false"
  export CGO_ENABLED=0
  if [ "${LAGPILOT_GO_CACHE_SHARED:-0}" != 1 ]; then
    export GOMODCACHE="$_go_build_out/src/go-mod" GOCACHE="$_go_build_out/src/go-build"
  fi
}

log() { printf '[build-%s %s] %s\n' "$_go_build_name" "$(date +%H:%M:%S)" "$*" >&2; }

cleanup_go_caches() {
  if [ "${LAGPILOT_GO_CACHE_SHARED:-0}" != 1 ] && [ "${LAGPILOT_KEEP_GO_CACHE:-0}" != 1 ]; then
    chmod -R u+w "$_go_build_out/src" 2>/dev/null || true   # the module cache is read-only by design
    rm -rf "$_go_build_out/src"
    log "removed the build's Go caches (LAGPILOT_KEEP_GO_CACHE=1 keeps them)"
  fi
}
