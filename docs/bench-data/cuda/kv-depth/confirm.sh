#!/usr/bin/env bash
# The committed kernels (group-swap on|off, one binary): cuda-check --kv on
# the transposed path, the 2-layer file's steps at 32000 keys, and the 8B's
# decode at 128 and 32000 keys with a q8_0 cache.
. scripts/gpu/lib.sh
start_run kdconf ${BIN:-.gpu-kf}
exec > >(tee "$OUT/confirm.txt") 2>&1
gpu_info
gen_named q-hd128
gen_named q-hd64
for mk in "q-hd128 q8_0/q8_0" "q-hd64 q8_0/q8_0" "q-hd128 q4_0/q8_0"; do
    set -- $mk
    log "cuda-check --kv $2 $1"
    timeout 120 "$B/cuda-check" --kv $2 "$M/$1.gguf" 2>&1 | grep -E "PASS|FAIL|SKIP|error" | cut -c1-110
done
gen_named a8b-2l
for sw in on off on off; do
    printf "group-swap=%-4s " $sw
    timeout 60 $B/kiln bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context 32000 --iterations 10 \
        --cache-type-k q8_0 --cache-type-v q8_0 --cuda group-swap=$sw 2>&1 | grep "^| 1 "
done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
log "bench q8_0"
timeout 80 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 \
    --ctx-sweep 128,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k q8_0 \
    --cache-type-v q8_0 --no-bandwidth 2>&1 | grep "^ *\*[0-9]"
mkdir -p "$RESULTS" && cp "$OUT"/*.txt "$RESULTS"/
