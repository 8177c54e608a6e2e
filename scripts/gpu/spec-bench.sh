#!/usr/bin/env bash
# Runs on the GPU machine: what speculative verification costs there, and
# that speculation on CUDA keeps plain decoding's output (docs/speculative.md,
# BENCHMARKS.md).
#
#   [STEP_MODELS="l8b-f16 ..."] [SAME_MODELS="s059-f16 ..."] scripts/gpu/spec-bench.sh
#
# Expects in $BIN (default .gpu-spec; files may be gzipped): kiln (a CUDA
# build), random-model and ggml-vocab-llama-bpe.gguf; optionally
# cuda-tiny-cases and cuda-check (run first). Results in $OUT.
# - steps: `kiln bench --step-rows 1,2,3,5,9,17` (one sequence, every row's
#   logits as verification takes them) on the 8B shape in F16 and the Q4_K_M
#   mix and on a 0.59B shape, at 512 and 4096 tokens of context, with CUDA
#   graphs on and off.
# - same: greedy answers with `--draft ngram` and with a draft model (the
#   same random weights in Q8_0 drafting for F16, and an unrelated small
#   model) equal plain decoding's, on a repeating prompt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-spec}
OUT=${OUT:-gpu-out}
M=${MODELS:-/tmp/kiln-models}
B=/tmp/ks
mkdir -p "$OUT" "$M"
[ -x "$B/kiln" ] || unpack "$B" "$BIN"/*
gpu_info
STEP_MODELS=${STEP_MODELS:-l8b-f16 l8b-q4km s059-f16}
SAME_MODELS=${SAME_MODELS:-s059-f16 l8b-q4km}
gen_named $STEP_MODELS $SAME_MODELS s059-q8 d-other

if [ -x "$B/cuda-tiny-cases" ]; then
    log "cuda-tiny-cases" | tee -a "$OUT/checks.txt"
    timeout 300 "$B/cuda-tiny-cases" >> "$OUT/checks.txt" 2>&1
fi
if [ -x "$B/cuda-check" ]; then
    # The decode products take 1 to 8 rows (4 features per warp from 3).
    log "cuda-check --rows" | tee -a "$OUT/checks.txt"
    timeout 300 "$B/cuda-check" --rows "$M/s059-f16.gguf" >> "$OUT/checks.txt" 2>&1
fi

log "steps" | tee -a "$OUT/steps.txt"
for m in $STEP_MODELS; do
    for ctx in ${STEP_CTX:-512 4096}; do
        for graphs in ${GRAPHS:-1 0}; do
            echo "## $m context $ctx graphs=$graphs" >> "$OUT/steps.txt"
            KILN_CUDA=graphs=$graphs timeout 300 "$B/kiln" bench "$M/$m.gguf" --device cuda --step-rows 1,2,3,5,9,17 \
                --step-context $ctx --json >> "$OUT/steps.jsonl" 2>> "$OUT/steps.txt"
        done
    done
done

log "same output" | tee -a "$OUT/same.txt"
prompt="one two three four five six seven eight nine ten one two three four five six seven eight nine ten one two three"
run() { timeout 300 "$B/kiln" run "$@" --device cuda -n 120 --temperature 0 --ignore-eos 2> "$OUT/run-stderr.txt"; tail -n 3 "$OUT/run-stderr.txt" >> "$OUT/same.txt"; }
for m in $SAME_MODELS; do
    plain=$(run "$M/$m.gguf" "$prompt")
    for d in ngram "$M/s059-q8.gguf" "$M/d-other.gguf"; do
        [ "${m#s059}" = "$m" ] && [ "$d" = "$M/s059-q8.gguf" ] && continue
        spec=$(run "$M/$m.gguf" "$prompt" --draft "$d" --draft-max 5)
        if [ "$plain" = "$spec" ]; then same=yes; else same=NO; fi
        echo "$m draft $(basename "$d"): same as plain: $same" | tee -a "$OUT/same.txt"
    done
done
log done
