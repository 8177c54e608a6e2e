#!/usr/bin/env bash
# Runs on the GPU machine: structured output on CUDA. A constrained answer on
# a random-weight model must be valid JSON (host sampling of masked rows
# beside the device sampler), then decode with a JSON schema against
# unconstrained decoding on a Llama-3-8B-shaped Q4_K model
# (scripts/bench-constrained.sh), then the mask times at a 151,936-token
# vocabulary (grammar-bench). Results go to $OUT.
#
# Expects in $BIN: kiln (built with --features cuda), random-model,
# grammar-bench (gzipped or not), smollm2-meta.gguf, ggml-vocab-llama-bpe.gguf,
# ggml-vocab-qwen2.gguf.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-bin}
OUT=${OUT:-gpu-out}
M=${MODELS:-/tmp/kiln-models}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT" "$M"
B=/tmp/kiln-bin
unpack "$B" "$BIN"/*
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
gen smol-f16 --meta "$B/smollm2-meta.gguf" --type F16 --embd-type F16
echo "== constrained answers on CUDA"
for seed in 1 2 3; do
  "$B/kiln" run "$M/smol-f16.gguf" "json" --device cuda --format json -n 300 --temperature 1 --seed $seed -q > "$OUT/json-$seed.txt" 2>&1
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])); assert isinstance(v, dict); print('valid object', len(json.dumps(v)), 'bytes')" "$OUT/json-$seed.txt" || { echo "INVALID:"; cat "$OUT/json-$seed.txt"; }
done
echo "== 8B Q4_K: constrained / unconstrained decode"
gen l8b-q4k --meta "$B/ggml-vocab-llama-bpe.gguf" $SHAPE_8B \
  --type Q4_K --embd-type Q6_K --more-bits Q6_K --head-type Q6_K
KILN_BIN="$B/kiln" bash scripts/bench-constrained.sh "$ROUNDS" "$M/l8b-q4k.gguf" --device cuda 2>&1 | tee "$OUT/bench-constrained-l8b.txt"
echo "== mask times (qwen2 vocabulary)"
"$B/grammar-bench" "$B/ggml-vocab-qwen2.gguf" 2>&1 | tee "$OUT/grammar-bench.txt"
