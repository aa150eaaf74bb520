#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager and kubectl from the Go module proxy.
#
# k8s.io/kubernetes pins its staging modules at v0.0.0 with replace directives pointing into its
# own tree, so `go install k8s.io/kubernetes/cmd/...@vX` is refused. The documented workaround
# (kubernetes/kubernetes#79384) is a wrapper module that requires k8s.io/kubernetes and replaces
# every staging module with its published v0.Y.Z tag; the list is generated from the release's go.mod.
#
# Usage: build-kube.sh OUT_DIR [BINARY...]   (idempotent, skips what exists). BINARY: etcd or a
# k8s.io/kubernetes/cmd/ name, landing in OUT_DIR/bin; or an absolute path /DIR/NAME, landing there
# (dev/build-node.sh builds the node's and, when missing, the control plane's binaries in ONE run:
# one `go build` of every k8s.io/kubernetes command, one module download, one build cache).
# Default: etcd kube-apiserver kube-controller-manager kubectl (the control plane).
set -euo pipefail

ETCD_VERSION="${LAGPILOT_ETCD_VERSION:-v3.6.16}"
out="${1:?usage: build-kube.sh OUT_DIR [BINARY...]}"
shift
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(etcd kube-apiserver kube-controller-manager kubectl)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=build-go-env.sh
. "$here/build-go-env.sh"   # KUBE_VERSION, log, the Go env and its caches, cleanup_go_caches
go_build_setup kube "$out"

etcd_dest=""
need=()   # k8s.io/kubernetes/cmd/ packages
dests=()  # where each lands
for b in "${wanted[@]}"; do
  case "$b" in /*) dest="$b" ;; *) dest="$out/bin/$b" ;; esac
  [ ! -x "$dest" ] || continue
  mkdir -p "$(dirname "$dest")"
  if [ "$(basename "$dest")" = etcd ]; then etcd_dest="$dest"
  else need+=("k8s.io/kubernetes/cmd/$(basename "$dest")"); dests+=("$dest")
  fi
done

if [ -n "$etcd_dest" ]; then
  log "building etcd $ETCD_VERSION"
  w="$GO_WORK/etcd-$ETCD_VERSION"; rm -rf "$w"; mkdir -p "$w"; cd "$w"
  go mod init lagpilot.local/etcdbuild >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
  go build -trimpath -ldflags "-s -w" -o "$etcd_dest.tmp" go.etcd.io/etcd/server/v3
  mv "$etcd_dest.tmp" "$etcd_dest"
  log "etcd built"
fi

if [ ${#need[@]} -gt 0 ]; then
  log "building ${need[*]} at $KUBE_VERSION (cold: 15-30 min on 2 cores)"
  w="$GO_WORK/kube-$KUBE_VERSION"; mkdir -p "$w"; cd "$w"
  minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  staging="v0.${KUBE_VERSION#v1.}"
  if [ ! -f go.mod.done ]; then
    rm -f go.mod go.sum
    modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBE_VERSION.mod"
    [ -f "$modfile" ] || go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" >/dev/null
    {
      echo "module lagpilot.local/kubebuild"
      echo
      echo "go 1.25.0"
      echo
      echo "godebug default=go1.25"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      # every staging module the release points into ./staging -> its published tag
      awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// {print "replace " $1 " => " $1 " " v}' "$modfile"
    } > go.mod
    go mod download k8s.io/kubernetes >/dev/null
    touch go.mod.done
  fi
  ldf="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  # one `go build` for all of them: each package compiled once, linked into every binary that needs it
  stage="$w/bin"; rm -rf "$stage"; mkdir -p "$stage"
  go build -trimpath -ldflags "$ldf" -o "$stage/" "${need[@]}"
  for i in "${!need[@]}"; do
    mv "$stage/$(basename "${need[$i]}")" "${dests[$i]}.tmp" && mv "${dests[$i]}.tmp" "${dests[$i]}"
  done
  log "kubernetes binaries built"
fi
cleanup_go_caches
[ ! -x "$out/bin/kubectl" ] || "$out/bin/kubectl" version --client 2>/dev/null | head -1 >&2 || true
