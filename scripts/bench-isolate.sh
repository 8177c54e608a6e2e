#!/usr/bin/env bash
# Cost of worker isolation: the same model served in process and with
# `--isolate` (engine in a worker process behind a Unix socket), driven
# alternately by `kiln bench serve` with one streaming client, ROUNDS times.
# Prints client-side decode throughput of both and the ratio per round, and
# the CPU time the serving processes (server, plus the worker when isolated)
# spent per generated token (noisy too: the kernel pool's threads spin
# briefly while waiting, so CPU time follows wall time).
#
#   scripts/bench-isolate.sh [MODEL]      (default: smollm2)
#
# Environment: ROUNDS (5), GEN (256), REQS (6), N (1: concurrent clients), THREADS (2),
# KILN_BIN (a kiln binary to use instead of building one, e.g. on the GPU
# machine), SERVE_ARGS (more `kiln serve` flags for both, e.g. --device cuda).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=${1:-smollm2}
ROUNDS=${ROUNDS:-5}; GEN=${GEN:-256}; REQS=${REQS:-6}; N=${N:-1}; THREADS=${THREADS:-2}
if [ -n "${KILN_BIN:-}" ]; then
  K=$KILN_BIN
else
  cargo build --release -p kiln >&2
  K=target/release/kiln
fi
mkdir -p target
PIDS=""
trap 'for p in $PIDS; do kill $p 2>/dev/null || true; done' EXIT
# CPU ticks (user + system) of a process and its direct children.
ticks() {
  local t=0 p
  for p in $1 $(pgrep -P "$1" || true); do
    t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0) ))
  done
  echo "$t"
}
SERVER_PIDS=()
start() { # port, extra
  local port=$1; shift
  # shellcheck disable=SC2086
  "$K" serve --model "$MODEL" --port "$port" --threads "$THREADS" ${SERVE_ARGS:-} "$@" >"target/bench-isolate-$port.log" 2>&1 &
  PIDS="$PIDS $!"
  SERVER_PIDS+=("$!")
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 0.2; done
  echo "server on $port did not come up" >&2; exit 1
}
start 18601
start 18602 --isolate
NAME=$(curl -sf http://127.0.0.1:18601/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
HZ=$(getconf CLK_TCK)
echo "| round | in process tok/s | isolated tok/s | isolated / in process | in process CPU ms/token | isolated CPU ms/token | CPU ratio | load 1m |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
  row=()
  for i in 0 1; do
    port=$((18601 + i)); pid=${SERVER_PIDS[$i]}
    t0=$(ticks "$pid")
    out=$("$K" bench serve --url "http://127.0.0.1:$port" --model "$NAME" --concurrency "$N" --requests "$REQS" \
      --prompt-len 64 --gen-len "$GEN" --warmup 0 --json 2>/dev/null)
    t1=$(ticks "$pid")
    row+=("$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["output_tok_s"], d["gen_tokens_total"])' <<<"$out") $((t1 - t0))")
  done
  python3 - "$r" "$HZ" "$(cut -d' ' -f1 /proc/loadavg)" ${row[0]} ${row[1]} <<'PY'
import sys
r, hz, load, a, na, ta, b, nb, tb = sys.argv[1:]
a, b, na, nb, ta, tb, hz = float(a), float(b), float(na), float(nb), float(ta), float(tb), float(hz)
ca, cb = ta / hz * 1e3 / na, tb / hz * 1e3 / nb
print(f"| {r} | {a:.1f} | {b:.1f} | {b / a:.4f} | {ca:.3f} | {cb:.3f} | {cb / ca:.4f} | {load} |")
PY
done
