#!/usr/bin/env bash
# The chat page in a real browser: headless Chromium driven by Selenium
# (tests/e2e_web/chat_page.py) against `kiln serve` on the default model.
# Installs Debian's chromium and chromium-driver with apt-get when they are
# missing, and Selenium into a venv under target/; fails loudly when either
# cannot be had. Screenshots go to target/web-screenshots.
#
#   scripts/test-web.sh            # KILN_BIN (default target/debug/kiln)
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_BIN=${KILN_BIN:-target/debug/kiln}
OUT=${KILN_WEB_SCREENSHOTS:-target/web-screenshots}
VENV=${KILN_WEB_VENV:-target/web-venv}
t0=$(date +%s)

[ -x "$KILN_BIN" ] || { echo "error: $KILN_BIN is missing: build it (cargo build -p kiln)" >&2; exit 1; }
if ! command -v "${CHROME:-chromium}" >/dev/null || ! command -v "${CHROMEDRIVER:-chromedriver}" >/dev/null; then
  echo "== installing chromium and chromium-driver with apt-get"
  command -v apt-get >/dev/null || { echo "error: chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver)" >&2; exit 1; }
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null; } \
    || { echo "error: apt-get install chromium chromium-driver failed (above)" >&2; exit 1; }
fi
if ! "$VENV/bin/python" -c "import selenium" 2>/dev/null; then
  echo "== installing selenium into $VENV"
  python3 -m venv "$VENV" || { echo "error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$VENV/bin/pip" install -q --disable-pip-version-check selenium || { echo "error: pip install selenium failed (above)" >&2; exit 1; }
fi
"$KILN_BIN" pull smollm2 >/dev/null
CHROME=$(command -v "${CHROME:-chromium}") CHROMEDRIVER=$(command -v "${CHROMEDRIVER:-chromedriver}") \
  "$VENV/bin/python" tests/e2e_web/chat_page.py --kiln "$KILN_BIN" --out "$OUT"
echo "web test: $(( $(date +%s) - t0 )) s in all"
