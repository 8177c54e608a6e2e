#!/usr/bin/env bash
# The grouped decode attention over a quantized KV cache: cuda-check --kv, then 32k-deep decode A/B.
. scripts/gpu/lib.sh
start_run kq .gpu-kq
gen q-hd64 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 --type F16 --embd-type F16 --head-type F16
gen q-hd128 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 1024 --heads 8 --kv-heads 4 --ff 2048 --type F16 --embd-type F16 --head-type F16
for mk in "q-hd64 q8_0/q8_0" "q-hd64 q4_0/q4_0" "q-hd64 f16/q8_0" "q-hd128 q8_0/q8_0" "q-hd128 q4_0/q4_0" "q-hd128 q8_0/f16"; do
  set -- $mk
  log "cuda-check --kv $2 $1"
  timeout 200 $B/cuda-check --kv $2 $M/$1.gguf 2>&1 | grep -E "PASS|FAIL" | grep -E "FAIL|decode|greedy|mixed" | head -8
done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
for side in "q8_0 auto" "q8_0 head" "q8_0 auto" "q8_0 head" "f16 auto"; do
  set -- $side
  log "bench kv $1 attention=$2"
  timeout 200 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --cuda attention=$2 --prompt-lens 128 --gen-len 64 --iterations 2 --ctx-sweep 128,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k $1 --cache-type-v $1 --no-bandwidth 2>&1 | grep -v "^machine\|^model\|^medians\|WARN" | tail -n 8
done
