#!/usr/bin/env bash
# The transposed products (kiln) under Nsight Compute, as prof2.sh: step
# times of both builds over depth (fixed and per-key cost), then the
# grouped q8_0 kernel at 32000 keys with per-instruction stall samples.
. scripts/gpu/lib.sh
. docs/bench-data/cuda/kv-depth/ncu-attn.sh
start_run adepth3 ${BIN:-.gpu-kab}
gpu_info
gen_named a8b-2l
step() {  # KV CTX [CUDA-OPTS]
    echo "-- kv $1 ctx $2 ${3:-}"
    timeout 60 $B/${KILN:-kiln} bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $2 --iterations 10 \
        --cache-type-k $1 --cache-type-v $1 ${3:+--cuda $3} 2>&1 | grep -E "^\| 1 |KV cache"
}
for ctx in 128 2048 8192 16000 32000; do
    for bin in kiln-old kiln; do printf "%-8s " $bin; KILN=$bin step q8_0 $ctx; done
done
ncu_attn q8_0
cp $OUT/*.txt ${RESULTS}/ 2>/dev/null
xz -T4 -c $OUT/sass-q8_0.csv > ${RESULTS}/sass-q8_0.csv.xz
