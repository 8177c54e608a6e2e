#!/usr/bin/env bash
# As prof1.sh, with `kiln bench --step-rows` taking the cache types (it
# ignored them before): step times at 128 and 32000 keys per cache type,
# then the grouped kernel at 32000 keys under Nsight Compute with
# per-instruction stall samples (SASS), summarized by sass-stalls.py.
. scripts/gpu/lib.sh
. docs/bench-data/cuda/kv-depth/ncu-attn.sh
start_run adepth2 ${BIN:-.gpu-kd}
gpu_info
gen_named a8b-2l
step() {  # KV CTX [CUDA-OPTS]
    echo "-- kv $1 ctx $2 ${3:-}"
    timeout 60 $B/kiln bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $2 --iterations 10 \
        --cache-type-k $1 --cache-type-v $1 ${3:+--cuda $3} 2>&1 | grep -E "^\| 1 |KV cache"
}
for kv in f16 q8_0 q4_0; do step $kv 128; step $kv 32000; done
ncu_attn q8_0
ncu_attn f16
cp $OUT/*.txt ${RESULTS}/ 2>/dev/null
xz -T4 -c $OUT/sass-q8_0.csv > ${RESULTS}/sass-q8_0.csv.xz
