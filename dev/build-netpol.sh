#!/usr/bin/env bash
# Build the real node's NetworkPolicy agent from the Go module proxy into OUT_DIR/bin:
#   kube-router-netpol   kube-router's policy controller (github.com/cloudnativelabs/kube-router/v2
#                        pkg/controllers/netpol, the release pinned in dev/netpol-agent/go.mod) behind
#                        a main that links nothing else of kube-router (dev/netpol-agent/main.go);
#                        CGO_ENABLED=0; run by lagpilot_dev/netpol.py with --run-firewall only
# kube-router's own binary links its router (GoBGP), service proxy and the AWS SDK whatever runs: 46 MB
# of Go source, 41 min of cold build measured on the loaded 2 cores. The policy controller alone is
# client-go, netlink and go-iptables: 11.4 min wall / 3.6 CPU-min cold at load 17-19 (2026-11-27),
# small enough for the default path (docs/node.md "NetworkPolicy").
#
# Usage: build-netpol.sh OUT_DIR   (idempotent: skips what exists). Go caches in $LAGPILOT_GO_CACHE_DIR
# (the stack's: one for every Go build of a cold run, so it runs beside the node's build and shares its
# modules and standard library), else OUT_DIR/src; deleted by the last build holding them unless
# LAGPILOT_KEEP_GO_CACHE=1 (dev/build-go-env.sh).
set -euo pipefail

out="${1:?usage: build-netpol.sh OUT_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=build-go-env.sh
. "$here/build-go-env.sh"   # log, the Go env and its caches, cleanup_go_caches
go_build_setup netpol "$out"
export GOFLAGS="-mod=readonly -buildvcs=false"   # the module's go.sum pins every dependency

if [ ! -x "$out/bin/kube-router-netpol" ]; then
  log "building kube-router's policy controller (dev/netpol-agent, kube-router $(awk '/cloudnativelabs\/kube-router/ {print $2; exit}' "$here/netpol-agent/go.mod"))"
  (cd "$here/netpol-agent" && go build -trimpath -ldflags "-s -w" -o "$out/bin/kube-router-netpol" .)
  log "kube-router-netpol built"
fi

cleanup_go_caches
ls -la "$out/bin/kube-router-netpol" >&2
