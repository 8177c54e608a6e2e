#!/usr/bin/env bash
# Soak: `kiln serve` with the default model under many concurrent streaming
# clients (mixed lengths, random disconnects, some invalid requests) for a
# bounded time; fails on any failed request, RSS drift above 2% after the
# warm-up, or a KV block still in use after all clients leave.
#
#   scripts/soak.sh [SECONDS] [CLIENTS]      (default 600 s, 200 clients)
#
# Results: target/soak/{summary.json,rss.csv,rss.svg}. Needs python3; httpx
# is installed with pip into target/soak-venv.
#
# Environment: KILN_BIN (a built kiln; default: cargo build --release),
# MAX_DRIFT (0.02; short runs, whose "after warm-up" still includes the KV
# cache's pages being committed for the first time, need a looser bound; `inf` turns the drift check off).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SECS=${1:-600}
CLIENTS=${2:-200}
VENV=${KILN_SOAK_VENV:-$ROOT/target/soak-venv}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if ! "$VENV/bin/python" -c "import httpx" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q httpx
fi
if [ -z "${KILN_BIN:-}" ]; then
  cargo build --release -p kiln
  KILN_BIN="$TARGET/release/kiln"
fi
"$KILN_BIN" pull smollm2 >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG="$TARGET/soak-server.log"
"$KILN_BIN" serve --model smollm2 --port "$PORT" --max-queue 512 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "server exited:"; cat "$LOG"; exit 1; }
  sleep 0.2
done
echo "== soak: $CLIENTS clients for ${SECS}s against 127.0.0.1:$PORT (load $(cut -d' ' -f1-3 /proc/loadavg))"
"$VENV/bin/python" tests/soak/soak.py --url "http://127.0.0.1:$PORT" --model smollm2 --pid "$SERVER" --clients "$CLIENTS" \
  --duration "$SECS" --max-drift "${MAX_DRIFT:-0.02}" --out "$TARGET/soak"
kill -0 $SERVER 2>/dev/null || { echo "error: the server died during the soak; log: $LOG" >&2; exit 1; }
