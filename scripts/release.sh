#!/usr/bin/env bash
# Release build: static vmgate binaries for linux/amd64 and linux/arm64 (CGO_ENABLED=0;
# the SQLite driver is pure Go), their SHA-256 checksums, and, when a Docker daemon
# answers, the container image from packaging/Containerfile.
#
#   scripts/release.sh [VERSION]        # default: git describe, else "dev"
#   OUT=dist PLATFORMS="linux/amd64" scripts/release.sh v1.0.0
#
# Every binary is checked: statically linked (no ELF interpreter) and stamped with the
# version and commit (`vmgate version --json`, run for the host's platform).
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then commit="${commit}+modified"; fi
date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
out="${OUT:-dist}"
platforms="${PLATFORMS:-linux/amd64 linux/arm64}"
ldflags="-s -w -X main.version=${version} -X main.commit=${commit} -X main.buildDate=${date}"

rm -rf "$out"; mkdir -p "$out"
for p in $platforms; do
  os="${p%/*}"; arch="${p#*/}"
  bin="$out/vmgate-${version}-${os}-${arch}"
  echo "building $bin"
  CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags "$ldflags" -o "$bin" ./cmd/vmgate
  if go version -m "$bin" | grep -q 'CGO_ENABLED=1'; then echo "$bin: built with cgo" >&2; exit 1; fi
  if command -v readelf >/dev/null 2>&1 && readelf -l "$bin" | grep -q 'INTERP'; then
    echo "$bin: dynamically linked" >&2; exit 1
  fi
  if [ "$os/$arch" = "$(go env GOOS)/$(go env GOARCH)" ]; then
    "$bin" version --json | grep -q "\"commit\":\"${commit}\"" || { echo "$bin: version not stamped" >&2; exit 1; }
    "$bin" version
  fi
done
(cd "$out" && sha256sum vmgate-* > SHA256SUMS && cat SHA256SUMS)

# The image needs no base image from a registry: FROM scratch, the static binary, the
# build host's CA certificates (for PVE endpoints with a public CA), a non-root user.
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  ctx="$out/image"; mkdir -p "$ctx/data"
  cp "$out/vmgate-${version}-linux-amd64" "$ctx/vmgate"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  printf 'vmgate:x:65532:65532:vmgate:/data:/vmgate\n' > "$ctx/passwd"
  printf 'vmgate:x:65532:\n' > "$ctx/group"
  docker build -f packaging/Containerfile -t "vmgate:${version}" "$ctx"
else
  echo "no Docker daemon: container image not built (packaging/Containerfile)"
fi
