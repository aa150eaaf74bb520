#!/usr/bin/env bash
# Build what a real node needs and Debian does not serve (or serves end-of-life), from the Go module
# proxy, into OUT_DIR/bin:
#   kubelet, kube-scheduler, kube-proxy  at the stack's Kubernetes version (dev/build-kube.sh, CGO_ENABLED=0)
#   containerd, containerd-shim-runc-v2, ctr   (github.com/containerd/containerd/v2, CGO_ENABLED=0)
#   crictl                                      (sigs.k8s.io/cri-tools, CGO_ENABLED=0)
#   coredns                                     (github.com/coredns/coredns, CGO_ENABLED=0)
#   kube-router                                 (github.com/cloudnativelabs/kube-router/v2, CGO_ENABLED=0;
#                                                run with --run-firewall only: the NetworkPolicy agent)
#   pause                                       (build/pause/linux/pause.c of the same k8s.io/kubernetes
#                                                module, gcc -static: the sandbox image's only file)
# runc and the CNI plugins come from Debian (apt-get; see lagpilot_dev/node.py).
#
# Usage: build-node.sh OUT_DIR   (idempotent: skips what exists; Go caches under OUT_DIR/src are
# deleted after a successful build unless LAGPILOT_KEEP_GO_CACHE=1, as in build-kube.sh)
set -euo pipefail

CONTAINERD_VERSION="${LAGPILOT_CONTAINERD_VERSION:-v2.2.9}"
CRICTL_VERSION="${LAGPILOT_CRICTL_VERSION:-v1.34.0}"
COREDNS_VERSION="${LAGPILOT_COREDNS_VERSION:-v1.14.7}"
KUBE_ROUTER_VERSION="${LAGPILOT_KUBE_ROUTER_VERSION:-v2.1.0}"
out="${1:?usage: build-node.sh OUT_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=build-go-env.sh
. "$here/build-go-env.sh"   # KUBE_VERSION, log, the Go env and its caches, cleanup_go_caches
go_build_setup node "$out"
export GOBIN="$out/bin"

if [ ! -x "$out/bin/pause" ]; then
  log "compiling pause from k8s.io/kubernetes@$KUBE_VERSION build/pause/linux/pause.c"
  dir="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [ -f "$dir/build/pause/linux/pause.c" ] || { log "no pause.c in $dir"; exit 1; }
  gcc -Os -Wall -Werror -static -DVERSION="$KUBE_VERSION-lagpilot" -o "$out/bin/pause.tmp" "$dir/build/pause/linux/pause.c"
  strip "$out/bin/pause.tmp"
  mv "$out/bin/pause.tmp" "$out/bin/pause"
fi

# the Kubernetes node binaries: the control plane's build script, with the caches kept for us
LAGPILOT_KEEP_GO_CACHE=1 bash "$here/build-kube.sh" "$out" kubelet kube-scheduler kube-proxy

if [ ! -x "$out/bin/containerd" ] || [ ! -x "$out/bin/containerd-shim-runc-v2" ] || [ ! -x "$out/bin/ctr" ]; then
  log "building containerd $CONTAINERD_VERSION"
  m=github.com/containerd/containerd/v2
  go install -trimpath -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION" \
    "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "$m/cmd/ctr@$CONTAINERD_VERSION"
  log "containerd built"
fi

if [ ! -x "$out/bin/crictl" ]; then
  log "building crictl $CRICTL_VERSION"
  go install -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  log "crictl built"
fi

if [ ! -x "$out/bin/coredns" ]; then
  log "building coredns $COREDNS_VERSION"
  go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  log "coredns built"
fi

if [ ! -x "$out/bin/kube-router" ]; then
  log "building kube-router $KUBE_ROUTER_VERSION"
  m=github.com/cloudnativelabs/kube-router/v2
  go install -trimpath -ldflags "-s -w -X $m/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    "$m/cmd/kube-router@$KUBE_ROUTER_VERSION"
  log "kube-router built"
fi

cleanup_go_caches
ls -la "$out/bin" >&2
