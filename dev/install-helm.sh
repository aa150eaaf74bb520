#!/usr/bin/env bash
# Install a pinned Helm 3 (default) or Helm 4 (LAGPILOT_HELM_VERSION=v4.x.y) binary into
# OUT_DIR/bin/helm, built from the Go module proxy.
#
# Debian has no helm package and nothing but package registries is reachable, so Helm is built
# from source: helm.sh/helm/v3's go.mod (checked for v3.21.4 and v3.22.0) has no replace
# directives, so a plain `go install pkg@version` works (unlike k8s.io/kubernetes, see
# build-kube.sh). Cold: downloads ~300 MB of modules and compiles for 5-10 min on 2 cores.
#
# Usage: install-helm.sh OUT_DIR    (idempotent: does nothing when OUT_DIR/bin/helm is the pinned version)
set -euo pipefail

HELM_VERSION="${LAGPILOT_HELM_VERSION:-v3.22.0}"
out="${1:?usage: install-helm.sh OUT_DIR}"
bin="$out/bin/helm"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=build-go-env.sh
. "$here/build-go-env.sh"   # go_cache_lease, cleanup_go_caches (log is this script's own, below)
log() { printf '[install-helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x "$bin" ] && "$bin" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  exit 0
fi
command -v go >/dev/null || { log "go is not on PATH: needed to build helm $HELM_VERSION"; exit 1; }

major="${HELM_VERSION%%.*}"   # v3 or v4: the module path helm.sh/helm/<major>
case "$major" in v3|v4) ;; *) log "unsupported helm version $HELM_VERSION (v3.x.y or v4.x.y)"; exit 1;; esac
mod="helm.sh/helm/$major"

mkdir -p "$out/bin" "$out/tmp"
# from the stack (lagpilot_dev.helm): the cold run's shared Go caches (dev/build-go-env.sh); run by
# hand: Go's own caches, as before
[ -z "${LAGPILOT_GO_CACHE_DIR:-}" ] || go_cache_lease "$LAGPILOT_GO_CACHE_DIR"
log "building helm $HELM_VERSION from the Go module proxy (cold: 5-10 min on 2 cores)"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
# What helm's own Makefile stamps in; without it `helm version` says v3.x-dev and lint assumes
# an old default Kubernetes version.
ldf="-s -w -X $mod/internal/version.version=$HELM_VERSION -X $mod/internal/version.gitTreeState=clean"
# Helm 4 marks a build without metadata "unreleased"; its default Kubernetes version for
# template/lint comes from the client-go it was built with (read at run time), no -X needed
[ "$major" = v4 ] && ldf+=" -X $mod/internal/version.metadata="
# ... and the Kubernetes version `helm template`/`lint` assume without a cluster: the minor of the
# k8s.io/client-go that this helm release builds against (as the Makefile derives it)
modfile="$(go mod download -json "$mod@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
k8s_minor="$(awk '$1 == "k8s.io/client-go" {split($2, v, "."); print v[2]; exit}' "$modfile")"
if [ "$major" = v3 ] && [ -n "$k8s_minor" ]; then
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldf+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
  done
fi
# build into a temp GOBIN, then move: an interrupted build never leaves a half-written binary
GOBIN="$out/tmp" go install -trimpath -ldflags "$ldf" "$mod/cmd/helm@$HELM_VERSION"
mv "$out/tmp/helm" "$bin"
cleanup_go_caches
log "helm built: $("$bin" version --short)"
