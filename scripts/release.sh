#!/usr/bin/env bash
# Release build: static vmgate binaries for linux/amd64 and linux/arm64 (CGO_ENABLED=0;
# the SQLite driver is pure Go), and, when buildah is installed, the container image
# of packaging/Containerfile for the same platforms as one OCI archive; SHA-256
# checksums of them all in SHA256SUMS.
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

# The container image (packaging/Containerfile): built with buildah, daemonless, on vfs
# storage of its own under $out/.buildah (the machine's container storage is left
# alone), one image per platform above from the same Containerfile, FROM scratch with no
# RUN step, so the arm64 image is assembled on any host. Both go into one OCI archive,
# $out/vmgate-VERSION-image.oci.tar (an index naming vmgate:VERSION, one manifest per
# platform): `podman load -i` it, or push every platform with
# `skopeo copy --all oci-archive:FILE docker://YOUR-REGISTRY/vmgate:VERSION`.
if command -v buildah >/dev/null 2>&1; then
  ca=/etc/ssl/certs/ca-certificates.crt
  if [ ! -s "$ca" ]; then echo "$ca is missing: install Debian's ca-certificates" >&2; exit 1; fi
  ctx="$out/image"; mkdir -p "$ctx/data" "$ctx/tmp"; chmod 0755 "$ctx/data"; chmod 1777 "$ctx/tmp"
  cp "$ca" "$ctx/ca-certificates.crt"
  printf 'vmgate:x:65532:65532:vmgate:/data:/vmgate\n' > "$ctx/passwd"
  printf 'vmgate:x:65532:\n' > "$ctx/group"
  storage="$out/.buildah"
  buildah=(buildah --storage-driver vfs --root "$storage/root" --runroot "$storage/run")
  tag="${version//[^A-Za-z0-9_.-]/-}"
  archive="$out/vmgate-${version}-image.oci.tar"
  for p in $platforms; do
    cp "$out/vmgate-${version}-${p%/*}-${p#*/}" "$ctx/vmgate-${p%/*}-${p#*/}"
    echo "building the image for $p"
    "${buildah[@]}" build --quiet --platform "$p" --build-arg VERSION="$version" \
      --manifest "localhost/vmgate:${tag}" -f packaging/Containerfile "$ctx"
  done
  "${buildah[@]}" manifest push --quiet --all --format oci "localhost/vmgate:${tag}" \
    "oci-archive:${archive}:vmgate:${tag}"
  if [ "$(id -u)" -eq 0 ]; then rm -rf "$storage"; else buildah unshare rm -rf "$storage"; fi
  rm -rf "$ctx"
  echo "image: $archive ($platforms)"
else
  echo "buildah not found: the container image (packaging/Containerfile) was not built; install Debian's buildah"
fi
(cd "$out" && sha256sum vmgate-* > SHA256SUMS && cat SHA256SUMS)
