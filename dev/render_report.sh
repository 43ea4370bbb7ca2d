#!/usr/bin/env bash
# Renders a run's HTML report (<out>/report.html, see train/report.h) to a PNG
# with headless Chromium (Debian's `chromium`), e.g. for the picture in docs/training.md.
# Usage: bash dev/render_report.sh OUT_DIR_OR_REPORT.html [PNG] [WIDTHxHEIGHT]
#        (default PNG: next to the report, report.png; default size 1280x1850: four rows of two charts and the configuration)
set -euo pipefail
src=${1:?usage: bash dev/render_report.sh OUT_DIR_OR_REPORT.html [PNG] [WIDTHxHEIGHT]}
[ -d "$src" ] && src="$src/report.html"
[ -f "$src" ] || { echo "error: $src: no such report" >&2; exit 1; }
png=${2:-$(dirname "$src")/report.png}
size=${3:-1280x1850}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "error: no chromium found (Debian: apt-get install chromium)" >&2; exit 1; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: Chromium's sandbox refuses to run as root (CI, containers)
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
    --window-size="${size/x/,}" --screenshot="$(realpath -m "$png")" "file://$(realpath "$src")" 2>/dev/null
[ -s "$png" ] || { echo "error: chromium wrote no $png" >&2; exit 1; }
echo "$png"
