#!/bin/sh
# Re-vendors the console's browser libraries into the web UI's embedded assets
# (issue 21, docs/decisions/0104): noVNC for VNC, xterm.js and its fit add-on for
# terminals, each at the pinned version below, with its licence. Only what the
# console page loads is copied: noVNC's ES modules (core/, vendor/pako/), xterm's
# ES module and stylesheet, the add-on's ES module. No build step, nothing at run
# time: the files are served as they are, from vmgate itself.
#
# Usage: scripts/vendor-console.sh   (needs npm; run from anywhere)
set -eu
NOVNC=1.7.0
XTERM=6.0.0
FIT=0.11.0

root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/internal/webui/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cd "$tmp"
npm pack --silent "@novnc/novnc@$NOVNC" "@xterm/xterm@$XTERM" "@xterm/addon-fit@$FIT" >/dev/null
for f in *.tgz; do
	mkdir "${f%.tgz}"
	tar xzf "$f" -C "${f%.tgz}"
done

rm -rf "$dest"
mkdir -p "$dest/novnc-$NOVNC" "$dest/xterm-$XTERM" "$dest/xterm-addon-fit-$FIT"

n=novnc-novnc-$NOVNC/package
(cd "$n" && find core vendor/pako -name '*.js' | while read -r p; do
	mkdir -p "$dest/novnc-$NOVNC/$(dirname "$p")"
	cp "$p" "$dest/novnc-$NOVNC/$p"
done)
cp "$n/LICENSE.txt" "$dest/novnc-$NOVNC/LICENSE.txt"
cp "$n/vendor/pako/LICENSE" "$dest/novnc-$NOVNC/vendor/pako/LICENSE" 2>/dev/null || true

x=xterm-xterm-$XTERM/package
cp "$x/lib/xterm.mjs" "$x/css/xterm.css" "$x/LICENSE" "$dest/xterm-$XTERM/"

a=xterm-addon-fit-$FIT/package
cp "$a/lib/addon-fit.mjs" "$a/LICENSE" "$dest/xterm-addon-fit-$FIT/"

# The source maps are not vendored: no reference to them either.
find "$dest" -name '*.mjs' -exec sed -i '/^\/\/# sourceMappingURL=/d' {} +

echo "vendored noVNC $NOVNC, xterm.js $XTERM, addon-fit $FIT into $dest"
