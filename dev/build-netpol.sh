#!/usr/bin/env bash
# Build the real node's NetworkPolicy agent from the Go module proxy into OUT_DIR/bin:
#   kube-router   (github.com/cloudnativelabs/kube-router/v2, CGO_ENABLED=0; run with --run-firewall
#                  only: lagpilot_dev/netpol.py)
# Run by the `netpol` part on first use, not by the node's build (dev/build-node.sh): its cold build
# (46 MB of Go source, most of it client-go, the AWS SDK and GoBGP that kube-router links whatever
# runs; 41 min measured on the loaded 2 cores) is paid only by what needs policies enforced
# (docs/node.md "Cold build").
#
# Usage: build-netpol.sh OUT_DIR   (idempotent: skips what exists). Go caches in OUT_DIR/src,
# deleted at the end unless LAGPILOT_KEEP_GO_CACHE=1 (the caller holds the node's build lock: the
# node's build uses the same directory).
set -euo pipefail

KUBE_ROUTER_VERSION="${LAGPILOT_KUBE_ROUTER_VERSION:-v2.1.0}"
out="${1:?usage: build-netpol.sh OUT_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=build-go-env.sh
. "$here/build-go-env.sh"   # log, the Go env and its caches, cleanup_go_caches
go_build_setup netpol "$out"
export GOBIN="$out/bin"

if [ ! -x "$out/bin/kube-router" ]; then
  log "building kube-router $KUBE_ROUTER_VERSION"
  m=github.com/cloudnativelabs/kube-router/v2
  go install -trimpath -ldflags "-s -w -X $m/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    "$m/cmd/kube-router@$KUBE_ROUTER_VERSION"
  log "kube-router built"
fi

cleanup_go_caches
ls -la "$out/bin/kube-router" >&2
