#!/usr/bin/env bash
# Renders `optpipe report` in headless Chromium and checks from the screenshot that the charts
# are drawn: the op colours of the Gantt charts must cover real areas, so a blank page fails.
set -eu
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium_bin" ]; then
  echo "FAIL: chromium is not installed (./scripts/setup.sh --test installs it)"; exit 1
fi

"$bin" report --time-limit 2 -o "$tmp/report.html"
# Flags for a closed network and a root user; a fresh profile every time.
timeout 120 "$chromium_bin" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
  --user-data-dir="$tmp/profile" --window-size=1280,2600 --screenshot="$tmp/report.png" \
  "file://$tmp/report.html" >"$tmp/chromium.log" 2>&1 || { cat "$tmp/chromium.log"; exit 1; }
[ -s "$tmp/report.png" ] || { echo "FAIL: no screenshot"; cat "$tmp/chromium.log"; exit 1; }

# F, B, W (the fastest fitting family, ZB-V) and fused BW (the 1F1B reference chart).
/usr/bin/python3 "$here/png_colors.py" "$tmp/report.png" --min-pixels 2000 \
  --expect '#4e79a7' --expect '#f28e2b' --expect '#59a14f' --expect '#e15759'
echo "report renders with its charts"
