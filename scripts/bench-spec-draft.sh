#!/usr/bin/env bash
# Speculative decoding with a draft model on the CPU: the default model
# (SmolLM2-135M-Instruct Q4_1) drafts for an F16 copy of itself, made with
# llama.cpp's llama-quantize (--allow-requantize). kiln plain and
# `--draft smollm2`, llama-server plain and `-md` with the same draft file
# and draft length (8); chat answers to a rewriting, a summarization and an
# ordinary question, greedy. The speculative servers' answers must equal
# their plain twins'.
#
#   scripts/bench-spec-draft.sh [ROUNDS] [THREADS] [TARGET_TYPE]   # TARGET_TYPE: F16 (default) or Q8_0
set -euo pipefail
rounds="${1:-3}"; threads="${2:-2}"; ty="${3:-F16}"
here="$(cd "$(dirname "$0")/.." && pwd)"
kiln="${KILN:-$here/target/release/kiln}"
bin="${LLAMA_BIN:-$(ls -d "$HOME"/.cache/kiln/peers/llama.cpp-*/build/bin | tail -1)}"
draft="$("$kiln" pull smollm2 2>&1 | grep -o "/[^ ]*\.gguf" | tail -1)"
work="${TMPDIR:-/tmp}/kiln-spec-draft"; mkdir -p "$work"
target="$work/smollm2-$ty.gguf"
[ -s "$target" ] || LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" --allow-requantize "$draft" "$target" "$ty" > "$work/quantize.log" 2>&1
data="$here/benches/data"
declare -a names urls
start() { # NAME PORT CMD...
    local name="$1" port="$2"; shift 2
    "$@" > "$work/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 120); do curl -sf "localhost:$port/v1/models" > /dev/null && break; sleep 0.5; done
    names+=("$name"); urls+=("http://localhost:$port")
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
start kiln 18190 "$kiln" serve -m "$target" --port 18190 --threads "$threads"
start kiln+spec 18191 "$kiln" serve -m "$target" --port 18191 --threads "$threads" --draft smollm2 --draft-max 8
start llama.cpp 18192 env LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$target" --port 18192 -t "$threads" -c 4096 -np 1
start llama.cpp+spec 18193 env LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$target" --port 18193 -t "$threads" -c 4096 -np 1 \
    --spec-type draft-simple -md "$draft" --spec-draft-n-max 8 -td "$threads"
args=()
for i in "${!names[@]}"; do args+=("${names[$i]}=${urls[$i]}"); done
python3 "$here/benches/spec_bench.py" --model "smollm2-$ty" --rounds "$rounds" "${args[@]}" \
    "$data/rewrite.txt" "$data/summarize.txt" "$data/chat.txt"
