#!/usr/bin/env bash
# (First try, tiles fetched into registers a tile ahead: run1.sh; slower.)
# The grouped decode attention over a quantized KV cache, tiles brought into
# shared memory as stored (cp.async) and dequantized in place: cuda-check --kv (rule and every row grouped), then
# the depth sweep A/B (attention=auto|head|group) on the 8B shape.
. scripts/gpu/lib.sh
start_run kq5 .gpu-kq4
gpu_info
gen q-hd64 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 --type F16 --embd-type F16 --head-type F16
gen q-hd128 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 1024 --heads 8 --kv-heads 4 --ff 2048 --type F16 --embd-type F16 --head-type F16
for force in "" "attention=group"; do
  for mk in "q-hd64 q8_0/q8_0" "q-hd64 q4_0/q4_0" "q-hd64 f16/q8_0" "q-hd128 q8_0/q8_0" "q-hd128 q4_0/q4_0" "q-hd128 q8_0/f16"; do
    set -- $mk
    log "cuda-check --kv $2 $1 KILN_CUDA=$force"
    KILN_CUDA=$force timeout 200 $B/cuda-check --kv $2 $M/$1.gguf 2>&1 | grep -E "PASS|FAIL" | grep -E "FAIL|decode|greedy|mixed" | head -8
  done
done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
for side in "q8_0 auto" "q8_0 head" "q8_0 group" "q8_0 auto" "q8_0 head" "q8_0 group" "f16 auto" "q4_0 group"; do
  set -- $side
  log "bench kv $1 attention=$2"
  timeout 200 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --cuda attention=$2 --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,1024,2048,4096,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k $1 --cache-type-v $1 --no-bandwidth 2>&1 | grep "^ *\*"
done
