#!/usr/bin/env bash
# The committed transposed kernel (attn_group8_*, each warp its own
# 16-key tiles) under Nsight Compute, as prof3.sh, and how the 2-layer
# steps at 8192 and 32000 keys move with fewer splits per row
# (`--cuda max-splits=N`; 64 is the default and the most).
. scripts/gpu/lib.sh
. docs/bench-data/cuda/kv-depth/ncu-attn.sh
start_run adepth4 ${BIN:-.gpu-kf}
exec > >(tee "$OUT/prof4.txt") 2>&1
gpu_info
gen_named a8b-2l
step() {  # KV CTX [CUDA-OPTS]
    echo "-- kv $1 ctx $2 ${3:-}"
    timeout 60 $B/${KILN:-kiln} bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $2 --iterations 10 \
        --cache-type-k $1 --cache-type-v $1 ${3:+--cuda $3} 2>&1 | grep -E "^\| 1 |KV cache"
}
for ctx in 8192 32000; do
    for ms in 64 48 32 16; do printf "max-splits=%-3s " $ms; step q8_0 $ctx max-splits=$ms; done
done
ncu_attn q8_0
cp $OUT/*.txt ${RESULTS}/ 2>/dev/null
xz -T4 -c $OUT/sass-q8_0.csv > ${RESULTS}/sass-q8_0.csv.xz
