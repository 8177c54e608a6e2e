#!/usr/bin/env bash
# A/B of kiln builds on the GPU machine, alternating on the same models
# (docs/cuda.md): `kiln bench` decode after the prompts of $PROMPTS (default
# 16,512) and at depth 2048, ROUNDS rounds
# of each in turn, so that drift hits all alike.
#
#   scripts/gpu/ab.sh A,B[,C...] [SHAPE...]
#
# A, B, ...: executables in $BIN (e.g. kiln-old,kiln; a wrapper script that
# sets an environment variable and runs /tmp/kiln-ab/kiln works too).
# Build each variant with `cargo build --release --features cuda -p kiln`
# alone: with `--example cuda-check` on the same command line cargo builds
# only the example and leaves an old `kiln` in place.
#
# SHAPEs are make-model.py shapes (default: qwen2.5-0.5b-llama llama3-8b);
# gguf-py comes from $BIN/gguf-py.tar.gz. Output: $OUT/ab-*.txt, and a
# summary of the decode tok/s medians per binary and model.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-bin}; OUT=${OUT:-gpu-out}; M=${MODELS:-/tmp/kiln-models}; ROUNDS=${ROUNDS:-2}; PROMPTS=${PROMPTS:-16,512}
IFS=, read -r -a BINS <<< "$1"; shift
SHAPES=${*:-qwen2.5-0.5b-llama llama3-8b}
mkdir -p "$OUT" "$M"
unpack /tmp/kiln-ab "$BIN"/* && tar -xzf /tmp/kiln-ab/gguf-py.tar.gz -C /tmp/kiln-ab
for s in $SHAPES; do
    [ -f "$M/$s/model-f16.gguf" ] || python3 scripts/gpu/make-model.py "$M/$s" --shape "$s" \
        --vocab "$BIN/ggml-vocab-llama-bpe.gguf" --gguf-py /tmp/kiln-ab/gguf-py 2>&1 | grep -v -i warn | tail -n 1
done
for r in $(seq "$ROUNDS"); do
    for k in "${BINS[@]}"; do
        for s in $SHAPES; do
            /tmp/kiln-ab/$k bench "$M/$s/model-f16.gguf" --device cuda --prompt-lens "$PROMPTS" --gen-len 128 --iterations 3 \
                --ctx-sweep 2048 --sweep-gen 64 > "$OUT/ab-$k-$s-$r.txt" 2>&1
            echo "$k $s round $r: $(grep -E '^ +\*?[0-9]+ ' "$OUT/ab-$k-$s-$r.txt" | awk -F'|' '{split($1,a," "); split($4,d," "); print a[1] "=" d[1]}' | tr '\n' ' ')"
        done
    done
done
