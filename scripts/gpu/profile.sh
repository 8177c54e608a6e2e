#!/usr/bin/env bash
# Runs on the GPU machine: per-kernel GPU time of kiln's decode steps with
# Nsight Compute (ncu), plus the same decode timed with and without CUDA
# graphs, so that kernel time and launch gaps can be told apart.
# Usage: scripts/gpu/profile.sh MODEL.gguf TAG  (BIN as in run-checks.sh; results in $OUT)
set -uo pipefail
BIN=${BIN:-/tmp/kiln-bin}
OUT=${OUT:-gpu-out}
model=$1 tag=$2
# A prompt of $PROMPT tokens (default 128) and $GEN decode steps (48); skip
# the load, the prefill and the first decode steps, then record about three
# steps' worth of kernels (a longer prompt needs a larger SKIP: e.g.
# PROMPT=2048 GEN=64 SKIP=5000 for the 8B).
SKIP=${SKIP:-2000} COUNT=${COUNT:-900} PROMPT=${PROMPT:-128} GEN=${GEN:-48}
KILN_CUDA=graphs=off timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip "$SKIP" --launch-count "$COUNT" \
    "$BIN/kiln" bench "$model" --device cuda --prompt-lens "$PROMPT" --gen-len "$GEN" --iterations 1 --warmup 0 --no-bandwidth \
    > "$OUT/ncu-$tag.csv" 2> "$OUT/ncu-$tag.err"
python3 scripts/gpu/ncu-summary.py "$OUT/ncu-$tag.csv" | tee "$OUT/ncu-$tag.txt"
