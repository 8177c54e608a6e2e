#!/usr/bin/env bash
# The transposed products (kiln) against the raw-fragment build before
# them (kiln-old), same call: one-row step times of the 2-layer 8B-shaped
# file at 32000 keys (three alternating rounds), then the 8B's decode at
# 128 and 32000 keys.
. scripts/gpu/lib.sh
start_run kdab ${BIN:-.gpu-kab}
gpu_info
gen_named a8b-2l
step() {  # BIN KV CTX
    printf "%-9s %-5s %6s " $1 $2 $3
    timeout 60 $B/$1 bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $3 --iterations 10 \
        --cache-type-k $2 --cache-type-v $2 2>&1 | grep "^| 1 "
}
for r in 1 2 3; do
    for bin in kiln-old kiln; do
        for kv in q8_0 q4_0; do step $bin $kv 32000; done
    done
done
for bin in kiln-old kiln; do step $bin f16 32000; step $bin q8_0 128; done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
for run in "kiln q8_0" "kiln-old q8_0" "kiln q4_0" "kiln f16"; do
    set -- $run
    log "bench $1 kv $2"
    timeout 60 $B/$1 bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 \
        --ctx-sweep 128,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k $2 \
        --cache-type-v $2 --no-bandwidth 2>&1 | grep "^ *\*"
done
