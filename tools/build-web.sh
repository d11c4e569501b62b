#!/usr/bin/env bash
# Build the browser terminal's assets: xterm.js and its fit add-on from npm, at the versions
# web/terminal/package-lock.json pins, copied into gpuslice/manager/proxy/static/vendor (not in
# git; the package, and a wheel, carry them from there). Does nothing when they are up to date.
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpuslice/manager/proxy/static/vendor
digest=$(sha256sum web/terminal/package-lock.json | cut -d' ' -f1)
if [ -f "$out/.lock-digest" ] && [ "$(cat "$out/.lock-digest")" = "$digest" ]; then
    exit 0
fi
command -v npm >/dev/null || { echo "build-web: npm is missing (tools/host-setup.sh installs it)" >&2; exit 1; }
(cd web/terminal && npm ci --no-audit --no-fund --loglevel=error)
mkdir -p "$out"
modules=web/terminal/node_modules/@xterm
cp "$modules/xterm/lib/xterm.js" "$modules/xterm/css/xterm.css" \
   "$modules/addon-fit/lib/addon-fit.js" "$out/"
echo "$digest" > "$out/.lock-digest"
echo "build-web: xterm.js $(node -p "require('./$modules/xterm/package.json').version") in $out"
