#!/usr/bin/env bash
# The grouped decode attention over a quantized KV cache (with the L2 prefetch): depth A/B.
. scripts/gpu/lib.sh
start_run kq2 .gpu-kq
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
for side in "q8_0 auto" "q8_0 head" "q8_0 auto" "q8_0 head" "q4_0 auto" "q4_0 head"; do
  set -- $side
  log "bench kv $1 attention=$2"
  timeout 200 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --cuda attention=$2 --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,1024,4096,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k $1 --cache-type-v $1 --no-bandwidth 2>&1 | grep "^ *\*"
done
