#!/usr/bin/env bash
# Cost of worker isolation: the same model served in process and with
# `--isolate` (engine in a worker process behind a Unix socket), driven
# alternately by `kiln bench serve` with one streaming client, ROUNDS times.
# Prints client-side decode throughput of both and the ratio per round.
#
#   scripts/bench-isolate.sh [MODEL]      (default: smollm2)
#
# Environment: ROUNDS (5), GEN (256), REQS (6), N (1: concurrent clients), THREADS (2).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=${1:-smollm2}
ROUNDS=${ROUNDS:-5}; GEN=${GEN:-256}; REQS=${REQS:-6}; N=${N:-1}; THREADS=${THREADS:-2}
cargo build --release -p kiln >&2
K=target/release/kiln
PIDS=""
trap 'for p in $PIDS; do kill $p 2>/dev/null || true; done' EXIT
start() { # port, extra
  local port=$1; shift
  "$K" serve --model "$MODEL" --port "$port" --threads "$THREADS" "$@" >"target/bench-isolate-$port.log" 2>&1 &
  PIDS="$PIDS $!"
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 0.2; done
  echo "server on $port did not come up" >&2; exit 1
}
start 18601
start 18602 --isolate
NAME=$(curl -sf http://127.0.0.1:18601/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
echo "| round | in process tok/s | isolated tok/s | isolated / in process | load 1m |"
echo "|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
  row=()
  for port in 18601 18602; do
    row+=("$("$K" bench serve --url "http://127.0.0.1:$port" --model "$NAME" --concurrency "$N" --requests "$REQS" \
      --prompt-len 64 --gen-len "$GEN" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["output_tok_s"])')")
  done
  python3 -c "import sys; a, b = map(float, sys.argv[1:3]); print(f'| $r | {a:.1f} | {b:.1f} | {b / a:.4f} | $(cut -d' ' -f1 /proc/loadavg) |')" "${row[@]}"
done
