#!/usr/bin/env bash
# Build KEDA's keda-operator and keda-metrics-apiserver (its `adapter`) from the Go module proxy.
#
# github.com/kedacore/keda/v2 carries replace directives in its go.mod (k8s.io/* pinned, prometheus,
# cel-go), which `go install module@version` refuses and a wrapper module would ignore. So the
# released module is downloaded from the proxy (`go mod download`), copied out of the read-only module
# cache and built as the main module, with its own go.mod and go.sum: exactly the dependency set
# KEDA released. CGO_ENABLED=0 as KEDA's own Makefile builds it. The module's config/crd is kept
# beside the binaries (the part installs KEDA's CRDs from there).
#
# The release's manifests the part applies are copied beside them (OUT_DIR/config): config/crd/bases (the
# CRDs), config/general (the namespace), config/service_account, config/rbac and config/metrics-server's
# role and role_binding (KEDA's own RBAC, so its processes run with exactly the permissions it ships with).
#
# Usage: build-keda.sh OUT_DIR   (binaries in OUT_DIR/bin, manifests in OUT_DIR/config; idempotent).
set -euo pipefail

KEDA_VERSION="${LAGPILOT_KEDA_VERSION:-v2.20.2}"
out="${1:?usage: build-keda.sh OUT_DIR}"
mkdir -p "$out/bin" "$out/src"
log() { printf '[build-keda %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
# Caches of this build live under OUT_DIR/src and are removed after a successful build (as
# build-kube.sh does); LAGPILOT_KEEP_GO_CACHE=1 keeps them, LAGPILOT_GO_CACHE_SHARED=1 uses Go's own.
if [ "${LAGPILOT_GO_CACHE_SHARED:-0}" != 1 ]; then
  export GOMODCACHE="$out/src/go-mod" GOCACHE="$out/src/go-build"
fi

if [ -x "$out/bin/keda-operator" ] && [ -x "$out/bin/keda-metrics-apiserver" ] && [ -f "$out/config/.complete" ]; then
  exit 0
fi
log "downloading github.com/kedacore/keda/v2@$KEDA_VERSION"
w="$out/src/keda-$KEDA_VERSION"
if [ ! -f "$w/go.mod" ]; then
  tmp="$out/src/probe"; rm -rf "$tmp"; mkdir -p "$tmp"; cd "$tmp"
  go mod init lagpilot.local/kedaprobe >/dev/null 2>&1
  dir="$(go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -n "$dir" ] && [ -f "$dir/go.mod" ] || { log "no module dir for $KEDA_VERSION"; exit 1; }
  rm -rf "$w"; cp -r "$dir" "$w"; chmod -R u+w "$w"
  cd "$out"; rm -rf "$tmp"
fi
cd "$w"
ldf="-s -w -X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v} -X github.com/kedacore/keda/v2/version.GitCommit=module-proxy"
log "building keda-operator and keda-metrics-apiserver $KEDA_VERSION (cold: many minutes on 2 cores)"
if [ ! -x "$out/bin/keda-operator" ]; then
  go build -trimpath -ldflags "$ldf" -o "$out/bin/keda-operator.tmp" ./cmd/operator
  mv "$out/bin/keda-operator.tmp" "$out/bin/keda-operator"
  log "keda-operator built"
fi
if [ ! -x "$out/bin/keda-metrics-apiserver" ]; then
  go build -trimpath -ldflags "$ldf" -o "$out/bin/keda-metrics-apiserver.tmp" ./cmd/adapter
  mv "$out/bin/keda-metrics-apiserver.tmp" "$out/bin/keda-metrics-apiserver"
  log "keda-metrics-apiserver built"
fi
rm -rf "$out/config.tmp"; mkdir -p "$out/config.tmp/crd" "$out/config.tmp/rbac"
cp "$w"/config/crd/bases/*.yaml "$out/config.tmp/crd/"
cp "$w"/config/general/namespace.yaml "$w"/config/service_account/service_account.yaml \
   "$w"/config/rbac/role.yaml "$w"/config/rbac/role_binding.yaml "$out/config.tmp/rbac/"
cp "$w"/config/metrics-server/role.yaml "$out/config.tmp/rbac/metrics-server-role.yaml"
cp "$w"/config/metrics-server/role_binding.yaml "$out/config.tmp/rbac/metrics-server-role_binding.yaml"
touch "$out/config.tmp/.complete"
rm -rf "$out/config"; mv "$out/config.tmp" "$out/config"
if [ "${LAGPILOT_GO_CACHE_SHARED:-0}" != 1 ] && [ "${LAGPILOT_KEEP_GO_CACHE:-0}" != 1 ]; then
  chmod -R u+w "$out/src" 2>/dev/null || true
  rm -rf "$out/src"
  log "removed the build's Go caches (LAGPILOT_KEEP_GO_CACHE=1 keeps them)"
fi
log "done"
