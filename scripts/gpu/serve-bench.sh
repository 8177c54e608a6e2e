#!/usr/bin/env bash
# Runs on the GPU machine: aggregate decode throughput with N concurrent
# streaming clients (128-token prompts, 128 generated tokens, EOS ignored),
# `kiln serve --device cuda` against `llama-server -np N` on the same GGUF,
# both driven by `kiln bench serve` (docs/cuda.md, BENCHMARKS.md §9).
# Usage: scripts/gpu/serve-bench.sh MODEL.gguf TAG "1 16 64"
# Expects BIN (kiln) and LLAMA (llama.cpp's build/bin); results in $OUT.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-/tmp/kiln-bin}
LLAMA=${LLAMA:-/tmp/peer/build/bin}
OUT=${OUT:-gpu-out}
model=$1 tag=$2 streams=${3:-"1 16 64"}
name=$(basename "$model" .gguf)
[ -x "$BIN/kiln" ] || { echo "no kiln in $BIN" >&2; exit 1; }
[ -f "$model" ] || { echo "no model $model" >&2; exit 1; }
load() { # URL N FILE
    local n=$2
    "$BIN/kiln" bench serve --url "$1" --concurrency "$n" --requests $((n < 8 ? 8 : 2 * n)) --prompt-len 128 \
        --gen-len 128 --model "$name" --warmup 2 --json > "$3" 2> "${3%.json}.txt"
    tail -n 4 "${3%.json}.txt"
}
SIDES=${SIDES:-kiln,llama}
for n in $streams; do
    [[ ",$SIDES," == *",kiln,"* ]] || continue
    echo "== kiln serve, $n streams"
    "$BIN/kiln" serve -m "$model" --device cuda --port 8090 --max-running 64 > "$OUT/serve-kiln-$tag-$n.log" 2>&1 &
    pid=$!
    wait_up http://127.0.0.1:8090 $pid && load http://127.0.0.1:8090 "$n" "$OUT/serve-kiln-$tag-$n.json"
    kill $pid; wait $pid 2>/dev/null
done
for n in $streams; do
    [[ ",$SIDES," == *",llama,"* ]] || continue
    if [ -x "$LLAMA/llama-server" ]; then
        echo "== llama-server -np $n"
        "$LLAMA/llama-server" -m "$model" -ngl 99 -fa on -np "$n" -c $((n * 384)) --port 8091 \
            > "$OUT/serve-llama-$tag-$n.log" 2>&1 &
        pid=$!
        wait_up http://127.0.0.1:8091 $pid && load http://127.0.0.1:8091 "$n" "$OUT/serve-llama-$tag-$n.json"
        kill $pid; wait $pid 2>/dev/null
    else
        echo "no llama-server in $LLAMA"
    fi
done
