#!/usr/bin/env bash
# Speculative decoding on the CPU: kiln plain and `--draft ngram`, llama-server
# plain and `--spec-type ngram-simple` (3-token lookup, 8-token drafts, as
# kiln's defaults), the default model, chat answers to a rewriting and a
# summarization prompt, greedy.
#
#   scripts/bench-spec.sh [ROUNDS] [THREADS]
set -euo pipefail
rounds="${1:-3}"; threads="${2:-2}"
here="$(cd "$(dirname "$0")/.." && pwd)"
kiln="${KILN:-$here/target/release/kiln}"
bin="${LLAMA_BIN:-$(ls -d "$HOME"/.cache/kiln/peers/llama.cpp-*/build/bin | tail -1)}"
model="$("$kiln" pull smollm2 2>&1 | grep -o "/[^ ]*\.gguf" | tail -1)"
data="$here/benches/data"
declare -a names urls
start() { # NAME PORT CMD...
    local name="$1" port="$2"; shift 2
    "$@" > "/tmp/spec-bench-$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 120); do curl -sf "localhost:$port/v1/models" > /dev/null && break; sleep 0.5; done
    names+=("$name"); urls+=("http://localhost:$port")
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
# All four up at once (an idle server costs no CPU); the requests go to one
# server at a time, in turn, round after round.
start kiln 18180 "$kiln" serve -m smollm2 --port 18180 --threads "$threads"
start kiln+spec 18181 "$kiln" serve -m smollm2 --port 18181 --threads "$threads" --draft ngram
start llama.cpp 18182 env LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$model" --port 18182 -t "$threads" -c 4096 -np 1
start llama.cpp+spec 18183 env LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$model" --port 18183 -t "$threads" -c 4096 -np 1 \
    --spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8
args=()
for i in "${!names[@]}"; do args+=("${names[$i]}=${urls[$i]}"); done
python3 "$here/benches/spec_bench.py" --rounds "$rounds" "${args[@]}" "$data/rewrite.txt" "$data/summarize.txt"
