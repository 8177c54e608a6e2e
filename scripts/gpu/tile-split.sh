#!/usr/bin/env bash
# Runs on the GPU machine: the tensor-core prompt attention's key splits
# (plan::tile_split, `--cuda tile-split=on|off`), checked and measured.
#
#   BIN=.gpu-seg3 scripts/gpu/tile-split.sh
#
# Expects in $BIN (files may be gzipped): kiln (a CUDA build),
# cuda-tiny-cases, random-model and ggml-vocab-llama-bpe.gguf. Results in
# $OUT (default gpu-out).
# - checks: every tiny case (long_prefix_chunks_equal_decodes runs prompt
#   chunks whose few tiles split their keys against decoding), and that
#   case again with the splits off.
# - segments: the RAG workload of `kiln bench segments` (8 documents of
#   ~500 tokens, copied, then the question: one step of a few tiles over
#   4100 keys) with the splits on and off, 8B shape in Q4_K_M and F16.
# - fresh prompts: TTFT of 512- and 2048-token prompts on and off (a fresh
#   chunk fills the GPU: the splits must cost nothing there).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-seg3}
OUT=${OUT:-gpu-out}
M=${MODELS:-/tmp/kiln-models}
B=/tmp/ktile
mkdir -p "$OUT" "$M"
[ -x "$B/kiln" ] || unpack "$B" "$BIN"/*
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
gen_named l8b-q4km l8b-f16 > /dev/null

log "checks" | tee -a "$OUT/checks.txt"
timeout 300 "$B/cuda-tiny-cases" >> "$OUT/checks.txt" 2>&1
echo "exit $?" >> "$OUT/checks.txt"
KILN_CUDA=tile-split=off timeout 120 "$B/cuda-tiny-cases" long_prefix_chunks_equal_decodes >> "$OUT/checks.txt" 2>&1
echo "tile-split=off exit $?" >> "$OUT/checks.txt"

log "segments" | tee -a "$OUT/segments.txt"
for m in l8b-q4km l8b-f16; do
    for ts in on off; do
        echo "## $m tile-split=$ts" >> "$OUT/segments.txt"
        timeout 300 "$B/kiln" bench segments "$M/$m.gguf" --device cuda --cuda tile-split=$ts --requests 6 \
            --recompute 0,16 --context 64 --answer-tokens 2 --ctx-size 8192 --json "$OUT/segments-$m-$ts.json" \
            >> "$OUT/segments.txt" 2>> "$OUT/stderr.txt"
    done
done

log "fresh prompts" | tee -a "$OUT/fresh.txt"
for ts in on off; do
    echo "## tile-split=$ts" >> "$OUT/fresh.txt"
    timeout 300 "$B/kiln" bench "$M/l8b-f16.gguf" --device cuda --cuda tile-split=$ts --prompt-lens 512,2048 \
        --gen-len 2 --iterations 5 --no-bandwidth >> "$OUT/fresh.txt" 2>> "$OUT/stderr.txt"
done
log done
grep -E "FAIL|passed|exit|long_prefix" "$OUT/checks.txt"
grep -E "^##|full prefill|segments," "$OUT/segments.txt"
grep -E "^##|^ +(512|2048) " "$OUT/fresh.txt"
