#!/usr/bin/env bash
# Embeddings per second, kiln against llama-server, on the same GGUF file:
# all-MiniLM-L6-v2 (the `all-minilm` catalogue model) written as GGUF in
# llama.cpp's layout by scripts/encoder-to-gguf.py, both servers on the same
# threads, `kiln bench embed` driving each /v1/embeddings in turn with the
# same texts: ROUNDS rounds of batch 1 (one text per request) and batch 64,
# each server alone on the machine while it is measured.
#
#   scripts/bench-embed.sh [ROUNDS] [THREADS]
#
# Env: KILN_BIN (default target/release/kiln), LLAMA_BIN (llama.cpp's bin
# directory; default: the one scripts/build-llama-cpp.sh builds), LLAMA_ARGS
# (extra llama-server arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${2:-2}
BIN=${KILN_BIN:-target/release/kiln}
PEERS=${KILN_HOME:-$HOME/.cache/kiln}/peers
LLAMA_BIN=${LLAMA_BIN:-$(ls -d "$PEERS"/llama.cpp-*/build/bin 2>/dev/null | head -1)}
[ -x "$LLAMA_BIN/llama-server" ] || { echo "error: no llama-server (run scripts/build-llama-cpp.sh or set LLAMA_BIN)" >&2; exit 1; }
GGUF_PY=$(ls -d "$LLAMA_BIN"/../../src/*/llama.cpp/gguf-py 2>/dev/null | head -1)
[ -d "$GGUF_PY" ] || { echo "error: llama.cpp's gguf-py not found next to $LLAMA_BIN" >&2; exit 1; }
python3 -c "import numpy, safetensors" 2>/dev/null || python3 -m pip install -q numpy safetensors
DIR=$("$BIN" pull all-minilm 2>&1 | sed -n "s/.* \(at\|to\) \(\/.*\) (.*/\2/p" | head -1)
[ -d "$DIR" ] || DIR=$("$BIN" list 2>/dev/null | awk '$1=="all-minilm"{print $NF}')
OUT=${TMPDIR:-/tmp}/kiln-bench-embed
mkdir -p "$OUT"
GGUF=$OUT/all-minilm-l6-v2-f16.gguf
python3 scripts/encoder-to-gguf.py "$DIR" "$GGUF" --gguf-py "$GGUF_PY" >/dev/null
PORT=18391
# One server at a time: an idle server's threads may still spin (llama.cpp's
# polling, kiln's pool), which would tax the other on 2 cores.
serve() { # NAME -> starts it on $PORT, waits for /health
  case $1 in
    llama) LD_LIBRARY_PATH="$LLAMA_BIN" "$LLAMA_BIN/llama-server" -m "$GGUF" --embedding --port $PORT -t "$THREADS" \
             -c 8192 -np 16 -b 8192 -ub 8192 ${LLAMA_ARGS:-} >"$OUT/llama-server.log" 2>&1 & ;;
    kiln) "$BIN" serve --model "$GGUF" --port $PORT --threads "$THREADS" >"$OUT/kiln.log" 2>&1 & ;;
  esac
  SPID=$!
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0; sleep 0.2; done
  echo "error: $1 did not start (see $OUT)" >&2; exit 1
}
stop() { kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null || true; }
trap stop EXIT
rate() { # BATCH REQUESTS
  "$BIN" bench embed --url "http://127.0.0.1:$PORT" --model all-minilm-l6-v2-f16 --batch "$1" --requests "$2" --json |
    python3 -c "import json,sys; print(json.load(sys.stdin)['inputs_per_s'])"
}
declare -A R
for r in $(seq 1 "$ROUNDS"); do
  for side in llama kiln; do
    serve $side
    R[$side,1,$r]=$(rate 1 200); R[$side,64,$r]=$(rate 64 12)
    stop
  done
done
for batch in 1 64; do
  ratios=()
  for r in $(seq 1 "$ROUNDS"); do
    l=${R[llama,$batch,$r]}; k=${R[kiln,$batch,$r]}
    ratio=$(python3 -c "print(f'{$k / $l:.2f}')"); ratios+=("$ratio")
    printf 'batch %2d round %d: llama-server %.1f inputs/s, kiln %.1f inputs/s, ratio %s (load %s)\n' "$batch" "$r" "$l" "$k" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)"
  done
  python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[2:]]; print(f'batch {sys.argv[1]}: median ratio {statistics.median(v):.2f} (min {min(v):.2f}, max {max(v):.2f})')" "$batch" "${ratios[@]}"
done
