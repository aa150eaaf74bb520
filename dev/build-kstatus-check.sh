#!/usr/bin/env bash
# Build dev/kstatus-check (kstatus' verdict on objects read from stdin, sigs.k8s.io/cli-utils
# v0.37.2) into OUT_DIR/bin/kstatus-check, from the Go module proxy (go.mod/go.sum pin it).
# Cold: ~100 MB of modules and 1-3 min of compiling on 2 cores.
#
# Usage: build-kstatus-check.sh OUT_DIR   (rebuilds only when main.go, go.mod or go.sum changed)
set -euo pipefail
out="${1:?usage: build-kstatus-check.sh OUT_DIR}"
src="$(cd "$(dirname "$0")/kstatus-check" && pwd)"
bin="$out/bin/kstatus-check"
stamp="$out/bin/.source.sha256"
sum="$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -d' ' -f1)"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
  exit 0
fi
command -v go >/dev/null || { echo "go is not on PATH: needed to build kstatus-check" >&2; exit 1; }
mkdir -p "$out/bin"
# from the stack (lagpilot_dev.kstatus): the cold run's shared Go caches (dev/build-go-env.sh); run by
# hand: Go's own caches, as before
_go_build_name=kstatus-check
# shellcheck source=build-go-env.sh
. "$(dirname "$0")/build-go-env.sh"
[ -z "${LAGPILOT_GO_CACHE_DIR:-}" ] || go_cache_lease "$LAGPILOT_GO_CACHE_DIR"
(cd "$src" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
cleanup_go_caches
echo "$sum" > "$stamp"
echo "kstatus-check built: $bin" >&2
