#!/usr/bin/env bash
# (Run with a binary whose `--cuda group-swap` took warp|block|off; the
# committed one takes on|off: confirm.sh.)
# The transposed grouped kernels (kiln --cuda group-swap=warp|block, and
# off: the raw-fragment kernel with the new staging) against the build
# before them (kiln-old), same call: one-row step times of the 2-layer
# 8B-shaped file over depth, then the 8B's decode at 128 to 32000 keys.
. scripts/gpu/lib.sh
start_run kdab2 ${BIN:-.gpu-kab}
exec > >(tee "$OUT/ab2.txt") 2>&1
gpu_info
gen_named a8b-2l
step() {  # NAME BIN SWAP KV CTX
    printf "%-6s %-5s %6s " $1 $4 $5
    timeout 60 $B/$2 bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $5 --iterations 10 \
        --cache-type-k $4 --cache-type-v $4 ${3:+--cuda group-swap=$3} 2>&1 | grep "^| 1 "
}
VARIANTS=("old kiln-old" "off kiln off" "block kiln block" "warp kiln warp")
for ctx in 2048 8192 32000 32000; do
    for v in "${VARIANTS[@]}"; do set -- $v; step $1 $2 "${3:-}" q8_0 $ctx; done
done
for v in "${VARIANTS[@]}"; do set -- $v; step $1 $2 "${3:-}" q4_0 32000; done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
bench() {  # BIN SWAP K V
    log "bench $1 ${2:-} kv $3/$4"
    timeout 80 $B/$1 bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 \
        --ctx-sweep 128,2048,8192,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k $3 \
        --cache-type-v $4 --no-bandwidth ${2:+--cuda group-swap=$2} 2>&1 | grep "^ *\*[0-9]"
}
bench kiln warp q8_0 q8_0
bench kiln block q8_0 q8_0
bench kiln-old "" q8_0 q8_0
bench kiln warp q4_0 q4_0
bench kiln "" f16 f16
mkdir -p "$RESULTS" && cp "$OUT"/*.txt "$RESULTS"/
