#!/usr/bin/env bash
# End-to-end tests of `kiln serve` with real clients (openai, ollama, curl)
# against the real default model, plus the server-overhead and follow-up
# TTFT measurements (tests/e2e_server/test_numbers.py).
#
#   scripts/e2e-server.sh [pytest args...]
#
# Env: KILN_E2E_VENV (default target/e2e-venv), KILN_E2E_PORT (default: a
# free port), CARGO_TARGET_DIR, KILN_E2E_RESULTS (default target/e2e-server-results.json).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VENV=${KILN_E2E_VENV:-$ROOT/target/e2e-venv}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

if [ ! -x "$VENV/bin/pytest" ] || ! "$VENV/bin/python" -c "import openai, ollama" 2>/dev/null; then
  echo "== installing pytest, openai, ollama into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r tests/e2e_server/requirements.txt
fi

echo "== building kiln (release)"
cargo build --release -p kiln
KILN_BIN="$TARGET/release/kiln"
"$KILN_BIN" pull smollm2 >/dev/null
"$KILN_BIN" pull all-minilm >/dev/null

PORT=${KILN_E2E_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
LOG=$(mktemp -t kiln-e2e-server.XXXXXX.log)
TIMINGS=$(mktemp -t kiln-e2e-timings.XXXXXX.csv)
echo "== starting kiln serve on 127.0.0.1:$PORT (log $LOG, timings $TIMINGS)"
"$KILN_BIN" serve --model smollm2 --port "$PORT" --log info --timings-file "$TIMINGS" --max-body-bytes 4000000 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "server exited:"; cat "$LOG"; exit 1; }
  sleep 0.2
done

export KILN_E2E_URL="http://127.0.0.1:$PORT" KILN_BIN KILN_E2E_TIMINGS="$TIMINGS"
export KILN_E2E_RESULTS=${KILN_E2E_RESULTS:-$TARGET/e2e-server-results.json}
echo "== pytest (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
status=0
"$VENV/bin/pytest" tests/e2e_server -v -s "$@" || status=$?
echo "== results in $KILN_E2E_RESULTS; timing records in $TIMINGS; server log $LOG"
exit $status
