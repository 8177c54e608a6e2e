#!/usr/bin/env bash
# Runs on the GPU machine: /v1/embeddings throughput, `kiln serve --device
# cuda` against `llama-server --embedding -ngl 99` on the same GGUF, both
# driven by `kiln bench embed` (batch 1 and 64 texts per request, 1 and 8
# clients). Usage: scripts/gpu/embed-bench.sh MODEL.gguf NAME [SIDES]
# Expects BIN (kiln's directory) and LLAMA (llama.cpp's build/bin).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-/tmp/kiln-bin}
LLAMA=${LLAMA:-/tmp/peer/build/bin}
model=$1 name=$2 sides=${3:-kiln,llama}
drive() { # URL LABEL
    for b in 1 64; do for c in 1 8; do
        r=$([ $b = 1 ] && echo $((200 * c)) || echo $((8 * c)))
        printf '%-12s batch %2d clients %d: ' "$2" $b $c
        "$BIN/kiln" bench embed --url "$1" --model "$name" --batch $b --concurrency $c --requests $r --words ${WORDS:-16}
    done; done
}
if [[ ",$sides," == *",kiln,"* ]]; then
    "$BIN/kiln" serve -m "$model" --device cuda --port 8190 > "/tmp/embed-kiln-$name.log" 2>&1 &
    pid=$!
    wait_up http://127.0.0.1:8190 $pid && drive http://127.0.0.1:8190 kiln || tail -5 "/tmp/embed-kiln-$name.log"
    kill $pid; wait $pid 2>/dev/null
fi
if [[ ",$sides," == *",llama,"* ]]; then
    "$LLAMA/llama-server" -m "$model" --embedding -ngl 99 -np 8 -c 65536 -b 8192 -ub 8192 --port 8191 \
        ${LLAMA_ARGS:-} > "/tmp/embed-llama-$name.log" 2>&1 &
    pid=$!
    wait_up http://127.0.0.1:8191 $pid && drive http://127.0.0.1:8191 llama-server || tail -5 "/tmp/embed-llama-$name.log"
    kill $pid; wait $pid 2>/dev/null
fi
